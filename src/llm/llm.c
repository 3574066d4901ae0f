/*  korch_llm: picks a provider, fills in defaults, and runs one call. */
#include "provider.h"

#include <fnmatch.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const korch_llm_provider_t *const s_providers[] = {
    &korch_llm_openai, &korch_llm_anthropic, &korch_llm_ollama, &korch_llm_replay,
};

korch_rc_t korch_llm_parse_spec(const char *spec, korch_llm_opts_t *opts, korch_err_t *err)
{
    const char *colon = spec ? strchr(spec, ':') : NULL;
    if (!spec || !*spec)
        return korch_err_set(err, KORCH_E_INVALID,
                             "no llm given (use --llm openai:MODEL, anthropic:MODEL, ollama:MODEL or replay:FILE, or set KORCH_LLM)");
    size_t plen = colon ? (size_t)(colon - spec) : strlen(spec);
    for (size_t i = 0; i < sizeof s_providers / sizeof *s_providers; i++) {
        const char *name = s_providers[i]->name;
        if (strlen(name) != plen || strncasecmp(spec, name, plen) != 0)
            continue;
        if (!colon || !colon[1])
            return korch_err_set(err, KORCH_E_INVALID, "llm '%s' names no %s (use %s:%s)", spec,
                                 s_providers[i] == &korch_llm_replay ? "recording" : "model", name,
                                 s_providers[i] == &korch_llm_replay ? "FILE" : "MODEL");
        opts->provider = name;
        opts->model = colon + 1;
        return KORCH_OK;
    }
    return korch_err_set(err, KORCH_E_INVALID,
                         "unknown llm provider '%.*s' in '%s' (use openai:MODEL, anthropic:MODEL, ollama:MODEL or replay:FILE)",
                         (int)plen, spec, spec);
}

const char *korch_llm_key_env(const char *provider)
{
    for (size_t i = 0; provider && i < sizeof s_providers / sizeof *s_providers; i++)
        if (strcasecmp(provider, s_providers[i]->name) == 0)
            return s_providers[i]->key_env;
    return NULL;
}

/* Models known to take images; a guess for when the user did not say. */
static bool s_guess_vision(const char *model)
{
    static const char *const yes[] = {
        "gpt-4o*", "gpt-4.1*", "gpt-5*", "o3", "o3-2*", "o3-pro*", "o4*", "chatgpt-4o*", "gpt-4-turbo*",
        "claude-3*", "claude-*4*", "llava*", "llama3.2-vision*", "llama4*", "qwen2.5vl*", "qwen2.5-vl*",
        "gemma3*", "minicpm-v*", "*/llava*", "*/gemma3*",
    };
    for (size_t i = 0; i < sizeof yes / sizeof *yes; i++)
        if (fnmatch(yes[i], model, FNM_CASEFOLD) == 0)
            return true;
    return false;
}

static char *s_dup_base(const char *url)
{
    size_t n = strlen(url);
    while (n && url[n - 1] == '/')
        n--;
    return strndup(url, n);
}

/* OLLAMA_HOST is often "host:port" or "0.0.0.0": as the ollama client does
   (envconfig.Host), no scheme means http and port 11434; with a scheme the
   scheme's own port. */
static char *s_ollama_base(const char *host)
{
    const char *sep = strstr(host, "://");
    if (sep)
        return s_dup_base(host);
    size_t hl = strcspn(host, "/");
    const char *close = host[0] == '[' ? memchr(host, ']', hl) : NULL;
    bool has_port = host[0] == '[' ? close && close[1] == ':' : memchr(host, ':', hl) != NULL;
    char buf[1024];
    snprintf(buf, sizeof buf, "http://%.*s%s%s", (int)hl, hl ? host : "127.0.0.1", has_port ? "" : ":11434", host + hl);
    return s_dup_base(buf);
}

