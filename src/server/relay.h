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
} srv_relay_opts_t;
/* NULL only when out of memory (so are srv_api_new and srv_agents_new). */
srv_relay_t *srv_relay_new(srv_kmgr_t *m, const srv_relay_opts_t *o);
void srv_relay_destroy(srv_relay_t **r);
void srv_kernel_attach(srv_kernel_t *mk, srv_ws_t *ws);
void srv_kernel_detach(srv_ws_t *ws);
void srv_kernel_client_message(srv_ws_t *ws, const void *data, size_t len, bool binary);

#endif
