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
