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
