/*  libFuzzer target: the whole HTTP request path of a real korch_server.
 *
 *  One korch_server (port 0, token "fuzz-token", one allowed origin) runs in
 *  this process on its korch_loop for all inputs. Each input is written as
 *  raw bytes on a new TCP connection, which is half-closed (shutdown
 *  SHUT_WR) once the server has read it and no request waits for a kernel;
 *  the loop runs until the server has closed it or 100 ms have passed (a
 *  hang inside the server is caught by libFuzzer's -timeout). So every
 *  request in the input goes through libwebsockets' HTTP parser (headers,
 *  methods, URI and query decoding, Content-Length, pipelining, upgrades),
 *  korch's Origin and token checks, the body limit and reassembly, the JSON
 *  body parse and the routing and handlers of api.c (and agents.c,
 *  metrics.c), and websocket frames after an upgrade.
 *
 *  Kernels: the server's launcher is a fake whose "kernel" lives in this
 *  process, on the same loop: ZeroMQ sockets bound where korch connects,
 *  answering every *_request with a signed ok reply and busy/idle on IOPub,
 *  and "exiting" on shutdown_request. So kernel starts, restarts,
 *  interrupts, deletes, sessions and the channels websocket all run for
 *  real, and no process is ever spawned. A fixed kernel and a session on it
 *  exist for every input: KID_MARK and SID_MARK (uuid-shaped) in the input
 *  are replaced by their ids, so kernel-specific routes are reached. After
 *  each input, kernels and sessions the input made are deleted (and the
 *  fixed ones made again if it deleted them), so inputs do not depend on
 *  each other. Agent sessions are created when an input names a provider
 *  that needs no key (ollama; nothing listens on its port here, so a turn
 *  fails to reach it) and deleted after the input. libwebsockets itself is
 *  not instrumented, so coverage guides the fuzzer through korch's code only.
 *
 *  Checked for every response the server sends: a well-formed status line
 *  and header block, a JSON body that parses, {"message": "..."} on every
 *  error, no 5xx but 501 for a session of an unknown kernelspec or a
 *  transfer coding other than chunked, the agent API's 503 "no LLM
 *  configured" and the 503 of the request-body budget, and one response
 *  per connection. Request bodies come with a Content-Length or chunked
 *  (body.c decodes them); uploads are spooled under the agent dir.
 */
