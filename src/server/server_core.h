/*  Inside korch_server (server.c, front.c): the server object itself. Not
 *  for the other files of src/server, which see the server only through
 *  srv_parts() (server_int.h).
 *
 *  server.c  the composition root: the parts, libwebsockets on libuv
 *            embedded in korch's loop, the lws callback, websockets opened
 *            and closed, korch_server_new / run / destroy.
 *  front.c   the front door, below it: a request from its headers to its
 *            handler (origin, token, method, body, route) and its response
 *            or stream written back; the websocket upgrade's checks.
 *
 *  Loop thread only.
 */
#ifndef KORCH_SERVER_CORE_H
#define KORCH_SERVER_CORE_H

#include "server_int.h"
#include "metrics.h"
#include "conns.h"
#include "body.h"
#include "korch/session.h"

#include <uv.h>

struct lws_context;


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
};

typedef struct {
    srv_req_t *req;                 /* HTTP: the current request */
    srv_ws_t *ws;                   /* websocket: the connection */
    bool answered;                  /* a response is out: the connection closes (srv_front_finish) */
    bool draining;                  /* answered 413, the body still coming: read and dropped, then closed */
} srv_pss_t;

static inline void srv_touch(korch_server_t *s) { korch_iso8601_now(s->last_activity); }

/* front.c, called from the lws callback (server.c). Each returns what the
   callback returns to lws (-1: close the connection). */
/* LWS_CALLBACK_HTTP: a request's headers are in (uri: its path). */
int srv_front_http_begin(korch_server_t *s, srv_pss_t *pss, struct lws *wsi, const char *uri);
/* LWS_CALLBACK_HTTP_BODY: bytes of its body. */
int srv_front_http_body(korch_server_t *s, srv_pss_t *pss, struct lws *wsi, const void *in, size_t len);
/* LWS_CALLBACK_HTTP_BODY_COMPLETION. */
int srv_front_http_body_done(korch_server_t *s, srv_pss_t *pss, struct lws *wsi);
/* LWS_CALLBACK_HTTP_WRITEABLE: the response (or the stream's next bytes). */
int srv_front_finish(korch_server_t *s, srv_pss_t *pss, struct lws *wsi);
/* A stream's connection is gone (or serves another request now). */
void srv_front_stream_lost(korch_server_t *s, srv_req_t *req);
/* LWS_CALLBACK_HTTP_CONFIRM_UPGRADE: 0 to accept the websocket; else it
   was answered with a status and the connection closes (-1). */
int srv_front_ws_confirm(korch_server_t *s, struct lws *wsi);
/* The upgrade's path into uri, and the kernel it names into id when it is
   the websocket route (false else). */
bool srv_front_ws_route(struct lws *wsi, char *uri, size_t uri_len, char *id, size_t id_len);
/* Who opened an established websocket (false: nobody now, close it). */
bool srv_front_ws_user(korch_server_t *s, struct lws *wsi, const char *uri, srv_user_t *u);

#endif
