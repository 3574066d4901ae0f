/*  The agent end to end: korch run / korch chat against a real kernel and
 *  the scripted LLM server (tests/peers/llm_server.py, scenarios in
 *  tests/peers/agent_scenarios.py), for each provider's wire format. */
#include "test.h"
#include "korch/media.h"

#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct {
    pid_t pid;
    int port;
} server_t;

static bool s_server_start(server_t *s)
{
    char path[600], line[64];
    snprintf(path, sizeof path, "%s/tests/peers/llm_server.py", korch_test_root());
    const char *argv[] = {"/usr/bin/python3", path, NULL};
    s->pid = korch_test_spawn_line(argv, line, sizeof line, 10, NULL);
    s->port = s->pid > 0 ? atoi(line) : 0;
    return CHECK_GT(s->port, 0);
}

static void s_server_stop(server_t *s)
{
    if (s->pid > 0) {
        kill(s->pid, SIGTERM);
        waitpid(s->pid, NULL, 0);
    }
}

/* Point every provider's base URL at the scenario. */
static void s_env(const server_t *s, const char *scenario)
{
    char url[256];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/s/%s/v1", s->port, scenario);
    setenv("OPENAI_BASE_URL", url, 1);
    snprintf(url, sizeof url, "http://127.0.0.1:%d/s/%s", s->port, scenario);
    setenv("ANTHROPIC_BASE_URL", url, 1);
    setenv("OLLAMA_HOST", url, 1);
    setenv("OPENAI_API_KEY", "sk-test", 1);
    setenv("ANTHROPIC_API_KEY", "sk-ant-test", 1);
    unsetenv("KORCH_LLM");
}

static char *s_tmpdir(void)
{
    char *d = strdup("/tmp/korch-agent-XXXXXX");
    if (!mkdtemp(d)) {
        free(d);
        return NULL;
    }
    return d;
}

static void s_rmrf(const char *d)
{
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", d);
    CHECK_EQ(system(cmd), 0);
}

static const char *s_launcher = "local";

