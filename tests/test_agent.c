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

/* What a korch run test needs: the scripted LLM server on a scenario (every
   provider's base URL pointed at it) and a fresh session dir. */
typedef struct {
    server_t srv;
    char *dir;
    char session[300];
    char *out, *err;            /* of the run */
} fx_t;

static bool s_fx(fx_t *f, const char *scenario)
{
    *f = (fx_t){0};
    if (!s_server_start(&f->srv))
        return false;
    s_env(&f->srv, scenario);
    f->dir = s_tmpdir();
    snprintf(f->session, sizeof f->session, "%s/s", f->dir);
    return true;
}

static void s_fx_end(fx_t *f)
{
    free(f->out);
    free(f->err);
    s_rmrf(f->dir);
    free(f->dir);
    s_server_stop(&f->srv);
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
    fx_t f;
    if (!s_fx(&f, "dies"))
        return;
    CHECK_EQ(s_run((const char *[]){"--llm", "anthropic:claude-sonnet-4-5", "--session", f.session, "go", NULL}, &f.out,
                   &f.err),
             0);
    CHECK_CONTAINS(f.out, "Recovered: FRESH False.");
    CHECK_CONTAINS(f.err, "kernel died");
    /* the notebook marks the restart, and the cell whose kernel died has a note */
    char code[900], *v = NULL;
    snprintf(code, sizeof code,
             "import nbformat\nnb = nbformat.read('%s/notebook.ipynb', as_version=4)\nnbformat.validate(nb)\n"
             "died = [c for c in nb.cells if c.cell_type == 'code' and c.metadata.get('korch', {}).get('status') == 'died']\n"
             "marks = [c for c in nb.cells if c.cell_type == 'markdown' and 'kernel restarted here' in c.source]\n"
             "print(len(died), 'kernel died' in died[0].metadata['korch']['note'] if died else None, len(marks),"
             " nb.cells.index(marks[0]) == nb.cells.index(died[0]) + 1 if died and marks else None)",
             f.session);
    const char *py[] = {"/usr/bin/python3", "-c", code, NULL};
    CHECK_EQ(korch_test_run(py, NULL, &v, NULL, 60), 0);
    CHECK_STREQ(v, "1 True 1 True\n");
    free(v);
    s_fx_end(&f);
}

/* The korch run cases that differ only in their scenario, arguments and
   what korch must print: run with --session and the question, exit 0,
   stdout has out, stderr has err (when given). */
static const struct {
    const char *test, *scenario, *llm;
    const char *args[3];        /* before --session */
    const char *question, *out, *err;
} s_runs[] = {
    {"max_steps_then_final_answer_without_tools", "forever", "ollama:llama3.1", {"--max-steps", "3"}, "loop",
     "Stopped after 3 results.", "step limit"},
    {"malformed_tool_json_goes_back_to_the_model", "badjson", "openai:gpt-4o-mini", {NULL}, "go", "Fixed: OK 5.", NULL},
    {"fence_mode", "fence", "ollama:llama3.1", {"--fence"}, "compute", "The kernel said FENCE=42.", NULL},
    {"tool_call_printed_as_text_is_run", "printed", "openai:gpt-4o-mini", {NULL}, "go", "Ran it: PRINTED 42.", NULL},
};

