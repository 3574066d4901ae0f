/*  JupyterHub's resolver on its own (src/server/hub.c, hub_http.c), no Hub
 *  needed: the cache's bound and TTL, the token from a request's header or
 *  its cookie, and a Hub that is not there (a real request to a closed
 *  port, on a real loop: a clear 503 and nothing cached for long). The Hub
 *  itself is tests/test_hub.c's.
 */
#define KORCH_TEST_UNIT
#include "test.h"
#include "../src/server/hub.h"
#include "korch/loop.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static srv_hub_t *s_hub(korch_loop_t *loop, int cache_max, int cache_s, const char *url)
{
    korch_err_t err = {0};
    srv_hub_opts_t o = {.api_url = url ? url : "http://127.0.0.1:9/hub/api", .cache_max = cache_max,
                        .cache_s = cache_s, .timeout_ms = 3000};
    srv_hub_t *h = srv_hub_new(loop, &o, &err);
    if (!h)
        fprintf(stderr, "  srv_hub_new: %s\n", err.msg);
    return h;
}

TEST(hub_resolver_cache_bound_and_ttl)
{
    korch_loop_t *loop = korch_loop_new();
    srv_hub_t *h = s_hub(loop, 4, 30, NULL);
    if (!CHECK(h != NULL))
        goto out;
    char tok[32], name[64];
    for (int i = 0; i < 6; i++) { /* 6 tokens into 4 places: the two oldest go */
        snprintf(tok, sizeof tok, "token-%d", i);
        snprintf(name, sizeof name, "user%d", i);
        srv_hub_cache_put_test(h, tok, name, 1000 + i);
    }
    CHECK_EQ(srv_hub_cache_count(h), 4);
    CHECK(!srv_hub_cache_get_test(h, "token-0", name, sizeof name, 2000));
    CHECK(!srv_hub_cache_get_test(h, "token-1", name, sizeof name, 2000));
    if (CHECK(srv_hub_cache_get_test(h, "token-5", name, sizeof name, 2000)))
        CHECK_STREQ(name, "user5");
    if (CHECK(srv_hub_cache_get_test(h, "token-2", name, sizeof name, 2000)))
        CHECK_STREQ(name, "user2");
    /* the same token again takes its own place, not another's */
    srv_hub_cache_put_test(h, "token-5", "user5", 3000);
    CHECK_EQ(srv_hub_cache_count(h), 4);
    CHECK(srv_hub_cache_get_test(h, "token-3", name, sizeof name, 3000));
    /* 30 s later everything is asked of the Hub again */
    CHECK(srv_hub_cache_get_test(h, "token-5", name, sizeof name, 3000 + 29999));
    CHECK(!srv_hub_cache_get_test(h, "token-5", name, sizeof name, 3000 + 30000));
    CHECK(!srv_hub_cache_get_test(h, "token-2", name, sizeof name, 1002 + 30000));
    /* an expired one's place is taken before a live one's */
    srv_hub_cache_put_test(h, "token-new", "usernew", 1002 + 30000);
    CHECK(srv_hub_cache_get_test(h, "token-4", name, sizeof name, 1004 + 29999));
out:
    if (h)
        srv_hub_resolver.destroy(h);
    korch_loop_destroy(&loop);
}

TEST(hub_resolver_token_or_cookie)
{
    char buf[64];
    srv_cred_t c = {.token = "abc", .cookie = "korch-hub-token=fromcookie"};
    if (CHECK(srv_hub_token_of(&c, buf, sizeof buf))) /* the header's wins */
        CHECK_STREQ(buf, "abc");
    c.token = NULL;
    if (CHECK(srv_hub_token_of(&c, buf, sizeof buf)))
        CHECK_STREQ(buf, "fromcookie");
    c.cookie = "a=1; korch-hub-token=t2; b=2";
    if (CHECK(srv_hub_token_of(&c, buf, sizeof buf)))
        CHECK_STREQ(buf, "t2");
    c.cookie = "xkorch-hub-token=no; korch-hub-tokenx=no";
    CHECK(!srv_hub_token_of(&c, buf, sizeof buf));
    c.cookie = "korch-hub-token=";
    CHECK(!srv_hub_token_of(&c, buf, sizeof buf));
    char big[200];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    c.token = big; /* longer than the caller's buffer: not a token, never cut */
    CHECK(!srv_hub_token_of(&c, buf, sizeof buf));
    c.token = NULL;
    c.cookie = NULL;
    CHECK(!srv_hub_token_of(&c, buf, sizeof buf));
}

