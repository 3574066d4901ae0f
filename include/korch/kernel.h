/*  A kernel and korch's client for it.
 *
 *  korch_kernel_new starts a kernel through a launcher (or attaches to one
 *  someone else started, opts.existing) and connects the five channels on a
 *  korch_loop. Everything is asynchronous: executions report their outputs
 *  and completion through callbacks as messages arrive, and many kernels can
 *  share one loop. The *_wait calls are blocking conveniences that run the
 *  loop until their condition holds.
 *
 *  An execution is done when both its execute_reply (shell) and its
 *  status: idle (iopub) have arrived - in either order. Messages whose parent
 *  is another request are never mixed into its outputs.
 *
 *  Ownership: the caller owns the kernel and every korch_exec_t it gets and
 *  destroys them; destroying a kernel shuts it down (shutdown_request, grace,
 *  SIGTERM, SIGKILL) and detaches its pending executions. A launcher given
 *  in opts must run on the kernel's loop; its start (and adopt) is an
 *  asynchronous op: korch_kernel_new returns while it is under way.
 */
#ifndef KORCH_KERNEL_H
#define KORCH_KERNEL_H

#include <stdbool.h>
#include <stdint.h>
#include <jansson.h>
#include "korch/conn.h"
#include "korch/error.h"
#include "korch/launcher.h"
#include "korch/loop.h"
#include "korch/msg.h"
#include "korch/outputs.h"
#include "korch/session.h"

typedef struct korch_kernel korch_kernel_t;
typedef struct korch_exec korch_exec_t;

typedef enum {
    KORCH_KERNEL_STARTING,      /* launched, waiting for kernel_info + iopub */
    KORCH_KERNEL_IDLE,
    KORCH_KERNEL_BUSY,
    KORCH_KERNEL_RESTARTING,
    KORCH_KERNEL_DEAD,          /* died and will not be restarted */
    KORCH_KERNEL_STOPPED,       /* shut down on request */
} korch_kernel_state_t;

typedef struct {
    const char *kernelspec;     /* name, default "python3" */
    korch_launcher_t *launcher; /* borrowed; NULL = a local launcher owned by the kernel */
    const char *existing;       /* attach to this connection file instead of launching */
    bool owner_notifies;        /* existing: its owner says when its process goes (korch_kernel_gone),
                                   so korch does not guess it from header.session and heartbeat gaps */
    bool (*owner_ended)(void *arg); /* owner_notifies: polled at each start and heartbeat tick (at most
                                   1 s apart); once true the kernel is dead for good, so every wait on it
                                   ends (korch serve's session thread told to end, whose kernel may have
                                   been shut down under it without a word) */
    void *owner_arg;
    const char *cwd;            /* kernel's working directory (local: default inherit) */
    const char *const *env;     /* extra "NAME=value", NULL-terminated */
    const char *transport;      /* "tcp" or "ipc"; default: what the launcher wants */
    const char *kernel_id;      /* default: a new uuid */
    bool adopt;                 /* re-attach to kernel_id, left running by an earlier korch
                                   (korch_launcher_adopt), instead of starting one */
    int start_timeout_ms;       /* ready within this (default 60000) */
    int shutdown_grace_ms;      /* shutdown_request, half of it, SIGTERM, half, SIGKILL (default 4000) */
    int hb_interval_ms;         /* heartbeat period for attached / fd-less kernels (default 500) */
    int hb_max_missed;          /* dead after this many missed beats in a row (default 3) */
    bool no_auto_restart;       /* after a death, stay dead */
    bool relay_stdin;           /* input_requests korch did not cause are left to on_message
                                   (a gateway relays them), not answered with "" */
    size_t max_stream_bytes;    /* per execution (default 8 MiB) */
    size_t max_outputs;         /* per execution (default 10000) */
    size_t max_rich_bytes;      /* images, HTML, JSON bundles per execution (default 32 MiB) */
    size_t max_session_stream_bytes; /* stream text over this kernel's life (default 64 MiB) */
    size_t max_session_rich_bytes;   /* rich bytes over this kernel's life (default 128 MiB) */
} korch_kernel_opts_t;

typedef enum {
    KORCH_EXEC_PENDING,         /* not finished yet */
    KORCH_EXEC_OK,
    KORCH_EXEC_ERROR,           /* the code raised */
    KORCH_EXEC_ABORTED,         /* the kernel dropped it after an earlier error */
    KORCH_EXEC_TIMEOUT,         /* interrupted (or the kernel restarted) after its timeout */
    KORCH_EXEC_DIED,            /* the kernel died while it ran */
} korch_exec_status_t;

