/*  Anthropic Messages API (POST {base}/v1/messages, stream: true).
 *
 *  Headers "x-api-key" and "anthropic-version: 2023-06-01"; max_tokens is
 *  required; the system prompt is top-level. The stream
 *  (docs.anthropic.com/en/docs/build-with-claude/streaming):
 *    event: message_start        message.usage.input_tokens
 *    event: content_block_start  index, content_block {type: text | tool_use {id, name}}
 *    event: content_block_delta  text_delta.text | input_json_delta.partial_json
 *    event: content_block_stop
 *    event: message_delta        delta.stop_reason, usage.output_tokens
 *    event: message_stop
 *  "ping" and "error" (e.g. overloaded_error) may come anywhere.
 *
 *  Requests: roles alternate user / assistant. A run of tool messages is ONE
 *  user turn of tool_result blocks (first in the turn), each with its text
 *  and images; every tool_use needs its tool_result in the next turn.
 */
#include "provider.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_MAX_BLOCKS 256

/* The content blocks of the reply, by their index: which are tool calls,
   and their place among the reply's calls. */
typedef struct {
    bool tool[S_MAX_BLOCKS];
    int call[S_MAX_BLOCKS];
    int ncalls;                 /* tool_use blocks begun */
} s_blocks_t;

/* ---- request ---- */

static json_t *s_text_block(const char *text)
{
    return json_pack("{s:s, s:s}", "type", "text", "text", text);
}

static void s_add_images(json_t *blocks, const json_t *images)
{
    size_t i;
    json_t *img;
    json_array_foreach(images, i, img)
        json_array_append_new(blocks, json_pack("{s:s, s:{s:s, s:s, s:s}}", "type", "image", "source", "type", "base64",
                                                "media_type", korch_llm_jstr(img, "mime", "image/png"), "data",
                                                korch_llm_jstr(img, "data", "")));
}

/* Append blocks to the conversation as role, merged into the last turn
   when it has the same role (the API wants them alternating). Tool results
   stay first in a user turn. */
static void s_push(json_t *turns, const char *role, json_t *blocks)
{
    if (!json_array_size(blocks)) {
        json_decref(blocks);
        return;
    }
    json_t *last = json_array_get(turns, json_array_size(turns) - 1);
    if (last && strcmp(korch_llm_jstr(last, "role", ""), role) == 0) {
        json_t *content = json_object_get(last, "content");
        bool results = strcmp(korch_llm_jstr(json_array_get(blocks, 0), "type", ""), "tool_result") == 0;
        if (results) {
            /* put them after the turn's existing tool results, before its text */
            size_t at = 0;
            while (at < json_array_size(content) &&
                   strcmp(korch_llm_jstr(json_array_get(content, at), "type", ""), "tool_result") == 0)
                at++;
            size_t i;
            json_t *b;
            json_array_foreach(blocks, i, b)
                json_array_insert(content, at + i, b);
        } else {
            json_array_extend(content, blocks);
        }
        json_decref(blocks);
        return;
    }
    json_array_append_new(turns, json_pack("{s:s, s:o}", "role", role, "content", blocks));
}

/* Without tools in the request the API refuses tool_use / tool_result
   blocks ("Requests which include tool_use or tool_result blocks must
   define tools"): the final, tool-less request gets them as text. */
