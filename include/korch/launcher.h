/*  Launchers start kernel processes; the kernel client talks to them.
 *
 *  Every backend (src/launcher/local.c, sandbox.c, docker.c, swarm.c) sits
 *  behind one private function table (src/launcher/backend.h); callers see
 *  opaque handles and ask what a backend can do through its caps, never its
 *  name.
 *
 *  Asynchronous, with libuv's promises. Each operation takes a completion
 *  callback and returns a korch_op_t handle:
 *  - NULL + err when it fails at once; then done is NEVER called;
 *  - otherwise done is called exactly once, on the launcher's loop, never
 *    from inside the call that started the op (at least one loop round
 *    later), and never after korch_op_cancel(&op);
 *  - the handle is invalid once done ran (done receives nothing to free):
 *    callers NULL their stored handle inside done. Cancelling from inside
 *    any handler is safe.
 *  - No op blocks the loop (no synchronous Engine API call, no waitpid
 *    without WNOHANG, no sleep). Fork/exec (local, sandbox) is immediate.
 *
 *  Ownership: a started (or adopted) proc is the caller's, released with
 *  korch_proc_destroy, which never blocks and never runs the loop: it
 *  cancels the proc's pending ops (their done is not called), kills the
 *  kernel if it still runs and hands what must still be removed (a
 *  container, a cgroup, mounts, the runtime dir's bounded tmpfs) to the
 *  launcher, which finishes it in the background (on the loop, or its
 *  worker thread for what blocks on the kernel: unmounts, copies). The
 *  runtime dir is the caller's again once korch_launcher_settle says so;
 *  korch_launcher_remove_dir removes it in order, after the unmount. A launcher
 *  outlives its procs; korch_launcher_destroy finishes what is left (it may
 *  block: call it at exit, outside handlers) and leaks nothing.
 *
 *  Threading: a launcher, its procs and ops belong to the thread running
 *  their loop.
 */
#ifndef KORCH_LAUNCHER_H
#define KORCH_LAUNCHER_H

#include <stdbool.h>
#include <stddef.h>
#include <jansson.h>
#include "korch/conn.h"       /* plain data: endpoints and key */
#include "korch/error.h"
#include "korch/kernelspec.h" /* plain data: argv, env, metadata */
#include "korch/loop.h"
#include "korch/op.h"
#include "korch/packages.h"   /* plain data: the allowed package sources */
#include "korch/path.h"       /* korch_safe_relpath: the names put/get_file take */

typedef struct korch_launcher korch_launcher_t; /* opaque outside src/launcher */
typedef struct korch_proc korch_proc_t;         /* opaque outside src/launcher */

/* What a backend can do, so callers never test its name. */
enum {
    KORCH_LAUNCHER_CONFINED = 1 << 0,   /* model code does not run as a host process with the user's rights */
    KORCH_LAUNCHER_ADOPTS = 1 << 1,     /* kernels outlive korch and can be re-adopted */
    KORCH_LAUNCHER_HOST_FILES = 1 << 2, /* the work dir is a host directory korch can read (local, sandbox,
                                           docker with a bind-mounted work dir) */
    KORCH_LAUNCHER_NO_SIGINT = 1 << 3,  /* it cannot signal the kernel's process (swarm: no Engine API
                                           call signals a task on another node): the kernel layer
                                           interrupts with interrupt_request on control, whatever the
                                           kernelspec's interrupt_mode (ipykernel handles both) */
    KORCH_LAUNCHER_PACKAGES = 1 << 4,   /* its kernels' runtime dir is a host dir korch serves: packages
                                           (korch/packages.h) can reach them */
    KORCH_LAUNCHER_OFFLINE = 1 << 5,    /* its kernels have no network (sandbox without --network, docker's
                                           NetworkMode none, swarm's internal overlay): without a package
                                           source a Python kernel's %pip install is refused, saying why */
};
unsigned korch_launcher_caps(const korch_launcher_t *l);
const char *korch_launcher_name(const korch_launcher_t *l); /* "local", "docker", ...: for messages only */
korch_loop_t *korch_launcher_loop(const korch_launcher_t *l);
/* The transport the backend needs for its kernels' channels: "ipc" or "tcp". */
const char *korch_launcher_transport(korch_launcher_t *l);