typedef struct {
    bool silent;
    bool no_store_history;      /* default: store history */
    bool allow_stdin;           /* default off: input() raises in the kernel */
    bool stop_on_error;         /* abort requests queued behind a failing one. Off by default,
                                   unlike jupyter_client: ipykernel then also aborts a request
                                   sent right after an interrupted (timed-out) one */
    int timeout_ms;             /* 0 = none */
    int interrupt_grace_ms;     /* after the interrupt, restart if not idle within (default 5000) */
    size_t max_output_bytes;    /* keep at most this much stream text, and as much rich output,
                                   besides the kernel's limits: the caller's own budget (an agent
                                   session's, which outlives kernel restarts). 0 = none */
} korch_exec_opts_t;

typedef struct {
    korch_exec_status_t status;
    int execution_count;        /* -1 when unknown */
    json_t *outputs;            /* nbformat outputs, borrowed from the exec */
    json_t *reply;              /* execute_reply content, borrowed (NULL if none came) */
    bool interrupted;           /* korch interrupted it (timeout) */
    bool restarted;             /* the kernel was restarted: its state is gone */
    size_t dropped_bytes;       /* stream text dropped by the memory limit */
    size_t dropped_rich;        /* rich outputs (images, HTML) dropped by their limits */
    size_t dropped_rich_bytes;  /* ... and their size as the kernel sent them */
    int64_t elapsed_ms;
    char detail[512];           /* for TIMEOUT / DIED: what happened, for a human */
} korch_exec_result_t;

typedef struct {
    /* An output arrived or changed (see korch_output_event_t); output borrowed. */
    void (*on_output)(korch_exec_t *ex, korch_output_event_t ev, json_t *output, size_t index, void *arg);
    /* The kernel asks for input; answer with korch_exec_input_reply (now or later). */
    void (*on_input)(korch_exec_t *ex, const char *prompt, bool password, void *arg);
    /* Finished. The last callback for ex; ex may be destroyed inside it. */
    void (*on_done)(korch_exec_t *ex, const korch_exec_result_t *result, void *arg);
    void *arg;
} korch_exec_cb_t;

/* A message's four JSON parts exactly as the kernel sent them: the bytes
   its signature covers (verified). */
typedef struct {
    zframe_t *frame[4];         /* header, parent_header, metadata, content; the callback
                                   may take one (and set it to NULL) to keep its bytes */
} korch_msg_raw_t;

/* Kernel-level events (state changes), for servers. */
typedef struct {
    void (*on_state)(korch_kernel_t *k, korch_kernel_state_t state, const char *detail, void *arg);
    /* Every accepted message from the kernel, before korch handles it. msg borrowed. */
    void (*on_message)(korch_kernel_t *k, korch_channel_t ch, const korch_msg_t *msg, void *arg);
    void *arg;
    /* Instead of on_message when set, for relays that forward messages
       without serializing them again: the same, plus the raw parts. Here
       msg->content is NULL for an IOPub message korch itself had no use for
       (not a status, not about a korch_exec): it was not parsed, so a
       kernel printing 20 MB at a time costs an HMAC per message, no more. */
    void (*on_raw_message)(korch_kernel_t *k, korch_channel_t ch, const korch_msg_t *msg, korch_msg_raw_t *raw,
                           void *arg);
} korch_kernel_cb_t;

/* Start (or attach to) a kernel on loop. Returns at once; the kernel is
   STARTING until ready. NULL + err when it cannot even be launched. */
korch_kernel_t *korch_kernel_new(korch_loop_t *loop, const korch_kernel_opts_t *opts, korch_err_t *err);

/* Shut down (if launched by korch), release everything; *k = NULL at once.
   Outside loop handlers it runs the loop until the kernel is gone (as
   korch_kernel_shutdown). From inside a handler it never runs the loop
   (korch_loop_run is not reentrant): the kernel detaches (no callback is
   called any more, pending executions end as "kernel was closed") and tears
   itself down on the loop (shutdown_request, grace, SIGTERM, SIGKILL, the
   container's removal), then frees itself; a borrowed launcher finishes
   that at korch_launcher_destroy if it is still under way. */
void korch_kernel_destroy(korch_kernel_t **k);

/* Run the loop until the kernel is ready. On failure err says why, with the
   kernel's own last words, e.g. "cannot start kernel 'python3':
   '/usr/bin/python3 -m ipykernel_launcher' exited 1: No module named
   ipykernel (install python3-ipykernel)". */
korch_rc_t korch_kernel_wait_ready(korch_kernel_t *k, korch_err_t *err);

void korch_kernel_set_callbacks(korch_kernel_t *k, const korch_kernel_cb_t *cb);

