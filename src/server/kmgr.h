/*  The server's kernel manager: every kernel korch serve runs, and nothing
 *  about who uses them. Not a public API.
 *
 *  It knows no client: no HTTP request, no websocket, no session, no pool.
 *  Those above it (api.c, agents.c, pool.c, cull.c, metrics.c, the relay in
 *  kernels.c) call down into it and hear back in two ways:
 *
 *    - listeners (srv_kmgr_listen): every kernel's lifecycle events, in the
 *      order they were registered; what the pool, metrics, the relay and the
 *      sessions' bookkeeping subscribe to;
 *    - closures on one kernel (srv_kernel_when_ready, srv_kernel_when_gone):
 *      fn(arg) exactly once, on the loop, never from inside the call that
 *      made the closure, never after srv_kwait_cancel (libuv's promises).
 *      The handle is invalid once fn has run: fn receives nothing to free,
 *      and the caller forgets its stored handle inside fn.
 *
 *  Starting returns at once (korch_kernel_new launches and returns); ready
 *  is heard later. A deleted kernel is unlisted at once and its ready
 *  closures fail then; a loop round later (never inside the kernel's own
 *  callback) it is released: listeners hear SRV_KEV_GONE, korch_kernel_destroy
 *  hands it to its teardown, which runs on the loop without blocking it
 *  (shutdown_request, grace, SIGTERM, SIGKILL; the launcher removes the
 *  container), and its gone closures run. Nothing here runs the loop but
 *  srv_kmgr_reap and srv_kmgr_delete_all, for exit.
 *
 *  Threading: the loop's thread only.
 */
#ifndef KORCH_SRV_KMGR_H
#define KORCH_SRV_KMGR_H

#include <czmq.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "korch/error.h"
#include "korch/kernel.h"
#include "korch/launcher.h"
#include "korch/loop.h"

typedef struct srv_kmgr srv_kmgr_t;
typedef struct srv_kernel srv_kernel_t;
typedef struct srv_kwait srv_kwait_t;

/* A managed kernel. Read its fields freely; only kmgr.c writes them, but
   for `relay` (the relay's per-kernel state, kernels.c owns it),
   `connections` (the relay keeps it) and the activity stamp
   (srv_kernel_touch). */
struct srv_kernel {
    srv_kmgr_t *mgr;
    korch_kernel_t *k;
    char id[40];
    char name[128];
    char owner[64];             /* the user who started it (ident.h; set by who asked for it), "" = nobody's */
    char last_activity[32];     /* ISO 8601 */
    int64_t last_activity_ms;
    size_t connections;         /* websockets attached (the relay counts them) */
    void *relay;                /* the relay's, set on SRV_KEV_STARTED, freed on SRV_KEV_GONE */
    zlistx_t *waits;            /* srv_kwait_t* (owned) */
    bool doomed;                /* being shut down; not listed any more */
    bool ever_ready;
    unsigned readies;           /* times it became ready (SRV_KEV_READY): 1 = its first start */
    bool pooled;                /* started for the warm pool: not listed until srv_kmgr_unpool */
    bool restart_requested;     /* srv_kmgr_restart: until it is up again */
    bool adopted;               /* re-adopted from an earlier korch (srv_kmgr_adopt) */
    char dead_reason[256];
};

typedef enum {
    SRV_KEV_STARTED,            /* made (not ready yet); listed unless pooled */
    SRV_KEV_READY,              /* idle or busy after starting or restarting */
    SRV_KEV_RESTARTING,         /* its process went (detail: why); korch brings it back
                                   (mk->restart_requested: a client asked for it) */
    SRV_KEV_DEAD,               /* died for good (detail: why); a kernel that never ran is deleted next */
    SRV_KEV_UNPOOLED,           /* handed out of the warm pool: listed from now */
    SRV_KEV_DELETED,            /* being shut down: unlisted, its ready closures have failed */
    SRV_KEV_GONE,               /* released (a round after DELETED): mk->k is still readable, then
                                   destroyed and mk freed when the listeners return */
} srv_kev_t;

/* A lifecycle event of mk. A listener may delete mk (srv_kmgr_delete) or
   start others; it must not remove listeners. */
typedef void(srv_kmgr_listener_fn)(srv_kernel_t *mk, srv_kev_t ev, const char *detail, void *arg);

/* A message from mk's kernel (the relay's: there is one sink). */
typedef void(srv_kmgr_message_fn)(srv_kernel_t *mk, korch_channel_t ch, const korch_msg_t *msg,
                                  korch_msg_raw_t *raw, void *arg);

typedef struct {
    korch_loop_t *loop;             /* borrowed */
    korch_launcher_t *launcher;     /* borrowed; NULL = local processes */
    int start_timeout_ms;
} srv_kmgr_opts_t;

srv_kmgr_t *srv_kmgr_new(const srv_kmgr_opts_t *o, korch_err_t *err);
/* Shuts every kernel down (srv_kmgr_delete_all) first. */
void srv_kmgr_destroy(srv_kmgr_t **m);

