/*  The small utilities of src/util: base64, relative-path checks, the
 *  bounded buffer, checked path joins, the JSON string scanner, uuids and
 *  the atomic write (against a kernel that plants symlinks). */
#define KORCH_TEST_UNIT /* no kernel, docker or browser: make check runs these */
#include "test.h"

#include "korch/buf.h"
#include "korch/fsutil.h"
#include "korch/jsonstr.h"
#include "korch/log.h"
#include "korch/media.h"
#include "korch/path.h"
#include "korch/uuid.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

TEST_T(util_base64, 10)
{
    /* RFC 4648 section 10 test vectors */
    static const char *const plain[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
    static const char *const enc[] = {"", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};
    for (int i = 0; i < 7; i++) {
        char *e = korch_b64_encode((const unsigned char *)plain[i], strlen(plain[i]));
        CHECK_STREQ(e, enc[i]);
        size_t len = 99;
        unsigned char *d = korch_b64_decode(enc[i], strlen(enc[i]), &len);
        if (CHECK(d)) {
            CHECK_EQ(len, strlen(plain[i]));
            CHECK(memcmp(d, plain[i], len) == 0);
        }
        free(e);
        free(d);
    }
    /* Jupyter's image strings carry newlines: whitespace is ignored */
    size_t len = 0;
    unsigned char *d = korch_b64_decode("Zm9v\nYmFy\r\n", 11, &len);
    CHECK(d && len == 6 && memcmp(d, "foobar", 6) == 0);
    free(d);
    /* every byte value survives the round trip */
    unsigned char all[256];
    for (int i = 0; i < 256; i++)
        all[i] = (unsigned char)i;
    char *e = korch_b64_encode(all, sizeof all);
    d = e ? korch_b64_decode(e, strlen(e), &len) : NULL;
    CHECK(d && len == 256 && memcmp(d, all, 256) == 0);
    free(e);
    free(d);
    /* not base64 */
    CHECK(!korch_b64_decode("Zm9v!", 5, &len));
    CHECK(!korch_b64_decode("Zm9", 3, &len) || len == 2);
}

/* ok accepts each of good (NULL-terminated) and refuses each of bad, and NULL. */
static void s_check_names(bool (*ok)(const char *), const char *const *good, const char *const *bad)
{
    for (; *good; good++)
        if (!CHECK(ok(*good)))
            fprintf(stderr, "  refused '%s'\n", *good);
    for (; *bad; bad++)
        if (!CHECK(!ok(*bad)))
            fprintf(stderr, "  accepted '%s'\n", *bad);
    CHECK(!ok(NULL));
}

TEST_T(util_safe_relpath, 10)
{
    static const char *const good[] = {"a", "a.csv", "dir/a.csv", "a/b/c", ".hidden", "a..b", "...", "x/.y", NULL};
    static const char *const bad[] = {"", "/etc/passwd", "..", "../x", "a/../../x", "a/..", ".", "./a",
                                      "a//b", "a/", "a/./b", "//x", NULL};
    s_check_names(korch_safe_relpath, good, bad);
    char longname[1100];
    memset(longname, 'a', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    CHECK(!korch_safe_relpath(longname));
    longname[KORCH_RELPATH_MAX] = 0; /* exactly the bound */
    CHECK(korch_safe_relpath(longname));
    /* another bound, and no hidden component (what a work-dir walk lists) */
    CHECK(korch_relpath_ok("abc", 3, 0));
    CHECK(!korch_relpath_ok("abcd", 3, 0));
    CHECK(korch_relpath_ok(".hidden/x", 100, 0));
    CHECK(!korch_relpath_ok(".hidden/x", 100, KORCH_RELPATH_NO_HIDDEN));
    CHECK(!korch_relpath_ok("a/.x", 100, KORCH_RELPATH_NO_HIDDEN));
    CHECK(!korch_relpath_ok("a/..", 100, KORCH_RELPATH_NO_HIDDEN));
    CHECK(korch_relpath_ok("a/b.c", 100, KORCH_RELPATH_NO_HIDDEN));
    CHECK(!korch_relpath_ok(NULL, 100, 0));
}

TEST_T(util_path_is_name, 10)
{
    static const char *const good[] = {"a", "a.csv", ".hidden", "a..b", "...", NULL};
    static const char *const bad[] = {"", ".", "..", "a/b", "/a", "a/", NULL};
    s_check_names(korch_path_is_name, good, bad);
    char name[NAME_MAX + 2];
    memset(name, 'n', sizeof name - 1);
    name[sizeof name - 1] = 0;
    CHECK(!korch_path_is_name(name)); /* NAME_MAX + 1 bytes */
    name[NAME_MAX] = 0;
    CHECK(korch_path_is_name(name));
}

TEST_T(util_buf_bounded, 10)
{
    korch_buf_t b;
    korch_buf_init(&b, 10, "max_test_bytes");
    korch_err_t err = {0};
    CHECK_EQ(korch_buf_adds(&b, "hello", "greeting", &err), KORCH_OK);
    CHECK_EQ(korch_buf_addf(&b, "greeting", &err, " %d", 42), KORCH_OK);
    CHECK_STREQ(b.p, "hello 42");
    CHECK_EQ(b.len, 8);
    /* past the bound: an error naming the buffer and the setting, nothing changed */
    CHECK_EQ(korch_buf_add(&b, "abc", 3, "greeting", &err), KORCH_E_TOOBIG);
    CHECK_CONTAINS(err.msg, "greeting");
    CHECK_CONTAINS(err.msg, "max_test_bytes");
    CHECK_STREQ(b.p, "hello 42");
    korch_err_clear(&err);
    CHECK_EQ(korch_buf_addf(&b, "greeting", &err, "%s", "xyz"), KORCH_E_TOOBIG);
    CHECK_STREQ(b.p, "hello 42");
    CHECK_EQ(korch_buf_add(&b, "ab", 2, "greeting", NULL), KORCH_OK); /* exactly max */
    CHECK_EQ(b.len, 10);
    CHECK_EQ(korch_buf_add(&b, "", 0, "greeting", NULL), KORCH_OK);
    CHECK_EQ(korch_buf_add(&b, "c", 1, "greeting", NULL), KORCH_E_TOOBIG);
    /* a huge n does not wrap around */
    CHECK_EQ(korch_buf_add(&b, "c", (size_t)-1, "greeting", NULL), KORCH_E_TOOBIG);
    char *s = korch_buf_strdup(&b);
    CHECK_STREQ(s, "hello 42ab");
    free(s);
    korch_buf_reset(&b);
    CHECK_EQ(b.len, 0);
    CHECK_STREQ(b.p, "");
    CHECK_EQ(korch_buf_adds(&b, "again", "greeting", NULL), KORCH_OK);
    size_t len = 0;
    s = korch_buf_release(&b, &len);
    CHECK_STREQ(s, "again");
    CHECK_EQ(len, 5);
    CHECK(!b.p && b.len == 0 && b.max == 10);
    free(s);
    /* growth across many doublings, binary data kept */
    korch_buf_t big = KORCH_BUF_INIT(1 << 20);
    for (int i = 0; i < 1000; i++)
        if (korch_buf_add(&big, "\0x\0y", 4, "blob", NULL) != KORCH_OK)
            break;
    CHECK_EQ(big.len, 4000);
    CHECK(memcmp(big.p + 3996, "\0x\0y", 4) == 0 && big.p[4000] == 0);
    korch_buf_free(&big);
    korch_buf_free(&big); /* twice is fine */
    /* an empty buffer's strdup and release give "" */
    s = korch_buf_strdup(&big);
    CHECK_STREQ(s, "");
    free(s);
    s = korch_buf_release(&big, NULL);
    CHECK_STREQ(s, "");
    free(s);
}

/* A budget shared by buffers: asked before each growth, by how much. */
typedef struct {
    size_t used, max, calls;
} s_budget_t;

static korch_rc_t s_budget_grow(void *arg, size_t more, korch_err_t *err)
{
    s_budget_t *g = arg;
    g->calls++;
    if (more > g->max - g->used)
        return korch_err_set(err, KORCH_E_NOMEM, "the budget of %zu bytes is spent", g->max);
    g->used += more;
    return KORCH_OK;
}

TEST_T(util_buf_budget, 10)
{
    s_budget_t g = {.max = 1000};
    korch_buf_t a = KORCH_BUF_INIT(4096), b = KORCH_BUF_INIT(4096);
    a.grow = b.grow = s_budget_grow;
    a.grow_arg = b.grow_arg = &g;
    korch_err_t err = {0};
    char blob[600];
    memset(blob, 'x', sizeof blob);
    /* what the buffers hold in memory is charged, not just their length */
    CHECK_EQ(korch_buf_add(&a, blob, 10, "first", &err), KORCH_OK);
    CHECK_EQ(g.used, a.cap);
    CHECK_EQ(a.cap, 256);
    CHECK_EQ(korch_buf_add(&a, blob, 300, "first", &err), KORCH_OK);
    CHECK_EQ(g.used, a.cap);
    CHECK_EQ(a.cap, 512);
    /* the second buffer's growth would pass the shared bound: its error, nothing changed */
    CHECK_EQ(korch_buf_add(&b, blob, 100, "second", &err), KORCH_OK);
    size_t calls = g.calls;
    CHECK_EQ(korch_buf_add(&b, blob, 400, "second", &err), KORCH_E_NOMEM);
    CHECK_CONTAINS(err.msg, "budget of 1000 bytes");
    CHECK_EQ(g.calls, calls + 1);
    CHECK_EQ(b.len, 100);
    CHECK_EQ(b.cap, 256);
    CHECK_EQ(g.used, 512 + 256);
    /* adds that fit the memory it has ask nothing */
    calls = g.calls;
    CHECK_EQ(korch_buf_add(&b, blob, 100, "second", NULL), KORCH_OK);
    CHECK_EQ(g.calls, calls);
    /* memory never passes max + 1, so a small bound is charged little */
    s_budget_t h = {.max = 1000};
    korch_buf_t c = KORCH_BUF_INIT(40);
    c.grow = s_budget_grow;
    c.grow_arg = &h;
    CHECK_EQ(korch_buf_add(&c, blob, 40, "small", NULL), KORCH_OK);
    CHECK_EQ(c.cap, 41);
    CHECK_EQ(h.used, 41);
    CHECK_EQ(korch_buf_add(&c, blob, 1, "small", &err), KORCH_E_TOOBIG);
    korch_buf_free(&a);
    korch_buf_free(&b);
    korch_buf_free(&c);
}

TEST_T(util_buf_reserve_drop, 10)
{
    korch_buf_t b = KORCH_BUF_INIT(100000);
    korch_err_t err = {0};
    /* reserve allocates once what is known to come */
    CHECK_EQ(korch_buf_reserve(&b, 70000, "archive", &err), KORCH_OK);
    CHECK_EQ(b.cap, 70001); /* exactly: no doubling past what is known to come */
    size_t cap = b.cap;
    char *p = b.p;
    for (int i = 0; i < 700; i++)
        korch_buf_add(&b, "0123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789", 100,
                      "archive", NULL);
    CHECK_EQ(b.len, 70000);
    CHECK(b.cap == cap && b.p == p);
    CHECK_EQ(korch_buf_reserve(&b, 40000, "archive", &err), KORCH_E_TOOBIG);
    korch_buf_t r = KORCH_BUF_INIT(10);
    CHECK_EQ(korch_buf_reserve(&r, 0, "empty", &err), KORCH_OK); /* memory, and it is "" */
    CHECK(r.p && r.len == 0 && r.cap == 1);
    CHECK_STREQ(r.p, "");
    korch_buf_free(&r);
    CHECK_CONTAINS(err.msg, "archive");
    /* drop: what was sent goes, the rest moves to the front, NUL kept */
    korch_buf_drop(&b, 69995);
    CHECK_EQ(b.len, 5);
    CHECK_STREQ(b.p, "56789");
    CHECK_EQ(b.cap, cap);
    korch_buf_drop(&b, 0);
    CHECK_STREQ(b.p, "56789");
    korch_buf_drop(&b, 99);
    CHECK_EQ(b.len, 0);
    CHECK_STREQ(b.p, "");
    korch_buf_free(&b);
    korch_buf_drop(&b, 3); /* empty, no memory: nothing to do */
    CHECK(!b.p && b.len == 0);
}

TEST_T(util_path_join, 10)
{
    char p[16];
    korch_err_t err = {0};
    CHECK_EQ(korch_path_join(p, sizeof p, "/run/k", "a.json", &err), KORCH_OK);
    CHECK_STREQ(p, "/run/k/a.json");
    CHECK_EQ(korch_path_join(p, sizeof p, "/run/", "a", &err), KORCH_OK);
    CHECK_STREQ(p, "/run/a");
    CHECK_EQ(korch_path_join(p, sizeof p, "", "a", &err), KORCH_OK);
    CHECK_STREQ(p, "a");
    CHECK_EQ(korch_path_join(p, sizeof p, NULL, "a", &err), KORCH_OK);
    CHECK_STREQ(p, "a");
    /* exactly fits (15 chars + NUL), then one more: an error and "", never a cut path */
    CHECK_EQ(korch_path_join(p, sizeof p, "/abcdefgh", "12345", &err), KORCH_OK);
    CHECK_STREQ(p, "/abcdefgh/12345");
    CHECK_EQ(korch_path_join(p, sizeof p, "/abcdefgh", "123456", &err), KORCH_E_TOOBIG);
    CHECK_STREQ(p, "");
    CHECK_CONTAINS(err.msg, "longer than 15 bytes");
    korch_err_clear(&err);
    CHECK_EQ(korch_path_fmt(p, sizeof p, &err, "%s.%d", "kernel", 7), KORCH_OK);
    CHECK_STREQ(p, "kernel.7");
    CHECK_EQ(korch_path_fmt(p, sizeof p, NULL, "%s-%s", "kernel-abcdef", "tmp"), KORCH_E_TOOBIG);
    CHECK_STREQ(p, "");
    CHECK_EQ(korch_path_fmt(p, 0, NULL, "x"), KORCH_E_TOOBIG);
}

/* Decode the JSON string in s (with its quotes) into at most cap bytes. */
static bool s_dec(const char *s, size_t cap, char *out, size_t *len, size_t *dropped)
{
    const char *p = s, *end = s + strlen(s);
    *dropped = 0;
    bool ok = korch_jsonstr_decode(&p, end, out, cap, len, dropped);
    if (ok)
        out[*len] = 0;
    if (ok && p != end)
        return false; /* must stop just past the closing quote */
    return ok;
}

TEST_T(util_jsonstr, 10)
{
    char out[64];
    size_t len, dropped;
    CHECK(s_dec("\"plain\"", sizeof out, out, &len, &dropped));
    CHECK_STREQ(out, "plain");
    CHECK(s_dec("\"a\\\"b\\\\c\\/d\\n\\t\\r\\b\\f\"", sizeof out, out, &len, &dropped));
    CHECK_STREQ(out, "a\"b\\c/d\n\t\r\b\f");
    CHECK(s_dec("\"\\u00e9\\u20ac\\ud83d\\ude00\"", sizeof out, out, &len, &dropped));
    CHECK_STREQ(out, "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80");
    CHECK(s_dec("\"caf\xc3\xa9\"", sizeof out, out, &len, &dropped));
    CHECK_STREQ(out, "caf\xc3\xa9");
    /* bounded: whole characters only; what does not fit is counted */
    CHECK(s_dec("\"abcdef\"", 4, out, &len, &dropped));
    CHECK_STREQ(out, "abcd");
    CHECK_EQ(dropped, 2);
    CHECK(s_dec("\"ab\xc3\xa9z\"", 3, out, &len, &dropped));
    CHECK_STREQ(out, "ab");
    CHECK_EQ(dropped, 3);
    CHECK(s_dec("\"a\\u20acz\"", 2, out, &len, &dropped));
    CHECK_STREQ(out, "a");
    CHECK_EQ(dropped, 4);
    /* malformed: refused, the cursor unchanged */
    static const char *const bad[] = {"\"open", "nope", "\"\\x\"", "\"\\u12\"", "\"\\ud83d\"", "\"\\ude00\"",
                                      "\"ctl\x01\"", "\"\xc3\"", "\"\\", "\"\\ud83d\\u0041\"",
                                      "\"a\xd9\"\"" /* a lead byte then the quote: found by fuzz_jsonstr */};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        const char *p = bad[i];
        if (!CHECK(!korch_jsonstr_decode(&p, p + strlen(p), out, sizeof out, &len, &dropped)))
            fprintf(stderr, "  accepted %s\n", bad[i]);
        CHECK(p == bad[i]);
    }
    /* where a string ends: after an even run of backslashes */
    const char *s = "ab\\\"c\\\\\"rest";
    CHECK(korch_jsonstr_end(s, s + strlen(s)) == s + 7);
    s = "no end\\\"";
    CHECK(!korch_jsonstr_end(s, s + strlen(s)));
    CHECK(!korch_jsonstr_end(s, s));
    /* escape lengths, for cutting a string between characters */
    size_t elen;
    s = "\\n";
    CHECK_EQ(korch_jsonstr_escape(s, s + 2, &elen), 1);
    CHECK_EQ(elen, 2);
    s = "\\u20ac";
    CHECK_EQ(korch_jsonstr_escape(s, s + 6, &elen), 3);
    CHECK_EQ(elen, 6);
    s = "\\ud83d\\ude00";
    CHECK_EQ(korch_jsonstr_escape(s, s + 12, &elen), 4);
    CHECK_EQ(elen, 12);
    s = "\\";
    CHECK_EQ(korch_jsonstr_escape(s, s + 1, &elen), 1);
    CHECK_EQ(elen, 1);
}

TEST_T(util_uuid, 10)
{
    char a[37], b[37];
    CHECK_EQ(korch_uuid(a), KORCH_OK);
    CHECK_EQ(korch_uuid(b), KORCH_OK);
    CHECK_EQ(strlen(a), 36);
    CHECK_STRNE(a, b);
    CHECK(a[8] == '-' && a[13] == '-' && a[18] == '-' && a[23] == '-');
    CHECK(a[14] == '4');                       /* version 4 */
    CHECK(strchr("89ab", a[19]) != NULL);      /* RFC 4122 variant */
    char t[32];
    korch_iso8601_now(t);
    CHECK_EQ(strlen(t), 27);
    CHECK(t[4] == '-' && t[10] == 'T' && t[19] == '.' && t[26] == 'Z');
}

static char *s_slurp(const char *path)
{
    size_t len;
    return korch_read_file(path, 1 << 20, &len, NULL);
}

/* The kernel can write the directory: it plants a symlink where korch will
   write, pointing at a file of korch's (root's) outside. The write must
   replace the link, never write through it, and leave the victim alone. */
TEST_T(util_read_bounded, 10)
{
    char dir[] = "/tmp/korch-read-XXXXXX";
    if (!CHECK(mkdtemp(dir)))
        return;
    char path[256], big[256];
    snprintf(path, sizeof path, "%s/f.bin", dir);
    snprintf(big, sizeof big, "%s/big.bin", dir);
    /* binary, NUL-terminated, read exactly; both readers give the same */
    size_t n = 200000;
    char *data = malloc(n);
    for (size_t i = 0; i < n; i++)
        data[i] = (char)(i * 7);
    korch_err_t err = {0};
    CHECK_EQ(korch_fs_write(path, data, n, NULL, &err), KORCH_OK);
    size_t len = 0;
    char *a = korch_fs_read(path, n, true, &len, &err);
    CHECK(a && len == n && memcmp(a, data, n) == 0 && a[n] == 0);
    free(a);
    len = 0;
    a = korch_read_file(path, n, &len, &err);
    CHECK(a && len == n && memcmp(a, data, n) == 0 && a[n] == 0);
    free(a);
    /* one byte over the bound: refused, saying the bound */
    korch_err_clear(&err);
    CHECK(!korch_fs_read(path, n - 1, true, &len, &err));
    CHECK_EQ(err.rc, KORCH_E_TOOBIG);
    CHECK_CONTAINS(err.msg, "larger than 199999 bytes");
    korch_err_clear(&err);
    CHECK(!korch_read_file(path, n - 1, &len, &err));
    CHECK_EQ(err.rc, KORCH_E_TOOBIG);
    CHECK_CONTAINS(err.msg, "larger than 199999 bytes");
    /* an empty file is "" */
    CHECK_EQ(korch_fs_write(big, "", 0, NULL, &err), KORCH_OK);
    a = korch_read_file(big, 10, &len, &err);
    CHECK(a && len == 0 && a[0] == 0);
    free(a);
    a = korch_fs_read(big, 10, true, &len, &err);
    CHECK(a && len == 0 && a[0] == 0);
    free(a);
    /* not there: NOTFOUND, naming the file */
    korch_err_clear(&err);
    CHECK(!korch_read_file("/nonexistent/korch-x", 10, &len, &err));
    CHECK_EQ(err.rc, KORCH_E_NOTFOUND);
    CHECK_CONTAINS(err.msg, "/nonexistent/korch-x");
    unlink(path);
    unlink(big);
    rmdir(dir);
    free(data);
}

TEST_T(util_atomic_write_symlink_attacker, 10)
{
    char dir[] = "/tmp/korch-util-XXXXXX", victim[] = "/tmp/korch-victim-XXXXXX";
    if (!CHECK(mkdtemp(dir)))
        return;
    int vfd = mkstemp(victim);
    CHECK(vfd >= 0 && write(vfd, "secret", 6) == 6);
    close(vfd);
    char target[256], sub[256], nested[256];
    snprintf(target, sizeof target, "%s/kernel.json", dir);
    CHECK_EQ(symlink(victim, target), 0);
    korch_err_t err = {0};
    korch_fs_opts_t o = {.mode = 0640};
    CHECK_EQ(korch_fs_write(target, "{}", 2, &o, &err), KORCH_OK);
    char *v = s_slurp(victim), *t = NULL;
    CHECK_STREQ(v, "secret");
    struct stat st;
    CHECK(lstat(target, &st) == 0 && S_ISREG(st.st_mode));
    CHECK_EQ(st.st_mode & 0777, 0640);
    CHECK_STREQ((t = s_slurp(target)), "{}");
    free(v);
    free(t);
    /* a directory on the way swapped for a link: refused, nothing written there */
    char outside[] = "/tmp/korch-outside-XXXXXX";
    CHECK(mkdtemp(outside));
    snprintf(sub, sizeof sub, "%s/files", dir);
    CHECK_EQ(symlink(outside, sub), 0);
    korch_err_clear(&err);
    CHECK_NE(korch_fs_write_rel(dir, "files/x.csv", "a,b", 3, true, &o, &err), KORCH_OK);
    snprintf(nested, sizeof nested, "%s/x.csv", outside);
    CHECK(access(nested, F_OK) != 0);
    /* the same write into a real directory works and leaves no temp file */
    CHECK_EQ(unlink(sub), 0);
    korch_err_clear(&err);
    CHECK_EQ(korch_fs_write_rel(dir, "files/x.csv", "a,b", 3, true, &o, &err), KORCH_OK);
    snprintf(nested, sizeof nested, "%s/files/x.csv", dir);
    CHECK_STREQ((t = s_slurp(nested)), "a,b");
    free(t);
    int n = 0;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "find %s -name '.*korch-*' | wc -l", dir);
    FILE *f = popen(cmd, "r");
    CHECK(f && fscanf(f, "%d", &n) == 1);
    if (f)
        pclose(f);
    CHECK_EQ(n, 0);
    /* a name that is not one component is refused outright */
    int dfd = korch_fs_open_dir(dir, NULL);
    CHECK_EQ(korch_fs_write_at(dfd, "../escape", "x", 1, &o, NULL), KORCH_E_INVALID);
    CHECK_EQ(korch_fs_write_at(dfd, "..", "x", 1, &o, NULL), KORCH_E_INVALID);
    close(dfd);
    korch_fs_rm_tree(dir);
    korch_fs_rm_tree(outside);
    unlink(victim);
    CHECK(access(dir, F_OK) != 0);
}

