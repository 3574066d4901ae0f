/*  Inside korch_server: what the files of src/server/ share. Not a public API.
 *
 *  The files, top to bottom; each calls only those below it (no file calls
 *  one that calls it back), and hears from below through listeners and
 *  closures:
 *
 *  server.c   the composition root: libwebsockets on an embedded libuv
 *             loop, connections, auth, origin, limits, bodies, websocket
 *             reassembly; makes every part below and hands each what it
 *             needs (srv_parts_t); dispatches requests through routes.c.
 *  routes.c   the route table (every route, its handler, auth and body)
 *             and the router that matches requests against it.
 *  api.c      the REST routes: /api, /api/status, /api/kernelspecs,
 *             /api/kernels, /api/sessions (the sessions are its own).
 *  agents.c   the agent API (/api/agent/...): sessions, their turns as
 *             server-sent events, persistence and resume;
 *  agent_actor.c  each session's agent on a thread of its own.
 *  metrics.c  GET /metrics: the counters below, in Prometheus' text format.
 *  resources.c  GET /kernelspecs/{name}/{file}: kernelspec logos and the like.
 *  web.c      the embedded web app's files.
 *  pool.c     the warm pool: kernels started ahead, handed out at once,
 *             refilled in the background one start at a time.
 *  cull.c     idle culling with jupyter_server's rules.
 *  kernels.c  the relay between kernels' channels and websocket clients
 *             (IOPub to all, replies to the requester, replay buffers per
 *             session_id).
 *  kmgr.c     the kernel manager (kmgr.h): every kernel, its lifecycle
 *             events to listeners, when_ready / when_gone closures. Knows
 *             no client.
 *  http.c     requests and websockets as handlers see them (responses,
 *             streams, bounded send queues); its state (srv_http_t) is
 *             server.c's, passed down in every request.
 *  conns.c, body.c  connection admission, request bodies.
 *
 *  Listeners of the kernel manager: the relay (statuses, closing clients),
 *  pool (its kernels' readiness and deaths), metrics (launches,
 *  rejections), api (sessions of a kernel gone), agents (sessions of a
 *  kernel gone). Closures: api's waiting requests (POST /api/kernels,
 *  restart, sessions, DELETE's 204) and agent sessions' kernels.
 *
 *  Lifetimes: a request (srv_req_t) belongs to its connection until a
 *  handler calls srv_req_wait; from then on whoever completes it owns it,
 *  and srv_respond frees it when the client has already gone. A kernel is
 *  never destroyed inside a handler: it is marked doomed and destroyed
 *  between loop rounds (srv_kmgr_reap).
 */
#ifndef KORCH_SERVER_INT_H
#define KORCH_SERVER_INT_H

#include <czmq.h>
#include <jansson.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "korch/buf.h"
#include "korch/kernel.h"
#include "korch/server.h"
#include "korch/wsmsg.h"
#include "kmgr.h"
#include "routes.h"

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
} srv_http_t;

struct srv_req {
    korch_server_t *srv;        /* the handlers' context (srv_parts) */
    srv_http_t *http;
    struct lws *wsi;            /* NULL once the client has gone */
    char method[8];
    char path[1024];
    char origin[512];           /* Origin header when allowed and cross-site, for CORS */
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
    char location[256];
    /* streaming (srv_stream_begin): written as it comes, then the connection closes */
    bool streaming, stream_started, stream_ended;
    korch_buf_t out;            /* pending bytes: out.p[out_off .. out.len) (bounded by srv_stream_write's max) */
    size_t out_off;
    bool page;                  /* the web app's files: srv_web_headers go with them */
    bool file;                  /* a kernel's or a user's file: srv_file_headers go with it (download.c) */
    char *disposition;          /* its Content-Disposition (owned); NULL = none */
    void (*on_gone)(srv_req_t *req, void *arg);    /* the client closed a stream */
    void *gone_arg;
};

/* ------------------------------------------------------ request bodies */

/* body.c: what bodies may hold at once (memory, or the disk of spooled
   uploads); used and max in bytes, max 0 = no bound. */
typedef struct {
    size_t used, max;
    const char *what;           /* the option that sets max, for the error message */
} srv_budget_t;

/* A body of at most limit decoded bytes: Content-Length expect, or chunked
   (RFC 9112 7.1). spool_dirfd >= 0: to an unnamed file in that directory
   (which must be korch's alone); else to memory that grows as bytes come.
   Either way charged to budget. NULL + err when the file cannot be made. */
srv_body_t *srv_body_new(size_t limit, size_t expect, bool chunked, srv_budget_t *budget, int spool_dirfd,
                         korch_err_t *err);
