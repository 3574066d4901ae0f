/*  korch serve's HTTP surface under attack (issue 9, points 5, 6, 9-12),
 *  with raw sockets and libcurl against a real `korch serve` and real
 *  ipykernels (local launcher):
 *
 *  - 200 sockets that never send a byte (reconnecting when closed), from
 *    another address and from the legit client's own, while a client
 *    polls: every poll answered, latency bounded; an idle socket is closed
 *    after the header deadline.
 *  - DELETE of a kernel while a POST /api/kernels, a restart, a POST
 *    /api/sessions and a POST /api/agent/sessions wait for it: each is
 *    answered (409 with a message) within a few seconds. A kernelspec that
 *    sleeps 3 s before exec'ing ipykernel makes the wait long enough.
 *  - Chunked PUTs of files (framing with extensions and a trailer by
 *    hand; 5 MiB of random bytes from libcurl, which also sends Expect:
 *    100-continue) read back byte for byte, into a local kernel's work dir
 *    and a container's; bad framing 400, another coding 501, both lengths
 *    400, a chunk over the limit 413.
 *  - 8 uploads of 48 MiB at once: all stored, peak RSS bounded (measured);
 *    bodies in memory bounded all together (503 past --max-body-total).
 *  - An Origin of 300 bytes is refused (REST and websocket), not ignored.
 *  - ESC, backspace, CR, LF in a path reach the log escaped.
 */
#include "test.h"
#include "serve_fixture.h"
#include "rawhttp.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    serve_t s;
    int port;
    char tmp[64];      /* agent dir, kernelspecs */
} fx_t;

static bool s_start(fx_t *f, const char *const *extra)
{
    snprintf(f->tmp, sizeof f->tmp, "/tmp/korch-sec-XXXXXX");
    if (!CHECK(mkdtemp(f->tmp)))
        return false;
    /* a kernelspec that takes 3 s to start: ipykernel after a sleep */
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/specs", f->tmp);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/specs/slow", f->tmp);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/specs/slow/kernel.json", f->tmp);
    FILE *k = fopen(path, "w");
    if (!CHECK(k))
        return false;
    fprintf(k, "{\"argv\": [\"/bin/sh\", \"-c\", \"sleep 3; exec /usr/bin/python3 -m ipykernel_launcher -f \\\"$0\\\"\", "
               "\"{connection_file}\"], \"display_name\": \"slow\", \"language\": \"python\"}\n");
    fclose(k);
    snprintf(path, sizeof path, "%s/specs", f->tmp);
    setenv("KORCH_KERNELSPEC_PATH", path, 1);
    char agents[PATH_MAX];
    snprintf(agents, sizeof agents, "%s/agents", f->tmp);
    const char *launcher = getenv("KORCH_TEST_LAUNCHER"); /* docker:NAME (TEST_BOTH_T) */
    const char *argv[24] = {"--agent-dir", agents, "--launcher", launcher && *launcher ? launcher : "local"};
    int n = 4;
    for (int i = 0; extra && extra[i] && n < 22; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    if (!serve_start_args(&f->s, argv))
        return false;
    return CHECK(sscanf(f->s.url, "http://127.0.0.1:%d/", &f->port) == 1);
}

static void s_stop(fx_t *f)
{
    serve_stop(&f->s);
    if (f->tmp[0]) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->tmp);
        const char *argv[] = {"sh", "-c", cmd, NULL};
        korch_test_run(argv, NULL, NULL, NULL, 60);
    }
}

/* A JSON request with the token; the response (new). */
static char *s_api(const fx_t *f, const char *method, const char *path, const char *json, int timeout_ms)
{
    char req[4096];
    snprintf(req, sizeof req,
             "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: token %s\r\nContent-Type: application/json\r\n"
             "Content-Length: %zu\r\n\r\n%s",
             method, path, f->s.token, json ? strlen(json) : 0, json ? json : "");
    return raw_request(f->port, req, 0, timeout_ms, NULL, NULL);
}

