/*  The server's front door (server_core.h): a request from its headers to
 *  its route's handler and back to the wire. The Origin and the token are
 *  checked (constant time), the body's framing and size, the body read as
 *  it comes (body.c: bounded, chunked decoded, uploads spooled to disk),
 *  then the request is routed (routes.c). The response is written from
 *  lws's writable callback, which every response asks for unless it
 *  answers the request being handled in its own callback; a stream's
 *  chunks the same way. One access-log line per request (http.c).
 */
#include "download.h"
#include "server_core.h"
#include "trace.h"
#include "korch/path.h"
#include "korch/fsutil.h"
#include "korch/log.h"
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

/* ------------------------------------------------------------- requests */

/* What a cross-origin client may send (MCP's Streamable HTTP clients send the last two). */
static const char s_cors_headers[] = "Authorization, Content-Type, X-XSRFToken, Mcp-Session-Id, Mcp-Protocol-Version";

/* Write status, headers and body; "connection: close" always (see
   srv_front_finish). allow: a 405's Allow header (RFC 9110 15.5.6: "The origin
   server MUST generate an Allow header field in a 405 response"), or
   NULL. file: a kernel's or a user's file (download.h), or NULL. Returns
   -1 when the connection must close. */
static int s_write_response(struct lws *wsi, int status, const char *ctype, const char *body, size_t len,
                            const char *location, const char *origin, bool page, const char *allow,
                            const srv_req_t *file)
{
    if (!ctype || !*ctype)
        ctype = "application/json";
    const char *disposition = file && file->file ? file->disposition : NULL;
    const char *cookies = file ? file->set_cookie : NULL;
    size_t cap = LWS_PRE + 1024 + (disposition ? strlen(disposition) + 128 : 0) + (len == (size_t)-1 ? 0 : len) +
                 (location ? strlen(location) : 0) + (cookies ? 2 * strlen(cookies) + 64 : 0);
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
    if (file && file->xhdr_name[0] &&
        lws_add_http_header_by_name(wsi, (const unsigned char *)file->xhdr_name,
                                    (const unsigned char *)file->xhdr_value, (int)strlen(file->xhdr_value), &p, end))
        goto out;
    if (allow && *allow &&
        lws_add_http_header_by_name(wsi, (const unsigned char *)"allow:", (const unsigned char *)allow,
                                    (int)strlen(allow), &p, end))
        goto out;
    if (location && *location &&
        lws_add_http_header_by_token(wsi, WSI_TOKEN_HTTP_LOCATION, (const unsigned char *)location,
                                     (int)strlen(location), &p, end))
        goto out;
    for (const char *c = cookies; c && *c;) { /* one Set-Cookie per cookie (RFC 6265 3) */
        size_t n = strcspn(c, "\n");
        if (lws_add_http_header_by_name(wsi, (const unsigned char *)"set-cookie:", (const unsigned char *)c, (int)n,
                                        &p, end))
            goto out;
        c += n + (c[n] == '\n');
    }
    if (origin && *origin &&
        (lws_add_http_header_by_name(wsi, (const unsigned char *)"access-control-allow-origin:",
                                     (const unsigned char *)origin, (int)strlen(origin), &p, end) ||
         lws_add_http_header_by_name(wsi, (const unsigned char *)"access-control-allow-headers:",
                                     (const unsigned char *)s_cors_headers, (int)strlen(s_cors_headers), &p,
                                     end) ||
         lws_add_http_header_by_name(wsi, (const unsigned char *)"access-control-expose-headers:",
                                     (const unsigned char *)"Mcp-Session-Id", 14, &p, end) ||
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

/* A stream's connection is gone (or serves another request now). */
void srv_front_stream_lost(korch_server_t *s, srv_req_t *req)
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
static int s_stream_writable(korch_server_t *s, srv_pss_t *pss, struct lws *wsi)
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
    /* all sent: the connection closes (see srv_front_finish) */
    pss->req = NULL;
    pss->answered = true;
    srv_front_stream_lost(s, req);
    return lws_raw_transaction_completed(wsi);
}

/* Write req's response on its connection; ends the transaction. */
int srv_front_finish(korch_server_t *s, srv_pss_t *pss, struct lws *wsi)
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
    bool drain = req->drain;
    srv_req_free(&req);
    if (rc >= 0 && drain) { /* the body is read and dropped, then the connection closes */
        pss->draining = true;
        lws_set_timeout(wsi, PENDING_TIMEOUT_HTTP_CONTENT, 10);
        return 0;
    }
    /* One request per connection: it closes once the response is out
       (lws_raw_transaction_completed waits for what lws still buffers).
       No keep-alive, because libwebsockets 4.1.6 mis-frames a request with
       a body that was pipelined behind another: lws_http_action hands the
       buffered headers over as the body, then spins forever on the rest,
       or, when Content-Length is more than it buffered, passes a freed
       buffer on as the body (found by tests/fuzz/fuzz_http). A client that
       pipelines gets its first response and the connection closed
       (srv_front_http_begin), which HTTP/1.1 allows. */
    return rc < 0 ? -1 : lws_raw_transaction_completed(wsi);
}

/* The path without the prefix JupyterHub's proxy routes to korch
   (opts.hub_prefix, "/services/korch/": the proxy passes it on), as "/..."
   (a pointer into uri, one byte before the rest: the prefix's own '/');
   uri itself when it has none. korch answers at both. */
static const char *s_unprefixed(korch_server_t *s, const char *uri)
{
    const char *pre = s ? s->opts.hub_prefix : NULL;
    size_t n = pre ? strlen(pre) : 0;
    if (!uri || n < 2 || pre[n - 1] != '/')
        return uri;
    if (strncmp(uri, pre, n) == 0)
        return uri + n - 1;
    if (strlen(uri) == n - 1 && strncmp(uri, pre, n - 1) == 0) /* "/services/korch": the page */
        return "/";
    return uri;
}

/* What the request presented (ident.h: its token from "Authorization:
   token T" as Jupyter sends it, "Bearer T" as JupyterHub's clients do, or
   ?token=; its cookies), in c; buf and qbuf hold the token, *cookie
   (malloc'd, the caller frees it) the Cookie header. */
static void s_cred(struct lws *wsi, const char *path, bool websocket, srv_cred_t *c, char *buf, size_t blen,
                   char *qbuf, size_t qlen, char **cookie)
{
    const char *given = NULL;
    int n = lws_hdr_copy(wsi, buf, (int)blen, WSI_TOKEN_HTTP_AUTHORIZATION);
    if (n > 0) {
        if (strncasecmp(buf, "token ", 6) == 0)
            given = buf + 6;
        else if (strncasecmp(buf, "bearer ", 7) == 0)
            given = buf + 7;
        while (given && *given == ' ')
            given++;
    }
    if (!given)
        given = lws_get_urlarg_by_name(wsi, "token=", qbuf, (int)qlen);
    int clen = lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_COOKIE);
    *cookie = clen > 0 ? malloc((size_t)clen + 1) : NULL;
    if (*cookie && lws_hdr_copy(wsi, *cookie, clen + 1, WSI_TOKEN_HTTP_COOKIE) < 0) {
        free(*cookie);
        *cookie = NULL;
    }
    *c = (srv_cred_t){.token = given, .cookie = *cookie, .path = path, .websocket = websocket};
}

