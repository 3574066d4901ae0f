/*  korch_kernel: the client side of one Jupyter kernel, on a korch_loop.
 *
 *  Channels (messaging spec "Introduction"): shell and control are DEALERs,
 *  stdin is a DEALER with the shell's identity (the kernel routes
 *  input_request to the socket whose identity equals the shell's), iopub is
 *  a SUB subscribed to everything, heartbeat is a REQ that is rebuilt after a
 *  missed beat (a REQ cannot send twice without a reply).
 *
 *  Ready: kernel_info_request is sent until its reply has arrived AND iopub
 *  has delivered something, which solves the slow-joiner problem the way
 *  jupyter_client's wait_for_ready does; protocol 5.5 kernels announce
 *  themselves with iopub_welcome, which counts as iopub being live.
 */
#include "korch/path.h"
#include "korch/kernel.h"
#include "korch/fsutil.h"
#include "korch/instance.h"
#include "korch/log.h"
#include "korch/uuid.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
    int ready_timer;
    json_t *info;
    korch_err_t start_err;
    /* the launcher's pending start or adopt */
    korch_op_t *launch_op;
    bool launched;                  /* korch starts (or adopted) it: not attached with opts.existing */
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
    zlistx_t *held;                 /* s_held_t* (owned): sent while being re-adopted; sent once it
                                       is ready, its IOPub live (NULL: none yet) */
};

#define HELD_MAX 256 /* messages held for a kernel being re-adopted */

typedef struct {
    korch_channel_t ch;
    korch_msg_t *msg;
} s_held_t;

#define RESTART_BUSY_WAIT_MS 1000 /* see s_stop_begin */
#define S_KILL_WAIT_MS 10000      /* after SIGKILL, for the exit notification */

static void s_launch(korch_kernel_t *k);
static void s_held_end(korch_kernel_t *k, bool send);
static void s_free(korch_kernel_t *k);
static void s_on_death(korch_kernel_t *k, const char *why);
static void s_stop_begin(korch_kernel_t *k, bool restart, const char *reason);

/* ------------------------------------------------------------------ names */

const char *korch_kernel_state_name(korch_kernel_state_t s)
{
    static const char *const names[] = {"starting", "idle", "busy", "restarting", "dead", "stopped"};
    return (unsigned)s <= KORCH_KERNEL_STOPPED ? names[s] : "unknown";
}

const char *korch_exec_status_name(korch_exec_status_t s)
{
    static const char *const names[] = {"pending", "ok", "error", "aborted", "timeout", "died"};
    return (unsigned)s <= KORCH_EXEC_DIED ? names[s] : "unknown";
}

/* A detached kernel whose teardown is over. */
static int s_on_free_timer(korch_loop_t *z, int timer_id, void *arg)
{
    korch_kernel_t *k = arg;
    k->free_timer = -1;
    s_free(k);
    return 0;
}

static void s_set_state(korch_kernel_t *k, korch_kernel_state_t st, const char *detail)
{
    if (k->state == st)
        return;
    k->state = st;
    korch_debug("kernel %.8s: %s%s%s", k->id, korch_kernel_state_name(st), detail ? ": " : "", detail ? detail : "");
    if (k->cb.on_state)
        k->cb.on_state(k, st, detail, k->cb.arg);
    korch_loop_break(k->loop);
    if (k->detached && k->free_timer < 0 && (st == KORCH_KERNEL_STOPPED || st == KORCH_KERNEL_DEAD))
        k->free_timer = korch_loop_timer(k->loop, 0, 1, s_on_free_timer, k);
}

/* ------------------------------------------------------------- executions */

static void s_exec_stop_timer(korch_exec_t *ex)
{
    if (ex->timer >= 0 && ex->k)
        korch_loop_timer_end(ex->k->loop, ex->timer);
    ex->timer = -1;
}

static void s_exec_complete(korch_exec_t *ex, korch_exec_status_t status, const char *detail)
{
    if (ex->done)
        return;
    korch_kernel_t *k = ex->k;
    s_exec_stop_timer(ex);
    ex->done = true;
    korch_outputs_finish(ex->outputs);
    korch_exec_result_t *r = &ex->result;
    r->status = status;
    r->outputs = korch_outputs_json(ex->outputs);
    r->reply = ex->reply;
    r->dropped_bytes = korch_outputs_dropped_bytes(ex->outputs);
    r->dropped_rich = korch_outputs_dropped_rich(ex->outputs);
    r->dropped_rich_bytes = korch_outputs_dropped_rich_bytes(ex->outputs);
    if (k) { /* what this kernel's session has kept so far (outputs.h budgets) */
        k->session_stream += korch_outputs_kept_stream_bytes(ex->outputs);
        k->session_rich += korch_outputs_kept_rich_bytes(ex->outputs);
        if (r->dropped_rich)
            korch_info("kernel %.8s: %zu rich output(s) dropped (%zu bytes): over korch's limits", k->id,
                       r->dropped_rich, r->dropped_rich_bytes);
    }
    r->elapsed_ms = korch_now_ms() - ex->t0;
    if (detail && !r->detail[0])
        snprintf(r->detail, sizeof r->detail, "%s", detail);
    if (k) {
        void *h = zlistx_find(k->pending, ex);
        if (h)
            zlistx_delete(k->pending, h);
        korch_loop_break(k->loop);
    }
    if (ex->cb.on_done)
        ex->cb.on_done(ex, r, ex->cb.arg); /* last touch: ex may be freed in there */
}

/* Complete ex if both halves of the execution have arrived. */
static void s_exec_maybe_done(korch_exec_t *ex)
{
    if (ex->done || !ex->got_reply || !ex->got_idle)
        return;
    const char *st = json_string_value(json_object_get(ex->reply, "status"));
    json_t *count = json_object_get(ex->reply, "execution_count");
    if (json_is_integer(count))
        ex->result.execution_count = (int)json_integer_value(count);
    korch_exec_status_t status = KORCH_EXEC_OK;
    if (ex->timed_out) {
        status = KORCH_EXEC_TIMEOUT;
        ex->result.interrupted = true;
        snprintf(ex->result.detail, sizeof ex->result.detail,
                 "timed out after %.1f s and was interrupted; the kernel's state is kept", ex->opts.timeout_ms / 1e3);
    } else if (st && strcmp(st, "error") == 0)
        status = KORCH_EXEC_ERROR;
    else if (st && strcmp(st, "aborted") == 0)
        status = KORCH_EXEC_ABORTED;
    s_exec_complete(ex, status, NULL);
}

static korch_exec_t *s_find_exec(korch_kernel_t *k, const char *msg_id)
{
    if (!msg_id || !*msg_id)
        return NULL;
    for (korch_exec_t *ex = zlistx_first(k->pending); ex; ex = zlistx_next(k->pending))
        if (strcmp(ex->msg_id, msg_id) == 0)
            return ex;
    return NULL;
}

/* End every pending execution, e.g. because the kernel died. When the
   kernel is restarted, requests not sent yet stay queued for the new one. */
static void s_fail_pending(korch_kernel_t *k, const char *detail, bool restarted)
{
    korch_exec_t *ex;
    for (;;) {
        for (ex = zlistx_first(k->pending); ex && restarted && !ex->sent; ex = zlistx_next(k->pending))
            ;
        if (!ex)
            break;
        ex->result.restarted = restarted;
        if (ex->timed_out) {
            ex->result.interrupted = true;
            snprintf(ex->result.detail, sizeof ex->result.detail,
                     "timed out after %.1f s; the interrupt did not stop it within %.1f s, so the kernel was "
                     "restarted (its variables are gone)",
                     ex->opts.timeout_ms / 1e3, ex->opts.interrupt_grace_ms / 1e3);
            s_exec_complete(ex, KORCH_EXEC_TIMEOUT, NULL);
        } else
            s_exec_complete(ex, KORCH_EXEC_DIED, detail);
    }
}

