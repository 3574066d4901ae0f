/*  What the launcher backends share: starting a kernel process, the one
 *  fork/exec (local.c runs the kernelspec's argv, sandbox.c runs bwrap in
 *  front of it), and a few small helpers.
 *
 *  Private to src/launcher. The child does only async-signal-safe work
 *  between fork and exec (korch has threads): write its pid into cgroups,
 *  leave korch's session or process group, give up root, set up fds and
 *  signals. Anything that fails there is reported back through a pipe, so
 *  korch_spawn returns the real error ("cannot start ...: No such file or
 *  directory") instead of a kernel that dies at once.
 */
#ifndef KORCH_LAUNCHER_SPAWN_H
#define KORCH_LAUNCHER_SPAWN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "korch/error.h"
#include "korch/kernelspec.h"
#include "korch/launcher.h"

/* Everything is borrowed for the duration of korch_spawn. */
typedef struct {
    const char *what;           /* for messages: "kernel 'python3'", "bwrap" */
    char *const *argv;          /* argv[0] without '/' is searched on korch's PATH */
    char *const *envp;          /* the child's whole environment */
    const char *cwd;            /* NULL = korch's */
    int out_fd;                 /* the child's stdout and stderr; stdin is /dev/null */
    const int *keep_fds;        /* fds the child inherits (korch keeps them O_CLOEXEC), -1-terminated, may be NULL */
    const int *cgroup_fds;      /* open cgroup.procs files the child writes its pid to first, -1-terminated, may be NULL */
    const int *bind_fds;        /* dirs korch opened, -1-terminated, may be NULL: the child gets a private
                                   mount namespace with a tmpfs at bind_at and binds them at {bind_at}/0,
                                   {bind_at}/1, ... before it drops its uid, so a uid that cannot reach
                                   them by their own paths (a 0700 runtime base) still can there */
    const char *bind_at;        /* "/tmp" */
    bool new_session;           /* setsid() (no controlling terminal) rather than setpgid(0, 0) */
    bool set_ids;               /* become uid:gid, no supplementary groups (korch must be root) */
    uid_t uid;
    gid_t gid;
} korch_spawn_t;

/* Start the child and wait for its exec (blocking: for constructors'
   probes, never on the loop). *pid is its pid, the leader of its own
   process group; *pidfd a pidfd readable when it exits, or -1 where the
   kernel has none. */
korch_rc_t korch_spawn(const korch_spawn_t *s, pid_t *pid, int *pidfd, korch_err_t *err);

/* The same for a backend's start op, without waiting on the loop for the
   child's exec (a sandbox's mount namespace and binds take 10-25 ms): fork
   now (*pid, *pidfd set at once, as korch_spawn's), then, from the loop,
   once the child has exec'd, watch(proc) (may be NULL) and op finishes
   with proc; if it fails to, proc is freed (ops->proc_free reaps the
   child) and op fails with the child's reason; if op is cancelled first,
   proc is freed likewise. A returned error: nothing forked, or the child
   failed and proc is the caller's to free (with proc_free when *pid > 0). */
korch_rc_t korch_spawn_start(korch_proc_t *proc, korch_op_t *op, const korch_spawn_t *s, pid_t *pid, int *pidfd,
                             void (*watch)(korch_proc_t *proc), korch_err_t *err);

/* A child korch spawned, and its end: watched on the loop with its pidfd
   (else WNOHANG every 100 ms) until reaped, then ended(arg) is called once
   (the status is in status). Embedded in a backend's proc; one thread. */
typedef struct {
    pid_t pid;                  /* -1 none yet */
    int pidfd;                  /* -1 when the kernel has no pidfd support */
    bool reaped;
    int status;                 /* waitpid status once reaped */
    korch_loop_t *loop;         /* while watched */
    bool polled;                /* pidfd on the loop */
    int poll_timer;             /* without a pidfd: the WNOHANG timer; -1 none */
    void (*ended)(void *arg);
    void *arg;
} korch_child_t;

void korch_child_init(korch_child_t *c);
void korch_child_watch(korch_child_t *c, korch_loop_t *loop, void (*ended)(void *arg), void *arg);
void korch_child_unwatch(korch_child_t *c);
/* waitpid (block: wait for it; at korch_launcher_destroy only); true once reaped. */
bool korch_child_reap(korch_child_t *c, bool block);
/* Unwatch and close the pidfd (the pid stays, for reaping). */
void korch_child_close(korch_child_t *c);

/* The kernelspec's argv with {connection_file} and {resource_dir} replaced,
   after the strings of prefix (NULL-terminated, may be NULL): a new
   NULL-terminated vector (free with korch_spawn_strv_free), NULL on ENOMEM. */
char **korch_spawn_argv(const char *const *prefix, const korch_kernelspec_t *spec, const char *conn_file);
void korch_spawn_strv_free(char **v);

/* A waitpid status in words: "exited 3", "killed by signal 9 (Killed)". */
void korch_spawn_describe(int status, char *why, size_t whylen);

/* Give a host dir korch made for a kernel, and what is in it, to the
   kernel's uid (links themselves, never what they point to). Call it
   while no kernel runs there (korch_fs_chown_tree). */
void korch_chown_tree(const char *dir, uid_t uid, gid_t gid);

/* The socket name of req's ipc endpoints ("k" of {runtime_dir}/k) when
   they lie directly in runtime_dir (the dir a container or sandbox gets
   mounted), else NULL and err says so; who names the launcher. Checks that
   the request is complete too. */
const char *korch_launch_ipc_name(const korch_launch_t *req, const char *who, korch_err_t *err);

/* The length of a dir path without its trailing slashes. */
size_t korch_dir_len(const char *s);

/* "uid:gid" (gid defaults to uid), numeric only: korch must know the uid to
   hand dirs over. */
bool korch_parse_user(const char *s, uid_t *uid, gid_t *gid);

/* "1 GiB", "512 MiB", "123456 bytes": for limits in messages. */
void korch_human_bytes(int64_t n, char *buf, size_t len);

/* *slot = a copy of *field, and *field points at it (NULL stays NULL):
   a launcher owning its option strings. false on ENOMEM. */
bool korch_own_str(char **slot, const char **field);

#endif