/* Bytes as they arrive. KORCH_E_TOOBIG: over limit (413); KORCH_E_NOMEM:
   the budget is spent (503); KORCH_E_INVALID: bad chunked framing (400);
   KORCH_E_IO: the spool file (500). Bytes after a complete body are ignored. */
korch_rc_t srv_body_feed(srv_body_t *b, const void *data, size_t len, korch_err_t *err);
bool srv_body_complete(const srv_body_t *b);
bool srv_body_chunked(const srv_body_t *b);
size_t srv_body_len(const srv_body_t *b);
/* In memory: the bytes, NUL-terminated (borrowed); NULL when spooled. */
char *srv_body_data(srv_body_t *b);
/* Spooled: the file (borrowed; written up to srv_body_len), else -1. */
int srv_body_fd(const srv_body_t *b);
/* Frees it and gives its bytes back to the budget. */
void srv_body_destroy(srv_body_t **b);

/* A spooled upload's bytes, mapped read-only (*data "" when empty); unmap
   with srv_req_upload_unmap. For a body in memory: req->body itself. */
korch_rc_t srv_req_upload_map(srv_req_t *req, const void **data, size_t *len, korch_err_t *err);
void srv_req_upload_unmap(srv_req_t *req);

/* ----------------------------------------------------------- connections */

/* conns.c: admission of connections, against idle sockets (see there). */
typedef struct srv_conns srv_conns_t;
typedef struct {
    int max_connections;        /* open at once */
    int max_per_peer;           /* open at once from one address (IPv6: one /64) */
    int max_pending;            /* open without complete request headers yet */
    int max_pending_per_peer;
    int header_timeout_ms;      /* from the accept to the end of the headers */
} srv_conns_limits_t;
/* kick(kick_arg): have lws service its loop once more this round (after a
   close asked for from outside its callbacks). */
srv_conns_t *srv_conns_new(korch_loop_t *loop, srv_metrics_t *metrics, void (*kick)(void *arg), void *kick_arg,
                           const srv_conns_limits_t *lim);
void srv_conns_destroy(srv_conns_t **c);
/* LWS_CALLBACK_SERVER_NEW_CLIENT_INSTANTIATED: false = refuse it (closing
   older pending connections when that makes room). */
bool srv_conns_accept(srv_conns_t *c, struct lws *wsi, int fd);
/* Its request's headers are complete. */
void srv_conns_headers_done(srv_conns_t *c, struct lws *wsi);
/* LWS_CALLBACK_WSI_DESTROY. */
void srv_conns_closed(srv_conns_t *c, struct lws *wsi);
size_t srv_conns_open(const srv_conns_t *c);
size_t srv_conns_pending(const srv_conns_t *c);

/* http.c: CLOCK_MONOTONIC in microseconds. */
int64_t srv_now_us(void);
/* An answer (or a request whose client left) for the access log and counters. */
void srv_http_log(srv_http_t *h, const char *method, const char *path, int status, int64_t t0_us, struct lws *wsi);
/* Frees a request (its body, its response). */
void srv_req_free(srv_req_t **req);

/* web.c: the web app embedded in the binary (GET / and /static/...),
   answered without the token. True when req was one of its files (it is
   answered then). srv_web_headers: name/value pairs (CSP and friends) sent
   with them. */
bool srv_web_serve(srv_req_t *req);
extern const char *const srv_web_headers[5][2];

/* download.c: files from a kernel or a user (work-dir files, figures, the
   notebook), served so that opening one never runs script in korch's
   origin. srv_respond_file answers with the bytes (copied) of mime under
   name (its last path segment goes in Content-Disposition): an attachment
   unless srv_file_inline(mime) (raster images the page shows), with
   srv_file_headers (nosniff, CSP sandbox) always.
   srv_content_disposition: the header's value for name, a new string
   (NULL when out of memory). */
void srv_respond_file(srv_req_t *req, const char *name, const char *mime, const void *data, size_t len);
bool srv_file_inline(const char *mime);
char *srv_content_disposition(const char *name, bool attachment);
extern const char *const srv_file_headers[2][2];

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

/* ------------------------------------------------------------ websockets */

