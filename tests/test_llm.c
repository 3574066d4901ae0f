/*  The llm layer against a scripted server speaking the real wire formats
 *  (tests/peers/llm_server.py, llm_fixture.h): streaming, tool calls, images
 *  in each API's place, retries, cut streams, malformed arguments, split
 *  events, keys, live progress. Every provider runs the same table
 *  (PROVIDER_TESTS, s_failures). Without a server: test_llm_offline.c. */
#define KORCH_TEST_UNIT /* no kernel, docker or browser: make check runs these */
#include "llm_fixture.h"
#include "korch/jsonfield.h"
#include "korch/llm.h"
#include "../src/llm/provider.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

/* a 1x1 PNG */
#define PNG_B64 "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="

static const char *s_base(const llm_server_t *s, const char *provider, const char *scenario)
{
    static char url[256];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/s/%s%s", s->port, scenario,
             strcmp(provider, "openai") == 0 ? "/v1" : "");
    return url;
}

static size_t s_collect(char *data, size_t size, size_t nmemb, void *arg)
{
    korch_buf_t *b = arg;
    return korch_buf_add(b, data, size * nmemb, "test body", NULL) ? 0 : size * nmemb;
}

/* What the server received for a scenario (new JSON array). */
static json_t *s_requests(const llm_server_t *s, const char *scenario)
{
    char url[256];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/s/%s/requests", s->port, scenario);
    korch_buf_t b = {.max = 256u << 20};
    CURL *c = curl_easy_init();
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, s_collect);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    CURLcode cc = curl_easy_perform(c);
    curl_easy_cleanup(c);
    json_t *j = cc == CURLE_OK && b.p ? json_loadb(b.p, b.len, 0, NULL) : NULL;
    korch_buf_free(&b);
    CHECK(json_is_array(j));
    return j;
}

static korch_llm_t *s_llm(const llm_server_t *s, const char *provider, const char *scenario, korch_llm_opts_t *extra)
{
    korch_llm_opts_t o = extra ? *extra : (korch_llm_opts_t){0};
    o.provider = provider;
    if (!o.model)
        o.model = strcmp(provider, "openai") == 0      ? "gpt-4o-mini"
                  : strcmp(provider, "anthropic") == 0 ? "claude-sonnet-4-5"
                                                       : "llama3.1:8b";
    o.base_url = s_base(s, provider, scenario);
    if (!o.api_key)
        o.api_key = "sk-test-123";
    korch_err_t err = {0};
    korch_llm_t *llm = korch_llm_new(&o, &err);
    if (!CHECK(llm != NULL))
        fprintf(stderr, "  %s\n", err.msg);
    return llm;
}

typedef struct {
    int calls;
    korch_buf_t text;
    int cancel_after;       /* > 0: cancel once that many deltas came */
} sink_t;

static void s_on_text(const char *delta, size_t len, void *arg)
{
    sink_t *k = arg;
    k->calls++;
    korch_buf_add(&k->text, delta, len, "streamed text", NULL);
}

static bool s_cancelled(void *arg)
{
    sink_t *k = arg;
    return k->cancel_after > 0 && k->calls >= k->cancel_after;
}

static json_t *s_user_only(const char *text)
{
    return json_pack("[{s:s, s:s}, {s:s, s:s}]", "role", "system", "content", "You are a data analyst.", "role", "user",
                     "content", text);
}

static json_t *s_tools(void)
{
    return json_pack("[{s:s, s:s, s:{s:s, s:{s:{s:s}}, s:[s]}}]", "name", "run_python", "description",
                     "Run Python code in the persistent kernel", "parameters", "type", "object", "properties", "code",
                     "type", "string", "required", "code");
}

/* One call with the given messages and tools; reply filled, rc returned. */
static korch_rc_t s_chat(korch_llm_t *llm, json_t *msgs, json_t *tools, sink_t *sink, korch_llm_reply_t *reply,
                         korch_err_t *err)
{
    korch_llm_request_t req = {.messages = msgs, .tools = tools, .temperature = -1};
    korch_llm_cb_t cb = {.on_text = s_on_text, .cancelled = s_cancelled, .arg = sink};
    return korch_llm_chat(llm, &req, &cb, reply, err);
}