static int s_on_exec_grace(korch_loop_t *z, int timer_id, void *arg)
{
    korch_exec_t *ex = arg;
    korch_kernel_t *k = ex->k;
    ex->timer = -1;
    if (!k || ex->done)
        return 0;
    /* the execution's result says so (its caller tells the user) */
    korch_info("kernel %.8s: still busy %d ms after the interrupt; restarting it", k->id, ex->opts.interrupt_grace_ms);
    korch_err_t err = {0};
    if (korch_kernel_restart(k, &err) != KORCH_OK)
        s_fail_pending(k, err.msg, false);
    return korch_loop_rc(k->loop);
}

static int s_on_exec_timeout(korch_loop_t *z, int timer_id, void *arg)
{
    korch_exec_t *ex = arg;
    korch_kernel_t *k = ex->k;
    ex->timer = -1;
    if (!k || ex->done)
        return 0;
    ex->timed_out = true;
    korch_err_t err = {0};
    korch_info("kernel %.8s: execution timed out after %d ms; interrupting", k->id, ex->opts.timeout_ms);
    if (korch_kernel_interrupt(k, &err) != KORCH_OK)
        korch_warn("%s", err.msg);
    ex->timer = korch_loop_timer(k->loop, ex->opts.interrupt_grace_ms, 1, s_on_exec_grace, ex);
    return korch_loop_rc(k->loop);
}

static korch_rc_t s_exec_send(korch_exec_t *ex, korch_err_t *err)
{
    korch_kernel_t *k = ex->k;
    korch_rc_t rc = korch_session_send(k->session, k->sock[KORCH_CH_SHELL], &ex->request, err);
    if (rc)
        return rc;
    ex->sent = true;
    ex->t0 = korch_now_ms();
    if (ex->opts.timeout_ms > 0)
        ex->timer = korch_loop_timer(k->loop, ex->opts.timeout_ms, 1, s_on_exec_timeout, ex);
    return KORCH_OK;
}

static void s_flush_unsent(korch_kernel_t *k)
{
    for (korch_exec_t *ex = zlistx_first(k->pending); ex; ex = zlistx_next(k->pending)) {
        if (ex->sent)
            continue;
        korch_err_t err = {0};
        if (s_exec_send(ex, &err) != KORCH_OK) {
            s_exec_complete(ex, KORCH_EXEC_DIED, err.msg);
            return; /* the list changed under us; the rest waits for the next ready */
        }
    }
}

/* --------------------------------------------------------------- messages */

static void s_send(korch_kernel_t *k, korch_channel_t ch, const char *type, json_t *content)
{
    if (!k->session || !k->sock[ch]) { /* channels not open yet (adopting) */
        json_decref(content);
        return;
    }
    korch_msg_t *msg = korch_msg_new(type, content);
    korch_err_t err = {0};
    if (msg && korch_session_send(k->session, k->sock[ch], &msg, &err) != KORCH_OK)
        korch_warn("kernel %.8s: %s", k->id, err.msg);
}

static void s_send_kernel_info(korch_kernel_t *k)
{
    s_send(k, KORCH_CH_SHELL, "kernel_info_request", NULL);
    k->last_info_sent = korch_now_ms();
}

/* How long readiness waits for stdin's connection once shell and iopub are
   live; a kernel that never accepts one is declared ready without it. */
#define STDIN_WAIT_MS 3000

static void s_check_ready(korch_kernel_t *k)
{
    if ((k->state != KORCH_KERNEL_STARTING && k->state != KORCH_KERNEL_RESTARTING) || !k->got_info ||
        !k->iopub_live || k->stop_phase != STOP_NONE)
        return;
    if (!k->stdin_up) {
        int64_t now = korch_now_ms();
        if (!k->stdin_wait_began)
            k->stdin_wait_began = now;
        if (now - k->stdin_wait_began < STDIN_WAIT_MS)
            return; /* the ready timer or the monitor calls again */
        korch_debug("kernel %.8s: its stdin connection is not up after %d ms; ready without it", k->id,
                    STDIN_WAIT_MS);
    }
    if (k->ready_timer >= 0)
        korch_loop_timer_end(k->loop, k->ready_timer);
    k->ready_timer = -1;
    k->ready_ms = korch_now_ms() - k->start_began;
    k->ever_ready = true;
    korch_debug("kernel %.8s: ready in %lld ms", k->id, (long long)k->ready_ms);
    s_set_state(k, KORCH_KERNEL_IDLE, NULL);
    s_flush_unsent(k);
    if (k->adopting) {
        /* now, not when the channels opened: the kernel runs already, and
           what it published before our subscription landed would be lost */
        k->adopting = false;
        s_held_end(k, true);
    }
}

static void s_on_iopub(korch_kernel_t *k, korch_msg_t *msg)
{
    const char *type = korch_msg_type(msg);
    if (!k->iopub_live) {
        k->iopub_live = true;
        s_check_ready(k);
    }
    korch_exec_t *ex = s_find_exec(k, korch_msg_parent_id(msg));
    if (strcmp(type, "status") == 0) {
        const char *st = json_string_value(json_object_get(msg->content, "execution_state"));
        if (!st)
            return;
        if (k->state == KORCH_KERNEL_IDLE || k->state == KORCH_KERNEL_BUSY) {
            if (strcmp(st, "busy") == 0)
                s_set_state(k, KORCH_KERNEL_BUSY, NULL);
            else if (strcmp(st, "idle") == 0)
                s_set_state(k, KORCH_KERNEL_IDLE, NULL);
        }
        if (ex && strcmp(st, "idle") == 0) {
            ex->got_idle = true;
            s_exec_maybe_done(ex);
        }
        return;
    }
    if (!ex)
        return;
    if (strcmp(type, "execute_input") == 0) {
        json_t *c = json_object_get(msg->content, "execution_count");
        if (json_is_integer(c))
            ex->result.execution_count = (int)json_integer_value(c);
        return;
    }
    json_t *out = NULL;
    size_t index = 0;
    korch_output_event_t ev = korch_outputs_apply(ex->outputs, type, msg->content, &out, &index);
    if (ev != KORCH_OUTPUT_NONE && ex->cb.on_output)
        ex->cb.on_output(ex, ev, out, index, ex->cb.arg);
}

static void s_on_shell(korch_kernel_t *k, korch_msg_t *msg)
{
    const char *type = korch_msg_type(msg);
    if (strcmp(type, "kernel_info_reply") == 0) {
        json_decref(k->info);
        k->info = json_incref(msg->content);
        if (!k->got_info) {
            k->got_info = true;
            s_check_ready(k);
        }
        return;
    }
    korch_exec_t *ex = s_find_exec(k, korch_msg_parent_id(msg));
    if (ex && strcmp(type, "execute_reply") == 0) {
        json_decref(ex->reply);
        ex->reply = json_incref(msg->content);
        ex->got_reply = true;
        s_exec_maybe_done(ex);
    }
}

static void s_on_stdin(korch_kernel_t *k, korch_msg_t *msg)
{
    if (strcmp(korch_msg_type(msg), "input_request") != 0)
        return;
    korch_exec_t *ex = s_find_exec(k, korch_msg_parent_id(msg));
    if (!ex && k->opts.relay_stdin)
        return; /* someone else's request: the relay answers */
    if (!ex) {
        korch_warn("kernel %.8s: input_request for a request korch does not know; answering empty", k->id);
        korch_msg_t *reply = korch_msg_new_reply(msg, "input_reply", json_pack("{s:s}", "value", ""));
        if (reply)
            korch_session_send(k->session, k->sock[KORCH_CH_STDIN], &reply, NULL);
        return;
    }
    json_decref(ex->input_parent);
    ex->input_parent = json_deep_copy(msg->header);
    const char *prompt = json_string_value(json_object_get(msg->content, "prompt"));
    bool password = json_is_true(json_object_get(msg->content, "password"));
    if (ex->cb.on_input)
        ex->cb.on_input(ex, prompt ? prompt : "", password, ex->cb.arg);
    else
        korch_exec_input_reply(ex, "", NULL);
}

