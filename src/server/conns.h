/*  Connection admission (conns.c): limits per address, a header deadline,
 *  idle connections closed first to make room. Loop thread only. */
#ifndef KORCH_SERVER_CONNS_H
#define KORCH_SERVER_CONNS_H

#include "http.h"
#include "korch/loop.h"

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

#endif
