/*  korch_workdir: the walk, its differences, its limits, and that nothing a
 *  hostile kernel planted (symlinks to /etc, to a file, loops) is followed;
 *  korch_mkdirs. */
#define KORCH_TEST_UNIT /* no kernel, docker or browser: make check runs these */
#include "test.h"
#include "korch/media.h"
#include "korch/workdir.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void s_put(const char *dir, const char *rel, const char *text)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    FILE *f = fopen(path, "w");
    if (CHECK(f)) {
        fputs(text, f);
        fclose(f);
    }
}

/* "change path" for each entry, joined with ", " */
static void s_changes(json_t *scan, char *buf, size_t len)
{
    size_t n = 0, i;
    json_t *c;
    buf[0] = 0;
    json_array_foreach(json_object_get(scan, "changes"), i, c) n += (size_t)snprintf(
        buf + n, len - n, "%s%s %s %lld", i ? ", " : "", json_string_value(json_object_get(c, "change")),
        json_string_value(json_object_get(c, "path")), (long long)json_integer_value(json_object_get(c, "size")));
}

TEST(workdir_created_modified_deleted_and_symlinks_never_followed)
{
    char *d = korch_test_mkdir("/tmp/korch-wd-XXXXXX"), buf[2000], sub[600];
    if (!CHECK(d))
        return;
    korch_workdir_t *w = korch_workdir_new(d, NULL);
    json_t *scan = korch_workdir_scan(w, NULL);
    CHECK_EQ(json_array_size(json_object_get(scan, "changes")), 0);
    json_decref(scan);
    s_put(d, "out.csv", "a,b\n");
    snprintf(sub, sizeof sub, "%s/reports", d);
    mkdir(sub, 0755);
    s_put(d, "reports/r.txt", "12345");
    s_put(d, ".hidden", "x");
    snprintf(sub, sizeof sub, "%s/etc", d);
    CHECK_EQ(symlink("/etc", sub), 0);                   /* a directory outside */
    snprintf(sub, sizeof sub, "%s/pw.png", d);
    CHECK_EQ(symlink("/etc/passwd", sub), 0);            /* a file outside */
    snprintf(sub, sizeof sub, "%s/reports/loop", d);
    CHECK_EQ(symlink("..", sub), 0);                     /* a loop */
    snprintf(sub, sizeof sub, "%s/fifo", d);
    CHECK_EQ(mkfifo(sub, 0644), 0);
    scan = korch_workdir_scan(w, NULL);
    s_changes(scan, buf, sizeof buf);
    CHECK_STREQ(buf, "created out.csv 4, created reports/r.txt 5");
    CHECK_EQ(json_integer_value(json_object_get(scan, "files")), 2);
    CHECK_EQ(json_integer_value(json_object_get(scan, "bytes")), 9);
    json_decref(scan);
    s_put(d, "out.csv", "a,b\n1,2\n");
    snprintf(sub, sizeof sub, "%s/reports/r.txt", d);
    unlink(sub);
    scan = korch_workdir_scan(w, NULL);
    s_changes(scan, buf, sizeof buf);
    CHECK_STREQ(buf, "modified out.csv 8, deleted reports/r.txt 5");
    json_decref(scan);
    json_t *list = korch_workdir_list(w);
    CHECK_EQ(json_array_size(list), 1);
    json_decref(list);
    /* reading: plain files only, no symlink on the way */
    size_t len = 0;
    korch_err_t err = {0};
    char *data = korch_workdir_read(d, "out.csv", 100, &len, &err);
    CHECK_STREQ(data, "a,b\n1,2\n");
    free(data);
    CHECK(korch_workdir_read(d, "pw.png", 1 << 20, &len, &err) == NULL);
    CHECK_EQ(err.rc, KORCH_E_INVALID);
    korch_err_clear(&err);
    CHECK(korch_workdir_read(d, "etc/passwd", 1 << 20, &len, &err) == NULL);
    CHECK_EQ(err.rc, KORCH_E_INVALID);
    korch_err_clear(&err);
    CHECK(korch_workdir_read(d, "fifo", 1 << 20, &len, &err) == NULL); /* not blocked on a fifo */
    korch_err_clear(&err);
    CHECK(korch_workdir_read(d, "../x", 1 << 20, &len, &err) == NULL);
    korch_err_clear(&err);
    CHECK(korch_workdir_read(d, "out.csv", 3, &len, &err) == NULL);
    CHECK_EQ(err.rc, KORCH_E_TOOBIG);
    korch_err_clear(&err);
    CHECK(korch_workdir_read(d, "missing", 3, &len, &err) == NULL);
    CHECK_EQ(err.rc, KORCH_E_NOTFOUND);
    /* writing: a symlink planted at the name is replaced, not written through */
    char victim[600];
    snprintf(victim, sizeof victim, "%s/victim", d);
    s_put(d, "victim", "untouched");
    snprintf(sub, sizeof sub, "%s/upload.csv", d);
    CHECK_EQ(symlink(victim, sub), 0);
    CHECK_EQ(korch_workdir_write(d, "upload.csv", "new", 3, -1, -1, NULL), KORCH_OK);
    data = korch_read_file(victim, 100, &len, NULL);
    CHECK_STREQ(data, "untouched");
    free(data);
    struct stat st;
    CHECK(lstat(sub, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 3);
    CHECK_EQ(korch_workdir_write(d, "a/b", "x", 1, -1, -1, NULL), KORCH_E_INVALID);
    CHECK_STREQ(korch_mime_for("X.PNG"), "image/png");
    CHECK_STREQ(korch_mime_for("noext"), "application/octet-stream");
    korch_workdir_destroy(&w);
    CHECK(w == NULL);
    korch_test_rmdir(d);
}

TEST(workdir_limits_cut_the_walk_and_say_so)
{
    char *d = korch_test_mkdir("/tmp/korch-wd-XXXXXX"), path[600];
    if (!CHECK(d))
        return;
    for (int i = 0; i < 10; i++) {
        snprintf(path, sizeof path, "f%d", i);
        s_put(d, path, "x");
    }
    snprintf(path, sizeof path, "%s/a", d);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/a/b", d);
    mkdir(path, 0755);
    s_put(d, "a/b/deep.txt", "y");
    korch_workdir_limits_t lim = {.max_entries = 4, .max_depth = 1};
    korch_workdir_t *w = korch_workdir_new(d, &lim);
    json_t *scan = korch_workdir_scan(w, NULL);
    CHECK(json_is_true(json_object_get(scan, "truncated")));
    CHECK_EQ(json_integer_value(json_object_get(scan, "files")), 4);
    json_decref(scan);
    korch_workdir_destroy(&w);
    /* depth alone: a/b is below max_depth 1 */
    korch_workdir_limits_t lim2 = {.max_depth = 1};
    w = korch_workdir_new(d, &lim2);
    scan = korch_workdir_scan(w, NULL);
    CHECK(json_is_true(json_object_get(scan, "truncated")));
    CHECK_EQ(json_integer_value(json_object_get(scan, "files")), 10);
    json_decref(scan);
    korch_workdir_destroy(&w);
    korch_test_rmdir(d);
}

TEST(mkdirs_makes_parents_and_names_what_is_in_the_way)
{
    char *d = korch_test_mkdir("/tmp/korch-wd-XXXXXX"), path[600];
    if (!CHECK(d))
        return;
    snprintf(path, sizeof path, "%s/a/b//c/", d);
    CHECK_EQ(korch_mkdirs(path, 0755, NULL), KORCH_OK);
    CHECK_EQ(korch_mkdirs(path, 0755, NULL), KORCH_OK); /* twice */
    struct stat st;
    snprintf(path, sizeof path, "%s/a/b/c", d);
    CHECK(stat(path, &st) == 0 && S_ISDIR(st.st_mode));
    s_put(d, "file", "x");
    snprintf(path, sizeof path, "%s/file/sub", d);
    korch_err_t err = {0};
    CHECK_EQ(korch_mkdirs(path, 0755, &err), KORCH_E_IO);
    CHECK_CONTAINS(err.msg, "file': it exists and is not a directory");
    korch_test_rmdir(d);
}

/* A listing from inside a container: what the kernel claims is only data. */
TEST(workdir_update_keeps_only_plain_entries)
{
    korch_workdir_t *w = korch_workdir_new(NULL, NULL);
    json_t *entries = json_loads("[[\"ok.csv\", 3, 1, 2], [\"../etc/passwd\", 1, 1], [\"/abs\", 1, 1], "
                                 "[\".hidden\", 1, 1], [\"a//b\", 1, 1], [\"neg\", -1, 1], [\"d/\", 1, 1], "
                                 "[\"sub/r.txt\", 9, 5], [7, 1, 1], \"junk\"]",
                                 0, NULL);
    json_t *scan = korch_workdir_update(w, entries, false);
    char buf[400];
    s_changes(scan, buf, sizeof buf);
    CHECK_STREQ(buf, "created ok.csv 3, created sub/r.txt 9");
    json_decref(scan);
    json_decref(entries);
    entries = json_loads("[[\"ok.csv\", 4, 2]]", 0, NULL);
    scan = korch_workdir_update(w, entries, false);
    s_changes(scan, buf, sizeof buf);
    CHECK_STREQ(buf, "modified ok.csv 4, deleted sub/r.txt 9");
    json_decref(scan);
    json_decref(entries);
    CHECK_STREQ(korch_workdir_root(w), "");
    CHECK(korch_workdir_scan(w, NULL) == NULL); /* nothing to walk on this host */
    korch_workdir_destroy(&w);
}
