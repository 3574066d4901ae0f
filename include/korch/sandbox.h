/*  The sandbox launcher: a local kernel process inside Linux namespaces
 *  (bubblewrap) and a cgroup of its own, for machines without Docker.
 *
 *  What the kernel gets, by default:
 *  - no network: its own empty network namespace (loopback only). The
 *    channels are ipc sockets in runtime_dir, bound at runtime_mount
 *    (/run/korch), as with the docker launcher;
 *  - the system read-only: /usr (and the /bin, /lib... links to it), the
 *    few files of /etc a kernel needs, a synthetic /etc/passwd and
 *    /etc/group; a private /tmp (tmpfs of tmp_size bytes); its work dir at
 *    workdir_mount the only writable host place; /home, /root, /var, /run,
 *    other kernels' runtime dirs, korch's files and the docker socket are
 *    simply not there. Its own pid, ipc, uts, user and cgroup namespaces;
 *    no new user namespaces inside; no capabilities; no new privileges;
 *    a seccomp filter at least as tight as Docker's default profile for
 *    the calls that matter (src/launcher/seccomp.h: io_uring, bpf,
 *    userfaultfd, the mount family, ptrace, AF_VSOCK ...);
 *  - the environment is an allow-list (PATH, HOME, LANG, LC_*, TZ) plus the
 *    kernelspec's and the request's env: never korch's (API keys);
 *  - when korch runs as root, an unprivileged uid: opts.user, else one no
 *    account has, its own (src/launcher/kuid.h): korch drops to it before
 *    bwrap starts, so bwrap itself acts with that uid's rights only;
 *    runtime_dir and the work dir are given to it, a host work dir given
 *    back to the user who asked at the end;
 *  - bounded disk: runtime_dir (with work/ in it) a tmpfs of runtime_size +
 *    workdir_size, /tmp one of tmp_size, stdout/stderr a ring of log_max;
 *  - the connection file (the HMAC key) never touches the host's disk: it
 *    reaches the sandbox's private /tmp through an fd;
 *  - memory (no swap; the OOM killer is named in the death reason), pids
 *    and CPU limits through a cgroup per kernel (v2 or v1), which also
 *    finds and kills whatever the kernel started;
 *  - the process tree dies with korch (bwrap --die-with-parent, and the
 *    cgroups of korch instances that are gone are swept at the next start:
 *    korch_sandbox_sweep). No re-adoption: a sandbox ends with its korch.
 *
 *  Work dir: opts.workdir (a host dir), or the request's cwd with
 *  workdir_from_cwd, else {runtime_dir}/work, made for the kernel and
 *  removed with the runtime dir. put_file / get_file never follow a link
 *  the kernel planted there.
 *
 *  Signals: SIGINT and the like go to the kernel's process group inside
 *  the sandbox (bwrap's pid 1 and its session), so interrupt_mode signal
 *  works; SIGKILL ends the whole sandbox. Liveness: a pidfd of bwrap.
 *
 *  bwrap must be spawned from a thread that outlives the kernel (the parent
 *  death signal follows the spawning thread): korch starts kernels on its
 *  main loop. A launcher and its procs are used from one thread.
 */
#ifndef KORCH_SANDBOX_H
#define KORCH_SANDBOX_H

#include <stdbool.h>
#include <stdint.h>
#include "korch/error.h"
#include "korch/launcher.h"

/* Knobs, filled with the defaults by korch_sandbox_opts_init; strings are
   borrowed (the launcher copies them). A limit <= 0 means none. */
typedef struct {
    const char *bwrap;          /* NULL = $KORCH_BWRAP, else "bwrap" on the PATH */
    const char *instance;       /* this korch's id: cgroups live in korch/{scope of the runtime base}/{instance}; NULL = "default" */
    const char *user;           /* "uid:gid"; NULL = one of its own no account has when korch is root, else korch's own */
    const char *workdir;        /* host dir bound read-write as the kernel's cwd; NULL = see above */
    bool workdir_from_cwd;      /* use the request's cwd when workdir is NULL */
    bool workdir_give;          /* chown that host dir (and its contents) to the kernel's uid */
    const char *workdir_mount;  /* the cwd inside: "/home/korch/work" */
    const char *runtime_mount;  /* where runtime_dir appears: "/run/korch" */
    bool network;               /* false: no network at all (default) */
    int64_t memory;             /* bytes, no swap: 1 GiB */
    int64_t nano_cpus;          /* 1e9 per CPU: 1 CPU */
    int64_t pids_limit;         /* 256 */
    int64_t tmp_size;           /* /tmp tmpfs bytes: 256 MiB */
    int64_t runtime_size;       /* runtime_dir tmpfs bytes (sockets): 1 MiB; 0 = not bounded */
    int64_t workdir_size;       /* the work dir's bytes, in the runtime dir's tmpfs: 512 MiB; 0 = not bounded */
    int64_t log_max;            /* the kernel's stdout + stderr korch keeps (the last bytes): 64 KiB */
    bool no_seccomp;            /* false: the seccomp filter of src/launcher/seccomp.h (default) */
    bool fork;                  /* a python3 ipykernel kernelspec's kernels are forked from a template that
                                   has imported the data stack (docs/fastkernel.md); root only, else bwrap;
                                   default: KORCH_FORK=1 in the environment */
} korch_sandbox_opts_t;

void korch_sandbox_opts_init(korch_sandbox_opts_t *opts);

/* A sandbox launcher (opts NULL = defaults). Checks that it can work here:
   bwrap is there, cgroups can be made, and a trivial sandbox starts (user
   namespaces may be off): else NULL with the reason in err, e.g. "sandbox
   unavailable: bwrap: No permissions to create a new namespace ...". */
korch_launcher_t *korch_launcher_sandbox_new(korch_loop_t *loop, const korch_sandbox_opts_t *opts, korch_err_t *err);

/* Kill and remove what korch instances that are gone left in their
   cgroups (alive: e.g. korch_instance_alive; gone, may be NULL, is told of
   each such instance: e.g. korch_instance_forget). Returns kernels removed. */
int korch_sandbox_sweep(const char *mine, bool (*alive)(const char *instance), void (*gone)(const char *instance));

#endif
