/*  The launcher backends' function table and the machinery they share.
 *
 *  Private to src/launcher: launcher.c keeps the promises of launcher.h
 *  (done exactly once, deferred, never after cancel) for every backend, so
 *  a backend only begins work and reports its end:
 *
 *  - An op function (start, adopt, signal, kill, put_file, get_file) either
 *    fails at once (returns an error: the op is freed, done never called) or
 *    returns KORCH_OK having arranged to call one of the korch_op_finish_*
 *    functions exactly once, now (a backend whose work is immediate) or
 *    later from a loop handler. If its work stays pending, it registers
 *    korch_op_on_cancel: korch_op_cancel and korch_proc_destroy call that
 *    hook instead of waiting, and the backend then never finishes the op.
 *  - kill only delivers the kill; launcher.c finishes the op when the end
 *    is seen. Every backend reports the end of a kernel once with
 *    korch_backend_exited (from its pidfd poller, wait request, ...).
 *  - proc_free never blocks and never runs the loop: what is left to do
 *    (reap a pid, remove a container) goes to korch_backend_job, which the
 *    launcher steps on the loop and, at korch_launcher_destroy, finishes.
 */
#ifndef KORCH_LAUNCHER_BACKEND_H
#define KORCH_LAUNCHER_BACKEND_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include "korch/launcher.h"

typedef struct {
    const char *name;               /* "local", "docker", ... */
    unsigned caps;                  /* KORCH_LAUNCHER_* (a backend may refine per instance: korch_launcher_t.caps) */
    const char *transport;          /* "ipc" or "tcp" */
    /* Start the kernel: fill a new proc (korch_backend_proc_new), write the
       connection file as the kernel must see it, and finish the op with the
       proc (korch_op_finish_proc). req is borrowed for this call only. */
    korch_rc_t (*start)(korch_launcher_t *self, const korch_launch_t *req, korch_op_t *op, korch_err_t *err);
    /* Re-attach (NULL when the backend cannot): the proc's conn and runtime_dir are filled. */
    korch_rc_t (*adopt)(korch_launcher_t *self, const char *kernel_id, korch_op_t *op, korch_err_t *err);
    /* korch_launcher_list_mine / korch_launcher_remove_mine (NULL when the
       backend cannot adopt). Blocking: start-up only. */
    json_t *(*list_mine)(korch_launcher_t *self, korch_err_t *err);
    korch_rc_t (*remove_mine)(korch_launcher_t *self, const char *id, korch_err_t *err);
    /* korch_launcher_list / korch_launcher_remove_all (NULL when the
       backend leaves nothing behind a korch); kind names what they list in
       messages ("container(s)"). Blocking: start-up only. */
    json_t *(*list)(korch_launcher_t *self, const char *instance, korch_err_t *err);
    int (*remove_all)(korch_launcher_t *self, const char *instance, korch_err_t *err);
    const char *kind;
    /* korch_proc_backend_id (NULL: none). */
    const char *(*proc_id)(korch_proc_t *proc);
    korch_rc_t (*signal)(korch_proc_t *proc, int sig, korch_op_t *op, korch_err_t *err);
    /* Deliver SIGKILL (or remove the task); launcher.c finishes op at the end. op may be NULL. */
    korch_rc_t (*kill)(korch_proc_t *proc, korch_op_t *op, korch_err_t *err);
    /* data is borrowed for the call: copy it when the work stays pending. */
    korch_rc_t (*put_file)(korch_proc_t *proc, const char *name, const void *data, size_t len, korch_op_t *op,
                           korch_err_t *err);
    korch_rc_t (*get_file)(korch_proc_t *proc, const char *name, size_t max, korch_op_t *op, korch_err_t *err);
    /* A host directory's files, when put_file / get_file are NULL: launcher.c
       runs them on a worker thread (they may block on the disk) and finishes
       the op on the loop. They touch only what stays fixed for the proc's
       life (its dir path or fd): the proc is not freed while one runs. */
    korch_rc_t (*put_file_now)(korch_proc_t *proc, const char *name, const void *data, size_t len, korch_err_t *err);
    korch_rc_t (*get_file_now)(korch_proc_t *proc, const char *name, size_t max, char **data, size_t *len,
                               korch_err_t *err);
    const char *(*log_tail)(korch_proc_t *proc);
    /* korch_proc_usage_src, which korch_proc_usage reads (may be NULL: unknown). */
    bool (*usage_src)(korch_proc_t *proc, korch_usage_src_t *src);
    /* Release the proc; kill it first if it still runs. Never blocks. */
    void (*proc_free)(korch_proc_t *proc);
    /* Release the launcher (its jobs are finished already). */
    void (*free)(korch_launcher_t *self);
    /* korch_launcher_warm (NULL: nothing to prepare). */
    korch_rc_t (*warm)(korch_launcher_t *self, const korch_kernelspec_t *spec, korch_err_t *err);
} korch_launcher_ops_t;

typedef struct korch_backend_job korch_backend_job_t;

/* Backends embed this as their first member (korch_backend_launcher_init). */
struct korch_launcher {
    const korch_launcher_ops_t *ops;
    korch_loop_t *loop;
    unsigned caps;
    struct s_lop *ops_head;         /* pending ops, for cancelling (launcher.c) */
    korch_backend_job_t *jobs;      /* background work left by freed procs */
    void *worker;                   /* the file worker (launcher.c), NULL until the first host-dir file op */
    int work_fd[2];                 /* its results: pointers it writes, the loop reads; -1 until then */
    int works;                      /* file ops queued or running on it */
    struct korch_pkgs *pkgs;        /* korch_launcher_set_packages (packages.c), NULL none */
};

