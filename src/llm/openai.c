/*  OpenAI Chat Completions (POST {base}/chat/completions, stream: true).
 *
 *  The stream (platform.openai.com/docs/api-reference/chat-streaming):
 *    data: {"id":...,"object":"chat.completion.chunk","choices":[{"index":0,
 *           "delta":{"content":"..."} | {"tool_calls":[{"index":0,"id":"call_..",
 *           "type":"function","function":{"name":"..","arguments":""}}]},
 *           "finish_reason":null}],"usage":null}
 *    ... "finish_reason": "stop" | "length" | "tool_calls" | "content_filter"
 *    data: {"choices":[],"usage":{...}}          with stream_options.include_usage
 *    data: [DONE]
 *  A chunk with an "error" key is an error in mid-stream. Tool-call
 *  "arguments" are fragments of one JSON string, joined per index; the id and
 *  name come in the first fragment only.
 *
 *  Requests: tool messages carry text only ("role":"tool","tool_call_id");
 *  images go in ONE user message after the run of tool messages, as
 *  image_url data URLs. Every tool_call_id must be answered.
 */
#include "provider.h"

#include <stdio.h>
#include <openssl/crypto.h>
#include <stdlib.h>
#include <string.h>

#define S_MAX_CALLS 128

typedef struct {
    char *id, *name;
    korch_buf_t args;
} s_call_t;

typedef struct {
    korch_llm_t *llm;
    const korch_llm_cb_t *cb;
    korch_llm_reply_t *reply;
    korch_buf_t text;
    s_call_t calls[S_MAX_CALLS];
    int ncalls;                 /* highest index + 1 */
    bool done;                  /* [DONE] seen */
    char finish[32];
} s_stream_t;

/* ---- request ---- */

static json_t *s_image_parts(json_t *parts, const json_t *images)
{
    size_t i;
    json_t *img;
    json_array_foreach(images, i, img) {
        char *url = korch_llm_data_url(img);
        if (url)
            json_array_append_new(parts, json_pack("{s:s, s:{s:s}}", "type", "image_url", "image_url", "url", url));
        free(url);
    }
    return parts;
}

static json_t *s_user(const char *text, const json_t *images, bool vision)
{
    if (!vision || !json_array_size(images))
        return json_pack("{s:s, s:s}", "role", "user", "content", text);
    json_t *parts = json_array();
    if (*text)
        json_array_append_new(parts, json_pack("{s:s, s:s}", "type", "text", "text", text));
    return json_pack("{s:s, s:o}", "role", "user", "content", s_image_parts(parts, images));
}

static json_t *s_messages(const korch_llm_t *llm, const json_t *neutral)
{
    bool vision = llm->opts.vision;
    json_t *msgs = korch_llm_answer_all_calls(neutral);
    json_t *out = json_array();
    json_t *pending = json_array();      /* images of the current run of tool messages */
    json_t *pending_names = json_array();
    if (!msgs || !out || !pending || !pending_names)
        goto fail;
    size_t n = json_array_size(msgs);
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(msgs, i);
        const char *role = korch_llm_jstr(m, "role", "");
        const char *content = korch_llm_jstr(m, "content", "");
        json_t *o = NULL;
        if (strcmp(role, "system") == 0) {
            o = json_pack("{s:s, s:s}", "role", "system", "content", content);
        } else if (strcmp(role, "user") == 0) {
            o = s_user(content, json_object_get(m, "images"), vision);
        } else if (strcmp(role, "assistant") == 0) {
            json_t *calls = json_object_get(m, "tool_calls");
            o = json_pack("{s:s}", "role", "assistant");
            json_object_set_new(o, "content", *content || !json_array_size(calls) ? json_string(content) : json_null());
            if (json_array_size(calls)) {
                json_t *tc = json_array();
                size_t c;
                json_t *call;
                json_array_foreach(calls, c, call) {
                    json_t *args = json_object_get(call, "arguments");
                    char *s = args ? korch_llm_dumps(args) : strdup(korch_llm_jstr(call, "arguments_raw", "{}"));
                    json_array_append_new(tc, json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", korch_llm_jstr(call, "id", ""),
                                                        "type", "function", "function", "name",
                                                        korch_llm_jstr(call, "name", ""), "arguments", s ? s : "{}"));
                    free(s);
                }
                json_object_set_new(o, "tool_calls", tc);
            }
        } else if (strcmp(role, "tool") == 0) {
            o = json_pack("{s:s, s:s, s:s}", "role", "tool", "tool_call_id", korch_llm_jstr(m, "tool_call_id", ""),
                          "content", *content ? content : "(no output)");
            json_t *images = json_object_get(m, "images");
            if (vision && json_array_size(images)) {
                json_array_extend(pending, images);
                size_t k;
                json_t *img;
                json_array_foreach(images, k, img)
                    json_array_append_new(pending_names, json_string(korch_llm_jstr(img, "name", "image")));
            }
        } else {
            continue;
        }
        if (!o || json_array_append_new(out, o))
            goto fail;
        /* the run of tool messages ends: its images follow as one user message */
        const char *next = i + 1 < n ? korch_llm_jstr(json_array_get(msgs, i + 1), "role", "") : "";
        if (strcmp(role, "tool") == 0 && strcmp(next, "tool") != 0 && json_array_size(pending)) {
            char text[1024] = "images from the tool results above:";
            size_t k;
            json_t *nm;
            json_array_foreach(pending_names, k, nm) {
                size_t l = strlen(text);
                snprintf(text + l, sizeof text - l, "%s %s", k ? "," : "", json_string_value(nm));
            }
            json_array_append_new(out, s_user(text, pending, true));
            json_array_clear(pending);
            json_array_clear(pending_names);
        }
    }
    json_decref(msgs);
    json_decref(pending);
    json_decref(pending_names);
    return out;
