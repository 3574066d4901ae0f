/*  Requests as route handlers see them (http.c): the request, its response
 *  (at once or later), streamed responses (server-sent events), its body,
 *  query and headers; srv_http_t, the transport's state every request and
 *  websocket points to. Loop thread only.
 *
 *  Lifetimes: a request belongs to its connection until a handler calls
 *  srv_req_wait; from then on whoever completes it owns it, and srv_respond
 *  frees it when the client has already gone.
 */
#ifndef KORCH_SERVER_HTTP_H
#define KORCH_SERVER_HTTP_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "korch/buf.h"
#include "korch/error.h"
#include "korch/server.h"
#include "routes.h"
#include "ident.h"

struct lws;
typedef struct srv_req srv_req_t;
typedef struct srv_body srv_body_t;
typedef struct srv_ws srv_ws_t;

/* Who frees a request: its connection (when it closes), whoever holds it
   (srv_req_wait; srv_respond frees it when the client has gone), or its
   stream's owner (srv_stream_begin ... srv_stream_release). */
typedef enum { SRV_REQ_CONN, SRV_REQ_HELD, SRV_REQ_STREAM } srv_req_owner_t;

/* The transport's state requests and websockets need (http.c); server.c
   owns it and fills it in. */
typedef struct srv_metrics srv_metrics_t;
typedef struct {
    void (*kick)(void *arg);    /* have lws service its loop once more this round (after asking
                                   it for a write or a close from outside its own callback) */
    void *kick_arg;
    srv_req_t *dispatching;     /* being handled inside its own lws callback: its response is
                                   written on return; any other is woken */
    srv_metrics_t *metrics;
    bool no_access_log;
    size_t max_ws_queue;
    size_t max_ws_message;
    unsigned char *ws_scratch;  /* LWS_PRE + a fragment of a big message being written (ws.c; freed by server.c) */
} srv_http_t;

struct srv_req {
    korch_server_t *srv;        /* the handlers' context (srv_parts) */
    srv_http_t *http;
    struct lws *wsi;            /* NULL once the client has gone */
    char method[8];
    char path[1024];
    bool path_too_long;         /* the client's was longer than path (then cut to 64 bytes for the log) */
    char origin[512];           /* Origin header when allowed and cross-site, for CORS */
    srv_user_t user;            /* who asks (ident.h); role NONE on open routes without a token */
    bool who_pending;           /* its user is being looked up (srv_ident_resolve said PENDING) */
    korch_buf_t early;          /* its body's bytes lws delivered meanwhile (bounded) */
    bool early_over, early_done; /* more than early holds came; the body's end came */
    bool drain;                 /* answered before its body (413): the body is read and dropped after */
    srv_body_t *rx;             /* the body as it arrives (body.c); NULL when there is none */
    char *body;                 /* once complete: rx's bytes, NUL-terminated (owned by rx);
                                   NULL when spooled to a file (srv_req_upload_map) */
    size_t body_len;
    bool dispatched;            /* handed to its route's handler (never twice) */
    const srv_route_t *route;   /* what the path and method matched (routes.c); NULL when none */
    srv_params_t params;        /* the route's parameters */
    char allow[48];             /* a 405's Allow header: the methods the path has */
    void *map;                  /* srv_req_upload_map's mapping */
    size_t map_len;
    int64_t t0_us;
    srv_req_owner_t owner;
    /* the response, once known */
    bool responded;
    int status;
    char *resp;
    size_t resp_len;
    char content_type[64];      /* "" = application/json */
    char location[2048];        /* a redirect's Location ("" = none) */
    char *set_cookie;           /* Set-Cookie headers, '\n' between them (owned; NULL = none) */
    /* streaming (srv_stream_begin): written as it comes, then the connection closes */
    bool streaming, stream_started, stream_ended;
    korch_buf_t out;            /* pending bytes: out.p[out_off .. out.len) (bounded by srv_stream_write's max) */
    size_t out_off;
    bool page;                  /* the web app's files: srv_web_headers go with them */
    bool file;                  /* a kernel's or a user's file: srv_file_headers go with it (download.h) */
    char *disposition;          /* its Content-Disposition (owned); NULL = none */
    char xhdr_name[32];         /* one more response header ("mcp-session-id:"), "" none */
    char xhdr_value[128];
    void (*on_gone)(srv_req_t *req, void *arg);    /* the client closed a stream */
    void *gone_arg;
};

/* A spooled upload's bytes, mapped read-only (*data "" when empty); unmap
   with srv_req_upload_unmap. For a body in memory: req->body itself. */
korch_rc_t srv_req_upload_map(srv_req_t *req, const void **data, size_t *len, korch_err_t *err);
void srv_req_upload_unmap(srv_req_t *req);

/* http.c: CLOCK_MONOTONIC in microseconds. */
int64_t srv_now_us(void);
/* An answer (or a request whose client left) for the access log and counters. */
void srv_http_log(srv_http_t *h, const char *method, const char *path, int status, int64_t t0_us, struct lws *wsi);
/* Frees a request (its body, its response). */
void srv_req_free(srv_req_t **req);

/* Take the request over: the connection no longer frees it. */
void srv_req_wait(srv_req_t *req);

/* Respond with a JSON body (stolen; NULL = none) and release the request if
   its client is gone. */
void srv_respond(srv_req_t *req, int status, json_t *body);

/* Respond with bytes (copied) of a content type (not JSON). */
void srv_respond_raw(srv_req_t *req, int status, const char *content_type, const void *data, size_t len);

/* The request's body as a JSON object (new; NULL when there is none). A
   malformed one is answered 400 and sets *bad. */
json_t *srv_req_json(srv_req_t *req, bool *bad);

/* The value of query argument `name` ("after") or of header `name`
   ("last-event-id:", lowercase with its colon) into buf; false when the
   request has none (or its client has gone). */
bool srv_req_query(srv_req_t *req, const char *name, char *buf, size_t len);
bool srv_req_header(srv_req_t *req, const char *name, char *buf, size_t len);

/* One more header for the response (name lowercase with its colon, as
   lws writes it); the last call wins. */
void srv_req_set_header(srv_req_t *req, const char *name, const char *value);

/* Respond {"message": ...}. */
void srv_respond_error(srv_req_t *req, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Streamed responses (server-sent events): status 200 with content_type and
   no length; the body is written as srv_stream_write gives it and the
   connection closes after srv_stream_end. The caller owns req from here on
   (owner = SRV_REQ_STREAM): on_gone(req, arg) runs when the client goes
   (req->wsi is NULL then); free it with srv_stream_release. Writes beyond
   `max` pending bytes close the stream (a client that does not read). */
void srv_stream_begin(srv_req_t *req, const char *content_type, void (*on_gone)(srv_req_t *, void *), void *arg);
korch_rc_t srv_stream_write(srv_req_t *req, const void *data, size_t len, size_t max);
void srv_stream_end(srv_req_t *req);
/* Forget it: closes the connection if it is still open. */
void srv_stream_release(srv_req_t **req);

#endif