/* What to start. Copied by korch_launcher_start (strings and the conn). */
typedef struct {
    const korch_kernelspec_t *spec;
    const korch_conn_t *conn;       /* endpoints as korch will connect to them; with ipc the
                                       prefix is {runtime_dir}/{name}: directly inside runtime_dir */
    const char *runtime_dir;        /* private dir (0700) for this kernel; ipc sockets live here */
    const char *cwd;                /* kernel's working directory, NULL = inherit / image default */
    const char *const *env;         /* extra "NAME=value" strings, NULL-terminated, may be NULL */
    const char *kernel_id;          /* korch's id for the kernel (a uuid) */
} korch_launch_t;

/* proc is the caller's on KORCH_OK (NULL otherwise). */
typedef void(korch_proc_done_fn)(korch_proc_t *proc, korch_rc_t rc, const korch_err_t *err, void *arg);
typedef void(korch_op_done_fn)(korch_rc_t rc, const korch_err_t *err, void *arg);
/* data (NUL-terminated, len bytes) is done's to free (free()); NULL on failure. */
typedef void(korch_file_done_fn)(korch_rc_t rc, const korch_err_t *err, char *data, size_t len, void *arg);
/* why: "exited 1", "killed by signal 9", "out of memory (limit 1 GiB)", "node n2 is down". */
typedef void(korch_exit_fn)(korch_proc_t *proc, const char *why, void *arg);

/* The backends. Constructors take the loop everything runs on. */
korch_launcher_t *korch_launcher_local_new(korch_loop_t *loop, korch_err_t *err);
/* docker.h: korch_launcher_docker_new(loop, opts, err); sandbox.h: korch_launcher_sandbox_new(loop, opts, err) */

/* Start a kernel: writes its connection file (as the kernel must see it)
   and starts it; done gets the proc once the backend has it running (the
   Jupyter handshake is the caller's). */
korch_op_t *korch_launcher_start(korch_launcher_t *l, const korch_launch_t *req, korch_proc_done_fn *done, void *arg,
                                 korch_err_t *err);

/* Prepare what makes spec's kernels start fast, before the first is asked
   for: the sandbox's kernel template with --fork (docs/fastkernel.md);
   KORCH_OK and nothing done where a backend has nothing to prepare or the
   spec is not one it can speed up. Never blocks (the template imports in
   the background); spec is borrowed for the call. */
korch_rc_t korch_launcher_warm(korch_launcher_t *l, const korch_kernelspec_t *spec, korch_err_t *err);

/* Re-attach to a kernel this backend started for an earlier korch that is
   gone, found by kernel id (caps KORCH_LAUNCHER_ADOPTS; else NULL + err
   KORCH_E_STATE). The conn (as korch connects to it) and the runtime dir are
   read from the proc afterwards. */
korch_op_t *korch_launcher_adopt(korch_launcher_t *l, const char *kernel_id, korch_proc_done_fn *done, void *arg,
                                 korch_err_t *err);

/* The kernels labelled with this launcher's instance and this runtime
   dir's korch.scope (korch_runtime_scope), left by an earlier korch of
   that instance (caps KORCH_LAUNCHER_ADOPTS; else NULL + err
   KORCH_E_STATE); those of another scope or without one are left out,
   with a notice (another korch's, or an older korch's): a new array of {"id" (the container or service),
   "kernel_id", "kernelspec", "state" ("running" when adoptable)}, strings
   as the labels say ("" when missing: labels are anyone's to write, check
   them before use). Blocking (one or two Engine API calls): call it at
   start-up, never from a handler. */
json_t *korch_launcher_list_mine(korch_launcher_t *l, korch_err_t *err);
/* Remove what is left of one of those by its "id" (a dead or unusable
   kernel): its container or service and secret, and korch's files for it
   (the connection file, its sockets and runtime dir, never through a
   link). Refused (KORCH_E_STATE) when its labels name another instance
   or another scope.
   Blocking, as above. */
