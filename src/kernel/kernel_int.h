/*  korch_kernel's parts (src/kernel/kernel*.c): private to them. One
 *  kernel object split by concern: kernel.c (the public API), kernel_exec.c,
 *  kernel_io.c, kernel_life.c. Everything runs on the kernel's loop thread.
 */
#ifndef KORCH_KERNEL_INT_H
#define KORCH_KERNEL_INT_H

#include "korch/kernel.h"
#include "korch/fsutil.h"
#include "korch/instance.h"
#include "korch/log.h"
#include "korch/path.h"
#include "korch/uuid.h"

#include <czmq.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>


typedef enum { STOP_NONE, STOP_SHUTDOWN, STOP_TERM, STOP_KILL } stop_phase_t;

struct korch_exec {
    korch_kernel_t *k;              /* NULL once detached */
    char msg_id[96];
    korch_msg_t *request;           /* until sent */
    korch_exec_opts_t opts;
    korch_exec_cb_t cb;
    bool sent, got_reply, got_idle, done, timed_out;
    korch_outputs_t *outputs;
    json_t *reply;
    json_t *input_parent;           /* header of the pending input_request */
    korch_exec_result_t result;
    int64_t t0;
    int timer;                      /* timeout, then interrupt grace; -1 none */
};

struct korch_kernel {
    korch_loop_t *loop;
    char id[37];
    korch_kernel_opts_t opts;
    korch_kernelspec_t *spec;       /* NULL when attached */
    korch_launcher_t *launcher;
    bool own_launcher;
    korch_proc_t *proc;             /* NULL when attached */
    char **env;                     /* copy of opts.env */
    size_t session_stream, session_rich; /* output bytes kept over the kernel's life */
    char *cwd;
    korch_conn_t conn;
    char runtime_dir[PATH_MAX];     /* "" when attached */
    korch_session_t *session;
    zsock_t *sock[KORCH_CH__COUNT];
    korch_kernel_state_t state;
    korch_kernel_cb_t cb;
    /* readiness */
    bool got_info, iopub_live, ever_ready;
    /* stdin's connection, seen through a socket monitor: an input_request to
       a DEALER whose connection is not up yet is dropped by the kernel's
       ROUTER, and the cell then waits for an answer forever */
    zsock_t *stdin_mon;
    bool stdin_up;
    int64_t start_began, last_info_sent, ready_ms, stdin_wait_began;
    int64_t last_heard;         /* korch_now_ms of the kernel's last message on shell or IOPub */
    int ready_timer;
    json_t *info;
    korch_err_t start_err;
    /* the launcher's pending start or adopt */
    korch_op_t *launch_op;
    bool launched;                  /* korch starts (or adopted) it: not attached with opts.existing */
    char kernel_session[80];        /* attached: the header.session its process signs with (kernel_io.c) */
    /* liveness */
    int hb_timer;
    bool hb_waiting;
    int hb_missed;
    /* stopping / restarting */
    stop_phase_t stop_phase;
    bool stop_restart;
    int stop_timer;
    char stop_reason[256];
    int restarts;
    bool detached;                  /* destroyed from a handler: tears down, then frees itself */
    void *deferred;                 /* korch_launcher_defer handle while detached (borrowed launcher) */
    int free_timer;
    /* executions */
    zlistx_t *pending;              /* korch_exec_t*, not owned */
    bool adopting;                  /* opts.adopt, until first ready */
    zlistx_t *held;                 /* kn_held_t* (owned): sent while being re-adopted; sent once it
                                       is ready, its IOPub live (NULL: none yet) */
};

#define HELD_MAX 256 /* messages held for a kernel being re-adopted */

typedef struct {
    korch_channel_t ch;
    korch_msg_t *msg;
} kn_held_t;

#define RESTART_BUSY_WAIT_MS 1000 /* see kn_stop_begin */
#define KN_KILL_WAIT_MS 10000      /* after SIGKILL, for the exit notification */

/* kernel.c: states */
void kn_set_state(korch_kernel_t *k, korch_kernel_state_t st, const char *detail);
/* The same, heard even when it is the state already: a kernel that dies
   while it restarts (before it was ready again) restarts once more, and
   on_state hears RESTARTING for each death. */
void kn_set_state_again(korch_kernel_t *k, korch_kernel_state_t st, const char *detail);

/* kernel_life.c: opts.owner_ended said so? Then the kernel is dead (true). */
bool kn_owner_ended(korch_kernel_t *k);

/* kernel_exec.c: executions */
void kn_exec_stop_timer(korch_exec_t *ex);
void kn_exec_maybe_done(korch_exec_t *ex);
korch_exec_t *kn_find_exec(korch_kernel_t *k, const char *msg_id);
void kn_fail_pending(korch_kernel_t *k, const char *detail, bool restarted);
/* End one execution as died (detail says why); ex may be freed. */
void kn_exec_fail(korch_exec_t *ex, const char *detail);
korch_rc_t kn_exec_send(korch_exec_t *ex, korch_err_t *err);
void kn_flush_unsent(korch_kernel_t *k);

/* kernel_io.c: messages, sockets, heartbeat */
void kn_send(korch_kernel_t *k, korch_channel_t ch, const char *type, json_t *content);
void kn_send_kernel_info(korch_kernel_t *k);
void kn_check_ready(korch_kernel_t *k);
void kn_drain(korch_kernel_t *k, korch_channel_t ch, int max, int budget_ms);
korch_rc_t kn_connect(korch_kernel_t *k, korch_channel_t ch, korch_err_t *err);
void kn_close(korch_kernel_t *k, korch_channel_t ch);
int kn_on_hb_timer(korch_loop_t *z, int timer_id, void *arg);

/* kernel_life.c: liveness, start and ready, death and stopping */
void kn_watch(korch_kernel_t *k);
void kn_unwatch(korch_kernel_t *k);
void kn_on_signal_done(korch_rc_t rc, const korch_err_t *err, void *arg);
void kn_kill(korch_kernel_t *k);
int kn_on_ready_timer(korch_loop_t *z, int timer_id, void *arg);
void kn_begin_ready(korch_kernel_t *k);
void kn_held_end(korch_kernel_t *k, bool send);
void kn_launch_failed(korch_kernel_t *k, korch_rc_t rc, const char *msg);
void kn_launch(korch_kernel_t *k);
void kn_stop_timers(korch_kernel_t *k);
void kn_on_death(korch_kernel_t *k, const char *why);
void kn_stop_begin(korch_kernel_t *k, bool restart, const char *reason);

#endif
