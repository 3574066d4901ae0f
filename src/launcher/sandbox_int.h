/*  What the sandbox launcher's files share (private to src/launcher):
 *  its launcher and proc, and the functions one file gives another.
 *
 *    sandbox.c        the ops table, the probe, korch_launcher_sandbox_new, the sweep
 *    sandbox_start.c  a kernel's start: its runtime dir, cgroup and bwrap's command line
 *    sandbox_args.c   bwrap's argv and the kernel's environment
 *    sandbox_files.c  put_file / get_file in the kernel's work dir, never through its links
 *    sandbox_life.c   watching, signalling, reaping and freeing a running sandbox
 *    sandbox_fork.c   a kernel forked from a kernel template (forksrv.h) instead of bwrap
 *
 *  One thread (the launcher's loop), as sandbox.h says.
 */
#ifndef KORCH_LAUNCHER_SANDBOX_INT_H
#define KORCH_LAUNCHER_SANDBOX_INT_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include "korch/sandbox.h"
#include "korch/cgroup.h"
#include "backend.h"
#include "spawn.h"
#include "logpipe.h"
#include "kuid.h"

/* The source of the tmpfs on a sandbox kernel's runtime dir, then the instance (hostdir.h). */
#define KORCH_SANDBOX_MOUNT_SRC "korch-sandbox:"

#define S_GIB (1024LL * 1024 * 1024)
#define S_MIB (1024LL * 1024)
#define S_CONN_IN "/tmp/korch-kernel.json" /* in the sandbox's private /tmp */
#define S_TAIL_MAX 4096
#define S_BIND_AT "/tmp" /* where the spawn helper binds the dirs bwrap mounts (in its own namespace) */
#define S_ARGS_MAX 160
#define S_TEMPLATES 8       /* kernel templates per launcher (one per kernelspec) */
#define S_PENDING_FDS 10    /* the fds of a fork request */

typedef struct korch_forksrv korch_forksrv_t;
typedef struct sandbox_proc sandbox_proc_t;

typedef struct {
    korch_launcher_t base;
    korch_sandbox_opts_t o;
    char *strs[6];              /* owned copies of the option strings */
    char bwrap[PATH_MAX];
    uid_t uid;                  /* the kernels' (opts.user, or korch's own); with dynamic, each its own */
    gid_t gid;
    bool dynamic;               /* korch is root and no user was given: a kernel uid no account has (kuid.h) */
    bool drop;                  /* korch is root and the kernel is not: give up root before bwrap */
    unsigned seq;               /* makes cgroup names unique across restarts */
    char scope[32];             /* korch_cgroup_scope of the runtime base: cgroups in korch/{scope}/{instance} */
    unsigned char *bpf;         /* the seccomp program (seccomp.h) for bwrap --seccomp, NULL = none */
    size_t bpf_len;
    char *bpf_hex;              /* the same in hex, for fork requests (made at the first) */
    korch_forksrv_t *tpl[S_TEMPLATES]; /* kernel templates (opts.fork), one per kernelspec */
    sandbox_proc_t *waiting;    /* forked kernels waiting for their template (importing, or its socket full) */
    int busy_timer;             /* sending to a full template again, -1 none */
} sandbox_launcher_t;

struct sandbox_proc {
    korch_proc_t base;
    sandbox_launcher_t *l;
    korch_child_t child;        /* the outer bwrap */
    int info_fd;                /* bwrap's --info-fd, read end, until pid 1 is known */
    bool info_polled;           /* info_fd on the loop */
    char info[1024];            /* what bwrap wrote there so far */
    size_t info_len;
    pid_t init_pid;             /* host pid of the sandbox's pid 1, 0 = not known yet */
    korch_cgroup_t *cg;
    uid_t uid;                  /* the kernel's (l->uid, or its claim's) */
    gid_t gid;
    korch_kuid_t *kuid;         /* with l->dynamic: its claim, released once nothing of it runs */
    korch_logpipe_t *log;       /* the kernel's stdout and stderr, the last log_max bytes (logpipe.h) */
    char workdir[PATH_MAX];     /* host path of the work dir, for messages */
    bool host_work;             /* the work dir is a host dir korch was given (not {runtime_dir}/work) */
    bool given;                 /* ... and handed to the kernel's uid: handed back at the end */
    int work_fd;                /* the work dir (O_PATH), opened once: the kernel can rename and replace
                                   {runtime_dir}/work, so korch never resolves that path again */
    char tail[S_TAIL_MAX + 1];
    /* forked from a template (sandbox_fork.c): no bwrap (child.pid -1), a status pipe instead */
    bool forked;
    int status_fd;              /* its read end, -1 none */
    bool status_polled;
    char sbuf[256];             /* a line being read */
    size_t slen;
    bool confined;              /* "ok" seen */
    bool exit_seen;             /* "exit" seen: exit_status is B's wait status */
    int exit_status;
    korch_op_t *op;             /* the start op, until it finishes */
    korch_forksrv_t *srv;       /* the template it waits for, NULL once sent */
    korch_forksrv_t *sent_to;   /* the template that has its request */
    bool retried;               /* asked a second time (its template died with the first) */
    sandbox_proc_t *next_wait;  /* l->waiting */
    json_t *pending;            /* the request not sent yet */
    int pending_fds[S_PENDING_FDS];
    int npending;
    char spec_name[128];
};

