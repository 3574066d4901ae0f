/*  Ollama's native chat API (POST {OLLAMA_HOST}/api/chat).
 *
 *  The stream is NDJSON, one object per line (ollama docs/api.md "Generate a
 *  chat completion"):
 *    {"model":..,"created_at":..,"message":{"role":"assistant","content":"..",
 *     "tool_calls":[{"function":{"name":..,"arguments":{...}}}]},"done":false}
 *    {..,"done":true,"done_reason":"stop","prompt_eval_count":N,"eval_count":M}
 *  or {"error":".."}. Tool-call arguments are a JSON object, not a string,
 *  and calls have no ids: korch makes "call_N". Images are raw base64 in
 *  message.images. The default context (2048 or 4096 tokens) is too small for
 *  an analysis: options.num_ctx is always sent.
 */
#include "provider.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static json_t *s_images(const json_t *images)
{
    json_t *out = json_array();
    size_t i;
    json_t *img;
    json_array_foreach(images, i, img)
        json_array_append_new(out, json_string(korch_llm_jstr(img, "data", "")));
    return out;
}

static json_t *s_messages(const korch_llm_t *llm, const json_t *neutral)
{
    bool vision = llm->opts.vision;
    json_t *msgs = korch_llm_answer_all_calls(neutral);
    json_t *out = json_array();
    json_t *pending = json_array();
    if (!msgs || !out || !pending) {
        json_decref(msgs);
        json_decref(out);
        json_decref(pending);
        return NULL;
    }
    size_t n = json_array_size(msgs);
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(msgs, i);
        const char *role = korch_llm_jstr(m, "role", "");
        const char *content = korch_llm_jstr(m, "content", "");
        json_t *images = json_object_get(m, "images");
        json_t *o = json_pack("{s:s, s:s}", "role", role, "content", content);
        if (!o)
            continue;
        if (strcmp(role, "user") == 0 && vision && json_array_size(images)) {
            json_object_set_new(o, "images", s_images(images));
        } else if (strcmp(role, "assistant") == 0 && json_array_size(json_object_get(m, "tool_calls"))) {
            json_t *tc = json_array();
            size_t c;
            json_t *call;
            json_array_foreach(json_object_get(m, "tool_calls"), c, call) {
                json_t *args = json_object_get(call, "arguments");
                json_array_append_new(tc, json_pack("{s:{s:s, s:o}}", "function", "name", korch_llm_jstr(call, "name", ""),
                                                    "arguments", json_is_object(args) ? json_incref(args) : json_object()));
            }
            json_object_set_new(o, "tool_calls", tc);
        } else if (strcmp(role, "tool") == 0) {
            /* "tool_name" since ollama 0.9; older versions read content only */
            json_object_set_new(o, "tool_name", json_string(korch_llm_jstr(m, "name", "")));
            if (!*content)
                json_object_set_new(o, "content", json_string("(no output)"));
            if (vision && json_array_size(images))
                json_array_extend(pending, images);
        } else if (strcmp(role, "system") != 0 && strcmp(role, "user") != 0 && strcmp(role, "assistant") != 0) {
            json_decref(o);
            continue;
        }
        json_array_append_new(out, o);
        /* images of a run of tool results follow in one user message: every
           model's template shows user messages, not all show tool ones */
        const char *next = i + 1 < n ? korch_llm_jstr(json_array_get(msgs, i + 1), "role", "") : "";
        if (strcmp(role, "tool") == 0 && strcmp(next, "tool") != 0 && json_array_size(pending)) {
            json_array_append_new(out, json_pack("{s:s, s:s, s:o}", "role", "user", "content",
                                                 "images from the tool results above", "images", s_images(pending)));
            json_array_clear(pending);
        }
    }
    json_decref(msgs);
    json_decref(pending);
    return out;
}