static const char *s_call_code(const json_t *calls, size_t i)
{
    return json_string_value(json_object_get(json_object_get(json_array_get(calls, i), "arguments"), "code"));
}

/* What most tests need: the scripted server, an llm pointed at a scenario,
   the messages [system, user q], the run_python tool, a sink, the reply. */
typedef struct {
    llm_server_t s;
    korch_llm_t *llm;
    json_t *msgs, *tools;
    sink_t sink;
    korch_llm_reply_t r;
    korch_err_t err;
} fx_t;

static bool s_fx(fx_t *f, const char *provider, const char *scenario, korch_llm_opts_t *o, const char *q)
{
    *f = (fx_t){.sink.text.max = 1 << 20};
    if (!llm_server_start(&f->s))
        return false;
    f->llm = s_llm(&f->s, provider, scenario, o);
    f->msgs = s_user_only(q);
    f->tools = s_tools();
    return true;
}

static void s_fx_end(fx_t *f)
{
    korch_llm_reply_clear(&f->r);
    json_decref(f->msgs);
    json_decref(f->tools);
    korch_buf_free(&f->sink.text);
    korch_llm_destroy(&f->llm);
    llm_server_stop(&f->s);
}

/* ---- per provider ---- */

static void s_text(const char *provider)
{
    fx_t f;
    if (!s_fx(&f, provider, "hello", NULL, "hi"))
        return;
    if (CHECK_EQ(s_chat(f.llm, f.msgs, f.tools, &f.sink, &f.r, &f.err), KORCH_OK)) {
        CHECK_STREQ(f.r.text, "Hello from the scripted model. The answer is 42, as always.");
        CHECK_STREQ(f.sink.text.p, f.r.text);
        CHECK_GE(f.sink.calls, 3);
        CHECK_EQ(json_array_size(f.r.tool_calls), 0);
        CHECK_STREQ(f.r.finish, "stop");
        CHECK_GT(f.r.input_tokens, 0);
        CHECK_GT(f.r.output_tokens, 0);
        CHECK_EQ(f.r.attempts, 1);
    } else {
        fprintf(stderr, "  %s\n", f.err.msg);
    }
    korch_llm_reply_clear(&f.r);
    /* the same handle again: the connection is reused */
    korch_err_clear(&f.err);
    CHECK_EQ(s_chat(f.llm, f.msgs, NULL, &f.sink, &f.r, &f.err), KORCH_OK);
    korch_llm_reply_clear(&f.r);
    json_t *reqs = s_requests(&f.s, "hello");
    CHECK_EQ(json_array_size(reqs), 2);
    json_t *body = json_object_get(json_array_get(reqs, 0), "body");
    CHECK(json_is_true(json_object_get(body, "stream")));
    if (strcmp(provider, "anthropic") == 0) {
        CHECK_STREQ(korch_llm_jstr(body, "system", ""), "You are a data analyst.");
        CHECK_EQ(json_integer_value(json_object_get(body, "max_tokens")), 4096);
        json_t *h = json_object_get(json_array_get(reqs, 0), "headers");
        CHECK_STREQ(korch_llm_jstr(h, "x-api-key", ""), "sk-test-123");
        CHECK_STREQ(korch_llm_jstr(h, "anthropic-version", ""), "2023-06-01");
    } else if (strcmp(provider, "ollama") == 0) {
        CHECK_EQ(json_integer_value(json_object_get(json_object_get(body, "options"), "num_ctx")), 16384);
    } else {
        CHECK(json_is_true(json_object_get(json_object_get(body, "stream_options"), "include_usage")));
        json_t *h = json_object_get(json_array_get(reqs, 0), "headers");
        CHECK_STREQ(korch_llm_jstr(h, "authorization", ""), "Bearer sk-test-123");
    }
    CHECK_STREQ(korch_llm_jstr(json_object_get(json_array_get(reqs, 0), "body"), "model", ""),
                strcmp(provider, "openai") == 0 ? "gpt-4o-mini" : strcmp(provider, "anthropic") == 0 ? "claude-sonnet-4-5" : "llama3.1:8b");
    json_decref(reqs);
    s_fx_end(&f);
}

/* Two parallel calls; their results (one with an image) go back; the
   model's answer quotes them; the image went where the API takes it. */
