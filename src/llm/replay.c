/*  replay: plays a recorded conversation instead of calling a model.
 *
 *  The recording (opts.model is its path):
 *    {"notice": "...",
 *     "replies": [{"text": "...", "tool_calls": [{"name": "...", "arguments": {...}}]}, ...]}
 *  Each call returns the next reply whatever was asked; its text streams to
 *  on_text a line at a time. Tool calls get the ids "replay_N".
 */
#include "provider.h"
#include "korch/media.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_MAX_RECORDING (64u << 20)

typedef struct {
    json_t *replies;
    size_t next;
    unsigned long ids;
} s_replay_t;

static korch_rc_t s_init(korch_llm_t *llm, korch_err_t *err)
{
    korch_rc_t rc = KORCH_OK;
    size_t len = 0;
    json_t *root = NULL;
    korch_err_t rerr = {0};
    char *text = korch_read_file(llm->model, S_MAX_RECORDING, &len, &rerr);
    if (!text)
        return korch_err_set(err, rerr.rc ? rerr.rc : KORCH_E_IO, "cannot read the recording '%s': %s", llm->model,
                             rerr.msg[0] ? rerr.msg : "unreadable");
    json_error_t jerr;
    root = json_loadb(text, len, 0, &jerr);
    free(text);
    json_t *replies = json_object_get(root, "replies");
    if (!root) {
        rc = korch_err_set(err, KORCH_E_INVALID, "the recording '%s' is not JSON: %s (line %d)", llm->model, jerr.text,
                           jerr.line);
        goto out;
    }
    if (!json_is_array(replies)) {
        rc = korch_err_set(err, KORCH_E_INVALID, "the recording '%s' has no \"replies\" array", llm->model);
        goto out;
    }
    size_t i;
    json_t *r;
    json_array_foreach(replies, i, r) {
        if (!json_is_object(r) || (json_object_get(r, "text") && !json_is_string(json_object_get(r, "text"))) ||
            (json_object_get(r, "tool_calls") && !json_is_array(json_object_get(r, "tool_calls")))) {
            rc = korch_err_set(err, KORCH_E_INVALID,
                               "reply %zu of the recording '%s' is not {\"text\": \"...\", \"tool_calls\": [...]}", i + 1,
                               llm->model);
            goto out;
        }
    }
    s_replay_t *st = calloc(1, sizeof *st);
    const char *recorded = korch_llm_jstr(root, "notice", NULL);
    size_t nl = strlen(llm->model) + (recorded ? strlen(recorded) : 0) + 128;
    llm->notice = malloc(nl);
    if (!st || !llm->notice) {
        free(st);
        rc = korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        goto out;
    }
    snprintf(llm->notice, nl, "replaying a recorded conversation from %s; no model is being called%s%s", llm->model,
             recorded ? ": " : "", recorded ? recorded : "");
    st->replies = json_incref(replies);
    llm->priv = st;
out:
    json_decref(root);
    return rc;
}

static void s_fini(korch_llm_t *llm)
{
    s_replay_t *st = llm->priv;
    if (st) {
        json_decref(st->replies);
        free(st);
        llm->priv = NULL;
    }
}

static korch_rc_t s_chat(korch_llm_t *llm, const korch_llm_request_t *req, const korch_llm_cb_t *cb,
                         korch_llm_reply_t *reply, korch_err_t *err)
{
    s_replay_t *st = llm->priv;
    reply->attempts = 1;
    if (cb && cb->cancelled && cb->cancelled(cb->arg))
        return korch_err_set(err, KORCH_E_INTERRUPTED, "the replay was interrupted");
    if (st->next >= json_array_size(st->replies))
        return korch_err_set(err, KORCH_E_STATE, "the recording '%s' has no more replies (it holds %zu); the conversation "
                             "went further than the recorded one", llm->model, json_array_size(st->replies));
    json_t *r = json_array_get(st->replies, st->next++);
    const char *text = korch_llm_jstr(r, "text", "");
    reply->text = strdup(text);
    reply->tool_calls = json_array();
    if (!reply->text || !reply->tool_calls)
        return korch_err_set(err, KORCH_E_NOMEM, "out of memory");
    if (cb && cb->on_text) {
        for (const char *p = text; *p;) {
            size_t n = strcspn(p, "\n");
            n += p[n] == '\n';
            cb->on_text(p, n, cb->arg);
            p += n;
        }
    }
    size_t i;
    json_t *call;
    json_array_foreach(json_object_get(r, "tool_calls"), i, call) {
        char id[32];
        snprintf(id, sizeof id, "replay_%lu", ++st->ids);
        json_t *args = json_object_get(call, "arguments");
        json_t *parsed = json_is_object(args)   ? json_incref(args)
                         : json_is_string(args) ? json_loads(json_string_value(args), 0, NULL)
                                                : NULL;
        if (!json_is_object(parsed)) {
            json_decref(parsed);
            parsed = json_object();
        }
        json_t *c = json_pack("{s:s, s:s, s:o}", "id", id, "name", korch_llm_jstr(call, "name", ""), "arguments", parsed);
        if (!c || json_array_append_new(reply->tool_calls, c))
            return korch_err_set(err, KORCH_E_NOMEM, "out of memory");
    }
    const char *finish = korch_llm_jstr(r, "finish", json_array_size(reply->tool_calls) ? "tool_calls" : "stop");
    snprintf(reply->finish, sizeof reply->finish, "%s", finish);
    return KORCH_OK;
}

const korch_llm_provider_t korch_llm_replay = {
    .name = "replay",
    .init = s_init,
    .fini = s_fini,
    .chat = s_chat,
};