static void s_run_case(const char *test)
{
    size_t i = 0;
    while (i < sizeof s_runs / sizeof *s_runs && strcmp(s_runs[i].test, test) != 0)
        i++;
    fx_t f;
    if (!CHECK(i < sizeof s_runs / sizeof *s_runs) || !s_fx(&f, s_runs[i].scenario))
        return;
    const char *args[12] = {"--llm", s_runs[i].llm};
    int n = 2;
    for (int k = 0; k < 3 && s_runs[i].args[k]; k++)
        args[n++] = s_runs[i].args[k];
    args[n++] = "--session";
    args[n++] = f.session;
    args[n++] = s_runs[i].question;
    args[n] = NULL;
    CHECK_EQ(s_run(args, &f.out, &f.err), 0);
    CHECK_CONTAINS(f.out, s_runs[i].out);
    if (s_runs[i].err)
        CHECK_CONTAINS(f.err, s_runs[i].err);
    s_fx_end(&f);
}
#define RUN_CASE(name) \
    TEST_T(agent_##name, 180) { s_run_case(#name); }

RUN_CASE(max_steps_then_final_answer_without_tools)

RUN_CASE(malformed_tool_json_goes_back_to_the_model)

RUN_CASE(fence_mode)

TEST_T(agent_json_events_and_no_llm_message, 180)
{
    fx_t f;
    if (!s_fx(&f, "turns"))
        return;
    CHECK_EQ(s_run((const char *[]){"--llm", "openai:gpt-4o-mini", "--json", "--session", f.session,
                                    "remember a number", NULL},
                   &f.out, &f.err),
             0);
    int steps = 0, codes = 0, finals = 0;
    char *save = NULL;
    for (char *l = strtok_r(f.out, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
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
    free(f.out);
    free(f.err);
    /* resuming without --llm: the model recorded in the session */
    unsetenv("KORCH_LLM");
    CHECK_EQ(s_run((const char *[]){"--session", f.session, "use it", NULL}, &f.out, &f.err), 0);
    CHECK_CONTAINS(f.out, "The answer is 43.");
    CHECK_CONTAINS(f.err, "model openai:gpt-4o-mini");
    free(f.out);
    free(f.err);
    /* no LLM configured (a new session): say how to configure one */
    snprintf(f.session, sizeof f.session, "%s/fresh", f.dir);
    CHECK_EQ(s_run((const char *[]){"--session", f.session, "anything", NULL}, &f.out, &f.err), 2);
    CHECK_CONTAINS(f.err, "no LLM configured");
    CHECK_CONTAINS(f.err, "OPENAI_API_KEY");
    s_fx_end(&f);
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

RUN_CASE(tool_call_printed_as_text_is_run)

/* The model's API keeps failing: a clear error, and what was said is on disk. */
TEST_T(agent_model_500s_give_a_clear_error_and_keep_the_session, 180)
{
    fx_t f;
    if (!s_fx(&f, "fail500"))
        return;
    char path[400];
    CHECK_EQ(s_run((const char *[]){"--llm", "anthropic:claude-sonnet-4-5", "--session", f.session, "first question",
                                    NULL},
                   &f.out, &f.err),
             1);
    CHECK_CONTAINS(f.err, "500");
    snprintf(path, sizeof path, "%s/transcript.jsonl", f.session);
    char *t = korch_read_file(path, 1 << 20, NULL, NULL);
    CHECK_CONTAINS(t, "\"content\":\"first question\"");
    CHECK_CONTAINS(t, "\"type\":\"error\"");
    free(t);
    s_fx_end(&f);
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
            json_t *d = json_object_get(ev, "text");
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
            answer = strdup(json_string_value(json_object_get(ev, "text")));
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
            CHECK_STREQ(json_string_value(json_object_get(ev, "text")), "Waited, then answered: rate me.");
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
    char path[512], *out = NULL, *err = NULL;
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
    CHECK_CONTAINS(nb, "*korch: the kernel restarted here (kernel died: exited 1); the variables defined above are "
                       "gone.*");
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

/* ---------------------------------------------------------- round 3 */

static char *s_slurp(const char *dir, const char *rel)
{
    char path[700];
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    return korch_read_file(path, 1 << 26, NULL, NULL);
}

static void s_spit(const char *dir, const char *rel, const char *text)
{
    char path[700];
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    CHECK_EQ(korch_write_file(path, text, strlen(text), NULL), KORCH_OK);
}

/* make demo's command in a fresh clone: the session dir's parents do not exist yet (twice) */
TEST_T(agent_session_dir_parents_are_created, 180)
{
    server_t srv = {0};
    if (!s_server_start(&srv))
        return;
    s_env(&srv, "turns");
    char *dir = s_tmpdir(), session[512], *out = NULL, *err = NULL;
    snprintf(session, sizeof session, "%s/out/deeper/demo-session", dir);
    for (int i = 0; i < 2; i++) {
        CHECK_EQ(s_run((const char *[]){"--llm", "openai:gpt-4o-mini", "--session", session, "remember a number",
                                        NULL},
                       &out, &err),
                 0);
        CHECK_CONTAINS(out, "Stored.");
        free(out);
        free(err);
    }
    /* something in the way: a clear error naming it */
    char blocked[400];
    snprintf(blocked, sizeof blocked, "%s/file", dir);
    s_spit(dir, "file", "x");
    snprintf(session, sizeof session, "%s/sub/s", blocked);
    CHECK_EQ(s_run((const char *[]){"--llm", "openai:gpt-4o-mini", "--session", session, "x", NULL}, &out, &err), 2);
    CHECK_CONTAINS(err, "is not a directory");
    CHECK_CONTAINS(err, blocked);
    free(out);
    free(err);
    s_rmrf(dir);
    free(dir);
    s_server_stop(&srv);
}

/* out.csv, a saved PNG, a folder of reports; then a deletion. The model gets
   names and sizes; the terminal says so; the PNG is a figure; symlinks the
   code planted are neither listed nor followed. */
TEST_T(agent_files_the_code_writes_are_told, 180)
{
    fx_t f;
    if (!s_fx(&f, "writer"))
        return;
    CHECK_EQ(s_run((const char *[]){"--llm", "openai:gpt-4o-mini", "--vision", "--session", f.session, "write files",
                                    NULL},
                   &f.out, &f.err),
             0);
    CHECK_CONTAINS(f.out, "IMAGES=1"); /* the PNG the code saved was shown to the vision model */
    CHECK_CONTAINS(f.out, "FIRST: created out.csv (");
    CHECK_CONTAINS(f.out, "created reports/r0.txt (9 bytes); created reports/r1.txt (9 bytes)");
    CHECK_CONTAINS(f.out, "created x.png (");
    CHECK_CONTAINS(f.out, "kept as figure fig-1.png");
    CHECK_CONTAINS(f.out, "SECOND: deleted out.csv");
    CHECK(!strstr(f.out, "leak") && !strstr(f.out, "etcdir") && !strstr(f.out, "passwd"));
    CHECK_CONTAINS(f.err, "[files: created out.csv");
    char *png = s_slurp(f.session, "figures/fig-1.png");
    CHECK(png && memcmp(png, "\x89PNG", 4) == 0);
    free(png);
    char *none = s_slurp(f.session, "figures/fig-2.png"); /* leak.png -> /etc/passwd was not copied */
    CHECK(none == NULL);
    free(none);
    s_fx_end(&f);
}

static void s_excel(const char *launcher)
{
    server_t srv = {0};
    if (!s_server_start(&srv))
        return;
    s_env(&srv, "excel");
    s_launcher = launcher;
    char *dir = s_tmpdir(), session[300], xlsx[400], code[800], *out = NULL, *err = NULL;
    snprintf(session, sizeof session, "%s/s", dir);
    snprintf(xlsx, sizeof xlsx, "%s/given.xlsx", dir);
    /* an .xlsx made by openpyxl on the host, given to the model */
    snprintf(code, sizeof code, "import pandas as pd\npd.DataFrame({'n': [5, 7]}).to_excel('%s', index=False)", xlsx);
    const char *py[] = {"/usr/bin/python3", "-c", code, NULL};
    CHECK_EQ(korch_test_run(py, NULL, NULL, NULL, 60), 0);
    CHECK_EQ(s_run((const char *[]){"--llm", "openai:gpt-4o-mini", "--memory", "700", "--pids", "200", "--file", xlsx,
                                    "--session", session, "excel", NULL},
                   &out, &err),
             0);
    CHECK_CONTAINS(out, "Excel: XLSX=42, UPLOADED=12");
    if (strcmp(launcher, "docker") == 0)
        CHECK_CONTAINS(out, "MEM=734003200"); /* --memory 700 reached the container */
    CHECK_CONTAINS(err, "created t.xlsx");
    if (!strstr(out, "XLSX=42"))
        fprintf(stderr, "%s\n", err);
    free(out);
    free(err);
    s_launcher = "local";
    s_rmrf(dir);
    free(dir);
    s_server_stop(&srv);
}

TEST_T(agent_xlsx_read_and_written, 180) { s_excel("local"); }
TEST_T(agent_xlsx_read_and_written_in_docker, 180) { s_excel("docker"); }

/* Two files with one base name: both kept, the second under a free name, said so. */
TEST_T(agent_same_base_name_uploads_are_kept_apart, 180)
{
    fx_t f;
    if (!s_fx(&f, "sysecho"))
        return;
    char a[400], b[400];
    snprintf(a, sizeof a, "%s/a", f.dir);
    snprintf(b, sizeof b, "%s/b", f.dir);
    mkdir(a, 0755);
    mkdir(b, 0755);
    s_spit(a, "sales.csv", "x,y\n1,2\n");
    s_spit(b, "sales.csv", "x,y\n3,4\n5,6\n");
    strcat(a, "/sales.csv");
    strcat(b, "/sales.csv");
    CHECK_EQ(s_run((const char *[]){"--llm", "openai:gpt-4o-mini", "--file", a, "--file", b, "--file", a, "--session",
                                    f.session, "--system", "EXTRA-RULE-7", "files?", NULL},
                   &f.out, &f.err),
             0);
    CHECK_CONTAINS(f.err, "kept as 'sales-2.csv'");
    CHECK_CONTAINS(f.out, "- sales.csv (8 bytes)");
    CHECK_CONTAINS(f.out, "- sales-2.csv (12 bytes)");
    CHECK(!strstr(f.out, "sales-3")); /* the same bytes again: not copied twice */
    CHECK_CONTAINS(f.out, "careful data analyst");
    CHECK_CONTAINS(f.out, "EXTRA-RULE-7>>");
    char *one = s_slurp(f.session, "files/sales.csv"), *two = s_slurp(f.session, "files/sales-2.csv");
    CHECK_STREQ(one, "x,y\n1,2\n");
    CHECK_STREQ(two, "x,y\n3,4\n5,6\n");
    free(one);
    free(two);
    free(f.out);
    free(f.err);
    /* --system-replace and --system-file replace korch's prompt */
    CHECK_EQ(s_run((const char *[]){"--llm", "openai:gpt-4o-mini", "--session", f.session, "--system-replace",
                                    "ONLY-THIS", "again", NULL},
                   &f.out, &f.err),
             0);
    CHECK_CONTAINS(f.out, "SYSTEM<<ONLY-THIS>>");
    free(f.out);
    free(f.err);
    s_spit(f.dir, "prompt.txt", "FROM-A-FILE");
    char pf[400];
    snprintf(pf, sizeof pf, "%s/prompt.txt", f.dir);
    CHECK_EQ(s_run((const char *[]){"--llm", "openai:gpt-4o-mini", "--session", f.session, "--system-file", pf, "again",
                                    NULL},
                   &f.out, &f.err),
             0);
    CHECK_CONTAINS(f.out, "SYSTEM<<FROM-A-FILE>>");
    s_fx_end(&f);
}

/* A ```python fence and no tool call is run (code interpreter behaviour); --no-fence makes it the answer. */
TEST_T(agent_fenced_reply_is_run_unless_no_fence, 180)
{
    fx_t f;
    if (!s_fx(&f, "fencerun"))
        return;
    CHECK_EQ(s_run((const char *[]){"--llm", "anthropic:claude-sonnet-4-5", "--session", f.session, "go", NULL}, &f.out,
                   &f.err),
             0);
    CHECK_CONTAINS(f.out, "Ran the fence: FENCERUN=42.\n```\nFENCERUN=42\n```");
    char *t = s_slurp(f.session, "transcript.jsonl");
    const char *first = t ? strstr(t, "\"type\":\"execution\"") : NULL;
    CHECK(first && !strstr(first + 1, "\"type\":\"execution\"")); /* the untagged fence was not run */
    free(t);
    free(f.out);
    free(f.err);
    snprintf(f.session, sizeof f.session, "%s/s2", f.dir);
    CHECK_EQ(s_run((const char *[]){"--llm", "anthropic:claude-sonnet-4-5", "--no-fence", "--session", f.session, "go",
                                    NULL},
                   &f.out, &f.err),
             0);
    CHECK_CONTAINS(f.out, "```python\nprint('FENCERUN=%d' % (40 + 2))");
    s_fx_end(&f);
}

/* .env in the working directory: read for KORCH_LLM and the rest; the real environment wins. */
TEST_T(agent_dotenv_is_read_and_the_environment_wins, 180)
{
    fx_t f;
    if (!s_fx(&f, "turns"))
        return;
    char cwd[1024];
    s_spit(f.dir, ".env",
           "# korch settings\nKORCH_LLM=\"openai:gpt-4o-mini\"\n"
           "export OPENAI_BASE_URL=http://127.0.0.1:9/v1 # the real environment's wins\nPATH=/nonexistent\n");
    CHECK(getcwd(cwd, sizeof cwd) != NULL);
    CHECK_EQ(chdir(f.dir), 0);
    CHECK_EQ(s_run((const char *[]){"--session", f.session, "remember a number", NULL}, &f.out, &f.err), 0);
    CHECK_EQ(chdir(cwd), 0);
    CHECK_CONTAINS(f.out, "Stored.");
    CHECK_CONTAINS(f.err, "model openai:gpt-4o-mini");
    s_fx_end(&f);
}

/* Resume from the snapshot: an append is not repeated, a random value is
   kept, a variable a failing cell set is kept; the model is told. Without
   the snapshot: the cells are re-run, and the model is told that instead. */
TEST_T(agent_resume_restores_the_snapshot_then_falls_back_to_replay, 240)
{
    fx_t f;
    if (!s_fx(&f, "snapshot"))
        return;
    CHECK_EQ(s_run((const char *[]){"--llm", "openai:gpt-4o-mini", "--session", f.session, "set up", NULL}, &f.out, &f.err),
             0);
    char r[64] = "";
    const char *p = f.out ? strstr(f.out, "R=") : NULL;
    CHECK(p && sscanf(p, "R=%63[0-9.e-]", r) == 1);
    if (r[0] && r[strlen(r) - 1] == '.') /* the sentence's full stop */
        r[strlen(r) - 1] = 0;
    char *snap = s_slurp(f.session, "snapshot.json");
    CHECK_CONTAINS(snap, "\"variables\":[\"items\",\"partial\",\"r\"]");
    free(snap);
    free(f.out);
    free(f.err);
    CHECK_EQ(s_run((const char *[]){"--session", f.session, "check", NULL}, &f.out, &f.err), 0);
    char want[200];
    snprintf(want, sizeof want, "After resume: LINES=1 ITEMS=1 R=%s PARTIAL=set before failing TOLD=restored.", r);
    CHECK_CONTAINS(f.out, want);
    CHECK_CONTAINS(f.err, "restored 4 name(s) from the snapshot");
    CHECK_CONTAINS(f.err, "side effects did not repeat");
    free(f.out);
    free(f.err);
    /* no snapshot: blind replay, and said so */
    char path[400];
    snprintf(path, sizeof path, "%s/snapshot.json", f.session);
    CHECK_EQ(unlink(path), 0);
    CHECK_EQ(s_run((const char *[]){"--session", f.session, "check", NULL}, &f.out, &f.err), 0);
    CHECK_CONTAINS(f.out, "LINES=2 ITEMS=1");
    CHECK_CONTAINS(f.out, "PARTIAL=None TOLD=re-run.");
    CHECK(r[0] && !strstr(f.out, r)); /* a new random number */
    CHECK_CONTAINS(f.err, "side effects happened again");
    CHECK_CONTAINS(f.err, "1 cell(s) that failed were not re-run");
    char *nb = s_slurp(f.session, "notebook.ipynb");
    CHECK_CONTAINS(nb, "korch: The session was resumed in a fresh kernel");
    free(nb);
    s_fx_end(&f);
}

/* Any kernel: IRkernel (Debian's r-cran-irkernel) driven from its
   language_info: run_code, an R prompt, R notebook metadata; the model
   quotes the mean the kernel printed; the PNG it saved is a figure. */
TEST_T(agent_r_kernel_reads_a_csv_and_plots, 240)
{
    fx_t f;
    if (!s_fx(&f, "rstats"))
        return;
    char csv[400];
    /* Debian registers the kernelspec as "ir"; if not, register IRkernel's own */
    struct stat st;
    char jp[400];
    snprintf(jp, sizeof jp, "%s/jupyter", f.dir);
    if (stat("/usr/share/jupyter/kernels/ir/kernel.json", &st) != 0) {
        char cmd[900];
        snprintf(cmd, sizeof cmd, "mkdir -p '%s/kernels' && cp -r /usr/lib/R/site-library/IRkernel/kernelspec '%s/kernels/ir'",
                 jp, jp);
        CHECK_EQ(system(cmd), 0);
        setenv("JUPYTER_PATH", jp, 1);
    }
    s_spit(f.dir, "nums.csv", "x\n1.5\n2.5\n4.25\n");
    snprintf(csv, sizeof csv, "%s/nums.csv", f.dir);
    CHECK_EQ(s_run((const char *[]){"--llm", "openai:gpt-4o-mini", "--kernel", "ir", "--file", csv, "--session",
                                    f.session, "mean of x?", NULL},
                   &f.out, &f.err),
             0);
    CHECK_CONTAINS(f.out, "The mean is 2.750; plot saved; system names R: yes.");
    if (!strstr(f.out, "2.750"))
        fprintf(stderr, "%s\n", f.err);
    char *png = s_slurp(f.session, "figures/fig-1.png");
    CHECK(png && memcmp(png, "\x89PNG", 4) == 0);
    free(png);
    char code[900], *v = NULL;
    snprintf(code, sizeof code,
             "import nbformat\nnb = nbformat.read('%s/notebook.ipynb', as_version=4)\nnbformat.validate(nb)\n"
             "print(nb.metadata.kernelspec.name, nb.metadata.kernelspec.language, nb.metadata.language_info.name,"
             " len([c for c in nb.cells if c.cell_type == 'code']))",
             f.session);
    const char *py[] = {"/usr/bin/python3", "-c", code, NULL};
    CHECK_EQ(korch_test_run(py, NULL, &v, NULL, 60), 0);
    CHECK_STREQ(v, "ir R R 2\n");
    free(v);
    unsetenv("JUPYTER_PATH");
    s_fx_end(&f);
}

/* The kernel planted a symlink where an upload goes: korch never writes through it. */
TEST_T(agent_upload_never_follows_a_planted_symlink, 120)
{
    fx_t f;
    if (!s_fx(&f, "sysecho"))
        return;
    char files[400], link[500], victim[400], src[400];
    snprintf(files, sizeof files, "%s/files", f.session);
    CHECK_EQ(korch_mkdirs(files, 0755, NULL), KORCH_OK);
    s_spit(f.dir, "victim", "untouched");
    snprintf(victim, sizeof victim, "%s/victim", f.dir);
    snprintf(link, sizeof link, "%s/data.csv", files);
    CHECK_EQ(symlink(victim, link), 0);
    s_spit(f.dir, "data.csv", "a\n1\n");
    snprintf(src, sizeof src, "%s/data.csv", f.dir);
    CHECK_EQ(s_run((const char *[]){"--llm", "openai:gpt-4o-mini", "--file", src, "--session", f.session, "hi", NULL},
                   &f.out, &f.err),
             0);
    char *v = s_slurp(f.dir, "victim"), *kept = s_slurp(files, "data-2.csv");
    CHECK_STREQ(v, "untouched");
    CHECK_STREQ(kept, "a\n1\n");
    CHECK_CONTAINS(f.err, "kept as 'data-2.csv'");
    free(v);
    free(kept);
    s_fx_end(&f);
}

/* A function defined in a cell is not in the snapshot: the cells are re-run
   to rebuild it, then the snapshot goes over them (its random value kept). */
TEST_T(agent_resume_rebuilds_what_the_snapshot_could_not_keep, 180)
{
    fx_t f;
    if (!s_fx(&f, "snapfunc"))
        return;
    CHECK_EQ(s_run((const char *[]){"--llm", "openai:gpt-4o-mini", "--session", f.session, "set up", NULL}, &f.out, &f.err),
             0);
    char r[64] = "";
    const char *p = f.out ? strstr(f.out, "R=") : NULL;
    CHECK(p && sscanf(p, "R=%63[0-9.e-]", r) == 1);
    if (r[0] && r[strlen(r) - 1] == '.')
        r[strlen(r) - 1] = 0;
    free(f.out);
    free(f.err);
    CHECK_EQ(s_run((const char *[]){"--session", f.session, "check", NULL}, &f.out, &f.err), 0);
    char want[200];
    snprintf(want, sizeof want, "After resume: LINES=2 R=%s TWICE=42.", r);
    CHECK_CONTAINS(f.out, want);
    CHECK_CONTAINS(f.err, "not in the snapshot: twice (function, defined in a cell)");
    CHECK_CONTAINS(f.err, "were re-run first to rebuild them");
    s_fx_end(&f);
}

/* A question longer than any fixed buffer (100 KB) reaches the notebook
   whole: its markdown cell was once cut at 64 KiB. */
TEST_T(agent_long_question_is_not_cut_in_the_notebook, 120)
{
    fx_t f;
    if (!s_fx(&f, "sysecho"))
        return;
    char path[400];
    size_t n = 100000;
    char *q = malloc(n + 16);
    for (size_t i = 0; i < n; i++)
        q[i] = (char)('a' + i % 26);
    memcpy(q + n, " END-OF-IT", 11);
    CHECK_EQ(s_run((const char *[]){"--llm", "openai:gpt-4o-mini", "--session", f.session, q, NULL}, &f.out, &f.err), 0);
    snprintf(path, sizeof path, "%s/notebook.ipynb", f.session);
    char *text = korch_read_file(path, 1 << 24, NULL, NULL);
    json_t *nb = text ? json_loads(text, 0, NULL) : NULL;
    json_t *cell = json_array_get(json_object_get(nb, "cells"), 0);
    json_t *src = json_object_get(cell, "source");
    /* nbformat source: a string or a list of lines; one line here */
    const char *s = json_is_array(src) ? json_string_value(json_array_get(src, 0)) : json_string_value(src);
    CHECK_STREQ(json_string_value(json_object_get(cell, "cell_type")), "markdown");
    if (CHECK(s)) {
        CHECK_EQ(strlen(s), strlen("**User:** ") + n + 10);
        CHECK(strstr(s, " END-OF-IT") != NULL);
    }
    json_decref(nb);
    free(text);
    free(q);
    s_fx_end(&f);
}
