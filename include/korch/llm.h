/*  LLM providers: one small interface, one file per provider (src/llm/).
 *
 *  korch keeps a conversation in ONE neutral shape and each provider
 *  translates it to its wire format (OpenAI Chat Completions, Anthropic
 *  Messages, Ollama /api/chat) and back. The neutral messages (a JSON array):
 *
 *    {"role": "system",    "content": "..."}
 *    {"role": "user",      "content": "...", "images": [IMAGE...]}          images optional
 *    {"role": "assistant", "content": "...", "tool_calls": [CALL...]}       either may be absent
 *    {"role": "tool",      "tool_call_id": "...", "name": "...", "content": "...",
 *                          "images": [IMAGE...], "is_error": false}
 *
 *    IMAGE = {"mime": "image/png", "data": "<base64>", "name": "fig-3.png"}
 *    CALL  = {"id": "...", "name": "run_python", "arguments": {...}}        parsed object
 *            or, when the model's JSON did not parse,
 *            {"id": "...", "name": "...", "arguments_raw": "...", "arguments_error": "..."}
 *
 *  Tools (neutral): [{"name", "description", "parameters": <JSON schema>}].
 *
 *  Images go where each API takes them: OpenAI in a user message after the
 *  tool messages (tool messages carry text only), Anthropic inside
 *  tool_result, Ollama in "images". A provider whose model does not take
 *  images gets the text only (the agent adds a line naming each chart).
 *
 *  Calls are blocking (libcurl easy) with connect and overall timeouts and
 *  the SDKs' retry policy: 408, 409, 429, 5xx and 529 are retried honouring
 *  retry-after-ms / retry-after, else exponential backoff from 0.5 s capped
 *  at 8 s, 2 retries by default (each reported to on_retry before its wait).
 *  Streaming deltas reach on_text and on_tool_delta as they come.
 */
#ifndef KORCH_LLM_H
#define KORCH_LLM_H

#include <stdbool.h>
#include <stdint.h>
#include <jansson.h>
#include "korch/error.h"

typedef struct korch_llm korch_llm_t;
typedef struct korch_llm_gates korch_llm_gates_t;      /* korch/llm_gate.h */

typedef struct {
    json_t *messages;           /* neutral messages, borrowed */
    json_t *tools;              /* neutral tools, borrowed; NULL = no tools (final answer) */
    int max_tokens;             /* 0 = provider default (Anthropic needs one: 4096) */
    double temperature;         /* < 0 = provider default */
} korch_llm_request_t;

typedef struct {
    char *text;                 /* assistant text (new string, may be "") */
    json_t *tool_calls;         /* new array of CALL (may be empty) */
    char finish[32];            /* "stop", "tool_calls", "length", "content_filter", ... */
    int64_t input_tokens, output_tokens;    /* -1 when the API did not say */
    int attempts;               /* HTTP attempts made (1 + retries) */
} korch_llm_reply_t;

/* A failed attempt that is about to be retried (reported before the wait). */
typedef struct {
    int attempt;                /* the retry coming: 1 = the second HTTP attempt */
    int max_retries;
    long http_status;           /* 0: the connection failed */
    long wait_ms;               /* the back-off before it (retry-after when the API said) */
    const char *why;            /* the API's message or curl's error, borrowed */
} korch_llm_retry_t;

typedef struct {
    /* A piece of assistant text as it streams in. */
    void (*on_text)(const char *delta, size_t len, void *arg);
    /* A fragment of tool call number index's arguments (JSON text) as it
       streams in; name is the tool's name once known (else ""). The
       fragments of one call concatenate to its arguments (Ollama sends them
       whole, in one fragment). */
    void (*on_tool_delta)(int index, const char *name, const char *json, size_t len, void *arg);
    /* An attempt failed and will be retried after retry->wait_ms. */
    void (*on_retry)(const korch_llm_retry_t *retry, void *arg);
    /* Called often while a call waits (libcurl's progress callback, at least
       about once a second; every 50 ms during a back-off): for elapsed-time
       displays. */
    void (*on_tick)(void *arg);
    /* Return true to abandon the request (Ctrl-C): chat returns KORCH_E_INTERRUPTED. */
    bool (*cancelled)(void *arg);
    void *arg;
} korch_llm_cb_t;