korch_rc_t korch_launcher_remove_mine(korch_launcher_t *l, const char *id, korch_err_t *err);

/* Everything this launcher's backend holds for korch instance instance
   (NULL = every instance), of any scope, running or not: a new array of
   {"id", "kernel_id", "instance", "kernelspec", "state", "runtime_dir",
   "scope" (missing on an older korch's), ...}, for the sweep and for
   tools. NULL + err (KORCH_E_STATE) when the backend's kernels die with
   korch (nothing to list). Blocking: a command's set-up, never a handler. */
json_t *korch_launcher_list(korch_launcher_t *l, const char *instance, korch_err_t *err);
/* Remove what korch_launcher_list(l, instance) finds of this runtime dir's
   scope (another scope's and unlabelled ones are never removed), with
   korch's files for each. How many were removed, or -1 + err. Blocking. */
int korch_launcher_remove_all(korch_launcher_t *l, const char *instance, korch_err_t *err);
/* What the listing above calls its entries ("container(s)", "swarm
   service(s)"), for messages; NULL when the backend lists nothing. */
const char *korch_launcher_kind(const korch_launcher_t *l);
/* The backend's own id of the proc's kernel (a container or service id;
   borrowed), or NULL when it has none (a local process). */
const char *korch_proc_backend_id(korch_proc_t *p);

/* What korch connects to (borrowed from p): for a started proc the conn of
   the request, for an adopted one what the backend found. */
const korch_conn_t *korch_proc_conn(const korch_proc_t *p);
const char *korch_proc_runtime_dir(const korch_proc_t *p);
korch_launcher_t *korch_proc_launcher(const korch_proc_t *p);

/* Exit notification (pidfd poller, docker wait, swarm task state): fn is
   called once when the kernel ends, on the loop, never from inside this
   call. A later call replaces fn; fn NULL stops the notification. */
void korch_proc_on_exit(korch_proc_t *p, korch_exit_fn *fn, void *arg);
/* Has the end been seen (and why, borrowed, "" while alive)? */
bool korch_proc_exited(const korch_proc_t *p);
const char *korch_proc_exit_why(const korch_proc_t *p);

/* Deliver a signal (the kernel's process group for local kernels). A kernel
   already gone is KORCH_E_DIED (at once or through done). */
/* done may be NULL in every op below: fire and forget (the op still ends
   with its proc). */
korch_op_t *korch_proc_signal(korch_proc_t *p, int sig, korch_op_done_fn *done, void *arg, korch_err_t *err);
/* End the kernel now (SIGKILL); done once it is gone (its exit fn runs
   before done). A kernel already gone: done with KORCH_OK. */
korch_op_t *korch_proc_kill(korch_proc_t *p, korch_op_done_fn *done, void *arg, korch_err_t *err);
/* Write a file into the kernel's working directory (name must pass
   korch_safe_relpath; parent directories are created; data is copied).
   A host work dir (local, sandbox) is written on a worker thread, the
   Engine API's archive endpoint (docker) streamed on the loop: never does
   it block the loop. Destroying p meanwhile is safe (it is freed once the
   worker is back). get_file likewise. */
korch_op_t *korch_proc_put_file(korch_proc_t *p, const char *name, const void *data, size_t len,
                                korch_op_done_fn *done, void *arg, korch_err_t *err);
/* put_file of the first len bytes of the file fd (borrowed: korch keeps a
   dup for the op; an upload spooled to disk): no copy in memory for a
   host work dir, which is written from a mapping while the file worker
   places it; others map it for the call and copy, as put_file. */
korch_op_t *korch_proc_put_file_fd(korch_proc_t *p, const char *name, int fd, size_t len, korch_op_done_fn *done,
                                   void *arg, korch_err_t *err);
/* Read a file from the kernel's working directory, at most max bytes. */
korch_op_t *korch_proc_get_file(korch_proc_t *p, const char *name, size_t max, korch_file_done_fn *done, void *arg,
                                korch_err_t *err);