static void s_dispatch(korch_kernel_t *k, korch_channel_t ch, korch_msg_t *msg, korch_msg_raw_t *raw)
{
    if (k->cb.on_raw_message && raw)
        k->cb.on_raw_message(k, ch, msg, raw, k->cb.arg);
    else if (k->cb.on_message)
        k->cb.on_message(k, ch, msg, k->cb.arg);
    switch (ch) {
    case KORCH_CH_IOPUB: s_on_iopub(k, msg); break;
    case KORCH_CH_SHELL: s_on_shell(k, msg); break;
    case KORCH_CH_STDIN: s_on_stdin(k, msg); break;
    case KORCH_CH_CONTROL:
        if (strcmp(korch_msg_type(msg), "shutdown_reply") == 0 && k->stop_phase != STOP_NONE && !k->proc) {
            /* An attached kernel acknowledged; there is no process to wait for. */
            s_on_death(k, "shut down");
        }
        break;
    default: break;
    }
}

/* Will korch itself read this IOPub message's content (a relay gets the raw
   bytes anyway)? Status messages and what belongs to its executions. */
static bool s_want_content(const korch_msg_t *msg, void *arg)
{
    korch_kernel_t *k = arg;
    return strcmp(korch_msg_type(msg), "status") == 0 || s_find_exec(k, korch_msg_parent_id(msg)) != NULL;
}

/* Read and handle what one socket has: at most max messages and, with
   budget_ms >= 0, no new one once budget_ms have passed (one always), so a
   kernel flooding IOPub with 20 MB stream messages cannot starve the other
   kernels and clients on the loop: each gets its turn every round. */
static void s_drain(korch_kernel_t *k, korch_channel_t ch, int max, int budget_ms)
{
    int64_t t0 = budget_ms >= 0 ? korch_now_ms() : 0;
    for (int i = 0; i < max && k->sock[ch]; i++) {
        if (i && budget_ms >= 0 && korch_now_ms() - t0 >= budget_ms)
            break;
        if (!(zsock_events(k->sock[ch]) & ZMQ_POLLIN))
            break;
        zmsg_t *frames = zmsg_recv(k->sock[ch]);
        if (!frames)
            break;
        korch_msg_t *msg = NULL;
        korch_err_t err = {0};
        korch_msg_raw_t raw = {{0}};
        bool want_raw = k->cb.on_raw_message != NULL;
        if (korch_session_deserialize_raw(k->session, &frames, &msg, want_raw ? raw.frame : NULL,
                                          ch == KORCH_CH_IOPUB ? s_want_content : NULL, k, NULL,
                                          &err) != KORCH_OK) {
            korch_info("kernel %.8s: %s channel: %s", k->id, korch_channel_name(ch), err.msg);
            continue;
        }
        s_dispatch(k, ch, msg, want_raw ? &raw : NULL);
        korch_msg_destroy(&msg);
        for (int p = 0; p < 4; p++)
            zframe_destroy(&raw.frame[p]);
    }
}

/* Per socket and round: plenty for small messages, and a few huge ones. */
#define DRAIN_MAX 64
#define DRAIN_BUDGET_MS 10

static int s_on_readable(korch_loop_t *z, zsock_t *sock, void *arg)
{
    korch_kernel_t *k = arg;
    for (int ch = 0; ch < KORCH_CH_HB; ch++)
        if (k->sock[ch] == sock) {
            s_drain(k, (korch_channel_t)ch, DRAIN_MAX, DRAIN_BUDGET_MS);
            break;
        }
    return korch_loop_rc(k->loop);
}

/* ---------------------------------------------------------------- sockets */

/* The monitor's events: frame 1 = u16 event + u32 value, frame 2 = endpoint. */
static int s_on_stdin_monitor(korch_loop_t *z, zsock_t *sock, void *arg)
{
    korch_kernel_t *k = arg;
    zmsg_t *m;
    while ((m = zmsg_recv(sock)) != NULL) {
        zframe_t *f = zmsg_first(m);
        if (f && zframe_size(f) >= 2) {
            uint16_t ev;
            memcpy(&ev, zframe_data(f), sizeof ev);
            if (ev == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
                k->stdin_up = true;
                s_check_ready(k);
            } else if (ev == ZMQ_EVENT_DISCONNECTED)
                k->stdin_up = false;
        }
        zmsg_destroy(&m);
    }
    return korch_loop_rc(k->loop);
}

static void s_monitor_stdin(korch_kernel_t *k, zsock_t *s)
{
    char ep[64];
    snprintf(ep, sizeof ep, "inproc://korch-stdin-%p", (void *)s);
    k->stdin_up = false;
    if (zmq_socket_monitor(zsock_resolve(s), ep, ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_DISCONNECTED) == 0) {
        k->stdin_mon = zsock_new(ZMQ_PAIR);
        if (k->stdin_mon && zsock_connect(k->stdin_mon, "%s", ep) == 0) {
            zsock_set_rcvtimeo(k->stdin_mon, 0);
            korch_loop_reader(k->loop, k->stdin_mon, s_on_stdin_monitor, k);
            return;
        }
        zsock_destroy(&k->stdin_mon);
        zmq_socket_monitor(zsock_resolve(s), NULL, 0);
    }
    korch_debug("kernel %.8s: cannot watch its stdin connection (%s); not waiting for it", k->id,
                zmq_strerror(zmq_errno()));
    k->stdin_up = true;
}

static void s_unmonitor_stdin(korch_kernel_t *k, zsock_t *s)
{
    if (!k->stdin_mon)
        return;
    zmq_socket_monitor(zsock_resolve(s), NULL, 0);
    korch_loop_reader_end(k->loop, k->stdin_mon);
    zsock_destroy(&k->stdin_mon);
}

static korch_rc_t s_connect(korch_kernel_t *k, korch_channel_t ch, korch_err_t *err)
{
    static const int types[KORCH_CH__COUNT] = {ZMQ_DEALER, ZMQ_SUB, ZMQ_DEALER, ZMQ_DEALER, ZMQ_REQ};
    char ep[PATH_MAX + 32];
    korch_conn_endpoint(&k->conn, ch, ep, sizeof ep);
    zsock_t *s = zsock_new(types[ch]);
    if (!s)
        return korch_err_set(err, KORCH_E_IO, "cannot create a zeromq socket: %s", zmq_strerror(zmq_errno()));
    zsock_set_linger(s, 0);
    zsock_set_rcvtimeo(s, 0);
    zsock_set_maxmsgsize(s, (int64_t)1 << 30);
    /* The kernel binds after we connect: retry quickly (libzmq's default is 100 ms). */
    zsock_set_reconnect_ivl(s, 20);
    if (ch == KORCH_CH_SHELL || ch == KORCH_CH_STDIN)
        zsock_set_identity(s, korch_session_id(k->session));
    if (ch == KORCH_CH_IOPUB)
        zsock_set_subscribe(s, "");
    if (ch == KORCH_CH_STDIN)
        s_monitor_stdin(k, s);
    if (zsock_connect(s, "%s", ep) != 0) {
        s_unmonitor_stdin(k, s);
        zsock_destroy(&s);
        return korch_err_set(err, KORCH_E_IO, "cannot connect to '%s': %s", ep, zmq_strerror(zmq_errno()));
    }
    k->sock[ch] = s;
    if (ch != KORCH_CH_HB) {
        korch_loop_reader(k->loop, s, s_on_readable, k);
    }
    return KORCH_OK;
}

static void s_close(korch_kernel_t *k, korch_channel_t ch)
{
    if (!k->sock[ch])
        return;
    if (ch == KORCH_CH_STDIN)
        s_unmonitor_stdin(k, k->sock[ch]);
    korch_loop_reader_end(k->loop, k->sock[ch]);
    zsock_destroy(&k->sock[ch]);
}

/* -------------------------------------------------------------- heartbeat */

