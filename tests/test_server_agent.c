/*  The agent API of `korch serve` judged by a real client: each test starts
 *  the scripted LLM server (tests/peers/llm_server.py), then `korch serve`
 *  with --llm openai:gpt-4o-mini and OPENAI_BASE_URL at one of its scenarios
 *  (tests/peers/agent_scenarios.py), and runs one scenario of
 *  tests/peers/agent_api_client.py: REST with the token, turns read as
 *  server-sent events, a notebook attached to the agent's kernel over the
 *  channels websocket. The LLM's replies depend on what korch sent, so the
 *  answers checked here quote numbers only the kernel's real output held.
 *  Afterwards no kernel may be left (GET /api/kernels is empty). */
#include "serve_fixture.h"

#include <jansson.h>

#include "korch/media.h"

typedef struct {
    pid_t pid;
    int port;
} llm_t;

static bool s_llm_start(llm_t *l)
{
    char line[64];
    const char *argv[] = {PY, serve_peer("llm_server.py"), NULL};
    l->pid = korch_test_spawn_line(argv, line, sizeof line, 10, NULL);
    l->port = l->pid > 0 ? (int)strtol(line, NULL, 10) : 0;
    return CHECK_GT(l->port, 0);
}

static void s_llm_stop(llm_t *l)
{
    if (l->pid > 0) {
        kill(l->pid, SIGTERM);
        waitpid(l->pid, NULL, 0);
    }
}

/* The peer: a python script of tests/peers, or a Node one of tests/npm. */
static void s_peer_argv(const char *scenario, const char *line, const char *dir, const char **argv)
{
    static char script[700], csv[700];
    if (strncmp(scenario, "npm:", 4) == 0) {
        snprintf(script, sizeof script, "%s/tests/npm/%s", korch_test_root(), scenario + 4);
        snprintf(csv, sizeof csv, "%s/scripts/demo/sales.csv", korch_test_root());
        const char *a[] = {"node", script, line, csv, NULL};
        memcpy(argv, a, sizeof a);
    } else {
        const char *a[] = {PY, serve_peer("agent_api_client.py"), "--url", line, "--agent-dir", dir, scenario, NULL};
        memcpy(argv, a, sizeof a);
    }
}

/* korch serve (sessions in dir) for LLM scenario `llm_scenario` (NULL: no
   LLM configured), then agent_api_client.py SCENARIO; checks it held and
   left kernels_left kernels (those of sessions it keeps). */
static bool s_anthropic_too;     /* the server gets ANTHROPIC_* for the scenario too */
static const char *s_session_mb; /* korch serve --session-mb */
static const char *s_max_kernels; /* korch serve --max-kernels */

static void s_run_in(const char *dir, const char *launcher, const char *llm_scenario, const char *scenario,
                     int timeout_s, int kernels_left)
{
    llm_t llm = {0};
    if (llm_scenario && !s_llm_start(&llm))
        return;
    char url[256];
    unsetenv("KORCH_LLM");
    if (llm_scenario) {
        snprintf(url, sizeof url, "http://127.0.0.1:%d/s/%s/v1", llm.port, llm_scenario);
        setenv("OPENAI_BASE_URL", url, 1);
        setenv("OPENAI_API_KEY", "sk-test", 1);
        if (s_anthropic_too) {
            snprintf(url, sizeof url, "http://127.0.0.1:%d/s/%s", llm.port, llm_scenario);
            setenv("ANTHROPIC_BASE_URL", url, 1);
            setenv("ANTHROPIC_API_KEY", "sk-ant-test", 1);
        }
    }
    /* "docker+pool": containers, with a warm kernel ready for the session */
    bool pool = strcmp(launcher, "docker+pool") == 0;
    const char *extra[13] = {"--launcher", pool ? "docker" : launcher, "--agent-dir", dir, "--pool", pool ? "1" : "0",
                           llm_scenario ? "--llm" : NULL, "openai:gpt-4o-mini",
                           s_session_mb ? "--session-mb" : NULL, s_session_mb, NULL, NULL, NULL};
    if (s_max_kernels) { /* after the others, before the end */
        size_t n = 0;
        while (extra[n])
            n++;
        extra[n] = "--max-kernels";
        extra[n + 1] = s_max_kernels;
    }
    serve_t s;
    if (serve_start_args(&s, extra)) {
        const char *argv[10];
        s_peer_argv(scenario, s.line, dir, argv);
        char *out = NULL, *err = NULL;
        int rc = korch_test_run(argv, NULL, &out, &err, timeout_s);
        json_t *j = out ? json_loads(out, JSON_DISABLE_EOF_CHECK, NULL) : NULL;
        if (!CHECK_EQ(rc, 0) || !CHECK(json_is_true(json_object_get(j, "ok")))) {
            fprintf(stderr, "  %s%s\n", out ? out : "(no output)", err ? err : "");
            serve_log_tail(&s);
        } else
            fprintf(stderr, "  %s", out);
        json_decref(j);
        free(out);
        free(err);
        if (pool) { /* the session's kernel came from the pool */
            CHECK(serve_log_has(&s, "handed out from the warm pool"));
        }
        CHECK_EQ(serve_kernel_count(&s), kernels_left);
        serve_stop(&s);
    }
    s_llm_stop(&llm);
}

