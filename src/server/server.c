/*  korch_server: libwebsockets on a libuv loop embedded in korch's loop;
 *  HTTP requests and websocket connections.
 *
 *  Loop integration. Debian's libwebsockets 4.1.6 is built without
 *  LWS_WITH_EXTERNAL_POLL (no ADD_POLL_FD callbacks), but with libuv as an
 *  event-library plugin, and libuv is made to be embedded: uv_backend_fd()
 *  is an epoll fd that is readable whenever one of its watchers is ready,
 *  and uv_backend_timeout() is the wait until its next timer. So lws runs
 *  on a private uv_loop_t whose backend fd is one more korch_loop poller,
 *  its timeout one korch timer, and uv_run(UV_RUN_NOWAIT) services it. One
 *  subtlety: libuv applies watcher changes (lws_callback_on_writable) only
 *  inside uv_run, so whoever asks lws for a write also schedules a "kick"
 *  (a 0 ms korch timer that runs uv_run once more, in the same round).
 *
 *  Requests. A connection is admitted by conns.c (limits per address,
 *  a header deadline, idle ones closed first). A request is parsed by lws;
 *  korch checks the Origin, the token (constant time), the body's framing
 *  and size, reads the body as it comes (body.c: bounded one by one and all
 *  together, chunked decoded, uploads spooled to disk), then routes it
 *  (api.c). Handlers answer at once or later (a kernel start waits for the
 *  kernel to be ready); the response is written from lws's writable
 *  callback, which every response asks for (s_wake) unless it answers the
 *  request being handled in its own callback. One access-log line per
 *  request on stderr, the client's path escaped.
 *
 *  Websockets. /api/kernels/{id}/channels; the subprotocol
 *  v1.kernel.websocket.jupyter.org is chosen when offered, else the
 *  legacy format. Messages are reassembled up to max_ws_message; frames for
 *  the client wait in a bounded queue (max_ws_queue bytes) and a client
 *  that lets it overflow is dropped.
 */
#include "server_int.h"
#include "trace.h"
#include "korch/path.h"
#include "korch/fsutil.h"
#include "korch/log.h"
#include "korch/session.h"
#include "korch/uuid.h"

#include <libwebsockets.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

struct korch_server {
    srv_parts_t parts;              /* first: what it made, for the handlers (srv_parts) */
    korch_server_opts_t opts;
    srv_metrics_t metrics;
    char started[32];
    char last_activity[32];         /* of requests and websockets (kernels keep their own) */
    uint64_t ws_seq;
    korch_loop_t *loop;
    char token[80];
    char ip[64];
    char kernel[128];
    char **origins;                 /* NULL-terminated copy */
    uv_loop_t uv;
    bool uv_ok;
    struct lws_context *ctx;
    int port;
    int uv_fd;
    int uv_timer, kick_timer;
    srv_http_t http;                /* what requests and websockets need of it (http.c) */
    bool closing;
    srv_budget_t body_mem;          /* request bodies in memory (opts.max_body_total) */
    srv_budget_t body_disk;         /* uploads being spooled (opts.max_upload_total) */
    int spool_fd;                   /* opts.agent_dir/.uploads, opened on first use; -1 before */
    unsigned char *scratch;         /* LWS_PRE + WS_CHUNK: a fragment of a big message being written */
};

typedef struct {
    srv_req_t *req;                 /* HTTP: the current request */
    srv_ws_t *ws;                   /* websocket: the connection */
    bool answered;                  /* a response is out: the connection closes (s_finish) */
} s_pss_t;

static void s_kick(korch_server_t *s);
static void s_kick_cb(void *arg) { s_kick(arg); }

_Static_assert(offsetof(struct korch_server, parts) == 0, "srv_parts reads the parts at the server's start");
int korch_server_port(const korch_server_t *s) { return s->port; }
const char *korch_server_token(const korch_server_t *s) { return s->token; }


static void s_touch(korch_server_t *s) { korch_iso8601_now(s->last_activity); }


/* ------------------------------------------------------------- libuv glue */

static int s_on_uv_timer(korch_loop_t *loop, int id, void *arg);

/* Service lws: one non-blocking libuv iteration, then re-arm the timer. */
static void s_uv_service(korch_server_t *s)
{
    if (!s->uv_ok)
        return;
    uv_run(&s->uv, UV_RUN_NOWAIT);
    if (s->uv_timer >= 0)
        korch_loop_timer_end(s->loop, s->uv_timer);
    s->uv_timer = -1;
    int t = uv_backend_timeout(&s->uv);
    if (t >= 0)
        s->uv_timer = korch_loop_timer(s->loop, t > 1000 ? 1000 : t, 1, s_on_uv_timer, s);
}

static int s_on_uv_timer(korch_loop_t *loop, int id, void *arg)
{
    korch_server_t *s = arg;
    s->uv_timer = -1;
    s_uv_service(s);
    return 0;
}

static int s_on_uv_fd(korch_loop_t *loop, int fd, void *arg)
{
    s_uv_service(arg);
    return 0;
}

static int s_on_kick(korch_loop_t *loop, int id, void *arg)
{
    korch_server_t *s = arg;
    s->kick_timer = -1;
    s_uv_service(s);
    return 0;
}

static void s_kick(korch_server_t *s)
{
    if (s->kick_timer < 0 && s->uv_ok)
        s->kick_timer = korch_loop_timer(s->loop, 0, 1, s_on_kick, s);
}

/* ------------------------------------------------------------- requests */

/* Write status, headers and body; "connection: close" always (see
   s_finish). allow: a 405's Allow header (RFC 9110 15.5.6: "The origin
   server MUST generate an Allow header field in a 405 response"), or
   NULL. file: a kernel's or a user's file (download.c), or NULL. Returns
   -1 when the connection must close. */
