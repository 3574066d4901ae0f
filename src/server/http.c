/*  Requests as handlers see them: responses (possibly completed later),
 *  streamed responses, the request's body and query (the websocket is
 *  ws.c's). Knows nothing of the server that made them: what it needs
 *  (waking libwebsockets, the counters, limits) comes in srv_http_t, the
 *  transport's state, which server.c owns and every request and websocket
 *  points to.
 */
#include "server_int.h"
#include "metrics.h"
#include "body.h"
#include "conns.h"
#include "korch/log.h"

#include <libwebsockets.h>

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

int64_t srv_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void srv_req_free(srv_req_t **preq)
{
    srv_req_t *req = *preq;
    if (!req)
        return;
    srv_req_upload_unmap(req);
    srv_body_destroy(&req->rx); /* req->body is rx's */
    free(req->resp);
    free(req->disposition);
    free(req->set_cookie);
    korch_buf_free(&req->early);
    korch_buf_free(&req->out);
    free(req);
    *preq = NULL;
}

void srv_http_log(srv_http_t *h, const char *method, const char *path, int status, int64_t t0_us, struct lws *wsi)
{
    h->metrics->http[status >= 100 && status < 600 ? status / 100 : 0]++; /* every answer passes here */
    if (h->no_access_log)
        return;
    /* the client's address: behind a trusted proxy, its X-Forwarded-For one */
    char peer[64] = "-";
    const char *client = srv_conns_client(wsi);
    if (client)
        snprintf(peer, sizeof peer, "%s", client);
    else if (wsi)
        lws_get_peer_simple(wsi, peer, sizeof peer);
    double ms = (double)(srv_now_us() - t0_us) / 1000.0;
    /* The access log is the server's output (--no-access-log turns it off),
       not logging: it stays on stderr whatever KORCH_LOG says, and is not
       cut at a log line's length. The path is the client's, URL-decoded:
       ESC, CR, LF ... are escaped. */
    char safe[4 * sizeof ((srv_req_t *)0)->path + 1];
    fprintf(stderr, "korch: %d %s %s %.2fms %s\n", status, method,
            korch_log_escape(safe, sizeof safe, path, strlen(path), 0), ms, peer);
}

void srv_req_wait(srv_req_t *req) { req->owner = SRV_REQ_HELD; }

json_t *srv_req_json(srv_req_t *req, bool *bad)
{
    *bad = false;
    if (!req->body_len)
        return NULL;
    json_error_t jerr;
    json_t *body = json_loadb(req->body, req->body_len, JSON_REJECT_DUPLICATES, &jerr);
    if (!json_is_object(body)) {
        srv_respond_error(req, 400, "malformed JSON body: %s", body ? "not an object" : jerr.text);
        json_decref(body);
        *bad = true;
        return NULL;
    }
    return body;
}

/* A response (or stream bytes) is waiting on req's connection: have lws
   call its writable callback. From inside another connection's callback,
   or from a kernel's event, nothing else would: lws only services what
   asked, and libuv applies the request in its next run (srv_http_t.kick). */
static void s_wake(srv_req_t *req)
{
    if (!req->wsi)
        return;
    lws_callback_on_writable(req->wsi);
    req->http->kick(req->http->kick_arg);
}

/* {"message": msg}. A message that quotes a client's bytes may not be
   UTF-8 (which JSON needs): then its bytes are escaped as in the log. */
static json_t *s_error_body(const char *msg)
{
    json_t *j = json_pack("{s:s}", "message", msg ? msg : "");
    if (!j && msg) {
        char safe[4096];
        j = json_pack("{s:s}", "message", korch_log_escape(safe, sizeof safe, msg, strlen(msg), 0));
    }
    return j;
}

void srv_respond(srv_req_t *req, int status, json_t *body)
{
    srv_http_t *h = req->http;
    if (req->responded) {
        json_decref(body);
        return;
    }
    req->responded = true;
    req->status = status;
    if (body) {
        req->resp = json_dumps(body, JSON_COMPACT);
        req->resp_len = req->resp ? strlen(req->resp) : 0;
        json_decref(body);
    }
    if (!req->wsi) {
        /* the client has gone: nobody to answer */
        srv_http_log(h, req->method, req->path, status, req->t0_us, NULL);
        srv_req_free(&req);
        return;
    }
    if (req != h->dispatching)
        s_wake(req);
}

void srv_respond_raw(srv_req_t *req, int status, const char *content_type, const void *data, size_t len)
{
    if (req->responded)
        return;
    req->resp = malloc(len + 1);
    if (!req->resp) {
        srv_respond_error(req, 500, "out of memory");
        return;
    }
    memcpy(req->resp, data, len);
    req->resp[len] = 0;
    req->resp_len = len;
    snprintf(req->content_type, sizeof req->content_type, "%s", content_type);
    srv_respond(req, status, NULL);
}

