/*  GET /metrics: korch serve's counters in the Prometheus text exposition
 *  format, version 0.0.4 (prometheus.io/docs/instrumenting/exposition_formats):
 *
 *      # HELP <name> <docstring>
 *      # TYPE <name> counter|gauge|histogram
 *      <name>{<label>="<value>",...} <value>
 *
 *  "Lines are separated by a line feed character (\n). The last line must
 *  end with a line feed character." A histogram is exposed as cumulative
 *  <name>_bucket{le="..."} series ending with le="+Inf", then <name>_sum and
 *  <name>_count. Behind the token like every other route (jupyter_server's
 *  /metrics is authenticated by default too).
 *
 *  The counters are srv_metrics_t (server_int.h); the files that see the
 *  events bump them, on the loop thread. Gauges (kernels by state, rejections of
 *  live kernels) are computed here, when asked.
 */
#include "metrics.h"
#include "conns.h"
#include "audit.h"
#include "quota.h"
#include "users.h"
#include "korch/buf.h"
#include "korch/llm_gate.h"
#include "korch/session.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/* Upper bounds of the launch latency buckets, in seconds (+Inf follows). */
static const double s_launch_le[SRV_LAUNCH_BUCKETS] = {0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30};
static const char *const s_launch_le_text[SRV_LAUNCH_BUCKETS] = {"0.05", "0.1", "0.25", "0.5", "1",
                                                                "2",    "5",   "10",   "30"};

static int64_t s_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* The kernel manager's listener: first starts that got ready or died,
   and the rejection counts of kernels torn down. */
static void s_on_kernel(srv_kernel_t *mk, srv_kev_t ev, const char *detail, void *arg)
{
    srv_metrics_t *m = arg;
    if (ev == SRV_KEV_READY && mk->readies == 1)
        m->launches_ok++;
    else if (ev == SRV_KEV_DEAD && mk->readies == 0)
        m->launches_failed++;
    else if (ev == SRV_KEV_GONE) {
        const korch_session_stats_t *st = mk->k ? korch_kernel_stats(mk->k) : NULL;
        for (int i = 0; st && i < KORCH_REJ__COUNT; i++)
            m->rejected_gone[i] += st->rejected[i];
    }
}

void srv_metrics_listen(srv_metrics_t *m, srv_kmgr_t *kmgr) { srv_kmgr_listen(kmgr, s_on_kernel, m); }

void srv_metrics_launch_time(srv_metrics_t *m, int64_t t0_us)
{
    double sec = (double)(s_now_us() - t0_us) / 1e6;
    if (sec < 0)
        sec = 0;
    for (int i = 0; i < SRV_LAUNCH_BUCKETS; i++)
        if (sec <= s_launch_le[i]) {
            m->launch_buckets[i]++;
            break;
        }
    m->launch_count++;
    m->launch_sum += sec;
}

/* ------------------------------------------------------------ rendering */

typedef struct {
    korch_buf_t buf;            /* util's bounded buffer */
    bool oom;                   /* sticky: an add failed */
} s_text_t;

#define MAX_TEXT (64u << 20)    /* the whole exposition: far beyond any server's */