static int s_on_hb_reply(korch_loop_t *z, zsock_t *sock, void *arg)
{
    korch_kernel_t *k = arg;
    zmsg_t *m = zmsg_recv(sock);
    zmsg_destroy(&m);
    k->hb_waiting = false;
    k->hb_missed = 0;
    return korch_loop_rc(k->loop);
}

static int s_on_hb_timer(korch_loop_t *z, int timer_id, void *arg)
{
    korch_kernel_t *k = arg;
    if (k->state == KORCH_KERNEL_DEAD || k->state == KORCH_KERNEL_STOPPED)
        return 0;
    if (k->hb_waiting) {
        k->hb_missed++;
        /* A REQ that got no reply cannot send again: rebuild it. */
        s_close(k, KORCH_CH_HB);
        if (k->hb_missed >= k->opts.hb_max_missed) {
            char why[128];
            snprintf(why, sizeof why, "heartbeat lost (%d beats of %d ms unanswered)", k->hb_missed,
                     k->opts.hb_interval_ms);
            s_on_death(k, why);
            return korch_loop_rc(k->loop);
        }
    }
    if (!k->sock[KORCH_CH_HB]) {
        if (s_connect(k, KORCH_CH_HB, NULL) != KORCH_OK)
            return 0;
        korch_loop_reader(k->loop, k->sock[KORCH_CH_HB], s_on_hb_reply, k);
    }
    zstr_send(k->sock[KORCH_CH_HB], "ping");
    k->hb_waiting = true;
    return korch_loop_rc(k->loop);
}

/* --------------------------------------------------------------- liveness */

static void s_on_proc_exit(korch_proc_t *proc, const char *why, void *arg)
{
    korch_kernel_t *k = arg;
    if (proc == k->proc)
        s_on_death(k, why);
}

static void s_watch(korch_kernel_t *k) { korch_proc_on_exit(k->proc, s_on_proc_exit, k); }

static void s_unwatch(korch_kernel_t *k)
{
    if (k->proc)
        korch_proc_on_exit(k->proc, NULL, NULL);
}

/* Signals and kills whose outcome only matters to the log. */
static void s_on_signal_done(korch_rc_t rc, const korch_err_t *err, void *arg)
{
    if (rc)
        korch_debug("kernel signal: %s", err ? err->msg : korch_strerror(rc));
}

static void s_signal(korch_kernel_t *k, int sig)
{
    korch_err_t err = {0};
    if (k->proc && !korch_proc_signal(k->proc, sig, s_on_signal_done, NULL, &err))
        korch_debug("kernel %.8s: signal %d: %s", k->id, sig, err.msg);
}

static void s_kill(korch_kernel_t *k)
{
    korch_err_t err = {0};
    if (k->proc && !korch_proc_kill(k->proc, s_on_signal_done, NULL, &err))
        korch_warn("kernel %.8s: cannot kill it: %s", k->id, err.msg);
}

/* ------------------------------------------------------------- start, ready */

/* "cannot start kernel 'python3': '/usr/bin/python3 -m ipykernel_launcher'
   exited 1: No module named ipykernel (install python3-ipykernel)" */
static void s_start_failed(korch_kernel_t *k, const char *why)
{
    char cmd[256] = "";
    if (k->spec)
        for (int i = 0; i < 3 && k->spec->argv[i]; i++) {
            if (strcmp(k->spec->argv[i], "-f") == 0)
                break;
            size_t n = strlen(cmd);
            snprintf(cmd + n, sizeof cmd - n, "%s%s", i ? " " : "", k->spec->argv[i]);
        }
    char last[512] = "";
    const char *tail = k->proc ? korch_proc_log_tail(k->proc) : "";
    /* The last non-empty line says most (Python's exception line). */
    const char *end = tail + strlen(tail);
    while (end > tail && (end[-1] == '\n' || end[-1] == '\r' || end[-1] == ' '))
        end--;
    const char *start = end;
    while (start > tail && start[-1] != '\n')
        start--;
    snprintf(last, sizeof last, "%.*s", (int)(end - start), start);
    const char *hint = "";
    char hintbuf[160] = "";
    const char *mod = strstr(last, "No module named ");
    if (mod) {
        char name[64] = "";
        if (sscanf(mod + 16, " '%63[A-Za-z0-9_]", name) != 1)
            sscanf(mod + 16, "%63[A-Za-z0-9_]", name);
        if (name[0]) {
            snprintf(hintbuf, sizeof hintbuf, " (install python3-%s)", name);
            for (char *p = hintbuf; *p; p++)
                if (*p == '_')
                    *p = '-';
            hint = hintbuf;
        }
    }
    korch_err_set(&k->start_err, KORCH_E_LAUNCH, "cannot start kernel '%s': '%s' %s%s%s%s",
                  k->spec ? k->spec->name : "?", cmd, why, last[0] ? ": " : "", last, hint);
}

static int s_on_ready_timer(korch_loop_t *z, int timer_id, void *arg)
{
    korch_kernel_t *k = arg;
    int64_t now = korch_now_ms();
    if (now - k->start_began > k->opts.start_timeout_ms) {
        k->ready_timer = -1;
        korch_loop_timer_end(z, timer_id);
        char why[128];
        snprintf(why, sizeof why, "did not become ready within %d s", k->opts.start_timeout_ms / 1000);
        if (k->proc) {
            s_start_failed(k, why);
            s_kill(k);
        } else if (k->launch_op) {
            korch_op_cancel(&k->launch_op);
            korch_err_set(&k->start_err, KORCH_E_TIMEOUT, "cannot start kernel '%s': the launcher did not start it within %d s",
                          k->spec ? k->spec->name : "?", k->opts.start_timeout_ms / 1000);
        } else
            korch_err_set(&k->start_err, KORCH_E_TIMEOUT, "kernel at '%s' did not answer within %d s", k->conn.ip,
                          k->opts.start_timeout_ms / 1000);
        s_unwatch(k);
        s_fail_pending(k, k->start_err.msg, false);
        s_set_state(k, KORCH_KERNEL_DEAD, k->start_err.msg);
        return korch_loop_rc(k->loop);
    }
    if (!k->session)
        return korch_loop_rc(k->loop); /* adopting: the channels open with the proc */
    /* No reply yet: ask again each second (the first may predate the
       kernel's sockets). Replied but iopub silent: each request makes the
       kernel publish busy/idle, so ask until the subscription catches one. */
    if (!k->got_info ? now - k->last_info_sent >= 1000 : !k->iopub_live)
        s_send_kernel_info(k);
    else if (k->iopub_live && !k->stdin_up)
        s_check_ready(k);
    return korch_loop_rc(k->loop);
}

static void s_begin_ready(korch_kernel_t *k)
{
    k->got_info = false;
    k->iopub_live = false;
    k->stdin_wait_began = 0;
    k->start_began = korch_now_ms();
    s_send_kernel_info(k);
    if (k->ready_timer >= 0)
        korch_loop_timer_end(k->loop, k->ready_timer);
    k->ready_timer = korch_loop_timer(k->loop, 50, 0, s_on_ready_timer, k);
}

/* A backend that learns where the kernel is only once it runs (swarm: its
   task's address) gives a conn other than the request's: the channels move
   there (zeromq drops what was queued for the old endpoint; the ready timer
   asks again). */
static void s_follow_conn(korch_kernel_t *k, const korch_conn_t *to)
{
    if (!strcmp(to->ip, k->conn.ip) && !strcmp(to->transport, k->conn.transport) &&
        !memcmp(to->port, k->conn.port, sizeof to->port))
        return;
    for (int ch = 0; ch < KORCH_CH__COUNT; ch++) {
        char old[PATH_MAX + 32], ep[PATH_MAX + 32];
        korch_conn_endpoint(&k->conn, (korch_channel_t)ch, old, sizeof old);
        korch_conn_endpoint(to, (korch_channel_t)ch, ep, sizeof ep);
        if (k->sock[ch] && (zsock_disconnect(k->sock[ch], "%s", old) != 0 || zsock_connect(k->sock[ch], "%s", ep) != 0))
            korch_warn("kernel %.8s: cannot move the %s channel to '%s': %s", k->id,
                       korch_channel_name((korch_channel_t)ch), ep, zmq_strerror(zmq_errno()));
    }
    snprintf(k->conn.transport, sizeof k->conn.transport, "%s", to->transport);
    snprintf(k->conn.ip, sizeof k->conn.ip, "%s", to->ip);
    memcpy(k->conn.port, to->port, sizeof k->conn.port);
}

