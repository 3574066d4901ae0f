/*  korch_fs_rm_tree (src/util/fsrm.c) on trees a kernel could make: 300 and
 *  5000 levels deep, wide levels below the fd limit of the walk, links to
 *  the outside at depth, all gone with the outside untouched and no fd
 *  left open. (The same trees made by a real sandbox kernel are in
 *  test_host.c.)
 */
#define KORCH_TEST_UNIT /* no kernel, docker or browser: make check runs these */
#include "test.h"

#include "korch/fsutil.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

static int s_open_fds(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    while (d && readdir(d))
        n++;
    if (d)
        closedir(d);
    return n;
}

/* depth levels of "d" below top, a file in each, a link to outside at
   link_at and, at wide_at, `wide` non-empty siblings. */
static bool s_deep(const char *top, int depth, int link_at, const char *outside, int wide_at, int wide)
{
    int fd = open(top, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    bool ok = fd >= 0;
    for (int i = 0; ok && i < depth; i++) {
        int f = openat(fd, "f", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        ok = f >= 0 && write(f, "x", 1) == 1;
        if (f >= 0)
            close(f);
        if (i == link_at)
            ok = ok && symlinkat(outside, fd, "out") == 0;
        for (int w = 0; ok && i == wide_at && w < wide; w++) {
            char name[32];
            snprintf(name, sizeof name, "w%d", w);
            ok = mkdirat(fd, name, 0755) == 0;
            int s = ok ? openat(fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
            ok = s >= 0 && mkdirat(s, "sub", 0755) == 0 && symlinkat(outside, s, "out") == 0;
            if (s >= 0)
                close(s);
        }
        ok = ok && mkdirat(fd, "d", 0755) == 0;
        int next = ok ? openat(fd, "d", O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
        close(fd);
        fd = next;
        ok = ok && fd >= 0;
    }
    if (fd >= 0)
        close(fd);
    return ok;
}

static void s_case(int depth)
{
    char dir[] = "/tmp/korch-rmdeep-XXXXXX", keep[] = "/tmp/korch-rmkeep-XXXXXX", precious[64];
    if (!CHECK(mkdtemp(dir)) || !CHECK(mkdtemp(keep)))
        return;
    snprintf(precious, sizeof precious, "%s/precious", keep);
    CHECK_EQ(korch_write_file(precious, "x", 1, NULL), KORCH_OK);
    if (!CHECK(s_deep(dir, depth, depth - 7, keep, 40, 50)))
        return;
    int before = s_open_fds();
    korch_fs_rm_tree(dir);
    CHECK(access(dir, F_OK) != 0);
    CHECK(access(precious, F_OK) == 0);
    CHECK_EQ(s_open_fds(), before);
    korch_fs_rm_tree(keep);
    CHECK(access(keep, F_OK) != 0);
}

TEST_T(fsrm_300_levels_gone_links_not_followed, 20) { s_case(300); }

TEST_T(fsrm_5000_levels_gone_links_not_followed, 60) { s_case(5000); }

/* ------------------------------------------- chown_tree and copy_tree */

/* Every level of s_deep's chain below top (fd) passes check; false at the
   first that does not (or is missing). */
static bool s_each_level(int top, int depth, bool (*check)(int dirfd, const struct stat *dir, const struct stat *f))
{
    int fd = fcntl(top, F_DUPFD_CLOEXEC, 0);
    bool ok = fd >= 0;
    for (int i = 0; ok && i < depth; i++) {
        struct stat d, f;
        ok = fstat(fd, &d) == 0 && fstatat(fd, "f", &f, AT_SYMLINK_NOFOLLOW) == 0 && check(fd, &d, &f);
        if (!ok)
            fprintf(stderr, "  level %d fails\n", i);
        int next = ok ? openat(fd, "d", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
        close(fd);
        fd = next;
        ok = ok && fd >= 0;
    }
    if (fd >= 0)
        close(fd);
    return ok;
}

static bool s_owned_4242(int dirfd, const struct stat *d, const struct stat *f)
{
    (void)dirfd;
    return d->st_uid == 4242 && d->st_gid == 4343 && f->st_uid == 4242 && f->st_gid == 4343;
}

static bool s_copied(int dirfd, const struct stat *d, const struct stat *f)
{
    (void)d;
    char c = 0;
    int fd = openat(dirfd, "f", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    bool ok = fd >= 0 && read(fd, &c, 1) == 1 && c == 'x' && S_ISREG(f->st_mode);
    if (fd >= 0)
        close(fd);
    struct stat l;
    return ok && fstatat(dirfd, "out", &l, AT_SYMLINK_NOFOLLOW) != 0; /* no link came along */
}

typedef struct {
    int files, links, dirs_skipped;
} s_notes_t;

static void s_on_file(const char *rel, const struct stat *st, const char *why, void *arg)
{
    s_notes_t *n = arg;
    (void)rel;
    if (!why)
        n->files++;
    else if (S_ISLNK(st->st_mode))
        n->links++;
    else if (S_ISDIR(st->st_mode))
        n->dirs_skipped++;
}

/* A tree as deep as a kernel can make (5000 levels, wide at 40, links out
   at several depths): chown_tree gives every level to the user, leaves the
   outside alone; copy_tree brings every level's file back, no link; both
   with no fd left open. (Before: both stopped at 64 levels, so a kernel's
   deep tree stayed the kernel uid's on the user's disk, or was not copied.) */
TEST_T(fswalk_chown_and_copy_any_depth_links_not_followed, 60)
{
    enum { DEPTH = 5000 };
    /* on a tmpfs: copy_tree fsyncs every file it writes (5000 of them) */
    char dir[] = "/dev/shm/korch-walk-XXXXXX", to[] = "/dev/shm/korch-walkto-XXXXXX";
    char keep[] = "/dev/shm/korch-walkkeep-XXXXXX";
    char precious[64];
    if (!CHECK(mkdtemp(dir)) || !CHECK(mkdtemp(to)) || !CHECK(mkdtemp(keep)))
        return;
    snprintf(precious, sizeof precious, "%s/precious", keep);
    CHECK_EQ(korch_write_file(precious, "x", 1, NULL), KORCH_OK);
    if (!CHECK(s_deep(dir, DEPTH, DEPTH - 7, keep, 40, 50)))
        goto out;
    int before = s_open_fds();
    struct timespec t0, t1, t2;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK_EQ(korch_fs_chown_tree(dir, 4242, 4343, NULL), KORCH_OK);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    CHECK_EQ(s_open_fds(), before);
    int top = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), dst = open(to, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    CHECK(s_each_level(top, DEPTH, s_owned_4242));
    struct stat st;
    CHECK(stat(precious, &st) == 0 && st.st_uid == 0 && stat(keep, &st) == 0 && st.st_uid == 0);
    char wide[64];
    snprintf(wide, sizeof wide, "w49/sub");
    int lvl = fcntl(top, F_DUPFD_CLOEXEC, 0);
    for (int i = 0; lvl >= 0 && i < 40; i++) {
        int n = openat(lvl, "d", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        close(lvl);
        lvl = n;
    }
    CHECK(lvl >= 0 && fstatat(lvl, wide, &st, 0) == 0 && st.st_uid == 4242);
    if (lvl >= 0)
        close(lvl);

    s_notes_t notes = {0};
    korch_fs_copy_t c = {.on_file = s_on_file, .arg = &notes};
    uint64_t copied = 0;
    before = s_open_fds();
    CHECK_EQ(korch_fs_copy_tree(top, dst, &c, NULL, &copied, NULL), KORCH_OK);
    clock_gettime(CLOCK_MONOTONIC, &t2);
    CHECK_EQ(s_open_fds(), before);
    CHECK_EQ(notes.files, DEPTH);
    CHECK_EQ(notes.links, 1 + 50);
    CHECK_EQ(notes.dirs_skipped, 0);
    CHECK_EQ((long long)copied, DEPTH);
    CHECK(s_each_level(dst, DEPTH, s_copied));
    fprintf(stderr, "  %d levels: chown_tree %.2f s, copy_tree %.2f s\n", DEPTH,
            (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9,
            (double)(t2.tv_sec - t1.tv_sec) + (t2.tv_nsec - t1.tv_nsec) / 1e9);
    close(top);
    close(dst);
out:
    korch_fs_rm_tree(dir);
    korch_fs_rm_tree(to);
    korch_fs_rm_tree(keep);
}