/* Send a JSON request and return its connection without reading. */
static int s_api_send(const fx_t *f, const char *method, const char *path, const char *json)
{
    char req[4096];
    int n = snprintf(req, sizeof req,
                     "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: token %s\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\n\r\n%s",
                     method, path, f->s.token, json ? strlen(json) : 0, json ? json : "");
    int fd = raw_connect(f->port, NULL);
    if (fd >= 0 && !raw_send_all(fd, req, (size_t)n)) {
        close(fd);
        fd = -1;
    }
    return fd;
}

static json_t *s_json(const char *resp) { return json_loads(raw_body(resp), 0, NULL); }

/* --------------------------------------------------- 5: idle sockets */

#define IDLE 200

typedef struct {
    int fd[IDLE];
    const char *src;
    int port, reopened;
} s_idle_t;

static int s_idle_open(const s_idle_t *a)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    struct sockaddr_in src = {.sin_family = AF_INET};
    inet_pton(AF_INET, a->src, &src.sin_addr);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)a->port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && (bind(fd, (struct sockaddr *)&src, sizeof src) != 0 ||
                    (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0 && errno != EINPROGRESS))) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* Keep IDLE sockets open for wait_ms: each one the server closes is opened again. */
static void s_idle_keep(s_idle_t *a, int wait_ms)
{
    int64_t end = raw_ms() + wait_ms;
    do {
        struct pollfd p[IDLE];
        for (int i = 0; i < IDLE; i++) {
            if (a->fd[i] < 0 && (a->fd[i] = s_idle_open(a)) >= 0)
                a->reopened++;
            p[i] = (struct pollfd){a->fd[i], POLLIN, 0};
        }
        int left = (int)(end - raw_ms());
        if (poll(p, IDLE, left > 0 ? (left < 50 ? left : 50) : 0) > 0)
            for (int i = 0; i < IDLE; i++)
                if (p[i].revents) { /* closed by the server (or answered): again */
                    close(a->fd[i]);
                    a->fd[i] = -1;
                }
    } while (raw_ms() < end);
}

static void s_idle_close(s_idle_t *a)
{
    for (int i = 0; i < IDLE; i++)
        if (a->fd[i] >= 0)
            close(a->fd[i]);
}

static int s_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct {
    double p50, p99, max;
    int ok, n;
} s_lat_t;

/* n legit polls of GET /api/status, gap_ms apart, keeping the idle sockets (a may be NULL). */
static s_lat_t s_polls(const fx_t *f, s_idle_t *a, int n, int gap_ms)
{
    double ms[64];
    s_lat_t r = {.n = n};
    char req[512];
    snprintf(req, sizeof req, "GET /api/status HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: token %s\r\n\r\n",
             f->s.token);
    for (int i = 0; i < n && i < 64; i++) {
        char *resp = raw_request(f->port, req, 0, 5000, &ms[i], NULL);
        r.ok += raw_status(resp) == 200;
        free(resp);
        if (a)
            s_idle_keep(a, gap_ms);
        else
            usleep((useconds_t)gap_ms * 1000);
    }
    qsort(ms, (size_t)n, sizeof ms[0], s_cmp_double);
    r.p50 = ms[n / 2];
    r.p99 = ms[(n * 99) / 100 < n ? (n * 99) / 100 : n - 1];
    r.max = ms[n - 1];
    return r;
}

