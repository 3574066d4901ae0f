/*  The llm layer without the scripted server (test_llm.c has the wire
 *  formats against it): a port nobody listens on, keys and specs, the
 *  vision guess, retry-after and back-off, the SSE parser, the APIs' error
 *  messages, and the replay provider. */
#define KORCH_TEST_UNIT /* no kernel, docker or browser: make check runs these */
#include "test.h"
#include "korch/llm.h"
#include "../src/llm/provider.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* [system, user text]. */
static json_t *s_user_only(const char *text)
{
    return json_pack("[{s:s, s:s}, {s:s, s:s}]", "role", "system", "content", "You are a data analyst.", "role", "user",
                     "content", text);
}


TEST(llm_closed_port_is_a_clear_error)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    CHECK_EQ(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    getsockname(fd, (struct sockaddr *)&a, &al);
    close(fd);  /* nobody listens there now */
    char base[64];
    snprintf(base, sizeof base, "http://127.0.0.1:%d/v1", ntohs(a.sin_port));
    korch_llm_opts_t o = {.provider = "openai", .model = "gpt-4o-mini", .base_url = base, .api_key = "k"};
    korch_err_t err = {0};
    korch_llm_t *llm = korch_llm_new(&o, &err);
    json_t *msgs = s_user_only("hi");
    korch_llm_reply_t r;
    korch_llm_request_t req = {.messages = msgs, .temperature = -1};
    CHECK_EQ(korch_llm_chat(llm, &req, NULL, &r, &err), KORCH_E_HTTP);
    fprintf(stderr, "  %s\n", err.msg);
    CHECK_CONTAINS(err.msg, "cannot reach the openai API");
    CHECK_CONTAINS(err.msg, base);
    CHECK_CONTAINS(err.msg, "OPENAI_BASE_URL");
    CHECK_EQ(r.attempts, 3);
    json_decref(msgs);
    korch_llm_destroy(&llm);
}

TEST(llm_missing_key_names_the_variable)
{
    unsetenv("OPENAI_API_KEY");
    unsetenv("OPENAI_BASE_URL");
    unsetenv("ANTHROPIC_API_KEY");
    unsetenv("ANTHROPIC_BASE_URL");
    korch_llm_opts_t o = {0};
    korch_err_t err = {0};
    CHECK_EQ(korch_llm_parse_spec("openai:gpt-4o-mini", &o, &err), KORCH_OK);
    CHECK(korch_llm_new(&o, &err) == NULL);
    CHECK_STREQ(err.msg, "OPENAI_API_KEY is not set (export it, or pick another --llm)");
    korch_err_clear(&err);
    o = (korch_llm_opts_t){0};
    CHECK_EQ(korch_llm_parse_spec("anthropic:claude-sonnet-4-5", &o, &err), KORCH_OK);
    CHECK(korch_llm_new(&o, &err) == NULL);
    CHECK_CONTAINS(err.msg, "ANTHROPIC_API_KEY is not set");
    /* from the environment */
    setenv("ANTHROPIC_API_KEY", "sk-ant-x", 1);
    korch_err_clear(&err);
    korch_llm_t *llm = korch_llm_new(&o, &err);
    CHECK(llm != NULL);
    CHECK_STREQ(korch_llm_name(llm), "anthropic:claude-sonnet-4-5");
    CHECK(korch_llm_vision(llm));
    CHECK(korch_llm_notice(llm) == NULL);
    korch_llm_destroy(&llm);
    /* ollama needs no key; OLLAMA_HOST without a scheme or port */
    setenv("OLLAMA_HOST", "example.internal", 1);
    o = (korch_llm_opts_t){.provider = "ollama", .model = "llama3.1"};
    llm = korch_llm_new(&o, &err);
    if (CHECK(llm != NULL))
        CHECK_STREQ(llm->base_url, "http://example.internal:11434");
    korch_llm_destroy(&llm);
    const char *hosts[][2] = {{"0.0.0.0:8080", "http://0.0.0.0:8080"}, {"[::1]", "http://[::1]:11434"},
                              {"https://ollama.example.com/", "https://ollama.example.com"},
                              {"http://gpu:11434", "http://gpu:11434"}};
    for (size_t i = 0; i < 4; i++) {
        setenv("OLLAMA_HOST", hosts[i][0], 1);
        llm = korch_llm_new(&o, &err);
        if (CHECK(llm != NULL))
            CHECK_STREQ(llm->base_url, hosts[i][1]);
        korch_llm_destroy(&llm);
    }
}