struct srv_ws {
    korch_server_t *srv;
    srv_http_t *http;
    struct lws *wsi;
    srv_kernel_t *kernel;       /* NULL once detached */
    struct srv_relay *relay;    /* the relay it was attached through (kernels.c) */
    korch_ws_proto_t proto;
    char session_key[128];      /* the client's session_id, its messages' header.session, or a unique "#n" */
    bool has_session_id;        /* session_key is the URL's ?session_id= */
    bool header_session;        /* session_key was taken from its first message's header.session */
    uint64_t attach_seq;        /* the kernel's iopub_seq when it attached (kernels.c) */
    zlistx_t *held;             /* korch_wsframe_t*, referenced: what it gets until it is named (kernels.c) */
    int hold_timer;             /* releases held after a while (0: none) */
    /* receiving */
    korch_buf_t rx;             /* the message being reassembled, bounded by --max-ws-message */
    bool rx_binary, rx_skip;
    /* sending */
    zlistx_t *queue;            /* korch_wsframe_t*, referenced */
    size_t queued_bytes;
    size_t tx_off;              /* bytes of the first queued frame already written */
    bool dropping;
    bool finishing;             /* srv_ws_finish: close once the queue is written */
    uint64_t sent, received;
    uint32_t malformed;         /* its messages that did not parse */
};

/* Bytes frames need before their data (LWS_PRE). */
size_t srv_ws_headroom(void);

/* Queue a frame for the client (takes a reference of its own). */
void srv_ws_send(srv_ws_t *ws, korch_wsframe_t *f);

/* Close the connection (asynchronously). */
void srv_ws_close(srv_ws_t *ws, const char *why);

/* Close it once what is queued for it is written (a kernel's last words),
   or after a few seconds if the client does not read them. */
void srv_ws_finish(srv_ws_t *ws, const char *why);

/* ------------------------------------------------------- the parts */

typedef struct srv_relay srv_relay_t;
typedef struct srv_pool srv_pool_t;
typedef struct srv_cull srv_cull_t;
typedef struct srv_api srv_api_t;
typedef struct srv_agents srv_agents_t;

/* Counters for GET /metrics (metrics.c renders them), bumped on the loop
   thread by the code that sees the event, through the pointer it was
   given. */
#define SRV_LAUNCH_BUCKETS 9    /* launch latency buckets below +Inf (metrics.c) */
struct srv_metrics {
    uint64_t executions;        /* execute_input seen on IOPub (kernels.c) */
    uint64_t ws_sent;           /* kernel messages written to websocket clients (server.c) */
    uint64_t ws_received;       /* clients' messages relayed to kernels (kernels.c) */
    uint64_t ws_malformed;      /* clients' messages that did not parse (kernels.c) */
    uint64_t ws_open;           /* websockets open now (server.c) */
    uint64_t ws_dropped_slow;   /* clients dropped for not reading (server.c) */
    uint64_t http[6];           /* requests answered, by status / 100 (server.c) */
    uint64_t launches_ok, launches_failed;          /* metrics.c, listening to the kernels */
    uint64_t launch_buckets[SRV_LAUNCH_BUCKETS];    /* not cumulative; srv_metrics_launch_time */
    uint64_t launch_count;
    double launch_sum;
    uint64_t rejected_gone[KORCH_REJ__COUNT];       /* by kernels already destroyed */
    uint64_t agent_turns[3];    /* agent turns ended: ok, interrupted, error (agents.c) */
    uint64_t conns_refused;     /* connections refused at accept: at a limit (conns.c) */
    uint64_t conns_evicted;     /* connections without a request closed to make room (conns.c) */
    uint64_t conns_timed_out;   /* connections that did not send their headers in time (conns.c) */
    uint64_t bodies_refused;    /* request bodies refused: the memory or disk budget was spent (server.c) */
};

/* What server.c made, each part owned by its module; a route's handler
   finds its own part here (borrowed; NULL pool / cull when off). */
typedef struct {
    const korch_server_opts_t *opts;
    korch_loop_t *loop;
    srv_kmgr_t *kmgr;
    srv_relay_t *relay;
    srv_pool_t *pool;
    srv_cull_t *cull;
    srv_api_t *api;
    srv_agents_t *agents;
    srv_conns_t *conns;
    srv_metrics_t *metrics;
    const char *started;        /* ISO 8601 */
    const char *last_activity;  /* of the server's own (requests, websockets) */
} srv_parts_t;
/* The server is the handlers' context: its first member is its parts
   (server.c asserts so), read here without a call back into server.c. */
static inline const srv_parts_t *srv_parts(korch_server_t *s) { return (const srv_parts_t *)(void *)s; }

/* kernels.c: the relay between kernels' channels and websocket clients; it
   listens to kmgr (statuses "restarting" / "dead", closing clients). */
