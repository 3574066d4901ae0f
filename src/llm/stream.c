/*  The streaming chat skeleton (provider.h): what OpenAI, Anthropic and
 *  Ollama calls have in common. A provider's table says how to build its
 *  request, how its stream is framed (server-sent events or NDJSON lines)
 *  and what one event means; this file makes the call (korch_llm_http_post:
 *  retries as the SDKs do), frames the stream, refuses what is not a JSON
 *  object and reports the API's mid-stream errors, reassembles the reply
 *  (text, tool calls by index with their argument fragments joined, finish
 *  reason) and says when a stream was cut before its end.
 */
#include "provider.h"

#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

korch_rc_t korch_llm_stream_text(korch_llm_stream_t *st, const char *text, size_t len, korch_err_t *err)
{
    if (!len)
        return KORCH_OK;
    korch_rc_t rc = korch_buf_add(&st->text, text, len, "reply text", err);
    if (!rc && st->cb && st->cb->on_text)
        st->cb->on_text(text, len, st->cb->arg);
    return rc;
}

static korch_rc_t s_slot(korch_llm_stream_t *st, long long index, korch_err_t *err)
{
    if (index < 0 || index >= KORCH_LLM_MAX_CALLS)
        return korch_err_set(err, KORCH_E_PROTOCOL, "the %s stream sent tool call index %lld (at most %d are kept)",
                             st->llm->prov->name, index, KORCH_LLM_MAX_CALLS);
    if (index >= st->ncalls)
        st->ncalls = (int)index + 1;
    if (!st->calls[index].args.max) /* the first event of this call */
        korch_buf_init(&st->calls[index].args, st->llm->opts.max_reply_bytes, "max_reply_bytes");
    return KORCH_OK;
}

/* *field = value when value is given and (replace or nothing there yet). */
static korch_rc_t s_set(char **field, const char *value, bool replace, korch_err_t *err)
{
    if (!value || (!replace && (!*value || *field)))
        return KORCH_OK;
    char *copy = strdup(value);
    if (!copy)
        return korch_err_set(err, KORCH_E_NOMEM, "out of memory");
    free(*field);
    *field = copy;
    return KORCH_OK;
}

korch_rc_t korch_llm_stream_call(korch_llm_stream_t *st, long long index, const char *id, const char *name,
                                 bool replace, korch_err_t *err)
{
    korch_rc_t rc = s_slot(st, index, err);
    if (!rc)
        rc = s_set(&st->calls[index].id, id, replace, err);
    if (!rc)
        rc = s_set(&st->calls[index].name, name, replace, err);
    return rc;
}

korch_rc_t korch_llm_stream_args(korch_llm_stream_t *st, long long index, const char *frag, size_t len,
                                 korch_err_t *err)
{
    korch_rc_t rc = s_slot(st, index, err);
    if (rc || !len)
        return rc;
    rc = korch_buf_add(&st->calls[index].args, frag, len, "tool call", err);
    if (!rc && st->cb && st->cb->on_tool_delta)
        st->cb->on_tool_delta((int)index, st->calls[index].name ? st->calls[index].name : "", frag, len, st->cb->arg);
    return rc;
}

void korch_llm_stream_finish(korch_llm_stream_t *st, const char *finish)
{
    if (finish)
        snprintf(st->finish, sizeof st->finish, "%s", finish);
}

void korch_llm_stream_end(korch_llm_stream_t *st) { st->ended = true; }

int korch_llm_stream_ncalls(const korch_llm_stream_t *st) { return st->ncalls; }

/* One framed event: the sentinel, else a JSON object that is not an API
   error, handed to the provider. */
static korch_rc_t s_event(korch_llm_stream_t *st, const char *event, char *data, size_t len, korch_err_t *err)
{
    const korch_llm_provider_t *p = st->llm->prov;
    if (p->sentinel && len == strlen(p->sentinel) && memcmp(data, p->sentinel, len) == 0) {
        st->ended = true;
        return KORCH_OK;
    }
    json_error_t jerr;
    json_t *obj = json_loadb(data, len, 0, &jerr);
    korch_rc_t rc = KORCH_OK;
    if (!json_is_object(obj))
        rc = korch_err_set(err, KORCH_E_PROTOCOL, "the %s stream sent %s that is not a JSON object: %s (%.80s)", p->name,
                           p->ndjson ? "a line" : "an event", jerr.text, data);
    json_t *e = json_object_get(obj, "error");
    if (!rc && e && !json_is_null(e)) {
        char msg[600];
        korch_llm_api_message(data, len, msg, sizeof msg);
        rc = korch_err_set(err, KORCH_E_HTTP, "the %s API reported an error in mid-stream: %s", p->name, msg);
    }
    if (!rc)
        rc = p->event(st, event, obj, err);
    json_decref(obj);
    return rc;
}