korch_llm_t *korch_llm_new(const korch_llm_opts_t *opts, korch_err_t *err)
{
    korch_rc_t rc = KORCH_OK;
    const korch_llm_provider_t *prov = NULL;
    if (!opts || !opts->provider || !*opts->provider) {
        korch_err_set(err, KORCH_E_INVALID, "no llm provider given (use openai, anthropic, ollama or replay)");
        return NULL;
    }
    for (size_t i = 0; i < sizeof s_providers / sizeof *s_providers; i++)
        if (strcasecmp(opts->provider, s_providers[i]->name) == 0)
            prov = s_providers[i];
    if (!prov) {
        korch_err_set(err, KORCH_E_INVALID, "unknown llm provider '%s' (use openai, anthropic, ollama or replay)",
                      opts->provider);
        return NULL;
    }
    if (!opts->model || !*opts->model) {
        korch_err_set(err, KORCH_E_INVALID, "no model given for the %s provider", prov->name);
        return NULL;
    }
    korch_llm_t *self = calloc(1, sizeof *self);
    if (!self) {
        korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        return NULL;
    }
    self->prov = prov;
    self->opts = *opts;
    korch_llm_opts_t *o = &self->opts;
    if (!o->connect_timeout_ms)
        o->connect_timeout_ms = 10000;
    if (!o->timeout_ms)
        o->timeout_ms = 300000;
    if (!o->max_retries)
        o->max_retries = 2;
    else if (o->max_retries < 0)
        o->max_retries = 0;
    if (!o->num_ctx)
        o->num_ctx = 16384;
    if (!o->max_reply_bytes)
        o->max_reply_bytes = 16u << 20;
    if (!o->vision_set)
        o->vision = s_guess_vision(opts->model);

    self->provider = strdup(prov->name);
    self->model = strdup(opts->model);
    size_t nl = strlen(prov->name) + strlen(opts->model) + 2;
    self->name = malloc(nl);
    if (!self->provider || !self->model || !self->name) {
        rc = korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        goto out;
    }
    snprintf(self->name, nl, "%s:%s", prov->name, opts->model);
    o->provider = self->provider;
    o->model = self->model;

    if (prov->url_env) {
        const char *base = opts->base_url;
        bool custom = true;
        if (!base || !*base)
            base = getenv(prov->url_env);
        if (!base || !*base) {
            base = prov->default_url;
            custom = false;
        }
        self->base_url = prov == &korch_llm_ollama ? s_ollama_base(base) : s_dup_base(base);
        if (!self->base_url) {
            rc = korch_err_set(err, KORCH_E_NOMEM, "out of memory");
            goto out;
        }
        o->base_url = self->base_url;
        if (prov->key_env) {
            const char *key = opts->api_key;
            if (!key || !*key)
                key = getenv(prov->key_env);
            if (key && *key) {
                self->api_key = strdup(key);
                if (!self->api_key) {
                    rc = korch_err_set(err, KORCH_E_NOMEM, "out of memory");
                    goto out;
                }
            } else if (prov->key_required && !custom) {
                /* a local server behind a custom base URL (vLLM, llama.cpp) often wants no key */
                rc = korch_err_set(err, KORCH_E_INVALID, "%s is not set (export it, or pick another --llm)",
                                   prov->key_env);
                goto out;
            }
            o->api_key = self->api_key;
        }
    } else {
        o->base_url = NULL;
        o->api_key = NULL;
    }
    if (opts->gates && prov->url_env) {
        self->gate = korch_llm_gate_of(opts->gates, prov->name, self->base_url, self->api_key);
        self->party = strdup(opts->party ? opts->party : "");
        if (!self->gate || !self->party) {
            rc = korch_err_set(err, KORCH_E_NOMEM, "out of memory");
            goto out;
        }
    }
    o->gates = NULL;
    o->party = self->party;
    if (prov->init)
        rc = prov->init(self, err);
out:
    if (rc)
        korch_llm_destroy(&self);
    return self;
}

void korch_llm_destroy(korch_llm_t **pself)
{
    if (!pself || !*pself)
        return;
    korch_llm_t *self = *pself;
    if (self->prov && self->prov->fini)
        self->prov->fini(self);
    if (self->curl)
        curl_easy_cleanup(self->curl);
    free(self->provider);
    free(self->model);
    free(self->base_url);
    free(self->party);
    if (self->api_key) {
        /* keep the key out of freed memory */
        OPENSSL_cleanse(self->api_key, strlen(self->api_key));
        free(self->api_key);
    }
    free(self->name);
    free(self->notice);
    free(self);
    *pself = NULL;
}

korch_rc_t korch_llm_chat(korch_llm_t *llm, const korch_llm_request_t *req, const korch_llm_cb_t *cb,
                          korch_llm_reply_t *reply, korch_err_t *err)
{
    korch_err_t local = {0};
    if (!err)
        err = &local;
    if (!reply)
        return korch_err_set(err, KORCH_E_INVALID, "no reply to fill in");
    memset(reply, 0, sizeof *reply);
    reply->input_tokens = reply->output_tokens = -1;
    if (!llm || !req || !json_is_array(req->messages))
        return korch_err_set(err, KORCH_E_INVALID, "an llm call needs a provider and an array of messages");
    if (req->tools && !json_is_array(req->tools))
        return korch_err_set(err, KORCH_E_INVALID, "the tools of an llm call must be an array");
    korch_rc_t rc = llm->prov->chat(llm, req, cb, reply, err);
    if (rc == KORCH_OK) {
        if (!reply->text)
            reply->text = strdup("");
        if (!reply->tool_calls)
            reply->tool_calls = json_array();
        if (!reply->finish[0])
            snprintf(reply->finish, sizeof reply->finish, "%s", json_array_size(reply->tool_calls) ? "tool_calls" : "stop");
        if (!reply->text || !reply->tool_calls)
            rc = korch_err_set(err, KORCH_E_NOMEM, "out of memory");
    }
    if (rc) {
        int attempts = reply->attempts;
        korch_llm_reply_clear(reply);
        reply->attempts = attempts;
    }
    return rc;
}

void korch_llm_reply_clear(korch_llm_reply_t *reply)
{
    if (!reply)
        return;
    free(reply->text);
    json_decref(reply->tool_calls);
    memset(reply, 0, sizeof *reply);
    reply->input_tokens = reply->output_tokens = -1;
}

const char *korch_llm_name(const korch_llm_t *llm) { return llm->name; }
bool korch_llm_vision(const korch_llm_t *llm) { return llm->opts.vision; }
bool korch_llm_fence_mode(const korch_llm_t *llm) { return llm->opts.fence_mode; }
const char *korch_llm_notice(const korch_llm_t *llm) { return llm->notice; }