static void s_tool_round(const char *provider)
{
    korch_llm_opts_t o = {.vision = true, .vision_set = true};
    fx_t f;
    if (!s_fx(&f, provider, "tools", &o, "compute"))
        return;
    korch_llm_reply_t *r = &f.r;
    json_t *msgs = f.msgs;
    if (!CHECK_EQ(s_chat(f.llm, msgs, f.tools, &f.sink, r, &f.err), KORCH_OK)) {
        fprintf(stderr, "  %s\n", f.err.msg);
        goto out;
    }
    CHECK_STREQ(r->text, "Let me compute that.");
    CHECK_STREQ(r->finish, "tool_calls");
    if (!CHECK_EQ(json_array_size(r->tool_calls), 2))
        goto out;
    CHECK_STREQ(s_call_code(r->tool_calls, 0), "print(6 * 7)");
    CHECK_STREQ(s_call_code(r->tool_calls, 1), "x = 1\nprint('x set')");
    const char *id0 = korch_llm_jstr(json_array_get(r->tool_calls, 0), "id", "");
    const char *id1 = korch_llm_jstr(json_array_get(r->tool_calls, 1), "id", "");
    CHECK(*id0 && *id1 && strcmp(id0, id1) != 0);
    CHECK_STREQ(korch_llm_jstr(json_array_get(r->tool_calls, 0), "name", ""), "run_python");
    /* the results: real-looking kernel output, a chart with the first */
    json_array_append_new(msgs, json_pack("{s:s, s:s, s:O}", "role", "assistant", "content", r->text, "tool_calls",
                                          r->tool_calls));
    json_array_append_new(msgs, json_pack("{s:s, s:s, s:s, s:s, s:[{s:s, s:s, s:s}]}", "role", "tool", "tool_call_id",
                                          id0, "name", "run_python", "content", "42\n", "images", "mime", "image/png",
                                          "data", PNG_B64, "name", "fig-1.png"));
    json_array_append_new(msgs, json_pack("{s:s, s:s, s:s, s:s}", "role", "tool", "tool_call_id", id1, "name",
                                          "run_python", "content", "x set\n"));
    korch_llm_reply_clear(r);
    korch_err_clear(&f.err);
    if (!CHECK_EQ(s_chat(f.llm, msgs, f.tools, &f.sink, r, &f.err), KORCH_OK)) {
        fprintf(stderr, "  %s\n", f.err.msg);
        goto out;
    }
    CHECK_STREQ(r->text, "results: 42 /  / x set /  | images: 1 | errors: 0");
    CHECK_STREQ(r->finish, "stop");
    korch_llm_reply_clear(r);

    json_t *reqs = s_requests(&f.s, "tools");
    CHECK_EQ(json_array_size(reqs), 2);
    json_t *sent = json_object_get(json_object_get(json_array_get(reqs, 1), "body"), "messages");
    size_t n = json_array_size(sent);
    if (strcmp(provider, "openai") == 0) {
        /* system, user, assistant, tool, tool, user(images) */
        CHECK_EQ(n, 6);
        json_t *a = json_array_get(sent, 2);
        CHECK(json_is_string(json_object_get(json_object_get(json_array_get(json_object_get(a, "tool_calls"), 0),
                                                             "function"), "arguments")));
        CHECK_STREQ(korch_llm_jstr(json_array_get(sent, 3), "role", ""), "tool");
        CHECK_STREQ(korch_llm_jstr(json_array_get(sent, 3), "content", ""), "42\n");
        json_t *u = json_array_get(sent, 5);
        CHECK_STREQ(korch_llm_jstr(u, "role", ""), "user");
        json_t *part = json_array_get(json_object_get(u, "content"), 1);
        CHECK_STREQ(korch_llm_jstr(part, "type", ""), "image_url");
        CHECK_STREQ(korch_llm_jstr(json_object_get(part, "image_url"), "url", ""), "data:image/png;base64," PNG_B64);
    } else if (strcmp(provider, "anthropic") == 0) {
        /* user, assistant(text, tool_use x2), user(tool_result x2) */
        CHECK_EQ(n, 3);
        json_t *content = json_object_get(json_array_get(sent, 2), "content");
        CHECK_EQ(json_array_size(content), 2);
        json_t *tr = json_array_get(content, 0);
        CHECK_STREQ(korch_llm_jstr(tr, "type", ""), "tool_result");
        CHECK_STREQ(korch_llm_jstr(tr, "tool_use_id", ""), id0);
        json_t *img = json_array_get(json_object_get(tr, "content"), 1);
        CHECK_STREQ(korch_llm_jstr(img, "type", ""), "image");
        CHECK_STREQ(korch_llm_jstr(json_object_get(img, "source"), "data", ""), PNG_B64);
        CHECK_STREQ(korch_llm_jstr(json_object_get(img, "source"), "media_type", ""), "image/png");
        json_t *use = json_array_get(json_object_get(json_array_get(sent, 1), "content"), 1);
        CHECK_STREQ(korch_llm_jstr(use, "type", ""), "tool_use");
        CHECK_STREQ(korch_llm_jstr(json_object_get(use, "input"), "code", ""), "print(6 * 7)");
    } else {
        /* system, user, assistant, tool, tool, user(images) */
        CHECK_EQ(n, 6);
        json_t *a = json_array_get(sent, 2);
        json_t *args = json_object_get(json_object_get(json_array_get(json_object_get(a, "tool_calls"), 0), "function"),
                                       "arguments");
        CHECK(json_is_object(args));
        CHECK_STREQ(korch_llm_jstr(json_array_get(sent, 3), "tool_name", ""), "run_python");
        json_t *imgs = json_object_get(json_array_get(sent, 5), "images");
        CHECK_STREQ(json_string_value(json_array_get(imgs, 0)), PNG_B64);
    }
    json_decref(reqs);
out:
    s_fx_end(&f);
}

