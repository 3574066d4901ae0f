/*  korch serve's HTTP framing, with raw bytes on a socket: the regressions
 *  tests/fuzz/fuzz_http found (see s_finish and s_http_body_done in
 *  src/server/server.c), against a real `korch serve` and a real ipykernel.
 *
 *  - A request with a body pipelined behind another made libwebsockets
 *    4.1.6 hand the buffered headers over as the body and then spin
 *    forever, the whole server with it (or read a freed buffer). korch now
 *    serves one request per connection ("connection: close").
 *  - POST /api/kernels with "Content-Length: 0" (what python requests sends
 *    for a post without data) started two kernels, one orphaned, with the
 *    request waiting on both.
 */
#include "test.h"

#include <arpa/inet.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    pid_t pid;
    int port;
    char token[128];
} srv_t;

static bool s_start(srv_t *s)
{
    const char *argv[] = {korch_test_korch_bin(), "serve", "--port", "0", "--launcher", "local", NULL};
    char line[512] = "";
    s->pid = korch_test_spawn_line(argv, line, sizeof line, 20, NULL);
    const char *tok = strstr(line, "/?token=");
    if (!CHECK(sscanf(line, "http://127.0.0.1:%d/", &s->port) == 1 && tok))
        return false;
    snprintf(s->token, sizeof s->token, "%s", tok + 8);
    return true;
}

static void s_stop(srv_t *s)
{
    if (s->pid > 0) {
        kill(s->pid, SIGTERM);
        waitpid(s->pid, NULL, 0);
        s->pid = -1;
    }
}

/* Send raw bytes (then half-close when asked), read until the server closes
   or timeout_ms passes. Returns what came back (new), *closed whether the
   server closed. */
static char *s_exchange(const srv_t *s, const char *data, bool half_close, int timeout_ms, bool *closed)
{
    *closed = false;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)s->port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    size_t len = strlen(data);
    if (send(fd, data, len, MSG_NOSIGNAL) != (ssize_t)len) {
        close(fd);
        return NULL;
    }
    if (half_close)
        shutdown(fd, SHUT_WR);
    size_t cap = 65536, got = 0;
    char *buf = calloc(1, cap);
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        clock_gettime(CLOCK_MONOTONIC, &t);
        int left = timeout_ms - (int)((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000);
        struct pollfd p = {fd, POLLIN, 0};
        if (left <= 0 || poll(&p, 1, left) <= 0)
            break;
        ssize_t n = recv(fd, buf + got, cap - got - 1, 0);
        if (n <= 0) {
            *closed = true;
            break;
        }
        got += (size_t)n;
        if (got + 1 >= cap)
            break;
    }
    close(fd);
    return buf;
}

static int s_count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

/* GET /api answered, then the server still serves everyone. */
static bool s_alive(const srv_t *s)
{
    bool closed;
    char *r = s_exchange(s, "GET /api HTTP/1.1\r\nHost: x\r\n\r\n", false, 3000, &closed);
    bool ok = r && strncmp(r, "HTTP/1.1 200", 12) == 0 && closed;
    free(r);
    return ok;
}

TEST_T(server_http_pipelined_body_requests, 60)
{
    srv_t s = {0};
    if (!s_start(&s))
        goto out;
    char auth[256], req[2048];
    snprintf(auth, sizeof auth, "Authorization: token %s\r\n", s.token);
    const char *get = "GET /api/status HTTP/1.1\r\nHost: x\r\n%s\r\n";
    const char *post = "POST /api/kernels/nope/interrupt HTTP/1.1\r\nHost: x\r\n%sContent-Length: 7\r\n\r\n{\"a\":1}";
    /* GET then POST with a body, in one segment; once with a half-close */
    for (int half = 0; half < 2; half++) {
        char g[512], p[512];
        snprintf(g, sizeof g, get, auth);
        snprintf(p, sizeof p, post, auth);
        snprintf(req, sizeof req, "%s%s", g, p);
        bool closed;
        char *r = s_exchange(&s, req, half, 5000, &closed);
        if (!CHECK(r))
            goto out;
        /* the first is answered, the connection closes: the pipelined
           POST never reaches lws's mis-framing */
        CHECK(strncmp(r, "HTTP/1.1 200", 12) == 0);
        CHECK_CONTAINS(r, "connection: close");
        CHECK_EQ(s_count(r, "HTTP/1.1 "), 1);
        CHECK(closed);
        free(r);
        CHECK(s_alive(&s));
    }
    /* two POSTs with bodies, and a POST whose Content-Length is more than
       was sent behind a GET (lws read a freed buffer there) */
    {
        char p[512], g[512];
        snprintf(p, sizeof p, post, auth);
        snprintf(g, sizeof g, get, auth);
        snprintf(req, sizeof req, "%s%s%sPOST /api/kernels HTTP/1.1\r\nHost: x\r\n%sContent-Length: 900\r\n\r\n{\"n", p,
                 p, g, auth);
        bool closed;
        char *r = s_exchange(&s, req, true, 5000, &closed);
        CHECK(r && strncmp(r, "HTTP/1.1 404", 12) == 0);
        CHECK_EQ(s_count(r ? r : "", "HTTP/1.1 "), 1);
        CHECK(closed);
        free(r);
        CHECK(s_alive(&s));
    }
    /* one request per connection, one response, "connection: close" */
    snprintf(req, sizeof req, get, auth);
    bool closed;
    char *r = s_exchange(&s, req, false, 5000, &closed);
    CHECK(r && strncmp(r, "HTTP/1.1 200", 12) == 0);
    CHECK_CONTAINS(r ? r : "", "connection: close");
    CHECK(closed);
    free(r);
out:
    s_stop(&s);
}