/* The launcher could not start (or re-attach to) the kernel: it is dead, and
   why goes to start_err, the pending executions and the state listeners. */
/* Send (flush) or drop what was held while the kernel was being re-adopted. */
static void s_held_end(korch_kernel_t *k, bool send)
{
    s_held_t *h;
    while (k->held && (h = zlistx_first(k->held))) {
        zlistx_delete(k->held, zlistx_cursor(k->held));
        korch_err_t err = {0};
        if (send && korch_session_send(k->session, k->sock[h->ch], &h->msg, &err) != KORCH_OK)
            korch_warn("kernel %.8s: a message held while it was re-adopted: %s", k->id, err.msg);
        korch_msg_destroy(&h->msg);
        free(h);
    }
    zlistx_destroy(&k->held);
}

static void s_launch_failed(korch_kernel_t *k, korch_rc_t rc, const char *msg)
{
    k->adopting = false;
    s_held_end(k, false);
    korch_err_set(&k->start_err, rc, "%s", msg);
    if (k->ready_timer >= 0)
        korch_loop_timer_end(k->loop, k->ready_timer);
    k->ready_timer = -1;
    s_fail_pending(k, msg, false);
    s_set_state(k, KORCH_KERNEL_DEAD, msg);
}

static void s_on_started(korch_proc_t *proc, korch_rc_t rc, const korch_err_t *err, void *arg)
{
    korch_kernel_t *k = arg;
    k->launch_op = NULL;
    if (rc) {
        s_launch_failed(k, rc, err ? err->msg : korch_strerror(rc));
        return;
    }
    k->proc = proc;
    s_follow_conn(k, korch_proc_conn(proc));
    s_watch(k);
}

static void s_launch(korch_kernel_t *k)
{
    korch_launch_t req = {
        .spec = k->spec,
        .conn = &k->conn,
        .runtime_dir = k->runtime_dir,
        .cwd = k->cwd,
        .env = (const char *const *)k->env,
        .kernel_id = k->id,
    };
    korch_err_t err = {0};
    s_unwatch(k);
    korch_proc_destroy(&k->proc);
    korch_op_cancel(&k->launch_op);
    k->launch_op = korch_launcher_start(k->launcher, &req, s_on_started, k, &err);
    if (!k->launch_op) {
        korch_err_set(&k->start_err, err.rc, "%s", err.msg);
        s_fail_pending(k, err.msg, false);
        s_set_state(k, KORCH_KERNEL_DEAD, err.msg);
        return;
    }
    /* kernel_info goes out now: zeromq keeps it until the kernel binds */
    s_begin_ready(k);
}

/* ------------------------------------------------------- death and stopping */

static void s_stop_timers(korch_kernel_t *k)
{
    if (k->stop_timer >= 0)
        korch_loop_timer_end(k->loop, k->stop_timer);
    k->stop_timer = -1;
}

static void s_on_death(korch_kernel_t *k, const char *why)
{
    if (k->state == KORCH_KERNEL_DEAD || k->state == KORCH_KERNEL_STOPPED)
        return;
    s_unwatch(k);
    if (k->ready_timer >= 0)
        korch_loop_timer_end(k->loop, k->ready_timer);
    k->ready_timer = -1;
    /* Whatever the kernel said before it went belongs to its executions. */
    for (int ch = 0; ch < KORCH_CH_HB; ch++)
        s_drain(k, (korch_channel_t)ch, 100000, -1);

    if (k->stop_phase != STOP_NONE) {
        bool restart = k->stop_restart;
        s_stop_timers(k);
        k->stop_phase = STOP_NONE;
        s_fail_pending(k, k->stop_reason, restart);
        if (restart && k->launched) {
            k->restarts++;
            s_set_state(k, KORCH_KERNEL_RESTARTING, k->stop_reason);
            s_launch(k);
        } else
            s_set_state(k, KORCH_KERNEL_STOPPED, k->stop_reason);
        return;
    }
    if (!k->ever_ready && k->launched) {
        s_start_failed(k, why);
        s_fail_pending(k, k->start_err.msg, false);
        s_set_state(k, KORCH_KERNEL_DEAD, k->start_err.msg);
        return;
    }
    char detail[512];
    snprintf(detail, sizeof detail, "kernel died: %s", why);
    /* an execution that was running hears of it (its caller tells the
       user); a death nobody hears of is worth a warning */
    if (zlistx_size(k->pending))
        korch_info("kernel %.8s: %s", k->id, detail);
    else
        korch_warn("kernel %.8s: %s", k->id, detail);
    bool restart = k->launched && !k->opts.no_auto_restart;
    s_fail_pending(k, detail, restart);
    if (restart) {
        k->restarts++;
        s_set_state(k, KORCH_KERNEL_RESTARTING, detail);
        s_launch(k);
    } else {
        korch_err_set(&k->start_err, KORCH_E_DIED, "%s", detail);
        s_set_state(k, KORCH_KERNEL_DEAD, detail);
    }
}

static int s_on_stop_timer(korch_loop_t *z, int timer_id, void *arg)
{
    korch_kernel_t *k = arg;
    k->stop_timer = -1;
    int half = k->opts.shutdown_grace_ms / 2;
    if (!k->proc) {
        s_on_death(k, k->launched ? "shut down (before it ran)" : "shut down (no reply)");
        return korch_loop_rc(k->loop);
    }
    if (k->stop_phase == STOP_SHUTDOWN) {
        k->stop_phase = STOP_TERM;
        korch_debug("kernel %.8s: no exit after shutdown_request; SIGTERM", k->id);
        s_signal(k, SIGTERM);
        k->stop_timer = korch_loop_timer(z, half, 1, s_on_stop_timer, k);
    } else if (k->stop_phase == STOP_TERM) {
        k->stop_phase = STOP_KILL;
        korch_debug("kernel %.8s: still there after SIGTERM; SIGKILL", k->id);
        s_kill(k);
        /* the end comes through the exit notification; if even that fails
           (the engine is gone), give up on it after a while */
        k->stop_timer = korch_loop_timer(z, S_KILL_WAIT_MS, 1, s_on_stop_timer, k);
    } else {
        korch_warn("kernel %.8s: no end seen %d s after SIGKILL", k->id, S_KILL_WAIT_MS / 1000);
        s_on_death(k, "killed");
    }
    return korch_loop_rc(k->loop);
}

static void s_stop_begin(korch_kernel_t *k, bool restart, const char *reason)
{
    if (k->stop_phase != STOP_NONE)
        return;
    snprintf(k->stop_reason, sizeof k->stop_reason, "%s", reason);
    k->stop_restart = restart;
    k->stop_phase = STOP_SHUTDOWN;
    /* A busy kernel is interrupted first, as jupyter_client's
       shutdown_kernel does: ipykernel handles shutdown_request on its
       control thread but only exits once the shell's cell is over, so a
       running cell held a restart until the SIGTERM (half the grace). */
    bool busy = k->state == KORCH_KERNEL_BUSY;
    if (busy) {
        korch_err_t ierr = {0};
        if (korch_kernel_interrupt(k, &ierr) != KORCH_OK)
            korch_debug("kernel %.8s: interrupt before shutdown failed: %s", k->id, ierr.msg);
    }
    if (restart) /* new executions queue for the new kernel from now on */
        s_set_state(k, KORCH_KERNEL_RESTARTING, reason);
    s_send(k, KORCH_CH_CONTROL, "shutdown_request", json_pack("{s:b}", "restart", restart));
    /* A busy kernel that a restart interrupted and asked to go but that is
       still there after a second ignores both (a cell swallowing the
       KeyboardInterrupt, a C call that never returns): its state is being
       thrown away, so the SIGTERM comes sooner than half the grace. */
    int wait = k->opts.shutdown_grace_ms / 2;
    if (restart && busy && wait > RESTART_BUSY_WAIT_MS)
        wait = RESTART_BUSY_WAIT_MS;
    k->stop_timer = korch_loop_timer(k->loop, wait, 1, s_on_stop_timer, k);
    if (k->proc && korch_proc_exited(k->proc))
        s_on_death(k, korch_proc_exit_why(k->proc));
}

