/*  The server's kernel manager (kmgr.h): kernels, their lifecycle events
 *  and the closures waiting on them. Knows no client.
 */
#include "kmgr.h"
#include "korch/log.h"
#include "korch/session.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ENV_VARS 256
#define MAX_LISTENERS 16

typedef enum { W_READY, W_GONE } s_wkind_t;

struct srv_kwait {
    srv_kernel_t *mk;
    s_wkind_t kind;
    bool due;                   /* ready already when made: fired by the next round's timer */
    srv_kready_fn *ready;
    srv_kgone_fn *gone;
    void *arg;
};

typedef struct {
    srv_kmgr_listener_fn *fn;
    void *arg;
} s_listener_t;

struct srv_kmgr {
    srv_kmgr_opts_t o;
    zhashx_t *kernels;          /* id -> srv_kernel_t: listed (owned) */
    zlistx_t *pooled;           /* srv_kernel_t*: started for the pool, not listed (owned) */
    zlistx_t *doomed;           /* srv_kernel_t*: to tear down next round (owned) */
    int reap_timer;             /* 0: none */
    zlistx_t *due;              /* srv_kwait_t*: ready closures to run next round (borrowed) */
    int due_timer;              /* 0: none */
    s_listener_t listeners[MAX_LISTENERS];
    size_t nlisteners;
    srv_kmgr_message_fn *sink;
    void *sink_arg;
    char last_activity[32];
    uint64_t failed_starts;
};

static void s_emit(srv_kernel_t *mk, srv_kev_t ev, const char *detail)
{
    srv_kmgr_t *m = mk->mgr;
    for (size_t i = 0; i < m->nlisteners; i++)
        m->listeners[i].fn(mk, ev, detail, m->listeners[i].arg);
}

void srv_kmgr_listen(srv_kmgr_t *m, srv_kmgr_listener_fn *fn, void *arg)
{
    if (m->nlisteners < MAX_LISTENERS)
        m->listeners[m->nlisteners++] = (s_listener_t){fn, arg};
    else
        korch_warn("kernel manager: more than %d listeners (one ignored)", MAX_LISTENERS);
}

void srv_kmgr_unlisten(srv_kmgr_t *m, srv_kmgr_listener_fn *fn, void *arg)
{
    for (size_t i = 0; i < m->nlisteners; i++)
        if (m->listeners[i].fn == fn && m->listeners[i].arg == arg) {
            memmove(&m->listeners[i], &m->listeners[i + 1], (m->nlisteners - i - 1) * sizeof m->listeners[0]);
            m->nlisteners--;
            return;
        }
}

uint64_t srv_kmgr_failed_starts(const srv_kmgr_t *m) { return m->failed_starts; }

void srv_kmgr_set_message_sink(srv_kmgr_t *m, srv_kmgr_message_fn *fn, void *arg)
{
    m->sink = fn;
    m->sink_arg = arg;
}

/* ---------------------------------------------------------- closures */

static void s_wait_unlink(srv_kwait_t *w)
{
    void *h = zlistx_find(w->mk->waits, w);
    if (h)
        zlistx_delete(w->mk->waits, h);
    if (w->due) {
        h = zlistx_find(w->mk->mgr->due, w);
        if (h)
            zlistx_delete(w->mk->mgr->due, h);
    }
}

void srv_kwait_cancel(srv_kwait_t **pw)
{
    srv_kwait_t *w = pw ? *pw : NULL;
    if (!w)
        return;
    s_wait_unlink(w);
    free(w);
    *pw = NULL;
}

/* Run fn of one ready closure: unlinked and freed first, so fn may do anything. */
static void s_fire_ready(srv_kwait_t *w, const char *error)
{
    srv_kernel_t *mk = w->mk;
    srv_kready_fn *fn = w->ready;
    void *arg = w->arg;
    s_wait_unlink(w);
    free(w);
    fn(mk, error, arg);
}

