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

typedef struct {
    korch_llm_t *llm;
    const korch_llm_cb_t *cb;
    korch_llm_reply_t *reply;
    korch_buf_t text;
    json_t *calls;              /* CALLs as they come */
    bool done;
    char done_reason[32];
} s_stream_t;

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

static korch_rc_t s_line(void *arg, char *line, size_t len, korch_err_t *err)
{
    s_stream_t *st = arg;
    const char *name = st->llm->prov->name;
    while (len && (line[len - 1] == ' ' || line[len - 1] == '\t'))
        len--;
    if (!len)
        return KORCH_OK;
    korch_rc_t rc = KORCH_OK;
    json_error_t jerr;
    json_t *obj = json_loadb(line, len, 0, &jerr);
    if (!json_is_object(obj)) {
        rc = korch_err_set(err, KORCH_E_PROTOCOL, "the %s stream sent a line that is not a JSON object: %s (%.80s)", name,
                           jerr.text, line);
        goto out;
    }
    json_t *e = json_object_get(obj, "error");
    if (e && !json_is_null(e)) {
        char msg[600];
        korch_llm_api_message(line, len, msg, sizeof msg);
        rc = korch_err_set(err, KORCH_E_HTTP, "the %s API reported an error in mid-stream: %s", name, msg);
        goto out;
    }
    json_t *msg = json_object_get(obj, "message");
    json_t *content = json_object_get(msg, "content");
    if (json_string_length(content)) {
        rc = korch_buf_add(&st->text, json_string_value(content), json_string_length(content), "reply text", err);
        if (rc)
            goto out;
        if (st->cb && st->cb->on_text)
            st->cb->on_text(json_string_value(content), json_string_length(content), st->cb->arg);
    }
    size_t i;
    json_t *tc;
    json_array_foreach(json_object_get(msg, "tool_calls"), i, tc) {
        json_t *fn = json_object_get(tc, "function");
        json_t *args = json_object_get(fn, "arguments");
        char *raw = json_is_string(args) ? strdup(json_string_value(args)) : args ? korch_llm_dumps(args) : strdup("");
        char id[48];
        const char *given = korch_llm_jstr(tc, "id", NULL);
        snprintf(id, sizeof id, "call_%lu", ++st->llm->call_seq);
        if (!raw) {
            rc = korch_err_set(err, KORCH_E_NOMEM, "out of memory");
            goto out;
        }
        /* the arguments come whole: one fragment */
        if (st->cb && st->cb->on_tool_delta && *raw)
            st->cb->on_tool_delta((int)json_array_size(st->calls), korch_llm_jstr(fn, "name", ""), raw, strlen(raw),
                                  st->cb->arg);
        rc = korch_llm_add_call(st->calls, given && *given ? given : id, korch_llm_jstr(fn, "name", ""), raw, strlen(raw),
                                err);
        free(raw);
        if (rc)
            goto out;
    }
    if (json_is_true(json_object_get(obj, "done"))) {
        st->done = true;
        snprintf(st->done_reason, sizeof st->done_reason, "%s", korch_llm_jstr(obj, "done_reason", ""));
        json_t *p = json_object_get(obj, "prompt_eval_count"), *c = json_object_get(obj, "eval_count");
        if (json_is_integer(p))
            st->reply->input_tokens = json_integer_value(p);
        if (json_is_integer(c))
            st->reply->output_tokens = json_integer_value(c);
    }
out:
    json_decref(obj);
    return rc;
}

static korch_rc_t s_chat(korch_llm_t *llm, const korch_llm_request_t *req, const korch_llm_cb_t *cb,
                         korch_llm_reply_t *reply, korch_err_t *err)
{
    korch_rc_t rc = KORCH_OK;
    s_stream_t st = {.llm = llm, .cb = cb, .reply = reply, .calls = json_array()};
    korch_buf_init(&st.text, llm->opts.max_reply_bytes, "max_reply_bytes");
    size_t blen = 0;
    char *body = s_body(llm, req, &blen);
    char url[2048];
    snprintf(url, sizeof url, "%s/api/chat", llm->base_url);
    if (!st.calls) {
        rc = korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        goto out;
    }
    korch_llm_post_t post = {url, NULL, body, blen, s_line, &st};
    rc = korch_llm_http_post(llm, &post, cb, &reply->attempts, err);
    if (rc)
        goto out;
    if (!st.done) {
        rc = korch_err_set(err, KORCH_E_HTTP, "the %s stream was cut before its end (no line with \"done\": true)",
                           llm->prov->name);
        goto out;
    }
    reply->text = korch_buf_strdup(&st.text);
    reply->tool_calls = st.calls;
    st.calls = NULL;
    if (!reply->text) {
        rc = korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        goto out;
    }
    /* ollama says "stop" after tool calls too */
    const char *finish = json_array_size(reply->tool_calls) ? "tool_calls" : st.done_reason[0] ? st.done_reason : "stop";
    snprintf(reply->finish, sizeof reply->finish, "%s", finish);
out:
    json_decref(st.calls);
    korch_buf_free(&st.text);
    free(body);
    return rc;
}

const korch_llm_provider_t korch_llm_ollama = {
    .name = "ollama",
    .key_env = NULL,
    .url_env = "OLLAMA_HOST",
    .default_url = "http://127.0.0.1:11434",
    .key_required = false,
    .chat = s_chat,
};
