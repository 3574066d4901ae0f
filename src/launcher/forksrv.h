/*  A kernel template: a Python process that has imported what a data
 *  kernel needs (numpy, pandas, matplotlib, ipykernel) and nothing else,
 *  forked per kernel (private to src/launcher; docs/fastkernel.md).
 *
 *  korch spawns src/launcher/forksrv.py (embedded in the binary) as root,
 *  single-threaded (OpenBLAS and friends held to one thread), with:
 *  - a control socket (SOCK_SEQPACKET): korch's requests, one JSON object
 *    and its fds per message; the template's one "ready" (or "error")
 *    message after its imports;
 *  - a lifeline pipe whose write end only korch holds: at korch's end the
 *    template and every sandbox it forked see EOF and go.
 *  The template runs no kernel's code and no kernel can reach it: it keeps
 *  no fd of theirs, they live in other pid, mount and net namespaces, under
 *  other uids, with ptrace and process_vm_* refused (seccomp.h).
 *
 *  What a request does (the fork, the confinement, the status pipe) is the
 *  backend's: see forksrv.py's head and sandbox_fork.c. A template that
 *  dies is told to the watcher; the kernels it forked live on.
 *
 *  Rotation: after N forks or T seconds (opts) the next request starts a
 *  successor, which imports while the current one serves on; once it is
 *  ready it serves, and the one it replaces is sent nothing more (it forks
 *  what it was sent, sees its socket's end and goes). So the forks do not
 *  share one address-space layout, stack canary and hash seed forever; it
 *  costs one template's imports (CPU, a second or two) per rotation, and
 *  the kernels of each generation share their own template's pages.
 *
 *  One thread (the launcher's loop).
 */
#ifndef KORCH_LAUNCHER_FORKSRV_H
#define KORCH_LAUNCHER_FORKSRV_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include <jansson.h>
#include "korch/error.h"
#include "korch/loop.h"

typedef struct korch_forksrv korch_forksrv_t;

typedef enum { KORCH_FORKSRV_STARTING, KORCH_FORKSRV_READY, KORCH_FORKSRV_DEAD } korch_forksrv_state_t;

typedef struct {
    const char *python;         /* the interpreter (the kernelspec's argv[0]) */
    const char *key;            /* what it is a template of (kernelspec and launcher): for korch_forksrv_key */
    const char *name;           /* for messages and its argv: the kernelspec's name */
    const char *imports;        /* comma-separated modules to import; NULL = KORCH_FORK_IMPORTS, else the data stack */
    const char *mpl_dir;        /* MPLCONFIGDIR of the template (its font cache), korch's; NULL = none */
    const char *const *env;     /* more "NAME=value" for its environment (the kernelspec's), may be NULL */
    unsigned rotate_forks;      /* made again after this many forks; 0 = KORCH_FORK_ROTATE, else 100 */
    unsigned rotate_s;          /* or this many seconds after it was ready; 0 = KORCH_FORK_ROTATE_S, else 3600
                                   (the environment's 0: never) */
} korch_forksrv_opts_t;

/* Called on the loop when the template's state changes (ready, dead). */
typedef void(korch_forksrv_fn)(korch_forksrv_t *srv, void *arg);

/* Spawn a template (fork and exec now: a few ms; its imports go on in the
   background, see fn). NULL with err. Strings are copied. */
korch_forksrv_t *korch_forksrv_new(korch_loop_t *loop, const korch_forksrv_opts_t *o, korch_forksrv_fn *fn, void *arg,
                                   korch_err_t *err);

korch_forksrv_state_t korch_forksrv_state(const korch_forksrv_t *srv);
/* Why it died ("" while alive), borrowed. */
const char *korch_forksrv_why(const korch_forksrv_t *srv);
const char *korch_forksrv_key(const korch_forksrv_t *srv);
pid_t korch_forksrv_pid(const korch_forksrv_t *srv);
/* How many kernels it has forked. */
unsigned korch_forksrv_forks(const korch_forksrv_t *srv);
/* How many times it was made again for a fresh layout (rotations). */
unsigned korch_forksrv_rotations(const korch_forksrv_t *srv);

/* Send one fork request (req borrowed, fds borrowed: the template gets
   copies, close yours) to a ready template; never blocks (a full socket
   is KORCH_E_TIMEOUT: it is busy, send again later). A template found gone
   here is DEAD (without a call of fn). */
korch_rc_t korch_forksrv_send(korch_forksrv_t *srv, json_t *req, const int *fds, int nfds, korch_err_t *err);

/* Has it died (its end not seen on the loop yet: found now, without a
   call of fn)? true while alive. Never blocks. */
bool korch_forksrv_check(korch_forksrv_t *srv);
/* A DEAD template spawned again (STARTING; fn tells when it is ready);
   KORCH_OK at once for a live one. The same object: kernels waiting on it keep it. */
korch_rc_t korch_forksrv_restart(korch_forksrv_t *srv, korch_err_t *err);

/* Stop it and release it (what it forked sees the lifeline close and ends:
   call it when its kernels are ended anyway); waits only for a
   killed process's end (reaping it). */
void korch_forksrv_destroy(korch_forksrv_t **srv);

#endif