static int s_write_response(struct lws *wsi, int status, const char *ctype, const char *body, size_t len,
                            const char *location, const char *origin, bool page, const char *allow,
                            const srv_req_t *file)
{
    if (!ctype || !*ctype)
        ctype = "application/json";
    const char *disposition = file && file->file ? file->disposition : NULL;
    size_t cap = LWS_PRE + 1024 + (disposition ? strlen(disposition) + 128 : 0) + (len == (size_t)-1 ? 0 : len);
    unsigned char *buf = malloc(cap);
    if (!buf)
        return -1;
    unsigned char *start = buf + LWS_PRE, *p = start, *end = buf + cap - 1;
    int rc = -1;
    if (lws_add_http_header_status(wsi, (unsigned)status, &p, end))
        goto out;
    if (status != 204) {
        if (lws_add_http_header_by_token(wsi, WSI_TOKEN_HTTP_CONTENT_TYPE, (const unsigned char *)ctype,
                                         (int)strlen(ctype), &p, end))
            goto out;
        if (len == (size_t)-1) {
            /* a stream: chunked (RFC 9112 7.1) */
            if (lws_add_http_header_by_name(wsi, (const unsigned char *)"transfer-encoding:",
                                            (const unsigned char *)"chunked", 7, &p, end) ||
                lws_add_http_header_by_name(wsi, (const unsigned char *)"x-accel-buffering:",
                                            (const unsigned char *)"no", 2, &p, end))
                goto out;
        } else if (lws_add_http_header_content_length(wsi, len, &p, end))
            goto out;
    }
    if (lws_add_http_header_by_token(wsi, WSI_TOKEN_HTTP_CACHE_CONTROL, (const unsigned char *)"no-store", 8, &p,
                                     end))
        goto out;
    if (lws_add_http_header_by_token(wsi, WSI_TOKEN_CONNECTION, (const unsigned char *)"close", 5, &p, end))
        goto out;
    for (size_t i = 0; page && i < sizeof srv_web_headers / sizeof srv_web_headers[0]; i++)
        if (lws_add_http_header_by_name(wsi, (const unsigned char *)srv_web_headers[i][0],
                                        (const unsigned char *)srv_web_headers[i][1],
                                        (int)strlen(srv_web_headers[i][1]), &p, end))
            goto out;
    for (size_t i = 0; file && file->file && i < sizeof srv_file_headers / sizeof srv_file_headers[0]; i++)
        if (lws_add_http_header_by_name(wsi, (const unsigned char *)srv_file_headers[i][0],
                                        (const unsigned char *)srv_file_headers[i][1],
                                        (int)strlen(srv_file_headers[i][1]), &p, end))
            goto out;
    if (disposition &&
        lws_add_http_header_by_name(wsi, (const unsigned char *)"content-disposition:",
                                    (const unsigned char *)disposition, (int)strlen(disposition), &p, end))
        goto out;
    if (allow && *allow &&
        lws_add_http_header_by_name(wsi, (const unsigned char *)"allow:", (const unsigned char *)allow,
                                    (int)strlen(allow), &p, end))
        goto out;
    if (location && *location &&
        lws_add_http_header_by_token(wsi, WSI_TOKEN_HTTP_LOCATION, (const unsigned char *)location,
                                     (int)strlen(location), &p, end))
        goto out;
    if (origin && *origin &&
        (lws_add_http_header_by_name(wsi, (const unsigned char *)"access-control-allow-origin:",
                                     (const unsigned char *)origin, (int)strlen(origin), &p, end) ||
         lws_add_http_header_by_name(wsi, (const unsigned char *)"access-control-allow-headers:",
                                     (const unsigned char *)"Authorization, Content-Type, X-XSRFToken", 40, &p,
                                     end) ||
         lws_add_http_header_by_name(wsi, (const unsigned char *)"access-control-allow-methods:",
                                     (const unsigned char *)"GET, POST, PUT, PATCH, DELETE, OPTIONS", 38, &p,
                                     end)))
        goto out;
    if (lws_finalize_write_http_header(wsi, start, &p, end))
        goto out;
    if (len && len != (size_t)-1) {
        memcpy(start, body, len);
        if (lws_write(wsi, start, len, LWS_WRITE_HTTP_FINAL) != (int)len)
            goto out;
    }
    rc = 0;
out:
    free(buf);
    return rc;
}

/* ------------------------------------------------------------ streams */

#define STREAM_CHUNK (64 * 1024)     /* written per writable callback */
#define CONN_PENDING 128             /* connections without their request headers yet (conns.c) */
#define CONN_PENDING_PER_PEER 16     /* the same from one address */

/* A stream's connection is gone (or serves another request now). */
static void s_stream_lost(korch_server_t *s, srv_req_t *req)
{
    req->wsi = NULL;
    if (req->owner != SRV_REQ_STREAM) { /* its owner released it */
        srv_http_log(&s->http, req->method, req->path, req->status, req->t0_us, NULL);
        srv_req_free(&req);
    } else if (req->on_gone) {
        void (*gone)(srv_req_t *, void *) = req->on_gone;
        req->on_gone = NULL;
        gone(req, req->gone_arg);
    }
}

/* The connection of a stream is writable: headers, then pending chunks;
   after the last one the transaction is complete. */
static int s_stream_writable(korch_server_t *s, s_pss_t *pss, struct lws *wsi)
{
    srv_req_t *req = pss->req;
    if (req->responded) /* overflowed: close */
        return -1;
    if (!req->stream_started) {
        req->stream_started = true;
        if (s_write_response(wsi, 200, req->content_type, NULL, (size_t)-1, NULL, req->origin, false, NULL, NULL) < 0)
            return -1;
        lws_callback_on_writable(wsi);
        return 0;
    }
    size_t pending = req->out.len - req->out_off;
    if (pending) {
        size_t n = pending < STREAM_CHUNK ? pending : STREAM_CHUNK;
        unsigned char *buf = malloc(LWS_PRE + n);
        if (!buf)
            return -1;
        memcpy(buf + LWS_PRE, req->out.p + req->out_off, n);
        int w = lws_write(wsi, buf + LWS_PRE, n, LWS_WRITE_HTTP);
        free(buf);
        if (w < (int)n)
            return -1;
        req->out_off += n;
        if (req->out_off < req->out.len) {
            lws_callback_on_writable(wsi);
            return 0;
        }
    }
    if (!req->stream_ended)
        return 0;
    /* all sent: the connection closes (see s_finish) */
    pss->req = NULL;
    pss->answered = true;
    s_stream_lost(s, req);
    return lws_raw_transaction_completed(wsi);
}