/* What the kernel used, from its cgroup (sandbox: korch's own; docker: the
   container's, read on this host, when the engine runs here): CPU time so
   far and the peak of memory (since the last reset_peak where peak_reset
   says it could be reset, else since the kernel started). False when the
   launcher cannot say (local and swarm: unknown). Never blocks for long
   (reads of cgroupfs and /proc). */
typedef struct {
    int64_t cpu_ns;             /* -1 unknown */
    int64_t mem_peak;           /* bytes, -1 unknown */
    bool peak_reset;            /* the peak was reset at the call with reset_peak */
} korch_proc_usage_t;
bool korch_proc_usage(korch_proc_t *p, bool reset_peak, korch_proc_usage_t *u);

/* Where those counters are: plain paths, which any thread may read with
   korch_usage_read, independent of the proc's life (an agent on its own
   thread, korch serve's kernel on the loop's). After the kernel's end (a
   restart into another cgroup) they answer unknown. */
typedef struct {
    int version;                /* the cgroup version: 1, 2; 0 = none (unknown) */
    char mem[PATH_MAX];         /* its memory cgroup's dir (v2: its only one) */
    char cpu[PATH_MAX];         /* v1: its cpuacct dir; "" = the utime+stime of mem's processes */
} korch_usage_src_t;
/* On the proc's thread. False (src->version 0) when the launcher cannot say. */
bool korch_proc_usage_src(korch_proc_t *p, korch_usage_src_t *src);
/* Any thread. False when nothing could be read (both -1). */
bool korch_usage_read(const korch_usage_src_t *src, bool reset_peak, korch_proc_usage_t *u);

/* Last lines the kernel printed outside the protocol (its stderr), or "".
   Never blocks: docker's is what the log stream delivered so far. */
const char *korch_proc_log_tail(korch_proc_t *p);

/* korch_op_cancel(&op) (korch/op.h): its done is never called. */

void korch_proc_destroy(korch_proc_t **p);
void korch_launcher_destroy(korch_launcher_t **l);

/* Remove dir (a runtime dir korch made for a kernel) and what is in it,
   never through a link, in the background: after what the procs destroyed
   before left to undo there (docker's tmpfs on it is unmounted first), on
   the launcher's worker; korch_launcher_settle waits for it. */
void korch_launcher_remove_dir(korch_launcher_t *l, const char *dir);

/* Work of a caller that must end before the launcher does (a kernel that
   korch_kernel_destroy detached, tearing itself down on the loop): at
   korch_launcher_destroy, finish(arg) is called for each one still there
   (it may run the loop). Returns a handle for korch_launcher_undefer (call
   it when the work ended by itself), NULL when out of memory. */
void *korch_launcher_defer(korch_launcher_t *l, void (*finish)(void *arg), void *arg);
void korch_launcher_undefer(korch_launcher_t *l, void *handle);

/* Host work of a caller that may block on the disk (writing a kernel's
   file into a session's dir): run(arg) on the launcher's worker thread, in
   order with the launcher's own host work, then done(arg) (may be NULL) on
   the loop. run touches only what arg owns (copies). KORCH_OK when queued;
   else an error and neither is called. korch_launcher_settle waits for it,
   korch_launcher_destroy finishes it. */
korch_rc_t korch_launcher_host_work(korch_launcher_t *l, void (*run)(void *arg), void (*done)(void *arg), void *arg,
                                    korch_err_t *err);

/* Blocking conveniences for the CLI and tests only (never from a handler:
   they run the loop until their op is done). */
korch_rc_t korch_launcher_start_wait(korch_launcher_t *l, const korch_launch_t *req, korch_proc_t **out,
                                     korch_err_t *err);
korch_rc_t korch_launcher_adopt_wait(korch_launcher_t *l, const char *kernel_id, korch_proc_t **out,
                                     korch_err_t *err);