/* Send an execute_request. opts and cb may be NULL. The code is copied. */
korch_exec_t *korch_kernel_execute(korch_kernel_t *k, const char *code, const korch_exec_opts_t *opts,
                                   const korch_exec_cb_t *cb, korch_err_t *err);

/* Execute and run the loop until it is done. The result stays valid until
   the exec is destroyed. */
korch_exec_t *korch_kernel_execute_wait(korch_kernel_t *k, const char *code, const korch_exec_opts_t *opts,
                                        const korch_exec_cb_t *cb, korch_err_t *err);

/* Interrupt per the kernelspec: SIGINT to the process group, or
   interrupt_request on control (also for attached kernels). */
korch_rc_t korch_kernel_interrupt(korch_kernel_t *k, korch_err_t *err);

/* Restart as jupyter_client does (shutdown_request restart=true, grace,
   SIGTERM, SIGKILL, launch again on the same connection). Asynchronous;
   korch_kernel_wait_ready waits for it. Pending executions end as DIED. */
korch_rc_t korch_kernel_restart(korch_kernel_t *k, korch_err_t *err);

/* An attached kernel's owner (korch serve's kernel manager) says its
   process went at died_ms (korch_now_ms): it starts another on the same
   connection (restarted), or the kernel is dead for good. Restarted: what
   this side had read from the old process is handled first, then every
   execution sent at or before died_ms ends as DIED with result.restarted
   (it is lost; one sent later is queued for the new process and runs
   there). Dead: every pending execution ends and the kernel is DEAD. why
   is the owner's (e.g. "kernel died: exited 9"). Not for a kernel korch
   launched (it sees its own process go): nothing happens. */
void korch_kernel_gone(korch_kernel_t *k, bool restarted, int64_t died_ms, const char *why);
/* Shut the kernel down and run the loop until it is gone (killed when it
   does not go within its grace period): it is gone on return. */
void korch_kernel_shutdown(korch_kernel_t *k);

/* The same without waiting, for loop handlers: begins the shutdown
   (shutdown_request, grace, SIGTERM, SIGKILL) and returns at once; on_state
   reports KORCH_KERNEL_STOPPED once the kernel process is gone (then
   korch_kernel_destroy is immediate; a container is removed in the
   background). A kernel already stopped or dead: nothing happens. */
void korch_kernel_shutdown_begin(korch_kernel_t *k);

/* Send a message of ours on a channel (for relays). Consumes *msg. */
/* While the kernel is being re-adopted (opts.adopt, until it is first
   ready) messages are held (at most 256) and sent once it is ready, its
   IOPub live (it runs already: outputs published before korch's
   subscription lands would be lost); dropped if the adoption fails. */
korch_rc_t korch_kernel_send(korch_kernel_t *k, korch_channel_t ch, korch_msg_t **msg, korch_err_t *err);

korch_kernel_state_t korch_kernel_state(const korch_kernel_t *k);
const char *korch_kernel_state_name(korch_kernel_state_t s);
const char *korch_kernel_id(const korch_kernel_t *k);
const korch_conn_t *korch_kernel_conn(const korch_kernel_t *k);
/* The last kernel_info_reply content, borrowed; NULL before ready. */
json_t *korch_kernel_info(const korch_kernel_t *k);
/* NULL before its channels are open (a kernel being re-adopted). */
const korch_session_stats_t *korch_kernel_stats(const korch_kernel_t *k);
/* How long the last (re)start took to become ready, in ms. */
int64_t korch_kernel_ready_ms(const korch_kernel_t *k);
/* Times the kernel was restarted (on request or after a death). */
int korch_kernel_restarts(const korch_kernel_t *k);
/* Change opts.no_auto_restart: restart the kernel after a death, or not. */
void korch_kernel_set_auto_restart(korch_kernel_t *k, bool on);
korch_loop_t *korch_kernel_loop(korch_kernel_t *k);
/* The launched process (borrowed; changes on restart), NULL when attached. */
korch_proc_t *korch_kernel_proc(korch_kernel_t *k);

bool korch_exec_done(const korch_exec_t *ex);
const korch_exec_result_t *korch_exec_result(korch_exec_t *ex);
const char *korch_exec_msg_id(const korch_exec_t *ex);
/* Answer an input_request. */
korch_rc_t korch_exec_input_reply(korch_exec_t *ex, const char *value, korch_err_t *err);
/* Release; if it is still running it is detached (no more callbacks). */
void korch_exec_destroy(korch_exec_t **ex);
const char *korch_exec_status_name(korch_exec_status_t s);

#endif