/* ------------------------------------------------------------ public API */

static char **s_copy_strv(const char *const *v)
{
    size_t n = 0;
    if (v)
        while (v[n])
            n++;
    char **out = calloc(n + 1, sizeof *out);
    for (size_t i = 0; out && i < n; i++)
        out[i] = strdup(v[i]);
    return out;
}

static korch_rc_t s_make_runtime_dir(korch_kernel_t *k, korch_err_t *err)
{
    char base[PATH_MAX];
    korch_rc_t rc = korch_runtime_base(base, sizeof base, err);
    if (rc)
        return rc;
    /* Short names: unix socket paths are limited to 107 bytes. */
    if ((rc = korch_path_fmt(k->runtime_dir, sizeof k->runtime_dir, err, "%s/%.12s", base, k->id)))
        return rc;
    if (mkdir(k->runtime_dir, 0700) != 0)
        return korch_err_set(err, KORCH_E_IO, "cannot create runtime dir '%s': %s", k->runtime_dir, strerror(errno));
    return KORCH_OK;
}

/* The session (the key) and the channels, once the connection is known. */
static korch_rc_t s_open(korch_kernel_t *k, korch_err_t *err)
{
    /* The wire layer leaves out what outputs.c would drop anyway. */
    korch_session_limits_t lim = {.max_stream_text = k->opts.max_stream_bytes,
                                  .max_rich_content = k->opts.max_rich_bytes};
    korch_err_t e = {0};
    k->session = korch_session_new(k->conn.key, strlen(k->conn.key), NULL, &lim, &e);
    if (!k->session)
        return korch_err_set(err, e.rc, "cannot create a session: %s", e.msg);
    for (int ch = 0; ch < KORCH_CH_HB; ch++)
        if (s_connect(k, (korch_channel_t)ch, err) != KORCH_OK)
            return err ? err->rc : KORCH_E_IO;
    return KORCH_OK;
}

/* Someone's running kernel, state and all: watch it and handshake. */
static void s_on_adopted(korch_proc_t *proc, korch_rc_t rc, const korch_err_t *err, void *arg)
{
    korch_kernel_t *k = arg;
    korch_err_t e = {0};
    k->launch_op = NULL;
    if (rc == KORCH_OK) {
        k->proc = proc;
        k->conn = *korch_proc_conn(proc);
        snprintf(k->runtime_dir, sizeof k->runtime_dir, "%s", korch_proc_runtime_dir(proc));
        rc = s_open(k, &e);
        err = &e;
    }
    if (rc) {
        s_launch_failed(k, rc, err && err->rc ? err->msg : korch_strerror(rc));
        return;
    }
    s_watch(k);
    s_begin_ready(k);
}

korch_kernel_t *korch_kernel_new(korch_loop_t *loop, const korch_kernel_opts_t *opts, korch_err_t *err)
{
    korch_kernel_t *k = calloc(1, sizeof *k);
    if (!k) {
        korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        return NULL;
    }
    korch_kernel_opts_t o = opts ? *opts : (korch_kernel_opts_t){0};
    if (!o.kernelspec)
        o.kernelspec = "python3";
    if (o.start_timeout_ms <= 0)
        o.start_timeout_ms = 60000;
    if (o.shutdown_grace_ms <= 0)
        o.shutdown_grace_ms = 4000;
    if (o.hb_interval_ms <= 0)
        o.hb_interval_ms = 500;
    if (o.hb_max_missed <= 0)
        o.hb_max_missed = 3;
    if (!o.max_rich_bytes)
        o.max_rich_bytes = KORCH_OUTPUTS_RICH_DEFAULT;
    /* A caller who raises a per-execution limit raises the session's too. */
    if (!o.max_session_stream_bytes)
        o.max_session_stream_bytes = o.max_stream_bytes > (16u << 20) ? 4 * o.max_stream_bytes : 64u << 20;
    if (!o.max_session_rich_bytes)
        o.max_session_rich_bytes = o.max_rich_bytes > (32u << 20) ? 4 * o.max_rich_bytes : 128u << 20;
    k->opts = o;
    k->loop = loop;
    k->ready_timer = k->hb_timer = k->stop_timer = k->free_timer = -1;
    k->state = KORCH_KERNEL_STARTING;
    k->pending = zlistx_new();
    k->env = s_copy_strv(o.env);
    k->cwd = o.cwd ? strdup(o.cwd) : NULL;
    k->opts.env = NULL;
    k->opts.cwd = NULL;
    k->opts.existing = NULL;
    k->opts.kernel_id = NULL;
    k->opts.kernelspec = NULL;
    k->opts.transport = NULL;
    if (o.kernel_id)
        snprintf(k->id, sizeof k->id, "%s", o.kernel_id);
    else if (korch_uuid(k->id) != KORCH_OK) {
        korch_err_set(err, KORCH_E_IO, "cannot make a kernel id: no random bytes");
        goto fail;
    }
    if (!k->pending || !k->env || (o.cwd && !k->cwd)) {
        korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        goto fail;
    }
    if (o.existing) {
        if (korch_conn_load(&k->conn, o.existing, err) != KORCH_OK)
            goto fail;
    } else {
        k->spec = korch_kernelspec_find(o.kernelspec, err);
        if (!k->spec)
            goto fail;
        if (o.launcher && korch_launcher_loop(o.launcher) != loop) {
            korch_err_set(err, KORCH_E_INVALID, "the %s launcher runs on another loop than the kernel",
                          korch_launcher_name(o.launcher));
            goto fail;
        }
        if (o.launcher)
            k->launcher = o.launcher;
        else {
            k->launcher = korch_launcher_local_new(loop, err);
            k->own_launcher = true;
        }
        if (!k->launcher)
            goto fail;
        k->launched = true;
        if (o.adopt) {
            if (!o.kernel_id) {
                korch_err_set(err, KORCH_E_INVALID, "adopting a kernel needs its kernel id");
                goto fail;
            }
            /* the connection comes with the proc: channels open then */
            k->launch_op = korch_launcher_adopt(k->launcher, k->id, s_on_adopted, k, err);
            if (!k->launch_op)
                goto fail;
            k->adopting = true;
            k->start_began = korch_now_ms();
            k->ready_timer = korch_loop_timer(k->loop, 50, 0, s_on_ready_timer, k);
            return k;
        }
        if (s_make_runtime_dir(k, err) != KORCH_OK)
            goto fail;
        const char *transport = o.transport ? o.transport : korch_launcher_transport(k->launcher);
        korch_rc_t rc = KORCH_OK;
        if (strcmp(transport, "ipc") == 0) {
            char prefix[PATH_MAX];
            rc = korch_path_fmt(prefix, sizeof prefix, err, "%s/k", k->runtime_dir);
            if (!rc)
                rc = korch_conn_init_ipc(&k->conn, prefix, err);
        } else
            rc = korch_conn_init_tcp(&k->conn, "127.0.0.1", err);
        if (rc)
            goto fail;
        snprintf(k->conn.kernel_name, sizeof k->conn.kernel_name, "%s", k->spec->name);
    }
    if (s_open(k, err) != KORCH_OK)
        goto fail;
    if (o.existing) {
        /* No process to watch: the heartbeat tells us when it is gone. */
        k->hb_timer = korch_loop_timer(k->loop, o.hb_interval_ms, 0, s_on_hb_timer, k);
        s_begin_ready(k);
    } else {
        s_launch(k);
        if (k->state == KORCH_KERNEL_DEAD) {
            korch_err_set(err, k->start_err.rc, "%s", k->start_err.msg);
            goto fail;
        }
    }
    return k;
fail:
    korch_kernel_destroy(&k);
    return NULL;
}