TEST(llm_parse_spec)
{
    korch_llm_opts_t o = {0};
    korch_err_t err = {0};
    CHECK_EQ(korch_llm_parse_spec("ollama:llama3.1:8b", &o, &err), KORCH_OK);
    CHECK_STREQ(o.provider, "ollama");
    CHECK_STREQ(o.model, "llama3.1:8b");
    CHECK_EQ(korch_llm_parse_spec("replay:/tmp/a:b.json", &o, &err), KORCH_OK);
    CHECK_STREQ(o.provider, "replay");
    CHECK_STREQ(o.model, "/tmp/a:b.json");
    CHECK_EQ(korch_llm_parse_spec("gemini:pro", &o, &err), KORCH_E_INVALID);
    CHECK_CONTAINS(err.msg, "unknown llm provider 'gemini'");
    korch_err_clear(&err);
    CHECK_EQ(korch_llm_parse_spec("openai", &o, &err), KORCH_E_INVALID);
    CHECK_CONTAINS(err.msg, "openai:MODEL");
    korch_err_clear(&err);
    CHECK_EQ(korch_llm_parse_spec("", &o, &err), KORCH_E_INVALID);
}

TEST(llm_vision_guess)
{
    const struct { const char *provider, *model; bool vision; } cases[] = {
        {"openai", "gpt-4o-mini", true}, {"openai", "gpt-4.1-nano", true}, {"openai", "gpt-5", true},
        {"openai", "o4-mini", true},     {"openai", "o3-mini", false},     {"openai", "gpt-3.5-turbo", false},
        {"anthropic", "claude-3-5-sonnet-latest", true}, {"anthropic", "claude-opus-4-1", true},
        {"ollama", "llava:13b", true},   {"ollama", "llama3.2-vision", true}, {"ollama", "qwen2.5vl:7b", true},
        {"ollama", "gemma3:4b", true},   {"ollama", "llama3.1:8b", false}, {"ollama", "qwen2.5-coder", false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        korch_llm_opts_t o = {.provider = cases[i].provider, .model = cases[i].model, .api_key = "k"};
        korch_err_t err = {0};
        korch_llm_t *llm = korch_llm_new(&o, &err);
        if (!CHECK(llm))
            continue;
        if (korch_llm_vision(llm) != cases[i].vision)
            CHECK_STREQ(cases[i].model, "(vision guessed wrong)");
        korch_llm_destroy(&llm);
    }
    korch_llm_opts_t o = {.provider = "ollama", .model = "llama3.1", .vision = true, .vision_set = true};
    korch_llm_t *llm = korch_llm_new(&o, NULL);
    CHECK(korch_llm_vision(llm));
    korch_llm_destroy(&llm);
}

TEST(llm_retry_after_and_backoff)
{
    time_t now = 1700000000;
    CHECK_EQ((long)(korch_llm_retry_after_s("1500", "9", now) * 1000), 1500);
    CHECK_EQ((long)korch_llm_retry_after_s(NULL, "2", now), 2);
    CHECK_EQ((long)(korch_llm_retry_after_s(NULL, "0.5", now) * 10), 5);
    /* an HTTP date 5 s ahead */
    CHECK_EQ((long)korch_llm_retry_after_s(NULL, "Tue, 14 Nov 2023 22:13:25 GMT", now), 5);
    CHECK(korch_llm_retry_after_s(NULL, "600", now) < 0);      /* over a minute: use the backoff */
    CHECK(korch_llm_retry_after_s(NULL, "soon", now) < 0);
    CHECK(korch_llm_retry_after_s(NULL, NULL, now) < 0);
    for (int n = 0; n < 8; n++) {
        double want = n >= 4 ? 8.0 : 0.5 * (1 << n);
        double b = korch_llm_backoff_s(n);
        CHECK(b <= want && b >= want * 0.75);
    }
}

static korch_rc_t s_count_event(void *arg, const char *event, char *data, size_t len, korch_err_t *err)
{
    json_t *events = arg;
    json_array_append_new(events, json_pack("{s:s, s:s#}", "event", event, "data", data, len));
    return KORCH_OK;
}

TEST(llm_sse_parser)
{
    json_t *events = json_array();
    korch_llm_sse_t sse;
    korch_llm_sse_init(&sse, 1 << 20, s_count_event, events);
    const char *lines[] = {": comment", "event: a", "data: one", "data:two", "", "", "id: 3", "data: x", "retry: 5",
                           "", "data: cut before its blank line"};
    for (size_t i = 0; i < sizeof lines / sizeof *lines; i++) {
        char buf[64];
        snprintf(buf, sizeof buf, "%s", lines[i]);
        CHECK_EQ(korch_llm_sse_line(&sse, buf, strlen(buf), NULL), KORCH_OK);
    }
    CHECK_EQ(json_array_size(events), 2);
    CHECK_STREQ(korch_llm_jstr(json_array_get(events, 0), "event", ""), "a");
    CHECK_STREQ(korch_llm_jstr(json_array_get(events, 0), "data", ""), "one\ntwo");
    CHECK_STREQ(korch_llm_jstr(json_array_get(events, 1), "event", "?"), "");
    CHECK_STREQ(korch_llm_jstr(json_array_get(events, 1), "data", ""), "x");
    korch_llm_sse_free(&sse);
    json_decref(events);
}

TEST(llm_api_error_messages)
{
    char m[256];
    const char *oa = "{\"error\":{\"message\":\"Rate limit reached\",\"type\":\"requests\",\"param\":null}}";
    korch_llm_api_message(oa, strlen(oa), m, sizeof m);
    CHECK_STREQ(m, "Rate limit reached (requests)");
    const char *an = "{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}";
    korch_llm_api_message(an, strlen(an), m, sizeof m);
    CHECK_STREQ(m, "Overloaded (overloaded_error)");
    const char *ol = "{\"error\":\"model 'x' not found\"}";
    korch_llm_api_message(ol, strlen(ol), m, sizeof m);
    CHECK_STREQ(m, "model 'x' not found");
    const char *html = "<html>502 Bad Gateway</html>\n<body>";
    korch_llm_api_message(html, strlen(html), m, sizeof m);
    CHECK_STREQ(m, "<html>502 Bad Gateway</html>");
}

/* ---- replay ---- */

static void s_collect_text(const char *delta, size_t len, void *arg)
{
    korch_buf_add(arg, delta, len, "text", NULL);
}

TEST(llm_replay_plays_in_order)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/data/llm/replay-basic.json", korch_test_root());
    korch_llm_opts_t o = {0};
    korch_err_t err = {0};
    char spec[4200];
    snprintf(spec, sizeof spec, "replay:%s", path);
    CHECK_EQ(korch_llm_parse_spec(spec, &o, &err), KORCH_OK);
    korch_llm_t *llm = korch_llm_new(&o, &err);
    if (!CHECK(llm)) {
        fprintf(stderr, "  %s\n", err.msg);
        return;
    }
    CHECK_CONTAINS(korch_llm_notice(llm), "replaying a recorded conversation from ");
    CHECK_CONTAINS(korch_llm_notice(llm), path);
    CHECK_CONTAINS(korch_llm_notice(llm), "no model is being called");
    json_t *msgs = s_user_only("anything");
    korch_llm_request_t req = {.messages = msgs, .temperature = -1};
    korch_buf_t text = {.max = 1 << 20};
    korch_llm_cb_t cb = {.on_text = s_collect_text, .arg = &text};
    korch_llm_reply_t r;
    CHECK_EQ(korch_llm_chat(llm, &req, &cb, &r, &err), KORCH_OK);
    CHECK_STREQ(r.text, "First I load the data.\nThen I look.");
    CHECK_STREQ(text.p, r.text);
    CHECK_STREQ(r.finish, "tool_calls");
    CHECK_EQ(json_array_size(r.tool_calls), 1);
    CHECK_STREQ(korch_llm_jstr(json_array_get(r.tool_calls, 0), "id", ""), "replay_1");
    CHECK_STREQ(json_string_value(json_object_get(json_object_get(json_array_get(r.tool_calls, 0), "arguments"), "code")),
                "import pandas as pd\ndf = pd.read_csv('sales.csv')");
    korch_llm_reply_clear(&r);
    CHECK_EQ(korch_llm_chat(llm, &req, &cb, &r, &err), KORCH_OK);
    CHECK_EQ(json_array_size(r.tool_calls), 2);
    CHECK_STREQ(korch_llm_jstr(json_array_get(r.tool_calls, 1), "id", ""), "replay_3");
    korch_llm_reply_clear(&r);
    CHECK_EQ(korch_llm_chat(llm, &req, &cb, &r, &err), KORCH_OK);
    CHECK_STREQ(r.text, "Sales rose 12 % in March.");
    CHECK_STREQ(r.finish, "stop");
    CHECK_EQ(json_array_size(r.tool_calls), 0);
    korch_llm_reply_clear(&r);
    CHECK_EQ(korch_llm_chat(llm, &req, &cb, &r, &err), KORCH_E_STATE);
    CHECK_CONTAINS(err.msg, "has no more replies (it holds 3)");
    korch_buf_free(&text);
    json_decref(msgs);
    korch_llm_destroy(&llm);
}

TEST(llm_replay_bad_recordings)
{
    korch_err_t err = {0};
    korch_llm_opts_t o = {.provider = "replay", .model = "/nonexistent/recording.json"};
    CHECK(korch_llm_new(&o, &err) == NULL);
    CHECK_CONTAINS(err.msg, "cannot read the recording '/nonexistent/recording.json'");
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/data/llm/replay-invalid.json", korch_test_root());
    o.model = path;
    korch_err_clear(&err);
    CHECK(korch_llm_new(&o, &err) == NULL);
    CHECK_CONTAINS(err.msg, "reply 2 of the recording");
}