/* Who the request is (ident.h). */
static srv_who_t s_who(korch_server_t *s, struct lws *wsi, const char *path, bool websocket, srv_user_t *u,
                       srv_who_done_fn *done, void *arg)
{
    char buf[512], qbuf[512], *cookie;
    srv_cred_t c;
    s_cred(wsi, path, websocket, &c, buf, sizeof buf, qbuf, sizeof qbuf, &cookie);
    srv_who_t rc = srv_ident_resolve(s->parts.ident, &c, u, done, arg);
    free(cookie);
    return rc;
}

/* Why a request with no user was refused: its status (403, or 503 when a
   resolver could not tell, e.g. JupyterHub is down) and message. */
static int s_why(korch_server_t *s, struct lws *wsi, const char *path, bool websocket, char *msg, size_t len)
{
    char buf[512], qbuf[512], *cookie;
    srv_cred_t c;
    s_cred(wsi, path, websocket, &c, buf, sizeof buf, qbuf, sizeof qbuf, &cookie);
    int st = srv_ident_why(s->parts.ident, &c, msg, len);
    free(cookie);
    return st;
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

/* Hand req to its route's handler (req->route, matched in srv_front_http_begin),
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
        /* a body up to 16 MiB is read and dropped after (closing on unread bytes resets: no 413 seen) */
        req->drain = !chunked && may_have_body && len <= (16ull << 20);
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

static void s_http_continue(korch_server_t *s, srv_req_t *req, struct lws *wsi, srv_who_t who, bool admitted,
                            const char *over);
static void s_body_bytes(korch_server_t *s, srv_req_t *req, struct lws *wsi, const void *in, size_t len);
static void s_body_end(korch_server_t *s, srv_req_t *req);

/* A PENDING identity is known (ident.h): the request goes on where it stopped. */
static void s_who_done(void *arg, srv_who_t rc, const srv_user_t *u)
{
    srv_req_t *req = arg;
    korch_server_t *s = req->srv;
    if (!req->who_pending)
        return;
    req->who_pending = false;
    if (rc == SRV_WHO_OK && u)
        req->user = *u;
    struct lws *wsi = req->wsi;
    if (!wsi)
        return;
    lws_rx_flow_control(wsi, 1);
    s_http_continue(s, req, wsi, rc == SRV_WHO_OK && u ? SRV_WHO_OK : rc, true, "");
    /* the body's bytes that came with the headers, and its end if it came too */
    if (!req->responded && req->early_over)
        srv_respond_error(req, 413, "the request body came too fast before its token was checked: retry");
    else if (!req->responded && req->rx && !req->dispatched) {
        if (req->early.len)
            s_body_bytes(s, req, wsi, req->early.p, req->early.len);
        if (!req->responded && !req->dispatched && req->early_done)
            s_body_end(s, req);
    }
    korch_buf_free(&req->early);
    if (req->responded)
        lws_callback_on_writable(wsi);
    s->http.kick(s->http.kick_arg); /* libuv applies the flow's change (and the write) inside uv_run */
}

/* LWS_CALLBACK_HTTP: a new request's headers are in. Returns what the
   callback returns. */
int srv_front_http_begin(korch_server_t *s, srv_pss_t *pss, struct lws *wsi, const char *uri)
{
    char over[192];
    /* One request per connection (see srv_front_finish): this one was pipelined
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
    uri = s_unprefixed(s, uri);
    /* a path too long to keep is refused, never cut (a cut path names another file) */
    size_t ulen = uri ? strlen(uri) : 0;
    req->path_too_long = ulen >= sizeof req->path;
    snprintf(req->path, sizeof req->path, "%.*s", req->path_too_long ? 64 : (int)ulen, uri ? uri : "");
    pss->req = req;
    srv_who_t who = s_who(s, wsi, req->path, false, &req->user, s_who_done, req);
    bool held = who == SRV_WHO_OK || who == SRV_WHO_PENDING; /* a lookup under way is no stranger's */
    bool admitted = srv_conns_headers_done(s->parts.conns, wsi, held, over, sizeof over);
    srv_touch(s);
    if (who == SRV_WHO_PENDING) {
        /* held, its body unread, until s_who_done (or its client leaves:
           LWS_CALLBACK_CLOSED_HTTP cancels the lookup) */
        req->who_pending = true;
        if (!admitted) {
            srv_ident_cancel(s->parts.ident, req);
            req->who_pending = false;
            srv_respond_error(req, 429, "%s", over);
            return srv_front_finish(s, pss, wsi);
        }
        korch_buf_init(&req->early, 64 * 1024, NULL);
        lws_rx_flow_control(wsi, 0);
        return 0;
    }
    s->http.dispatching = req;
    s_http_continue(s, req, wsi, who, admitted, over);
    s->http.dispatching = NULL;
    if (req->responded)
        return srv_front_finish(s, pss, wsi);
    return 0;
}

/* The rest of a request's headers' work, once its user is known: origin,
   limits, the route, the body or the handler. */
static void s_http_continue(korch_server_t *s, srv_req_t *req, struct lws *wsi, srv_who_t who, bool admitted,
                            const char *over)
{
    bool authed = who == SRV_WHO_OK;
    if (!authed) /* a stranger's, also after a lookup that held it */
        req->user = (srv_user_t){.role = SRV_ROLE_NONE}, srv_conns_unauthed(s->parts.conns, wsi);
    size_t ulen = strlen(req->path);
    bool too_long = req->path_too_long;
    char cors[MAX_ORIGIN];
    const char *why;
    if (!s_origin_ok(s, wsi, cors, sizeof cors, &why)) {
        korch_warn("blocking a cross-origin request to '%s': %s", req->path, why);
        srv_respond_error(req, 403, "%s", why);
        return;
    }
    snprintf(req->origin, sizeof req->origin, "%s", cors);
    if (!admitted) { /* its client is over its limit (behind a trusted proxy) */
        srv_respond_error(req, 429, "%s", over);
        return;
    }
    if (strcmp(req->method, "OPTIONS") == 0) { /* CORS preflight: no token needed */
        srv_respond(req, 204, NULL);
        return;
    }
    /* Open routes (GET /api, as in jupyter_server: clients probe it; the web
       app's files, which hold no secret) need no token; any other request
       does before it learns anything, even whether its path exists. */
    srv_match_t m = too_long ? SRV_MATCH_TOO_LONG
                             : srv_route_match(req->method, req->path, ulen, &req->route, &req->params, req->allow,
                                               sizeof req->allow);
    if (!(m == SRV_MATCH_OK && req->route->auth == SRV_AUTH_NONE) && !authed) {
        char refused[320];
        int st = s_why(s, wsi, req->path, false, refused, sizeof refused);
        srv_respond_error(req, st, "%s", refused);
        return;
    }
    if (m != SRV_MATCH_OK) { /* before the body: no route, answered without reading it */
        s_unrouted(req, m);
        return;
    }
    if (s_body_begin(s, req, wsi)) {
        s->http.dispatching = NULL;
        return; /* the body follows */
    }
    if (!req->responded)
        s_dispatch(s, req);
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

/* Bytes of a request's body, once it is being read (req->rx). */
static void s_body_bytes(korch_server_t *s, srv_req_t *req, struct lws *wsi, const void *in, size_t len)
{
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
}

/* The end of a body being read. */
static void s_body_end(korch_server_t *s, srv_req_t *req)
{
    s->http.dispatching = req;
    if (!srv_body_complete(req->rx))
        srv_respond_error(req, srv_body_chunked(req->rx) ? 413 : 400,
                          srv_body_chunked(req->rx) ? "a chunked request body must end within 100 MiB"
                                                    : "the request body ended early");
    else
        s_body_ready(s, req);
    s->http.dispatching = NULL;
}

int srv_front_http_body(korch_server_t *s, srv_pss_t *pss, struct lws *wsi, const void *in, size_t len)
{
    if (pss->draining) /* a refused body: dropped */
        return 0;
    srv_req_t *req = pss->req;
    if (req && req->who_pending) {
        /* what lws read with the headers, before its flow was stopped:
           kept for s_who_done (one read's worth; more is refused there) */
        if (korch_buf_add(&req->early, in, len, "request body", NULL) != KORCH_OK)
            req->early_over = true;
        return 0;
    }
    if (!req || !req->rx || req->responded || req->dispatched)
        return 0;
    s_body_bytes(s, req, wsi, in, len);
    return req->responded ? srv_front_finish(s, pss, wsi) : 0;
}

int srv_front_http_body_done(korch_server_t *s, srv_pss_t *pss, struct lws *wsi)
{
    if (pss->draining) /* all of the refused body read (10 s at most): the connection closes */
        return -1;
    srv_req_t *req = pss->req;
    if (req && req->who_pending) { /* s_who_done ends it */
        req->early_done = true;
        return 0;
    }
    if (!req || req->responded)
        return srv_front_finish(s, pss, wsi);
    /* No body expected: it was dispatched with its headers, and lws only
       reports an explicit "Content-Length: 0" (dispatching it again would
       start a second kernel for one POST /api/kernels) */
    if (!req->rx)
        return 0;
    /* Dispatched already and waiting: never twice (lws 4.1.6 repeats the
       completion of a pipelined body, see srv_front_finish; closing ends that) */
    if (req->dispatched)
        return -1;
    s_body_end(s, req);
    return req->responded ? srv_front_finish(s, pss, wsi) : 0;
}

/* ------------------------------------------------------------- websockets */

/* The upgrade's path into uri, and the kernel it names into id when the
   router matches it to the websocket route (false else: 404). */
bool srv_front_ws_route(struct lws *wsi, char *uri, size_t uri_len, char *id, size_t id_len)
{
    const srv_route_t *r;
    srv_params_t p;
    uri[0] = id[0] = 0;
    int n = lws_hdr_copy(wsi, uri, (int)uri_len, WSI_TOKEN_GET_URI);
    struct lws_context *ctx = lws_get_context(wsi);
    const char *un = n > 0 && ctx ? s_unprefixed(lws_context_user(ctx), uri) : uri;
    if (un != uri) {
        memmove(uri, un, strlen(un) + 1);
        n = (int)strlen(uri);
    }
    if (n <= 0 || srv_route_match("GET", uri, (size_t)n, &r, &p, NULL, 0) != SRV_MATCH_OK || !r->websocket)
        return false;
    const char *kid = srv_param(&p, "kernel_id");
    if (strlen(kid) >= id_len)
        return false;
    snprintf(id, id_len, "%s", kid);
    return true;
}

/* A websocket's lookup (PENDING) ended: nothing waits for it (the upgrade
   was answered 503); the resolver keeps what it learnt. */
static void s_ws_who_done(void *arg, srv_who_t rc, const srv_user_t *u) {}

bool srv_front_ws_user(korch_server_t *s, struct lws *wsi, const char *uri, srv_user_t *u)
{
    return s_who(s, wsi, uri, true, u, s_ws_who_done, NULL) == SRV_WHO_OK;
}

/* Is this upgrade acceptable (0)? Else answer with a status ourselves and
   close (-1). */
int srv_front_ws_confirm(korch_server_t *s, struct lws *wsi)
{
    char uri[SRV_ROUTE_MAX_PATH] = "", id[64] = "";
    int64_t t0 = srv_now_us();
    char why[320];
    bool routed = srv_front_ws_route(wsi, uri, sizeof uri, id, sizeof id);
    int status = 0;
    const char *msg = NULL;
    char cors[MAX_ORIGIN];
    srv_user_t u;
    srv_who_t who = s_who(s, wsi, uri, true, &u, s_ws_who_done, NULL);
    bool authed = who == SRV_WHO_OK;
    bool admitted = srv_conns_headers_done(s->parts.conns, wsi, authed, why, sizeof why);
    if (!s_origin_ok(s, wsi, cors, sizeof cors, &msg)) {
        korch_warn("blocking a cross-origin websocket to '%s': %s", uri, msg);
        status = 403;
    } else if (!admitted)
        status = 429, msg = why;
    else if (who == SRV_WHO_PENDING)
        status = 503, msg = "your identity is being looked up: retry in a moment";
    else if (!authed)
        status = s_why(s, wsi, uri, true, why, sizeof why), msg = why;
    else if (!routed)
        status = 404, msg = "not found";
    else if (!srv_kmgr_find(s->parts.kmgr, id) || !srv_user_may(&u, srv_kmgr_find(s->parts.kmgr, id)->owner))
        status = 404, msg = "kernel does not exist"; /* another user's is not there for you (ident.h) */
    if (!status)
        return 0;
    json_t *j = json_pack("{s:s}", "message", msg ? msg : "");
    char *body = j ? json_dumps(j, JSON_COMPACT) : NULL; /* msg may quote a name from JupyterHub */
    json_decref(j);
    s_write_response(wsi, status, NULL, body ? body : "{}", body ? strlen(body) : 2, NULL, NULL, false, NULL, NULL);
    free(body);
    srv_http_log(&s->http, "GET", uri, status, t0, wsi);
    /* -1, not 1: after 1 lws keeps the connection for another request, and
       a pipelined one with a body is what it mis-frames (see srv_front_finish) */
    return -1;
}