static double s_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void s_retry429(const char *provider)
{
    fx_t f;
    if (!s_fx(&f, provider, "retry429", NULL, "hi"))
        return;
    double t0 = s_now();
    if (CHECK_EQ(s_chat(f.llm, f.msgs, NULL, &f.sink, &f.r, &f.err), KORCH_OK)) {
        CHECK_STREQ(f.r.text, "fine after waiting");
        CHECK_EQ(f.r.attempts, 2);
    } else {
        fprintf(stderr, "  %s\n", f.err.msg);
    }
    CHECK_GE(s_now() - t0, 0.95);
    json_t *reqs = s_requests(&f.s, "retry429");
    if (CHECK_EQ(json_array_size(reqs), 2)) {
        double gap = json_number_value(json_object_get(json_array_get(reqs, 1), "time")) -
                     json_number_value(json_object_get(json_array_get(reqs, 0), "time"));
        fprintf(stderr, "  retry-after: 1 -> waited %.3f s\n", gap);
        CHECK(gap >= 0.95 && gap < 3.0);
    }
    json_decref(reqs);
    s_fx_end(&f);
}

/* The error scenarios, each run for every provider (PROVIDER_TESTS):
   the scripted server's scenario, the options, the code and the parts of
   the message korch gives, the attempts made. KEY: the provider's hint. */
#define KEY "(the provider's key hint)"
static const struct {
    const char *test, *scenario;
    korch_llm_opts_t opts;
    korch_rc_t want;
    int attempts;
    const char *needle1, *needle2;
} s_failures[] = {
    {"500_three_times_is_an_error", "fail500", {0}, KORCH_E_HTTP, 3, "HTTP 500 after 3 attempts", NULL},
    {"overload_retried", "retry529", {0}, KORCH_OK, 2, NULL, NULL},
    {"cut_stream_is_an_error", "cut", {0}, KORCH_E_HTTP, 1, "cut before its end", NULL},
    {"stream_without_end_marker_is_an_error", "short", {0}, KORCH_E_HTTP, 1, "cut before its end (no ", NULL},
    {"overall_timeout", "slow", {.timeout_ms = 700}, KORCH_E_TIMEOUT, 1, "cut before its end", "timed out"},
    {"reply_bound", "hello", {.max_reply_bytes = 100}, KORCH_E_TOOBIG, 1, "max_reply_bytes", NULL},
    {"error_in_mid_stream", "sse_error", {0}, KORCH_E_HTTP, 1, "mid-stream", "Overloaded"},
    {"401_names_the_variable", "unauthorized", {0}, KORCH_E_HTTP, 1, "401", KEY},
};