TEST_T(server_http_idle_sockets_do_not_starve_clients, 150)
{
    fx_t f = {0};
    if (!s_start(&f, NULL))
        goto out;
    s_lat_t base = s_polls(&f, NULL, 20, 50);
    CHECK_EQ(base.ok, base.n);
    /* from another address, then from the legit client's own */
    const char *srcs[] = {"127.0.0.2", "127.0.0.1"};
    for (int k = 0; k < 2; k++) {
        s_idle_t a = {.src = srcs[k], .port = f.port};
        for (int i = 0; i < IDLE; i++)
            a.fd[i] = -1;
        s_idle_keep(&a, 500);
        s_lat_t r = s_polls(&f, &a, 40, 150);
        fprintf(stderr,
                "  %d idle sockets from %s (reopened %d times): legit GET /api/status answered %d/%d, "
                "p50 %.1f ms, p99 %.1f ms, max %.1f ms (without them: p50 %.1f ms, max %.1f ms)\n",
                IDLE, srcs[k], a.reopened, r.ok, r.n, r.p50, r.p99, r.max, base.p50, base.max);
        s_idle_close(&a);
        CHECK_EQ(r.ok, r.n);
        CHECK_LT(r.p50, 250);
        CHECK_LT(r.max, 2000);
    }
    /* an idle socket is closed after the header deadline (5 s) */
    {
        int fd = raw_connect(f.port, "127.0.0.3");
        int64_t t0 = raw_ms();
        size_t len = 0;
        char *r = fd >= 0 ? raw_read_all(fd, 9000, &len) : NULL;
        double waited = (double)(raw_ms() - t0) / 1000.0;
        fprintf(stderr, "  an idle socket was closed after %.1f s\n", waited);
        CHECK(fd >= 0);
        CHECK(waited >= 4.5 && waited < 8.0);
        free(r);
        if (fd >= 0)
            close(fd);
    }
    /* the server counted what it did */
    char *m = s_api(&f, "GET", "/metrics", NULL, 5000);
    CHECK_CONTAINS(m ? m : "", "korch_http_connections_closed_total{reason=\"idle\"}");
    const char *line = m ? strstr(m, "korch_http_connections_closed_total{reason=\"idle\"}") : NULL;
    if (line)
        fprintf(stderr, "  %.*s\n", (int)strcspn(line, "\n"), line);
    free(m);
out:
    s_stop(&f);
}

/* --------------------------------------- 6: answers that are never written */

/* The id of the one kernel GET /api/kernels lists, within 10 s. */
static bool s_one_kernel(const fx_t *f, char *id, size_t len)
{
    for (int i = 0; i < 100; i++) {
        char *r = s_api(f, "GET", "/api/kernels", NULL, 5000);
        json_t *list = s_json(r);
        free(r);
        const char *v = json_string_value(json_object_get(json_array_get(list, 0), "id"));
        if (v)
            snprintf(id, len, "%s", v);
        json_decref(list);
        if (v)
            return true;
        usleep(100000);
    }
    return CHECK(!"no kernel listed within 10 s");
}

/* pending: the connection of a request that waits for kernel id; delete
   the kernel, the request must be answered with an error within 3 s. */
static void s_delete_answers(const fx_t *f, int pending, const char *id, const char *what)
{
    char path[128];
    snprintf(path, sizeof path, "/api/kernels/%s", id);
    int64_t t0 = raw_ms();
    int del = s_api_send(f, "DELETE", path, NULL);
    size_t len;
    char *r = pending >= 0 ? raw_read_all(pending, 10000, &len) : NULL;
    double s = (double)(raw_ms() - t0) / 1000.0;
    json_t *j = s_json(r);
    const char *msg = json_string_value(json_object_get(j, "message"));
    fprintf(stderr, "  %s: answered %d in %.2f s after the DELETE: %s\n", what, raw_status(r), s, msg ? msg : "(none)");
    CHECK(pending >= 0);
    CHECK_EQ(raw_status(r), 409);
    CHECK(msg && strstr(msg, "shut down"));
    CHECK_LT(s, 3.0);
    char *d = del >= 0 ? raw_read_all(del, 30000, &len) : NULL;
    CHECK_EQ(raw_status(d), 204);
    json_decref(j);
    free(r);
    free(d);
    if (pending >= 0)
        close(pending);
    if (del >= 0)
        close(del);
}

