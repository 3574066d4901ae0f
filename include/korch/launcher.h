/*  Launchers start kernel processes; the kernel client talks to them.
 *
 *  One small function table, one file per backend (src/launcher/local.c,
 *  src/launcher/docker.c, ...), the way curl keeps its TLS backends behind
 *  struct Curl_ssl. The client never knows which backend it has.
 *
 *  Ownership: korch_launcher_start returns a korch_proc_t the caller owns and
 *  releases with korch_proc_destroy, which also removes what the backend made
 *  for it (a container, a log pipe). A launcher outlives its procs.
 *
 *  Liveness: a backend either offers an exit_fd that becomes readable when the
 *  kernel ends (pidfd for local processes) or the client polls is_alive.
 */
#ifndef KORCH_LAUNCHER_H
#define KORCH_LAUNCHER_H

#include <stdbool.h>
#include <stddef.h>
#include "korch/conn.h"
#include "korch/error.h"
#include "korch/kernelspec.h"

typedef struct korch_launcher korch_launcher_t;
typedef struct korch_proc korch_proc_t;

/* What to start. Everything is borrowed for the duration of start(). */
typedef struct {
    const korch_kernelspec_t *spec;
    const korch_conn_t *conn;       /* endpoints as korch will connect to them; with ipc the
                                       prefix is {runtime_dir}/{name}: directly inside runtime_dir */
    const char *runtime_dir;        /* private dir (0700) for this kernel; ipc sockets live here */
    const char *cwd;                /* kernel's working directory, NULL = inherit / image default */
    const char *const *env;         /* extra "NAME=value" strings, NULL-terminated, may be NULL */
    const char *kernel_id;          /* korch's id for the kernel (a uuid) */
} korch_launch_t;

typedef struct {
    const char *name;               /* "local", "docker" */
    /* transport the backend needs: "tcp" or "ipc" (docker uses ipc over a bind mount) */
    const char *(*transport)(korch_launcher_t *self);
    /* Start the kernel. Writes the connection file as the kernel must see it. */
    korch_rc_t (*start)(korch_launcher_t *self, const korch_launch_t *req, korch_proc_t **out, korch_err_t *err);
    /* fd readable when the kernel ends, or -1 if the client must poll is_alive. */
    int (*exit_fd)(korch_proc_t *proc);
    /* true while the kernel runs; when it ended, why (e.g. "exited 1",
       "killed by signal 9", "out of memory (limit 1 GiB)") goes into why. */
    bool (*is_alive)(korch_proc_t *proc, char *why, size_t whylen);
    /* Deliver a signal to the kernel (its process group for local kernels). */
    korch_rc_t (*signal)(korch_proc_t *proc, int sig, korch_err_t *err);
    /* End the kernel now (SIGKILL) and wait until it is gone. */
    void (*kill)(korch_proc_t *proc);
    /* Last lines the kernel process printed outside the protocol (its stderr), or "". */
    const char *(*log_tail)(korch_proc_t *proc);
    /* Release the proc and what the backend made for it (kills it if still alive). */
    void (*proc_free)(korch_proc_t *proc);
    /* Release the launcher itself. */
    void (*free)(korch_launcher_t *self);
    /* Re-attach to a kernel this backend started for an earlier korch that
       is gone, found by kernel id: fills conn (as korch connects to it) and
       runtime_dir. NULL when the backend cannot (local kernels end with korch). */
    korch_rc_t (*adopt)(korch_launcher_t *self, const char *kernel_id, korch_conn_t *conn, char *runtime_dir,
                        size_t runtime_dir_len, korch_proc_t **out, korch_err_t *err);
    /* Write a file into the kernel's working directory (name already checked
       by korch_safe_relpath; parent directories are created). */
    korch_rc_t (*put_file)(korch_proc_t *proc, const char *name, const void *data, size_t len, korch_err_t *err);
    /* Read a file from the kernel's working directory, at most max bytes:
       *data is new (malloc) and NUL-terminated. */
    korch_rc_t (*get_file)(korch_proc_t *proc, const char *name, size_t max, char **data, size_t *len,
                           korch_err_t *err);
} korch_launcher_ops_t;

/* Backends embed this as their first member. */
struct korch_launcher {
    const korch_launcher_ops_t *ops;
};

/* Backends embed this as their first member. */
struct korch_proc {
    korch_launcher_t *launcher;
};

/* The local backend: fork/exec of the kernelspec argv in its own process group. */
korch_launcher_t *korch_launcher_local_new(void);

/* Convenience wrappers over ops. */
korch_rc_t korch_launcher_start(korch_launcher_t *l, const korch_launch_t *req, korch_proc_t **out, korch_err_t *err);
korch_rc_t korch_launcher_adopt(korch_launcher_t *l, const char *kernel_id, korch_conn_t *conn, char *runtime_dir,
                                size_t runtime_dir_len, korch_proc_t **out, korch_err_t *err);
void korch_launcher_destroy(korch_launcher_t **l);
int korch_proc_exit_fd(korch_proc_t *p);
bool korch_proc_is_alive(korch_proc_t *p, char *why, size_t whylen);
korch_rc_t korch_proc_signal(korch_proc_t *p, int sig, korch_err_t *err);
void korch_proc_kill(korch_proc_t *p);
const char *korch_proc_log_tail(korch_proc_t *p);
void korch_proc_destroy(korch_proc_t **p);
korch_rc_t korch_proc_put_file(korch_proc_t *p, const char *name, const void *data, size_t len, korch_err_t *err);
korch_rc_t korch_proc_get_file(korch_proc_t *p, const char *name, size_t max, char **data, size_t *len,
                               korch_err_t *err);

/* Is name a relative path that stays inside a directory (no "..", no
   leading "/", no empty or "." parts, no NUL, at most 1024 bytes)? */
bool korch_safe_relpath(const char *name);

#endif