/* Write req's response on its connection; ends the transaction. */
static int s_finish(korch_server_t *s, s_pss_t *pss, struct lws *wsi)
{
    srv_req_t *req = pss->req;
    if (req && req->streaming)
        return s_stream_writable(s, pss, wsi);
    if (!req || !req->responded)
        return 0;
    pss->req = NULL;
    pss->answered = true;
    /* RFC 9110 9.3.2: "The server SHOULD NOT send content in the response" to HEAD */
    bool head = strcmp(req->method, "HEAD") == 0;
    int rc = s_write_response(wsi, req->status, req->content_type, req->resp, head ? 0 : req->resp_len,
                              req->location, req->origin, req->page, req->status == 405 ? req->allow : NULL, req);
    srv_http_log(&s->http, req->method, req->path, req->status, req->t0_us, wsi);
    srv_req_free(&req);
    /* One request per connection: it closes once the response is out
       (lws_raw_transaction_completed waits for what lws still buffers).
       No keep-alive, because libwebsockets 4.1.6 mis-frames a request with
       a body that was pipelined behind another: lws_http_action hands the
       buffered headers over as the body, then spins forever on the rest,
       or, when Content-Length is more than it buffered, passes a freed
       buffer on as the body (found by tests/fuzz/fuzz_http). A client that
       pipelines gets its first response and the connection closed
       (s_http_begin), which HTTP/1.1 allows. */
    return rc < 0 ? -1 : lws_raw_transaction_completed(wsi);
}

static bool s_token_ok(korch_server_t *s, struct lws *wsi)
{
    size_t tlen = strlen(s->token);
    if (tlen == 0)
        return true;
    char buf[512];
    const char *given = NULL;
    int n = lws_hdr_copy(wsi, buf, sizeof buf, WSI_TOKEN_HTTP_AUTHORIZATION);
    if (n > 0) {
        /* Jupyter: "token T"; JupyterHub-style clients: "Bearer T" */
        if (strncasecmp(buf, "token ", 6) == 0)
            given = buf + 6;
        else if (strncasecmp(buf, "bearer ", 7) == 0)
            given = buf + 7;
        while (given && *given == ' ')
            given++;
    }
    if (!given) {
        const char *v = lws_get_urlarg_by_name(wsi, "token=", buf, sizeof buf);
        given = v;
    }
    if (!given || strlen(given) != tlen)
        return false;
    return CRYPTO_memcmp(given, s->token, tlen) == 0;
}

/* Origin allowed? No Origin (not a browser) and same host are; else the
   allow-list. *cors gets the origin to echo for cross-site allowed ones.
   An Origin (or the Host it is compared with) too long to copy is refused:
   it cannot be checked, and lws_hdr_copy's -1 must not read as "absent". */
#define MAX_ORIGIN 512
static bool s_origin_ok(korch_server_t *s, struct lws *wsi, char *cors, size_t cors_len, const char **why)
{
    char origin[MAX_ORIGIN], host[MAX_ORIGIN];
    cors[0] = 0;
    *why = "origin not allowed";
    int olen = lws_hdr_total_length(wsi, WSI_TOKEN_ORIGIN);
    if (olen <= 0)
        return true;
    if (olen >= (int)sizeof origin || lws_hdr_copy(wsi, origin, sizeof origin, WSI_TOKEN_ORIGIN) < 0) {
        *why = "Origin header too long to check (at most 511 bytes)";
        return false;
    }
    for (char **o = s->origins; o && *o; o++)
        if (strcmp(*o, "*") == 0 || strcasecmp(*o, origin) == 0) {
            snprintf(cors, cors_len, "%s", origin);
            return true;
        }
    int hlen = lws_hdr_total_length(wsi, WSI_TOKEN_HOST);
    if (hlen <= 0)
        return true; /* as jupyter_server: no Host, assume a script */
    if (hlen >= (int)sizeof host || lws_hdr_copy(wsi, host, sizeof host, WSI_TOKEN_HOST) < 0) {
        *why = "Host header too long to check the Origin against (at most 511 bytes)";
        return false;
    }
    const char *netloc = strstr(origin, "://");
    netloc = netloc ? netloc + 3 : origin;
    return strcasecmp(netloc, host) == 0;
}

static const char *s_method(struct lws *wsi)
{
    static const struct { enum lws_token_indexes tok; const char *name; } methods[] = {
        {WSI_TOKEN_GET_URI, "GET"},       {WSI_TOKEN_POST_URI, "POST"},   {WSI_TOKEN_PUT_URI, "PUT"},
        {WSI_TOKEN_PATCH_URI, "PATCH"},   {WSI_TOKEN_DELETE_URI, "DELETE"}, {WSI_TOKEN_OPTIONS_URI, "OPTIONS"},
        {WSI_TOKEN_HEAD_URI, "HEAD"},
    };
    for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++)
        if (lws_hdr_total_length(wsi, methods[i].tok) > 0)
            return methods[i].name;
    return "?";
}

/* Hand req to its route's handler (req->route, matched in s_http_begin),
   with its JSON body parsed when the route reads one. */
static void s_dispatch(korch_server_t *s, srv_req_t *req)
{
    srv_req_t *was = s->http.dispatching;
    req->dispatched = true;
    s->http.dispatching = req;
    const srv_route_t *r = req->route;
    bool bad = false;
    json_t *body = r->body == SRV_BODY_JSON ? srv_req_json(req, &bad) : NULL;
    if (!bad)
        r->handler(s, req, &req->params, body);
    json_decref(body);
    s->http.dispatching = was;
}

/* Answer a request the router did not match (404, 405 with Allow, 400, 414). */
static void s_unrouted(srv_req_t *req, srv_match_t m)
{
    switch (m) {
    case SRV_MATCH_METHOD:
        srv_respond_error(req, 405, "method not allowed (%s allowed here)", req->allow);
        break;
    case SRV_MATCH_BAD_PATH:
        srv_respond_error(req, 400, "'%s' is not a plain path ('.' and '..' name no file here)", req->path);
        break;
    case SRV_MATCH_TOO_LONG:
        srv_respond_error(req, 414, "the path is too long (at most %d bytes, %d segments)", SRV_ROUTE_MAX_PATH - 1,
                          SRV_ROUTE_MAX_SEGS);
        break;
    default:
        srv_respond_error(req, 404, "not found");
        break;
    }
}

/* The directory uploads are spooled in: opts.agent_dir/.uploads, 0700 and
   korch's (checked on the open directory, never followed if a link). */
static int s_spool_dir(korch_server_t *s, korch_err_t *err)
{
    if (s->spool_fd >= 0)
        return s->spool_fd;
    const char *base = s->opts.agent_dir && *s->opts.agent_dir ? s->opts.agent_dir : "korch-sessions";
    char dir[PATH_MAX];
    if (korch_path_join(dir, sizeof dir, base, ".uploads", err) != KORCH_OK || korch_mkdirs(base, 0755, err) != KORCH_OK)
        return -1;
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        korch_err_set(err, KORCH_E_IO, "cannot create '%s' for uploads: %s", dir, strerror(errno));
        return -1;
    }
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        korch_err_set(err, KORCH_E_IO, "cannot open '%s' for uploads: %s", dir, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    if (st.st_uid != geteuid() || (st.st_mode & 077)) {
        close(fd);
        korch_err_set(err, KORCH_E_IO, "'%s' (for uploads) is not korch's alone (owner %d, mode %03o): remove it",
                      dir, (int)st.st_uid, (unsigned)(st.st_mode & 0777));
        return -1;
    }
    return s->spool_fd = fd;
}

