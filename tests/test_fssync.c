/*  The copy-back's parts without docker (korch/fssync.h, korch_fs_copy_tree):
 *  a file that cannot be copied is skipped with a note and takes no other
 *  with it; the prune deletes only the host files the manifest knows. */
#define KORCH_TEST_UNIT
#include "test.h"
#include "korch/fsutil.h"
#include "korch/fssync.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    char seen[2048];
    int copied, skipped;
} s_notes_t;

static void s_on_file(const char *rel, const struct stat *st, const char *why, void *arg)
{
    s_notes_t *n = arg;
    size_t l = strlen(n->seen);
    snprintf(n->seen + l, sizeof n->seen - l, "%s=%s;", rel, why ? why : "ok");
    *(why ? &n->skipped : &n->copied) += 1;
}

static void s_put(const char *dir, const char *name, const char *text)
{
    char p[600];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    CHECK_EQ(korch_write_file(p, text, strlen(text), NULL), KORCH_OK);
}

static bool s_has(const char *dir, const char *name)
{
    char p[600];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return lstat(p, &st) == 0;
}

TEST(fssync_copy_skips_and_prune_deletes_only_known_files)
{
    char root[] = "/tmp/korch-fssync.XXXXXX", from[300], to[300], p[600];
    if (!CHECK(mkdtemp(root)))
        return;
    snprintf(from, sizeof from, "%s/from", root);
    snprintf(to, sizeof to, "%s/to", root);
    mkdir(from, 0755);
    mkdir(to, 0755);
    /* what a kernel leaves: a result in a subdir, a sparse giant, a link, a FIFO */
    snprintf(p, sizeof p, "%s/keep", from);
    mkdir(p, 0755);
    s_put(from, "keep/result.txt", "kept");
    snprintf(p, sizeof p, "%s/huge.sparse", from);
    int fd = open(p, O_WRONLY | O_CREAT, 0644);
    CHECK(fd >= 0 && ftruncate(fd, (off_t)1 << 36) == 0);
    close(fd);
    snprintf(p, sizeof p, "%s/link", from);
    CHECK_EQ(symlink("/etc/passwd", p), 0);
    snprintf(p, sizeof p, "%s/pipe", from);
    CHECK_EQ(mkfifo(p, 0644), 0);
    s_put(from, "small.txt", "s");
    int fi = korch_fs_open_dir(from, NULL), ti = korch_fs_open_dir(to, NULL);
    s_notes_t n = {0};
    korch_fs_copy_t c = {.max_bytes = 1 << 20, .on_file = s_on_file, .arg = &n};
    uint64_t copied = 0;
    korch_err_t err = {0};
    CHECK_EQ(korch_fs_copy_tree(fi, ti, &c, NULL, &copied, &err), KORCH_OK);
    CHECK_EQ(copied, 5);
    CHECK_EQ(n.copied, 2);
    CHECK_EQ(n.skipped, 3);
    CHECK_CONTAINS(n.seen, "keep/result.txt=ok;");
    CHECK_CONTAINS(n.seen, "huge.sparse=sparse, larger than what is left to copy;");
    CHECK_CONTAINS(n.seen, "link=a symbolic link;");
    CHECK_CONTAINS(n.seen, "pipe=a special file");
    CHECK(s_has(to, "keep/result.txt") && s_has(to, "small.txt"));
    CHECK(!s_has(to, "huge.sparse") && !s_has(to, "link") && !s_has(to, "pipe"));
    /* the prune: known.txt and d/known2.txt were korch's (in the manifest),
       user.txt was not; from has none of them any more */
    s_put(to, "known.txt", "k");
    snprintf(p, sizeof p, "%s/d", to);
    mkdir(p, 0755);
    s_put(to, "d/known2.txt", "k2");
    s_put(to, "user.txt", "u");
    korch_fs_manifest_t *m = korch_fs_manifest_new();
    struct stat st;
    const char *known[] = {"known.txt", "d/known2.txt", "small.txt"};
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/%s", to, known[i]);
        CHECK_EQ(stat(p, &st), 0);
        CHECK_EQ(korch_fs_manifest_add(m, &st), KORCH_OK);
    }
    CHECK_EQ(korch_fs_manifest_size(m), 3);
    size_t removed = 0;
    CHECK_EQ(korch_fs_prune_tree(fi, ti, m, NULL, NULL, &removed, &err), KORCH_OK);
    CHECK(!s_has(to, "known.txt"));
    CHECK(!s_has(to, "d/known2.txt"));
    CHECK(!s_has(to, "d")); /* emptied, and gone on the other side */
    CHECK(s_has(to, "user.txt")); /* never korch's: kept */
    CHECK(s_has(to, "small.txt"));  /* still there on the other side */
    CHECK(s_has(to, "keep/result.txt"));
    CHECK_EQ(removed, 3); /* two files and the directory */
    korch_fs_manifest_destroy(&m);
    CHECK(m == NULL);
    close(fi);
    close(ti);
    korch_fs_rm_tree(root);
}