TEST_T(server_http_delete_answers_requests_waiting_for_the_kernel, 180)
{
    fx_t f = {0};
    char id[64];
    if (!s_start(&f, NULL))
        goto out;
    /* POST /api/kernels */
    int fd = s_api_send(&f, "POST", "/api/kernels", "{\"name\": \"slow\"}");
    if (s_one_kernel(&f, id, sizeof id))
        s_delete_answers(&f, fd, id, "POST /api/kernels");
    /* POST /api/sessions */
    fd = s_api_send(&f, "POST", "/api/sessions",
                    "{\"path\": \"a.ipynb\", \"type\": \"notebook\", \"kernel\": {\"name\": \"slow\"}}");
    if (s_one_kernel(&f, id, sizeof id))
        s_delete_answers(&f, fd, id, "POST /api/sessions");
    /* POST .../restart of a started kernel */
    char *r = s_api(&f, "POST", "/api/kernels", "{\"name\": \"slow\"}", 60000);
    CHECK_EQ(raw_status(r), 201);
    json_t *k = s_json(r);
    free(r);
    const char *kid = json_string_value(json_object_get(k, "id"));
    if (CHECK(kid)) {
        char path[128];
        snprintf(path, sizeof path, "/api/kernels/%s/restart", kid);
        fd = s_api_send(&f, "POST", path, NULL);
        usleep(500000); /* the restart is under way (the new process sleeps 3 s) */
        s_delete_answers(&f, fd, kid, "POST /api/kernels/{id}/restart");
    }
    json_decref(k);
    /* POST /api/agent/sessions (a provider that needs no key; no model is called) */
    fd = s_api_send(&f, "POST", "/api/agent/sessions", "{\"llm\": \"ollama:none\", \"kernel_name\": \"slow\"}");
    if (s_one_kernel(&f, id, sizeof id))
        s_delete_answers(&f, fd, id, "POST /api/agent/sessions");
    r = s_api(&f, "GET", "/api/agent/sessions", NULL, 5000);
    CHECK_STREQ(raw_body(r), "[]"); /* the session that never started is gone */
    free(r);
out:
    s_stop(&f);
}

/* -------------------------------------------- 9, 10: bodies and uploads */

/* An agent session on a python3 kernel: its id. */
static bool s_agent(const fx_t *f, char *id, size_t len)
{
    char *r = s_api(f, "POST", "/api/agent/sessions", "{\"llm\": \"ollama:none\"}", 60000);
    json_t *j = s_json(r);
    const char *v = json_string_value(json_object_get(j, "id"));
    bool ok = CHECK_EQ(raw_status(r), 201) && CHECK(v);
    if (ok)
        snprintf(id, len, "%s", v);
    else
        fprintf(stderr, "  POST /api/agent/sessions: %s\n", r ? r : "(nothing)");
    json_decref(j);
    free(r);
    return ok;
}

/* GET a session's file: its bytes (new) in *len. */
static char *s_get_file(const fx_t *f, const char *sid, const char *name, size_t *len)
{
    char req[1024];
    snprintf(req, sizeof req,
             "GET /api/agent/sessions/%s/files/%s HTTP/1.1\r\nHost: x\r\nAuthorization: token %s\r\n\r\n", sid, name,
             f->s.token);
    size_t rlen = 0;
    char *r = raw_request(f->port, req, 0, 30000, NULL, &rlen);
    const char *b = r ? strstr(r, "\r\n\r\n") : NULL;
    char *out = NULL;
    *len = 0;
    if (b && raw_status(r) == 200) {
        *len = rlen - (size_t)(b + 4 - r);
        out = malloc(*len + 1);
        memcpy(out, b + 4, *len);
    }
    free(r);
    return out;
}

typedef struct {
    const unsigned char *data;
    size_t len, off;
} s_src_t;

static size_t s_curl_read(char *buf, size_t size, size_t n, void *arg)
{
    s_src_t *src = arg;
    size_t want = size * n, left = src->len - src->off;
    /* uneven pieces: each becomes a chunk of its own */
    size_t take = want < left ? want : left;
    if (take > 7000 + src->off % 50000)
        take = 7000 + src->off % 50000;
    memcpy(buf, src->data + src->off, take);
    src->off += take;
    return take;
}

static size_t s_curl_sink(char *p, size_t size, size_t n, void *arg)
{
    char *b = arg;
    size_t have = strlen(b), add = size * n < 4095 - have ? size * n : 4095 - have;
    memcpy(b + have, p, add);
    b[have + add] = 0;
    return size * n;
}

