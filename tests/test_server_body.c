/*  src/server/body.c on its own: request bodies as they arrive. Chunked
 *  framing (RFC 9112 7.1) fed whole, byte by byte and in random splits must
 *  decode the same; bad framing is refused; limits and the shared budget
 *  hold, and the budget is given back; a spooled body lands in an unnamed
 *  file, byte for byte. (Against a real server: tests/test_server_sec.c.) */
#define KORCH_TEST_UNIT /* no kernel, docker or browser: make check runs these */
#include "test.h"
#include "../src/server/body.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Feed text to a new chunked body in pieces of at most step bytes (0 =
   random sizes); the rc of the first failure, else KORCH_OK. */
static korch_rc_t s_feed(srv_body_t *b, const char *text, size_t len, size_t step, korch_err_t *err)
{
    for (size_t off = 0; off < len;) {
        size_t n = step ? step : 1 + (size_t)rand() % 7;
        if (n > len - off)
            n = len - off;
        korch_rc_t rc = srv_body_feed(b, text + off, n, err);
        if (rc)
            return rc;
        off += n;
    }
    return KORCH_OK;
}

TEST(server_body_chunked_framing)
{
    static const char ok[] = "5;name=value\r\nhello\r\n1\r\n \r\n0006 ; a=\"b\"\r\nworld!\r\n0\r\nX-Trailer: yes\r\n\r\nNEXT";
    srv_budget_t g = {0, 0, "test"};
    srand(1);
    for (size_t step = 0; step < 4; step++) {
        korch_err_t err = {0};
        srv_body_t *b = srv_body_new(100, 0, true, &g, -1, &err);
        CHECK_EQ(s_feed(b, ok, sizeof ok - 1, step, &err), KORCH_OK);
        CHECK(srv_body_complete(b));
        CHECK_EQ(srv_body_len(b), 12);
        CHECK_STREQ(srv_body_data(b), "hello world!"); /* "NEXT" is not this body's */
        srv_body_destroy(&b);
        CHECK_EQ(g.used, 0);
    }
    /* incomplete: not done yet */
    korch_err_t err = {0};
    srv_body_t *b = srv_body_new(100, 0, true, &g, -1, &err);
    CHECK_EQ(srv_body_feed(b, "5\r\nhello\r\n0\r\n", 13, &err), KORCH_OK);
    CHECK(!srv_body_complete(b));
    srv_body_destroy(&b);
    struct {
        const char *text;
        korch_rc_t rc;
        const char *msg;
    } bad[] = {
        {"zz\r\n", KORCH_E_INVALID, "size in hex"},
        {"\r\n", KORCH_E_INVALID, "size in hex"},
        {"5\nhello", KORCH_E_INVALID, "bare LF"},
        {"5x\r\nhello", KORCH_E_INVALID, "junk after a chunk size"},
        {"3\r\nhello\r\n", KORCH_E_INVALID, "longer than its size"},
        {"3\r\nabc\n", KORCH_E_INVALID, "longer than its size"},
        {"3\r\nabc\r0", KORCH_E_INVALID, "CR without LF"},
        {"0\r\nX: y\n", KORCH_E_INVALID, "bare LF"},
        {"0\r\n\n", KORCH_E_INVALID, "bare LF"},
        {"65\r\n", KORCH_E_TOOBIG, "over the limit"},           /* 101 > 100 */
        {"00000000000000000001\r\n", KORCH_E_TOOBIG, "over"},   /* more than 16 digits */
        {"FFFFFFFFFFFFFFFF\r\n", KORCH_E_TOOBIG, "over"},
        {"40\r\n" "0123456789012345678901234567890123456789012345678901234567890123\r\n"
         "40\r\n", KORCH_E_TOOBIG, "over"},                    /* 64 + 64 > 100 */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        korch_err_t e = {0};
        srv_body_t *bb = srv_body_new(100, 0, true, &g, -1, &e);
        korch_rc_t rc = s_feed(bb, bad[i].text, strlen(bad[i].text), 1, &e);
        if (!CHECK_EQ(rc, bad[i].rc) || !CHECK_CONTAINS(e.msg, bad[i].msg))
            fprintf(stderr, "  case %zu: %s\n", i, bad[i].text);
        srv_body_destroy(&bb);
    }
    /* an extension too long */
    char *longext = malloc(6000);
    memset(longext, 'e', 6000);
    memcpy(longext, "1;", 2);
    b = srv_body_new(100, 0, true, &g, -1, &err);
    CHECK_EQ(srv_body_feed(b, longext, 6000, &err), KORCH_E_INVALID);
    srv_body_destroy(&b);
    free(longext);
    CHECK_EQ(g.used, 0);
}