static json_t *s_messages(const korch_llm_t *llm, const json_t *neutral, bool with_tools, json_t **system)
{
    bool vision = llm->opts.vision;
    json_t *msgs = korch_llm_answer_all_calls(neutral);
    json_t *turns = json_array();
    korch_buf_t sys = {.max = (size_t)1 << 30};
    if (!msgs || !turns)
        goto fail;
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        const char *role = korch_llm_jstr(m, "role", "");
        const char *content = korch_llm_jstr(m, "content", "");
        json_t *blocks = json_array();
        if (strcmp(role, "system") == 0) {
            if (sys.len)
                korch_buf_add(&sys, "\n\n", 2, "system prompt", NULL);
            korch_buf_add(&sys, content, strlen(content), "system prompt", NULL);
            json_decref(blocks);
            continue;
        } else if (strcmp(role, "user") == 0) {
            if (vision)
                s_add_images(blocks, json_object_get(m, "images"));
            if (*content)
                json_array_append_new(blocks, s_text_block(content));
            s_push(turns, "user", blocks);
        } else if (strcmp(role, "assistant") == 0) {
            if (*content)
                json_array_append_new(blocks, s_text_block(content));
            size_t c;
            json_t *call;
            json_array_foreach(json_object_get(m, "tool_calls"), c, call) {
                json_t *args = json_object_get(call, "arguments");
                if (with_tools) {
                    /* arguments that did not parse go back as {} (the tool result says why) */
                    json_t *input = json_is_object(args) ? json_incref(args) : json_object();
                    json_array_append_new(blocks, json_pack("{s:s, s:s, s:s, s:o}", "type", "tool_use", "id",
                                                            korch_llm_jstr(call, "id", ""), "name",
                                                            korch_llm_jstr(call, "name", ""), "input", input));
                } else {
                    char *s = args ? korch_llm_dumps(args) : strdup(korch_llm_jstr(call, "arguments_raw", ""));
                    char head[256];
                    snprintf(head, sizeof head, "[called the tool %s with the arguments ", korch_llm_jstr(call, "name", ""));
                    json_t *t = json_pack("{s:s, s:s++}", "type", "text", "text", head, s ? s : "", "]");
                    json_array_append_new(blocks, t);
                    free(s);
                }
            }
            if (!json_array_size(blocks))
                json_array_append_new(blocks, s_text_block("(no answer)"));
            s_push(turns, "assistant", blocks);
        } else if (strcmp(role, "tool") == 0) {
            json_t *inner = json_array();
            json_array_append_new(inner, s_text_block(*content ? content : "(no output)"));
            if (vision)
                s_add_images(inner, json_object_get(m, "images"));
            if (with_tools) {
                json_t *r = json_pack("{s:s, s:s, s:o}", "type", "tool_result", "tool_use_id",
                                      korch_llm_jstr(m, "tool_call_id", ""), "content", inner);
                if (json_is_true(json_object_get(m, "is_error")))
                    json_object_set_new(r, "is_error", json_true());
                json_array_append_new(blocks, r);
            } else {
                char head[256];
                snprintf(head, sizeof head, "[result of the tool call %s%s]\n", korch_llm_jstr(m, "tool_call_id", ""),
                         json_is_true(json_object_get(m, "is_error")) ? " (an error)" : "");
                json_t *t = json_array_get(inner, 0);
                json_object_set_new(t, "text", json_pack("s++", head, korch_llm_jstr(t, "text", ""), ""));
                json_array_extend(blocks, inner);
                json_decref(inner);
            }
            s_push(turns, "user", blocks);
        } else {
            json_decref(blocks);
        }
    }
    /* the first turn must be the user's */
    if (!json_array_size(turns) || strcmp(korch_llm_jstr(json_array_get(turns, 0), "role", ""), "user") != 0)
        json_array_insert_new(turns, 0, json_pack("{s:s, s:[o]}", "role", "user", "content", s_text_block("(start)")));
    *system = sys.len ? json_stringn(sys.p, sys.len) : NULL;
    korch_buf_free(&sys);
    json_decref(msgs);
    return turns;
fail:
    korch_buf_free(&sys);
    json_decref(msgs);
    json_decref(turns);
    return NULL;
}

static char *s_body(const korch_llm_t *llm, const korch_llm_request_t *req, size_t *len)
{
    bool with_tools = req->tools && json_array_size(req->tools);
    json_t *system = NULL;
    json_t *msgs = s_messages(llm, req->messages, with_tools, &system);
    if (!msgs)
        return NULL;
    json_t *body = json_pack("{s:s, s:i, s:o, s:b}", "model", llm->model, "max_tokens",
                             req->max_tokens > 0 ? req->max_tokens : 4096, "messages", msgs, "stream", 1);
    if (!body) {
        json_decref(system);
        return NULL;
    }
    if (system)
        json_object_set_new(body, "system", system);
    if (with_tools) {
        json_t *tools = json_array();
        size_t i;
        json_t *t;
        json_array_foreach(req->tools, i, t) {
            json_t *params = json_object_get(t, "parameters");
            json_t *o = json_pack("{s:s, s:o}", "name", korch_llm_jstr(t, "name", ""), "input_schema",
                                  params ? json_incref(params) : json_pack("{s:s, s:{}}", "type", "object", "properties"));
            if (json_object_get(t, "description"))
                json_object_set(o, "description", json_object_get(t, "description"));
            json_array_append_new(tools, o);
        }
        json_object_set_new(body, "tools", tools);
    }
    if (req->temperature >= 0)
        json_object_set_new(body, "temperature", json_real(req->temperature));
    char *s = korch_llm_dumps(body);
    json_decref(body);
    if (s)
        *len = strlen(s);
    return s;
}

/* The body and where it goes: {base}/v1/messages, the key in x-api-key. */
static char *s_request(korch_llm_t *llm, const korch_llm_request_t *req, korch_llm_target_t *to, size_t *len)
{
    snprintf(to->url, sizeof to->url, "%s/v1/messages", llm->base_url);
    to->headers[0] = "anthropic-version: 2023-06-01";
    if (llm->api_key) {
        snprintf(to->secret, sizeof to->secret, "x-api-key: %s", llm->api_key);
        to->headers[1] = to->secret;
    }
    return s_body(llm, req, len);
}

/* ---- stream ---- */

/* The event's content block index, or -1 (said in err). */
static int s_block(korch_llm_stream_t *st, const json_t *ev, korch_err_t *err)
{
    json_t *j = json_object_get(ev, "index");
    json_int_t idx = json_is_integer(j) ? json_integer_value(j) : -1;
    if (idx < 0 || idx >= S_MAX_BLOCKS) {
        korch_err_set(err, KORCH_E_PROTOCOL, "the %s stream sent content block index %lld (0 to %d are understood)",
                      st->llm->prov->name, (long long)idx, S_MAX_BLOCKS - 1);
        return -1;
    }
    return (int)idx;
}