void srv_kmgr_listen(srv_kmgr_t *m, srv_kmgr_listener_fn *fn, void *arg);
/* Not from inside a listener. */
void srv_kmgr_unlisten(srv_kmgr_t *m, srv_kmgr_listener_fn *fn, void *arg);
/* Starts that failed at once (not a bad kernelspec or env): for metrics. */
uint64_t srv_kmgr_failed_starts(const srv_kmgr_t *m);
void srv_kmgr_set_message_sink(srv_kmgr_t *m, srv_kmgr_message_fn *fn, void *arg);

typedef struct {
    const char *name;           /* kernelspec */
    json_t *env;                /* borrowed; KERNEL_* variables of a request (NULL = none) */
    const char *cwd;            /* NULL = the launcher's default */
    bool pooled;
} srv_kstart_t;

/* Start a kernel: returns at once (SRV_KEV_STARTED has been heard). NULL +
   err (KORCH_E_NOTFOUND: no such kernelspec, KORCH_E_INVALID: bad env, else
   the launch failed). */
srv_kernel_t *srv_kmgr_start(srv_kmgr_t *m, const srv_kstart_t *req, korch_err_t *err);

/* Re-adopt kernel_id (kernelspec name), which an earlier korch of this
   instance left running (the launcher has KORCH_LAUNCHER_ADOPTS): listed
   at once under its own id, STARTING until its handshake is done (ready
   closures wait for it), as a start is; if it cannot be reached it dies
   before ever being ready and is deleted (the launcher removes what is
   left of it). Returns at once. NULL + err: a bad id or name, the id
   listed already, no such kernelspec. */
srv_kernel_t *srv_kmgr_adopt(srv_kmgr_t *m, const char *kernel_id, const char *name, korch_err_t *err);

/* At start-up (before serving; blocking for the launcher's list): re-adopt
   every running kernel the launcher lists as this instance's
   (korch_launcher_list_mine); those that ended while korch was down, or
   whose labels cannot be used, are removed with a notice. Returns how many
   are being re-adopted, -1 when the list failed (said), 0 for a launcher
   whose kernels die with korch. */
int srv_kmgr_adopt_mine(srv_kmgr_t *m);

/* A listed kernel by id (NULL: none, or not listed). */
srv_kernel_t *srv_kmgr_find(srv_kmgr_t *m, const char *id);
size_t srv_kmgr_count(srv_kmgr_t *m);
/* The listed kernels (new list, borrowed kernels: do not keep them past a
   loop round). */
zlistx_t *srv_kmgr_list(srv_kmgr_t *m);
/* Every kernel, listed or not, pooled or doomed (for metrics' gauges). */
void srv_kmgr_foreach(srv_kmgr_t *m, void (*fn)(srv_kernel_t *mk, void *arg), void *arg);
/* The latest activity of a listed kernel (ISO 8601, "" when none yet). */
const char *srv_kmgr_last_activity(srv_kmgr_t *m);

/* Idle (or busy) now: started and not restarting, nor doomed. */
bool srv_kernel_ready(const srv_kernel_t *mk);
/* The Jupyter kernel model {id, name, last_activity, execution_state, connections} (new). */
json_t *srv_kernel_model(const srv_kernel_t *mk);
/* Activity seen on mk now (a message, a client). */
void srv_kernel_touch(srv_kernel_t *mk);

/* Shut mk down: SRV_KEV_DELETED now, SRV_KEV_GONE a loop round later.
   Again on a doomed kernel (or NULL): nothing. */
void srv_kmgr_delete(srv_kernel_t *mk);
/* POST .../restart: a restart asked for (listeners hear no RESTARTING). */
korch_rc_t srv_kmgr_restart(srv_kernel_t *mk, korch_err_t *err);
/* A pooled kernel handed out: listed, auto-restarted from now. */
void srv_kmgr_unpool(srv_kernel_t *mk);
/* Delete every kernel and tear them down (at exit, outside handlers: runs
   the loop until they are gone). */
void srv_kmgr_delete_all(srv_kmgr_t *m);
/* Deleted kernels not released yet. */
bool srv_kmgr_has_doomed(const srv_kmgr_t *m);
/* Release deleted kernels now rather than next round (at exit; tests).
   True when there were any. */
bool srv_kmgr_reap(srv_kmgr_t *m);

/* mk ready: fn(mk, NULL, arg); it failed first (died, deleted): fn(mk, why,
   arg) - mk may be doomed then, never freed before fn returns. NULL (and
   fn is never called) when mk is doomed already or memory ran out. */
typedef void(srv_kready_fn)(srv_kernel_t *mk, const char *error, void *arg);
srv_kwait_t *srv_kernel_when_ready(srv_kernel_t *mk, srv_kready_fn *fn, void *arg);
/* mk released (after SRV_KEV_GONE): fn(id, arg). NULL (fn never called)
   when memory ran out. */
typedef void(srv_kgone_fn)(const char *kernel_id, void *arg);
srv_kwait_t *srv_kernel_when_gone(srv_kernel_t *mk, srv_kgone_fn *fn, void *arg);
/* fn will not be called; *w is NULLed. Safe from any handler. */
void srv_kwait_cancel(srv_kwait_t **w);

#endif
