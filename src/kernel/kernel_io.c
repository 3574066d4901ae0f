/*  korch_kernel's messages (what each channel brings), its sockets and
 *  the heartbeat. */
#include "kernel_int.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* --------------------------------------------------------------- messages */

void kn_send(korch_kernel_t *k, korch_channel_t ch, const char *type, json_t *content)
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

void kn_send_kernel_info(korch_kernel_t *k)
{
    kn_send(k, KORCH_CH_SHELL, "kernel_info_request", NULL);
    k->last_info_sent = korch_now_ms();
}

/* How long readiness waits for stdin's connection once shell and iopub are
   live; a kernel that never accepts one is declared ready without it. */
#define STDIN_WAIT_MS 3000

void kn_check_ready(korch_kernel_t *k)
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
    kn_set_state(k, KORCH_KERNEL_IDLE, NULL);
    kn_flush_unsent(k);
    if (k->adopting) {
        /* now, not when the channels opened: the kernel runs already, and
           what it published before our subscription landed would be lost */
        k->adopting = false;
        kn_held_end(k, true);
    }
}

/* An attached kernel (opts.existing) that its owner restarts (korch serve's,
   after the kernel killed itself) keeps its ports, and its heartbeat
   answers again within a second: korch never sees it die, and what it had
   sent to the process that went is never answered (an agent's step then
   waited for its 300 s timeout). Each process of a kernel signs as a
   session of its own (header.session), so the first message of another
   session says the process changed: the executions sent before it are
   gone, all but the one this message answers. These are guesses, for an
   owner that says nothing (korch exec --existing on someone's kernel): a
   late message of the old process read after the new one's undoes them,
   and a restart within a beat is missed. An owner that tells
   (opts.owner_notifies: korch serve's, korch_kernel_gone) is believed
   instead. */
static bool s_guesses(const korch_kernel_t *k) { return !k->launched && !k->opts.owner_notifies; }

static void s_check_process(korch_kernel_t *k, korch_msg_t *msg)
{
    k->last_heard = korch_now_ms();
    const char *sess = json_string_value(json_object_get(msg->header, "session"));
    if (!s_guesses(k) || !sess || !*sess || strlen(sess) >= sizeof k->kernel_session ||
        !strcmp(sess, k->kernel_session))
        return;
    bool first = !k->kernel_session[0];
    snprintf(k->kernel_session, sizeof k->kernel_session, "%s", sess);
    if (first)
        return;
    korch_exec_t *keep = kn_find_exec(k, korch_msg_parent_id(msg)), *ex;
    korch_info("kernel %.8s: its process changed (a new session): what was running there is lost", k->id);
    for (bool again = true; again;) {
        again = false;
        for (ex = zlistx_first(k->pending); ex; ex = zlistx_next(k->pending))
            if (ex != keep && ex->sent) {
                ex->result.restarted = true;
                kn_exec_fail(ex, "the kernel was restarted while this ran (its variables are gone)");
                again = true; /* the list changed: from the start */
                break;
            }
    }
}

