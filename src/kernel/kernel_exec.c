/*  korch_kernel's executions: an execution is done when both its
 *  execute_reply (shell) and its status: idle (iopub) have arrived, in
 *  either order; timeouts interrupt, then restart. */
#include "kernel_int.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------- executions */

void kn_exec_stop_timer(korch_exec_t *ex)
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
    kn_exec_stop_timer(ex);
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
void kn_exec_maybe_done(korch_exec_t *ex)
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

korch_exec_t *kn_find_exec(korch_kernel_t *k, const char *msg_id)
{
    if (!msg_id || !*msg_id)
        return NULL;
    for (korch_exec_t *ex = zlistx_first(k->pending); ex; ex = zlistx_next(k->pending))
        if (strcmp(ex->msg_id, msg_id) == 0)
            return ex;
    return NULL;
}

void kn_exec_fail(korch_exec_t *ex, const char *detail) { s_exec_complete(ex, KORCH_EXEC_DIED, detail); }

/* End every pending execution, e.g. because the kernel died. When the
   kernel is restarted, requests not sent yet stay queued for the new one. */
void kn_fail_pending(korch_kernel_t *k, const char *detail, bool restarted)
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
        kn_fail_pending(k, err.msg, false);
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

korch_rc_t kn_exec_send(korch_exec_t *ex, korch_err_t *err)
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

void kn_flush_unsent(korch_kernel_t *k)
{
    for (korch_exec_t *ex = zlistx_first(k->pending); ex; ex = zlistx_next(k->pending)) {
        if (ex->sent)
            continue;
        korch_err_t err = {0};
        if (kn_exec_send(ex, &err) != KORCH_OK) {
            s_exec_complete(ex, KORCH_EXEC_DIED, err.msg);
            return; /* the list changed under us; the rest waits for the next ready */
        }
    }
}

