/*  Inside korch_server: what the files of src/server/ share. Not a public API.
 *
 *  The files, top to bottom; each calls only those below it (no file calls
 *  one that calls it back), and hears from below through listeners and
 *  closures:
 *
 *  server.c   the composition root: libwebsockets on an embedded libuv
 *             loop, the lws callback; makes every part below and hands
 *             each what it needs (srv_parts_t).
 *  front.c    the front door (server_core.h, the server object it shares
 *             with server.c): origin, token, limits, bodies; dispatches
 *             requests through routes.c and writes their responses.
 *  routes.c   the route table (every route, its handler, auth and body)
 *             and the router that matches requests against it.
 *  api.c      the REST routes: /api, /api/status, /api/kernelspecs,
 *             /api/kernels, /api/sessions (the sessions are its own).
 *  agents.c   the agent API (/api/agent/...): sessions, their turns as
 *             server-sent events, persistence and resume (agents_int.h:
 *             its files);
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
 *  http.c     requests as handlers see them (responses, streams); its
 *             state (srv_http_t) is server.c's, passed down in every
 *             request and websocket.
 *  ws.c       the websocket (ws.h): a client's messages reassembled, the
 *             bounded queue of frames for it.
 *  conns.c, body.c  connection admission, request bodies.
 *
 *  Listeners of the kernel manager: the relay (statuses, closing clients),
 *  pool (its kernels' readiness and deaths), metrics (launches,
 *  rejections), api (sessions of a kernel gone), agents (sessions of a
 *  kernel gone). Closures: api's waiting requests (POST /api/kernels,
 *  restart, sessions, DELETE's 204) and agent sessions' kernels.
 *
 *  Headers, one per concern; this one holds the parts (srv_parts_t) and
 *  the small modules' constructors, and includes http.h (every handler
 *  answers requests). The others are included where they are needed:
 *  http.h (requests, responses, streams), body.h, conns.h, metrics.h (the
 *  counters), relay.h (kernels.c), ws.h (the websocket), kmgr.h, routes.h,
 *  agent_actor.h, agents_int.h (inside the agent API), server_core.h
 *  (inside the server object: server.c and front.c).
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
#include <stdbool.h>
#include <stdint.h>

#include "korch/buf.h"
#include "korch/kernel.h"
#include "korch/server.h"
#include "kmgr.h"
#include "routes.h"
#include "http.h"

typedef struct srv_conns srv_conns_t;        /* conns.h */
typedef struct srv_metrics srv_metrics_t;    /* metrics.h */

/* ------------------------------------------------------- the parts */

typedef struct srv_relay srv_relay_t;
typedef struct srv_pool srv_pool_t;
typedef struct srv_cull srv_cull_t;
typedef struct srv_api srv_api_t;
typedef struct srv_agents srv_agents_t;
typedef struct srv_mcps srv_mcps_t;
typedef struct srv_ident srv_ident_t;        /* ident.h */
typedef struct srv_users srv_users_t;        /* users.h */
typedef struct srv_quota srv_quota_t;        /* quota.h */
typedef struct srv_audit srv_audit_t;        /* audit.h */
typedef struct srv_hub srv_hub_t;            /* hub.h */

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
    srv_mcps_t *mcps;           /* MCP's sessions at /mcp (mcp_http.c) */
    srv_conns_t *conns;
    srv_metrics_t *metrics;
    srv_ident_t *ident;         /* who asks (ident.h): the resolvers, never NULL */
    srv_users_t *users;         /* --users FILE (users.h; owned by ident), or NULL */
    srv_quota_t *quota;         /* quotas per user (quota.h) */
    srv_audit_t *audit;         /* --audit FILE (audit.h), or NULL */
    srv_hub_t *hub;             /* JupyterHub's users (hub.h; owned by ident), or NULL */
    const char *started;        /* ISO 8601 */
    const char *last_activity;  /* of the server's own (requests, websockets) */
} srv_parts_t;
/* The server is the handlers' context: its first member is its parts
   (server.c asserts so), read here without a call back into server.c. */
static inline const srv_parts_t *srv_parts(korch_server_t *s) { return (const srv_parts_t *)(void *)s; }

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

/* agents.c: the agent API (/api/agent/...); the sessions are its own. */
srv_agents_t *srv_agents_new(korch_server_t *s);
/* Stop every session's agent (joins their threads) and free them. */
void srv_agents_destroy(srv_agents_t **a);
/* Deleted sessions whose threads have not ended yet (each ends with its
   "bye", on the loop). */
size_t srv_agents_closing(const srv_agents_t *a);
/* Before an upload's body is read (req: PUT /api/agent/sessions/{session_id}/files/{path*}):
   false when it would be refused anyway (no such session, no kernel
   running), and then it is answered. */
bool srv_agent_upload_ok(korch_server_t *s, srv_req_t *req);
/* List the sessions a previous server left in opts.agent_dir (stopped; resumed on their next message). */
void srv_agents_load(srv_agents_t *a);
/* Agent sessions by state: starting, idle, running, stopped. */
void srv_agents_count(srv_agents_t *a, uint64_t n[4]);
/* Agent sessions of user name (any state), and those running a turn. */
int srv_agents_owned(srv_agents_t *a, const char *name, int *running);

/* mcp_http.c: MCP's Streamable HTTP sessions (/mcp); destroying them
   shuts their kernels down. */
srv_mcps_t *srv_mcps_new(korch_server_t *s);
void srv_mcps_destroy(srv_mcps_t **a);
size_t srv_mcps_count(srv_mcps_t *a);

/* resources.c: GET /kernelspecs/{name}/{file} (jupyter_server's route for
   a kernelspec's logos, kernel.js, kernel.css). */
void srv_kernelspec_resource(korch_server_t *s, srv_req_t *req, const char *name, const char *file);

/* web.c: the web app embedded in the binary (GET / and /static/...),
   answered without the token. True when req was one of its files (it is
   answered then). srv_web_headers: name/value pairs (CSP and friends) sent
   with them. */
bool srv_web_serve(srv_req_t *req);
extern const char *const srv_web_headers[5][2];

#endif
