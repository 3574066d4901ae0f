/*  Idle culling, with jupyter_server's meanings (MappingKernelManager in
 *  jupyter_server/services/kernels/kernelmanager.py):
 *
 *    cull_idle_timeout  "Timeout (in seconds) after which a kernel is
 *                       considered idle and ready to be culled. Values of 0
 *                       or lower disable culling."
 *    cull_interval      "The interval (in seconds) on which to check for idle
 *                       kernels exceeding the cull timeout value." (300; an
 *                       invalid value falls back to 300, as there)
 *    cull_connected     "Whether to consider culling kernels which have one
 *                       or more connections."
 *    cull_busy          "Whether to consider culling kernels which are busy."
 *
 *  Every interval, a kernel is shut down (as DELETE /api/kernels/{id} does)
 *  when idle > cull_idle_timeout, and not busy unless cull_busy, and without
 *  websocket connections unless cull_connected. A dead kernel is culled at
 *  once, as jupyter_server does. Idle means now - last_activity, which
 *  korch updates on every message from the kernel (jupyter_server: every
 *  IOPub message) and from a client, and when a client connects or leaves.
 *
 *  Unlike jupyter_server, a kernel still starting or restarting is left
 *  alone: a request may be waiting on it. Pool kernels are not in the
 *  kernels table until handed out, so they are never culled.
 */
#include "server_int.h"
#include "korch/log.h"

#include <stdio.h>
#include <stdlib.h>

#define CULL_INTERVAL_DEFAULT 300

struct srv_cull {
    srv_kmgr_t *kmgr;
    korch_loop_t *loop;
    bool cull_busy, cull_connected;
    int timer;
    int64_t timeout_ms;
};

static int s_on_tick(korch_loop_t *loop, int id, void *arg)
{
    srv_cull_t *c = arg;
    int64_t now = korch_now_ms();
    zlistx_t *all = srv_kmgr_list(c->kmgr);
    for (srv_kernel_t *mk = all ? zlistx_first(all) : NULL; mk; mk = zlistx_next(all)) {
        if (mk->doomed || mk->pooled)
            continue;
        korch_kernel_state_t st = korch_kernel_state(mk->k);
        if (st == KORCH_KERNEL_DEAD) {
            korch_notice("culling dead kernel %s (%s)", mk->id, mk->name);
            srv_kmgr_delete(mk);
            continue;
        }
        if (st != KORCH_KERNEL_IDLE && st != KORCH_KERNEL_BUSY)
            continue;
        int64_t idle_ms = now - mk->last_activity_ms;
        size_t conns = mk->connections;
        bool idle_time = idle_ms > c->timeout_ms;
        bool idle_execute = c->cull_busy || st != KORCH_KERNEL_BUSY;
        bool idle_connected = c->cull_connected || conns == 0;
        if (idle_time && idle_execute && idle_connected) {
            korch_notice("culling %s kernel %s (%s) with %zu connections after %lld s of inactivity",
                         korch_kernel_state_name(st), mk->id, mk->name, conns, (long long)(idle_ms / 1000));
            srv_kmgr_delete(mk);
        }
    }
    zlistx_destroy(&all);
    return 0;
}

korch_rc_t srv_cull_new(srv_kmgr_t *m, korch_loop_t *loop, const korch_server_opts_t *o, srv_cull_t **out,
                        korch_err_t *err)
{
    *out = NULL;
    if (o->cull_idle_timeout <= 0)
        return KORCH_OK;
    int interval = o->cull_interval;
    if (interval <= 0) {
        if (interval < 0)
            korch_warn("invalid cull interval %d s; using %d s", interval, CULL_INTERVAL_DEFAULT);
        interval = CULL_INTERVAL_DEFAULT;
    }
    if (interval > 24 * 3600)
        interval = 24 * 3600;
    srv_cull_t *c = calloc(1, sizeof *c);
    if (!c)
        return korch_err_set(err, KORCH_E_NOMEM, "out of memory");
    c->kmgr = m;
    c->loop = loop;
    c->cull_busy = o->cull_busy;
    c->cull_connected = o->cull_connected;
    c->timeout_ms = (int64_t)o->cull_idle_timeout * 1000;
    c->timer = korch_loop_timer(loop, interval * 1000, 0, s_on_tick, c);
    if (c->timer <= 0) {
        free(c);
        return korch_err_set(err, KORCH_E_NOMEM, "cannot create the culling timer");
    }
    *out = c;
    korch_notice("culling kernels idle for more than %d s, checked every %d s%s%s",
                 o->cull_idle_timeout, interval, o->cull_busy ? ", even busy ones" : "",
                 o->cull_connected ? ", even with connected clients" : "");
    return KORCH_OK;
}

void srv_cull_destroy(srv_cull_t **pc)
{
    srv_cull_t *c = *pc;
    if (!c)
        return;
    korch_loop_timer_end(c->loop, c->timer);
    free(c);
    *pc = NULL;
}
