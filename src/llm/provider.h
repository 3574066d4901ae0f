/*  Inside the llm layer: the provider vtable and the helpers the providers
 *  share (HTTP with retries, line splitting, SSE events, bounded buffers).
 *
 *  Like curl's lib/vtls/: korch_llm_t holds the options and one
 *  korch_llm_provider_t; each src/llm/<provider>.c defines one table.
 *  A korch_llm_t is used by one thread at a time (it keeps one curl handle
 *  so that the connection, and its TLS session, is reused between steps).
 */
#ifndef KORCH_LLM_PROVIDER_H
#define KORCH_LLM_PROVIDER_H

#include "korch/buf.h"
#include "korch/llm.h"
#include "korch/llm_gate.h"

#include <curl/curl.h>
#include <stdbool.h>
#include <stddef.h>
#include <time.h>

typedef struct korch_llm_stream korch_llm_stream_t;
typedef struct korch_llm_gate korch_llm_gate_t;

/* Where and how a streaming provider's request goes: filled in by its
   request(); secret holds what a header carries of the key (cleansed by
   the skeleton after the call). */
typedef struct {
    char url[2048];
    const char *headers[4];     /* "Name: value", NULL-terminated */
    char secret[1024];
} korch_llm_target_t;

typedef struct {
    const char *name;           /* "openai" */
    const char *key_env;        /* "OPENAI_API_KEY", or NULL when no key is used */
    const char *url_env;        /* "OPENAI_BASE_URL" */
    const char *default_url;
    bool key_required;          /* with the default base URL */
    /* Optional: set up llm->priv. */
    korch_rc_t (*init)(korch_llm_t *llm, korch_err_t *err);
    /* Optional: free llm->priv. */
    void (*fini)(korch_llm_t *llm);
    /* One call; reply is zeroed with tokens at -1 by the caller. On failure
       the caller clears whatever reply holds. The streaming providers use
       korch_llm_stream_chat (stream.c) and fill in the part below. */
    korch_rc_t (*chat)(korch_llm_t *llm, const korch_llm_request_t *req, const korch_llm_cb_t *cb,
                       korch_llm_reply_t *reply, korch_err_t *err);
    /* ---- what differs between streaming providers (stream.c does the rest) ---- */
    /* The request body (new JSON text, *len its length; NULL when it cannot
       be made) and where it goes. */
    char *(*request)(korch_llm_t *llm, const korch_llm_request_t *req, korch_llm_target_t *to, size_t *len);
    bool ndjson;                /* the stream is NDJSON lines (else server-sent events) */
    const char *sentinel;       /* an SSE data that ends the stream ("[DONE]"), or NULL */
    const char *end;            /* what a cut stream lacks: "no 'data: [DONE]'" */
    /* One event of the stream (a JSON object, not an error): map it onto st
       with korch_llm_stream_text / _call / _args / _end; event is the SSE
       event name (NULL for NDJSON). */
    korch_rc_t (*event)(korch_llm_stream_t *st, const char *event, json_t *obj, korch_err_t *err);
    size_t priv_size;           /* st->priv for event() */
} korch_llm_provider_t;

struct korch_llm {
    const korch_llm_provider_t *prov;
    korch_llm_opts_t opts;      /* strings below, defaults filled in */
    char *provider, *model, *base_url, *api_key;   /* owned copies; api_key may be NULL */
    char *name;                 /* "openai:gpt-4o-mini" */
    char *notice;               /* NULL unless the provider is not a real model */
    CURL *curl;                 /* kept between calls for connection reuse */
    unsigned long call_seq;     /* for ids the API does not give (ollama) */
    void *priv;                 /* provider state */
    korch_llm_gate_t *gate;     /* the fair gate of its key (gate.c), owned by opts.gates; NULL = none */
    char *party;                /* who it calls for at the gate (opts.party, owned) */
};

extern const korch_llm_provider_t korch_llm_openai;
extern const korch_llm_provider_t korch_llm_anthropic;
extern const korch_llm_provider_t korch_llm_ollama;
extern const korch_llm_provider_t korch_llm_replay;

/* ---- the fair gate of a provider key (gate.c, include/korch/llm_gate.h) ---- */

/* The gate of (provider, base_url, key) in the registry (made when new;
   owned by the registry); NULL when out of memory. */
korch_llm_gate_t *korch_llm_gate_of(korch_llm_gates_t *gates, const char *provider, const char *base_url,
                                    const char *key);
/* Wait until the gate admits party's call; *ticket (0 on a call's first
   attempt) keeps its place in the queue across its retries. false: cb's
   cancelled said so while it waited. */
bool korch_llm_gate_enter(korch_llm_gate_t *g, const char *party, unsigned long long *ticket,
                          const korch_llm_cb_t *cb);
/* The admitted call is over with HTTP status (0: no answer); wait_s is the
   provider's retry-after when it gave one (else the back-off), for a 429. */
void korch_llm_gate_leave(korch_llm_gate_t *g, const char *party, long status, double wait_s);

/* ---- HTTP POST with the SDKs' retry policy ---- */

/* One line of a 2xx body, without its LF / CRLF, NUL-terminated (the
   callee may modify it). A non-OK return ends the transfer with that error
   (set in err by the callee). */
typedef korch_rc_t (*korch_llm_line_fn)(void *arg, char *line, size_t len, korch_err_t *err);

typedef struct {
    const char *url;                /* full endpoint */
    const char *const *headers;     /* NULL-terminated "Name: value" list, may be NULL */
    const char *body;               /* JSON */
    size_t body_len;
    korch_llm_line_fn on_line;
    void *arg;
} korch_llm_post_t;

