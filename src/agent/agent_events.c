#include "agent_int.h"

#include "korch/buf.h"
#include "korch/log.h"
#include <errno.h>
#include <stdarg.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------- events */

void agent_emit(korch_agent_t *a, korch_agent_event_type_t type, const char *text, json_t *data)
{
    if (!a->o.on_event)
        return;
    korch_agent_event_t ev = {type, a->step, text, text ? strlen(text) : 0, data, -1, false};
    a->o.on_event(&ev, a->o.arg);
}

/* What the step waits on, for the user: sent when the phase changes and
   about every second while it lasts. */
void agent_status(korch_agent_t *a)
{
    int64_t now = korch_now_ms();
    a->status_last = now;
    if (!a->o.on_event)
        return;
    json_t *d = json_pack("{s:s, s:I}", "phase", a->phase, "elapsed_ms", (json_int_t)(now - a->phase_t0));
    if (d && strcmp(a->phase, "retry") == 0) {
        json_object_set_new(d, "attempt", json_integer(a->retry_attempt));
        json_object_set_new(d, "retry_in_ms", json_integer(a->retry_until > now ? a->retry_until - now : 0));
        if (a->retry_status)
            json_object_set_new(d, "http_status", json_integer(a->retry_status));
    }
    korch_agent_event_t ev = {KORCH_AGENT_STATUS, a->step, NULL, 0, d, -1, false};
    a->o.on_event(&ev, a->o.arg);
    json_decref(d);
}

void agent_phase(korch_agent_t *a, const char *phase)
{
    a->phase = phase;
    a->phase_t0 = korch_now_ms();
    a->retry_until = 0;
    agent_status(a);
}

/* --------------------------------------------------------- transcript */

/* A markdown cell of printf text, whole however long (a question is never
   cut); returns the text (new, for the record too) or NULL without memory. */
char *agent_add_md(korch_agent_t *a, const char *fmt, ...)
{
    korch_buf_t b = KORCH_BUF_INIT(SIZE_MAX / 2);
    va_list ap;
    va_start(ap, fmt);
    korch_rc_t rc = korch_buf_vaddf(&b, "notebook cell", NULL, fmt, ap);
    va_end(ap);
    if (rc) {
        korch_buf_free(&b);
        return NULL;
    }
    korch_notebook_add_markdown(a->nb, b.p);
    return korch_buf_release(&b, NULL);
}

/* Append one record (stolen) and flush it to disk: a crash loses nothing
   said before it. */
korch_rc_t agent_record(korch_agent_t *a, json_t *rec, korch_err_t *err)
{
    char date[32];
    korch_iso8601_now(date);
    json_object_set_new(rec, "time", json_string(date));
    char *line = json_dumps(rec, JSON_COMPACT | JSON_ENSURE_ASCII);
    json_decref(rec);
    korch_rc_t rc = KORCH_OK;
    if (!line || fprintf(a->transcript, "%s\n", line) < 0 || fflush(a->transcript) != 0 ||
        fdatasync(fileno(a->transcript)) != 0) {
        /* Most callers go on (the turn is worth finishing); the user must
           still hear that the transcript is missing a record. */
        korch_err_t e = {0};
        rc = korch_err_set(&e, KORCH_E_IO, "cannot append to '%s': %s (disk full?)", a->transcript_path,
                           strerror(errno));
        agent_emit(a, KORCH_AGENT_ERROR, e.msg, NULL);
        korch_err_set(err, rc, "%s", e.msg);
    }
    free(line);
    return rc;
}

void agent_write_notebook(korch_agent_t *a)
{
    korch_err_t err = {0};
    /* the ledger, in the notebook too: the session's tokens (null: unreported) and cost */
    json_t *md = korch_notebook_meta(a->nb);
    json_t *k = json_object_get(md, "korch");
    if (json_is_object(k))
        json_object_set_new(
            k, "ledger",
            json_pack("{s:o, s:o, s:s, s:{s:o, s:o}}", "tokens", korch_usage_json(&a->session_usage), "cost",
                      korch_cost_json(&a->session_cost, korch_prices_currency(a->o.prices)), "llm",
                      korch_llm_name(a->o.llm), "kernel", "cpu_s",
                      a->kernel_cpu_ns >= 0 ? json_real((double)a->kernel_cpu_ns / 1e9) : json_null(),
                      "mem_peak_bytes", a->kernel_mem_peak >= 0 ? json_integer(a->kernel_mem_peak) : json_null()));
    if (korch_notebook_write(a->nb, a->notebook_path, &err) != KORCH_OK)
        agent_emit(a, KORCH_AGENT_ERROR, err.msg, NULL);
}