static bool s_not_starting(void *arg)
{
    korch_kernel_t *k = arg;
    return k->state != KORCH_KERNEL_STARTING && k->state != KORCH_KERNEL_RESTARTING;
}

korch_rc_t korch_kernel_wait_ready(korch_kernel_t *k, korch_err_t *err)
{
    korch_loop_run(k->loop, s_not_starting, k, -1);
    if (k->state == KORCH_KERNEL_IDLE || k->state == KORCH_KERNEL_BUSY)
        return KORCH_OK;
    if (k->start_err.rc)
        return korch_err_set(err, k->start_err.rc, "%s", k->start_err.msg);
    return korch_err_set(err, KORCH_E_DIED, "kernel is %s", korch_kernel_state_name(k->state));
}

static bool s_stopped(void *arg)
{
    korch_kernel_t *k = arg;
    return k->state == KORCH_KERNEL_STOPPED || k->state == KORCH_KERNEL_DEAD;
}

void korch_kernel_shutdown(korch_kernel_t *k)
{
    if (s_stopped(k))
        return;
    s_stop_begin(k, false, "kernel shut down");
    korch_loop_run(k->loop, s_stopped, k, k->opts.shutdown_grace_ms + 2000);
    if (!s_stopped(k)) {
        if (k->proc) {
            s_kill(k);
            korch_proc_wait_exit(k->proc, S_KILL_WAIT_MS);
        }
        s_on_death(k, "killed");
    }
}

void korch_kernel_shutdown_begin(korch_kernel_t *k)
{
    if (s_stopped(k))
        return;
    if (k->stop_phase != STOP_NONE)
        k->stop_restart = false; /* a restart under way ends stopped instead */
    else
        s_stop_begin(k, false, "kernel shut down");
}

korch_rc_t korch_kernel_restart(korch_kernel_t *k, korch_err_t *err)
{
    if (!k->launched)
        return korch_err_set(err, KORCH_E_STATE,
                             "cannot restart kernel %.8s: korch did not start it (attached with --existing)", k->id);
    if (k->state == KORCH_KERNEL_STOPPED)
        return korch_err_set(err, KORCH_E_STATE, "cannot restart kernel %.8s: it was shut down", k->id);
    if (k->state == KORCH_KERNEL_DEAD) {
        k->restarts++;
        s_set_state(k, KORCH_KERNEL_RESTARTING, "restart requested");
        s_launch(k);
        return KORCH_OK;
    }
    s_stop_begin(k, true, "kernel restarted");
    return KORCH_OK;
}

korch_rc_t korch_kernel_interrupt(korch_kernel_t *k, korch_err_t *err)
{
    if (k->state == KORCH_KERNEL_DEAD || k->state == KORCH_KERNEL_STOPPED)
        return korch_err_set(err, KORCH_E_DIED, "cannot interrupt kernel %.8s: it is %s", k->id,
                             korch_kernel_state_name(k->state));
    if (!k->launched || (k->spec && k->spec->interrupt_message)) {
        s_send(k, KORCH_CH_CONTROL, "interrupt_request", NULL);
        return KORCH_OK;
    }
    if (!k->proc)
        return korch_err_set(err, KORCH_E_STATE, "cannot interrupt kernel %.8s: it is still being started", k->id);
    return korch_proc_signal(k->proc, SIGINT, s_on_signal_done, NULL, err) ? KORCH_OK : err ? err->rc : KORCH_E_IO;
}

korch_rc_t korch_kernel_send(korch_kernel_t *k, korch_channel_t ch, korch_msg_t **msg, korch_err_t *err)
{
    if (ch != KORCH_CH_IOPUB && ch < KORCH_CH_HB && k->adopting && k->state == KORCH_KERNEL_STARTING) {
        /* being re-adopted: hold it until the kernel is ready (see s_check_ready) */
        s_held_t *h = NULL;
        if (!k->held)
            k->held = zlistx_new();
        if (!k->held || zlistx_size(k->held) >= HELD_MAX || !(h = malloc(sizeof *h))) {
            korch_msg_destroy(msg);
            return korch_err_set(err, KORCH_E_TOOBIG, "kernel %.8s is being re-adopted: %d messages wait already",
                                 k->id, HELD_MAX);
        }
        *h = (s_held_t){ch, *msg};
        *msg = NULL;
        zlistx_add_end(k->held, h);
        return KORCH_OK;
    }
    if (ch == KORCH_CH_IOPUB || ch >= KORCH_CH_HB || !k->sock[ch]) {
        korch_msg_destroy(msg);
        return korch_err_set(err, KORCH_E_INVALID, "cannot send on the %s channel", korch_channel_name(ch));
    }
    return korch_session_send(k->session, k->sock[ch], msg, err);
}

korch_exec_t *korch_kernel_execute(korch_kernel_t *k, const char *code, const korch_exec_opts_t *opts,
                                   const korch_exec_cb_t *cb, korch_err_t *err)
{
    if (k->state == KORCH_KERNEL_DEAD || k->state == KORCH_KERNEL_STOPPED) {
        korch_err_set(err, KORCH_E_DIED, "cannot execute: kernel %.8s is %s%s%s", k->id,
                      korch_kernel_state_name(k->state), k->start_err.rc ? ": " : "",
                      k->start_err.rc ? k->start_err.msg : "");
        return NULL;
    }
    if (!k->session) {
        korch_err_set(err, KORCH_E_STATE, "cannot execute yet: kernel %.8s is being re-adopted (wait until it is ready)",
                      k->id);
        return NULL;
    }
    korch_exec_t *ex = calloc(1, sizeof *ex);
    if (!ex) {
        korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        return NULL;
    }
    ex->k = k;
    ex->timer = -1;
    ex->opts = opts ? *opts : (korch_exec_opts_t){0};
    if (ex->opts.interrupt_grace_ms <= 0)
        ex->opts.interrupt_grace_ms = 5000;
    if (cb)
        ex->cb = *cb;
    ex->result.execution_count = -1;
    ex->t0 = korch_now_ms();
    korch_outputs_limits_t ol = {
        .max_stream_bytes = k->opts.max_stream_bytes,
        .max_outputs = k->opts.max_outputs,
        .max_rich_bytes = k->opts.max_rich_bytes,
        .session = true,
        .session_stream_left = k->session_stream < k->opts.max_session_stream_bytes
                                   ? k->opts.max_session_stream_bytes - k->session_stream
                                   : 0,
        .session_rich_left = k->session_rich < k->opts.max_session_rich_bytes
                                 ? k->opts.max_session_rich_bytes - k->session_rich
                                 : 0,
    };
    if (ex->opts.max_output_bytes) { /* the caller's budget, told as the session's */
        if (ex->opts.max_output_bytes < ol.session_stream_left)
            ol.session_stream_left = ex->opts.max_output_bytes;
        if (ex->opts.max_output_bytes < ol.session_rich_left)
            ol.session_rich_left = ex->opts.max_output_bytes;
    }
    ex->outputs = korch_outputs_new_limits(&ol);
    ex->request = korch_msg_new(
        "execute_request",
        json_pack("{s:s, s:b, s:b, s:{}, s:b, s:b}", "code", code ? code : "", "silent", ex->opts.silent,
                  "store_history", !ex->opts.no_store_history && !ex->opts.silent, "user_expressions", "allow_stdin",
                  ex->opts.allow_stdin, "stop_on_error", ex->opts.stop_on_error));
    if (!ex->outputs || !ex->request || !json_is_object(ex->request->content) ||
        !json_object_get(ex->request->content, "code")) {
        korch_err_set(err, KORCH_E_INVALID, "cannot build execute_request (is the code valid UTF-8?)");
        ex->k = NULL;
        korch_exec_destroy(&ex);
        return NULL;
    }
    snprintf(ex->msg_id, sizeof ex->msg_id, "%s", korch_session_stamp(k->session, ex->request));
    zlistx_add_end(k->pending, ex);
    if (k->state == KORCH_KERNEL_IDLE || k->state == KORCH_KERNEL_BUSY) {
        if (s_exec_send(ex, err) != KORCH_OK) {
            zlistx_delete(k->pending, zlistx_find(k->pending, ex));
            ex->k = NULL;
            korch_exec_destroy(&ex);
            return NULL;
        }
    }
    return ex;
}