/* The failure named test, for provider (keyenv: what its 401 must say). */
static void s_failure(const char *provider, const char *test, const char *keyenv)
{
    size_t i = 0;
    while (i < sizeof s_failures / sizeof *s_failures && strcmp(s_failures[i].test, test) != 0)
        i++;
    if (!CHECK(i < sizeof s_failures / sizeof *s_failures))
        return;
    korch_llm_opts_t o = s_failures[i].opts;
    const char *needle2 = s_failures[i].needle2 && strcmp(s_failures[i].needle2, KEY) == 0 ? keyenv : s_failures[i].needle2;
    fx_t f;
    if (!s_fx(&f, provider, s_failures[i].scenario, &o, "hi"))
        return;
    korch_rc_t want = s_failures[i].want;
    CHECK_EQ(s_chat(f.llm, f.msgs, f.tools, &f.sink, &f.r, &f.err), want);
    CHECK_EQ(f.err.rc, want);
    fprintf(stderr, "  %s/%s: %s\n", provider, s_failures[i].scenario, f.err.msg);
    if (s_failures[i].needle1)
        CHECK_CONTAINS(f.err.msg, s_failures[i].needle1);
    if (needle2)
        CHECK_CONTAINS(f.err.msg, needle2);
    if (s_failures[i].attempts)
        CHECK_EQ(f.r.attempts, s_failures[i].attempts);
    if (want != KORCH_OK)
        CHECK(f.r.text == NULL && f.r.tool_calls == NULL);
    s_fx_end(&f);
}
#undef KEY

static void s_malformed(const char *provider)
{
    fx_t f;
    if (!s_fx(&f, provider, "malformed", NULL, "hi"))
        return;
    if (CHECK_EQ(s_chat(f.llm, f.msgs, f.tools, &f.sink, &f.r, &f.err), KORCH_OK) && CHECK_EQ(json_array_size(f.r.tool_calls), 1)) {
        json_t *c = json_array_get(f.r.tool_calls, 0);
        CHECK(json_object_get(c, "arguments") == NULL);
        CHECK_CONTAINS(korch_llm_jstr(c, "arguments_raw", ""), "print(1)");
        CHECK_CONTAINS(korch_llm_jstr(c, "arguments_error", ""), "not valid JSON");
        CHECK_STREQ(korch_llm_jstr(c, "name", ""), "run_python");
        /* and it can go back to the model with an error as its result */
        json_array_append_new(f.msgs, json_pack("{s:s, s:s, s:O}", "role", "assistant", "content", "", "tool_calls",
                                              f.r.tool_calls));
        json_array_append_new(f.msgs, json_pack("{s:s, s:s, s:s, s:s, s:b}", "role", "tool", "tool_call_id",
                                              korch_llm_jstr(c, "id", ""), "name", "run_python", "content",
                                              korch_llm_jstr(c, "arguments_error", ""), "is_error", 1));
        korch_llm_reply_clear(&f.r);
        korch_err_clear(&f.err);
        if (!CHECK_EQ(s_chat(f.llm, f.msgs, f.tools, &f.sink, &f.r, &f.err), KORCH_OK))
            fprintf(stderr, "  %s\n", f.err.msg);
    } else {
        fprintf(stderr, "  %s\n", f.err.msg);
    }
    s_fx_end(&f);
}

/* Tiny writes and CRLF line ends parse exactly as the plain stream does. */
static void s_split(const char *provider)
{
    const char *scenarios[] = {"plain", "tiny", "crlf", "tinycrlf"};
    fx_t f;
    if (!s_fx(&f, provider, scenarios[0], NULL, "hi"))
        return;
    char *text0 = NULL;
    json_t *calls0 = NULL;
    for (size_t i = 0; i < 4; i++) {
        if (i > 0) { /* the same fixture, the handle pointed at the next scenario */
            korch_llm_destroy(&f.llm);
            f.llm = s_llm(&f.s, provider, scenarios[i], NULL);
        }
        korch_err_clear(&f.err);
        if (CHECK_EQ(s_chat(f.llm, f.msgs, f.tools, &f.sink, &f.r, &f.err), KORCH_OK)) {
            CHECK_EQ(json_array_size(f.r.tool_calls), 2);
            CHECK_STREQ(s_call_code(f.r.tool_calls, 0), "for i in range(3):\n    print(i, 'é ✓')");
            CHECK_STREQ(s_call_code(f.r.tool_calls, 1), "");
            CHECK_GT(f.r.output_tokens, 0);
            if (i == 0) {
                text0 = strdup(f.r.text);
                calls0 = json_incref(f.r.tool_calls);
                CHECK_STREQ(text0, "Split across many small writes: the quick brown fox jumps over the lazy dog.");
            } else {
                CHECK_STREQ(f.r.text, text0);
                for (size_t k = 0; k < 2; k++)
                    CHECK(json_equal(json_object_get(json_array_get(f.r.tool_calls, k), "arguments"),
                                     json_object_get(json_array_get(calls0, k), "arguments")));
            }
        } else {
            fprintf(stderr, "  %s: %s\n", scenarios[i], f.err.msg);
        }
        korch_llm_reply_clear(&f.r);
    }
    free(text0);
    json_decref(calls0);
    s_fx_end(&f);
}