static const char *s_finish(const char *stop_reason)
{
    if (strcmp(stop_reason, "end_turn") == 0 || strcmp(stop_reason, "stop_sequence") == 0)
        return "stop";
    if (strcmp(stop_reason, "tool_use") == 0)
        return "tool_calls";
    if (strcmp(stop_reason, "max_tokens") == 0)
        return "length";
    if (strcmp(stop_reason, "refusal") == 0)
        return "content_filter";
    return stop_reason;
}

/* One event: usage at message_start and message_delta, text and tool_use
   blocks, the stop reason, message_stop the end. ("error" events are the
   skeleton's.) */
static korch_rc_t s_event(korch_llm_stream_t *st, const char *event, json_t *ev, korch_err_t *err)
{
    s_blocks_t *bl = st->priv;
    korch_rc_t rc = KORCH_OK;
    const char *type = korch_llm_jstr(ev, "type", event ? event : "");
    int b;
    if (strcmp(type, "message_start") == 0) {
        json_t *usage = json_object_get(json_object_get(ev, "message"), "usage");
        json_t *in = json_object_get(usage, "input_tokens");
        if (json_is_integer(in)) {
            /* cached prompt tokens are counted apart */
            json_int_t n = json_integer_value(in);
            json_t *cc = json_object_get(usage, "cache_creation_input_tokens");
            json_t *cr = json_object_get(usage, "cache_read_input_tokens");
            n += json_is_integer(cc) ? json_integer_value(cc) : 0;
            n += json_is_integer(cr) ? json_integer_value(cr) : 0;
            st->reply->input_tokens = n;
        }
        json_t *outt = json_object_get(usage, "output_tokens");
        if (json_is_integer(outt))
            st->reply->output_tokens = json_integer_value(outt);
    } else if (strcmp(type, "content_block_start") == 0) {
        if ((b = s_block(st, ev, err)) < 0)
            return err ? err->rc : KORCH_E_PROTOCOL;
        json_t *cb = json_object_get(ev, "content_block");
        const char *btype = korch_llm_jstr(cb, "type", "");
        if (strcmp(btype, "tool_use") == 0) {
            if (!bl->tool[b])
                bl->call[b] = bl->ncalls++;
            bl->tool[b] = true;
            rc = korch_llm_stream_call(st, bl->call[b], korch_llm_jstr(cb, "id", ""), korch_llm_jstr(cb, "name", ""),
                                       true, err);
            /* a complete input given at the start (none in practice) */
            json_t *input = json_object_get(cb, "input");
            if (!rc && json_object_size(input)) {
                char *s = korch_llm_dumps(input);
                if (s)
                    rc = korch_llm_stream_args(st, bl->call[b], s, strlen(s), err);
                free(s);
            }
        } else if (strcmp(btype, "text") == 0) {
            const char *t = korch_llm_jstr(cb, "text", "");
            rc = korch_llm_stream_text(st, t, strlen(t), err);
        }
    } else if (strcmp(type, "content_block_delta") == 0) {
        if ((b = s_block(st, ev, err)) < 0)
            return err ? err->rc : KORCH_E_PROTOCOL;
        json_t *d = json_object_get(ev, "delta");
        const char *dtype = korch_llm_jstr(d, "type", "");
        if (strcmp(dtype, "text_delta") == 0) {
            json_t *t = json_object_get(d, "text");
            rc = korch_llm_stream_text(st, json_string_value(t), json_string_length(t), err);
        } else if (strcmp(dtype, "input_json_delta") == 0 && bl->tool[b]) {
            json_t *pj = json_object_get(d, "partial_json");
            rc = korch_llm_stream_args(st, bl->call[b], json_string_value(pj), json_string_length(pj), err);
        }
        /* thinking_delta, signature_delta, citations_delta: not shown */
    } else if (strcmp(type, "message_delta") == 0) {
        const char *sr = korch_llm_jstr(json_object_get(ev, "delta"), "stop_reason", NULL);
        if (sr)
            korch_llm_stream_finish(st, s_finish(sr));
        json_t *outt = json_object_get(json_object_get(ev, "usage"), "output_tokens");
        if (json_is_integer(outt))
            st->reply->output_tokens = json_integer_value(outt);
    } else if (strcmp(type, "message_stop") == 0)
        korch_llm_stream_end(st);
    /* ping, content_block_stop and unknown events: nothing to do */
    return rc;
}

const korch_llm_provider_t korch_llm_anthropic = {
    .name = "anthropic",
    .key_env = "ANTHROPIC_API_KEY",
    .url_env = "ANTHROPIC_BASE_URL",
    .default_url = "https://api.anthropic.com",
    .key_required = true,
    .chat = korch_llm_stream_chat,
    .request = s_request,
    .end = "no message_stop event",
    .event = s_event,
    .priv_size = sizeof(s_blocks_t),
};
