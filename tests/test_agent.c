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
    /* the notebook marks the restart, and the cell whose kernel died has a note */
    char code[900], *v = NULL;
    snprintf(code, sizeof code,
             "import nbformat\nnb = nbformat.read('%s/notebook.ipynb', as_version=4)\nnbformat.validate(nb)\n"
             "died = [c for c in nb.cells if c.cell_type == 'code' and c.metadata.get('korch', {}).get('status') == 'died']\n"
             "marks = [c for c in nb.cells if c.cell_type == 'markdown' and 'kernel restarted here' in c.source]\n"
             "print(len(died), 'kernel died' in died[0].metadata['korch']['note'] if died else None, len(marks),"
             " nb.cells.index(marks[0]) == nb.cells.index(died[0]) + 1 if died and marks else None)",
             session);
    const char *py[] = {"/usr/bin/python3", "-c", code, NULL};
    CHECK_EQ(korch_test_run(py, NULL, &v, NULL, 60), 0);
    CHECK_STREQ(v, "1 True 1 True\n");
    free(v);
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
    /* resuming without --llm: the model recorded in the session */
    unsetenv("KORCH_LLM");
    CHECK_EQ(s_run((const char *[]){"--session", session, "use it", NULL}, &out, &err), 0);
    CHECK_CONTAINS(out, "The answer is 43.");
    CHECK_CONTAINS(err, "model openai:gpt-4o-mini");
    free(out);
    free(err);
    /* no LLM configured (a new session): say how to configure one */
    snprintf(session, sizeof session, "%s/fresh", dir);
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
    char *dir = s_tmpdir(), session[300], *out = NULL, *err = NULL;
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
    server_t srv = {0};
    if (!s_server_start(&srv))
        return;
    s_env(&srv, "writer");
    char *dir = s_tmpdir(), session[300], *out = NULL, *err = NULL;
    snprintf(session, sizeof session, "%s/s", dir);
    CHECK_EQ(s_run((const char *[]){"--llm", "openai:gpt-4o-mini", "--vision", "--session", session, "write files",
                                    NULL},
                   &out, &err),
             0);
    CHECK_CONTAINS(out, "IMAGES=1"); /* the PNG the code saved was shown to the vision model */
    CHECK_CONTAINS(out, "FIRST: created out.csv (");
    CHECK_CONTAINS(out, "created reports/r0.txt (9 bytes); created reports/r1.txt (9 bytes)");
    CHECK_CONTAINS(out, "created x.png (");
    CHECK_CONTAINS(out, "kept as figure fig-1.png");
    CHECK_CONTAINS(out, "SECOND: deleted out.csv");
    CHECK(!strstr(out, "leak") && !strstr(out, "etcdir") && !strstr(out, "passwd"));
    CHECK_CONTAINS(err, "[files: created out.csv");
    char *png = s_slurp(session, "figures/fig-1.png");
    CHECK(png && memcmp(png, "\x89PNG", 4) == 0);
    free(png);
    char *none = s_slurp(session, "figures/fig-2.png"); /* leak.png -> /etc/passwd was not copied */
    CHECK(none == NULL);
    free(none);
    free(out);
    free(err);
    s_rmrf(dir);
    free(dir);
    s_server_stop(&srv);
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
    server_t srv = {0};
    if (!s_server_start(&srv))
        return;
    s_env(&srv, "sysecho");
    char *dir = s_tmpdir(), session[300], a[400], b[400], *out = NULL, *err = NULL;
    snprintf(session, sizeof session, "%s/s", dir);
    snprintf(a, sizeof a, "%s/a", dir);
    snprintf(b, sizeof b, "%s/b", dir);
    mkdir(a, 0755);
    mkdir(b, 0755);
    s_spit(a, "sales.csv", "x,y\n1,2\n");
    s_spit(b, "sales.csv", "x,y\n3,4\n5,6\n");
    strcat(a, "/sales.csv");
    strcat(b, "/sales.csv");
    CHECK_EQ(s_run((const char *[]){"--llm", "openai:gpt-4o-mini", "--file", a, "--file", b, "--file", a, "--session",
                                    session, "--system", "EXTRA-RULE-7", "files?", NULL},
                   &out, &err),
             0);
    CHECK_CONTAINS(err, "kept as 'sales-2.csv'");
    CHECK_CONTAINS(out, "- sales.csv (8 bytes)");
    CHECK_CONTAINS(out, "- sales-2.csv (12 bytes)");
    CHECK(!strstr(out, "sales-3")); /* the same bytes again: not copied twice */
    CHECK_CONTAINS(out, "careful data analyst");
    CHECK_CONTAINS(out, "EXTRA-RULE-7>>");
    char *one = s_slurp(session, "files/sales.csv"), *two = s_slurp(session, "files/sales-2.csv");
    CHECK_STREQ(one, "x,y\n1,2\n");
    CHECK_STREQ(two, "x,y\n3,4\n5,6\n");
    free(one);
    free(two);
    free(out);
    free(err);
    /* --system-replace and --system-file replace korch's prompt */
    CHECK_EQ(s_run((const char *[]){"--llm", "openai:gpt-4o-mini", "--session", session, "--system-replace",
                                    "ONLY-THIS", "again", NULL},
                   &out, &err),
             0);
    CHECK_CONTAINS(out, "SYSTEM<<ONLY-THIS>>");
    free(out);
    free(err);
    s_spit(dir, "prompt.txt", "FROM-A-FILE");
    char pf[400];
    snprintf(pf, sizeof pf, "%s/prompt.txt", dir);
    CHECK_EQ(s_run((const char *[]){"--llm", "openai:gpt-4o-mini", "--session", session, "--system-file", pf, "again",
                                    NULL},
                   &out, &err),
             0);
    CHECK_CONTAINS(out, "SYSTEM<<FROM-A-FILE>>");
    free(out);
    free(err);
    s_rmrf(dir);
    free(dir);
    s_server_stop(&srv);
}