static char *s_body(const korch_llm_t *llm, const korch_llm_request_t *req, size_t *len)
{
    json_t *msgs = s_messages(llm, req->messages);
    if (!msgs)
        return NULL;
    json_t *body = json_pack("{s:s, s:o, s:b, s:{s:i}}", "model", llm->model, "messages", msgs, "stream", 1, "options",
                             "num_ctx", llm->opts.num_ctx);
    if (!body)
        return NULL;
    json_t *options = json_object_get(body, "options");
    if (req->max_tokens > 0)
        json_object_set_new(options, "num_predict", json_integer(req->max_tokens));
    if (req->temperature >= 0)
        json_object_set_new(options, "temperature", json_real(req->temperature));
    if (req->tools && json_array_size(req->tools)) {
        json_t *tools = json_array();
        size_t i;
        json_t *t;
        json_array_foreach(req->tools, i, t) {
            json_t *params = json_object_get(t, "parameters");
            json_t *fn = json_pack("{s:s, s:s, s:o}", "name", korch_llm_jstr(t, "name", ""), "description",
                                   korch_llm_jstr(t, "description", ""), "parameters",
                                   params ? json_incref(params) : json_pack("{s:s, s:{}}", "type", "object", "properties"));
            json_array_append_new(tools, json_pack("{s:s, s:o}", "type", "function", "function", fn));
        }
        json_object_set_new(body, "tools", tools);
    }
    char *s = korch_llm_dumps(body);
    json_decref(body);
    if (s)
        *len = strlen(s);
    return s;
}

/* The body and where it goes: {OLLAMA_HOST}/api/chat, no key. */
static char *s_request(korch_llm_t *llm, const korch_llm_request_t *req, korch_llm_target_t *to, size_t *len)
{
    snprintf(to->url, sizeof to->url, "%s/api/chat", llm->base_url);
    return s_body(llm, req, len);
}

/* One line: the message's text, its tool calls (each whole, in one
   fragment; korch makes the ids Ollama does not give), the counts and the
   end at "done". ({"error": ...} lines are the skeleton's.) */
static korch_rc_t s_event(korch_llm_stream_t *st, const char *event, json_t *obj, korch_err_t *err)
{
    json_t *msg = json_object_get(obj, "message");
    json_t *content = json_object_get(msg, "content");
    korch_rc_t rc = korch_llm_stream_text(st, json_string_value(content), json_string_length(content), err);
    size_t i;
    json_t *tc;
    json_array_foreach(json_object_get(msg, "tool_calls"), i, tc) {
        if (rc)
            break;
        json_t *fn = json_object_get(tc, "function");
        json_t *args = json_object_get(fn, "arguments");
        char *raw = json_is_string(args) ? strdup(json_string_value(args)) : args ? korch_llm_dumps(args) : strdup("");
        char id[48];
        const char *given = korch_llm_jstr(tc, "id", NULL);
        snprintf(id, sizeof id, "call_%lu", ++st->llm->call_seq);
        int n = korch_llm_stream_ncalls(st);
        if (!raw)
            rc = korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        if (!rc)
            rc = korch_llm_stream_call(st, n, given && *given ? given : id, korch_llm_jstr(fn, "name", ""), true, err);
        if (!rc)
            rc = korch_llm_stream_args(st, n, raw, strlen(raw), err);
        free(raw);
    }
    if (!rc && json_is_true(json_object_get(obj, "done"))) {
        /* ollama says "stop" after tool calls too */
        korch_llm_stream_finish(st, korch_llm_stream_ncalls(st) ? "tool_calls" : korch_llm_jstr(obj, "done_reason", ""));
        korch_llm_stream_end(st);
        json_t *p = json_object_get(obj, "prompt_eval_count"), *c = json_object_get(obj, "eval_count");
        if (json_is_integer(p))
            st->reply->input_tokens = json_integer_value(p);
        if (json_is_integer(c))
            st->reply->output_tokens = json_integer_value(c);
    }
    return rc;
}

const korch_llm_provider_t korch_llm_ollama = {
    .name = "ollama",
    .key_env = NULL,
    .url_env = "OLLAMA_HOST",
    .default_url = "http://127.0.0.1:11434",
    .key_required = false,
    .chat = korch_llm_stream_chat,
    .request = s_request,
    .ndjson = true,
    .end = "no line with \"done\": true",
    .event = s_event,
};