/* A Content-Length as RFC 9110 8.6 has it: 1*DIGIT, nothing else. */
static bool s_parse_length(const char *v, unsigned long long *out)
{
    if (!*v)
        return false;
    unsigned long long n = 0;
    for (; *v; v++) {
        if (*v < '0' || *v > '9' || n > (ULLONG_MAX - 9) / 10)
            return false;
        n = n * 10 + (unsigned long long)(*v - '0');
    }
    *out = n;
    return true;
}

/* Does req have a body to read (true: req->rx is set up)? false when it
   has none, or when it was answered (an error). */
static bool s_body_begin(korch_server_t *s, srv_req_t *req, struct lws *wsi)
{
    const char *m = req->method;
    bool may_have_body = strcmp(m, "POST") == 0 || strcmp(m, "PUT") == 0 || strcmp(m, "PATCH") == 0;
    bool has_len = lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_CONTENT_LENGTH) > 0;
    int te_len = lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_TRANSFER_ENCODING);
    unsigned long long len = 0;
    bool chunked = false;
    if (te_len > 0) {
        /* RFC 9112 6.3: both is how requests are smuggled; refuse it */
        char te[64] = "";
        if (has_len) {
            srv_respond_error(req, 400, "the request has both Content-Length and Transfer-Encoding: send one");
            return false;
        }
        if (!may_have_body) {
            srv_respond_error(req, 400, "a %s request has no body here (it came with Transfer-Encoding)", m);
            return false;
        }
        if (te_len >= (int)sizeof te || lws_hdr_copy(wsi, te, sizeof te, WSI_TOKEN_HTTP_TRANSFER_ENCODING) < 0 ||
            strcasecmp(te, "chunked") != 0) {
            /* RFC 9112 6.1: a coding the server does not understand -> 501 */
            srv_respond_error(req, 501, "Transfer-Encoding '%.60s' is not supported: send 'chunked' or a Content-Length",
                              te);
            return false;
        }
        chunked = true;
    } else if (has_len) {
        char clen[32] = "";
        if (lws_hdr_copy(wsi, clen, sizeof clen, WSI_TOKEN_HTTP_CONTENT_LENGTH) <= 0 || !s_parse_length(clen, &len)) {
            srv_respond_error(req, 400, "malformed Content-Length");
            return false;
        }
    }
    bool upload = req->route->body == SRV_BODY_UPLOAD; /* its limit, spooled to disk */
    size_t max = upload ? s->opts.max_upload : s->opts.max_body;
    if (len > max) {
        srv_respond_error(req, 413, "request body of %llu bytes is over the limit of %zu", len, max);
        return false;
    }
    /* lws reads bodies of POST, PUT and PATCH only (and, without a length,
       up to 100 MiB of them, which is what a chunked body is read from) */
    if ((len == 0 && !chunked) || !may_have_body)
        return false;
    /* an upload that would be refused is refused before its bytes come */
    if (upload && !srv_agent_upload_ok(s, req))
        return false;
    korch_err_t err = {0};
    int dirfd = upload ? s_spool_dir(s, &err) : -1;
    if (!upload || dirfd >= 0)
        req->rx = srv_body_new(max, (size_t)len, chunked, upload ? &s->body_disk : &s->body_mem, dirfd, &err);
    if (!req->rx) {
        srv_respond_error(req, 500, "%s", err.msg);
        return false;
    }
    /* curl waits a second for this before sending a body over 1 MiB */
    char expect[32] = "";
    if (lws_hdr_copy(wsi, expect, sizeof expect, WSI_TOKEN_HTTP_EXPECT) > 0 && strcasecmp(expect, "100-continue") == 0) {
        static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
        unsigned char buf[LWS_PRE + sizeof cont];
        memcpy(buf + LWS_PRE, cont, sizeof cont - 1);
        if (lws_write(wsi, buf + LWS_PRE, sizeof cont - 1, LWS_WRITE_HTTP) != (int)sizeof cont - 1)
            korch_debug("cannot write 100 Continue");
    }
    return true;
}

/* LWS_CALLBACK_HTTP: a new request's headers are in. Returns what the
   callback returns. */
static int s_http_begin(korch_server_t *s, s_pss_t *pss, struct lws *wsi, const char *uri)
{
    srv_conns_headers_done(s->parts.conns, wsi);
    /* One request per connection (see s_finish): this one was pipelined
       behind a request still in progress or answered; close (the
       earlier request is cleaned up by LWS_CALLBACK_CLOSED_HTTP) */
    if (pss->req || pss->answered)
        return -1;
    srv_req_t *req = calloc(1, sizeof *req);
    if (!req)
        return -1;
    req->srv = s;
    req->http = &s->http;
    req->wsi = wsi;
    req->t0_us = srv_now_us();
    snprintf(req->method, sizeof req->method, "%s", s_method(wsi));
    /* a path too long to keep is refused, never cut (a cut path names another file) */
    size_t ulen = uri ? strlen(uri) : 0;
    bool too_long = ulen >= sizeof req->path;
    snprintf(req->path, sizeof req->path, "%.*s", too_long ? 64 : (int)ulen, uri ? uri : "");
    pss->req = req;
    s_touch(s);
    s->http.dispatching = req;
    char cors[MAX_ORIGIN];
    const char *why;
    if (!s_origin_ok(s, wsi, cors, sizeof cors, &why)) {
        korch_warn("blocking a cross-origin request to '%s': %s", req->path, why);
        srv_respond_error(req, 403, "%s", why);
        goto done;
    }
    snprintf(req->origin, sizeof req->origin, "%s", cors);
    if (strcmp(req->method, "OPTIONS") == 0) { /* CORS preflight: no token needed */
        srv_respond(req, 204, NULL);
        goto done;
    }
    /* Open routes (GET /api, as in jupyter_server: clients probe it; the web
       app's files, which hold no secret) need no token; any other request
       does before it learns anything, even whether its path exists. */
    srv_match_t m = too_long ? SRV_MATCH_TOO_LONG
                             : srv_route_match(req->method, req->path, ulen, &req->route, &req->params, req->allow,
                                               sizeof req->allow);
    if (!(m == SRV_MATCH_OK && req->route->auth == SRV_AUTH_NONE) && !s_token_ok(s, wsi)) {
        srv_respond_error(req, 403, "missing or wrong token");
        goto done;
    }
    /* before the body: a request for no route is answered without reading it */
    if (m != SRV_MATCH_OK) {
        s_unrouted(req, m);
        goto done;
    }
    if (s_body_begin(s, req, wsi)) {
        s->http.dispatching = NULL;
        return 0; /* the body follows */
    }
    if (!req->responded)
        s_dispatch(s, req);
done:
    s->http.dispatching = NULL;
    if (req->responded)
        return s_finish(s, pss, wsi);
    return 0;
}