/* POST the body and feed the response to on_line line by line while it
   streams. Retries 408/409/429/5xx/529 and connection failures (not a
   stream that has begun) up to opts.max_retries times. *attempts gets the
   number of HTTP attempts. A stream cut after a 2xx status is reported as
   "... stream was cut before its end ...". A NULL post->body (the
   provider's encoder failed) is reported as such, with nothing sent. */
korch_rc_t korch_llm_http_post(korch_llm_t *llm, const korch_llm_post_t *post, const korch_llm_cb_t *cb,
                               int *attempts, korch_err_t *err);

/* Seconds to wait before retry number n (0-based) when the server did not
   say: 0.5 * 2^n capped at 8, minus up to 25 % jitter (as the SDKs do). */
double korch_llm_backoff_s(int n);

/* A retry-after-ms / retry-after header value in seconds; -1 when absent
   or unusable. Dates are HTTP dates (RFC 9110 section 5.6.7). */
double korch_llm_retry_after_s(const char *ms_value, const char *value, time_t now);

/* The message of an API error body: OpenAI {"error":{"message","type"}},
   Anthropic {"type":"error","error":{"type","message"}}, Ollama
   {"error":"..."}; else the body's first line. Written into out. */
void korch_llm_api_message(const char *body, size_t len, char *out, size_t cap);

/* ---- Server-sent events (WHATWG HTML "server-sent events", 9.2.6) ----
 *  "If the line is empty, dispatch the event"; "data" lines append to the
 *  data buffer with a LF between them; a line starting with ':' is a
 *  comment; "event" sets the type; one leading space after the colon is
 *  dropped. An event cut before its blank line is never dispatched.
 */
typedef korch_rc_t (*korch_llm_sse_fn)(void *arg, const char *event, char *data, size_t len, korch_err_t *err);

typedef struct {
    char event[64];
    korch_buf_t data;
    bool has_data;
    korch_llm_sse_fn on_event;
    void *arg;
} korch_llm_sse_t;

void korch_llm_sse_init(korch_llm_sse_t *sse, size_t max, korch_llm_sse_fn on_event, void *arg);
void korch_llm_sse_free(korch_llm_sse_t *sse);
/* A korch_llm_line_fn: arg is the korch_llm_sse_t. */
korch_rc_t korch_llm_sse_line(void *arg, char *line, size_t len, korch_err_t *err);

/* ---- the streaming chat skeleton (stream.c) ----
 *  One call of a streaming provider: the request its table builds, POSTed
 *  with retries (korch_llm_http_post), the stream framed as SSE or NDJSON,
 *  every event that is not JSON or is an API error refused with a message,
 *  the rest mapped by the provider's event() onto the reassembly below:
 *  the reply's text, its tool calls (by index: id, name, argument
 *  fragments joined), its finish reason, its end. The callbacks (on_text,
 *  on_tool_delta) are called as the pieces come.
 */
#define KORCH_LLM_MAX_CALLS 128     /* tool calls of one reply */

struct korch_llm_stream {
    korch_llm_t *llm;
    korch_llm_reply_t *reply;   /* the provider sets its token counts */
    const korch_llm_cb_t *cb;
    void *priv;                 /* the provider's state for this stream: priv_size zeroed bytes */
    /* private to stream.c */
    korch_buf_t text;
    struct {
        char *id, *name;
        korch_buf_t args;
    } calls[KORCH_LLM_MAX_CALLS];
    int ncalls;                 /* highest index + 1 */
    bool ended;
    char finish[32];
};

korch_rc_t korch_llm_stream_chat(korch_llm_t *llm, const korch_llm_request_t *req, const korch_llm_cb_t *cb,
                                 korch_llm_reply_t *reply, korch_err_t *err);
/* Reply text as it comes (on_text). */
korch_rc_t korch_llm_stream_text(korch_llm_stream_t *st, const char *text, size_t len, korch_err_t *err);
/* Tool call number index: its id and name (NULL or "": not given). Kept
   when first given, or replaced each time when replace is true. */
korch_rc_t korch_llm_stream_call(korch_llm_stream_t *st, long long index, const char *id, const char *name,
                                 bool replace, korch_err_t *err);
/* A fragment of tool call index's arguments (on_tool_delta). */
korch_rc_t korch_llm_stream_args(korch_llm_stream_t *st, long long index, const char *frag, size_t len,
                                 korch_err_t *err);
/* The finish reason (stop, length, tool_calls, content_filter, or the
   API's word). None given: tool_calls when there are calls, else stop. */
void korch_llm_stream_finish(korch_llm_stream_t *st, const char *finish);
/* The stream's end as the API marks it (without it the stream was cut). */
void korch_llm_stream_end(korch_llm_stream_t *st);
/* Tool calls begun so far (highest index + 1). */
int korch_llm_stream_ncalls(const korch_llm_stream_t *st);

/* ---- small JSON helpers ---- */

/* The string at key, or def. */
const char *korch_llm_jstr(const json_t *obj, const char *key, const char *def);
/* Serialise compactly into a new string; NULL when out of memory. */
char *korch_llm_dumps(const json_t *v);
/* "data:MIME;base64,DATA" for an IMAGE, new string. */
char *korch_llm_data_url(const json_t *image);
/* Add a CALL to calls: arguments parsed from raw (empty = {}), or
   arguments_raw + arguments_error when raw is not a JSON object. */
korch_rc_t korch_llm_add_call(json_t *calls, const char *id, const char *name, const char *raw, size_t raw_len,
                              korch_err_t *err);
/* Ensure every tool call of an assistant message is answered: returns a new
   copy of the neutral messages where a missing answer becomes a tool message
   "(no result: the call was not run)". */
json_t *korch_llm_answer_all_calls(const json_t *messages);

#endif
