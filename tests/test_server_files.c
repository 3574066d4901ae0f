/*  The file listing of korch serve's agent API, table-driven: each launcher
 *  of the table below runs tests/peers/files_matrix.py, which does every way
 *  a file arrives or leaves (the POST body, PUT new / nested / over itself,
 *  written, overwritten and removed by code, DELETE, a page reload, a
 *  server restart, a PUT and a DELETE while the session is stopped, the
 *  resume) and after each compares what it expects, GET .../files and the
 *  kernel's own view of its work dir. The model is the scripted LLM server
 *  (tests/peers/llm_server.py, scenario "usercode": it runs the code the
 *  question gives). The swarm launcher runs the same peer in
 *  tests/test_swarm_files.c, on the test swarm. */
#include "serve_fixture.h"

#include <jansson.h>

/* One korch serve of the launcher on dir, then the peer (phase: the
   matrix's before/after, or "web": the page's files in Chromium); true when it held. */
static bool s_phase(const char *launcher, const char *dir, const char *phase)
{
    const char *extra[] = {"--launcher", launcher, "--agent-dir", dir, "--pool", "0", "--llm", "openai:gpt-4o-mini",
                           NULL};
    serve_t s;
    if (!serve_start_args(&s, extra))
        return false;
    char script[700], csv[700];
    snprintf(script, sizeof script, "%s/tests/npm/webapp_files.js", korch_test_root());
    snprintf(csv, sizeof csv, "%s/scripts/demo/sales.csv", korch_test_root());
    const char *matrix[] = {PY, serve_peer("files_matrix.py"), "--url", s.line, "--agent-dir", dir, phase, NULL};
    const char *web[] = {"node", script, s.line, csv, NULL};
    json_t *j = serve_peer_json(strcmp(phase, "web") == 0 ? web : matrix, 300);
    bool ok = CHECK(json_is_true(json_object_get(j, "ok")));
    char *details = json_dumps(json_object_get(j, strcmp(phase, "web") == 0 ? "figures" : "details"), JSON_COMPACT);
    if (!ok)
        serve_log_tail(&s);
    else
        fprintf(stderr, "  %s %s: %s\n", launcher, phase, details ? details : "");
    free(details);
    json_decref(j);
    serve_stop(&s);
    return ok;
}

/* The scripted LLM, then run(launcher, dir) in a fresh agent dir. */
static void s_with_llm(const char *launcher, void (*run)(const char *launcher, const char *dir))
{
    char line[64], url[128], dir[] = "/tmp/korch-files-XXXXXX";
    const char *largv[] = {PY, serve_peer("llm_server.py"), NULL};
    pid_t llm = korch_test_spawn_line(largv, line, sizeof line, 10, NULL);
    if (!CHECK_GT(llm, 0) || !CHECK(mkdtemp(dir) != NULL))
        goto out;
    snprintf(url, sizeof url, "http://127.0.0.1:%d/s/usercode/v1", (int)strtol(line, NULL, 10));
    unsetenv("KORCH_LLM");
    setenv("OPENAI_BASE_URL", url, 1);
    setenv("OPENAI_API_KEY", "sk-test", 1);
    run(launcher, dir);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK_EQ(system(cmd), 0);
out:
    if (llm > 0) {
        kill(llm, SIGTERM);
        waitpid(llm, NULL, 0);
    }
}

static void s_matrix_in(const char *launcher, const char *dir)
{
    if (s_phase(launcher, dir, "before"))
        s_phase(launcher, dir, "after"); /* a new korch serve on the same sessions */
}

static void s_matrix(const char *launcher) { s_with_llm(launcher, s_matrix_in); }

static void s_web_in(const char *launcher, const char *dir) { s_phase(launcher, dir, "web"); }

/* The launchers (the rows; the ways are the peer's table). */
TEST_T(server_files_listing_local, 240) { s_matrix("local"); }
TEST_T(server_files_listing_sandbox, 240) { s_matrix("sandbox"); }
TEST_T(server_files_listing_docker, 300) { s_matrix("docker"); }

/* The page's files in Chromium (tests/npm/webapp_files.js): before any
   session, right after New session, three at once, 20 MB with progress,
   previews, delete and reload. Screenshots in build/screenshots/files-*.png. */
TEST_T(server_files_web_page_in_chromium, 300)
{
    if (serve_npm_ready())
        s_with_llm("sandbox", s_web_in);
}