#include "server_int.h" /* white-box: to clean up between inputs */
#include "korch/korch.h"
#include "korch/launcher.h"
#include "../../src/launcher/backend.h" /* the fake is a backend */
#include "korch/loop.h"
#include "korch/server.h"
#include "korch/session.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ftw.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <unistd.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define REQUIRE(c)                                                                                       \
    do {                                                                                                 \
        if (!(c)) {                                                                                      \
            fprintf(stderr, "fuzz_http: property failed: %s (%s:%d)\n", #c, __FILE__, __LINE__);         \
            abort();                                                                                     \
        }                                                                                                \
    } while (0)

#define TOKEN "fuzz-token"
#define MAX_RESPONSE (4 << 20)
/* Most connections are closed by the server at once after the half-close;
   lws keeps some (a request still being parsed, a pipeline it has not
   caught up with) until its own timeout: stop waiting for those. A server
   that spins instead is caught by libFuzzer's -timeout. */
#define WAIT_MS 100

static korch_loop_t *s_loop;
static korch_server_t *s_srv;
static int s_port;

/* ------------------------------------------- a kernel inside this process */

typedef struct {
    korch_proc_t base;              /* first: what the launcher API sees */
    korch_session_t *session;       /* signs with the connection's key */
    zsock_t *sock[KORCH_CH__COUNT]; /* bound where korch connects */
    bool alive;
    int count;                      /* execution_count */
} s_fake_t;

static void s_fake_exit(s_fake_t *fk)
{
    if (!fk->alive)
        return;
    fk->alive = false;
    korch_backend_exited(&fk->base, "exited 0");
}

/* Publish status busy/idle for parent on IOPub. */
static void s_fake_status(s_fake_t *fk, const korch_msg_t *parent, const char *state)
{
    korch_msg_t *m = korch_msg_new_reply(parent, "status", json_pack("{s:s}", "execution_state", state));
    if (!m)
        return;
    zmsg_addstr(m->identities, "kernel.fuzz.status");
    korch_session_send(fk->session, fk->sock[KORCH_CH_IOPUB], &m, NULL);
}

/* shell and control: every *_request gets an ok *_reply, between busy and idle */
static int s_fake_on_request(korch_loop_t *loop, zsock_t *sock, void *arg)
{
    s_fake_t *fk = arg;
    zmsg_t *frames = zmsg_recv(sock);
    korch_msg_t *req = NULL;
    korch_reject_t why;
    if (!frames || korch_session_deserialize(fk->session, &frames, &req, &why, NULL) != KORCH_OK)
        return 0;
    const char *type = korch_msg_type(req);
    size_t tlen = strlen(type);
    bool shutdown = strcmp(type, "shutdown_request") == 0;
    s_fake_status(fk, req, "busy");
    if (tlen > 8 && tlen < 64 && strcmp(type + tlen - 8, "_request") == 0) {
        char rtype[64];
        snprintf(rtype, sizeof rtype, "%.*s_reply", (int)(tlen - 8), type);
        json_t *content;
        if (strcmp(type, "kernel_info_request") == 0)
            content = json_pack("{s:s, s:s, s:s, s:s, s:{s:s, s:s, s:s}, s:s, s:[]}", "status", "ok",
                                "protocol_version", "5.3", "implementation", "fuzz", "implementation_version",
                                "1", "language_info", "name", "python", "version", "3", "file_extension", ".py",
                                "banner", "a fake kernel", "help_links");
        else if (strcmp(type, "execute_request") == 0)
            content = json_pack("{s:s, s:i, s:{}}", "status", "ok", "execution_count", ++fk->count,
                                "user_expressions");
        else if (shutdown)
            content = json_pack("{s:s, s:O}", "status", "ok", "restart",
                                json_object_get(req->content, "restart") ? json_object_get(req->content, "restart")
                                                                         : json_false());
        else
            content = json_pack("{s:s}", "status", "ok");
        korch_msg_t *rep = korch_msg_new_reply(req, rtype, content);
        if (rep) {
            zmsg_destroy(&rep->identities);
            rep->identities = zmsg_dup(req->identities);
            if (rep->identities)
                korch_session_send(fk->session, sock, &rep, NULL);
            korch_msg_destroy(&rep);
        }
    }
    s_fake_status(fk, req, "idle");
    korch_msg_destroy(&req);
    if (shutdown)
        s_fake_exit(fk);
    return 0;
}

static int s_fake_on_hb(korch_loop_t *loop, zsock_t *sock, void *arg)
{
    zmsg_t *m = zmsg_recv(sock);
    if (m)
        zmsg_send(&m, sock);
    return 0;
}

static int s_fake_on_stdin(korch_loop_t *loop, zsock_t *sock, void *arg)
{
    zmsg_t *m = zmsg_recv(sock); /* input replies: nobody asked */
    zmsg_destroy(&m);
    return 0;
}

static void s_fake_free(korch_proc_t *proc)
{
    s_fake_t *fk = (s_fake_t *)proc;
    for (int ch = 0; ch < KORCH_CH__COUNT; ch++)
        if (fk->sock[ch]) {
            korch_loop_reader_end(s_loop, fk->sock[ch]);
            zsock_destroy(&fk->sock[ch]);
        }
    korch_session_destroy(&fk->session);
    free(fk);
}

static korch_rc_t s_fake_start(korch_launcher_t *self, const korch_launch_t *req, korch_op_t *op, korch_err_t *err)
{
    static const int types[KORCH_CH__COUNT] = {[KORCH_CH_SHELL] = ZMQ_ROUTER, [KORCH_CH_IOPUB] = ZMQ_PUB,
                                               [KORCH_CH_STDIN] = ZMQ_ROUTER, [KORCH_CH_CONTROL] = ZMQ_ROUTER,
                                               [KORCH_CH_HB] = ZMQ_REP};
    static korch_reader_fn *const readers[KORCH_CH__COUNT] = {
        [KORCH_CH_SHELL] = s_fake_on_request, [KORCH_CH_STDIN] = s_fake_on_stdin,
        [KORCH_CH_CONTROL] = s_fake_on_request, [KORCH_CH_HB] = s_fake_on_hb};
    s_fake_t *fk = korch_backend_proc_new(self, sizeof *fk, req);
    if (!fk)
        return korch_err_set(err, KORCH_E_NOMEM, "out of memory");
    korch_session_limits_t lim = {.digest_history = 64};
    fk->session = korch_session_new(req->conn->key, strlen(req->conn->key), "fuzz-kernel", &lim, NULL);
    if (!fk->session)
        goto fail;
    for (int ch = 0; ch < KORCH_CH__COUNT; ch++) {
        char ep[PATH_MAX + 16];
        korch_conn_endpoint(req->conn, (korch_channel_t)ch, ep, sizeof ep);
        fk->sock[ch] = zsock_new(types[ch]);
        if (!fk->sock[ch] || zsock_bind(fk->sock[ch], "%s", ep) == -1)
            goto fail;
        if (readers[ch] && korch_loop_reader(s_loop, fk->sock[ch], readers[ch], fk) != 0)
            goto fail;
    }
    fk->alive = true;
    korch_op_finish_proc(op, &fk->base, KORCH_OK, NULL);
    return KORCH_OK;
fail:
    s_fake_free(&fk->base);
    return korch_err_set(err, KORCH_E_LAUNCH, "fuzz_http: the fake kernel cannot bind its sockets");
}

static korch_rc_t s_fake_signal(korch_proc_t *proc, int sig, korch_op_t *op, korch_err_t *err)
{
    if (sig == SIGTERM || sig == SIGKILL)
        s_fake_exit((s_fake_t *)proc);
    korch_op_finish(op, KORCH_OK, NULL); /* SIGINT: nothing runs, nothing to interrupt */
    return KORCH_OK;
}

static korch_rc_t s_fake_kill(korch_proc_t *proc, korch_op_t *op, korch_err_t *err)
{
    s_fake_exit((s_fake_t *)proc);
    return KORCH_OK;
}

static const char *s_fake_log_tail(korch_proc_t *proc) { return ""; }
static void s_fake_launcher_free(korch_launcher_t *self) {}

/* The kernel's work dir: files are taken and dropped, none can be read. */
static korch_rc_t s_fake_put_now(korch_proc_t *proc, const char *name, const void *data, size_t len,
                                 korch_err_t *err)
{
    return KORCH_OK;
}

static korch_rc_t s_fake_get_now(korch_proc_t *proc, const char *name, size_t max, char **data, size_t *len,
                                 korch_err_t *err)
{
    return korch_err_set(err, KORCH_E_NOTFOUND, "no file '%s' in the fake kernel's work dir", name);
}

static korch_rc_t s_fake_put_file(korch_proc_t *proc, const char *name, const void *data, size_t len,
                                  korch_op_t *op, korch_err_t *err)
{
    korch_op_finish(op, KORCH_OK, NULL);
    return KORCH_OK;
}

static korch_rc_t s_fake_get_file(korch_proc_t *proc, const char *name, size_t max, korch_op_t *op,
                                  korch_err_t *err)
{
    korch_err_t e = {0};
    korch_op_finish_file(op, NULL, 0, s_fake_get_now(proc, name, max, NULL, NULL, &e), &e);
    return KORCH_OK;
}

static const korch_launcher_ops_t s_fake_ops = {
    .name = "fuzz-fake",
    .caps = KORCH_LAUNCHER_HOST_FILES,
    .transport = "ipc",
    .start = s_fake_start,
    .signal = s_fake_signal,
    .kill = s_fake_kill,
    .log_tail = s_fake_log_tail,
    .proc_free = s_fake_free,
    .free = s_fake_launcher_free,
    .put_file = s_fake_put_file,
    .get_file = s_fake_get_file,
    .put_file_now = s_fake_put_now,
    .get_file_now = s_fake_get_now,
};
static korch_launcher_t s_fake; /* korch_backend_launcher_init once the loop exists */

/* ------------------------------------------------------- one connection */

typedef struct {
    int fd;
    bool closed;                /* the server closed (EOF or reset) */
    int64_t deadline;
    char *resp;                 /* everything the server sent, NUL-terminated */
    size_t len, cap;
} s_conn_t;

static int s_on_readable(korch_loop_t *loop, int fd, void *arg)
{
    s_conn_t *c = arg;
    for (;;) {
        if (c->cap - c->len < 4096) {
            size_t cap = c->cap ? c->cap * 2 : 16384;
            REQUIRE(cap <= MAX_RESPONSE);
            char *n = realloc(c->resp, cap);
            REQUIRE(n);
            c->resp = n;
            c->cap = cap;
            c->resp[c->len] = 0;
        }
        ssize_t n = recv(fd, c->resp + c->len, c->cap - c->len - 1, 0);
        if (n > 0) {
            c->len += (size_t)n;
            c->resp[c->len] = 0;
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return 0;
        c->closed = true; /* EOF or ECONNRESET */
        return -1;
    }
}

static bool s_done(void *arg)
{
    s_conn_t *c = arg;
    return c->closed || korch_now_ms() >= c->deadline;
}

static int s_on_deadline(korch_loop_t *loop, int id, void *arg) { return -1; }

static bool s_one_round(void *arg)
{
    int *rounds = arg;
    return (*rounds)++ > 0;
}

/* Is a request waiting for a kernel (to be ready, or gone)? */
static void s_count_waits(srv_kernel_t *mk, void *arg) { *(size_t *)arg += zlistx_size(mk->waits); }

static bool s_waiting(void)
{
    srv_kmgr_t *m = srv_parts(s_srv)->kmgr;
    if (srv_kmgr_has_doomed(m))
        return true;
    size_t waits = 0;
    srv_kmgr_foreach(m, s_count_waits, &waits);
    return waits > 0;
}

static bool s_settled(void *arg) { return s_done(arg) || !s_waiting(); }

/* Write data on a new connection, run the server until it closes the
   connection or wait_ms pass. With half_close, shut our side down once the
   server has read it all and no request waits for a kernel: a request still
   incomplete then ends at once. Returns what came back (new, NUL-terminated,
   maybe ""), its length in *len. */
static char *s_exchange(const void *data, size_t size, bool half_close, int wait_ms, size_t *len)
{
    s_conn_t c = {.fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)};
    REQUIRE(c.fd >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)s_port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    /* libFuzzer's SIGALRM (its -timeout watchdog, no SA_RESTART) can land in a
       blocking connect: EINTR, and the connection goes on being made (POSIX) */
    int crc = connect(c.fd, (struct sockaddr *)&sa, sizeof sa);
    if (crc != 0 && errno == EINTR) {
        struct pollfd pfd = {.fd = c.fd, .events = POLLOUT};
        int prc;
        while ((prc = poll(&pfd, 1, 10000)) < 0 && errno == EINTR)
            ;
        int soerr = prc == 1 ? 0 : ETIMEDOUT;
        socklen_t sl = sizeof soerr;
        if (prc == 1)
            getsockopt(c.fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
        crc = soerr ? -1 : 0;
        errno = soerr;
    }
    if (crc != 0) {
        fprintf(stderr, "fuzz_http: connect to the server: %s\n", strerror(errno));
        REQUIRE(!"connect");
    }
    fcntl(c.fd, F_SETFL, fcntl(c.fd, F_GETFL) | O_NONBLOCK);
    REQUIRE(korch_loop_poller(s_loop, c.fd, s_on_readable, &c) == 0);
    c.deadline = korch_now_ms() + wait_ms;
    int timer = korch_loop_timer(s_loop, wait_ms, 1, s_on_deadline, NULL);
    /* write it all (the server reads as the loop runs), then half-close */
    size_t off = 0;
    while (off < size && !c.closed && korch_now_ms() < c.deadline) {
        ssize_t n = send(c.fd, (const char *)data + off, size - off, MSG_NOSIGNAL);
        if (n > 0)
            off += (size_t)n;
        else if (n < 0 && errno != EAGAIN && errno != EINTR)
            break; /* the server closed early (e.g. 413 on the headers) */
        else
            korch_loop_run(s_loop, NULL, NULL, 5); /* let the server read */
    }
    if (half_close) {
        int rounds = 0;
        korch_loop_run(s_loop, s_one_round, &rounds, 5); /* the server reads it */
        korch_server_run(s_srv, s_settled, &c);         /* kernel starts, restarts... */
        shutdown(c.fd, SHUT_WR);
    }
    korch_server_run(s_srv, s_done, &c);
    korch_loop_timer_end(s_loop, timer);
    korch_loop_poller_end(s_loop, c.fd);
    close(c.fd);
    *len = c.len;
    return c.resp ? c.resp : calloc(1, 1);
}

/* Check the response in p: status line, headers, a JSON body, and nothing
   after it (one request per connection). */
static void s_check_response(const char *p, size_t len)
{
    /* the interim answer to "Expect: 100-continue" (RFC 9110 15.2.1) may come first */
    static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
    if (len >= sizeof cont - 1 && memcmp(p, cont, sizeof cont - 1) == 0) {
        p += sizeof cont - 1;
        len -= sizeof cont - 1;
    }
    const char *end = len ? memmem(p, len, "\r\n\r\n", 4) : NULL;
    if (!end)
        return; /* nothing, or a response cut by the close */
    size_t hlen = (size_t)(end - p) + 4;
    REQUIRE(len >= 12 && memcmp(p, "HTTP/1.", 7) == 0);
    int status = (p[9] - '0') * 100 + (p[10] - '0') * 10 + (p[11] - '0');
    REQUIRE(status >= 100 && status <= 599);
    /* headers, lowercase names as lws writes them */
    char head[16384];
    size_t n = hlen < sizeof head - 1 ? hlen : sizeof head - 1;
    memcpy(head, p, n);
    head[n] = 0;
    for (char *q = head; *q; q++)
        if (*q >= 'A' && *q <= 'Z')
            *q = (char)(*q - 'A' + 'a');
    const char *cl = strstr(head, "\r\ncontent-length:");
    size_t body_len = cl ? strtoul(cl + 17, NULL, 10) : 0;
    bool json = strstr(head, "\r\ncontent-type: application/json") != NULL;
    if (status == 101 || (!cl && status != 204 && status != 304))
        return; /* an upgrade, a stream or a close-delimited body */
    if (hlen + body_len > len)
        return; /* cut */
    const char *body = p + hlen;
    if (json && body_len) {
        json_error_t jerr;
        json_t *j = json_loadb(body, body_len, 0, &jerr);
        if (!j)
            fprintf(stderr, "fuzz_http: bad JSON body (%s): %.*s\n", jerr.text, (int)body_len, body);
        REQUIRE(j);
        if (status >= 400) {
            const char *msg = json_string_value(json_object_get(j, "message"));
            if (!msg)
                fprintf(stderr, "fuzz_http: error %d without a message: %.*s\n", status, (int)body_len, body);
            REQUIRE(msg);
            /* the only server errors expected: jupyter_server's 501 for a
               session of an unknown kernelspec, the agent API's 503 */
            bool expected = status < 500 ||
                            (status == 501 && (strstr(msg, "no kernelspec named") || strstr(msg, "Transfer-Encoding"))) ||
                            (status == 503 && (strstr(msg, "LLM") || strstr(msg, "request bodies")));
            if (!expected)
                fprintf(stderr, "fuzz_http: unexpected %d: %s\n", status, msg);
            REQUIRE(expected);
        }
        json_decref(j);
    } else if (status >= 400 && status != 404 && status != 405)
        /* lws's own answers (400 on a malformed request line, 431 ...)
           are fine; korch's errors are always JSON */
        REQUIRE(status < 500);
    if (hlen + body_len < len)
        fprintf(stderr, "fuzz_http: more after the response: %.*s\n", (int)(len - hlen - body_len > 200 ? 200 : len - hlen - body_len), p + hlen + body_len);
    REQUIRE(hlen + body_len == len);
}

/* ------------------------------------------- a kernel and a session to use */

static char s_kid[64], s_sid[64];

/* A JSON request from the harness itself; the response body's "id" into id. */
static void s_request_id(const char *method, const char *path, const char *body, char *id, size_t idlen)
{
    char req[2048];
    int n = snprintf(req, sizeof req,
                     "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: token " TOKEN
                     "\r\nContent-Length: %zu\r\n\r\n%s",
                     method, path, strlen(body), body);
    size_t len;
    char *resp = s_exchange(req, (size_t)n, false, 10000, &len);
    const char *b = strstr(resp, "\r\n\r\n");
    json_t *j = b ? json_loads(b + 4, 0, NULL) : NULL;
    const char *v = json_string_value(json_object_get(j, "id"));
    if (!v)
        fprintf(stderr, "fuzz_http: %s %s: %s\n", method, path, resp);
    REQUIRE(v);
    snprintf(id, idlen, "%s", v);
    json_decref(j);
    free(resp);
}

static bool s_true(void *arg) { return true; }

/* The deleted agent sessions' threads have ended. */
static bool s_agents_closed(void *arg) { return srv_agents_closing(srv_parts(s_srv)->agents) == 0; }

/* Back to the state every input starts from: the fixed kernel (idle) and
   the fixed session on it, and nothing else. */
/* GET list_path, DELETE item_prefix{id} for every id in it (the array
   itself, or under key), except keep. */
static void s_delete_all(const char *list_path, const char *item_prefix, const char *key, const char *keep)
{
    char req[512];
    int n = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: x\r\nAuthorization: token " TOKEN "\r\n\r\n",
                     list_path);
    size_t len;
    char *resp = s_exchange(req, (size_t)n, false, 10000, &len);
    const char *b = strstr(resp, "\r\n\r\n");
    json_t *j = b ? json_loads(b + 4, 0, NULL) : NULL;
    json_t *arr = key ? json_object_get(j, key) : j;
    size_t i;
    json_t *it;
    json_array_foreach(arr, i, it) {
        const char *id = json_string_value(json_object_get(it, "id"));
        if (!id || (keep && strcmp(id, keep) == 0))
            continue;
        n = snprintf(req, sizeof req, "DELETE %s%s HTTP/1.1\r\nHost: x\r\nAuthorization: token " TOKEN "\r\n\r\n",
                     item_prefix, id);
        if (n > 0 && (size_t)n < sizeof req)
            free(s_exchange(req, (size_t)n, false, 10000, &len));
    }
    json_decref(j);
    free(resp);
}

/* Does session sid exist, on kernel kid? */
static bool s_session_on(const char *sid, const char *kid)
{
    char req[512];
    int n = snprintf(req, sizeof req, "GET /api/sessions/%s HTTP/1.1\r\nHost: x\r\nAuthorization: token " TOKEN "\r\n\r\n",
                     sid);
    size_t len;
    char *resp = s_exchange(req, (size_t)n, false, 10000, &len);
    const char *b = strstr(resp, "\r\n\r\n");
    json_t *j = b && strncmp(resp, "HTTP/1.1 200", 12) == 0 ? json_loads(b + 4, 0, NULL) : NULL;
    const char *k = json_string_value(json_object_get(json_object_get(j, "kernel"), "id"));
    bool on = k && strcmp(k, kid) == 0;
    json_decref(j);
    free(resp);
    return on;
}

static void s_reset(void)
{
    /* agent sessions (an input may name a provider that needs no key) and
       sessions: through the API, which ends their threads */
    s_delete_all("/api/agent/sessions", "/api/agent/sessions/", NULL, NULL);
    /* ... and waits for those threads: one still attaching to its kernel
       when the next input runs (or libFuzzer exits) is another input's */
    korch_loop_run(s_loop, s_agents_closed, NULL, 10000);
    REQUIRE(srv_agents_closing(srv_parts(s_srv)->agents) == 0);
    s_delete_all("/api/sessions", "/api/sessions/", NULL, s_sid);
    srv_kmgr_t *m = srv_parts(s_srv)->kmgr;
    zlistx_t *others = zlistx_new();
    zlistx_t *all = srv_kmgr_list(m);
    for (srv_kernel_t *mk = all ? zlistx_first(all) : NULL; mk; mk = zlistx_next(all))
        if (strcmp(mk->id, s_kid) != 0)
            zlistx_add_end(others, mk);
    zlistx_destroy(&all);
    for (srv_kernel_t *mk = zlistx_first(others); mk; mk = zlistx_next(others))
        srv_kmgr_delete(mk);
    zlistx_destroy(&others);
    korch_server_run(s_srv, s_true, NULL); /* destroys the deleted kernels */
    /* the fixed kernel: restarted by the input? let it come back */
    srv_kernel_t *mk = srv_kmgr_find(m, s_kid);
    int64_t until = korch_now_ms() + 2000;
    while (mk && korch_kernel_state(mk->k) != KORCH_KERNEL_IDLE && korch_now_ms() < until) {
        korch_loop_run(s_loop, NULL, NULL, 10);
        mk = srv_kmgr_find(m, s_kid);
    }
    if (!mk || korch_kernel_state(mk->k) != KORCH_KERNEL_IDLE) {
        if (mk) {
            srv_kmgr_delete(mk);
            korch_server_run(s_srv, s_true, NULL);
        }
        s_request_id("POST", "/api/kernels", "{\"name\": \"python3\"}", s_kid, sizeof s_kid);
    }
    if (!s_session_on(s_sid, s_kid)) {
        char body[256];
        snprintf(body, sizeof body, "{\"path\": \"fuzz.ipynb\", \"type\": \"notebook\", \"kernel\": {\"id\": \"%s\"}}",
                 s_kid);
        s_request_id("POST", "/api/sessions", body, s_sid, sizeof s_sid);
    }
}

/* At exit: the server, its kernels and the fake ones, so that czmq finds
   no socket left open. */
static char s_tmp[PATH_MAX]; /* $TMPDIR/korch-fuzz-http-XXXXXX: runtime and agent dirs */

static int s_rm(const char *path, const struct stat *st, int flag, struct FTW *ftw) { return remove(path); }

static void s_teardown(void)
{
    korch_server_destroy(&s_srv);
    /* the fake is static (its free does nothing), but what its kernels'
       teardown queued on the launcher's worker (korch_launcher_remove_dir)
       is finished, and the worker joined, only by korch_launcher_destroy */
    korch_launcher_t *fake = s_loop ? &s_fake : NULL;
    korch_launcher_destroy(&fake);
    korch_loop_destroy(&s_loop);
    if (s_tmp[0])
        nftw(s_tmp, s_rm, 16, FTW_DEPTH | FTW_PHYS);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    /* quiet, and nothing from the environment that would reach out */
    setenv("KORCH_LOG", getenv("FUZZ_HTTP_LOG") ? getenv("FUZZ_HTTP_LOG") : "error", 1);
    static const char *const reach_out[] = {"KORCH_LLM",         "OPENAI_API_KEY",   "ANTHROPIC_API_KEY",
                                            "OPENAI_BASE_URL",   "ANTHROPIC_BASE_URL", "OLLAMA_HOST",
                                            "JUPYTER_PATH"};
    for (size_t i = 0; i < sizeof reach_out / sizeof reach_out[0]; i++)
        unsetenv(reach_out[i]);
    /* the repository's kernelspecs (build-fuzz/fuzz/fuzz_http -> kernelspec/) */
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 32);
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) {
            snprintf(slash, sizeof exe - (size_t)(slash - exe), "/../../kernelspec");
            if (access(exe, R_OK) == 0)
                setenv("KORCH_KERNELSPEC_PATH", exe, 1);
        }
    }
    const char *tmpdir = getenv("TMPDIR");
    snprintf(s_tmp, sizeof s_tmp, "%s/korch-fuzz-http-XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp");
    char *tmp = s_tmp;
    if (!mkdtemp(tmp)) {
        perror("fuzz_http: mkdtemp");
        exit(1);
    }
    setenv("KORCH_RUNTIME_DIR", tmp, 1);
    korch_init();
    s_loop = korch_loop_new();
    if (s_loop)
        korch_backend_launcher_init(&s_fake, &s_fake_ops, s_loop);
    static const char *const origins[] = {"https://allowed.example", NULL};
    static char agent_dir[PATH_MAX + 8];
    snprintf(agent_dir, sizeof agent_dir, "%s/agents", tmp);
    korch_server_opts_t o = {
        .ip = "127.0.0.1",
        .port = 0,
        .token = TOKEN,
        .launcher = &s_fake,
        .max_kernels = 3,
        .allow_origins = origins,
        .max_body = 8192,
        .no_access_log = true,
        .agent_dir = agent_dir,
        .kernel_start_timeout_ms = 2000,
    };
    korch_err_t err = {0};
    s_srv = s_loop ? korch_server_new(s_loop, &o, &err) : NULL;
    if (!s_srv) {
        fprintf(stderr, "fuzz_http: cannot start the server: %s\n", err.msg);
        exit(1);
    }
    s_port = korch_server_port(s_srv);
    s_reset();
    atexit(s_teardown);
    return 0;
}