typedef struct {
    const char *provider;       /* "openai", "anthropic", "ollama", "replay" */
    const char *model;          /* e.g. "gpt-4o-mini"; for replay: the recording's path */
    const char *base_url;       /* NULL = OPENAI_BASE_URL / ANTHROPIC_BASE_URL / OLLAMA_HOST / default */
    const char *api_key;        /* NULL = OPENAI_API_KEY / ANTHROPIC_API_KEY */
    bool vision;                /* the model takes images (default: guessed from the model name) */
    bool vision_set;            /* vision above was given explicitly */
    bool fence_mode;            /* no tool calling: code in ```python fences, results as user text */
    long connect_timeout_ms;    /* default 10000 */
    long timeout_ms;            /* whole request, default 300000 */
    int max_retries;            /* 0 = the default (2); negative = no retries */
    int num_ctx;                /* ollama options.num_ctx, default 16384 */
    size_t max_reply_bytes;     /* bound on what one reply may hold, default 16 MiB */
    korch_llm_gates_t *gates;   /* share the key's rate limit fairly (korch/llm_gate.h); borrowed, NULL = no gate */
    const char *party;          /* whose calls these are at the gate (a user name; NULL = "") */
} korch_llm_opts_t;

/* "openai:gpt-4o-mini" / "anthropic:claude-..." / "ollama:llama3.1" /
   "replay:FILE" into opts: sets only provider (a static name) and model
   (pointing into spec, which must outlive opts). */
korch_rc_t korch_llm_parse_spec(const char *spec, korch_llm_opts_t *opts, korch_err_t *err);

/* A provider. NULL + err when unknown or misconfigured (e.g. no API key:
   "OPENAI_API_KEY is not set (export it, or pick another --llm)"). */
korch_llm_t *korch_llm_new(const korch_llm_opts_t *opts, korch_err_t *err);
void korch_llm_destroy(korch_llm_t **llm);

/* The environment variable that holds a provider's API key ("OPENAI_API_KEY"),
   or NULL when the provider is unknown or takes none. */
const char *korch_llm_key_env(const char *provider);

/* One model call. On success fills reply (free with korch_llm_reply_clear);
   on failure the reply is cleared except reply->attempts.
   A korch_llm_t keeps one curl handle (connections are reused between
   steps): use it from one thread at a time. on_text runs inside the HTTP
   transfer: do not call korch_llm_* from it.
   Errors a user can act on: 401/403 name the variable to set; a stream cut
   before its end is an error; 429/5xx after the retries give the status and
   the API's message. */
korch_rc_t korch_llm_chat(korch_llm_t *llm, const korch_llm_request_t *req, const korch_llm_cb_t *cb,
                          korch_llm_reply_t *reply, korch_err_t *err);

void korch_llm_reply_clear(korch_llm_reply_t *reply);

/* Can the model's endpoint be reached? A connect (and TLS handshake) to its
   base URL within 5 s, no request sent; OK for a provider without one
   (replay). The error names the URL and the variable that sets it.
   Blocking: not on a loop. */
korch_rc_t korch_llm_probe(korch_llm_t *llm, korch_err_t *err);

const char *korch_llm_name(const korch_llm_t *llm);      /* "openai:gpt-4o-mini" */
bool korch_llm_vision(const korch_llm_t *llm);
bool korch_llm_fence_mode(const korch_llm_t *llm);
/* Set by providers that are not a real model (replay), for the user to see. */
const char *korch_llm_notice(const korch_llm_t *llm);

#endif