/* The last, tool-less request after tool rounds, and a call left without
   an answer: still a valid request for each API. */
static void s_final_without_tools(const char *provider)
{
    fx_t f;
    if (!s_fx(&f, provider, "echo", NULL, "what is 6*7?"))
        return;
    json_array_append_new(f.msgs, json_pack("{s:s, s:s, s:[{s:s, s:s, s:{s:s}}, {s:s, s:s, s:{s:s}}]}", "role",
                                          "assistant", "content", "", "tool_calls", "id", "c1", "name", "run_python",
                                          "arguments", "code", "print(6*7)", "id", "c2", "name", "run_python",
                                          "arguments", "code", "never run"));
    json_array_append_new(f.msgs, json_pack("{s:s, s:s, s:s, s:s}", "role", "tool", "tool_call_id", "c1", "name",
                                          "run_python", "content", "42\n"));
    json_array_append_new(f.msgs, json_pack("{s:s, s:s}", "role", "user", "content", "answer now"));
    /* with tools, then without */
    for (int pass = 0; pass < 2; pass++) {
        korch_err_clear(&f.err);
        if (CHECK_EQ(s_chat(f.llm, f.msgs, pass ? NULL : f.tools, &f.sink, &f.r, &f.err), KORCH_OK)) {
            json_t *echo = json_loads(f.r.text, 0, NULL);
            CHECK_STREQ(korch_llm_jstr(echo, "user", ""), "answer now");
            CHECK_STREQ(korch_llm_jstr(echo, "system", ""), "You are a data analyst.");
            CHECK_EQ(json_is_true(json_object_get(echo, "tools")), !pass);
            json_decref(echo);
        } else {
            fprintf(stderr, "  pass %d: %s\n", pass, f.err.msg);
        }
        korch_llm_reply_clear(&f.r);
    }
    s_fx_end(&f);
}

static void s_cancel(const char *provider)
{
    fx_t f;
    if (!s_fx(&f, provider, "slow", NULL, "hi"))
        return;
    f.sink.cancel_after = 2;
    double t0 = s_now();
    CHECK_EQ(s_chat(f.llm, f.msgs, NULL, &f.sink, &f.r, &f.err), KORCH_E_INTERRUPTED);
    CHECK_LT(s_now() - t0, 3.0);    /* the whole stream takes 5 s */
    s_fx_end(&f);
}

/* A model without vision gets the text only. */
static void s_no_vision(const char *provider)
{
    korch_llm_opts_t o = {.vision = false, .vision_set = true, .model = "gpt-4o"};
    fx_t f;
    if (!s_fx(&f, provider, "tools", &o, "compute"))
        return;
    json_array_append_new(f.msgs, json_pack("{s:s, s:s, s:[{s:s, s:s, s:{s:s}}]}", "role", "assistant", "content", "",
                                          "tool_calls", "id", "c1", "name", "run_python", "arguments", "code", "plot()"));
    json_array_append_new(f.msgs, json_pack("{s:s, s:s, s:s, s:s, s:[{s:s, s:s, s:s}]}", "role", "tool", "tool_call_id",
                                          "c1", "name", "run_python", "content", "[chart 1: image/png 1x1 saved as fig-1.png]",
                                          "images", "mime", "image/png", "data", PNG_B64, "name", "fig-1.png"));
    if (CHECK_EQ(s_chat(f.llm, f.msgs, f.tools, &f.sink, &f.r, &f.err), KORCH_OK))
        CHECK_CONTAINS(f.r.text, "images: 0");
    else
        fprintf(stderr, "  %s\n", f.err.msg);
    json_t *reqs = s_requests(&f.s, "tools");
    char *dump = korch_llm_dumps(json_object_get(json_array_get(reqs, 0), "body"));
    CHECK(dump && !strstr(dump, PNG_B64));
    CHECK_CONTAINS(dump, "saved as fig-1.png");
    free(dump);
    json_decref(reqs);
    s_fx_end(&f);
}