TEST(server_body_memory_grows_and_is_budgeted)
{
    /* a declared length allocates nothing up front, and at most the length */
    srv_budget_t g = {0, 1 << 20, "--max-body-total"};
    korch_err_t err = {0};
    srv_body_t *b = srv_body_new(10u << 20, 900000, false, &g, -1, &err);
    CHECK_EQ(g.used, 0);
    char *chunk = calloc(1, 100000);
    CHECK_EQ(srv_body_feed(b, chunk, 100000, &err), KORCH_OK);
    CHECK_LE(g.used, 2 * 100000 + 16384);
    for (int i = 0; i < 8; i++)
        CHECK_EQ(srv_body_feed(b, chunk, 100000, &err), KORCH_OK);
    CHECK(srv_body_complete(b));
    CHECK_EQ(g.used, 900001); /* capped at the length (+ its NUL) */
    /* a second body finds the budget spent */
    srv_body_t *b2 = srv_body_new(10u << 20, 500000, false, &g, -1, &err);
    CHECK_EQ(srv_body_feed(b2, chunk, 100000, &err), KORCH_OK); /* 128 KiB more: fits */
    CHECK_EQ(srv_body_feed(b2, chunk, 100000, &err), KORCH_E_NOMEM); /* 256 KiB: does not */
    CHECK_CONTAINS(err.msg, "--max-body-total");
    srv_body_destroy(&b2);
    srv_body_destroy(&b);
    CHECK_EQ(g.used, 0);
    /* the limit of one body */
    b = srv_body_new(1000, 0, true, &g, -1, &err);
    CHECK_EQ(srv_body_feed(b, "3E9\r\n", 5, &err), KORCH_E_TOOBIG); /* 1001 */
    srv_body_destroy(&b);
    /* bytes beyond a Content-Length are not the body's */
    b = srv_body_new(1000, 3, false, &g, -1, &err);
    CHECK_EQ(srv_body_feed(b, "abcdef", 6, &err), KORCH_OK);
    CHECK_STREQ(srv_body_data(b), "abc");
    srv_body_destroy(&b);
    free(chunk);
}

TEST(server_body_spooled_to_an_unnamed_file)
{
    char dir[] = "/tmp/korch-body-XXXXXX";
    if (!CHECK(mkdtemp(dir)))
        return;
    int dfd = open(dir, O_RDONLY | O_DIRECTORY);
    srv_budget_t disk = {0, 3u << 20, "--max-upload-total"}, mem = {0, 0, "m"};
    korch_err_t err = {0};
    srv_body_t *b = srv_body_new(8u << 20, 0, true, &disk, dfd, &err);
    if (!CHECK(b))
        goto out;
    /* 2 MiB in chunks of 64 KiB */
    size_t n = 2u << 20;
    unsigned char *data = malloc(n);
    for (size_t i = 0; i < n; i++)
        data[i] = (unsigned char)(i * 7 + i / 251);
    for (size_t off = 0; off < n; off += 65536) {
        char head[16];
        int h = snprintf(head, sizeof head, "%x\r\n", 65536);
        CHECK_EQ(srv_body_feed(b, head, (size_t)h, &err), KORCH_OK);
        CHECK_EQ(srv_body_feed(b, data + off, 65536, &err), KORCH_OK);
        CHECK_EQ(srv_body_feed(b, "\r\n", 2, &err), KORCH_OK);
    }
    CHECK_EQ(srv_body_feed(b, "0\r\n\r\n", 5, &err), KORCH_OK);
    CHECK(srv_body_complete(b));
    CHECK(!srv_body_data(b));
    CHECK_EQ(srv_body_len(b), n);
    CHECK_EQ(mem.used, 0);
    CHECK_EQ(disk.used, n);
    int fd = srv_body_fd(b);
    unsigned char *back = malloc(n);
    CHECK_EQ(pread(fd, back, n, 0), (ssize_t)n);
    CHECK(memcmp(back, data, n) == 0);
    /* nothing named in the directory */
    char cmd[128];
    snprintf(cmd, sizeof cmd, "ls -A '%s' | wc -l", dir);
    const char *argv[] = {"sh", "-c", cmd, NULL};
    char *out = NULL;
    korch_test_run(argv, NULL, &out, NULL, 10);
    CHECK_STREQ(out ? out : "", "0\n");
    free(out);
    /* the disk budget: a second upload past it */
    srv_body_t *b2 = srv_body_new(8u << 20, 2u << 20, false, &disk, dfd, &err);
    CHECK_EQ(srv_body_feed(b2, data, n, &err), KORCH_E_NOMEM);
    srv_body_destroy(&b2);
    srv_body_destroy(&b);
    CHECK_EQ(disk.used, 0);
    free(back);
    free(data);
out:
    close(dfd);
    rmdir(dir);
}
