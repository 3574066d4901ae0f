/*  Quotas per user (quota.h). */
#include "quota.h"
#include "users.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A user's use of the model today. */
typedef struct {
    long day;                       /* days since the epoch (UTC) */
    int64_t tokens;
    double cost;
} s_day_t;

struct srv_quota {
    zhashx_t *days;                 /* user name -> s_day_t (owned) */
};

static void s_free(void **p)
{
    free(*p);
    *p = NULL;
}

srv_quota_t *srv_quota_new(void)
{
    srv_quota_t *q = calloc(1, sizeof *q);
    if (!q || !(q->days = zhashx_new())) {
        free(q);
        return NULL;
    }
    zhashx_set_destructor(q->days, s_free);
    return q;
}

void srv_quota_destroy(srv_quota_t **pq)
{
    srv_quota_t *q = pq ? *pq : NULL;
    if (!q)
        return;
    zhashx_destroy(&q->days);
    free(q);
    *pq = NULL;
}

static long s_today(void) { return (long)(time(NULL) / 86400); }

static s_day_t *s_day(srv_quota_t *q, const char *user, bool make)
{
    s_day_t *d = zhashx_lookup(q->days, user);
    if (!d && make && (d = calloc(1, sizeof *d)))
        zhashx_insert(q->days, user, d);
    if (d && d->day != s_today())
        *d = (s_day_t){.day = s_today()};
    return d;
}

/* The limits of u (new; NULL: none, the single-token mode). */
static json_t *s_limits(korch_server_t *s, const srv_user_t *u)
{
    srv_users_t *users = srv_parts(s)->users;
    if (!users || !u || u->role == SRV_ROLE_NONE)
        return NULL;
    return korch_users_quota(srv_users_current(users), u->name);
}

/* What u uses now: kernels, today's model use. */
static void s_used(korch_server_t *s, const srv_user_t *u, int *kernels, s_day_t *day)
{
    const srv_parts_t *p = srv_parts(s);
    *kernels = 0;
    zlistx_t *all = srv_kmgr_list(p->kmgr);
    for (srv_kernel_t *mk = all ? zlistx_first(all) : NULL; mk; mk = zlistx_next(all))
        if (strcmp(mk->owner, u->name) == 0)
            (*kernels)++;
    zlistx_destroy(&all);
    s_day_t *d = s_day(p->quota, u->name, false);
    *day = d ? *d : (s_day_t){0};
}

/* Answer req 429 for key: used of limit. */
static void s_refuse(srv_req_t *req, const char *key, double used, double limit, const char *what)
{
    char msg[300];
    snprintf(msg, sizeof msg, "quota '%s' of user '%s' reached: %g %s used of %g (ask the operator: korch user add %s --quota %s=N)",
             key, req->user.name, used, what, limit, req->user.name, key);
    json_t *body = json_pack("{s:s, s:s, s:f, s:f}", "message", msg, "quota", key, "used", used, "limit", limit);
    srv_respond(req, 429, body);
}

/* Does adding more to used pass limits[key]? Then req is answered. */
static bool s_over(srv_req_t *req, json_t *limits, const char *key, double used, double more, const char *what)
{
    json_t *l = json_object_get(limits, key);
    if (!json_is_number(l) || used + more <= json_number_value(l) + 1e-9)
        return false;
    s_refuse(req, key, used, json_number_value(l), what);
    return true;
}

static bool s_kernel_ok(korch_server_t *s, srv_req_t *req, json_t *limits, int kernels)
{
    const korch_server_opts_t *o = srv_parts(s)->opts;
    if (s_over(req, limits, "kernels", kernels, 1, "kernels"))
        return false;
    static const char *const keys[] = {"memory_mb", "cpus"};
    double per[] = {o->kernel_memory_mb, o->kernel_cpus};
    for (int i = 0; i < 2; i++) {
        if (!json_is_number(json_object_get(limits, keys[i])))
            continue;
        if (per[i] <= 0) { /* the operator set a quota korch cannot count */
            srv_respond_error(req, 429,
                              "quota '%s' is set but korch serve does not know each kernel's %s: the operator must "
                              "start it with --%s",
                              keys[i], i ? "CPUs" : "memory", i ? "cpus" : "memory");
            return false;
        }
        if (s_over(req, limits, keys[i], kernels * per[i], per[i], i ? "CPUs" : "MiB"))
            return false;
    }
    return true;
}

/* Is req's user within its limits for what (a kernel, a session with
   sessions already, a turn)? A 429 with the numbers answered when not. */
typedef enum { S_KERNEL, S_SESSION, S_TURN } s_what_t;

static bool s_check(korch_server_t *s, srv_req_t *req, s_what_t what, int sessions)
{
    json_t *limits = s_limits(s, &req->user);
    if (!limits)
        return true;
    int kernels;
    s_day_t day;
    s_used(s, &req->user, &kernels, &day);
    bool ok;
    if (what == S_KERNEL)
        ok = s_kernel_ok(s, req, limits, kernels);
    else if (what == S_SESSION)
        ok = !s_over(req, limits, "sessions", sessions, 1, "agent sessions");
    else /* today's use is at or over the limit: no new turn (a turn under way ends by its own budget) */
        ok = !s_over(req, limits, "tokens_per_day", (double)day.tokens, 0.5, "model tokens today") &&
             !s_over(req, limits, "cost_per_day", day.cost, 1e-6, "spent on the model today");
    json_decref(limits);
    return ok;
}

bool srv_quota_kernel_ok(korch_server_t *s, srv_req_t *req) { return s_check(s, req, S_KERNEL, 0); }

bool srv_quota_session_ok(korch_server_t *s, srv_req_t *req, int sessions)
{
    return s_check(s, req, S_SESSION, sessions);
}

bool srv_quota_turn_ok(korch_server_t *s, srv_req_t *req)
{
    return s_check(s, req, S_TURN, 0);
}

void srv_quota_charge(korch_server_t *s, const char *user, int64_t tokens, double cost)
{
    s_day_t *d = s_day(srv_parts(s)->quota, user, true);
    if (!d)
        return;
    d->tokens += tokens > 0 ? tokens : 0;
    d->cost += cost > 0 && isfinite(cost) ? cost : 0;
}

json_t *srv_quota_report(korch_server_t *s, const srv_user_t *u, int sessions, int running)
{
    json_t *limits = s_limits(s, u);
    int kernels;
    s_day_t day;
    s_used(s, u, &kernels, &day);
    const korch_server_opts_t *o = srv_parts(s)->opts;
    json_t *used = json_pack("{s:i, s:i, s:i, s:I, s:f}", "kernels", kernels, "sessions", sessions, "turns_running",
                             running, "tokens_today", (json_int_t)day.tokens, "cost_today", day.cost);
    if (used && o->kernel_memory_mb > 0)
        json_object_set_new(used, "memory_mb", json_real(kernels * o->kernel_memory_mb));
    if (used && o->kernel_cpus > 0)
        json_object_set_new(used, "cpus", json_real(kernels * o->kernel_cpus));
    return json_pack("{s:o, s:o}", "quota", limits ? limits : json_object(), "used", used ? used : json_object());
}