/* A ```python fence and no tool call is run (code interpreter behaviour); --no-fence makes it the answer. */
TEST_T(agent_fenced_reply_is_run_unless_no_fence, 180)
{
    server_t srv = {0};
    if (!s_server_start(&srv))
        return;
    s_env(&srv, "fencerun");
    char *dir = s_tmpdir(), session[300], *out = NULL, *err = NULL;
    snprintf(session, sizeof session, "%s/s", dir);
    CHECK_EQ(s_run((const char *[]){"--llm", "anthropic:claude-sonnet-4-5", "--session", session, "go", NULL}, &out,
                   &err),
             0);
    CHECK_CONTAINS(out, "Ran the fence: FENCERUN=42.\n```\nFENCERUN=42\n```");
    char *t = s_slurp(session, "transcript.jsonl");
    const char *first = t ? strstr(t, "\"type\":\"execution\"") : NULL;
    CHECK(first && !strstr(first + 1, "\"type\":\"execution\"")); /* the untagged fence was not run */
    free(t);
    free(out);
    free(err);
    snprintf(session, sizeof session, "%s/s2", dir);
    CHECK_EQ(s_run((const char *[]){"--llm", "anthropic:claude-sonnet-4-5", "--no-fence", "--session", session, "go",
                                    NULL},
                   &out, &err),
             0);
    CHECK_CONTAINS(out, "```python\nprint('FENCERUN=%d' % (40 + 2))");
    free(out);
    free(err);
    s_rmrf(dir);
    free(dir);
    s_server_stop(&srv);
}

/* .env in the working directory: read for KORCH_LLM and the rest; the real environment wins. */
TEST_T(agent_dotenv_is_read_and_the_environment_wins, 180)
{
    server_t srv = {0};
    if (!s_server_start(&srv))
        return;
    s_env(&srv, "turns");
    char *dir = s_tmpdir(), session[300], cwd[1024], *out = NULL, *err = NULL;
    snprintf(session, sizeof session, "%s/s", dir);
    s_spit(dir, ".env",
           "# korch settings\nKORCH_LLM=\"openai:gpt-4o-mini\"\n"
           "export OPENAI_BASE_URL=http://127.0.0.1:9/v1 # the real environment's wins\nPATH=/nonexistent\n");
    CHECK(getcwd(cwd, sizeof cwd) != NULL);
    CHECK_EQ(chdir(dir), 0);
    CHECK_EQ(s_run((const char *[]){"--session", session, "remember a number", NULL}, &out, &err), 0);
    CHECK_EQ(chdir(cwd), 0);
    CHECK_CONTAINS(out, "Stored.");
    CHECK_CONTAINS(err, "model openai:gpt-4o-mini");
    free(out);
    free(err);
    s_rmrf(dir);
    free(dir);
    s_server_stop(&srv);
}