static void s_run(const char *launcher, const char *llm_scenario, const char *scenario, int timeout_s)
{
    char dir[] = "/tmp/korch-agent-api-XXXXXX";
    if (!CHECK(mkdtemp(dir) != NULL))
        return;
    s_run_in(dir, launcher, llm_scenario, scenario, timeout_s, 0);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK_EQ(system(cmd), 0);
}

/* A session outlives its server: the next korch serve on the same
   --agent-dir lists it as stopped and resumes it on its next message. */
static void s_restart(const char *launcher)
{
    char dir[] = "/tmp/korch-agent-api-XXXXXX", cmd[128];
    if (!CHECK(mkdtemp(dir) != NULL))
        return;
    s_run_in(dir, launcher, "turns", "remember", 150, 1); /* its session's kernel, shut down with the server */
    s_run_in(dir, launcher, "turns", "recall", 150, 0);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK_EQ(system(cmd), 0);
}

/* The flow: a CSV analysis streamed as events (code, outputs with
   the PNG inline, the error, the final answer), seen live by a notebook on
   the same kernel; then transcript, notebook, files and DELETE. */
TEST_T(server_agent_sse_analysis_with_notebook_watching, 240) { s_run("local", "analysis", "analysis", 200); }
/* The same flow from @jupyterlab/services in Node, as an extension does it. */
TEST_T(server_agent_from_jupyterlab_services, 300)
{
    if (serve_npm_ready())
        s_run("local", "analysis", "npm:agent_check.js", 200);
}
TEST_T(server_agent_sse_analysis_in_docker, 240) { s_run("docker", "analysis", "analysis", 200); }
TEST_T(server_agent_sse_analysis_in_docker_from_the_pool, 240) { s_run("docker+pool", "analysis", "analysis", 200); }
TEST_T(server_agent_stream_chunks_rebuild_the_outputs, 180) { s_run("local", "chunks", "chunks", 150); }
TEST_T(server_agent_two_turns_share_state, 180) { s_run("local", "turns", "turns", 150); }
TEST_T(server_agent_files_the_code_writes, 180) { s_run("local", "writer", "files", 150); }
/* the work dir is the container's volume: listed from inside the kernel */
TEST_T(server_agent_files_the_code_writes_in_docker, 180) { s_run("docker", "writer", "files", 150); }
TEST_T(server_agent_interrupt_keeps_the_session, 180) { s_run("local", "sleeper", "interrupt", 150); }
/* GET .../events: a running turn replayed with its ids and followed to its
   done by two clients; a detached POST's client leaves without cancelling. */
TEST_T(server_agent_events_follow_a_running_turn, 180) { s_run("local", "sleeper", "follow", 150); }
/* The web page korch serve opens on, in Debian's Chromium (tests/npm/webapp.js):
   the printed URL, a session, uploads, a streamed turn with a table, a
   traceback, a chart and XSS payloads kept inert, the notebook, Stop, a
   reload mid-turn, phone width. Screenshots in build/screenshots/webapp-*.png. */