static void s_on_iopub(korch_kernel_t *k, korch_msg_t *msg)
{
    s_check_process(k, msg);
    const char *type = korch_msg_type(msg);
    if (!k->iopub_live) {
        k->iopub_live = true;
        kn_check_ready(k);
    }
    korch_exec_t *ex = kn_find_exec(k, korch_msg_parent_id(msg));
    if (strcmp(type, "status") == 0) {
        const char *st = json_string_value(json_object_get(msg->content, "execution_state"));
        if (!st)
            return;
        if (k->state == KORCH_KERNEL_IDLE || k->state == KORCH_KERNEL_BUSY) {
            if (strcmp(st, "busy") == 0)
                kn_set_state(k, KORCH_KERNEL_BUSY, NULL);
            else if (strcmp(st, "idle") == 0)
                kn_set_state(k, KORCH_KERNEL_IDLE, NULL);
        }
        if (ex && strcmp(st, "idle") == 0) {
            ex->got_idle = true;
            kn_exec_maybe_done(ex);
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
    s_check_process(k, msg);
    const char *type = korch_msg_type(msg);
    if (strcmp(type, "kernel_info_reply") == 0) {
        json_decref(k->info);
        k->info = json_incref(msg->content);
        if (!k->got_info) {
            k->got_info = true;
            kn_check_ready(k);
        }
        return;
    }
    korch_exec_t *ex = kn_find_exec(k, korch_msg_parent_id(msg));
    if (ex && strcmp(type, "execute_reply") == 0) {
        json_decref(ex->reply);
        ex->reply = json_incref(msg->content);
        ex->got_reply = true;
        kn_exec_maybe_done(ex);
    }
}

static void s_on_stdin(korch_kernel_t *k, korch_msg_t *msg)
{
    if (strcmp(korch_msg_type(msg), "input_request") != 0)
        return;
    korch_exec_t *ex = kn_find_exec(k, korch_msg_parent_id(msg));
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
            kn_on_death(k, "shut down");
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
    return strcmp(korch_msg_type(msg), "status") == 0 || kn_find_exec(k, korch_msg_parent_id(msg)) != NULL;
}

/* Read and handle what one socket has: at most max messages and, with
   budget_ms >= 0, no new one once budget_ms have passed (one always), so a
   kernel flooding IOPub with 20 MB stream messages cannot starve the other
   kernels and clients on the loop: each gets its turn every round. */
void kn_drain(korch_kernel_t *k, korch_channel_t ch, int max, int budget_ms)
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
            kn_drain(k, (korch_channel_t)ch, DRAIN_MAX, DRAIN_BUDGET_MS);
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
                kn_check_ready(k);
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

korch_rc_t kn_connect(korch_kernel_t *k, korch_channel_t ch, korch_err_t *err)
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

void kn_close(korch_kernel_t *k, korch_channel_t ch)
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
    /* An attached kernel's heartbeat back after a gap, with executions
       pending: its owner may have restarted it, and the new process may
       have said nothing to us yet (our IOPub subscription can miss its
       first status). Asked, its reply's session tells (s_check_process). */
    if (k->hb_missed > 0 && s_guesses(k) && zlistx_size(k->pending))
        kn_send_kernel_info(k);
    k->hb_missed = 0;
    return korch_loop_rc(k->loop);
}

int kn_on_hb_timer(korch_loop_t *z, int timer_id, void *arg)
{
    korch_kernel_t *k = arg;
    if (k->state == KORCH_KERNEL_DEAD || k->state == KORCH_KERNEL_STOPPED)
        return 0;
    if (kn_owner_ended(k))
        return korch_loop_rc(k->loop);
    if (k->hb_waiting) {
        k->hb_missed++;
        /* A REQ that got no reply cannot send again: rebuild it. */
        kn_close(k, KORCH_CH_HB);
        /* an owner that tells (opts.owner_notifies) says when it is dead:
           missed beats are its restart under way, not a death */
        if (k->hb_missed >= k->opts.hb_max_missed && !k->opts.owner_notifies) {
            char why[128];
            snprintf(why, sizeof why, "heartbeat lost (%d beats of %d ms unanswered)", k->hb_missed,
                     k->opts.hb_interval_ms);
            kn_on_death(k, why);
            return korch_loop_rc(k->loop);
        }
    }
    if (!k->sock[KORCH_CH_HB]) {
        if (kn_connect(k, KORCH_CH_HB, NULL) != KORCH_OK)
            return 0;
        korch_loop_reader(k->loop, k->sock[KORCH_CH_HB], s_on_hb_reply, k);
    }
    /* ... and an attached kernel silent for 5 s with executions pending:
       asked too (a long computation answers after it, from the same session) */
    int64_t now = korch_now_ms();
    if (s_guesses(k) && zlistx_size(k->pending) && now - k->last_heard > 5000 && now - k->last_info_sent > 5000)
        kn_send_kernel_info(k);
    zstr_send(k->sock[KORCH_CH_HB], "ping");
    k->hb_waiting = true;
    return korch_loop_rc(k->loop);
}