/* The body is complete: handlers see it as req->body. */
static void s_body_ready(korch_server_t *s, srv_req_t *req)
{
    req->body = srv_body_data(req->rx);
    req->body_len = srv_body_len(req->rx);
    s_dispatch(s, req);
}

static void s_body_error(korch_server_t *s, srv_req_t *req, korch_rc_t rc, const korch_err_t *err)
{
    if (rc == KORCH_E_NOMEM)
        s->metrics.bodies_refused++;
    srv_respond_error(req, korch_rc_http_status(rc), "%s", err->msg); /* 413, 503 (a budget), 400 (framing), 500 */
}

static int s_http_body(korch_server_t *s, s_pss_t *pss, struct lws *wsi, const void *in, size_t len)
{
    srv_req_t *req = pss->req;
    if (!req || !req->rx || req->responded || req->dispatched)
        return 0;
    korch_err_t err = {0};
    korch_rc_t rc = srv_body_feed(req->rx, in, len, &err);
    s->http.dispatching = req;
    if (rc)
        s_body_error(s, req, rc, &err);
    else if (srv_body_chunked(req->rx) && srv_body_complete(req->rx)) {
        /* lws does not know where a chunked body ends (it reads one as
           "up to 100 MiB"): the request goes now, and the connection
           closes after its answer. No body timeout while it waits. */
        lws_set_timeout(wsi, NO_PENDING_TIMEOUT, 0);
        s_body_ready(s, req);
    }
    s->http.dispatching = NULL;
    return req->responded ? s_finish(s, pss, wsi) : 0;
}

static int s_http_body_done(korch_server_t *s, s_pss_t *pss, struct lws *wsi)
{
    srv_req_t *req = pss->req;
    if (!req || req->responded)
        return s_finish(s, pss, wsi);
    /* No body expected: it was dispatched with its headers, and lws only
       reports an explicit "Content-Length: 0" (dispatching it again would
       start a second kernel for one POST /api/kernels) */
    if (!req->rx)
        return 0;
    /* Dispatched already and waiting: never twice (lws 4.1.6 repeats the
       completion of a pipelined body, see s_finish; closing ends that) */
    if (req->dispatched)
        return -1;
    s->http.dispatching = req;
    if (!srv_body_complete(req->rx))
        srv_respond_error(req, srv_body_chunked(req->rx) ? 413 : 400,
                          srv_body_chunked(req->rx) ? "a chunked request body must end within 100 MiB"
                                                    : "the request body ended early");
    else
        s_body_ready(s, req);
    s->http.dispatching = NULL;
    return req->responded ? s_finish(s, pss, wsi) : 0;
}

/* ------------------------------------------------------------- websockets */

/* The upgrade's path into uri, and the kernel it names into id when the
   router matches it to the websocket route (false else: 404). */
static bool s_ws_route(struct lws *wsi, char *uri, size_t uri_len, char *id, size_t id_len)
{
    const srv_route_t *r;
    srv_params_t p;
    uri[0] = id[0] = 0;
    int n = lws_hdr_copy(wsi, uri, (int)uri_len, WSI_TOKEN_GET_URI);
    if (n <= 0 || srv_route_match("GET", uri, (size_t)n, &r, &p, NULL, 0) != SRV_MATCH_OK || !r->websocket)
        return false;
    const char *kid = srv_param(&p, "kernel_id");
    if (strlen(kid) >= id_len)
        return false;
    snprintf(id, id_len, "%s", kid);
    return true;
}

/* Is this upgrade acceptable (0)? Else answer with a status ourselves and
   close (-1). */
static int s_ws_confirm(korch_server_t *s, struct lws *wsi)
{
    char uri[SRV_ROUTE_MAX_PATH] = "", id[64] = "";
    int64_t t0 = srv_now_us();
    srv_conns_headers_done(s->parts.conns, wsi);
    bool routed = s_ws_route(wsi, uri, sizeof uri, id, sizeof id);
    int status = 0;
    const char *msg = NULL;
    char cors[MAX_ORIGIN];
    if (!s_origin_ok(s, wsi, cors, sizeof cors, &msg)) {
        korch_warn("blocking a cross-origin websocket to '%s': %s", uri, msg);
        status = 403;
    } else if (!s_token_ok(s, wsi))
        status = 403, msg = "missing or wrong token";
    else if (!routed)
        status = 404, msg = "not found";
    else if (!srv_kmgr_find(s->parts.kmgr, id))
        status = 404, msg = "kernel does not exist";
    if (!status)
        return 0;
    char body[128];
    snprintf(body, sizeof body, "{\"message\": \"%s\"}", msg);
    s_write_response(wsi, status, NULL, body, strlen(body), NULL, NULL, false, NULL, NULL);
    srv_http_log(&s->http, "GET", uri, status, t0, wsi);
    /* -1, not 1: after 1 lws keeps the connection for another request, and
       a pipelined one with a body is what it mis-frames (see s_finish) */
    return -1;
}