TEST_T(util_rm_tree_never_follows, 10)
{
    char dir[] = "/tmp/korch-rm-XXXXXX", keep[] = "/tmp/korch-keep-XXXXXX";
    if (!CHECK(mkdtemp(dir)) || !CHECK(mkdtemp(keep)))
        return;
    char p[256], k[256];
    snprintf(k, sizeof k, "%s/precious", keep);
    CHECK_EQ(korch_write_file(k, "x", 1, NULL), KORCH_OK);
    snprintf(p, sizeof p, "%s/a/b/c", dir);
    CHECK_EQ(korch_mkdirs(p, 0755, NULL), KORCH_OK);
    snprintf(p, sizeof p, "%s/a/link", dir);
    CHECK_EQ(symlink(keep, p), 0);
    korch_fs_rm_tree(dir);
    CHECK(access(dir, F_OK) != 0);
    CHECK(access(k, F_OK) == 0);
    korch_fs_rm_tree(keep);
    CHECK(access(keep, F_OK) != 0);
    /* mkdir -p says why it cannot */
    korch_err_t err = {0};
    CHECK_EQ(korch_mkdirs("/proc/self/korch-no/x", 0755, &err), KORCH_E_IO);
    CHECK_CONTAINS(err.msg, "cannot create");
}

typedef struct {
    int n;
    korch_log_level_t level;
    char line[256];
} s_sink_t;