static void s_printf(s_text_t *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void s_printf(s_text_t *t, const char *fmt, ...)
{
    if (t->oom)
        return;
    va_list ap;
    va_start(ap, fmt);
    if (korch_buf_vaddf(&t->buf, "metrics text", NULL, fmt, ap) != KORCH_OK)
        t->oom = true;
    va_end(ap);
}

static void s_head(s_text_t *t, const char *name, const char *type, const char *help)
{
    s_printf(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void s_value(s_text_t *t, const char *name, uint64_t v)
{
    s_printf(t, "%s %llu\n", name, (unsigned long long)v);
}

static void s_counter(s_text_t *t, const char *name, const char *help, uint64_t v)
{
    s_head(t, name, "counter", help);
    s_value(t, name, v);
}

/* Kernels korch serves (listed ones; the warm pool's are not), by state. */
static void s_kernels_by_state(korch_server_t *s, s_text_t *t)
{
    static const char *const names[] = {"starting", "idle", "busy", "restarting", "dead"};
    uint64_t n[5] = {0};
    zlistx_t *all = srv_kmgr_list(srv_parts(s)->kmgr);
    for (srv_kernel_t *mk = all ? zlistx_first(all) : NULL; mk; mk = zlistx_next(all)) {
        korch_kernel_state_t st = korch_kernel_state(mk->k);
        /* stopped = shut down on request: dead to a client, as in the model */
        n[st >= KORCH_KERNEL_DEAD ? 4 : (int)st]++;
    }
    zlistx_destroy(&all);
    s_head(t, "korch_kernels", "gauge", "Kernels korch serves (listed in /api/kernels), by execution state.");
    for (int i = 0; i < 5; i++)
        s_printf(t, "korch_kernels{state=\"%s\"} %llu\n", names[i], (unsigned long long)n[i]);
}

static void s_add_rejected(srv_kernel_t *mk, void *arg)
{
    uint64_t *sum = arg;
    const korch_session_stats_t *st = mk->k ? korch_kernel_stats(mk->k) : NULL;
    for (int i = 0; st && i < KORCH_REJ__COUNT; i++)
        sum[i] += st->rejected[i];
}

static void s_rejected(korch_server_t *s, s_text_t *t)
{
    uint64_t sum[KORCH_REJ__COUNT];
    memcpy(sum, srv_parts(s)->metrics->rejected_gone, sizeof sum);
    srv_kmgr_foreach(srv_parts(s)->kmgr, s_add_rejected, sum);
    s_head(t, "korch_kernel_messages_rejected_total", "counter",
           "Messages from kernels that korch's session rejected (bad signature, replay, malformed ...), by reason.");
    for (int i = 0; i < KORCH_REJ__COUNT; i++)
        s_printf(t, "korch_kernel_messages_rejected_total{reason=\"%s\"} %llu\n", korch_reject_name((korch_reject_t)i),
                 (unsigned long long)sum[i]);
}

static void s_launches(korch_server_t *s, s_text_t *t)
{
    const srv_metrics_t *m = srv_parts(s)->metrics;
    s_head(t, "korch_kernel_launches_total", "counter",
           "Kernels korch launched (for clients or the warm pool), by whether they became ready.");
    s_printf(t, "korch_kernel_launches_total{result=\"ok\"} %llu\n", (unsigned long long)m->launches_ok);
    s_printf(t, "korch_kernel_launches_total{result=\"failed\"} %llu\n",
             (unsigned long long)(m->launches_failed + srv_kmgr_failed_starts(srv_parts(s)->kmgr)));
    s_head(t, "korch_kernel_launch_seconds", "histogram",
           "Time from a POST /api/kernels or /api/sessions that needed a kernel to its answer with the kernel "
           "ready.");
    uint64_t cum = 0;
    for (int i = 0; i < SRV_LAUNCH_BUCKETS; i++) {
        cum += m->launch_buckets[i];
        s_printf(t, "korch_kernel_launch_seconds_bucket{le=\"%s\"} %llu\n", s_launch_le_text[i],
                 (unsigned long long)cum);
    }
    s_printf(t, "korch_kernel_launch_seconds_bucket{le=\"+Inf\"} %llu\n", (unsigned long long)m->launch_count);
    s_printf(t, "korch_kernel_launch_seconds_sum %.6f\n", m->launch_sum);
    s_printf(t, "korch_kernel_launch_seconds_count %llu\n", (unsigned long long)m->launch_count);
}

static void s_http(korch_server_t *s, s_text_t *t)
{
    const srv_metrics_t *m = srv_parts(s)->metrics;
    s_head(t, "korch_http_requests_total", "counter",
           "HTTP requests answered (websocket upgrades included), by status class.");
    for (int c = 1; c <= 5; c++)
        s_printf(t, "korch_http_requests_total{code=\"%dxx\"} %llu\n", c, (unsigned long long)m->http[c]);
    /* connection admission (conns.c) and request bodies (server.c) */
    srv_conns_t *c = srv_parts(s)->conns;
    s_head(t, "korch_http_connections", "gauge",
           "HTTP connections open, by whether their request headers are complete yet (pending: not yet).");
    s_printf(t, "korch_http_connections{state=\"pending\"} %llu\n", (unsigned long long)srv_conns_pending(c));
    s_printf(t, "korch_http_connections{state=\"active\"} %llu\n",
             (unsigned long long)(srv_conns_open(c) - srv_conns_pending(c)));
    s_head(t, "korch_http_connections_closed_total", "counter",
           "Connections korch closed before their request: to make room (idle) or at the header deadline.");
    s_printf(t, "korch_http_connections_closed_total{reason=\"idle\"} %llu\n", (unsigned long long)m->conns_evicted);
    s_printf(t, "korch_http_connections_closed_total{reason=\"header_timeout\"} %llu\n",
             (unsigned long long)m->conns_timed_out);
    s_counter(t, "korch_http_connections_refused_total",
              "Connections refused at accept: at the connection limits with none idle to close.", m->conns_refused);
    s_counter(t, "korch_http_bodies_refused_total",
              "Request bodies refused (503) because bodies in memory, or uploads on disk, were at their total limit.",
              m->bodies_refused);
}

/* Agent sessions by state, and their turns by how they ended. */
static void s_agents(korch_server_t *s, s_text_t *t)
{
    static const char *const states[] = {"starting", "idle", "running", "stopped"};
    static const char *const ends[] = {"ok", "interrupted", "error"};
    uint64_t n[4];
    srv_agents_count(srv_parts(s)->agents, n);
    s_head(t, "korch_agent_sessions", "gauge", "Agent sessions, by state (stopped: on disk, without a kernel).");
    for (int i = 0; i < 4; i++)
        s_printf(t, "korch_agent_sessions{state=\"%s\"} %llu\n", states[i], (unsigned long long)n[i]);
    s_head(t, "korch_agent_turns_total", "counter", "Agent turns ended, by how they ended.");
    for (int i = 0; i < 3; i++)
        s_printf(t, "korch_agent_turns_total{status=\"%s\"} %llu\n", ends[i],
                 (unsigned long long)srv_parts(s)->metrics->agent_turns[i]);
}

/* Per user (--users FILE): each user's kernels, agent sessions and model
   use today, labelled by name; only who's own for a user, every user's
   for an admin. */
static void s_users(korch_server_t *s, s_text_t *t, const srv_user_t *who)
{
    srv_users_t *users = srv_parts(s)->users;
    if (!users)
        return;
    json_t *list = korch_users_list(srv_users_current(users)), *e;
    static const char *const keys[] = {"kernels", "sessions", "turns_running", "tokens_today", "cost_today"};
    static const char *const names[] = {"korch_user_kernels", "korch_user_agent_sessions", "korch_user_turns_running",
                                        "korch_user_model_tokens_today", "korch_user_model_cost_today"};
    static const char *const helps[] = {"Kernels of each user (theirs and their agent sessions').",
                                        "Agent sessions of each user (any state).",
                                        "Agent turns of each user running now.",
                                        "Model tokens of each user's agent turns since 00:00 UTC.",
                                        "Model cost of each user's agent turns since 00:00 UTC (with --prices)."};
    json_t *reports = json_object();
    size_t i;
    json_array_foreach(list, i, e) {
        srv_user_t u = {.role = SRV_ROLE_USER};
        snprintf(u.name, sizeof u.name, "%s", json_string_value(json_object_get(e, "name")));
        if (who->role == SRV_ROLE_ADMIN || strcmp(u.name, who->name) == 0) {
            int running, sessions = srv_agents_owned(srv_parts(s)->agents, u.name, &running);
            json_object_set_new(reports, u.name, srv_quota_report(s, &u, sessions, running));
        }
    }
    for (int k = 0; k < 5; k++) {
        s_head(t, names[k], "gauge", helps[k]);
        const char *name;
        json_t *r;
        json_object_foreach(reports, name, r) {
            json_t *v = json_object_get(json_object_get(r, "used"), keys[k]);
            s_printf(t, "%s{user=\"%s\"} %g\n", names[k], name, json_number_value(v));
        }
    }
    json_decref(reports);
    json_decref(list);
}

/* The fair gates of the model keys (korch/llm_gate.h): each user's calls
   admitted, answered 429 and time waited, summed over the keys; who's own
   for a user, every user's for an admin (a session made before --users has
   the party ""). */
static void s_llm_gates(korch_server_t *s, s_text_t *t, const srv_user_t *who)
{
    if (!srv_parts(s)->opts->llm_gates)
        return;
    json_t *gates = korch_llm_gates_stats(srv_parts(s)->opts->llm_gates), *g, *sum = json_object();
    static const char *const keys[] = {"admitted", "rate_limited", "waited_ms"};
    static const char *const names[] = {"korch_user_model_calls_total", "korch_user_model_rate_limited_total",
                                        "korch_user_model_wait_seconds_total"};
    static const char *const helps[] = {"Model call attempts of each user's agents let through to the provider.",
                                        "Model call attempts of each user's agents the provider answered 429 / 529.",
                                        "Time each user's model calls waited for their turn at the key's gate."};
    size_t i;
    json_array_foreach(gates, i, g) {
        const char *name;
        json_t *p;
        json_object_foreach(json_object_get(g, "parties"), name, p) {
            if (who->role != SRV_ROLE_ADMIN && strcmp(name, who->name) != 0)
                continue;
            json_t *acc = json_object_get(sum, name);
            if (!acc)
                json_object_set_new(sum, name, acc = json_pack("{s:I, s:I, s:I}", "admitted", 0, "rate_limited", 0,
                                                               "waited_ms", 0));
            for (int k = 0; k < 3 && acc; k++)
                json_object_set_new(acc, keys[k],
                                    json_integer(json_integer_value(json_object_get(acc, keys[k])) +
                                                 json_integer_value(json_object_get(p, keys[k]))));
        }
    }
    for (int k = 0; k < 3; k++) {
        s_head(t, names[k], "counter", helps[k]);
        const char *name;
        json_t *acc;
        json_object_foreach(sum, name, acc) {
            double v = (double)json_integer_value(json_object_get(acc, keys[k]));
            s_printf(t, "%s{user=\"%s\"} %g\n", names[k], name, k == 2 ? v / 1000.0 : v);
        }
    }
    if (who->role == SRV_ROLE_ADMIN) {
        s_head(t, "korch_model_in_flight_limit", "gauge",
               "Model calls a key lets through at once now (halved on a 429, grown back after successes).");
        json_array_foreach(gates, i, g)
            s_printf(t, "korch_model_in_flight_limit{provider=\"%s\",key=\"%zu\"} %lld\n", /* no URL: it may hold a secret */
                     json_string_value(json_object_get(g, "provider")), i,
                     (long long)json_integer_value(json_object_get(g, "limit")));
    }
    json_decref(sum);
    json_decref(gates);
}

void srv_metrics_respond(korch_server_t *s, srv_req_t *req)
{
    if (strcmp(req->method, "GET") != 0) {
        srv_respond_error(req, 405, "method not allowed");
        return;
    }
    const srv_metrics_t *m = srv_parts(s)->metrics;
    s_text_t t = {.buf = KORCH_BUF_INIT(MAX_TEXT)};
    if (req->user.role != SRV_ROLE_ADMIN) { /* a user: their own figures only */
        s_users(s, &t, &req->user);
        s_llm_gates(s, &t, &req->user);
        goto out;
    }
    s_kernels_by_state(s, &t);
    s_counter(&t, "korch_executions_total",
              "Executions in korch's kernels (execute_input seen on IOPub): websocket clients' and agent "
              "sessions' alike.",
              m->executions);
    s_counter(&t, "korch_ws_messages_sent_total", "Kernel messages written to websocket clients.", m->ws_sent);
    s_counter(&t, "korch_ws_messages_received_total", "Websocket clients' messages relayed to their kernels.",
              m->ws_received);
    s_counter(&t, "korch_ws_messages_malformed_total",
              "Websocket clients' messages dropped because they could not be parsed.", m->ws_malformed);
    s_head(&t, "korch_websockets_open", "gauge", "Kernel websocket connections open.");
    s_value(&t, "korch_websockets_open", m->ws_open);
    s_counter(&t, "korch_ws_slow_clients_dropped_total",
              "Websocket clients dropped because they did not read (their send queue overflowed).",
              m->ws_dropped_slow);
    s_rejected(s, &t);
    s_http(s, &t);
    s_launches(s, &t);
    s_agents(s, &t);
    s_counter(&t, "korch_audit_failed_total", "Audit log lines that could not be written (--audit FILE).",
              srv_audit_failed(srv_parts(s)->audit));
    s_users(s, &t, &req->user);
    s_llm_gates(s, &t, &req->user);
out:
    if (t.oom) {
        korch_buf_free(&t.buf);
        srv_respond_error(req, 500, "out of memory");
        return;
    }
    srv_respond_raw(req, 200, CONTENT_TYPE, t.buf.p, t.buf.len);
    korch_buf_free(&t.buf);
}