/* With docker too: the spooled upload goes into the container through the engine's archive API. */
TEST_BOTH_T(server_http_chunked_put_is_read_byte_for_byte, 150)
{
    fx_t f = {0};
    char sid[64];
    unsigned char *big = NULL;
    const char *extra[] = {"--max-upload", "8388608", NULL};
    if (!s_start(&f, extra) || !s_agent(&f, sid, sizeof sid))
        goto out;
    char head[1024], req[4096];
    snprintf(head, sizeof head,
             "PUT /api/agent/sessions/%s/files/%%s HTTP/1.1\r\nHost: x\r\nAuthorization: token %s\r\n%%s\r\n", sid,
             f.s.token);
    /* by hand: sizes in hex with leading zeros, an extension, a trailer */
    snprintf(req, sizeof req, head, "c.txt", "Transfer-Encoding: chunked\r\n");
    strcat(req, "5;name=value\r\nhello\r\n1\r\n \r\n0006\r\nworld!\r\n0\r\nX-Trailer: yes\r\n\r\n");
    char *r = raw_request(f.port, req, 0, 10000, NULL, NULL);
    CHECK_EQ(raw_status(r), 201);
    CHECK_CONTAINS(raw_body(r), "\"size\":12");
    free(r);
    size_t len = 0;
    char *got = s_get_file(&f, sid, "c.txt", &len);
    CHECK(got && len == 12 && memcmp(got, "hello world!", 12) == 0);
    free(got);
    /* 5 MiB of random bytes from libcurl: chunked, with Expect: 100-continue */
    size_t big_len = 5u << 20;
    big = malloc(big_len);
    srand(9);
    for (size_t i = 0; i < big_len; i++)
        big[i] = (unsigned char)(rand() >> 7);
    CURL *c = curl_easy_init();
    char url[512], auth[300], resp[4096] = "";
    snprintf(url, sizeof url, "%sapi/agent/sessions/%s/files/data/big.bin", f.s.url, sid);
    snprintf(auth, sizeof auth, "Authorization: token %s", f.s.token);
    struct curl_slist *h = curl_slist_append(NULL, auth);
    h = curl_slist_append(h, "Transfer-Encoding: chunked");
    s_src_t src = {big, big_len, 0};
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(c, CURLOPT_READFUNCTION, s_curl_read);
    curl_easy_setopt(c, CURLOPT_READDATA, &src);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, s_curl_sink);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, resp);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 60L);
    int64_t t0 = raw_ms();
    CURLcode cc = curl_easy_perform(c);
    long code = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    fprintf(stderr, "  chunked PUT of 5 MiB (libcurl): %ld in %lld ms: %s\n", code, (long long)(raw_ms() - t0), resp);
    CHECK_EQ(cc, CURLE_OK);
    CHECK_EQ(code, 201);
    CHECK_CONTAINS(resp, "\"size\":5242880");
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    got = s_get_file(&f, sid, "data/big.bin", &len);
    CHECK_EQ(len, big_len);
    CHECK(got && len == big_len && memcmp(got, big, big_len) == 0);
    free(got);
    /* what is refused, and how */
    struct {
        const char *headers, *body;
        int status;
        const char *msg;
    } bad[] = {
        {"Transfer-Encoding: chunked\r\n", "zz\r\nhello\r\n0\r\n\r\n", 400, "chunked"},
        {"Transfer-Encoding: chunked\r\n", "5\nhello\r\n0\r\n\r\n", 400, "bare LF"},
        {"Transfer-Encoding: chunked\r\n", "3\r\nhello\r\n0\r\n\r\n", 400, "longer than its size"},
        {"Transfer-Encoding: chunked\r\n", "FFFFFFFF\r\n", 413, "over the limit"},
        {"Transfer-Encoding: gzip\r\n", "", 501, "not supported"},
        {"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n", "5\r\nhello\r\n0\r\n\r\n", 400, "both"},
        {"Content-Length: 9388608\r\n", "", 413, "over the limit"},
        {"Content-Length: 12x\r\n", "", 400, "Content-Length"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(req, sizeof req, head, "bad.txt", bad[i].headers);
        strcat(req, bad[i].body);
        r = raw_request(f.port, req, 0, 10000, NULL, NULL);
        if (!CHECK_EQ(raw_status(r), bad[i].status) || !CHECK_CONTAINS(raw_body(r), bad[i].msg))
            fprintf(stderr, "  case %zu: %s\n", i, r ? r : "(nothing)");
        free(r);
    }
    got = s_get_file(&f, sid, "bad.txt", &len);
    CHECK(!got); /* nothing was written by any of them */
    free(got);
    /* an upload to a session that does not exist is refused before its body comes */
    snprintf(req, sizeof req,
             "PUT /api/agent/sessions/nope/files/x.bin HTTP/1.1\r\nHost: x\r\nAuthorization: token %s\r\n"
             "Content-Length: 8000000\r\n\r\n",
             f.s.token);
    double ms = 0;
    r = raw_request(f.port, req, 0, 5000, &ms, NULL);
    CHECK_EQ(raw_status(r), 404);
    CHECK_LT(ms, 2000);
    free(r);
    /* a chunked JSON body on an API route */
    snprintf(req, sizeof req,
             "POST /api/sessions HTTP/1.1\r\nHost: x\r\nAuthorization: token %s\r\nTransfer-Encoding: chunked\r\n\r\n"
             "4\r\n{\"pa\r\n1b\r\nth\": \"x.ipynb\", \"type\": \"no\r\n8\r\ntebook\"}\r\n0\r\n\r\n",
             f.s.token);
    r = raw_request(f.port, req, 0, 60000, NULL, NULL);
    CHECK_EQ(raw_status(r), 201);
    CHECK_CONTAINS(raw_body(r), "\"path\":\"x.ipynb\"");
    free(r);
out:
    free(big);
    s_stop(&f);
}

