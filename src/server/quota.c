/*  Quotas per user (quota.h). */
#include "quota.h"
#include "users.h"
#include "korch/fsutil.h"
#include "korch/launcher.h"
#include "korch/log.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DAYS_FILE ".quota-today.json"    /* in opts.agent_dir */
#define MAX_DAYS_FILE (16u << 20)

/* A user's use of the model today. */
typedef struct {
    long day;                       /* days since the epoch (UTC) */
    int64_t tokens;
    double cost;
} s_day_t;

/* The days file's writer: at most one write at the launcher's worker at
   a time; what changes meanwhile is written after it. It outlives the
   quota when a write is still out at the end (orphan: its done writes the
   last state, `last`, and frees it). */
typedef struct {
    srv_quota_t *q;                 /* NULL once the quota is gone */
    korch_launcher_t *launcher;     /* borrowed (outlives the server) */
    bool busy, dirty;
    char *last;                     /* the final text, for an orphan */
    char path[];
} s_writer_t;

typedef struct {
    s_writer_t *w;
    char *text;
    char why[300];
} s_job_t;

struct srv_quota {
    zhashx_t *days;                 /* user name -> s_day_t (owned) */
    s_writer_t *w;                  /* NULL: no agent dir, kept in memory */
};

static void s_free(void **p)
{
    free(*p);
    *p = NULL;
}

static long s_today(void) { return (long)(time(NULL) / 86400); }

/* {"day": D, "users": {name: {"tokens", "cost"}}} of today's use (new text). */
static char *s_days_text(srv_quota_t *q)
{
    json_t *users = json_object();
    long today = s_today();
    for (s_day_t *d = zhashx_first(q->days); d; d = zhashx_next(q->days))
        if (d->day == today)
            json_object_set_new(users, zhashx_cursor(q->days),
                                json_pack("{s:I, s:f}", "tokens", (json_int_t)d->tokens, "cost", d->cost));
    json_t *doc = json_pack("{s:i, s:o}", "day", (int)today, "users", users);
    char *text = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
    json_decref(doc);
    return text;
}

static void s_write(const char *path, const char *text, char *why, size_t why_len)
{
    korch_err_t e = {0};
    if (korch_fs_write(path, text, strlen(text), &(korch_fs_opts_t){.mode = 0600}, &e) != KORCH_OK)
        snprintf(why, why_len, "%.280s", e.msg);
}

static void s_job_run(void *arg)
{
    s_job_t *j = arg;
    s_write(j->w->path, j->text, j->why, sizeof j->why);
}

static void s_queue(s_writer_t *w);

static void s_job_done(void *arg)
{
    s_job_t *j = arg;
    s_writer_t *w = j->w;
    if (j->why[0])
        korch_warn("the day's model use per user is not kept for a restart: %s", j->why);
    free(j->text);
    free(j);
    w->busy = false;
    if (!w->q) { /* the quota went meanwhile: its last state, then the writer goes */
        char why[300] = "";
        if (w->last)
            s_write(w->path, w->last, why, sizeof why);
        free(w->last);
        free(w);
        return;
    }
    if (w->dirty)
        s_queue(w);
}

/* Today's use to the file, off the loop. */
static void s_queue(s_writer_t *w)
{
    w->dirty = true;
    if (w->busy)
        return;
    s_job_t *j = calloc(1, sizeof *j);
    if (!j || !(j->text = s_days_text(w->q))) {
        free(j);
        return;
    }
    j->w = w;
    korch_err_t err = {0};
    w->dirty = false;
    w->busy = true;
    if (korch_launcher_host_work(w->launcher, s_job_run, s_job_done, j, &err) != KORCH_OK) {
        korch_warn("the day's model use per user is not kept for a restart: %s", err.msg);
        w->busy = false;
        free(j->text);
        free(j);
    }
}