/* Backends embed this as their first member (korch_backend_proc_new). */
struct korch_proc {
    korch_launcher_t *launcher;
    korch_conn_t conn;              /* as korch connects to it */
    char runtime_dir[PATH_MAX];
    bool exited;
    char why[256];
    korch_exit_fn *on_exit;
    void *exit_arg;
    int exit_timer;                 /* the deferred on_exit call, -1 none */
    int busy;                       /* worker threads using it: proc_free waits for them */
    bool doomed;                    /* destroyed while busy: freed when the last worker is done */
    struct korch_pkgfwd *pkgfwd;    /* its package forwarder (packages.c), NULL none */
};

void korch_backend_launcher_init(korch_launcher_t *l, const korch_launcher_ops_t *ops, korch_loop_t *loop);

/* What a listing of instance's objects (kind "container(s)" or "swarm
   service(s)") left alone because they are not of scope (ours): foreign of
   another scope, legacy with no korch.scope label (an older korch). One
   notice each, saying why and, for legacy ones, how to remove them. */
void korch_backend_scope_notice(const char *kind, const char *instance, const char *scope, int foreign, int legacy);

/* The adoption list of a backend's listing of instance's objects (all,
   borrowed; entries with string "id", "kernel_id", "kernelspec", "state",
   "scope"): a new array of {id, kernel_id, kernelspec, state} for those of
   scope only, the others counted in one korch_backend_scope_notice. NULL
   (err set) when all is NULL (its error is already in err) or on no memory. */
json_t *korch_backend_mine(json_t *all, const char *kind, const char *instance, const char *scope, korch_err_t *err);

/* A zeroed proc of size bytes (size >= sizeof(korch_proc_t)) for l, with
   conn and runtime_dir copied from req (either may be NULL). */
void *korch_backend_proc_new(korch_launcher_t *l, size_t size, const korch_launch_t *req);

/* The kernel has ended (why as in korch_exit_fn). Once per proc; later calls
   are ignored. Runs the proc's exit fn (deferred) and finishes kill ops. */
void korch_backend_exited(korch_proc_t *p, const char *why);

/* Finish an op (any thread of control on the loop, even inside the call
   that started it: done is deferred). err may be NULL when rc is KORCH_OK. */
void korch_op_finish(korch_op_t *op, korch_rc_t rc, const korch_err_t *err);
void korch_op_finish_proc(korch_op_t *op, korch_proc_t *proc, korch_rc_t rc, const korch_err_t *err);
/* data (malloc'd, NUL-terminated) becomes the op's: freed if nobody takes it. */
void korch_op_finish_file(korch_op_t *op, char *data, size_t len, korch_rc_t rc, const korch_err_t *err);
/* While the backend's work for op is pending: how to abort it. */
void korch_op_on_cancel(korch_op_t *op, void (*cancel)(korch_op_t *op, void *arg), void *arg);
korch_loop_t *korch_op_loop(const korch_op_t *op);

/* Host work that may block on the kernel (mount, umount2, copying a work
   dir, chown, removing a tree): run(arg) on the launcher's worker thread,
   one at a time and in the order asked, with the host-dir file ops; then
   done(arg) (NULL: nothing) on the loop, from the worker's pipe. So a
   directory's unmount queued by a freed proc comes before the mount of the
   start after it, and korch_launcher_remove_dir after both.
   korch_launcher_settle waits for it; korch_launcher_destroy finishes it.
   run touches only what the loop leaves alone until done (a freed proc,
   the copies in arg); it may log (the default sink, stderr, is
   thread-safe). Without a worker (no thread, no memory) both run now,
   done too. */
void korch_backend_host(korch_launcher_t *l, void (*run)(void *arg), void (*done)(void *arg), void *arg);

/* korch_backend_host without the fallback: KORCH_OK when queued, else an
   error and nothing runs (launcher.c's host-dir file ops). */
korch_rc_t korch_backend_host_queue(korch_launcher_t *l, void (*run)(void *arg), void (*done)(void *arg), void *arg,
                                    korch_err_t *err);
/* At korch_launcher_destroy: the worker finishes its queue and stops. */
void korch_backend_host_finish(korch_launcher_t *l);

/* Background work a freed proc leaves: step(arg) is called on the loop
   (every period_ms) until it returns true; finish(arg) (may block) is
   called instead at korch_launcher_destroy when it has not; either way
   free(arg) is not called: step/finish release arg themselves when done. */
void korch_backend_job(korch_launcher_t *l, int period_ms, bool (*step)(void *arg), void (*finish)(void *arg),
                       void *arg);

/* packages.c: korch_launcher_set_packages's side of a start. */
typedef struct {
    korch_launch_t req;             /* the request to give the backend (borrows from the caller's) */
    korch_kernelspec_t spec;        /* its spec: the caller's, argv through the bootstrap */
    char **argv, **env;             /* owned */
} korch_pkgs_req_t;
/* The request a kernel starts with: a Python kernel with packages set goes
   through the bootstrap, and it or one of an offline launcher gets the %pip
   guard in its argv (else a copy of in); false on no memory. korch_pkgs_request_clear after the start call. */
bool korch_pkgs_request(const korch_launcher_t *l, const korch_launch_t *in, korch_pkgs_req_t *out);
void korch_pkgs_request_clear(korch_pkgs_req_t *r);
/* A proc is running: its package forwarder starts (when an index is set). */
void korch_pkgs_started(korch_proc_t *p);
/* The proc goes: its forwarder ends (never blocks). */
void korch_pkgs_proc_end(korch_proc_t *p);
/* The host dir a backend binds read-only at KORCH_PACKAGES_WHEELHOUSE, or NULL. */
const char *korch_pkgs_wheelhouse(const korch_launcher_t *l);
void korch_pkgs_free(korch_launcher_t *l);

#endif
