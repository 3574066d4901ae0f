/*  korch_kernel's life: the launcher's proc watched, the start and the
 *  wait for ready, death, stopping and restarting. */
#include "kernel_int.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* --------------------------------------------------------------- liveness */

static void s_on_proc_exit(korch_proc_t *proc, const char *why, void *arg)
{
    korch_kernel_t *k = arg;
    if (proc == k->proc)
        kn_on_death(k, why);
}

void kn_watch(korch_kernel_t *k) { korch_proc_on_exit(k->proc, s_on_proc_exit, k); }

void kn_unwatch(korch_kernel_t *k)
{
    if (k->proc)
        korch_proc_on_exit(k->proc, NULL, NULL);
}

/* Signals and kills whose outcome only matters to the log. */
void kn_on_signal_done(korch_rc_t rc, const korch_err_t *err, void *arg)
{
    if (rc)
        korch_debug("kernel signal: %s", err ? err->msg : korch_strerror(rc));
}

static void s_signal(korch_kernel_t *k, int sig)
{
    korch_err_t err = {0};
    if (k->proc && !korch_proc_signal(k->proc, sig, kn_on_signal_done, NULL, &err))
        korch_debug("kernel %.8s: signal %d: %s", k->id, sig, err.msg);
}

void kn_kill(korch_kernel_t *k)
{
    korch_err_t err = {0};
    if (k->proc && !korch_proc_kill(k->proc, kn_on_signal_done, NULL, &err))
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

int kn_on_ready_timer(korch_loop_t *z, int timer_id, void *arg)
{
    korch_kernel_t *k = arg;
    if (kn_owner_ended(k))
        return korch_loop_rc(k->loop);
    int64_t now = korch_now_ms();
    if (now - k->start_began > k->opts.start_timeout_ms) {
        k->ready_timer = -1;
        korch_loop_timer_end(z, timer_id);
        char why[128];
        snprintf(why, sizeof why, "did not become ready within %d s", k->opts.start_timeout_ms / 1000);
        if (k->proc) {
            s_start_failed(k, why);
            kn_kill(k);
        } else if (k->launch_op) {
            korch_op_cancel(&k->launch_op);
            korch_err_set(&k->start_err, KORCH_E_TIMEOUT, "cannot start kernel '%s': the launcher did not start it within %d s",
                          k->spec ? k->spec->name : "?", k->opts.start_timeout_ms / 1000);
        } else
            korch_err_set(&k->start_err, KORCH_E_TIMEOUT, "kernel at '%s' did not answer within %d s", k->conn.ip,
                          k->opts.start_timeout_ms / 1000);
        kn_unwatch(k);
        kn_fail_pending(k, k->start_err.msg, false);
        kn_set_state(k, KORCH_KERNEL_DEAD, k->start_err.msg);
        return korch_loop_rc(k->loop);
    }
    if (!k->session)
        return korch_loop_rc(k->loop); /* adopting: the channels open with the proc */
    /* No reply yet: ask again each second (the first may predate the
       kernel's sockets). Replied but iopub silent: each request makes the
       kernel publish busy/idle, so ask until the subscription catches one. */
    if (!k->got_info ? now - k->last_info_sent >= 1000 : !k->iopub_live)
        kn_send_kernel_info(k);
    else if (k->iopub_live && !k->stdin_up)
        kn_check_ready(k);
    return korch_loop_rc(k->loop);
}

void kn_begin_ready(korch_kernel_t *k)
{
    k->got_info = false;
    k->iopub_live = false;
    k->stdin_wait_began = 0;
    k->start_began = korch_now_ms();
    kn_send_kernel_info(k);
    if (k->ready_timer >= 0)
        korch_loop_timer_end(k->loop, k->ready_timer);
    k->ready_timer = korch_loop_timer(k->loop, 50, 0, kn_on_ready_timer, k);
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
void kn_held_end(korch_kernel_t *k, bool send)
{
    kn_held_t *h;
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

void kn_launch_failed(korch_kernel_t *k, korch_rc_t rc, const char *msg)
{
    k->adopting = false;
    kn_held_end(k, false);
    korch_err_set(&k->start_err, rc, "%s", msg);
    if (k->ready_timer >= 0)
        korch_loop_timer_end(k->loop, k->ready_timer);
    k->ready_timer = -1;
    kn_fail_pending(k, msg, false);
    kn_set_state(k, KORCH_KERNEL_DEAD, msg);
}

static void s_on_started(korch_proc_t *proc, korch_rc_t rc, const korch_err_t *err, void *arg)
{
    korch_kernel_t *k = arg;
    k->launch_op = NULL;
    if (rc) {
        kn_launch_failed(k, rc, err ? err->msg : korch_strerror(rc));
        return;
    }
    k->proc = proc;
    s_follow_conn(k, korch_proc_conn(proc));
    kn_watch(k);
}

void kn_launch(korch_kernel_t *k)
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
    kn_unwatch(k);
    korch_proc_destroy(&k->proc);
    korch_op_cancel(&k->launch_op);
    k->launch_op = korch_launcher_start(k->launcher, &req, s_on_started, k, &err);
    if (!k->launch_op) {
        korch_err_set(&k->start_err, err.rc, "%s", err.msg);
        kn_fail_pending(k, err.msg, false);
        kn_set_state(k, KORCH_KERNEL_DEAD, err.msg);
        return;
    }
    /* kernel_info goes out now: zeromq keeps it until the kernel binds */
    kn_begin_ready(k);
}

/* ------------------------------------------------------- death and stopping */

void kn_stop_timers(korch_kernel_t *k)
{
    if (k->stop_timer >= 0)
        korch_loop_timer_end(k->loop, k->stop_timer);
    k->stop_timer = -1;
}

void kn_on_death(korch_kernel_t *k, const char *why)
{
    if (k->state == KORCH_KERNEL_DEAD || k->state == KORCH_KERNEL_STOPPED)
        return;
    kn_unwatch(k);
    if (k->ready_timer >= 0)
        korch_loop_timer_end(k->loop, k->ready_timer);
    k->ready_timer = -1;
    /* Whatever the kernel said before it went belongs to its executions. */
    for (int ch = 0; ch < KORCH_CH_HB; ch++)
        kn_drain(k, (korch_channel_t)ch, 100000, -1);

    if (k->stop_phase != STOP_NONE) {
        bool restart = k->stop_restart;
        kn_stop_timers(k);
        k->stop_phase = STOP_NONE;
        kn_fail_pending(k, k->stop_reason, restart);
        if (restart && k->launched) {
            k->restarts++;
            kn_set_state(k, KORCH_KERNEL_RESTARTING, k->stop_reason);
            kn_launch(k);
        } else
            kn_set_state(k, KORCH_KERNEL_STOPPED, k->stop_reason);
        return;
    }
    if (!k->ever_ready && k->launched) {
        s_start_failed(k, why);
        kn_fail_pending(k, k->start_err.msg, false);
        kn_set_state(k, KORCH_KERNEL_DEAD, k->start_err.msg);
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
    kn_fail_pending(k, detail, restart);
    if (restart) {
        k->restarts++;
        /* again when it died restarting: the process that went may have
           been sent work already (an agent's next step, queued for it while
           it started), and whoever sent it must hear it is lost */
        kn_set_state_again(k, KORCH_KERNEL_RESTARTING, detail);
        kn_launch(k);
    } else {
        korch_err_set(&k->start_err, KORCH_E_DIED, "%s", detail);
        kn_set_state(k, KORCH_KERNEL_DEAD, detail);
    }
}

bool kn_owner_ended(korch_kernel_t *k)
{
    if (!k->opts.owner_notifies || !k->opts.owner_ended || !k->opts.owner_ended(k->opts.owner_arg))
        return false;
    if (!k->ever_ready)
        korch_err_set(&k->start_err, KORCH_E_INTERRUPTED, "its owner ended the session before the kernel answered");
    kn_on_death(k, "its owner ended the session");
    return true;
}

void korch_kernel_gone(korch_kernel_t *k, bool restarted, int64_t died_ms, const char *why)
{
    if (!k || k->launched || k->state == KORCH_KERNEL_DEAD || k->state == KORCH_KERNEL_STOPPED)
        return;
    char detail[512];
    if (!restarted) {
        snprintf(detail, sizeof detail, "%s", why && *why ? why : "kernel died");
        kn_on_death(k, detail);
        return;
    }
    /* what the old process said before it went belongs to its executions */
    for (int ch = 0; ch < KORCH_CH_HB; ch++)
        kn_drain(k, (korch_channel_t)ch, 100000, -1);
    snprintf(detail, sizeof detail, "%s", why && *why ? why : "its process went");
    korch_exec_t *ex;
    for (bool again = true; again;) {
        again = false;
        for (ex = zlistx_first(k->pending); ex; ex = zlistx_next(k->pending))
            if (ex->sent && ex->t0 <= died_ms) {
                korch_info("kernel %.8s: its owner restarted it; execution %.8s is lost", k->id, ex->msg_id);
                ex->result.restarted = true;
                kn_exec_fail(ex, detail);
                again = true; /* the list changed: from the start */
                break;
            }
    }
    k->kernel_session[0] = 0;
}

static int s_on_stop_timer(korch_loop_t *z, int timer_id, void *arg)
{
    korch_kernel_t *k = arg;
    k->stop_timer = -1;
    int half = k->opts.shutdown_grace_ms / 2;
    if (!k->proc) {
        kn_on_death(k, k->launched ? "shut down (before it ran)" : "shut down (no reply)");
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
        kn_kill(k);
        /* the end comes through the exit notification; if even that fails
           (the engine is gone), give up on it after a while */
        k->stop_timer = korch_loop_timer(z, KN_KILL_WAIT_MS, 1, s_on_stop_timer, k);
    } else {
        korch_warn("kernel %.8s: no end seen %d s after SIGKILL", k->id, KN_KILL_WAIT_MS / 1000);
        kn_on_death(k, "killed");
    }
    return korch_loop_rc(k->loop);
}

void kn_stop_begin(korch_kernel_t *k, bool restart, const char *reason)
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
        kn_set_state(k, KORCH_KERNEL_RESTARTING, reason);
    kn_send(k, KORCH_CH_CONTROL, "shutdown_request", json_pack("{s:b}", "restart", restart));
    /* A busy kernel that a restart interrupted and asked to go but that is
       still there after a second ignores both (a cell swallowing the
       KeyboardInterrupt, a C call that never returns): its state is being
       thrown away, so the SIGTERM comes sooner than half the grace. */
    int wait = k->opts.shutdown_grace_ms / 2;
    if (restart && busy && wait > RESTART_BUSY_WAIT_MS)
        wait = RESTART_BUSY_WAIT_MS;
    k->stop_timer = korch_loop_timer(k->loop, wait, 1, s_on_stop_timer, k);
    if (k->proc && korch_proc_exited(k->proc))
        kn_on_death(k, korch_proc_exit_why(k->proc));
}