TEST_T(server_agent_web_page_in_chromium, 400)
{
    if (serve_npm_ready())
        s_run("local", "webapp", "npm:webapp.js", 320);
}
TEST_T(server_agent_closing_the_stream_cancels_the_step, 180) { s_run("local", "sleeper", "close_cancels", 150); }
TEST_T(server_agent_closing_the_stream_abandons_the_model_call, 180)
{
    s_run("local", "slowthink", "close_during_model", 150);
}
TEST_T(server_agent_on_a_notebook_kernel, 180) { s_run("local", "shared", "attach", 150); }
TEST_T(server_agent_bad_requests, 180) { s_run("local", "hello", "errors", 150); }
TEST_T(server_agent_without_llm_says_how, 90) { s_run("local", NULL, "nollm", 60); }
TEST_T(server_agent_resumes_after_its_kernel_is_gone, 180) { s_run("local", "turns", "kernel_gone", 150); }
TEST_T(server_agent_resumes_after_a_server_restart, 300) { s_restart("local"); }
TEST_T(server_agent_resumes_after_a_server_restart_in_docker, 300) { s_restart("docker"); }

/* Live progress over SSE: code_delta, status, done.tokens (issue 11). */
TEST_T(server_agent_streams_code_deltas_status_and_tokens, 180)
{
    s_anthropic_too = true;
    s_run("local", "live", "live", 150);
}
/* Receipts, the clean notebook and a session's own budget over the API (issue 23). */
TEST_T(server_agent_receipts_clean_notebook_and_budget, 180) { s_run("local", "receipts", "receipts", 150); }
/* korch serve --session-mb: the model floods 11 MB a step and kills its
   kernel each time; the session stays within 4 MiB over its steps, the
   restarts and two turns (issue 22, point 4). The server's kernel
   manager tells the agent's own connection to its kernel of each restart
   (KERNEL_GONE, korch_kernel_gone): before, a step sent as the kernel
   died waited 300 s, and under load the guesses from header.session and
   heartbeat gaps missed a kernel that died again while it restarted (the
   step hung to the limit; solo from 0ff5bfd until that was fixed). */
TEST_T(server_agent_session_output_budget_across_restarts_and_turns, 180)
{
    s_session_mb = "4";
    s_run("local", "restart_flood", "session_budget", 150);
    s_session_mb = NULL;
}
/* A provider the server has no key for: 400 naming the variable, not a 500. */
TEST_T(server_agent_provider_without_a_key_is_a_400, 90)
{
    unsetenv("ANTHROPIC_API_KEY");
    unsetenv("ANTHROPIC_BASE_URL");
    s_run("local", "hello", "llm_keys", 60);
}

/* POST .../verify (issue 23): the clean notebook re-run in a fresh kernel of
   the server reproduces the receipts scenario's answer (its dead end left
   out); its events in the one schema, the result in the notebook's metadata
   and the transcript as the CLI writes them, the fresh kernel shut down. */
TEST_T(server_agent_verify_reproduces_a_clean_session, 180) { s_run("local", "receipts", "verify", 150); }
/* An answer quoting an unseeded random number: verify says it differed, and what the fresh kernel printed. */
TEST_T(server_agent_verify_reports_what_differed, 180) { s_run("local", "drift", "verify_drift", 150); }
/* The fresh kernel gets the session's uploads (the analysis reads sales.csv):
   put from the session's copies by the launcher (a host dir; a container's volume). */
TEST_T(server_agent_verify_puts_the_uploads, 240) { s_run("local", "analysis", "verify_inputs", 200); }
TEST_T(server_agent_verify_puts_the_uploads_in_docker, 240) { s_run("docker", "analysis", "verify_inputs", 200); }
/* The verification's kernel counts against --max-kernels (and the user's quota). */
TEST_T(server_agent_verify_counts_its_kernel, 180)
{
    s_max_kernels = "1";
    s_run("local", "receipts", "verify_limit", 150);
    s_max_kernels = NULL;
}
/* Each step's CPU seconds and peak memory in korch serve (issue 23): the
   agent on its thread reads the counters of the server's kernel (the
   launcher's usage source: a container's cgroup on this host) into its
   result events, the transcript and the notebook's ledger. */
TEST_T(server_agent_ledger_per_step_in_docker, 240) { s_run("docker", "usage", "ledger", 200); }
TEST_T(server_agent_ledger_per_step_in_the_sandbox, 180) { s_run("sandbox", "usage", "ledger", 150); }
/* Local kernels have no counters: every step's usage is null (unknown), never zero. */
TEST_T(server_agent_ledger_unknown_for_local_kernels, 180) { s_run("local", "usage", "ledger_unknown", 150); }