/* Resume from the snapshot: an append is not repeated, a random value is
   kept, a variable a failing cell set is kept; the model is told. Without
   the snapshot: the cells are re-run, and the model is told that instead. */
TEST_T(agent_resume_restores_the_snapshot_then_falls_back_to_replay, 240)
{
    server_t srv = {0};
    if (!s_server_start(&srv))
        return;
    s_env(&srv, "snapshot");
    char *dir = s_tmpdir(), session[300], *out = NULL, *err = NULL;
    snprintf(session, sizeof session, "%s/s", dir);
    CHECK_EQ(s_run((const char *[]){"--llm", "openai:gpt-4o-mini", "--session", session, "set up", NULL}, &out, &err),
             0);
    char r[64] = "";
    const char *p = out ? strstr(out, "R=") : NULL;
    CHECK(p && sscanf(p, "R=%63[0-9.e-]", r) == 1);
    if (r[0] && r[strlen(r) - 1] == '.') /* the sentence's full stop */
        r[strlen(r) - 1] = 0;
    char *snap = s_slurp(session, "snapshot.json");
    CHECK_CONTAINS(snap, "\"variables\":[\"items\",\"partial\",\"r\"]");
    free(snap);
    free(out);
    free(err);
    CHECK_EQ(s_run((const char *[]){"--session", session, "check", NULL}, &out, &err), 0);
    char want[200];
    snprintf(want, sizeof want, "After resume: LINES=1 ITEMS=1 R=%s PARTIAL=set before failing TOLD=restored.", r);
    CHECK_CONTAINS(out, want);
    CHECK_CONTAINS(err, "restored 4 name(s) from the snapshot");
    CHECK_CONTAINS(err, "side effects did not repeat");
    free(out);
    free(err);
    /* no snapshot: blind replay, and said so */
    char path[400];
    snprintf(path, sizeof path, "%s/snapshot.json", session);
    CHECK_EQ(unlink(path), 0);
    CHECK_EQ(s_run((const char *[]){"--session", session, "check", NULL}, &out, &err), 0);
    CHECK_CONTAINS(out, "LINES=2 ITEMS=1");
    CHECK_CONTAINS(out, "PARTIAL=None TOLD=re-run.");
    CHECK(r[0] && !strstr(out, r)); /* a new random number */
    CHECK_CONTAINS(err, "side effects happened again");
    CHECK_CONTAINS(err, "1 cell(s) that failed were not re-run");
    char *nb = s_slurp(session, "notebook.ipynb");
    CHECK_CONTAINS(nb, "korch: The session was resumed in a fresh kernel");
    free(nb);
    free(out);
    free(err);
    s_rmrf(dir);
    free(dir);
    s_server_stop(&srv);
}

/* Any kernel: IRkernel (Debian's r-cran-irkernel) driven from its
   language_info: run_code, an R prompt, R notebook metadata; the model
   quotes the mean the kernel printed; the PNG it saved is a figure. */
TEST_T(agent_r_kernel_reads_a_csv_and_plots, 240)
{
    server_t srv = {0};
    if (!s_server_start(&srv))
        return;
    s_env(&srv, "rstats");
    char *dir = s_tmpdir(), session[300], csv[400], *out = NULL, *err = NULL;
    snprintf(session, sizeof session, "%s/s", dir);
    /* Debian registers the kernelspec as "ir"; if not, register IRkernel's own */
    struct stat st;
    char jp[400];
    snprintf(jp, sizeof jp, "%s/jupyter", dir);
    if (stat("/usr/share/jupyter/kernels/ir/kernel.json", &st) != 0) {
        char cmd[900];
        snprintf(cmd, sizeof cmd, "mkdir -p '%s/kernels' && cp -r /usr/lib/R/site-library/IRkernel/kernelspec '%s/kernels/ir'",
                 jp, jp);
        CHECK_EQ(system(cmd), 0);
        setenv("JUPYTER_PATH", jp, 1);
    }
    s_spit(dir, "nums.csv", "x\n1.5\n2.5\n4.25\n");
    snprintf(csv, sizeof csv, "%s/nums.csv", dir);
    CHECK_EQ(s_run((const char *[]){"--llm", "openai:gpt-4o-mini", "--kernel", "ir", "--file", csv, "--session",
                                    session, "mean of x?", NULL},
                   &out, &err),
             0);
    CHECK_CONTAINS(out, "The mean is 2.750; plot saved; system names R: yes.");
    if (!strstr(out, "2.750"))
        fprintf(stderr, "%s\n", err);
    char *png = s_slurp(session, "figures/fig-1.png");
    CHECK(png && memcmp(png, "\x89PNG", 4) == 0);
    free(png);
    char code[900], *v = NULL;
    snprintf(code, sizeof code,
             "import nbformat\nnb = nbformat.read('%s/notebook.ipynb', as_version=4)\nnbformat.validate(nb)\n"
             "print(nb.metadata.kernelspec.name, nb.metadata.kernelspec.language, nb.metadata.language_info.name,"
             " len([c for c in nb.cells if c.cell_type == 'code']))",
             session);
    const char *py[] = {"/usr/bin/python3", "-c", code, NULL};
    CHECK_EQ(korch_test_run(py, NULL, &v, NULL, 60), 0);
    CHECK_STREQ(v, "ir R R 2\n");
    free(v);
    unsetenv("JUPYTER_PATH");
    free(out);
    free(err);
    s_rmrf(dir);
    free(dir);
    s_server_stop(&srv);
}