/* The input with the placeholders replaced by the fixed kernel's and
   session's ids: uuid-shaped, so lengths (and Content-Length) stay right. */
#define KID_MARK "kkkkkkkk-kkkk-kkkk-kkkk-kkkkkkkkkkkk"
#define SID_MARK "ssssssss-ssss-ssss-ssss-ssssssssssss"

static char *s_substitute(const uint8_t *data, size_t size)
{
    char *out = malloc(size + 1);
    REQUIRE(out);
    memcpy(out, data, size);
    out[size] = 0;
    REQUIRE(strlen(s_kid) == 36 && strlen(s_sid) == 36);
    for (size_t i = 0; i + 36 <= size; i++)
        if (memcmp(out + i, KID_MARK, 36) == 0)
            memcpy(out + i, s_kid, 36);
        else if (memcmp(out + i, SID_MARK, 36) == 0)
            memcpy(out + i, s_sid, 36);
    return out;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t rlen;
    int64_t t0 = korch_now_ms();
    char *req = s_substitute(data, size);
    char *resp = s_exchange(req, size, true, WAIT_MS, &rlen);
    int64_t t1 = korch_now_ms();
    s_check_response(resp, rlen);
    s_reset();
    if (getenv("FUZZ_HTTP_SHOW")) /* to see what an input gets, and how long it takes */
        fprintf(stderr, "---- %zu bytes back in %lld ms (+%lld ms to clean up):\n%.*s\n----\n", rlen,
                (long long)(t1 - t0), (long long)(korch_now_ms() - t1), (int)rlen, resp);
    free(resp);
    free(req);
    return 0;
}