static long s_status_kb(pid_t pid, const char *key)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *fp = fopen(path, "r");
    long v = -1;
    while (fp && fgets(line, sizeof line, fp))
        if (strncmp(line, key, strlen(key)) == 0)
            v = strtol(line + strlen(key), NULL, 10);
    if (fp)
        fclose(fp);
    return v;
}

#define UPLOADS 8
#define UPLOAD_MB 48

TEST_T(server_http_concurrent_uploads_bounded_rss, 240)
{
    fx_t f = {0};
    char sid[64];
    if (!s_start(&f, NULL) || !s_agent(&f, sid, sizeof sid))
        goto out;
    long base = s_status_kb(f.s.pid, "VmRSS:");
    pid_t kids[UPLOADS];
    int64_t t0 = raw_ms();
    for (int i = 0; i < UPLOADS; i++) {
        kids[i] = fork();
        if (kids[i] == 0) {
            size_t n = (size_t)UPLOAD_MB << 20;
            char head[1024];
            int hl = snprintf(head, sizeof head,
                              "PUT /api/agent/sessions/%s/files/up%d.bin HTTP/1.1\r\nHost: x\r\nAuthorization: token "
                              "%s\r\nContent-Length: %zu\r\n\r\n",
                              sid, i, f.s.token, n);
            char *chunk = malloc(1 << 20);
            memset(chunk, 'a' + i, 1 << 20);
            int fd = raw_connect(f.port, NULL);
            bool ok = fd >= 0 && raw_send_all(fd, head, (size_t)hl);
            for (size_t off = 0; ok && off < n; off += 1 << 20)
                ok = raw_send_all(fd, chunk, 1 << 20);
            char *r = ok ? raw_read_all(fd, 120000, NULL) : NULL;
            char want[64];
            snprintf(want, sizeof want, "\"size\":%zu", n);
            _exit(raw_status(r) == 201 && strstr(raw_body(r), want) ? 0 : 1);
        }
    }
    int good = 0;
    for (int i = 0; i < UPLOADS; i++) {
        int st;
        if (kids[i] > 0 && waitpid(kids[i], &st, 0) == kids[i] && WIFEXITED(st) && WEXITSTATUS(st) == 0)
            good++;
    }
    long peak = s_status_kb(f.s.pid, "VmHWM:");
    fprintf(stderr,
            "  %d concurrent uploads of %d MiB: %d stored in %.1f s; korch serve RSS %ld MiB before, peak %ld MiB "
            "(+%ld MiB)\n",
            UPLOADS, UPLOAD_MB, good, (double)(raw_ms() - t0) / 1000.0, base / 1024, peak / 1024,
            (peak - base) / 1024);
    CHECK_EQ(good, UPLOADS);
    /* one upload is mapped while it is placed, none is held in memory */
    CHECK_LT((peak - base) / 1024, UPLOAD_MB + 40);
    size_t len = 0;
    char *got = s_get_file(&f, sid, "up3.bin", &len);
    CHECK_EQ(len, (size_t)UPLOAD_MB << 20);
    CHECK(got && got[0] == 'd' && got[len - 1] == 'd');
    free(got);
out:
    s_stop(&f);
}

