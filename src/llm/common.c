/*  Helpers the LLM providers share: server-sent events,
 *  tool-call arguments and the "answer every tool call" rule. */
#include "provider.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void korch_llm_sse_init(korch_llm_sse_t *sse, size_t max, korch_llm_sse_fn on_event, void *arg)
{
    memset(sse, 0, sizeof *sse);
    korch_buf_init(&sse->data, max, "max_reply_bytes");
    sse->on_event = on_event;
    sse->arg = arg;
}

void korch_llm_sse_free(korch_llm_sse_t *sse)
{
    korch_buf_free(&sse->data);
}

korch_rc_t korch_llm_sse_line(void *arg, char *line, size_t len, korch_err_t *err)
{
    korch_llm_sse_t *sse = arg;
    if (len == 0) {
        /* "If the data buffer is an empty string, set the data buffer and the
           event type buffer to the empty string and return." */
        korch_rc_t rc = KORCH_OK;
        if (sse->has_data)
            rc = sse->on_event(sse->arg, sse->event, sse->data.p ? sse->data.p : (char *)"", sse->data.len, err);
        sse->event[0] = 0;
        sse->data.len = 0;
        if (sse->data.p)
            sse->data.p[0] = 0;
        sse->has_data = false;
        return rc;
    }
    if (line[0] == ':')
        return KORCH_OK;
    char *colon = memchr(line, ':', len);
    size_t nlen = colon ? (size_t)(colon - line) : len;
    const char *value = "";
    size_t vlen = 0;
    if (colon) {
        value = colon + 1;
        vlen = len - nlen - 1;
        if (vlen && *value == ' ')
            value++, vlen--;
    }
    if (nlen == 5 && memcmp(line, "event", 5) == 0) {
        snprintf(sse->event, sizeof sse->event, "%.*s", (int)vlen, value);
    } else if (nlen == 4 && memcmp(line, "data", 4) == 0) {
        korch_rc_t rc = KORCH_OK;
        if (sse->has_data)
            rc = korch_buf_add(&sse->data, "\n", 1, "streamed event", err);
        if (!rc)
            rc = korch_buf_add(&sse->data, value, vlen, "streamed event", err);
        sse->has_data = true;
        return rc;
    }
    /* id, retry and unknown fields: ignored */
    return KORCH_OK;
}

const char *korch_llm_jstr(const json_t *obj, const char *key, const char *def)
{
    const char *s = json_string_value(json_object_get(obj, key));
    return s ? s : def;
}

char *korch_llm_dumps(const json_t *v)
{
    return json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
}

char *korch_llm_data_url(const json_t *image)
{
    const char *mime = korch_llm_jstr(image, "mime", "image/png");
    const char *data = korch_llm_jstr(image, "data", "");
    size_t n = strlen(mime) + strlen(data) + 16;
    char *url = malloc(n);
    if (url)
        snprintf(url, n, "data:%s;base64,%s", mime, data);
    return url;
}

korch_rc_t korch_llm_add_call(json_t *calls, const char *id, const char *name, const char *raw, size_t raw_len,
                              korch_err_t *err)
{
    json_t *call = json_object();
    if (!call)
        return korch_err_set(err, KORCH_E_NOMEM, "out of memory");
    json_object_set_new(call, "id", json_string(id ? id : ""));
    json_object_set_new(call, "name", json_string(name ? name : ""));
    /* A call without arguments streams none: that is {} */
    size_t i = 0;
    while (i < raw_len && (raw[i] == ' ' || raw[i] == '\n' || raw[i] == '\r' || raw[i] == '\t'))
        i++;
    json_t *args = NULL;
    json_error_t jerr;
    char why[320] = "";
    if (i == raw_len) {
        args = json_object();
    } else {
        args = json_loadb(raw, raw_len, JSON_DECODE_ANY, &jerr);
        if (!args) {
            snprintf(why, sizeof why, "the tool call's arguments are not valid JSON: %s (at character %d)", jerr.text,
                     jerr.position);
        } else if (!json_is_object(args)) {
            json_decref(args);
            args = NULL;
            snprintf(why, sizeof why, "the tool call's arguments are valid JSON but not an object {\"name\": value, ...}");
        }
    }
    if (args) {
        json_object_set_new(call, "arguments", args);
    } else {
        json_object_set_new(call, "arguments_raw", json_stringn(raw, raw_len));
        json_object_set_new(call, "arguments_error", json_string(why));
    }
    if (json_array_append_new(calls, call))
        return korch_err_set(err, KORCH_E_NOMEM, "out of memory");
    return KORCH_OK;
}

json_t *korch_llm_answer_all_calls(const json_t *messages)
{
    json_t *out = json_array();
    if (!out)
        return NULL;
    size_t n = json_array_size(messages);
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(messages, i);
        json_array_append(out, m);
        json_t *calls = json_object_get(m, "tool_calls");
        if (strcmp(korch_llm_jstr(m, "role", ""), "assistant") != 0 || !json_array_size(calls))
            continue;
        /* the answers are the tool messages right after it */
        size_t j = i + 1;
        while (j < n && strcmp(korch_llm_jstr(json_array_get(messages, j), "role", ""), "tool") == 0)
            j++;
        for (size_t k = i + 1; k < j; k++)
            json_array_append(out, json_array_get(messages, k));
        size_t c;
        json_t *call;
        json_array_foreach(calls, c, call) {
            const char *id = korch_llm_jstr(call, "id", "");
            bool answered = false;
            for (size_t k = i + 1; k < j && !answered; k++)
                answered = strcmp(korch_llm_jstr(json_array_get(messages, k), "tool_call_id", ""), id) == 0;
            if (!answered)
                json_array_append_new(out, json_pack("{s:s, s:s, s:s, s:s, s:b}", "role", "tool", "tool_call_id", id,
                                                     "name", korch_llm_jstr(call, "name", ""), "content",
                                                     "(no result: the call was not run)", "is_error", 1));
        }
        i = j - 1;
    }
    return out;
}
