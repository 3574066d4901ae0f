/*  The one event schema: an agent event as the JSON object korch run
 *  --json prints one per line and korch serve streams as server-sent
 *  events (the SSE `event:` is the object's "event"). Written down in
 *  docs/events.schema.json and docs/events.md; tests validate every event
 *  of real runs against that file. */
#include "agent_int.h"

#include <string.h>

static const char *s_names[] = {
    [KORCH_AGENT_STEP] = "step",     [KORCH_AGENT_TEXT] = "text",         [KORCH_AGENT_CODE] = "code",
    [KORCH_AGENT_OUTPUT] = "output", [KORCH_AGENT_RESULT] = "result",     [KORCH_AGENT_FINAL] = "final",
    [KORCH_AGENT_ERROR] = "error",   [KORCH_AGENT_NOTICE] = "notice",     [KORCH_AGENT_CODE_DELTA] = "code_delta",
    [KORCH_AGENT_STATUS] = "status", [KORCH_AGENT_FILES] = "files",       [KORCH_AGENT_USAGE] = "usage",
    [KORCH_AGENT_VERIFY] = "verify", [KORCH_AGENT_BRANCH] = "branch",
};

const char *korch_agent_event_name(korch_agent_event_type_t type)
{
    return (size_t)type < sizeof s_names / sizeof *s_names && s_names[type] ? s_names[type] : "notice";
}

json_t *korch_agent_event_json(const korch_agent_event_t *ev)
{
    json_t *d = NULL;
    json_t *text = ev->text ? json_stringn(ev->text, ev->text_len) : json_string("");
    if (!text) /* not UTF-8 (cannot happen: korch sends text it decoded) */
        text = json_string("");
    switch (ev->type) {
    case KORCH_AGENT_TEXT:
    case KORCH_AGENT_NOTICE: d = json_pack("{s:o}", "text", text); break;
    case KORCH_AGENT_CODE_DELTA: d = json_pack("{s:o, s:i}", "text", text, "index", (int)ev->index); break;
    case KORCH_AGENT_CODE:
        d = json_pack("{s:o, s:O, s:s}", "code", text, "language",
                      json_object_get(ev->data, "language") ? json_object_get(ev->data, "language") : json_null(),
                      "source", json_string_value(json_object_get(ev->data, "source")) ?: "tool");
        break;
    case KORCH_AGENT_OUTPUT:
        d = json_pack("{s:i, s:b, s:O}", "index", (int)ev->index, "append", ev->append, "output",
                      ev->data ? ev->data : json_null());
        json_decref(text);
        break;
    case KORCH_AGENT_RESULT:
        d = ev->data ? json_deep_copy(ev->data) : json_object();
        json_object_set_new(d, "text", text);
        break;
    case KORCH_AGENT_FINAL:
        d = json_pack("{s:o}", "text", text);
        if (json_object_get(ev->data, "receipts"))
            json_object_set(d, "receipts", json_object_get(ev->data, "receipts"));
        break;
    case KORCH_AGENT_ERROR: d = json_pack("{s:o}", "message", text); break;
    case KORCH_AGENT_STATUS:
        d = ev->data ? json_deep_copy(ev->data) : json_object();
        json_decref(text);
        break;
    case KORCH_AGENT_FILES:
        d = json_pack("{s:O, s:O, s:O}", "files", json_object_get(ev->data, "files"), "total",
                      json_object_get(ev->data, "total"), "truncated",
                      json_is_true(json_object_get(ev->data, "truncated")) ? json_true() : json_false());
        json_decref(text);
        break;
    case KORCH_AGENT_VERIFY:
        d = json_pack("{s:O}", "verify", ev->data ? ev->data : json_null());
        json_decref(text);
        break;
    case KORCH_AGENT_BRANCH: /* {session, parent, llm, state} */
    case KORCH_AGENT_USAGE:
        d = ev->data ? json_deep_copy(ev->data) : json_object();
        json_decref(text);
        break;
    case KORCH_AGENT_STEP:
    default: d = json_object(); json_decref(text); break;
    }
    if (!d)
        return NULL;
    json_object_set_new(d, "event", json_string(korch_agent_event_name(ev->type)));
    json_object_set_new(d, "step", json_integer(ev->step));
    return d;
}

json_t *korch_agent_done_json(const korch_agent_t *a, korch_rc_t rc, const char *message)
{
    const char *status = rc == KORCH_OK ? "ok" : rc == KORCH_E_INTERRUPTED ? "interrupted" : "error";
    const char *cur = korch_prices_currency(a->o.prices);
    json_t *d = json_pack("{s:s, s:s, s:i, s:I, s:{s:o, s:o}, s:{s:o, s:o}}", "event", "done", "status", status,
                          "steps", a->turn_steps, "elapsed_ms", (json_int_t)a->turn_ms, "tokens", "turn",
                          korch_usage_json(&a->turn_usage), "session", korch_usage_json(&a->session_usage), "cost",
                          "turn", korch_cost_json(&a->turn_cost, cur), "session",
                          korch_cost_json(&a->session_cost, cur));
    if (d && rc != KORCH_OK && message && *message)
        json_object_set_new(d, "message", json_string(message));
    if (d && a->stopped_by[0])
        json_object_set_new(d, "stopped_by", json_string(a->stopped_by));
    /* the kernel's CPU seconds and highest peak of memory, this turn's steps and the session's (null: unknown) */
    if (d)
        json_object_set_new(d, "kernel",
                            json_pack("{s:{s:o, s:o}, s:{s:o, s:o}}", "turn", "cpu_s",
                                      a->turn_cpu_ns >= 0 ? json_real((double)a->turn_cpu_ns / 1e9) : json_null(),
                                      "mem_peak_bytes", a->turn_mem_peak >= 0 ? json_integer(a->turn_mem_peak) : json_null(),
                                      "session", "cpu_s",
                                      a->kernel_cpu_ns >= 0 ? json_real((double)a->kernel_cpu_ns / 1e9) : json_null(),
                                      "mem_peak_bytes",
                                      a->kernel_mem_peak >= 0 ? json_integer(a->kernel_mem_peak) : json_null()));
    return d;
}