static bool s_exec_is_done(void *arg) { return ((korch_exec_t *)arg)->done; }

korch_exec_t *korch_kernel_execute_wait(korch_kernel_t *k, const char *code, const korch_exec_opts_t *opts,
                                        const korch_exec_cb_t *cb, korch_err_t *err)
{
    korch_exec_cb_t c = cb ? *cb : (korch_exec_cb_t){0};
    c.on_done = NULL; /* the caller holds ex; a done callback must not free it here */
    korch_exec_t *ex = korch_kernel_execute(k, code, opts, &c, err);
    if (ex)
        korch_loop_run(k->loop, s_exec_is_done, ex, -1);
    return ex;
}

/* Pending executions end with the kernel: they hear "kernel was closed". */
static void s_detach_execs(korch_kernel_t *k)
{
    if (!k->pending)
        return;
    korch_exec_t *ex;
    while ((ex = zlistx_first(k->pending))) {
        zlistx_delete(k->pending, zlistx_cursor(k->pending));
        s_exec_stop_timer(ex);
        ex->k = NULL;
        if (!ex->done) {
            ex->done = true;
            ex->result.status = KORCH_EXEC_DIED;
            ex->result.outputs = korch_outputs_json(ex->outputs);
            snprintf(ex->result.detail, sizeof ex->result.detail, "kernel was closed");
        }
    }
}

static void s_free(korch_kernel_t *k)
{
    if (k->deferred)
        korch_launcher_undefer(k->launcher, k->deferred);
    k->deferred = NULL;
    s_detach_execs(k);
    zlistx_destroy(&k->pending);
    s_held_end(k, false);
    korch_op_cancel(&k->launch_op);
    s_unwatch(k);
    s_stop_timers(k);
    if (k->ready_timer >= 0)
        korch_loop_timer_end(k->loop, k->ready_timer);
    if (k->hb_timer >= 0)
        korch_loop_timer_end(k->loop, k->hb_timer);
    if (k->free_timer >= 0)
        korch_loop_timer_end(k->loop, k->free_timer);
    for (int ch = 0; ch < KORCH_CH__COUNT; ch++)
        s_close(k, (korch_channel_t)ch);
    /* never blocks: what is left of a container goes on in the launcher */
    korch_proc_destroy(&k->proc);
    /* the kernel's files too, never through its links; on the launcher's
       worker, after what the proc left there (docker's tmpfs unmount) */
    if (k->runtime_dir[0])
        korch_launcher_remove_dir(k->launcher, k->runtime_dir);
    if (k->own_launcher)
        korch_launcher_destroy(&k->launcher);
    korch_session_destroy(&k->session);
    korch_kernelspec_destroy(&k->spec);
    json_decref(k->info);
    if (k->env)
        for (char **e = k->env; *e; e++)
            free(*e);
    free(k->env);
    free(k->cwd);
    free(k);
}

/* The launcher goes away before a detached kernel's teardown ended (exit):
   finish it now, running the loop (korch_launcher_destroy is not called
   from handlers). */
static void s_finish_detached(void *arg)
{
    korch_kernel_t *k = arg;
    k->deferred = NULL;
    if (k->free_timer >= 0)
        korch_loop_timer_end(k->loop, k->free_timer);
    k->free_timer = -1;
    k->detached = false; /* s_set_state must not schedule a free now */
    korch_kernel_shutdown(k);
    s_free(k);
}

void korch_kernel_destroy(korch_kernel_t **pk)
{
    if (!pk || !*pk)
        return;
    korch_kernel_t *k = *pk;
    *pk = NULL;
    if (k->detached)
        return;
    k->cb = (korch_kernel_cb_t){0};
    bool running = k->launched && k->session && k->state != KORCH_KERNEL_STOPPED && k->state != KORCH_KERNEL_DEAD;
    if (running && korch_loop_running(k->loop)) {
        /* From a handler: the loop must not run here. The kernel detaches
           and tears itself down on the loop (shutdown_request, grace,
           SIGTERM, SIGKILL), then frees itself. */
        k->detached = true;
        k->opts.no_auto_restart = true;
        if (!k->own_launcher)
            k->deferred = korch_launcher_defer(k->launcher, s_finish_detached, k);
        s_detach_execs(k);
        if (k->stop_phase == STOP_NONE)
            s_stop_begin(k, false, "kernel shut down");
        else
            k->stop_restart = false;
        return;
    }
    if (running)
        korch_kernel_shutdown(k); /* outside handlers: may run the loop */
    s_free(k);
}

void korch_kernel_set_callbacks(korch_kernel_t *k, const korch_kernel_cb_t *cb)
{
    k->cb = cb ? *cb : (korch_kernel_cb_t){0};
}

korch_kernel_state_t korch_kernel_state(const korch_kernel_t *k) { return k->state; }
const char *korch_kernel_id(const korch_kernel_t *k) { return k->id; }
const korch_conn_t *korch_kernel_conn(const korch_kernel_t *k) { return &k->conn; }
json_t *korch_kernel_info(const korch_kernel_t *k) { return k->info; }
const korch_session_stats_t *korch_kernel_stats(const korch_kernel_t *k)
{
    return k->session ? korch_session_stats(k->session) : NULL; /* none while being adopted */
}
int64_t korch_kernel_ready_ms(const korch_kernel_t *k) { return k->ready_ms; }
void korch_kernel_set_auto_restart(korch_kernel_t *k, bool on) { k->opts.no_auto_restart = !on; }

int korch_kernel_restarts(const korch_kernel_t *k) { return k->restarts; }
korch_loop_t *korch_kernel_loop(korch_kernel_t *k) { return k->loop; }
korch_proc_t *korch_kernel_proc(korch_kernel_t *k) { return k->proc; }

/* ----------------------------------------------------------------- execs */

bool korch_exec_done(const korch_exec_t *ex) { return ex->done; }
const char *korch_exec_msg_id(const korch_exec_t *ex) { return ex->msg_id; }

const korch_exec_result_t *korch_exec_result(korch_exec_t *ex)
{
    ex->result.outputs = korch_outputs_json(ex->outputs);
    ex->result.reply = ex->reply;
    return &ex->result;
}

korch_rc_t korch_exec_input_reply(korch_exec_t *ex, const char *value, korch_err_t *err)
{
    if (!ex->k || ex->done || !ex->input_parent)
        return korch_err_set(err, KORCH_E_STATE, "no input is being asked for");
    korch_msg_t *reply = korch_msg_new("input_reply", json_pack("{s:s}", "value", value ? value : ""));
    if (!reply)
        return korch_err_set(err, KORCH_E_INVALID, "cannot build input_reply (is the text valid UTF-8?)");
    json_decref(reply->parent_header);
    reply->parent_header = ex->input_parent;
    ex->input_parent = NULL;
    return korch_session_send(ex->k->session, ex->k->sock[KORCH_CH_STDIN], &reply, err);
}

void korch_exec_destroy(korch_exec_t **pex)
{
    if (!pex || !*pex)
        return;
    korch_exec_t *ex = *pex;
    *pex = NULL;
    if (ex->k) {
        s_exec_stop_timer(ex);
        void *h = zlistx_find(ex->k->pending, ex);
        if (h)
            zlistx_delete(ex->k->pending, h);
    }
    korch_msg_destroy(&ex->request);
    korch_outputs_destroy(&ex->outputs);
    json_decref(ex->reply);
    json_decref(ex->input_parent);
    free(ex);
}