typedef struct {
    korch_loop_t *loop;
    size_t max_replay_bytes;
    srv_metrics_t *metrics;
} srv_relay_opts_t;
/* NULL only when out of memory (so are srv_api_new and srv_agents_new). */
srv_relay_t *srv_relay_new(srv_kmgr_t *m, const srv_relay_opts_t *o);
void srv_relay_destroy(srv_relay_t **r);
void srv_kernel_attach(srv_kernel_t *mk, srv_ws_t *ws);
void srv_kernel_detach(srv_ws_t *ws);
void srv_kernel_client_message(srv_ws_t *ws, const void *data, size_t len, bool binary);

/* pool.c: the warm pool (opts.pool_size, opts.pool_specs). srv_pool_new
   validates the specs and schedules the first starts (*out NULL: no pool
   asked for); srv_pool_destroy shuts every pool kernel down. */
korch_rc_t srv_pool_new(srv_kmgr_t *m, korch_loop_t *loop, const korch_server_opts_t *o, srv_pool_t **out,
                        korch_err_t *err);
void srv_pool_destroy(srv_pool_t **p);
/* A ready pool kernel of kernelspec name, now listed like a started one
   (idle; answer at once), or NULL when none is ready (or p is NULL). Does
   not check max_kernels. Schedules a refill. */
srv_kernel_t *srv_pool_take(srv_pool_t *p, const char *name);
/* {"NAME": {"size", "ready", "starting"}} (new), or NULL without a pool. */
json_t *srv_pool_status(srv_pool_t *p);

/* cull.c: idle culling (opts.cull_*), jupyter_server's rules. *out NULL: off. */
korch_rc_t srv_cull_new(srv_kmgr_t *m, korch_loop_t *loop, const korch_server_opts_t *o, srv_cull_t **out,
                        korch_err_t *err);
void srv_cull_destroy(srv_cull_t **c);

/* api.c: the REST routes of Jupyter's kernel API, and the sessions (its own). */
srv_api_t *srv_api_new(korch_server_t *s);
void srv_api_destroy(srv_api_t **a);

/* agent_actor.c: a session's agent on a thread of its own. cfg belongs to
   the session, outlives the actor (zactor_destroy joins it) and does not
   change while it runs, except cancel: set it to abandon a model call. */
typedef struct {
    char llm[256];              /* "provider:model" */
    char dir[PATH_MAX];         /* the session dir */
    char conn_path[PATH_MAX + 16];  /* the kernel's connection file */
    char kernel_name[128];
    char id[40];                /* the session's id, for the URLs in its events */
    char workdir[PATH_MAX + 8]; /* the kernel's work dir on this host ("" = not watched) */
    bool workdir_in_kernel;     /* no work dir on this host (a container): list it from the kernel */
    bool resume_live;           /* the kernel is the session's own from before korch's restart (re-adopted) */
    int max_steps;
    atomic_int cancel;
} srv_agent_cfg_t;
zactor_t *srv_agent_actor_new(srv_agent_cfg_t *cfg);
/* "/api/agent/sessions/{id}/{what}/{path}" (relative, no token), path
   percent-encoded but for '/': a new string. */
json_t *srv_agent_url(const char *id, const char *what, const char *path);

/* agents.c: the agent API (/api/agent/...); the sessions are its own. */
srv_agents_t *srv_agents_new(korch_server_t *s);
/* Stop every session's agent (joins their threads) and free them. */
void srv_agents_destroy(srv_agents_t **a);
/* Before an upload's body is read (req: PUT /api/agent/sessions/{session_id}/files/{path*}):
   false when it would be refused anyway (no such session, no kernel
   running), and then it is answered. */
bool srv_agent_upload_ok(korch_server_t *s, srv_req_t *req);
/* List the sessions a previous server left in opts.agent_dir (stopped; resumed on their next message). */
void srv_agents_load(srv_agents_t *a);
/* Agent sessions by state: starting, idle, running, stopped. */
void srv_agents_count(srv_agents_t *a, uint64_t n[4]);

/* resources.c: GET /kernelspecs/{name}/{file} (jupyter_server's route for
   a kernelspec's logos, kernel.js, kernel.css). */
void srv_kernelspec_resource(korch_server_t *s, srv_req_t *req, const char *name, const char *file);

/* metrics.c: GET /metrics (Prometheus text format 0.0.4). */
void srv_metrics_respond(korch_server_t *s, srv_req_t *req);
/* Count launches (ok, failed) and keep the rejections of kernels torn down. */
void srv_metrics_listen(srv_metrics_t *m, srv_kmgr_t *kmgr);
/* A POST that needed a kernel (received at t0_us, CLOCK_MONOTONIC) got it ready. */
void srv_metrics_launch_time(srv_metrics_t *m, int64_t t0_us);

#endif
