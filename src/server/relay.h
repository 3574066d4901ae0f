/*  The relay (kernels.c) between kernels' channels and websocket clients
 *  (ws.h): IOPub to all, replies to the requester, replay buffers per
 *  session_id. Loop thread only. */
#ifndef KORCH_SERVER_RELAY_H
#define KORCH_SERVER_RELAY_H

#include "server_int.h"

/* kernels.c: the relay between kernels' channels and websocket clients; it
   listens to kmgr (statuses "restarting" / "dead", closing clients). */
typedef struct {
    korch_loop_t *loop;
    size_t max_replay_bytes;
    srv_metrics_t *metrics;
    srv_audit_t *audit;         /* executions are written there (audit.h); may be NULL */
} srv_relay_opts_t;
/* NULL only when out of memory (so are srv_api_new and srv_agents_new). */
srv_relay_t *srv_relay_new(srv_kmgr_t *m, const srv_relay_opts_t *o);
void srv_relay_destroy(srv_relay_t **r);
void srv_kernel_attach(srv_kernel_t *mk, srv_ws_t *ws);
void srv_kernel_detach(srv_ws_t *ws);
void srv_kernel_client_message(srv_ws_t *ws, const void *data, size_t len, bool binary);
/* The kernel's outputs untrusted from now (taint.h): nothing the relay
   sends its clients can run script, until it restarts or srv_kernel_untaint;
   clients are told. why names who ("agent session S", "asked for"). */
void srv_kernel_taint(srv_kernel_t *mk, const char *why);
/* Lift it (the owner's deliberate choice; a restart does it too). False
   when it was not tainted. */
bool srv_kernel_untaint(srv_kernel_t *mk);
/* "untrusted" (and its reason, since) into a kernel model (borrowed). */
void srv_kernel_taint_model(srv_kernel_t *mk, json_t *model);
/* A restart lifts the taint unless fn(mk, arg) says code of the agent runs
   in it still (agents: a turn is running). */
typedef bool(srv_relay_hold_fn)(srv_kernel_t *mk, void *arg);
void srv_relay_hold_taint(srv_relay_t *r, srv_relay_hold_fn *fn, void *arg);

#endif
