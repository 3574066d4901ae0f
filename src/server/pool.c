/*  The warm pool: kernels started ahead of time, per kernelspec, and handed
 *  out on POST /api/kernels (or a session, or an agent session) at once.
 *
 *  A pool kernel is a kernel manager's kernel started pooled (kmgr.h): with
 *  the server's launcher like any other, but not listed, so it is not
 *  listed by GET /api/kernels, not counted in max_kernels, not reachable by
 *  websocket and never culled. srv_pool_take hands a ready one out
 *  (srv_kmgr_unpool): from then on it is an ordinary kernel whose id the
 *  client learns from the 201 answer. The pool hears of its kernels' deaths
 *  as a listener of the kernel manager.
 *
 *  Refilling happens in the background, one start at a time for the whole
 *  pool, so a burst of takes does not start N kernels at once on a small
 *  machine, and a moment after a take (REFILL_SETTLE_MS). A pool kernel that dies (or restarts, which means its process
 *  died) while waiting is shut down and replaced. A kernelspec whose
 *  starts keep failing is retried with a backoff (1 s doubling to 60 s),
 *  not in a loop.
 *
 *  Ownership: the kernel manager owns every kernel; the pool keeps a list
 *  of those it started and has not handed out.
 */
#include "server_int.h"
#include "korch/kernelspec.h"
#include "korch/log.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_POOL_SPECS 16
#define MAX_POOL_SIZE 64        /* per kernelspec */
#define BACKOFF_MAX_MS 60000
/* After a take, the refill waits this long: the client that got the kernel
   connects and asks kernel_info meanwhile. A launcher's start runs on the
   server's thread (the docker launcher's create + start calls block it for
   ~0.5-1 s), so starting at once would stall exactly that client. */
#define REFILL_SETTLE_MS 1500

typedef struct {
    char name[128];
    int size;                   /* kernels to keep (ready or starting) */
    zlistx_t *kernels;          /* srv_kernel_t*, pooled, oldest first (owned, see above) */
    int failures;               /* starts in a row that never became ready */
    int64_t retry_at_ms;        /* no start before this (backoff) */
} s_spec_t;

struct srv_pool {
    srv_kmgr_t *kmgr;
    korch_loop_t *loop;
    s_spec_t specs[MAX_POOL_SPECS];
    size_t nspecs;
    srv_kernel_t *starting;     /* the one start under way, or NULL (also in its spec's list) */
    int timer;                  /* the refill timer, 0 when none */
    bool listening;             /* registered with the kernel manager */
    int64_t timer_at_ms;
};

static void s_schedule(srv_pool_t *p, int delay_ms);

static s_spec_t *s_spec(srv_pool_t *p, const char *name)
{
    for (size_t i = 0; i < p->nspecs; i++)
        if (strcmp(p->specs[i].name, name) == 0)
            return &p->specs[i];
    return NULL;
}

static bool s_ready(srv_kernel_t *mk)
{
    return srv_kernel_ready(mk) && korch_kernel_state(mk->k) == KORCH_KERNEL_IDLE;
}

static int s_backoff_ms(int failures)
{
    int shift = failures > 7 ? 6 : failures - 1;
    int ms = 1000 << (shift < 0 ? 0 : shift);
    return ms > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : ms;
}

/* Start one kernel for the spec that lacks the most, if none is starting. */
static void s_refill(srv_pool_t *p)
{
    if (p->starting)
        return;
    int64_t now = korch_now_ms(), wait_until = 0;
    s_spec_t *best = NULL;
    int best_deficit = 0;
    for (size_t i = 0; i < p->nspecs; i++) {
        s_spec_t *sp = &p->specs[i];
        int deficit = sp->size - (int)zlistx_size(sp->kernels);
        if (deficit <= 0)
            continue;
        if (sp->retry_at_ms > now) {
            if (!wait_until || sp->retry_at_ms < wait_until)
                wait_until = sp->retry_at_ms;
            continue;
        }
        if (deficit > best_deficit) {
            best = sp;
            best_deficit = deficit;
        }
    }
    if (!best) {
        if (wait_until)
            s_schedule(p, (int)(wait_until - now));
        return;
    }
    korch_err_t err = {0};
    srv_kernel_t *mk = srv_kmgr_start(p->kmgr, &(srv_kstart_t){.name = best->name, .pooled = true}, &err);
    if (!mk) {
        best->failures++;
        int ms = s_backoff_ms(best->failures);
        best->retry_at_ms = now + ms;
        korch_warn("warm pool: cannot start a '%s' kernel: %s (retrying in %d s)", best->name, err.msg, ms / 1000);
        s_schedule(p, 0); /* other specs may start meanwhile */
        return;
    }
    zlistx_add_end(best->kernels, mk);
    p->starting = mk;
}