#define FAILURE(p, keyenv, name) TEST(llm_##p##_##name) { s_failure(#p, #name, keyenv); }
#define PROVIDER_TESTS(p, keyenv)                                                                                  \
    TEST(llm_##p##_text_streams) { s_text(#p); }                                                                   \
    TEST(llm_##p##_tool_calls_and_images) { s_tool_round(#p); }                                                    \
    TEST(llm_##p##_no_images_without_vision) { s_no_vision(#p); }                                                 \
    TEST(llm_##p##_retry_429_honours_retry_after) { s_retry429(#p); }                                             \
    FAILURE(p, keyenv, 500_three_times_is_an_error)                                                                \
    FAILURE(p, keyenv, overload_retried)                                                                           \
    FAILURE(p, keyenv, cut_stream_is_an_error)                                                                     \
    FAILURE(p, keyenv, stream_without_end_marker_is_an_error)                                                      \
    FAILURE(p, keyenv, overall_timeout)                                                                            \
    FAILURE(p, keyenv, reply_bound)                                                                                \
    FAILURE(p, keyenv, error_in_mid_stream)                                                                        \
    FAILURE(p, keyenv, 401_names_the_variable)                                                                     \
    TEST(llm_##p##_malformed_arguments_are_a_call) { s_malformed(#p); }                                            \
    TEST(llm_##p##_split_and_crlf_streams) { s_split(#p); }                                                        \
    TEST(llm_##p##_final_request_without_tools) { s_final_without_tools(#p); }                                     \
    TEST(llm_##p##_cancel) { s_cancel(#p); }

PROVIDER_TESTS(openai, "set OPENAI_API_KEY")
PROVIDER_TESTS(anthropic, "set ANTHROPIC_API_KEY")
PROVIDER_TESTS(ollama, "HTTP 401")

/* ---- live progress: tool-call arguments as they stream, retries as they happen ---- */

typedef struct {
    korch_buf_t json[4];    /* per call index: the fragments joined */
    korch_buf_t code[4];    /* per call index: "code" decoded as it came */
    korch_jsonfield_t field[4];
    int fragments, bad_index;
    int cut_escapes;            /* fragments that end inside an escape */
    char name[64];
    int retries, ticks;
    korch_llm_retry_t retry;
    char why[600];
} live_sink_t;

static void s_on_tool_delta(int index, const char *name, const char *json, size_t len, void *arg)
{
    live_sink_t *k = arg;
    if (index < 0 || index >= 4) {
        k->bad_index++;
        return;
    }
    if (!k->fragments++)
        snprintf(k->name, sizeof k->name, "%s", name);
    if (!k->json[index].max) {
        k->json[index].max = k->code[index].max = 1 << 20;
        korch_jsonfield_init(&k->field[index], "code");
    }
    korch_buf_add(&k->json[index], json, len, "fragments", NULL);
    /* ends inside an escape: after its backslash, or within \uXXXX */
    const char *j = k->json[index].p;
    size_t n = k->json[index].len, bs = 0;
    for (size_t i = n; i-- > 0 && n - i <= 6;)
        if (j[i] == '\\') {
            for (size_t b = i + 1; b-- > 0 && j[b] == '\\';)
                bs++;
            if (bs % 2 && (n - i == 1 || (j[i + 1] == 'u' && n - i < 6)))
                k->cut_escapes++;
            break;
        }
    char out[4096 + KORCH_JSONFIELD_SLACK];
    if (len <= 4096)
        korch_buf_add(&k->code[index], out, korch_jsonfield_feed(&k->field[index], json, len, out), "code", NULL);
}

static void s_on_retry(const korch_llm_retry_t *r, void *arg)
{
    live_sink_t *k = arg;
    k->retries++;
    k->retry = *r;
    snprintf(k->why, sizeof k->why, "%s", r->why ? r->why : "");
    k->retry.why = k->why;
}

static void s_on_tick(void *arg) { ((live_sink_t *)arg)->ticks++; }

/* The "live" scenario streams code full of escapes in 1-5 byte pieces:
   the fragments join to the arguments, and the code decoded from them as
   they came is exactly the call's code. Ollama sends the arguments whole:
   one fragment. */
static void s_tool_deltas(const char *provider)
{
    bool whole = strcmp(provider, "ollama") == 0;
    fx_t f;
    if (!s_fx(&f, provider, "live", NULL, "run the escapes"))
        return;
    live_sink_t k = {0};
    korch_llm_request_t req = {.messages = f.msgs, .tools = f.tools, .temperature = -1};
    korch_llm_cb_t cb = {.on_tool_delta = s_on_tool_delta, .arg = &k};
    if (CHECK_EQ(korch_llm_chat(f.llm, &req, &cb, &f.r, &f.err), KORCH_OK) &&
        CHECK_EQ(json_array_size(f.r.tool_calls), 1)) {
        const char *code = s_call_code(f.r.tool_calls, 0);
        if (whole)
            CHECK_EQ(k.fragments, 1);
        else {
            CHECK_GT(k.fragments, 40); /* many small pieces, not one */
            CHECK_GT(k.cut_escapes, 5);
            CHECK(strstr(k.json[0].p, "\\u00e9") != NULL && strstr(k.json[0].p, "\\ud83d\\ude00") != NULL);
        }
        CHECK_EQ(k.bad_index, 0);
        CHECK_STREQ(k.name, "run_python");
        CHECK_STREQ(k.code[0].p, code);
        CHECK_CONTAINS(code, "caf\xc3\xa9 \xf0\x9f\x98\x80"); /* from \u00e9 and a surrogate pair */
        CHECK_CONTAINS(code, "\"say \\\"hi\\\"\\tnow\"");
        json_t *args = json_loadb(k.json[0].p, k.json[0].len, 0, NULL);
        CHECK_STREQ(json_string_value(json_object_get(args, "code")), code);
        json_decref(args);
    } else
        fprintf(stderr, "  %s\n", f.err.msg);
    for (int i = 0; i < 4; i++) {
        korch_buf_free(&k.json[i]);
        korch_buf_free(&k.code[i]);
    }
    s_fx_end(&f);
}

TEST_T(llm_openai_tool_deltas_decode_to_the_code, 60) { s_tool_deltas("openai"); }
TEST_T(llm_anthropic_tool_deltas_decode_to_the_code, 60) { s_tool_deltas("anthropic"); }
TEST_T(llm_ollama_tool_deltas_decode_to_the_code, 60) { s_tool_deltas("ollama"); }

/* A 429 with retry-after: 1 is reported before the wait (attempt, status,
   wait, the API's message), with ticks during it; then the call succeeds. */
static void s_retry_reported(const char *provider)
{
    fx_t f;
    if (!s_fx(&f, provider, "retry429", NULL, "hi"))
        return;
    live_sink_t k = {0};
    korch_llm_request_t req = {.messages = f.msgs, .temperature = -1};
    korch_llm_cb_t cb = {.on_retry = s_on_retry, .on_tick = s_on_tick, .arg = &k};
    if (CHECK_EQ(korch_llm_chat(f.llm, &req, &cb, &f.r, &f.err), KORCH_OK)) {
        CHECK_STREQ(f.r.text, "fine after waiting");
        CHECK_EQ(k.retries, 1);
        CHECK_EQ(k.retry.attempt, 1);
        CHECK_EQ(k.retry.max_retries, 2);
        CHECK_EQ(k.retry.http_status, 429);
        CHECK_EQ(k.retry.wait_ms, 1000);
        CHECK_CONTAINS(k.why, provider[0] == 'a' ? "rate limit" : "Rate limit reached");
        CHECK_GE(k.ticks, 15); /* every 50 ms of the 1 s wait */
    } else
        fprintf(stderr, "  %s\n", f.err.msg);
    s_fx_end(&f);
}

TEST_T(llm_openai_retry_is_reported, 60) { s_retry_reported("openai"); }
TEST_T(llm_anthropic_retry_is_reported, 60) { s_retry_reported("anthropic"); }
