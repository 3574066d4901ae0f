/*  Connection admission (conns.c): pending, unauthenticated and
 *  authenticated connections, limits per client (an address, or behind a
 *  trusted proxy its X-Forwarded-For client), a header deadline; a
 *  connection that presented the token is never closed to make room.
 *  Loop thread only. */
#ifndef KORCH_SERVER_CONNS_H
#define KORCH_SERVER_CONNS_H

#include "http.h"
#include "korch/loop.h"
#include "korch/netaddr.h"

/* conns.c: admission of connections, against sockets that present no
   token (see there). */
typedef struct srv_conns srv_conns_t;
typedef struct {
    int max_connections;        /* open at once */
    int max_per_peer;           /* open at once from one client: an address (IPv6: one /64), or
                                   behind a trusted proxy its X-Forwarded-For client */
    int max_pending;            /* open without complete request headers yet */
    int max_pending_per_peer;
    int header_timeout_ms;      /* from the accept to the end of the headers */
    const korch_cidr_t *trusted_proxies; /* whose X-Forwarded-For names the client (copied) */
    size_t ntrusted_proxies;
} srv_conns_limits_t;
/* kick(kick_arg): have lws service its loop once more this round (after a
   close asked for from outside its callbacks). */
srv_conns_t *srv_conns_new(korch_loop_t *loop, srv_metrics_t *metrics, void (*kick)(void *arg), void *kick_arg,
                           const srv_conns_limits_t *lim);
void srv_conns_destroy(srv_conns_t **c);
/* LWS_CALLBACK_SERVER_NEW_CLIENT_INSTANTIATED: false = refuse it (closing
   a pending or unauthenticated connection first when that makes room). */
bool srv_conns_accept(srv_conns_t *c, struct lws *wsi, int fd);
/* Its request's headers are complete; authed: it presented the valid
   token (or the server has none). false: its client (known now behind a
   trusted proxy) is over max_per_peer; why[why_len] says so, for a 429. */
bool srv_conns_headers_done(srv_conns_t *c, struct lws *wsi, bool authed, char *why, size_t why_len);
/* Its identity lookup (PENDING, counted as authed meanwhile) refused it:
   unauthenticated from now on. */
void srv_conns_unauthed(srv_conns_t *c, struct lws *wsi);
/* LWS_CALLBACK_WSI_DESTROY. */
void srv_conns_closed(srv_conns_t *c, struct lws *wsi);
/* The client's address for the log (behind a trusted proxy, once its
   headers are in, the X-Forwarded-For client); NULL when not counted. */
const char *srv_conns_client(struct lws *wsi);
size_t srv_conns_open(const srv_conns_t *c);
size_t srv_conns_pending(const srv_conns_t *c);

#endif