fail:
    json_decref(msgs);
    json_decref(pending);
    json_decref(pending_names);
    json_decref(out);
    return NULL;
}

/* Reasoning models (o1, o3, o4, gpt-5) take max_completion_tokens only;
   servers that copy the API (vLLM, llama.cpp, ollama /v1) know max_tokens. */
static bool s_reasoning_model(const char *model)
{
    return (model[0] == 'o' && model[1] >= '1' && model[1] <= '9') || strncmp(model, "gpt-5", 5) == 0;
}

static char *s_body(const korch_llm_t *llm, const korch_llm_request_t *req, size_t *len)
{
    json_t *msgs = s_messages(llm, req->messages);
    if (!msgs)
        return NULL;
    json_t *body = json_pack("{s:s, s:o, s:b, s:{s:b}}", "model", llm->model, "messages", msgs, "stream", 1,
                             "stream_options", "include_usage", 1);
    if (!body)
        return NULL;
    if (req->tools && json_array_size(req->tools)) {
        json_t *tools = json_array();
        size_t i;
        json_t *t;
        json_array_foreach(req->tools, i, t) {
            json_t *fn = json_pack("{s:s}", "name", korch_llm_jstr(t, "name", ""));
            if (json_object_get(t, "description"))
                json_object_set(fn, "description", json_object_get(t, "description"));
            json_t *params = json_object_get(t, "parameters");
            json_object_set_new(fn, "parameters", params ? json_incref(params) : json_pack("{s:s, s:{}}", "type", "object", "properties"));
            json_array_append_new(tools, json_pack("{s:s, s:o}", "type", "function", "function", fn));
        }
        json_object_set_new(body, "tools", tools);
    }
    if (req->max_tokens > 0)
        json_object_set_new(body, s_reasoning_model(llm->model) ? "max_completion_tokens" : "max_tokens",
                            json_integer(req->max_tokens));
    if (req->temperature >= 0)
        json_object_set_new(body, "temperature", json_real(req->temperature));
    char *s = korch_llm_dumps(body);
    json_decref(body);
    if (s)
        *len = strlen(s);
    return s;
}

/* ---- stream ---- */