static int s_on_timer(korch_loop_t *loop, int id, void *arg)
{
    srv_pool_t *p = arg;
    p->timer = 0;
    s_refill(p);
    return 0;
}

/* Refill after delay_ms (an earlier pending refill wins). */
static void s_schedule(srv_pool_t *p, int delay_ms)
{
    int64_t at = korch_now_ms() + delay_ms;
    if (p->timer > 0) {
        if (p->timer_at_ms <= at)
            return;
        korch_loop_timer_end(p->loop, p->timer);
        p->timer = 0;
    }
    int id = korch_loop_timer(p->loop, delay_ms, 1, s_on_timer, p);
    if (id > 0) {
        p->timer = id;
        p->timer_at_ms = at;
    }
}

/* The kernel manager's listener: a pool kernel got ready, or died. */
static void s_on_kernel(srv_kernel_t *mk, srv_kev_t ev, const char *detail, void *arg)
{
    srv_pool_t *p = arg;
    if (!mk->pooled && ev != SRV_KEV_DELETED)
        return;
    s_spec_t *sp = s_spec(p, mk->name);
    void *h = sp ? zlistx_find(sp->kernels, mk) : NULL;
    if (!h)
        return;
    if (ev == SRV_KEV_DELETED) { /* by someone else (the server going): forget it */
        zlistx_delete(sp->kernels, h);
        if (p->starting == mk)
            p->starting = NULL;
        return;
    }
    if (ev == SRV_KEV_READY) {
        if (p->starting == mk) {
            p->starting = NULL;
            sp->failures = 0;
            sp->retry_at_ms = 0;
            korch_notice("warm pool: kernel %s (%s) ready in %lld ms (%zu of %d)", mk->id, mk->name,
                         (long long)korch_kernel_ready_ms(mk->k), zlistx_size(sp->kernels), sp->size);
            s_schedule(p, 0);
        }
        return;
    }
    if (ev != SRV_KEV_RESTARTING && ev != SRV_KEV_DEAD)
        return;
    /* Its process died (korch would restart it): nobody has used it, so a
       fresh one is as good and simpler than keeping a restarted one. */
    zlistx_delete(sp->kernels, h);
    if (p->starting == mk)
        p->starting = NULL;
    if (!mk->ever_ready) {
        sp->failures++;
        int ms = s_backoff_ms(sp->failures);
        sp->retry_at_ms = korch_now_ms() + ms;
        korch_warn("warm pool: cannot start a '%s' kernel: %s (retrying in %d s)", mk->name,
                   mk->dead_reason[0] ? mk->dead_reason : "it died while starting", ms / 1000);
    } else
        korch_warn("warm pool: kernel %s (%s) died while waiting%s%s; replacing it", mk->id, mk->name,
                   mk->dead_reason[0] ? ": " : "", mk->dead_reason);
    srv_kmgr_delete(mk);
    s_schedule(p, 0);
}

srv_kernel_t *srv_pool_take(srv_pool_t *p, const char *name)
{
    s_spec_t *sp = p && name ? s_spec(p, name) : NULL;
    if (!sp)
        return NULL;
    for (srv_kernel_t *mk = zlistx_first(sp->kernels); mk; mk = zlistx_next(sp->kernels)) {
        if (!s_ready(mk))
            continue;
        zlistx_delete(sp->kernels, zlistx_cursor(sp->kernels));
        srv_kmgr_unpool(mk);
        s_schedule(p, REFILL_SETTLE_MS);
        return mk;
    }
    return NULL;
}

json_t *srv_pool_status(srv_pool_t *p)
{
    if (!p)
        return NULL;
    json_t *o = json_object();
    for (size_t i = 0; o && i < p->nspecs; i++) {
        s_spec_t *sp = &p->specs[i];
        int ready = 0, starting = 0;
        for (srv_kernel_t *mk = zlistx_first(sp->kernels); mk; mk = zlistx_next(sp->kernels)) {
            if (s_ready(mk))
                ready++;
            else if (!mk->ever_ready)
                starting++;
        }
        json_object_set_new(o, sp->name, json_pack("{s:i, s:i, s:i}", "size", sp->size, "ready", ready, "starting",
                                                   starting));
    }
    return o;
}