static korch_rc_t s_on_sse(void *arg, const char *event, char *data, size_t len, korch_err_t *err)
{
    return s_event(arg, event, data, len, err);
}

static korch_rc_t s_on_line(void *arg, char *line, size_t len, korch_err_t *err)
{
    while (len && (line[len - 1] == ' ' || line[len - 1] == '\t'))
        len--;
    return len ? s_event(arg, NULL, line, len, err) : KORCH_OK;
}

/* The reply from what the stream gave: text, calls in index order (an id
   made up where the API gave none), finish reason. */
static korch_rc_t s_reply(korch_llm_stream_t *st, korch_err_t *err)
{
    korch_llm_reply_t *reply = st->reply;
    reply->text = korch_buf_strdup(&st->text);
    reply->tool_calls = json_array();
    if (!reply->text || !reply->tool_calls)
        return korch_err_set(err, KORCH_E_NOMEM, "out of memory");
    korch_rc_t rc = KORCH_OK;
    for (int i = 0; i < st->ncalls && !rc; i++) {
        if (!st->calls[i].name && !st->calls[i].args.len)
            continue;
        char gen[32] = "";
        if (!st->calls[i].id)
            snprintf(gen, sizeof gen, "call_%lu", ++st->llm->call_seq);
        const korch_buf_t *a = &st->calls[i].args;
        rc = korch_llm_add_call(reply->tool_calls, st->calls[i].id ? st->calls[i].id : gen, st->calls[i].name,
                                a->p ? a->p : "", a->len, err);
    }
    snprintf(reply->finish, sizeof reply->finish, "%s",
             st->finish[0] ? st->finish : json_array_size(reply->tool_calls) ? "tool_calls" : "stop");
    return rc;
}

korch_rc_t korch_llm_stream_chat(korch_llm_t *llm, const korch_llm_request_t *req, const korch_llm_cb_t *cb,
                                 korch_llm_reply_t *reply, korch_err_t *err)
{
    const korch_llm_provider_t *p = llm->prov;
    korch_llm_stream_t *st = calloc(1, sizeof *st);
    korch_llm_target_t to = {0};
    korch_llm_sse_t sse;
    bool framed = false;
    size_t blen = 0;
    char *body = NULL;
    korch_rc_t rc = KORCH_OK;
    if (!st || (p->priv_size && !(st->priv = calloc(1, p->priv_size)))) {
        rc = korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        goto out;
    }
    st->llm = llm;
    st->cb = cb;
    st->reply = reply;
    korch_buf_init(&st->text, llm->opts.max_reply_bytes, "max_reply_bytes");
    if (!p->ndjson)
        korch_llm_sse_init(&sse, llm->opts.max_reply_bytes, s_on_sse, st);
    framed = !p->ndjson;
    body = p->request(llm, req, &to, &blen);
    korch_llm_post_t post = {to.url, to.headers, body, blen, p->ndjson ? s_on_line : korch_llm_sse_line,
                             p->ndjson ? (void *)st : (void *)&sse};
    rc = korch_llm_http_post(llm, &post, cb, &reply->attempts, err);
    if (!rc && !st->ended)
        rc = korch_err_set(err, KORCH_E_HTTP, "the %s stream was cut before its end (%s)", p->name, p->end);
    if (!rc)
        rc = s_reply(st, err);
out:
    if (st) {
        for (int i = 0; i < st->ncalls; i++) {
            free(st->calls[i].id);
            free(st->calls[i].name);
            korch_buf_free(&st->calls[i].args);
        }
        korch_buf_free(&st->text);
        free(st->priv);
    }
    if (framed)
        korch_llm_sse_free(&sse);
    OPENSSL_cleanse(to.secret, sizeof to.secret); /* not optimised away, unlike memset */
    free(body);
    free(st);
    return rc;
}