korch_rc_t korch_proc_signal_wait(korch_proc_t *p, int sig, korch_err_t *err);
korch_rc_t korch_proc_kill_wait(korch_proc_t *p, korch_err_t *err);
korch_rc_t korch_proc_put_file_wait(korch_proc_t *p, const char *name, const void *data, size_t len,
                                    korch_err_t *err);
/* *data is new (malloc), NUL-terminated. */
korch_rc_t korch_proc_get_file_wait(korch_proc_t *p, const char *name, size_t max, char **data, size_t *len,
                                    korch_err_t *err);
/* Run the loop until the background work is done (containers being
   removed, zombies being reaped, detached kernels tearing down: everything
   korch_launcher_defer holds; file ops and host work on the worker: a
   destroyed docker proc's unmounts, korch_launcher_remove_dir), or timeout_ms passes (-1 = never). True when
   done. For tests and the CLI, never from a handler. */
bool korch_launcher_settle(korch_launcher_t *l, int timeout_ms);

/* Run the loop until p's end is seen or timeout_ms passes (-1 = never). */
bool korch_proc_wait_exit(korch_proc_t *p, int timeout_ms);

/* Let the launcher's Python kernels install packages from p's sources
   (korch/packages.h; copied). KORCH_E_INVALID with a message when a source
   is unusable (no such dir, a URL that is not http(s)://host...) or the
   backend cannot (no KORCH_LAUNCHER_PACKAGES: the swarm). All NULL: none.
   Before the first start. */
korch_rc_t korch_launcher_set_packages(korch_launcher_t *l, const korch_packages_t *p, korch_err_t *err);

/* Choosing a launcher (the CLI's --launcher and its knobs). */
typedef struct {
    const char *name;       /* auto | docker | sandbox | local (NULL = auto: docker when the engine
                               answers and the image is there, else sandbox, else refuse) */
    const char *kernel;     /* kernelspec, for the default image korch-kernel-<kernel>:latest */
    const char *image;      /* overrides the default image */
    double memory_mb, cpus; /* 0 = the launcher's defaults */
    long pids;
    const char *workdir;    /* host dir mounted as the kernel's cwd (docker, sandbox) */
    bool workdir_from_cwd;  /* mount the kernel's cwd (the request's) */
    bool give_workdir;      /* that dir is korch's own: hand it to the kernel's uid */
    double workdir_mb;      /* size bound of the kernel's work dir (0 = the launcher's 512 MiB) */
    const char *instance;   /* korch instance label */
    bool quiet;             /* do not say what auto picked (local's note is said anyway) */
    korch_packages_t packages; /* the package sources its Python kernels may install from (all NULL: none) */
    bool fork;              /* fork kernels from a template where the launcher can (sandbox: docs/fastkernel.md) */
} korch_launcher_choice_t;

/* The launcher c asks for, or NULL + err: an unknown name, the named one
   not working here, or auto finding neither docker nor the sandbox (the
   message says how to get either: auto never falls back to an unconfined
   kernel). "local" says once on stderr what it means. */
korch_launcher_t *korch_launcher_choose(korch_loop_t *loop, const korch_launcher_choice_t *c, korch_err_t *err);

/* The launchers korch_launcher_choose knows, in the order the help lists
   them: each name with a line saying what it does ({NULL, NULL} ends it). */
typedef struct {
    const char *name;
    const char *what;
} korch_launcher_about_t;
const korch_launcher_about_t *korch_launcher_catalog(void);

/* Does the launcher of this name (as korch_launcher_choose takes it) need a
   korch instance: do its kernels, or what they leave (containers, services,
   cgroups), carry this korch's instance for a later korch's sweep? Every
   launcher but the one whose kernels are plain processes of korch's. */
bool korch_launcher_needs_instance(const char *name);

/* Remove what korch instances that are gone (their runtime dirs are in our
   runtime base, their lock is free) left behind: containers (docker) and
   sandbox cgroups, so a korch killed with -9 leaks nothing past the next
   start. mine is this korch's instance. Blocking: call it at start-up. */
void korch_launcher_sweep(korch_launcher_t *l, const char *mine);

#endif
