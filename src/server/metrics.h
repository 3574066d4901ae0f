/*  The counters of GET /metrics (metrics.c renders them in Prometheus'
 *  text format). Loop thread only. */
#ifndef KORCH_SERVER_METRICS_H
#define KORCH_SERVER_METRICS_H

#include "server_int.h"

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

/* metrics.c: GET /metrics (Prometheus text format 0.0.4). */
void srv_metrics_respond(korch_server_t *s, srv_req_t *req);
/* Count launches (ok, failed) and keep the rejections of kernels torn down. */
void srv_metrics_listen(srv_metrics_t *m, srv_kmgr_t *kmgr);
/* A POST that needed a kernel (received at t0_us, CLOCK_MONOTONIC) got it ready. */
void srv_metrics_launch_time(srv_metrics_t *m, int64_t t0_us);

#endif