static void s_sink(void *arg, korch_log_level_t level, const char *line)
{
    s_sink_t *s = arg;
    s->n++;
    s->level = level;
    snprintf(s->line, sizeof s->line, "%s", line);
}

static int s_evaluated;
static int s_count(void) { return ++s_evaluated; }

TEST_T(util_log_sink_and_levels, 10)
{
    s_sink_t s = {0};
    korch_log_set_sink(s_sink, &s);
    korch_log_level = KORCH_LOG_NOTICE; /* the default */
    korch_notice("kernel %s started", "k1");
    CHECK_EQ(s.n, 1);
    CHECK_EQ(s.level, KORCH_LOG_NOTICE);
    CHECK_STREQ(s.line, "kernel k1 started");
    /* below the level: nothing written, the arguments not even evaluated */
    korch_info("%d", s_count());
    korch_debug("%d", s_count());
    CHECK_EQ(s.n, 1);
    CHECK_EQ(s_evaluated, 0);
    korch_warn("a\nforged line\x1b[31m");
    CHECK_EQ(s.n, 2);
    CHECK_STREQ(s.line, "a\\x0aforged line\\x1b[31m"); /* a client cannot end a log line */
    korch_log_level = KORCH_LOG_WARN;
    korch_notice("quiet");
    CHECK_EQ(s.n, 2);
    korch_log_set_sink(NULL, NULL);
}

TEST_T(util_rc_http_status, 10)
{
    CHECK_EQ(korch_rc_http_status(KORCH_OK), 200);
    CHECK_EQ(korch_rc_http_status(KORCH_E_INVALID), 400);
    CHECK_EQ(korch_rc_http_status(KORCH_E_NOTFOUND), 404);
    CHECK_EQ(korch_rc_http_status(KORCH_E_TOOBIG), 413);
    CHECK_EQ(korch_rc_http_status(KORCH_E_NOMEM), 503);
    CHECK_EQ(korch_rc_http_status(KORCH_E_STATE), 409);
    CHECK_EQ(korch_rc_http_status(KORCH_E_TIMEOUT), 504);
    CHECK_EQ(korch_rc_http_status(KORCH_E_IO), 500);
    CHECK_EQ(korch_rc_http_status(KORCH_E_DOCKER), 500);
    CHECK_EQ(korch_rc_http_status(KORCH_E__COUNT), 500);
}