typedef struct {
    int calls;
    srv_who_t rc;
} s_wait_t;

static void s_done(void *arg, srv_who_t rc, const srv_user_t *u)
{
    s_wait_t *w = arg;
    w->calls++;
    w->rc = rc;
}

static bool s_called(void *arg) { return ((s_wait_t *)arg)->calls > 0; }

TEST(hub_resolver_hub_down_says_why)
{
    /* a port bound and not listening: connection refused, at once */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    CHECK_EQ(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    CHECK_EQ(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    char url[96];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/hub/api", ntohs(a.sin_port));
    korch_loop_t *loop = korch_loop_new();
    srv_hub_t *h = s_hub(loop, 16, 30, url);
    if (!CHECK(h != NULL))
        goto out;
    srv_cred_t c = {.token = "a-token-of-someone"};
    srv_user_t u;
    s_wait_t w1 = {0}, w2 = {0}, w3 = {0};
    /* three requests with one token: one lookup; the one that leaves is never answered */
    CHECK_EQ(srv_hub_resolver.resolve(h, &c, &u, s_done, &w1), SRV_WHO_PENDING);
    CHECK_EQ(srv_hub_resolver.resolve(h, &c, &u, s_done, &w2), SRV_WHO_PENDING);
    CHECK_EQ(srv_hub_resolver.resolve(h, &c, &u, s_done, &w3), SRV_WHO_PENDING);
    srv_hub_resolver.cancel(h, &w2);
    CHECK_EQ(w1.calls + w2.calls + w3.calls, 0); /* never from inside resolve */
    korch_loop_run(loop, s_called, &w1, 5000);
    CHECK_EQ(w1.calls, 1);
    CHECK_EQ(w1.rc, SRV_WHO_DENIED);
    CHECK_EQ(w2.calls, 0);
    CHECK_EQ(w3.calls, 1);
    char msg[320];
    CHECK_EQ(srv_hub_resolver.why(h, &c, msg, sizeof msg), 503);
    CHECK_CONTAINS(msg, "cannot reach JupyterHub at '");
    CHECK_CONTAINS(msg, url);
    /* kept a moment only (to say why), then asked again */
    CHECK_EQ(srv_hub_resolver.resolve(h, &c, &u, s_done, &w1), SRV_WHO_DENIED);
    usleep(1100 * 1000);
    s_wait_t w4 = {0};
    CHECK_EQ(srv_hub_resolver.resolve(h, &c, &u, s_done, &w4), SRV_WHO_PENDING);
    korch_loop_run(loop, s_called, &w4, 5000);
    CHECK_EQ(w4.calls, 1);
    /* no token, no cookie: not the Hub's to answer */
    srv_cred_t none = {0};
    CHECK_EQ(srv_hub_resolver.resolve(h, &none, &u, s_done, &w4), SRV_WHO_NEXT);
    CHECK_EQ(srv_hub_resolver.why(h, &none, msg, sizeof msg), 0);
out:
    if (h)
        srv_hub_resolver.destroy(h);
    korch_loop_destroy(&loop);
    close(fd);
}

TEST(hub_resolver_needs_an_api_url)
{
    korch_err_t err = {0};
    srv_hub_opts_t o = {0};
    CHECK(srv_hub_new(NULL, &o, &err) == NULL);
    CHECK_CONTAINS(err.msg, "JUPYTERHUB_API_URL");
    korch_err_t err2 = {0};
    o.api_url = "ftp://hub/api";
    CHECK(srv_hub_new(NULL, &o, &err2) == NULL);
    CHECK_CONTAINS(err2.msg, "is not http:// or https://");
}
