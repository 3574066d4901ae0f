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
#include <stdlib.h>
#include <string.h>

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

/* The body and where it goes: {base}/chat/completions, the key as a bearer token. */
static char *s_request(korch_llm_t *llm, const korch_llm_request_t *req, korch_llm_target_t *to, size_t *len)
{
    snprintf(to->url, sizeof to->url, "%s/chat/completions", llm->base_url);
    if (llm->api_key) {
        snprintf(to->secret, sizeof to->secret, "Authorization: Bearer %s", llm->api_key);
        to->headers[0] = to->secret;
    }
    return s_body(llm, req, len);
}

/* ---- stream ---- */

/* One chunk: usage, the delta's text (or refusal), tool-call fragments, the
   finish reason. ([DONE] and "error" chunks are the skeleton's.) */
static korch_rc_t s_event(korch_llm_stream_t *st, const char *event, json_t *chunk, korch_err_t *err)
{
    korch_rc_t rc = KORCH_OK;
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
        return KORCH_OK;
    json_t *delta = json_object_get(choice, "delta");
    json_t *text = json_object_get(delta, "content");
    if (!json_is_string(text))
        text = json_object_get(delta, "refusal");
    if (json_is_string(text))
        rc = korch_llm_stream_text(st, json_string_value(text), json_string_length(text), err);
    size_t i;
    json_t *tc;
    json_array_foreach(json_object_get(delta, "tool_calls"), i, tc) {
        if (rc)
            break;
        json_t *jidx = json_object_get(tc, "index");
        json_int_t idx = json_is_integer(jidx) ? json_integer_value(jidx) : (json_int_t)i;
        json_t *fn = json_object_get(tc, "function");
        rc = korch_llm_stream_call(st, idx, korch_llm_jstr(tc, "id", NULL), korch_llm_jstr(fn, "name", NULL), false, err);
        json_t *args = json_object_get(fn, "arguments");
        /* some servers copying the API send the object itself */
        char *dumped = json_is_object(args) ? korch_llm_dumps(args) : NULL;
        if (!rc && json_is_object(args) && !dumped)
            rc = korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        else if (!rc && json_is_string(args))
            rc = korch_llm_stream_args(st, idx, json_string_value(args), json_string_length(args), err);
        else if (!rc && dumped)
            rc = korch_llm_stream_args(st, idx, dumped, strlen(dumped), err);
        free(dumped);
    }
    if (!rc)
        korch_llm_stream_finish(st, korch_llm_jstr(choice, "finish_reason", NULL));
    return rc;
}

const korch_llm_provider_t korch_llm_openai = {
    .name = "openai",
    .key_env = "OPENAI_API_KEY",
    .url_env = "OPENAI_BASE_URL",
    .default_url = "https://api.openai.com/v1",
    .key_required = true,
    .chat = korch_llm_stream_chat,
    .request = s_request,
    .sentinel = "[DONE]",
    .end = "no 'data: [DONE]'",
    .event = s_event,
};