bool srv_req_query(srv_req_t *req, const char *name, char *buf, size_t len)
{
    char key[64];
    snprintf(key, sizeof key, "%s=", name);
    const char *v = req->wsi ? lws_get_urlarg_by_name(req->wsi, key, buf, (int)len) : NULL;
    if (!v)
        return false;
    memmove(buf, v, strlen(v) + 1); /* lws leaves "name=value" in buf and points at the value */
    return true;
}

bool srv_req_header(srv_req_t *req, const char *name, char *buf, size_t len)
{
    return req->wsi && lws_hdr_custom_copy(req->wsi, buf, (int)len, name, (int)strlen(name)) > 0;
}

void srv_req_set_header(srv_req_t *req, const char *name, const char *value)
{
    snprintf(req->xhdr_name, sizeof req->xhdr_name, "%s", name);
    snprintf(req->xhdr_value, sizeof req->xhdr_value, "%s", value);
}

void srv_respond_error(srv_req_t *req, int status, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    srv_respond(req, status, s_error_body(msg));
}


void srv_stream_begin(srv_req_t *req, const char *content_type, void (*on_gone)(srv_req_t *, void *), void *arg)
{
    req->streaming = true;
    korch_buf_init(&req->out, SIZE_MAX / 2, NULL); /* srv_stream_write bounds what is pending */
    req->owner = SRV_REQ_STREAM;
    req->status = 200;
    snprintf(req->content_type, sizeof req->content_type, "%s", content_type);
    req->on_gone = on_gone;
    req->gone_arg = arg;
    if (req->wsi) {
        lws_set_timeout(req->wsi, NO_PENDING_TIMEOUT, 0); /* a turn may think for minutes */
        s_wake(req);
    }
}

korch_rc_t srv_stream_write(srv_req_t *req, const void *data, size_t len, size_t max)
{
    if (!req->wsi || !req->streaming || req->stream_ended)
        return KORCH_E_STATE;
    korch_buf_t *o = &req->out;
    if (o->len - req->out_off + len > max) {
        korch_warn("%s %s: the client does not read its stream (%zu bytes pending); closing it", req->method,
                   req->path, o->len - req->out_off); /* korch_warn escapes */
        req->stream_ended = true;
        req->responded = true; /* marks the overflow: the next writable closes */
        s_wake(req);
        return KORCH_E_TOOBIG;
    }
    /* reclaim what was sent: at once when it was all of it, else before growing */
    if (req->out_off && (req->out_off == o->len || o->len + len + 32 >= o->cap)) {
        korch_buf_drop(o, req->out_off);
        req->out_off = 0;
    }
    /* each chunk goes out framed: hex size CRLF data CRLF (all of it or nothing) */
    if (len) {
        if (korch_buf_reserve(o, len + 32, "stream", NULL) != KORCH_OK)
            return KORCH_E_NOMEM;
        korch_buf_addf(o, "stream", NULL, "%zx\r\n", len);
        korch_buf_add(o, data, len, "stream", NULL);
        korch_buf_add(o, "\r\n", 2, "stream", NULL);
    }
    s_wake(req);
    return KORCH_OK;
}

void srv_stream_end(srv_req_t *req)
{
    if (!req->wsi || req->stream_ended)
        return;
    if (srv_stream_write(req, NULL, 0, (size_t)-1) == KORCH_OK)
        korch_buf_add(&req->out, "0\r\n\r\n", 5, "stream", NULL); /* the last chunk */
    req->stream_ended = true;
}

void srv_stream_release(srv_req_t **preq)
{
    srv_req_t *req = *preq;
    if (!req)
        return;
    *preq = NULL;
    req->on_gone = NULL;
    req->owner = SRV_REQ_CONN; /* the connection frees it when it closes */
    if (!req->wsi) {
        srv_http_log(req->http, req->method, req->path, req->status, req->t0_us, NULL);
        srv_req_free(&req);
        return;
    }
    if (!req->stream_ended) {
        /* the owner is done with an open stream: end it cleanly */
        srv_stream_end(req);
        s_wake(req);
    }
}


korch_rc_t srv_req_upload_map(srv_req_t *req, const void **data, size_t *len, korch_err_t *err)
{
    *data = req->body ? req->body : "";
    *len = req->body_len;
    int fd = req->rx ? srv_body_fd(req->rx) : -1;
    if (fd < 0 || !req->body_len)
        return KORCH_OK;
    if (!req->map) {
        void *p = mmap(NULL, req->body_len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED)
            return korch_err_set(err, KORCH_E_IO, "cannot map the upload: %s", strerror(errno));
        req->map = p;
        req->map_len = req->body_len;
    }
    *data = req->map;
    return KORCH_OK;
}

void srv_req_upload_unmap(srv_req_t *req)
{
    if (req->map)
        munmap(req->map, req->map_len);
    req->map = NULL;
    req->map_len = 0;
}


/* routes.h: a matched route's parameter (here, beside the request it belongs to). */
const char *srv_param(const srv_params_t *p, const char *name)
{
    for (int i = 0; p && i < p->n; i++)
        if (strcmp(p->name[i], name) == 0)
            return p->value[i];
    return "";
}