static void s_ws_open(korch_server_t *s, s_pss_t *pss, struct lws *wsi)
{
    char uri[SRV_ROUTE_MAX_PATH] = "", id[64] = "", sid[128] = "";
    int64_t t0 = srv_now_us();
    s_ws_route(wsi, uri, sizeof uri, id, sizeof id); /* confirmed: it matches */
    srv_ws_t *ws = calloc(1, sizeof *ws);
    if (!ws || !(ws->queue = zlistx_new())) {
        free(ws);
        lws_set_timeout(wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
        return;
    }
    ws->srv = s;
    ws->http = &s->http;
    ws->wsi = wsi;
    korch_buf_init(&ws->rx, s->opts.max_ws_message, NULL);
    s->metrics.ws_open++;
    const struct lws_protocols *proto = lws_get_protocol(wsi);
    ws->proto = proto && proto->name && strcmp(proto->name, KORCH_WS_V1_PROTOCOL) == 0 ? KORCH_WS_V1 : KORCH_WS_LEGACY;
    /* a session_id must be printable ASCII (Jupyter's are uuids): it names the client in logs */
    bool have = lws_get_urlarg_by_name(wsi, "session_id=", sid, sizeof sid) && sid[0];
    for (const char *c = sid; have && *c; c++)
        have = *c >= 0x20 && *c < 0x7f;
    if (have) {
        snprintf(ws->session_key, sizeof ws->session_key, "%s", sid);
        ws->has_session_id = true;
    } else
        snprintf(ws->session_key, sizeof ws->session_key, "#%llu", (unsigned long long)++s->ws_seq);
    pss->ws = ws;
    s_touch(s);
    srv_kernel_t *mk = srv_kmgr_find(s->parts.kmgr, id);
    srv_http_log(&s->http, "GET", uri, mk ? 101 : 404, t0, wsi);
    if (!mk) {
        srv_ws_close(ws, "kernel is gone");
        return;
    }
    korch_info("websocket %s on kernel %.8s (%s)", ws->session_key, id, ws->proto == KORCH_WS_V1 ? "v1" : "legacy");
    srv_kernel_attach(mk, ws);
}

static void s_ws_free(srv_ws_t **pws)
{
    srv_ws_t *ws = *pws;
    if (!ws)
        return;
    if (ws->srv->metrics.ws_open)
        ws->srv->metrics.ws_open--;
    srv_kernel_detach(ws);
    korch_wsframe_t *f;
    while ((f = zlistx_first(ws->queue))) {
        zlistx_delete(ws->queue, zlistx_cursor(ws->queue));
        korch_wsframe_unref(&f);
    }
    zlistx_destroy(&ws->queue);
    korch_buf_free(&ws->rx);
    free(ws);
    *pws = NULL;
}

/* A big message goes out as fragments of this size (RFC 6455 5.4: "a
   fragmented message consists of a single frame with the FIN bit clear
   and an opcode other than 0, followed by zero or more frames with the FIN
   bit clear and the opcode set to 0, and terminated by a single frame with
   the FIN bit set and an opcode of 0"), copied into one scratch buffer:
   no copy of the whole message is ever made. */
#define WS_CHUNK (256 * 1024)
/* Bytes one connection may write per writable turn before the others get
   theirs; lws calls each writable connection once per service. */
#define WS_TURN_BYTES (1024 * 1024)

static int s_ws_writable(korch_server_t *s, srv_ws_t *ws, struct lws *wsi)
{
    if (ws->dropping)
        return -1;
    size_t budget = WS_TURN_BYTES;
    for (int n = 0; n < 64 && budget; ) {
        korch_wsframe_t *f = zlistx_first(ws->queue);
        if (!f)
            break;
        size_t off = ws->tx_off, len;
        int w;
        if (off == 0 && !f->blob && f->len <= WS_CHUNK) {
            /* the whole message, straight from the frame (it has LWS_PRE) */
            len = f->len;
            w = lws_write(wsi, f->data, len, f->binary ? LWS_WRITE_BINARY : LWS_WRITE_TEXT);
        } else {
            len = f->len - off < WS_CHUNK ? f->len - off : WS_CHUNK;
            if (!s->scratch && !(s->scratch = malloc(LWS_PRE + WS_CHUNK)))
                return -1;
            korch_wsframe_read(f, off, s->scratch + LWS_PRE, len);
            int flags = off == 0 ? (f->binary ? LWS_WRITE_BINARY : LWS_WRITE_TEXT) : LWS_WRITE_CONTINUATION;
            if (off + len < f->len)
                flags |= LWS_WRITE_NO_FIN;
            w = lws_write(wsi, s->scratch + LWS_PRE, len, flags);
        }
        if (w < (int)len) {
            korch_warn("websocket %s: write failed", ws->session_key);
            return -1;
        }
        budget = len < budget ? budget - len : 0;
        ws->tx_off += len;
        if (ws->tx_off == f->len) {
            zlistx_delete(ws->queue, zlistx_cursor(ws->queue));
            ws->queued_bytes -= f->len;
            ws->tx_off = 0;
            korch_wsframe_unref(&f);
            ws->sent++;
            s->metrics.ws_sent++;
            if (srv_trace_on)
                srv_trace("w %s %llu %lld", ws->session_key, (unsigned long long)ws->sent, (long long)srv_trace_now());
            n++;
        }
        /* lws keeps what the socket did not take; wait for it to drain */
        if (lws_send_pipe_choked(wsi))
            break;
    }
    if (ws->finishing && !zlistx_size(ws->queue) && !lws_send_pipe_choked(wsi)) {
        lws_close_reason(wsi, LWS_CLOSE_STATUS_GOINGAWAY, NULL, 0);
        return -1;
    }
    if (zlistx_size(ws->queue) || ws->finishing) {
        lws_callback_on_writable(wsi);
        s_kick(s);
    }
    return 0;
}

static int s_ws_receive(korch_server_t *s, srv_ws_t *ws, struct lws *wsi, const void *in, size_t len)
{
    if (ws->dropping)
        return 0;
    if (lws_is_first_fragment(wsi)) {
        korch_buf_reset(&ws->rx);
        ws->rx_skip = false;
        ws->rx_binary = lws_frame_is_binary(wsi);
    }
    if (!ws->rx_skip) {
        korch_rc_t rc = korch_buf_add(&ws->rx, in, len, "websocket message", NULL);
        if (rc == KORCH_E_TOOBIG) {
            korch_warn("websocket %s: message over %zu bytes dropped", ws->session_key, s->opts.max_ws_message);
            ws->rx_skip = true;
        } else if (rc)
            return -1;
    }
    if (!lws_is_final_fragment(wsi) || lws_remaining_packet_payload(wsi))
        return 0;
    ws->received++;
    if (!ws->rx_skip)
        srv_kernel_client_message(ws, ws->rx.p, ws->rx.len, ws->rx_binary);
    korch_buf_reset(&ws->rx);
    /* do not keep a huge buffer around for one big message */
    if (ws->rx.cap > 1 << 20)
        korch_buf_free(&ws->rx);
    return 0;
}

/* --------------------------------------------------------- lws callback */

static int s_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in, size_t len)
{
    struct lws_context *ctx = lws_get_context(wsi);
    korch_server_t *s = ctx ? lws_context_user(ctx) : NULL;
    s_pss_t *pss = user;
    switch (reason) {
    case LWS_CALLBACK_SERVER_NEW_CLIENT_INSTANTIATED: {
        /* Nagle + delayed ACKs cost jupyter_server 40 ms per message */
        int one = 1, fd = (int)lws_get_socket_fd(wsi);
        if (fd >= 0)
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        /* at a limit, and nothing idle to close for it: refused */
        return s && !srv_conns_accept(s->parts.conns, wsi, fd) ? -1 : 0;
    }
    case LWS_CALLBACK_WSI_DESTROY:
        if (s)
            srv_conns_closed(s->parts.conns, wsi);
        return 0;
    case LWS_CALLBACK_HTTP:
        return s && pss ? s_http_begin(s, pss, wsi, in) : -1;
    case LWS_CALLBACK_HTTP_BODY:
        return s && pss ? s_http_body(s, pss, wsi, in, len) : -1;
    case LWS_CALLBACK_HTTP_BODY_COMPLETION:
        return s && pss ? s_http_body_done(s, pss, wsi) : -1;
    case LWS_CALLBACK_HTTP_WRITEABLE:
        return s && pss ? s_finish(s, pss, wsi) : -1;
    case LWS_CALLBACK_CLOSED_HTTP:
    case LWS_CALLBACK_HTTP_DROP_PROTOCOL:
        if (pss && pss->req && pss->req->streaming) {
            s_stream_lost(s, pss->req);
            pss->req = NULL;
            return 0;
        }
        if (pss && pss->req) {
            pss->req->wsi = NULL;
            if (pss->req->owner == SRV_REQ_CONN || pss->req->responded)
                srv_req_free(&pss->req);
            pss->req = NULL; /* a waiting request is its waiter's now */
        }
        return 0;
    case LWS_CALLBACK_HTTP_CONFIRM_UPGRADE:
        return s ? s_ws_confirm(s, wsi) : -1;
    case LWS_CALLBACK_ESTABLISHED:
        if (s && pss)
            s_ws_open(s, pss, wsi);
        return 0;
    case LWS_CALLBACK_RECEIVE:
        return s && pss && pss->ws ? s_ws_receive(s, pss->ws, wsi, in, len) : 0;
    case LWS_CALLBACK_SERVER_WRITEABLE:
        return s && pss && pss->ws ? s_ws_writable(s, pss->ws, wsi) : 0;
    case LWS_CALLBACK_CLOSED:
        if (pss && pss->ws) {
            korch_info("websocket %s closed", pss->ws->session_key);
            pss->ws->wsi = NULL;
            s_ws_free(&pss->ws);
        }
        return 0;
    default:
        break;
    }
    return lws_callback_http_dummy(wsi, reason, user, in, len);
}