static korch_rc_t s_event(void *arg, const char *event, char *data, size_t len, korch_err_t *err)
{
    s_stream_t *st = arg;
    const char *name = st->llm->prov->name;
    if (len == 6 && memcmp(data, "[DONE]", 6) == 0) {
        st->done = true;
        return KORCH_OK;
    }
    json_error_t jerr;
    json_t *chunk = json_loadb(data, len, 0, &jerr);
    korch_rc_t rc = KORCH_OK;
    if (!json_is_object(chunk)) {
        rc = korch_err_set(err, KORCH_E_PROTOCOL, "the %s stream sent an event that is not a JSON object: %s (%.80s)",
                           name, jerr.text, data);
        goto out;
    }
    json_t *e = json_object_get(chunk, "error");
    if (e && !json_is_null(e)) {
        char *s = korch_llm_dumps(chunk);
        char msg[600];
        korch_llm_api_message(s, s ? strlen(s) : 0, msg, sizeof msg);
        free(s);
        rc = korch_err_set(err, KORCH_E_HTTP, "the %s API reported an error in mid-stream: %s", name, msg);
        goto out;
    }
    json_t *usage = json_object_get(chunk, "usage");
    if (json_is_object(usage)) {
        json_t *p = json_object_get(usage, "prompt_tokens"), *c = json_object_get(usage, "completion_tokens");
        if (json_is_integer(p))
            st->reply->input_tokens = json_integer_value(p);
        if (json_is_integer(c))
            st->reply->output_tokens = json_integer_value(c);
    }
    json_t *choice = json_array_get(json_object_get(chunk, "choices"), 0);
    if (!choice)
        goto out;
    json_t *delta = json_object_get(choice, "delta");
    const char *text = korch_llm_jstr(delta, "content", NULL);
    if (!text)
        text = korch_llm_jstr(delta, "refusal", NULL);
    if (text && *text) {
        size_t tl = json_string_length(json_object_get(delta, "content") ? json_object_get(delta, "content")
                                                                           : json_object_get(delta, "refusal"));
        rc = korch_buf_add(&st->text, text, tl, "reply text", err);
        if (rc)
            goto out;
        if (st->cb && st->cb->on_text)
            st->cb->on_text(text, tl, st->cb->arg);
    }
    size_t i;
    json_t *tc;
    json_array_foreach(json_object_get(delta, "tool_calls"), i, tc) {
        json_t *jidx = json_object_get(tc, "index");
        json_int_t idx = json_is_integer(jidx) ? json_integer_value(jidx) : (json_int_t)i;
        if (idx < 0 || idx >= S_MAX_CALLS) {
            rc = korch_err_set(err, KORCH_E_PROTOCOL, "the %s stream sent tool call index %lld (at most %d are kept)",
                               name, (long long)idx, S_MAX_CALLS);
            goto out;
        }
        s_call_t *call = &st->calls[idx];
        if (idx >= st->ncalls)
            st->ncalls = (int)idx + 1;
        if (!call->args.max) /* the first delta of this call */
            korch_buf_init(&call->args, st->llm->opts.max_reply_bytes, "max_reply_bytes");
        const char *id = korch_llm_jstr(tc, "id", NULL);
        json_t *fn = json_object_get(tc, "function");
        const char *fname = korch_llm_jstr(fn, "name", NULL);
        if (id && *id && !call->id)
            call->id = strdup(id);
        if (fname && *fname && !call->name)
            call->name = strdup(fname);
        json_t *args = json_object_get(fn, "arguments");
        char *dumped = json_is_object(args) ? korch_llm_dumps(args) : NULL; /* some servers copying the API send the object itself */
        const char *frag = json_is_string(args) ? json_string_value(args) : dumped;
        size_t flen = json_is_string(args) ? json_string_length(args) : dumped ? strlen(dumped) : 0;
        if (json_is_object(args) && !dumped)
            rc = korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        else if (frag && flen) {
            rc = korch_buf_add(&call->args, frag, flen, "tool call", err);
            if (!rc && st->cb && st->cb->on_tool_delta)
                st->cb->on_tool_delta((int)idx, call->name ? call->name : "", frag, flen, st->cb->arg);
        }
        free(dumped);
        if (rc)
            goto out;
    }
    const char *finish = korch_llm_jstr(choice, "finish_reason", NULL);
    if (finish)
        snprintf(st->finish, sizeof st->finish, "%s", finish);
out:
    json_decref(chunk);
    return rc;
}

static korch_rc_t s_chat(korch_llm_t *llm, const korch_llm_request_t *req, const korch_llm_cb_t *cb,
                         korch_llm_reply_t *reply, korch_err_t *err)
{
    korch_rc_t rc = KORCH_OK;
    s_stream_t st = {.llm = llm, .cb = cb, .reply = reply};
    korch_buf_init(&st.text, llm->opts.max_reply_bytes, "max_reply_bytes");
    korch_llm_sse_t sse;
    korch_llm_sse_init(&sse, llm->opts.max_reply_bytes, s_event, &st);
    size_t blen = 0;
    char *body = s_body(llm, req, &blen);
    char url[2048], auth[1024];
    snprintf(url, sizeof url, "%s/chat/completions", llm->base_url);
    const char *headers[2] = {NULL, NULL};
    if (llm->api_key) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", llm->api_key);
        headers[0] = auth;
    }
    korch_llm_post_t post = {url, headers, body, blen, korch_llm_sse_line, &sse};
    rc = korch_llm_http_post(llm, &post, cb, &reply->attempts, err);
    if (rc)
        goto out;
    if (!st.done) {
        rc = korch_err_set(err, KORCH_E_HTTP, "the %s stream was cut before its end (no 'data: [DONE]')", llm->prov->name);
        goto out;
    }
    reply->text = korch_buf_strdup(&st.text);
    reply->tool_calls = json_array();
    if (!reply->text || !reply->tool_calls) {
        rc = korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        goto out;
    }
    for (int i = 0; i < st.ncalls && !rc; i++) {
        s_call_t *c = &st.calls[i];
        if (!c->name && !c->args.len)
            continue;
        char gen[32];
        snprintf(gen, sizeof gen, "call_%lu", ++llm->call_seq);
        rc = korch_llm_add_call(reply->tool_calls, c->id ? c->id : gen, c->name, c->args.p ? c->args.p : "",
                                c->args.len, err);
    }
    snprintf(reply->finish, sizeof reply->finish, "%s",
             st.finish[0] ? st.finish : json_array_size(reply->tool_calls) ? "tool_calls" : "stop");
out:
    for (int i = 0; i < st.ncalls; i++) {
        free(st.calls[i].id);
        free(st.calls[i].name);
        korch_buf_free(&st.calls[i].args);
    }
    korch_buf_free(&st.text);
    korch_llm_sse_free(&sse);
    if (llm->api_key)
        OPENSSL_cleanse(auth, sizeof auth);
    free(body);
    return rc;
}

const korch_llm_provider_t korch_llm_openai = {
    .name = "openai",
    .key_env = "OPENAI_API_KEY",
    .url_env = "OPENAI_BASE_URL",
    .default_url = "https://api.openai.com/v1",
    .key_required = true,
    .chat = s_chat,
};