/* Today's use as a previous korch serve left it (a blocking read, at start). */
static void s_load(srv_quota_t *q)
{
    size_t len = 0;
    korch_err_t e = {0};
    char *text = korch_fs_read(q->w->path, MAX_DAYS_FILE, true, &len, &e);
    if (!text)
        return;
    json_error_t je;
    json_t *doc = json_loadb(text, len, 0, &je);
    free(text);
    json_t *users = json_object_get(doc, "users");
    if (!json_is_object(users) || json_integer_value(json_object_get(doc, "day")) != s_today()) {
        if (!doc)
            korch_warn("'%s' is not JSON (%s): the day's model use starts at 0", q->w->path, je.text);
        json_decref(doc);
        return;
    }
    const char *name;
    json_t *u;
    json_object_foreach(users, name, u) {
        json_t *t = json_object_get(u, "tokens"), *c = json_object_get(u, "cost");
        s_day_t *d = calloc(1, sizeof *d);
        if (!d || strlen(name) >= 64) {
            free(d);
            continue;
        }
        *d = (s_day_t){.day = s_today(), .tokens = json_is_integer(t) && json_integer_value(t) > 0 ? json_integer_value(t) : 0,
                       .cost = json_is_number(c) && json_number_value(c) > 0 ? json_number_value(c) : 0};
        zhashx_update(q->days, name, d);
    }
    json_decref(doc);
}

srv_quota_t *srv_quota_new(const korch_server_opts_t *o)
{
    srv_quota_t *q = calloc(1, sizeof *q);
    if (!q || !(q->days = zhashx_new())) {
        free(q);
        return NULL;
    }
    zhashx_set_destructor(q->days, s_free);
    const char *dir = o && o->agent_dir && *o->agent_dir ? o->agent_dir : "korch-sessions";
    size_t n = strlen(dir) + sizeof DAYS_FILE + 2;
    if (o && o->launcher && (q->w = calloc(1, sizeof *q->w + n))) {
        q->w->q = q;
        q->w->launcher = o->launcher;
        snprintf(q->w->path, n, "%s/%s", dir, DAYS_FILE);
        korch_mkdirs(dir, 0700, NULL);
        s_load(q);
    }
    return q;
}

void srv_quota_destroy(srv_quota_t **pq)
{
    srv_quota_t *q = pq ? *pq : NULL;
    if (!q)
        return;
    s_writer_t *w = q->w;
    if (w && w->busy) { /* its done writes what is now */
        w->last = w->dirty ? s_days_text(q) : NULL;
        w->q = NULL;
    } else if (w) {
        char why[300] = "";
        char *text = w->dirty ? s_days_text(q) : NULL;
        if (text)
            s_write(w->path, text, why, sizeof why);
        free(text);
        free(w);
    }
    zhashx_destroy(&q->days);
    free(q);
    *pq = NULL;
}

static s_day_t *s_day(srv_quota_t *q, const char *user, bool make)
{
    s_day_t *d = zhashx_lookup(q->days, user);
    if (!d && make && (d = calloc(1, sizeof *d)))
        zhashx_insert(q->days, user, d);
    if (d && d->day != s_today())
        *d = (s_day_t){.day = s_today()};
    return d;
}

/* The limits of u (new; NULL: none, the single-token mode): korch serve
   --quota's defaults, the users file's over them. A Hub user without a
   users file has the defaults. */
static json_t *s_limits(korch_server_t *s, const srv_user_t *u)
{
    const srv_parts_t *p = srv_parts(s);
    if ((!p->users && !p->hub) || !u || u->role == SRV_ROLE_NONE)
        return NULL;
    json_t *q = json_is_object(p->opts->default_quota) ? json_deep_copy(p->opts->default_quota) : json_object();
    if (p->users) {
        json_t *own = korch_users_quota(srv_users_current(p->users), u->name);
        json_object_update(q, own);
        json_decref(own);
    }
    return q;
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
    srv_quota_t *q = srv_parts(s)->quota;
    if (q->w && (tokens > 0 || (cost > 0 && isfinite(cost))))
        s_queue(q->w);
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
