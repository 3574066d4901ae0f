/*  Inside korch_server: what the files of src/server/ share. Not a public API.
 *
 *  server.c   libwebsockets on an embedded libuv loop; HTTP requests
 *             (auth, origin, limits, access log, responses, possibly
 *             completed later) and websocket connections (reassembly,
 *             bounded send queues).
 *  kernels.c  managed kernels: lifecycle through korch_kernel, the relay
 *             between kernel channels and websocket clients (IOPub to all,
 *             replies to the requester, replay buffers per session_id).
 *  api.c      the REST routes: /api, /api/status, /api/kernelspecs,
 *             /api/kernels, /api/sessions.
 *
 *  Lifetimes: a request (srv_req_t) belongs to its connection until a
 *  handler calls srv_req_wait; from then on whoever completes it owns it,
 *  and srv_respond frees it when the client has already gone. A kernel is
 *  never destroyed inside a handler: it is marked doomed and destroyed
 *  between loop rounds (korch_kernel_destroy runs the loop).
 */
#ifndef KORCH_SERVER_INT_H
#define KORCH_SERVER_INT_H

#include <czmq.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "korch/kernel.h"
#include "korch/server.h"
#include "korch/wsmsg.h"

struct lws;
typedef struct srv_req srv_req_t;
typedef struct srv_ws srv_ws_t;
typedef struct srv_kernel srv_kernel_t;

/* What a waiting request waits for (a kernel becoming ready, or gone). */
typedef enum {
    SRV_WAIT_NONE,
    SRV_WAIT_START,             /* POST /api/kernels -> 201 model */
    SRV_WAIT_RESTART,           /* POST .../restart -> 200 model */
    SRV_WAIT_SESSION,           /* POST /api/sessions -> 201 session */
    SRV_WAIT_SESSION_PATCH,     /* PATCH /api/sessions/{id} with a new kernel -> 200 session */
    SRV_WAIT_DELETE,            /* DELETE /api/kernels/{id} or a session -> 204 */
} srv_wait_t;

struct srv_req {
    korch_server_t *srv;
    struct lws *wsi;            /* NULL once the client has gone */
    char method[8];
    char path[1024];
    char origin[256];           /* Origin header when allowed and cross-site, for CORS */
    char *body;                 /* NUL-terminated, at most opts.max_body */
    size_t body_len;
    bool body_too_big;
    int64_t t0_us;
    /* waiting */
    srv_wait_t wait;
    char arg[64];               /* session id for session waits */
    char arg2[64];              /* the kernel to shut down after a session patch */
    /* the response, once known */
    bool responded;
    int status;
    char *resp;
    size_t resp_len;
    char location[256];
};

/* Route a request (api.c). Either responds now or calls srv_req_wait. */
void srv_api(korch_server_t *s, srv_req_t *req);

/* Take the request over: the connection no longer frees it. */
void srv_req_wait(srv_req_t *req, srv_wait_t what);

/* Respond with a JSON body (stolen; NULL = none) and release the request if
   its client is gone. */
void srv_respond(srv_req_t *req, int status, json_t *body);

/* Respond {"message": ...}. */
void srv_respond_error(srv_req_t *req, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ------------------------------------------------------------ websockets */

struct srv_ws {
    korch_server_t *srv;
    struct lws *wsi;
    srv_kernel_t *kernel;       /* NULL once detached */
    korch_ws_proto_t proto;
    char session_key[128];      /* the client's session_id, or a unique "#n" */
    bool has_session_id;
    /* receiving */
    unsigned char *rx;
    size_t rx_len, rx_cap;
    bool rx_binary, rx_skip;
    /* sending */
    zlistx_t *queue;            /* korch_wsframe_t*, referenced */
    size_t queued_bytes;
    bool dropping;
    uint64_t sent, received;
};

/* Bytes frames need before their data (LWS_PRE). */
size_t srv_ws_headroom(void);

/* Queue a frame for the client (takes a reference of its own). */
void srv_ws_send(srv_ws_t *ws, korch_wsframe_t *f);

/* Close the connection (asynchronously). */
void srv_ws_close(srv_ws_t *ws, const char *why);

/* ------------------------------------------------------- managed kernels */

struct srv_kernel {
    korch_server_t *srv;
    korch_kernel_t *k;
    char id[40];
    char name[128];
    char last_activity[32];     /* ISO 8601 */
    int64_t last_activity_ms;
    zlistx_t *conns;            /* srv_ws_t*, not owned */
    zhashx_t *routes;           /* parent msg_id -> srv_route_t (owned) */
    uint64_t route_seq;
    zlistx_t *replay;           /* srv_replay_t* (owned): buffers of disconnected sessions */
    zlistx_t *waiters;          /* srv_req_t* waiting for ready / gone */
    bool doomed;                /* being shut down; not listed any more */
    bool ever_ready;
    char dead_reason[256];
};

/* The server's shared state (server.c owns it; the others read it). */
typedef struct {
    korch_server_opts_t opts;
    zhashx_t *kernels;          /* id -> srv_kernel_t (owned) */
    zlistx_t *doomed;           /* srv_kernel_t* to destroy between rounds (owned) */
    zhashx_t *sessions;         /* jupyter session id -> json model core (owned) */
    char started[32];
    char last_activity[32];
    uint64_t ws_seq;
} srv_state_t;

srv_state_t *srv_state(korch_server_t *s);
korch_loop_t *srv_loop(korch_server_t *s);

/* kernels.c */
srv_kernel_t *srv_kernel_start(korch_server_t *s, const char *name, json_t *env, korch_err_t *err);
srv_kernel_t *srv_kernel_find(korch_server_t *s, const char *id);
json_t *srv_kernel_model(srv_kernel_t *mk);
/* Doom it: clients closed, waiters answered, destroyed between rounds;
   req (may be NULL) gets 204 once it is gone. */
void srv_kernel_delete(srv_kernel_t *mk, srv_req_t *req);
void srv_kernel_attach(srv_kernel_t *mk, srv_ws_t *ws);
void srv_kernel_detach(srv_ws_t *ws);
void srv_kernel_client_message(srv_ws_t *ws, const void *data, size_t len, bool binary);
/* Between rounds: destroy doomed kernels. Returns true if it did anything. */
bool srv_kernels_reap(korch_server_t *s);
void srv_kernels_destroy_all(korch_server_t *s);
size_t srv_kernels_live(korch_server_t *s);
/* api.c: a kernel became ready / failed: answer requests waiting on it. */
void srv_api_kernel_ready(srv_kernel_t *mk);
void srv_api_kernel_failed(srv_kernel_t *mk, const char *why);
void srv_api_kernel_gone(korch_server_t *s, const char *kernel_id);

void srv_touch(korch_server_t *s);

#endif