/* protocols[0] serves HTTP and websockets without a subprotocol (legacy);
   a client offering v1 gets protocols[1]. */
static const struct lws_protocols s_protocols[] = {
    {"http", s_callback, sizeof(s_pss_t), 0, 0, NULL, 0},
    {KORCH_WS_V1_PROTOCOL, s_callback, sizeof(s_pss_t), 0, 0, NULL, 0},
    {NULL, NULL, 0, 0, 0, NULL, 0},
};

static void s_lws_log(int level, const char *line)
{
    size_t n = strlen(line);
    while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
        n--;
    /* korch_log escapes what lws quotes from clients */
    korch_log(level == LLL_ERR ? KORCH_LOG_ERROR : level == LLL_WARN ? KORCH_LOG_WARN : KORCH_LOG_DEBUG,
              "lws: %.*s", (int)n, line);
}

/* ---------------------------------------------------------------- public */

korch_server_t *korch_server_new(korch_loop_t *loop, const korch_server_opts_t *opts, korch_err_t *err)
{
    korch_server_t *s = calloc(1, sizeof *s);
    if (!s) {
        korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        return NULL;
    }
    s->loop = loop;
    s->uv_timer = s->kick_timer = -1;
    s->uv_fd = -1;
    s->spool_fd = -1;
    korch_server_opts_t o = opts ? *opts : (korch_server_opts_t){0};
    snprintf(s->ip, sizeof s->ip, "%s", o.ip ? o.ip : "127.0.0.1");
    snprintf(s->kernel, sizeof s->kernel, "%s", o.kernel ? o.kernel : "python3");
    if (o.token)
        snprintf(s->token, sizeof s->token, "%s", o.token);
    else {
        unsigned char raw[24];
        if (RAND_bytes(raw, sizeof raw) != 1) {
            korch_err_set(err, KORCH_E_IO, "cannot generate a token (openssl RAND_bytes failed)");
            goto fail;
        }
        for (size_t i = 0; i < sizeof raw; i++)
            snprintf(s->token + 2 * i, 3, "%02x", raw[i]);
    }
    size_t norig = 0;
    while (o.allow_origins && o.allow_origins[norig])
        norig++;
    s->origins = calloc(norig + 1, sizeof *s->origins);
    for (size_t i = 0; s->origins && i < norig; i++)
        s->origins[i] = strdup(o.allow_origins[i]);
    o.ip = s->ip;
    o.kernel = s->kernel;
    o.token = s->token;
    o.allow_origins = (const char *const *)s->origins;
    if (!o.max_body)
        o.max_body = 1 << 20;
    if (!o.max_upload)
        o.max_upload = 64u << 20;
    if (!o.max_ws_message)
        o.max_ws_message = 64u << 20;
    if (!o.max_ws_queue)
        o.max_ws_queue = 64u << 20;
    if (!o.max_replay_bytes)
        o.max_replay_bytes = 16u << 20;
    if (o.kernel_start_timeout_ms <= 0)
        o.kernel_start_timeout_ms = 60000;
    if (!o.max_body_total)
        o.max_body_total = 64u << 20;
    if (!o.max_upload_total)
        o.max_upload_total = (size_t)1 << 30;
    if (o.header_timeout_ms <= 0)
        o.header_timeout_ms = 5000;
    if (o.max_connections_per_peer <= 0)
        o.max_connections_per_peer = 256;
    /* connections need file descriptors: take the hard limit, keep half
       for kernels (each has its sockets and pipes) */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    int fd_room = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < 1u << 20
                      ? (int)(rl.rlim_cur / 2)
                      : 1 << 19;
    if (o.max_connections <= 0)
        o.max_connections = 1024;
    if (o.max_connections > fd_room)
        o.max_connections = fd_room;
    s->opts = o;
    s->http = (srv_http_t){.kick = s_kick_cb, .kick_arg = s, .metrics = &s->metrics,
                           .no_access_log = o.no_access_log, .max_ws_queue = o.max_ws_queue};
    s->body_mem = (srv_budget_t){0, o.max_body_total, "--max-body-total"};
    s->body_disk = (srv_budget_t){0, o.max_upload_total, "--max-upload-total"};
    korch_iso8601_now(s->started);
    s_touch(s);
    s->parts = (srv_parts_t){.opts = &s->opts, .loop = loop, .metrics = &s->metrics, .started = s->started,
                             .last_activity = s->last_activity};
    /* the kernel manager first, then those who listen to it */
    s->parts.kmgr = srv_kmgr_new(&(srv_kmgr_opts_t){.loop = loop, .launcher = o.launcher,
                                              .start_timeout_ms = o.kernel_start_timeout_ms},
                           err);
    if (!s->parts.kmgr)
        goto fail;
    s->parts.relay = srv_relay_new(s->parts.kmgr, &(srv_relay_opts_t){.loop = loop, .max_replay_bytes = o.max_replay_bytes,
                                                          .metrics = &s->metrics});
    srv_metrics_listen(&s->metrics, s->parts.kmgr);
    s->parts.api = s->parts.relay ? srv_api_new(s) : NULL;
    s->parts.agents = s->parts.api ? srv_agents_new(s) : NULL;
    if (!s->origins || !s->parts.agents) {
        korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        goto fail;
    }
    srv_agents_load(s->parts.agents);

    if (uv_loop_init(&s->uv) != 0) {
        korch_err_set(err, KORCH_E_IO, "cannot create the libuv loop");
        goto fail;
    }
    s->uv_ok = true;
    int lvl = LLL_ERR | (korch_log_level <= KORCH_LOG_WARN ? LLL_WARN : 0) |
              (korch_log_level <= KORCH_LOG_DEBUG ? LLL_NOTICE : 0);
    lws_set_log_level(lvl, s_lws_log);
    void *foreign[1] = {&s->uv};
    struct lws_context_creation_info info;
    memset(&info, 0, sizeof info);
    info.port = o.port;
    info.iface = s->ip;
    info.protocols = s_protocols;
    info.user = s;
    info.foreign_loops = foreign;
    info.options = LWS_SERVER_OPTION_LIBUV;
    if (!strchr(s->ip, ':'))
        info.options |= LWS_SERVER_OPTION_DISABLE_IPV6;
    info.max_http_header_data = 16384; /* browsers' cookies */
    /* Header tables: one per connection still sending its headers (at most
       CONN_PENDING, conns.c) plus the requests in progress, so a new
       connection never queues for one (16 KiB each, when in use). */
    info.max_http_header_pool = CONN_PENDING + 192;
    info.timeout_secs = 30;
    info.pt_serv_buf_size = 64 * 1024;
    info.ka_time = 60, info.ka_probes = 3, info.ka_interval = 10;
    s->ctx = lws_create_context(&info);
    if (!s->ctx) {
        korch_err_set(err, KORCH_E_IO, "cannot listen on %s:%d (in use, or not an address of this host?)", s->ip,
                      o.port);
        goto fail;
    }
    struct lws_vhost *vh = lws_get_vhost_by_name(s->ctx, "default");
    s->port = vh ? lws_get_vhost_listen_port(vh) : o.port;
    srv_conns_limits_t lim = {.max_connections = o.max_connections,
                              .max_per_peer = o.max_connections_per_peer,
                              .max_pending = CONN_PENDING,
                              .max_pending_per_peer = CONN_PENDING_PER_PEER,
                              .header_timeout_ms = o.header_timeout_ms};
    if (!(s->parts.conns = srv_conns_new(loop, &s->metrics, s_kick_cb, s, &lim))) {
        korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        goto fail;
    }
    s->uv_fd = uv_backend_fd(&s->uv);
    if (s->uv_fd < 0 || korch_loop_poller(loop, s->uv_fd, s_on_uv_fd, s) != 0) {
        korch_err_set(err, KORCH_E_IO, "cannot poll the libuv loop");
        goto fail;
    }
    if (srv_pool_new(s->parts.kmgr, loop, &s->opts, &s->parts.pool, err) != KORCH_OK ||
        srv_cull_new(s->parts.kmgr, loop, &s->opts, &s->parts.cull, err) != KORCH_OK)
        goto fail;
    if (o.adopt) /* listed now, ready once each handshake is done on the loop */
        srv_kmgr_adopt_mine(s->parts.kmgr);
    s_uv_service(s);
    srv_trace_open();
    return s;
fail:
    korch_server_destroy(&s);
    return NULL;
}