/* Every ready closure of mk (a closure may add others: they wait for the next time). */
static void s_fire_all_ready(srv_kernel_t *mk, const char *error)
{
    zlistx_t *now = zlistx_new();
    if (!now)
        return;
    for (srv_kwait_t *w = zlistx_first(mk->waits); w; w = zlistx_next(mk->waits))
        if (w->kind == W_READY)
            zlistx_add_end(now, w);
    /* fired one by one from the kernel's list: a closure may cancel a later one */
    for (srv_kwait_t *w = zlistx_first(now); w; w = zlistx_next(now))
        if (zlistx_find(mk->waits, w))
            s_fire_ready(w, error);
    zlistx_destroy(&now);
}

static int s_on_reap(korch_loop_t *loop, int id, void *arg);

static int s_on_due(korch_loop_t *loop, int id, void *arg)
{
    srv_kmgr_t *m = arg;
    m->due_timer = 0;
    srv_kwait_t *w;
    while ((w = zlistx_first(m->due))) {
        zlistx_delete(m->due, zlistx_cursor(m->due));
        w->due = false;
        s_fire_ready(w, srv_kernel_ready(w->mk) ? NULL : "kernel is not ready");
    }
    return 0;
}

static srv_kwait_t *s_wait_new(srv_kernel_t *mk, s_wkind_t kind, void *arg)
{
    srv_kwait_t *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    w->mk = mk;
    w->kind = kind;
    w->arg = arg;
    zlistx_add_end(mk->waits, w);
    return w;
}

srv_kwait_t *srv_kernel_when_ready(srv_kernel_t *mk, srv_kready_fn *fn, void *arg)
{
    if (!mk || mk->doomed)
        return NULL;
    srv_kwait_t *w = s_wait_new(mk, W_READY, arg);
    if (!w)
        return NULL;
    w->ready = fn;
    if (srv_kernel_ready(mk)) { /* from the warm pool, or attached to a running one: next round */
        srv_kmgr_t *m = mk->mgr;
        w->due = true;
        zlistx_add_end(m->due, w);
        if (!m->due_timer)
            m->due_timer = korch_loop_timer(m->o.loop, 0, 1, s_on_due, m);
    }
    return w;
}

srv_kwait_t *srv_kernel_when_gone(srv_kernel_t *mk, srv_kgone_fn *fn, void *arg)
{
    srv_kwait_t *w = mk ? s_wait_new(mk, W_GONE, arg) : NULL;
    if (w)
        w->gone = fn;
    return w;
}

/* ---------------------------------------------------------- kernels */

bool srv_kernel_ready(const srv_kernel_t *mk)
{
    korch_kernel_state_t st = korch_kernel_state(mk->k);
    return !mk->doomed && mk->ever_ready && !mk->restart_requested &&
           (st == KORCH_KERNEL_IDLE || st == KORCH_KERNEL_BUSY);
}

static const char *s_state_name(const srv_kernel_t *mk)
{
    korch_kernel_state_t st = korch_kernel_state(mk->k);
    return st == KORCH_KERNEL_STOPPED ? "dead" : korch_kernel_state_name(st);
}

json_t *srv_kernel_model(const srv_kernel_t *mk)
{
    return json_pack("{s:s, s:s, s:s, s:s, s:i}", "id", mk->id, "name", mk->name, "last_activity", mk->last_activity,
                     "execution_state", s_state_name(mk), "connections", (int)mk->connections);
}

void srv_kernel_touch(srv_kernel_t *mk)
{
    korch_iso8601_now(mk->last_activity);
    mk->last_activity_ms = korch_now_ms();
    if (!mk->pooled) /* the pool's own starts are nobody's activity */
        memcpy(mk->mgr->last_activity, mk->last_activity, sizeof mk->last_activity);
}

const char *srv_kmgr_last_activity(srv_kmgr_t *m) { return m->last_activity; }

srv_kernel_t *srv_kmgr_find(srv_kmgr_t *m, const char *id) { return id ? zhashx_lookup(m->kernels, id) : NULL; }

size_t srv_kmgr_count(srv_kmgr_t *m) { return zhashx_size(m->kernels); }

zlistx_t *srv_kmgr_list(srv_kmgr_t *m)
{
    zlistx_t *l = zhashx_values(m->kernels);
    return l ? l : zlistx_new();
}