/* Add or resize a kernelspec's pool. */
static korch_rc_t s_add(srv_pool_t *p, const char *name, size_t name_len, int size, korch_err_t *err)
{
    if (name_len == 0 || name_len >= sizeof p->specs[0].name)
        return korch_err_set(err, KORCH_E_INVALID, "warm pool: bad kernelspec name '%.*s'", (int)name_len, name);
    if (size < 0 || size > MAX_POOL_SIZE)
        return korch_err_set(err, KORCH_E_INVALID, "warm pool: size %d for '%.*s' is out of range (0 to %d)", size,
                             (int)name_len, name, MAX_POOL_SIZE);
    char nm[128];
    snprintf(nm, sizeof nm, "%.*s", (int)name_len, name);
    s_spec_t *sp = s_spec(p, nm);
    if (!sp) {
        if (p->nspecs == MAX_POOL_SPECS)
            return korch_err_set(err, KORCH_E_INVALID, "warm pool: at most %d kernelspecs", MAX_POOL_SPECS);
        korch_err_t e = {0};
        korch_kernelspec_t *spec = korch_kernelspec_find(nm, &e);
        if (!spec)
            return korch_err_set(err, e.rc ? e.rc : KORCH_E_NOTFOUND, "warm pool: %s", e.msg);
        korch_kernelspec_destroy(&spec);
        sp = &p->specs[p->nspecs];
        memset(sp, 0, sizeof *sp);
        snprintf(sp->name, sizeof sp->name, "%s", nm);
        if (!(sp->kernels = zlistx_new()))
            return korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        p->nspecs++;
    }
    sp->size = size;
    return KORCH_OK;
}

korch_rc_t srv_pool_new(srv_kmgr_t *m, korch_loop_t *loop, const korch_server_opts_t *o, srv_pool_t **out,
                        korch_err_t *err)
{
    *out = NULL;
    bool any = o->pool_size > 0;
    for (const char *const *e = o->pool_specs; e && *e && !any; e++)
        any = true;
    if (!any)
        return KORCH_OK;
    srv_pool_t *p = calloc(1, sizeof *p);
    if (!p)
        return korch_err_set(err, KORCH_E_NOMEM, "out of memory");
    p->kmgr = m;
    p->loop = loop;
    korch_rc_t rc = KORCH_OK;
    if (o->pool_size)
        rc = s_add(p, o->kernel, strlen(o->kernel), o->pool_size, err);
    for (const char *const *e = o->pool_specs; !rc && e && *e; e++) {
        const char *eq = strrchr(*e, '=');
        char *end = NULL;
        long n = eq ? strtol(eq + 1, &end, 10) : -1;
        if (!eq || end == eq + 1 || *end || n < 0 || n > INT_MAX) {
            rc = korch_err_set(err, KORCH_E_INVALID, "warm pool: '%s' is not NAME=N (e.g. python3=2)", *e);
            break;
        }
        rc = s_add(p, *e, (size_t)(eq - *e), (int)n, err);
    }
    if (rc) {
        srv_pool_destroy(&p);
        return rc;
    }
    for (size_t i = 0; i < p->nspecs; i++)
        if (p->specs[i].size)
            korch_notice("warm pool: keeping %d '%s' kernel(s) ready", p->specs[i].size,
                         p->specs[i].name);
    srv_kmgr_listen(m, s_on_kernel, p);
    p->listening = true;
    s_schedule(p, 0);
    *out = p;
    return KORCH_OK;
}

/* Shuts its kernels down (torn down with the others). The kernel manager
   must outlive it. */
void srv_pool_destroy(srv_pool_t **pp)
{
    srv_pool_t *p = *pp;
    if (!p)
        return;
    *pp = NULL;
    if (p->timer > 0)
        korch_loop_timer_end(p->loop, p->timer);
    p->timer = 0;
    for (size_t i = 0; i < p->nspecs; i++) {
        srv_kernel_t *mk;
        while ((mk = zlistx_first(p->specs[i].kernels))) {
            zlistx_delete(p->specs[i].kernels, zlistx_cursor(p->specs[i].kernels));
            srv_kmgr_delete(mk);
        }
        zlistx_destroy(&p->specs[i].kernels);
    }
    if (p->listening)
        srv_kmgr_unlisten(p->kmgr, s_on_kernel, p);
    free(p);
}
