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
 *
 *  This file: the public API; the parts by concern beside it
 *  (kernel_exec.c, kernel_io.c, kernel_life.c) share kernel_int.h.
 */
#include "kernel_int.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void s_free(korch_kernel_t *k);

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

void kn_set_state(korch_kernel_t *k, korch_kernel_state_t st, const char *detail)
{
    if (k->state == st)
        return;
    kn_set_state_again(k, st, detail);
}

void kn_set_state_again(korch_kernel_t *k, korch_kernel_state_t st, const char *detail)
{
    k->state = st;
    korch_debug("kernel %.8s: %s%s%s", k->id, korch_kernel_state_name(st), detail ? ": " : "", detail ? detail : "");
    if (k->cb.on_state)
        k->cb.on_state(k, st, detail, k->cb.arg);
    korch_loop_break(k->loop);
    if (k->detached && k->free_timer < 0 && (st == KORCH_KERNEL_STOPPED || st == KORCH_KERNEL_DEAD))
        k->free_timer = korch_loop_timer(k->loop, 0, 1, s_on_free_timer, k);
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
        if (kn_connect(k, (korch_channel_t)ch, err) != KORCH_OK)
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
        kn_launch_failed(k, rc, err && err->rc ? err->msg : korch_strerror(rc));
        return;
    }
    kn_watch(k);
    kn_begin_ready(k);
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
            k->ready_timer = korch_loop_timer(k->loop, 50, 0, kn_on_ready_timer, k);
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
        k->hb_timer = korch_loop_timer(k->loop, o.hb_interval_ms, 0, kn_on_hb_timer, k);
        kn_begin_ready(k);
    } else {
        kn_launch(k);
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
    kn_stop_begin(k, false, "kernel shut down");
    korch_loop_run(k->loop, s_stopped, k, k->opts.shutdown_grace_ms + 2000);
    if (!s_stopped(k)) {
        if (k->proc) {
            kn_kill(k);
            korch_proc_wait_exit(k->proc, KN_KILL_WAIT_MS);
        }
        kn_on_death(k, "killed");
    }
}

void korch_kernel_shutdown_begin(korch_kernel_t *k)
{
    if (s_stopped(k))
        return;
    if (k->stop_phase != STOP_NONE)
        k->stop_restart = false; /* a restart under way ends stopped instead */
    else
        kn_stop_begin(k, false, "kernel shut down");
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
        kn_set_state(k, KORCH_KERNEL_RESTARTING, "restart requested");
        kn_launch(k);
        return KORCH_OK;
    }
    kn_stop_begin(k, true, "kernel restarted");
    return KORCH_OK;
}

korch_rc_t korch_kernel_interrupt(korch_kernel_t *k, korch_err_t *err)
{
    if (k->state == KORCH_KERNEL_DEAD || k->state == KORCH_KERNEL_STOPPED)
        return korch_err_set(err, KORCH_E_DIED, "cannot interrupt kernel %.8s: it is %s", k->id,
                             korch_kernel_state_name(k->state));
    /* Messaging spec, "Kernel interrupt": interrupt_mode "message" sends
       interrupt_request on control; so does a launcher that cannot signal. */
    if (!k->launched || (k->spec && k->spec->interrupt_message) ||
        (korch_launcher_caps(k->launcher) & KORCH_LAUNCHER_NO_SIGINT)) {
        kn_send(k, KORCH_CH_CONTROL, "interrupt_request", NULL);
        return KORCH_OK;
    }
    if (!k->proc)
        return korch_err_set(err, KORCH_E_STATE, "cannot interrupt kernel %.8s: it is still being started", k->id);
    return korch_proc_signal(k->proc, SIGINT, kn_on_signal_done, NULL, err) ? KORCH_OK : err ? err->rc : KORCH_E_IO;
}

korch_rc_t korch_kernel_send(korch_kernel_t *k, korch_channel_t ch, korch_msg_t **msg, korch_err_t *err)
{
    if (ch != KORCH_CH_IOPUB && ch < KORCH_CH_HB && k->adopting && k->state == KORCH_KERNEL_STARTING) {
        /* being re-adopted: hold it until the kernel is ready (see kn_check_ready) */
        kn_held_t *h = NULL;
        if (!k->held)
            k->held = zlistx_new();
        if (!k->held || zlistx_size(k->held) >= HELD_MAX || !(h = malloc(sizeof *h))) {
            korch_msg_destroy(msg);
            return korch_err_set(err, KORCH_E_TOOBIG, "kernel %.8s is being re-adopted: %d messages wait already",
                                 k->id, HELD_MAX);
        }
        *h = (kn_held_t){ch, *msg};
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
        if (kn_exec_send(ex, err) != KORCH_OK) {
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
        kn_exec_stop_timer(ex);
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
    kn_held_end(k, false);
    korch_op_cancel(&k->launch_op);
    kn_unwatch(k);
    kn_stop_timers(k);
    if (k->ready_timer >= 0)
        korch_loop_timer_end(k->loop, k->ready_timer);
    if (k->hb_timer >= 0)
        korch_loop_timer_end(k->loop, k->hb_timer);
    if (k->free_timer >= 0)
        korch_loop_timer_end(k->loop, k->free_timer);
    for (int ch = 0; ch < KORCH_CH__COUNT; ch++)
        kn_close(k, (korch_channel_t)ch);
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
    k->detached = false; /* kn_set_state must not schedule a free now */
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
            kn_stop_begin(k, false, "kernel shut down");
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
        kn_exec_stop_timer(ex);
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