void srv_kmgr_foreach(srv_kmgr_t *m, void (*fn)(srv_kernel_t *mk, void *arg), void *arg)
{
    for (srv_kernel_t *mk = zhashx_first(m->kernels); mk; mk = zhashx_next(m->kernels))
        fn(mk, arg);
    for (srv_kernel_t *mk = zlistx_first(m->pooled); mk; mk = zlistx_next(m->pooled))
        fn(mk, arg);
    for (srv_kernel_t *mk = zlistx_first(m->doomed); mk; mk = zlistx_next(m->doomed))
        fn(mk, arg);
}

static void s_on_message(korch_kernel_t *k, korch_channel_t ch, const korch_msg_t *msg, korch_msg_raw_t *raw,
                         void *arg)
{
    srv_kernel_t *mk = arg;
    srv_kernel_touch(mk);
    if (mk->mgr->sink)
        mk->mgr->sink(mk, ch, msg, raw, mk->mgr->sink_arg);
}

static void s_on_state(korch_kernel_t *k, korch_kernel_state_t st, const char *detail, void *arg)
{
    srv_kernel_t *mk = arg;
    srv_kernel_touch(mk);
    switch (st) {
    case KORCH_KERNEL_IDLE:
    case KORCH_KERNEL_BUSY: {
        bool up = mk->ever_ready && !mk->restart_requested;
        if (mk->adopted && !mk->ever_ready)
            korch_notice("kernel %s (%s) re-adopted: its state is kept", mk->id, mk->name);
        mk->ever_ready = true;
        mk->restart_requested = false;
        if (!up) { /* from starting or restarting */
            mk->readies++;
            s_emit(mk, SRV_KEV_READY, NULL);
        }
        s_fire_all_ready(mk, NULL);
        break;
    }
    case KORCH_KERNEL_RESTARTING:
        if (!mk->pooled)
            korch_notice("kernel %s restarting%s%s", mk->id, detail ? ": " : "", detail ? detail : "");
        s_emit(mk, SRV_KEV_RESTARTING, detail);
        break;
    case KORCH_KERNEL_DEAD:
        mk->restart_requested = false;
        snprintf(mk->dead_reason, sizeof mk->dead_reason, "%s", detail ? detail : "kernel died");
        if (mk->adopted && !mk->ever_ready)
            korch_notice("kernel %s could not be re-adopted (%s): it is removed, not listed", mk->id,
                         mk->dead_reason);
        else if (!mk->pooled)
            korch_notice("kernel %s dead: %s", mk->id, mk->dead_reason);
        s_emit(mk, SRV_KEV_DEAD, mk->dead_reason);
        s_fire_all_ready(mk, mk->dead_reason);
        if (!mk->ever_ready && !mk->pooled) /* it never ran: nothing for anyone to look at */
            srv_kmgr_delete(mk);
        break;
    default:
        break;
    }
}

static void s_kernel_free(srv_kernel_t **pmk)
{
    srv_kernel_t *mk = *pmk;
    if (!mk)
        return;
    korch_kernel_destroy(&mk->k);
    srv_kwait_t *w;
    while (mk->waits && (w = zlistx_first(mk->waits)))
        srv_kwait_cancel(&w);
    zlistx_destroy(&mk->waits);
    free(mk);
    *pmk = NULL;
}