TEST_T(server_http_post_content_length_0_starts_one_kernel, 90)
{
    srv_t s = {0};
    json_t *list = NULL;
    if (!s_start(&s))
        goto out;
    char req[1024];
    snprintf(req, sizeof req,
             "POST /api/kernels HTTP/1.1\r\nHost: x\r\nAuthorization: token %s\r\nContent-Length: 0\r\n\r\n", s.token);
    bool closed;
    char *r = s_exchange(&s, req, false, 60000, &closed);
    CHECK(r && strncmp(r, "HTTP/1.1 201", 12) == 0);
    free(r);
    snprintf(req, sizeof req, "GET /api/kernels HTTP/1.1\r\nHost: x\r\nAuthorization: token %s\r\n\r\n", s.token);
    r = s_exchange(&s, req, false, 5000, &closed);
    const char *body = r ? strstr(r, "\r\n\r\n") : NULL;
    list = body ? json_loads(body + 4, 0, NULL) : NULL;
    /* one POST, one kernel */
    CHECK(json_is_array(list));
    CHECK_EQ(json_array_size(list), 1);
    free(r);
out:
    json_decref(list);
    s_stop(&s);
}

/* The web app's three files (src/server/web.c) are served without the token,
   with the CSP and friends; everything else still needs it. */
TEST_T(server_http_web_page_without_token_with_csp, 60)
{
    srv_t s = {0};
    if (!s_start(&s))
        return;
    bool closed;
    char *r = s_exchange(&s, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", false, 3000, &closed);
    CHECK(r && strncmp(r, "HTTP/1.1 200", 12) == 0);
    CHECK_CONTAINS(r, "content-type: text/html");
    CHECK_CONTAINS(r, "content-security-policy: default-src 'self'; script-src 'self'; style-src 'self';");
    CHECK_CONTAINS(r, "frame-ancestors 'none'; base-uri 'none'; form-action 'self'");
    CHECK_CONTAINS(r, "x-content-type-options: nosniff");
    CHECK_CONTAINS(r, "referrer-policy: no-referrer");
    CHECK_CONTAINS(r, "<script defer src=\"static/korch.js\"></script>"); /* relative: the page also lives under the Hub proxy's /services/korch/ */
    free(r);
    r = s_exchange(&s, "GET /static/korch.js HTTP/1.1\r\nHost: x\r\n\r\n", false, 3000, &closed);
    const char *body = r ? strstr(r, "\r\n\r\n") : NULL;
    CHECK(r && strncmp(r, "HTTP/1.1 200", 12) == 0);
    CHECK_CONTAINS(r, "content-type: text/javascript");
    CHECK_CONTAINS(r, "x-content-type-options: nosniff");
    CHECK(body && strlen(body) > 20000); /* the real bundle, not the placeholder of a build without node */
    free(r);
    r = s_exchange(&s, "GET /static/korch.css HTTP/1.1\r\nHost: x\r\n\r\n", false, 3000, &closed);
    CHECK(r && strncmp(r, "HTTP/1.1 200", 12) == 0);
    CHECK_CONTAINS(r, "content-type: text/css");
    free(r);
    /* not the page's: the token is needed, and the API's answers carry no page headers */
    const char *need[] = {"GET /static/other.js HTTP/1.1\r\nHost: x\r\n\r\n",
                          "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
                          "GET /api/agent/sessions HTTP/1.1\r\nHost: x\r\n\r\n",
                          "GET /index.html HTTP/1.1\r\nHost: x\r\n\r\n"};
    for (size_t i = 0; i < sizeof need / sizeof need[0]; i++) {
        r = s_exchange(&s, need[i], false, 3000, &closed);
        if (!CHECK(r && strncmp(r, "HTTP/1.1 403", 12) == 0))
            fprintf(stderr, "  %s -> %.60s\n", need[i], r ? r : "(nothing)");
        free(r);
    }
    char req[512];
    snprintf(req, sizeof req, "GET /static/other.js HTTP/1.1\r\nHost: x\r\nAuthorization: token %s\r\n\r\n", s.token);
    r = s_exchange(&s, req, false, 3000, &closed);
    CHECK(r && strncmp(r, "HTTP/1.1 404", 12) == 0);
    CHECK(r && !strstr(r, "content-security-policy"));
    free(r);
    CHECK(s_alive(&s));
    s_stop(&s);
}