/* korch run ... ; returns the exit status; out/err new strings. */
static int s_run(const char *const *args, char **out, char **err)
{
    const char *argv[40] = {korch_test_korch_bin(), "run", "--launcher", s_launcher};
    int n = 4;
    for (int i = 0; args[i] && n < 39; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    return korch_test_run(argv, NULL, out, err, 170);
}

static void s_analysis(const char *llm, bool vision)
{
    server_t srv = {0};
    if (!s_server_start(&srv))
        return;
    s_env(&srv, "analysis");
    char *dir = s_tmpdir(), session[300], csv[600];
    snprintf(session, sizeof session, "%s/s", dir);
    snprintf(csv, sizeof csv, "%s/scripts/demo/sales.csv", korch_test_root());
    char *out = NULL, *err = NULL;
    int rc = s_run((const char *[]){"--llm", llm, vision ? "--vision" : "--no-vision", "--file", csv, "--session",
                                    session, "What is the total revenue?", NULL},
                   &out, &err);
    CHECK_EQ(rc, 0);
    /* 28607.50 and 3870 only exist if the kernel's real output reached the model */
    CHECK_CONTAINS(out, "Total revenue is 28607.50 from 3695 units");
    CHECK_CONTAINS(out, vision ? "chart seen as 1 image(s)" : "chart named: image/png");
    CHECK_CONTAINS(err, "KeyError");
    if (rc != 0)
        fprintf(stderr, "%s\n", err);
    /* the session: PNG, notebook that validates, transcript */
    char path[700];
    snprintf(path, sizeof path, "%s/figures/fig-1.png", session);
    size_t len = 0;
    char *png = korch_read_file(path, 1 << 24, &len, NULL);
    CHECK(png && len > 1000 && memcmp(png, "\x89PNG", 4) == 0);
    free(png);
    char code[1200], *v = NULL;
    snprintf(code, sizeof code,
             "import nbformat\nnb = nbformat.read('%s/notebook.ipynb', as_version=4)\nnbformat.validate(nb)\n"
             "code = [c for c in nb.cells if c.cell_type == 'code']\n"
             "pngs = sum(1 for c in code for o in c.outputs if 'image/png' in o.get('data', {}))\n"
             "errs = sum(1 for c in code for o in c.outputs if o.output_type == 'error')\n"
             "print(len(code), pngs, errs, [c.execution_count for c in code])",
             session);
    const char *argv[] = {"/usr/bin/python3", "-c", code, NULL};
    CHECK_EQ(korch_test_run(argv, NULL, &v, NULL, 60), 0);
    CHECK_STREQ(v, "4 1 1 [1, 2, 3, 4]\n");
    free(v);
    snprintf(path, sizeof path, "%s/transcript.jsonl", session);
    char *t = korch_read_file(path, 1 << 26, &len, NULL);
    CHECK_CONTAINS(t, "\"type\":\"final\"");
    CHECK_CONTAINS(t, "\"type\":\"execution\"");
    free(t);
    /* what korch sent: the tool result with the real number went back */
    snprintf(code, sizeof code,
             "import json, urllib.request\nr = json.load(urllib.request.urlopen('http://127.0.0.1:%d/s/analysis/requests'))\n"
             "print(len(r), any('UNITS=3695' in json.dumps(x) for x in r))",
             srv.port);
    const char *argv2[] = {"/usr/bin/python3", "-c", code, NULL};
    CHECK_EQ(korch_test_run(argv2, NULL, &v, NULL, 60), 0);
    CHECK_STREQ(v, "5 True\n");
    free(v);
    free(out);
    free(err);
    s_rmrf(dir);
    free(dir);
    s_server_stop(&srv);
}

TEST_T(agent_openai_analysis_with_error_and_chart, 180) { s_analysis("openai:gpt-4o-mini", true); }
TEST_T(agent_anthropic_analysis_with_error_and_chart, 180) { s_analysis("anthropic:claude-sonnet-4-5", true); }
TEST_T(agent_ollama_analysis_with_error_and_chart, 180) { s_analysis("ollama:llama3.1", false); }

/* The same session with the kernel in a hardened container. */
TEST_T(agent_analysis_in_docker, 180)
{
    s_launcher = "docker";
    s_analysis("openai:gpt-4o-mini", true);
}

/* The same session with the kernel in the sandbox (bubblewrap + a cgroup). */
TEST_T(agent_analysis_in_sandbox, 180)
{
    s_launcher = "sandbox";
    s_analysis("openai:gpt-4o-mini", true);
}

TEST_T(agent_multi_turn_and_resume_after_restart, 180)
{
    server_t srv = {0};
    if (!s_server_start(&srv))
        return;
    s_env(&srv, "turns");
    char *dir = s_tmpdir(), session[300];
    snprintf(session, sizeof session, "%s/s", dir);
    /* korch chat: two turns in one process */
    const char *argv[] = {korch_test_korch_bin(), "chat", "--launcher", "local", "--llm", "openai:gpt-4o-mini",
                          "--session", session, NULL};
    char *out = NULL, *err = NULL;
    CHECK_EQ(korch_test_run(argv, "remember a number\n/files\nnow use it\n", &out, &err, 170), 0);
    CHECK_CONTAINS(out, "Stored.");
    CHECK_CONTAINS(out, "The answer is 43.");
    free(out);
    free(err);
    /* a new korch process on the same session: the transcript is reloaded
       and the kernel's state rebuilt by re-running the successful cells */
    CHECK_EQ(s_run((const char *[]){"--llm", "openai:gpt-4o-mini", "--session", session, "use it again", NULL}, &out,
                   &err),
             0);
    CHECK_CONTAINS(err, "resumed session");
    CHECK_CONTAINS(out, "The answer is 43.");
    free(out);
    free(err);
    s_rmrf(dir);
    free(dir);
    s_server_stop(&srv);
}

TEST_T(agent_kernel_death_is_told_and_session_goes_on, 180)
{
    server_t srv = {0};
    if (!s_server_start(&srv))
        return;
    s_env(&srv, "dies");
    char *dir = s_tmpdir(), session[300], *out = NULL, *err = NULL;
    snprintf(session, sizeof session, "%s/s", dir);
    CHECK_EQ(s_run((const char *[]){"--llm", "anthropic:claude-sonnet-4-5", "--session", session, "go", NULL}, &out,
                   &err),
             0);
    CHECK_CONTAINS(out, "Recovered: FRESH False.");
    CHECK_CONTAINS(err, "kernel died");
    free(out);
    free(err);
    s_rmrf(dir);
    free(dir);
    s_server_stop(&srv);
}

TEST_T(agent_max_steps_then_final_answer_without_tools, 180)
{
    server_t srv = {0};
    if (!s_server_start(&srv))
        return;
    s_env(&srv, "forever");
    char *dir = s_tmpdir(), session[300], *out = NULL, *err = NULL;
    snprintf(session, sizeof session, "%s/s", dir);
    CHECK_EQ(s_run((const char *[]){"--llm", "ollama:llama3.1", "--max-steps", "3", "--session", session, "loop", NULL},
                   &out, &err),
             0);
    CHECK_CONTAINS(out, "Stopped after 3 results.");
    CHECK_CONTAINS(err, "step limit");
    free(out);
    free(err);
    s_rmrf(dir);
    free(dir);
    s_server_stop(&srv);
}

TEST_T(agent_malformed_tool_json_goes_back_to_the_model, 180)
{
    server_t srv = {0};
    if (!s_server_start(&srv))
        return;
    s_env(&srv, "badjson");
    char *dir = s_tmpdir(), session[300], *out = NULL, *err = NULL;
    snprintf(session, sizeof session, "%s/s", dir);
    CHECK_EQ(s_run((const char *[]){"--llm", "openai:gpt-4o-mini", "--session", session, "go", NULL}, &out, &err), 0);
    CHECK_CONTAINS(out, "Fixed: OK 5.");
    free(out);
    free(err);
    s_rmrf(dir);
    free(dir);
    s_server_stop(&srv);
}

TEST_T(agent_fence_mode, 180)
{
    server_t srv = {0};
    if (!s_server_start(&srv))
        return;
    s_env(&srv, "fence");
    char *dir = s_tmpdir(), session[300], *out = NULL, *err = NULL;
    snprintf(session, sizeof session, "%s/s", dir);
    CHECK_EQ(s_run((const char *[]){"--llm", "ollama:llama3.1", "--fence", "--session", session, "compute", NULL}, &out,
                   &err),
             0);
    CHECK_CONTAINS(out, "The kernel said FENCE=42.");
    free(out);
    free(err);
    s_rmrf(dir);
    free(dir);
    s_server_stop(&srv);
}

TEST_T(agent_json_events_and_no_llm_message, 180)
{
    server_t srv = {0};
    if (!s_server_start(&srv))
        return;
    s_env(&srv, "turns");
    char *dir = s_tmpdir(), session[300], *out = NULL, *err = NULL;
    snprintf(session, sizeof session, "%s/s", dir);
    CHECK_EQ(s_run((const char *[]){"--llm", "openai:gpt-4o-mini", "--json", "--session", session,
                                    "remember a number", NULL},
                   &out, &err),
             0);
    int steps = 0, codes = 0, finals = 0;
    char *save = NULL;
    for (char *l = strtok_r(out, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        json_t *ev = json_loads(l, 0, NULL);
        if (!CHECK(ev))
            continue;
        const char *kind = json_string_value(json_object_get(ev, "event"));
        steps += kind && strcmp(kind, "step") == 0;
        codes += kind && strcmp(kind, "code") == 0;
        finals += kind && strcmp(kind, "final") == 0;
        json_decref(ev);
    }
    CHECK_EQ(steps, 2);
    CHECK_EQ(codes, 1);
    CHECK_EQ(finals, 1);
    free(out);
    free(err);
    /* no LLM configured: say how to configure one */
    unsetenv("KORCH_LLM");
    CHECK_EQ(s_run((const char *[]){"--session", session, "anything", NULL}, &out, &err), 2);
    CHECK_CONTAINS(err, "no LLM configured");
    CHECK_CONTAINS(err, "OPENAI_API_KEY");
    free(out);
    free(err);
    s_rmrf(dir);
    free(dir);
    s_server_stop(&srv);
}

/* kill -9 during a slow model call, then resume: nothing said before is lost. */
TEST_T(agent_resume_after_kill_9, 180)
{
    server_t srv = {0};
    if (!s_server_start(&srv))
        return;
    s_env(&srv, "slowthink");
    char *dir = s_tmpdir(), session[300], transcript[400];
    snprintf(session, sizeof session, "%s/s", dir);
    snprintf(transcript, sizeof transcript, "%s/transcript.jsonl", session);
    pid_t pid = fork();
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        dup2(devnull, 1);
        dup2(devnull, 2);
        execl(korch_test_korch_bin(), "korch", "run", "--launcher", "local", "--llm", "openai:gpt-4o-mini",
              "--session", session, "think slowly", (char *)NULL);
        _exit(127);
    }
    /* wait until step 1's execution is on disk, then kill korch mid-answer */
    bool seen = false;
    for (int i = 0; i < 600 && !seen; i++) {
        usleep(100000);
        char *t = korch_read_file(transcript, 1 << 24, NULL, NULL);
        seen = t && strstr(t, "\"type\":\"execution\"");
        free(t);
    }
    CHECK(seen);
    usleep(1500000);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    char *out = NULL, *err = NULL;
    CHECK_EQ(s_run((const char *[]){"--llm", "openai:gpt-4o-mini", "--session", session, "resume please", NULL}, &out,
                   &err),
             0);
    CHECK_CONTAINS(err, "resumed session");
    CHECK_CONTAINS(out, "State after resume: resumed ok.");
    free(out);
    free(err);
    s_rmrf(dir);
    free(dir);
    s_server_stop(&srv);
}

TEST_T(agent_tool_call_printed_as_text_is_run, 180)
{
    server_t srv = {0};
    if (!s_server_start(&srv))
        return;
    s_env(&srv, "printed");
    char *dir = s_tmpdir(), session[300], *out = NULL, *err = NULL;
    snprintf(session, sizeof session, "%s/s", dir);
    CHECK_EQ(s_run((const char *[]){"--llm", "openai:gpt-4o-mini", "--session", session, "go", NULL}, &out, &err), 0);
    CHECK_CONTAINS(out, "Ran it: PRINTED 42.");
    free(out);
    free(err);
    s_rmrf(dir);
    free(dir);
    s_server_stop(&srv);
}

/* The model's API keeps failing: a clear error, and what was said is on disk. */
TEST_T(agent_model_500s_give_a_clear_error_and_keep_the_session, 180)
{
    server_t srv = {0};
    if (!s_server_start(&srv))
        return;
    s_env(&srv, "fail500");
    char *dir = s_tmpdir(), session[300], path[400], *out = NULL, *err = NULL;
    snprintf(session, sizeof session, "%s/s", dir);
    CHECK_EQ(s_run((const char *[]){"--llm", "anthropic:claude-sonnet-4-5", "--session", session, "first question",
                                    NULL},
                   &out, &err),
             1);
    CHECK_CONTAINS(err, "500");
    snprintf(path, sizeof path, "%s/transcript.jsonl", session);
    char *t = korch_read_file(path, 1 << 20, NULL, NULL);
    CHECK_CONTAINS(t, "\"content\":\"first question\"");
    CHECK_CONTAINS(t, "\"type\":\"error\"");
    free(t);
    free(out);
    free(err);
    s_rmrf(dir);
    free(dir);
    s_server_stop(&srv);
}

/* ---- live progress (issue 11): code as it is written, waits, tokens, the terminal ---- */

/* korch chat ... with input on stdin; returns the exit status. */
static int s_chat(const char *llm, const char *session, const char *input, char **out, char **err)
{
    const char *argv[] = {korch_test_korch_bin(), "chat", "--launcher", s_launcher, "--llm", llm, "--session", session,
                          NULL};
    return korch_test_run(argv, input, out, err, 100);
}

/* The scripted server on a scenario and a fresh session dir. */
typedef struct {
    server_t srv;
    char *dir;
    char session[300];
} live_t;

static bool s_live_begin(live_t *t, const char *scenario)
{
    memset(t, 0, sizeof *t);
    if (!s_server_start(&t->srv))
        return false;
    s_env(&t->srv, scenario);
    t->dir = s_tmpdir();
    snprintf(t->session, sizeof t->session, "%s/s", t->dir);
    return CHECK(t->dir != NULL);
}

static void s_live_end(live_t *t)
{
    if (t->dir)
        s_rmrf(t->dir);
    free(t->dir);
    s_server_stop(&t->srv);
}

/* korch run --json: code_delta events of each step join to exactly the code
   run, for code whose JSON is full of escapes streamed in 1-5 byte pieces
   (so escapes are cut in the middle); the answer quotes what that code
   printed, which only comes out right if every escape arrived intact. */
static void s_code_deltas(const char *llm)
{
    live_t t;
    if (!s_live_begin(&t, "live"))
        return;
    char *out = NULL, *err = NULL;
    CHECK_EQ(s_run((const char *[]){"--llm", llm, "--json", "--session", t.session, "run the escapes", NULL}, &out, &err),
             0);
    char *deltas = calloc(1, 1), *code = NULL, *answer = NULL, *save = NULL;
    int ndeltas = 0, code_step = -1, delta_step = -1;
    for (char *l = strtok_r(out, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        json_t *ev = json_loads(l, 0, NULL);
        const char *kind = json_string_value(json_object_get(ev, "event"));
        if (kind && strcmp(kind, "code_delta") == 0) {
            json_t *d = json_object_get(ev, "delta");
            size_t have = strlen(deltas), add = json_string_length(d);
            deltas = realloc(deltas, have + add + 1);
            memcpy(deltas + have, json_string_value(d), add);
            deltas[have + add] = 0;
            ndeltas++;
            delta_step = (int)json_integer_value(json_object_get(ev, "step"));
            CHECK(!code); /* all of them before the code runs */
        } else if (kind && strcmp(kind, "code") == 0) {
            code = strdup(json_string_value(json_object_get(ev, "code")));
            code_step = (int)json_integer_value(json_object_get(ev, "step"));
        } else if (kind && strcmp(kind, "final") == 0)
            answer = strdup(json_string_value(json_object_get(ev, "answer")));
        json_decref(ev);
    }
    CHECK_GT(ndeltas, 10);
    CHECK_EQ(delta_step, code_step);
    CHECK_STREQ(deltas, code);
    CHECK_CONTAINS(code, "name = \"caf\xc3\xa9 \xf0\x9f\x98\x80\"\nquote = \"say \\\"hi\\\"\\tnow\"\npath = \"C:\\\\temp\\\\x\"");
    CHECK_CONTAINS(answer, "The code printed LIVE 6 12 9 caf\xc3\xa9 \xf0\x9f\x98\x80.");
    free(deltas);
    free(code);
    free(answer);
    free(out);
    free(err);
    s_live_end(&t);
}

TEST_T(agent_openai_code_deltas_join_to_the_code_run, 120) { s_code_deltas("openai:gpt-4o-mini"); }
TEST_T(agent_anthropic_code_deltas_join_to_the_code_run, 120) { s_code_deltas("anthropic:claude-sonnet-4-5"); }

/* A 429 with retry-after: 2: status events say so while korch waits
   (attempt, retry_in_ms counting down, the HTTP status), then the model
   phase again, then the answer; plain lines on stderr (not a terminal). */
TEST_T(agent_status_events_during_a_429_back_off, 120)
{
    live_t t;
    if (!s_live_begin(&t, "live"))
        return;
    char *out = NULL, *err = NULL, *save = NULL;
    CHECK_EQ(s_run((const char *[]){"--llm", "openai:gpt-4o-mini", "--json", "--session", t.session, "rate me", NULL},
                   &out, &err),
             0);
    int retries = 0, model_after = 0, finals = 0;
    long long first_wait = -1, last_wait = -1;
    for (char *l = strtok_r(out, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        json_t *ev = json_loads(l, 0, NULL);
        const char *kind = json_string_value(json_object_get(ev, "event"));
        const char *phase = json_string_value(json_object_get(ev, "phase"));
        if (kind && strcmp(kind, "status") == 0 && phase && strcmp(phase, "retry") == 0) {
            CHECK(!finals && !model_after);
            CHECK_EQ(json_integer_value(json_object_get(ev, "attempt")), 1);
            CHECK_EQ(json_integer_value(json_object_get(ev, "http_status")), 429);
            CHECK(json_is_integer(json_object_get(ev, "retry_in_ms")));
            CHECK(json_is_integer(json_object_get(ev, "elapsed_ms")));
            last_wait = json_integer_value(json_object_get(ev, "retry_in_ms"));
            if (!retries++)
                first_wait = last_wait;
        } else if (kind && strcmp(kind, "status") == 0 && phase && strcmp(phase, "model") == 0 && retries)
            model_after++;
        else if (kind && strcmp(kind, "final") == 0) {
            finals++;
            CHECK_STREQ(json_string_value(json_object_get(ev, "answer")), "Waited, then answered: rate me.");
        }
        json_decref(ev);
    }
    CHECK_GE(retries, 2); /* when the back-off begins, and about every second of it */
    CHECK_EQ(first_wait, 2000);
    CHECK_LT(last_wait, first_wait);
    CHECK_GE(model_after, 1);
    CHECK_EQ(finals, 1);
    free(out);
    free(err);
    /* without --json, on a pipe: one plain line when the back-off begins */
    CHECK_EQ(s_run((const char *[]){"--llm", "openai:gpt-4o-mini", "--session", t.session, "rate me again", NULL}, &out,
                   &err),
             0);
    CHECK_CONTAINS(err, "\n  … the model answered HTTP 429: retry 1 in 2.0 s (0.0 s since the request)\n");
    CHECK_STREQ(out, "Waited, then answered: rate me again.\n");
    free(out);
    free(err);
    s_live_end(&t);
}

/* The usage the scripted server reported for requests [from, to), as "IN OUT". */
static void s_reported(const server_t *srv, const char *scenario, int from, int to, long long *in, long long *out)
{
    char code[600], *v = NULL;
    snprintf(code, sizeof code,
             "import json, urllib.request\n"
             "r = json.load(urllib.request.urlopen('http://127.0.0.1:%d/s/%s/requests'))[%d:%d]\n"
             "print(sum(x['usage']['input'] for x in r), sum(x['usage']['output'] for x in r), len(r))",
             srv->port, scenario, from, to);
    const char *argv[] = {"/usr/bin/python3", "-c", code, NULL};
    int n = 0;
    *in = *out = -1;
    if (CHECK_EQ(korch_test_run(argv, NULL, &v, NULL, 30), 0))
        CHECK_EQ(sscanf(v, "%lld %lld %d", in, out, &n), 3);
    CHECK_EQ(n, to - from);
    free(v);
}

/* korch chat through pipes, two turns: each ends with the turn's tokens and
   the session's, the numbers the scripted server reported; the answers go
   to stdout once each. */
TEST_T(agent_chat_tokens_per_turn_and_session, 120)
{
    live_t t;
    if (!s_live_begin(&t, "turns"))
        return;
    char *out = NULL, *err = NULL;
    CHECK_EQ(s_chat("anthropic:claude-sonnet-4-5", t.session, "remember a number\nnow use it\n", &out, &err), 0);
    CHECK_STREQ(out, "\nStored.\n\nThe answer is 43.\n");
    long long in1, out1, in2, out2;
    s_reported(&t.srv, "turns", 0, 2, &in1, &out1);
    s_reported(&t.srv, "turns", 2, 4, &in2, &out2);
    CHECK_GT(in1, 100);
    char want[256];
    snprintf(want, sizeof want, "tokens: %lld in + %lld out (session: %lld in + %lld out) ──\n", in1, out1, in1, out1);
    CHECK_CONTAINS(err, want);
    snprintf(want, sizeof want, "tokens: %lld in + %lld out (session: %lld in + %lld out) ──\n", in2, out2, in1 + in2,
             out1 + out2);
    CHECK_CONTAINS(err, want);
    CHECK_CONTAINS(err, "── 2 steps, ");
    free(out);
    free(err);
    s_live_end(&t);
}

/* korch chat on a terminal (tests/peers/pty_chat.py runs it in a pty): the
   narration, the code and the answer show as the model writes them, the
   answer once; a 429 back-off is one status line counting down in place. */
static void s_pty(const char *scenario, const char *mode)
{
    live_t t;
    if (!s_live_begin(&t, scenario))
        return;
    char peer[600], *out = NULL;
    snprintf(peer, sizeof peer, "%s/tests/peers/pty_chat.py", korch_test_root());
    const char *argv[] = {"/usr/bin/python3", peer, mode, korch_test_korch_bin(), "chat", "--launcher", "local",
                          "--llm", "openai:gpt-4o-mini", "--session", t.session, NULL};
    int rc = korch_test_run(argv, NULL, &out, NULL, 150);
    json_t *j = out ? json_loads(out, JSON_DISABLE_EOF_CHECK, NULL) : NULL;
    if (!CHECK_EQ(rc, 0) || !CHECK(json_is_true(json_object_get(j, "ok"))))
        fprintf(stderr, "  %s\n", out ? out : "(no output)");
    else {
        json_object_del(json_object_get(j, "details"), "screen_tail");
        char *d = json_dumps(json_object_get(j, "details"), JSON_COMPACT);
        fprintf(stderr, "  %s\n", d);
        free(d);
    }
    json_decref(j);
    free(out);
    s_live_end(&t);
}

TEST_T(agent_chat_on_a_terminal_streams_narration_code_and_the_answer_once, 180) { s_pty("narrate", "narrate"); }
TEST_T(agent_chat_on_a_terminal_counts_a_back_off_down_in_place, 180) { s_pty("live", "rate"); }

/* Through a pipe the narration streams on stderr and the answer is on stdout once. */
TEST_T(agent_chat_through_a_pipe_answers_once, 120)
{
    live_t t;
    if (!s_live_begin(&t, "narrate"))
        return;
    char *out = NULL, *err = NULL;
    CHECK_EQ(s_chat("openai:gpt-4o-mini", t.session, "what is it?\n", &out, &err), 0);
    CHECK_STREQ(out, "\nThe kernel says NARR 42, so that is the answer.\n");
    CHECK_CONTAINS(err, "── step 1 ──\nLet me work this out in the kernel first, one moment please.\n▶ code:\n"
                        "    x = 6 * 7\n    print('NARR', x)\n");
    free(out);
    free(err);
    s_live_end(&t);
}

/* What the terminal says, line by line: no doubled "korch: korch:", steps
   counted without a gap, a kernel death told once and noted in the
   notebook, chat --help with the commands that exist, /save PATH. */
TEST_T(agent_progress_lines_are_exact, 180)
{
    live_t t;
    if (!s_live_begin(&t, "forever"))
        return;
    char path[400], *out = NULL, *err = NULL;
    CHECK_EQ(s_run((const char *[]){"--llm", "ollama:llama3.1", "--max-steps", "3", "--session", t.session, "loop", NULL},
                   &out, &err),
             0);
    CHECK_CONTAINS(err, "\nkorch: the step limit is reached after 3 steps: asking the model for its answer without "
                        "more code\n\n── step 4 ──\nStopped after 3 results.\n");
    CHECK(!strstr(err, "korch: korch:"));
    CHECK(!strstr(err, "step 5"));
    free(out);
    free(err);
    s_rmrf(t.session);
    s_env(&t.srv, "dies");
    CHECK_EQ(s_run((const char *[]){"--llm", "anthropic:claude-sonnet-4-5", "--session", t.session, "go", NULL}, &out,
                   &err),
             0);
    CHECK_CONTAINS(err, "\n  (died, ");
    CHECK_CONTAINS(err, "\nkorch: kernel died: exited 1; the kernel was restarted: its variables are lost\n");
    int deaths = 0;
    for (const char *p = err; (p = strstr(p, "kernel died")); p++)
        deaths++;
    CHECK_EQ(deaths, 1);
    snprintf(path, sizeof path, "%s/notebook.ipynb", t.session);
    char *nb = korch_read_file(path, 1 << 24, NULL, NULL);
    CHECK_CONTAINS(nb, "*korch: kernel died: exited 1; the kernel was restarted: its variables are lost. The kernel "
                       "restarted here: re-run the cells above to get their variables back.*");
    free(nb);
    free(out);
    free(err);
    /* chat --help, and /save PATH writing a notebook nbformat accepts */
    const char *help[] = {korch_test_korch_bin(), "chat", "--help", NULL};
    CHECK_EQ(korch_test_run(help, NULL, &out, NULL, 30), 0);
    CHECK_CONTAINS(out, "  /file PATH     give the model a file");
    CHECK_CONTAINS(out, "  /save PATH     write the notebook (.ipynb) to PATH as well");
    free(out);
    s_env(&t.srv, "turns");
    char saved[400], cmds[1000];
    snprintf(saved, sizeof saved, "%s/copy.ipynb", t.dir);
    snprintf(cmds, sizeof cmds, "remember a number\n/save %s\n/save\n/nonsense\n", saved);
    CHECK_EQ(s_chat("openai:gpt-4o-mini", t.session, cmds, &out, &err), 0);
    snprintf(path, sizeof path, "  notebook written to %s\n", saved);
    CHECK_CONTAINS(out, path);
    CHECK_CONTAINS(out, "  /save PATH writes the notebook to PATH");
    CHECK_CONTAINS(out, "  commands: /files, /file PATH, /notebook, /save PATH, /quit\n");
    free(out);
    free(err);
    char code[800];
    snprintf(code, sizeof code,
             "import nbformat\nnb = nbformat.read('%s', as_version=4)\nnbformat.validate(nb)\n"
             "print(sum(1 for c in nb.cells if c.cell_type == 'code' and 'secret = 6 * 7' in c.source))", saved);
    const char *py[] = {"/usr/bin/python3", "-c", code, NULL};
    CHECK_EQ(korch_test_run(py, NULL, &out, NULL, 60), 0);
    CHECK_STREQ(out, "1\n");
    free(out);
    s_live_end(&t);
}