/* KERNEL_* variables of the request's env, as Kernel Gateway passes them. */
static char **s_env(json_t *env, korch_err_t *err)
{
    size_t n = 0, cap = json_is_object(env) ? json_object_size(env) : 0;
    if (cap > MAX_ENV_VARS) {
        korch_err_set(err, KORCH_E_INVALID, "too many environment variables (%zu, at most %d)", cap, MAX_ENV_VARS);
        return NULL;
    }
    char **v = calloc(cap + 1, sizeof *v);
    if (!v) {
        korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        return NULL;
    }
    const char *name;
    json_t *val;
    json_object_foreach(env, name, val) {
        if (strncmp(name, "KERNEL_", 7) != 0 || !json_is_string(val))
            continue;
        bool ok = strlen(name) < 128 && json_string_length(val) < 8192;
        for (const char *c = name; ok && *c; c++)
            ok = (*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '_';
        if (!ok || strlen(json_string_value(val)) != json_string_length(val)) {
            korch_warn("ignoring environment variable '%.60s' (bad name or value)", name);
            continue;
        }
        size_t len = strlen(name) + json_string_length(val) + 2;
        v[n] = malloc(len);
        if (!v[n])
            break;
        snprintf(v[n++], len, "%s=%s", name, json_string_value(val));
    }
    return v;
}

static void s_env_free(char **envv)
{
    for (char **e = envv; e && *e; e++)
        free(*e);
    free(envv);
}

/* A start, or (adopt_id) the re-adoption of a kernel an earlier korch left. */
static srv_kernel_t *s_make(srv_kmgr_t *m, const srv_kstart_t *req, const char *adopt_id, korch_err_t *err)
{
    srv_kernel_t *mk = calloc(1, sizeof *mk);
    char **envv = mk ? s_env(req->env, err) : NULL;
    if (!mk || !envv) {
        if (!mk)
            korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        goto fail;
    }
    mk->mgr = m;
    if (!(mk->waits = zlistx_new())) {
        korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        goto fail;
    }
    snprintf(mk->name, sizeof mk->name, "%s", req->name);
    korch_kernel_opts_t ko = {
        .relay_stdin = true, /* clients answer their own input_requests */
        .kernelspec = req->name,
        .launcher = m->o.launcher,
        .env = (const char *const *)envv,
        .start_timeout_ms = m->o.start_timeout_ms,
        .cwd = req->cwd,
        /* a pool kernel that dies is replaced, not restarted (srv_kmgr_unpool turns it on) */
        .no_auto_restart = req->pooled,
        .kernel_id = adopt_id,
        .adopt = adopt_id != NULL,
    };
    mk->k = korch_kernel_new(m->o.loop, &ko, err);
    if (!mk->k) {
        if (err && err->rc != KORCH_E_NOTFOUND && err->rc != KORCH_E_INVALID) /* a launch that failed */
            m->failed_starts++;
        goto fail;
    }
    snprintf(mk->id, sizeof mk->id, "%s", korch_kernel_id(mk->k));
    korch_kernel_set_callbacks(mk->k, &(korch_kernel_cb_t){.on_state = s_on_state, .on_raw_message = s_on_message,
                                                          .arg = mk});
    mk->pooled = req->pooled;
    srv_kernel_touch(mk);
    if (req->pooled)
        zlistx_add_end(m->pooled, mk);
    else
        zhashx_insert(m->kernels, mk->id, mk);
    mk->adopted = adopt_id != NULL;
    korch_notice("kernel %s (%s) %s%s", mk->id, mk->name, adopt_id ? "being re-adopted" : "starting",
                 req->pooled ? " for the warm pool" : "");
    s_env_free(envv);
    s_emit(mk, SRV_KEV_STARTED, NULL);
    return mk;
fail:
    s_env_free(envv);
    s_kernel_free(&mk);
    return NULL;
}

srv_kernel_t *srv_kmgr_start(srv_kmgr_t *m, const srv_kstart_t *req, korch_err_t *err)
{
    return s_make(m, req, NULL, err);
}

srv_kernel_t *srv_kmgr_adopt(srv_kmgr_t *m, const char *kernel_id, const char *name, korch_err_t *err)
{
    if (!kernel_id || !*kernel_id || strlen(kernel_id) >= sizeof ((srv_kernel_t *)0)->id || !name || !*name ||
        strlen(name) >= sizeof ((srv_kernel_t *)0)->name) {
        korch_err_set(err, KORCH_E_INVALID, "cannot re-adopt kernel '%.40s' (%.40s): bad kernel id or kernelspec name",
                      kernel_id ? kernel_id : "", name ? name : "");
        return NULL;
    }
    if (zhashx_lookup(m->kernels, kernel_id)) {
        korch_err_set(err, KORCH_E_STATE, "kernel %s is listed already", kernel_id);
        return NULL;
    }
    return s_make(m, &(srv_kstart_t){.name = name}, kernel_id, err);
}

/* Does s look like a kernel id korch serve makes (a uuid: 8-4-4-4-12 hex)? */
static bool s_uuid_like(const char *s)
{
    if (strlen(s) != 36)
        return false;
    for (int i = 0; i < 36; i++)
        if (i == 8 || i == 13 || i == 18 || i == 23 ? s[i] != '-' : !strchr("0123456789abcdef", s[i]))
            return false;
    return true;
}

int srv_kmgr_adopt_mine(srv_kmgr_t *m)
{
    korch_launcher_t *l = m->o.launcher;
    korch_err_t err = {0};
    if (!l || !(korch_launcher_caps(l) & KORCH_LAUNCHER_ADOPTS))
        return 0;
    json_t *mine = korch_launcher_list_mine(l, &err);
    if (!mine) {
        korch_warn("cannot list the kernels to re-adopt: %s", err.msg);
        return -1;
    }
    int n = 0;
    size_t i;
    json_t *c;
    json_array_foreach(mine, i, c) {
        const char *id = json_string_value(json_object_get(c, "id"));
        const char *kid = json_string_value(json_object_get(c, "kernel_id"));
        const char *spec = json_string_value(json_object_get(c, "kernelspec"));
        const char *state = json_string_value(json_object_get(c, "state"));
        char why[sizeof err.msg + 64] = "";
        korch_err_clear(&err);
        if (!id || !kid || !spec || !state)
            continue;
        if (!s_uuid_like(kid))
            snprintf(why, sizeof why, "its korch.kernel_id label '%.40s' is not a kernel id of korch serve", kid);
        else if (strcmp(state, "running") != 0)
            snprintf(why, sizeof why, "it ended while korch was down (%.40s)", state[0] ? state : "no task");
        else if (zhashx_lookup(m->kernels, kid)) {
            /* two of ours claim one id: the first is being adopted, this one is left alone */
            korch_warn("kernel %s: %s %.25s claims that id too; left as it is", kid, korch_launcher_name(l), id);
            continue;
        } else if (!srv_kmgr_adopt(m, kid, spec, &err))
            snprintf(why, sizeof why, "%s", err.msg);
        else {
            n++;
            continue;
        }
        korch_err_clear(&err);
        korch_rc_t rc = korch_launcher_remove_mine(l, id, &err);
        korch_notice("kernel %.40s (%s %.25s) not re-adopted: %s; %s%s", kid, korch_launcher_name(l), id, why,
                     rc ? "cannot remove it: " : "removed", rc ? err.msg : "");
    }
    json_decref(mine);
    if (n)
        korch_notice("re-adopting %d kernel(s) of this instance left by an earlier korch", n);
    return n;
}

void srv_kmgr_unpool(srv_kernel_t *mk)
{
    srv_kmgr_t *m = mk->mgr;
    void *h = mk->pooled && !mk->doomed ? zlistx_find(m->pooled, mk) : NULL;
    if (!h)
        return;
    zlistx_delete(m->pooled, h);
    mk->pooled = false;
    korch_kernel_set_auto_restart(mk->k, true);
    /* idle from the moment it is handed out, not from its start */
    srv_kernel_touch(mk);
    zhashx_insert(m->kernels, mk->id, mk);
    korch_notice("kernel %s (%s) handed out from the warm pool", mk->id, mk->name);
    s_emit(mk, SRV_KEV_UNPOOLED, NULL);
}

void srv_kmgr_delete(srv_kernel_t *mk)
{
    if (!mk || mk->doomed)
        return;
    srv_kmgr_t *m = mk->mgr;
    mk->doomed = true;
    if (mk->pooled) {
        void *h = zlistx_find(m->pooled, mk);
        if (h)
            zlistx_delete(m->pooled, h);
    } else
        zhashx_delete(m->kernels, mk->id);
    zlistx_add_end(m->doomed, mk);
    if (!m->reap_timer) /* never inside its own callback: a round later */
        m->reap_timer = korch_loop_timer(m->o.loop, 0, 1, s_on_reap, m);
    korch_kernel_set_callbacks(mk->k, NULL);
    if (!mk->pooled)
        korch_notice("kernel %s shutting down", mk->id);
    s_emit(mk, SRV_KEV_DELETED, NULL);
    /* closures waiting for it to be ready will not see that */
    s_fire_all_ready(mk, "kernel was shut down");
}

korch_rc_t srv_kmgr_restart(srv_kernel_t *mk, korch_err_t *err)
{
    if (mk->adopted && !mk->ever_ready) /* no process of ours to stop yet */
        return korch_err_set(err, KORCH_E_STATE, "kernel %s is still being re-adopted: restart it once it is ready",
                             mk->id);
    bool was = mk->restart_requested;
    mk->restart_requested = true;
    korch_rc_t rc = korch_kernel_restart(mk->k, err);
    if (rc != KORCH_OK)
        mk->restart_requested = was;
    return rc;
}

bool srv_kmgr_has_doomed(const srv_kmgr_t *m) { return zlistx_size(m->doomed) > 0; }

/* Tear the first doomed kernel down. From a handler korch_kernel_destroy
   neither blocks nor runs the loop: the kernel detaches and ends itself
   on the loop (shutdown_request, grace, SIGTERM, SIGKILL); outside
   handlers (at exit) it runs the loop until the kernel is gone. */
static bool s_reap_one(srv_kmgr_t *m)
{
    srv_kernel_t *mk = zlistx_first(m->doomed);
    if (!mk)
        return false;
    zlistx_delete(m->doomed, zlistx_cursor(m->doomed));
    char id[40];
    snprintf(id, sizeof id, "%s", mk->id);
    bool quiet = mk->pooled;
    /* listeners read its last figures (rejections) first */
    s_emit(mk, SRV_KEV_GONE, NULL);
    korch_kernel_destroy(&mk->k);
    srv_kwait_t *w;
    while ((w = zlistx_first(mk->waits))) {
        srv_kgone_fn *fn = w->kind == W_GONE ? w->gone : NULL;
        void *arg = w->arg;
        srv_kwait_cancel(&w);
        if (fn)
            fn(id, arg);
    }
    s_kernel_free(&mk);
    if (!quiet)
        korch_notice("kernel %s shut down", id);
    return true;
}

static int s_on_reap(korch_loop_t *loop, int id, void *arg)
{
    srv_kmgr_t *m = arg;
    m->reap_timer = 0;
    while (s_reap_one(m))
        ;
    return 0;
}

bool srv_kmgr_reap(srv_kmgr_t *m)
{
    bool any = false;
    while (s_reap_one(m))
        any = true;
    return any;
}

void srv_kmgr_delete_all(srv_kmgr_t *m)
{
    zlistx_t *all = srv_kmgr_list(m);
    for (srv_kernel_t *mk = all ? zlistx_first(all) : NULL; mk; mk = zlistx_next(all))
        srv_kmgr_delete(mk);
    zlistx_destroy(&all);
    srv_kernel_t *mk;
    while ((mk = zlistx_first(m->pooled)))
        srv_kmgr_delete(mk);
    while (srv_kmgr_reap(m))
        ;
}

srv_kmgr_t *srv_kmgr_new(const srv_kmgr_opts_t *o, korch_err_t *err)
{
    srv_kmgr_t *m = calloc(1, sizeof *m);
    if (!m || !(m->kernels = zhashx_new()) || !(m->pooled = zlistx_new()) || !(m->doomed = zlistx_new()) ||
        !(m->due = zlistx_new())) {
        srv_kmgr_destroy(&m);
        korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        return NULL;
    }
    m->o = *o;
    return m;
}

void srv_kmgr_destroy(srv_kmgr_t **pm)
{
    srv_kmgr_t *m = *pm;
    if (!m)
        return;
    if (m->kernels && m->pooled && m->doomed && m->due)
        srv_kmgr_delete_all(m);
    if (m->due_timer)
        korch_loop_timer_end(m->o.loop, m->due_timer);
    if (m->reap_timer)
        korch_loop_timer_end(m->o.loop, m->reap_timer);
    zhashx_destroy(&m->kernels);
    zlistx_destroy(&m->pooled);
    zlistx_destroy(&m->doomed);
    zlistx_destroy(&m->due);
    free(m);
    *pm = NULL;
}