/* A growing argv of owned strings, bounded. */
typedef struct {
    char *v[S_ARGS_MAX + 1];
    int n;
    bool full;
} korch_sandbox_args_t;


/* ---- sandbox_args.c */

/* Append a copy of s (a, a->full on overflow or ENOMEM); args3 appends
   x and, when not NULL, y and z; arg_fd appends opt, fd and dest. */
void korch_sandbox_arg(korch_sandbox_args_t *a, const char *s);
void korch_sandbox_args3(korch_sandbox_args_t *a, const char *x, const char *y, const char *z);
void korch_sandbox_arg_fd(korch_sandbox_args_t *a, const char *opt, int fd, const char *dest);
void korch_sandbox_args_clear(korch_sandbox_args_t *a);
/* The files of /etc a kernel gets read-only, NULL-terminated. */
extern const char *const korch_sandbox_etc[];
void korch_sandbox_root_links(korch_sandbox_args_t *a);
int korch_sandbox_memfd(const char *name, const char *text, size_t len);
char **korch_sandbox_env(const korch_launch_t *req, const sandbox_launcher_t *l);

/* ---- sandbox_files.c */

int korch_sandbox_open_dir(int dirfd, const char *name, bool create, bool give, uid_t uid, gid_t gid);
korch_rc_t korch_sandbox_put_file_now(korch_proc_t *proc, const char *name, const void *data, size_t len,
                                      korch_err_t *err);
korch_rc_t korch_sandbox_get_file_now(korch_proc_t *proc, const char *name, size_t max, char **data, size_t *len,
                                      korch_err_t *err);

/* ---- sandbox_life.c */

void korch_sandbox_watch_proc(korch_proc_t *proc);
void korch_sandbox_proc_free(korch_proc_t *proc);
korch_rc_t korch_sandbox_kill(korch_proc_t *proc, korch_op_t *op, korch_err_t *err);
korch_rc_t korch_sandbox_signal(korch_proc_t *proc, int sig, korch_op_t *op, korch_err_t *err);
const char *korch_sandbox_log_tail(korch_proc_t *proc);
bool korch_sandbox_usage_src(korch_proc_t *proc, korch_usage_src_t *src);

/* ---- sandbox_fork.c */

/* What korch_sandbox_start prepared, for a fork (borrowed). */
typedef struct {
    const char *conn, *passwd, *group, *hosts;
    char **env;
    int work_fd, runtime_fd, spec_fd;       /* spec_fd -1: none */
} korch_sandbox_fork_t;

/* Does req's kernel start from a template (opts.fork, root, a python3 ipykernel_launcher kernelspec)? */
bool korch_sandbox_forkable(const sandbox_launcher_t *l, const korch_launch_t *req);
/* Fork p's kernel (its uid, cgroup and dirs made): the op finishes once it is confined. */
korch_rc_t korch_sandbox_fork_start(sandbox_launcher_t *l, sandbox_proc_t *p, const korch_launch_t *req,
                                    const korch_sandbox_fork_t *f, korch_op_t *op, korch_err_t *err);
/* proc_free's part: stop watching, forget a request not sent. */
void korch_sandbox_fork_release(sandbox_proc_t *p);
void korch_sandbox_fork_kill(sandbox_proc_t *p);
void korch_sandbox_fork_free_all(sandbox_launcher_t *l);
/* The ops' warm: spec's template made now, when its kernels would be forked. */
korch_rc_t korch_sandbox_warm(korch_launcher_t *self, const korch_kernelspec_t *spec, korch_err_t *err);

/* ---- sandbox_start.c */

korch_rc_t korch_sandbox_start(korch_launcher_t *self, const korch_launch_t *req, korch_op_t *op, korch_err_t *err);

#endif