void korch_server_run(korch_server_t *s, bool (*quit)(void *arg), void *arg)
{
    /* nothing is deferred to between rounds any more: kernels are released
       from a timer, and their teardown never runs the loop (kmgr.h) */
    while (!(quit && quit(arg)))
        korch_loop_run(s->loop, quit, arg, -1);
}

void korch_server_destroy(korch_server_t **ps)
{
    if (!ps || !*ps)
        return;
    korch_server_t *s = *ps;
    *ps = NULL;
    s->closing = true;
    srv_cull_destroy(&s->parts.cull);
    srv_pool_destroy(&s->parts.pool); /* its kernels are shut down with the others */
    srv_agents_destroy(&s->parts.agents); /* before their kernels */
    if (s->parts.kmgr)
        srv_kmgr_delete_all(s->parts.kmgr); /* the relay and api hear of it */
    struct lws_context *ctx = s->ctx;
    s->ctx = NULL;
    if (ctx)
        lws_context_destroy(ctx);
    if (s->uv_fd >= 0)
        korch_loop_poller_end(s->loop, s->uv_fd);
    if (s->uv_timer >= 0)
        korch_loop_timer_end(s->loop, s->uv_timer);
    if (s->kick_timer >= 0)
        korch_loop_timer_end(s->loop, s->kick_timer);
    if (s->uv_ok) {
        /* let lws's handles close, then the loop */
        for (int i = 0; i < 100 && uv_run(&s->uv, UV_RUN_NOWAIT); i++)
            ;
        /* with a foreign loop, lws finishes destroying the context only
           once its handles have closed: the second call does that */
        if (ctx)
            lws_context_destroy(ctx);
        if (uv_loop_close(&s->uv) != 0)
            korch_debug("libuv loop still had handles at exit");
    }
    srv_conns_destroy(&s->parts.conns); /* after lws: its connections are gone */
    if (s->spool_fd >= 0)
        close(s->spool_fd);
    srv_kmgr_destroy(&s->parts.kmgr);
    srv_api_destroy(&s->parts.api);
    srv_relay_destroy(&s->parts.relay);
    srv_trace_close();
    for (char **o = s->origins; o && *o; o++)
        free(*o);
    free(s->origins);
    free(s->scratch);
    free(s);
}