TEST_T(server_http_bodies_in_memory_bounded_together, 90)
{
    fx_t f = {0};
    const char *extra[] = {"--max-body-total", "1048576", NULL};
    if (!s_start(&f, extra))
        goto out;
    /* three JSON bodies of 400 kB, 300 kB of each sent: two hold 800 kB,
       the third finds the budget (1 MiB) spent as it grows */
    size_t n = 400000, half = 300000;
    char *body = malloc(n);
    memset(body, 'x', n);
    memcpy(body, "{\"a\": \"", 7);
    memcpy(body + n - 2, "\"}", 2);
    int fds[3];
    char head[512];
    int hl = snprintf(head, sizeof head,
                      "POST /api/kernels/nope/interrupt HTTP/1.1\r\nHost: x\r\nAuthorization: token %s\r\n"
                      "Content-Length: %zu\r\n\r\n",
                      f.s.token, n);
    for (int i = 0; i < 3; i++) {
        fds[i] = raw_connect(f.port, NULL);
        CHECK(fds[i] >= 0 && raw_send_all(fds[i], head, (size_t)hl) && raw_send_all(fds[i], body, half));
        usleep(200000);
    }
    size_t len;
    char *r = raw_read_all(fds[2], 5000, &len);
    CHECK_EQ(raw_status(r), 503);
    CHECK_CONTAINS(raw_body(r), "--max-body-total");
    free(r);
    /* the others go on, and once they are done the budget is back */
    for (int i = 0; i < 2; i++) {
        CHECK(raw_send_all(fds[i], body + half, n - half));
        r = raw_read_all(fds[i], 5000, &len);
        CHECK_EQ(raw_status(r), 404); /* their route: no such kernel */
        free(r);
    }
    for (int i = 0; i < 3; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    int fd = raw_connect(f.port, NULL);
    CHECK(fd >= 0 && raw_send_all(fd, head, (size_t)hl) && raw_send_all(fd, body, n));
    r = raw_read_all(fd, 5000, &len);
    CHECK_EQ(raw_status(r), 404);
    free(r);
    close(fd);
    free(body);
out:
    s_stop(&f);
}

/* ------------------------------------------------------- 11: long Origin */

TEST_T(server_http_origin_too_long_is_refused, 60)
{
    fx_t f = {0};
    if (!s_start(&f, NULL))
        goto out;
    char origin[700], req[2048];
    snprintf(origin, sizeof origin, "http://");
    memset(origin + 7, 'a', 293);
    origin[300] = 0;
    /* 300 bytes: checked (not taken for absent) and refused */
    snprintf(req, sizeof req, "GET /api/status HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nOrigin: %s\r\nAuthorization: token %s\r\n\r\n",
             f.port, origin, f.s.token);
    char *r0 = raw_request(f.port, req, 0, 5000, NULL, NULL);
    CHECK_EQ(raw_status(r0), 403);
    CHECK_CONTAINS(raw_body(r0), "origin not allowed");
    free(r0);
    /* 600 bytes: too long to check, refused as such */
    memset(origin + 7, 'a', 593);
    origin[600] = 0;
    snprintf(req, sizeof req, "GET /api/status HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nOrigin: %s\r\nAuthorization: token %s\r\n\r\n",
             f.port, origin, f.s.token);
    char *r = raw_request(f.port, req, 0, 5000, NULL, NULL);
    CHECK_EQ(raw_status(r), 403);
    CHECK_CONTAINS(raw_body(r), "Origin header too long");
    free(r);
    /* a websocket upgrade (to a kernel that does not exist: refused before that is looked at) */
    snprintf(req, sizeof req,
             "GET /api/kernels/00000000-0000-0000-0000-000000000000/channels HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
             "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
             "Sec-WebSocket-Version: 13\r\nOrigin: %s\r\nAuthorization: token %s\r\n\r\n",
             f.port, origin, f.s.token);
    r = raw_request(f.port, req, 0, 5000, NULL, NULL);
    CHECK_EQ(raw_status(r), 403);
    CHECK_CONTAINS(raw_body(r), "Origin header too long");
    free(r);
    /* an Origin of this host, with a Host too long to compare */
    char host[320];
    memset(host, 'h', 300);
    host[300] = 0;
    snprintf(req, sizeof req, "GET /api/status HTTP/1.1\r\nHost: %s\r\nOrigin: http://x\r\nAuthorization: token %s\r\n\r\n",
             host, f.s.token);
    r = raw_request(f.port, req, 0, 5000, NULL, NULL);
    CHECK_EQ(raw_status(r), 403);
    free(r);
    /* the same host's own origin still passes */
    snprintf(req, sizeof req,
             "GET /api/status HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nOrigin: http://127.0.0.1:%d\r\nAuthorization: token %s\r\n\r\n",
             f.port, f.port, f.s.token);
    r = raw_request(f.port, req, 0, 5000, NULL, NULL);
    CHECK_EQ(raw_status(r), 200);
    free(r);
out:
    s_stop(&f);
}

/* ------------------------------------------------- 12: the log, escaped */

TEST_T(server_http_client_bytes_are_escaped_in_the_log, 60)
{
    fx_t f = {0};
    if (!s_start(&f, NULL))
        goto out;
    /* URL-decoded by lws: ESC [31m, backspaces, then CR LF and a forged
       line (lws ends the URI at a decoded CR or LF) */
    const char *req = "GET /x%1b%5b31mred%08%08%0d%0aINJECTED%20line HTTP/1.1\r\nHost: x\r\n\r\n";
    char *r = raw_request(f.port, req, 0, 5000, NULL, NULL);
    CHECK_EQ(raw_status(r), 403); /* no token */
    free(r);
    /* and from an origin that is refused (a warning quotes the path) */
    r = raw_request(f.port, "GET /y%1b%5b2J HTTP/1.1\r\nHost: x\r\nOrigin: http://evil\r\n\r\n", 0, 5000, NULL, NULL);
    CHECK_EQ(raw_status(r), 403);
    free(r);
    /* a raw ESC in the path, which lws passes as it is */
    r = raw_request(f.port, "GET /z\x1b[1m\x7f HTTP/1.1\r\nHost: x\r\n\r\n", 0, 5000, NULL, NULL);
    CHECK_EQ(raw_status(r), 403);
    free(r);
    usleep(200000);
    size_t len = 0;
    char *log = serve_log_read(&f.s, &len);
    CHECK_CONTAINS(log, "403 GET /x\\x1b[31mred\\x08\\x08 ");
    CHECK_CONTAINS(log, "blocking a cross-origin request to '/y\\x1b[2J'");
    CHECK_CONTAINS(log, "403 GET /z\\x1b[1m\\x7f ");
    CHECK(!memchr(log, 0x1b, len) && !memchr(log, 0x08, len) && !memchr(log, '\r', len));
    CHECK(!strstr(log, "\nINJECTED") && strncmp(log, "INJECTED", 8) != 0);
    free(log);
out:
    s_stop(&f);
}

/* A body over --max-body sent whole, as Node's fetch or a browser sends
   it: the 413 reaches the client every time. Answered before its body, the
   connection used to close on bytes it had not read, which resets it: the
   client saw "connection reset" instead of the answer (2 in 60 of Node's
   fetch with 3 MiB here). The refused body is now read and dropped first. */
TEST_T(server_http_refused_body_gets_its_413_not_a_reset, 60)
{
    serve_t s;
    if (!serve_start(&s))
        return;
    int port = (int)strtol(strrchr(s.url, ':') + 1, NULL, 10);
    size_t n = 3u << 20;
    char *req = malloc(n + 512);
    int hl = snprintf(req, 512,
                      "POST /api/kernels HTTP/1.1\r\nHost: x\r\nAuthorization: token %s\r\n"
                      "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
                      s.token, n);
    memset(req + hl, ' ', n);
    int got = 0;
    for (int i = 0; i < 40; i++) {
        size_t len = 0;
        char *r = raw_request(port, req, (size_t)hl + n, 10000, NULL, &len);
        if (raw_status(r) == 413 && strstr(raw_body(r), "over the limit"))
            got++;
        else if (got == i)
            fprintf(stderr, "  try %d: %.200s\n", i, r ? r : "(reset: no answer)");
        free(r);
    }
    CHECK_EQ(got, 40);
    CHECK_EQ(serve_kernel_count(&s), 0);
    free(req);
    serve_stop(&s);
    unlink(s.log);
}