/* The kernel planted a symlink where an upload goes: korch never writes through it. */
TEST_T(agent_upload_never_follows_a_planted_symlink, 120)
{
    server_t srv = {0};
    if (!s_server_start(&srv))
        return;
    s_env(&srv, "sysecho");
    char *dir = s_tmpdir(), session[300], files[400], link[500], victim[400], src[400], *out = NULL, *err = NULL;
    snprintf(session, sizeof session, "%s/s", dir);
    snprintf(files, sizeof files, "%s/files", session);
    CHECK_EQ(korch_mkdirs(files, 0755, NULL), KORCH_OK);
    s_spit(dir, "victim", "untouched");
    snprintf(victim, sizeof victim, "%s/victim", dir);
    snprintf(link, sizeof link, "%s/data.csv", files);
    CHECK_EQ(symlink(victim, link), 0);
    s_spit(dir, "data.csv", "a\n1\n");
    snprintf(src, sizeof src, "%s/data.csv", dir);
    CHECK_EQ(s_run((const char *[]){"--llm", "openai:gpt-4o-mini", "--file", src, "--session", session, "hi", NULL},
                   &out, &err),
             0);
    char *v = s_slurp(dir, "victim"), *kept = s_slurp(files, "data-2.csv");
    CHECK_STREQ(v, "untouched");
    CHECK_STREQ(kept, "a\n1\n");
    CHECK_CONTAINS(err, "kept as 'data-2.csv'");
    free(v);
    free(kept);
    free(out);
    free(err);
    s_rmrf(dir);
    free(dir);
    s_server_stop(&srv);
}

/* A function defined in a cell is not in the snapshot: the cells are re-run
   to rebuild it, then the snapshot goes over them (its random value kept). */
TEST_T(agent_resume_rebuilds_what_the_snapshot_could_not_keep, 180)
{
    server_t srv = {0};
    if (!s_server_start(&srv))
        return;
    s_env(&srv, "snapfunc");
    char *dir = s_tmpdir(), session[300], *out = NULL, *err = NULL;
    snprintf(session, sizeof session, "%s/s", dir);
    CHECK_EQ(s_run((const char *[]){"--llm", "openai:gpt-4o-mini", "--session", session, "set up", NULL}, &out, &err),
             0);
    char r[64] = "";
    const char *p = out ? strstr(out, "R=") : NULL;
    CHECK(p && sscanf(p, "R=%63[0-9.e-]", r) == 1);
    if (r[0] && r[strlen(r) - 1] == '.')
        r[strlen(r) - 1] = 0;
    free(out);
    free(err);
    CHECK_EQ(s_run((const char *[]){"--session", session, "check", NULL}, &out, &err), 0);
    char want[200];
    snprintf(want, sizeof want, "After resume: LINES=2 R=%s TWICE=42.", r);
    CHECK_CONTAINS(out, want);
    CHECK_CONTAINS(err, "not in the snapshot: twice (function, defined in a cell)");
    CHECK_CONTAINS(err, "were re-run first to rebuild them");
    free(out);
    free(err);
    s_rmrf(dir);
    free(dir);
    s_server_stop(&srv);
}
