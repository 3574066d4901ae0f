/*  Requests to JupyterHub's REST API on korch's loop (hub_http.c): libcurl's
 *  multi interface with its sockets and its timer on korch_loop, so nothing
 *  waits on the Hub: the loop serves every other client meanwhile.
 *
 *  Promises as the launcher's ops keep them (libuv's): done runs exactly
 *  once, on the loop, never from inside srv_hubhttp_start, never after
 *  srv_hubhttp_cancel. A reply is bounded (max_reply bytes: past it the
 *  request fails); every request has a timeout.
 *
 *  Threading: the loop thread only.
 */
#ifndef KORCH_SRV_HUB_HTTP_H
#define KORCH_SRV_HUB_HTTP_H

#include <stddef.h>

#include "korch/error.h"
#include "korch/loop.h"

typedef struct srv_hubhttp srv_hubhttp_t;
typedef struct srv_hubreq srv_hubreq_t;

/* What came back. status 0 = no HTTP answer (err says why: refused, timed
   out, too big). body is NUL-terminated, borrowed for the call. */
typedef struct {
    long status;
    const char *body;
    size_t len;
} srv_hubreply_t;

typedef void srv_hubhttp_done_fn(void *arg, const srv_hubreply_t *r, const korch_err_t *err);

/* A client on loop (borrowed, outlives it). NULL without memory. */
srv_hubhttp_t *srv_hubhttp_new(korch_loop_t *loop, long timeout_ms, size_t max_reply);
/* Ends every request still going: each done runs with no reply and err
   "korch serve is shutting down" (a done must not start requests then). */
void srv_hubhttp_destroy(srv_hubhttp_t **ph);

/* GET (form NULL) or POST an urlencoded form to url with the header
   "Authorization: token TOKEN" (token NULL: none). NULL + err when it
   cannot start (done will not run then). */
srv_hubreq_t *srv_hubhttp_start(srv_hubhttp_t *h, const char *url, const char *token, const char *form,
                                srv_hubhttp_done_fn *done, void *arg, korch_err_t *err);
/* Forget a request that has not finished: done never runs. */
void srv_hubhttp_cancel(srv_hubhttp_t *h, srv_hubreq_t *r);
/* Requests going on now. */
int srv_hubhttp_pending(const srv_hubhttp_t *h);

#endif
