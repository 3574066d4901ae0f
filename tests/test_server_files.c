/*  The file listing of korch serve's agent API, table-driven: each launcher
 *  of the table below runs tests/peers/files_matrix.py, which does every way
 *  a file arrives or leaves (the POST body, PUT new / nested / over itself,
 *  written, overwritten and removed by code, DELETE, a page reload, a
 *  server restart, a PUT and a DELETE while the session is stopped, the
 *  resume) and after each compares what it expects, GET .../files and the
 *  kernel's own view of its work dir. The model is the scripted LLM server
 *  (tests/peers/llm_server.py, scenario "usercode": it runs the code the
 *  question gives). The swarm launcher runs the same peer in
 *  tests/test_swarm_cluster.c, where the test swarm is up. */
#include "serve_fixture.h"

#include <jansson.h>

/* One korch serve of the launcher on dir, then the peer's phase; true when it held. */
static bool s_phase(const char *launcher, const char *dir, const char *phase)
{
    const char *extra[] = {"--launcher", launcher, "--agent-dir", dir, "--pool", "0", "--llm", "openai:gpt-4o-mini",
                           NULL};
    serve_t s;
    if (!serve_start_args(&s, extra))
        return false;
    const char *argv[] = {PY, serve_peer("files_matrix.py"), "--url", s.line, "--agent-dir", dir, phase, NULL};
    json_t *j = serve_peer_json(argv, 240);
    bool ok = CHECK(json_is_true(json_object_get(j, "ok")));
    if (!ok)
        serve_log_tail(&s);
    else
        fprintf(stderr, "  %s %s: %s\n", launcher, phase,
                json_dumps(json_object_get(json_object_get(j, "details"), "ways"), JSON_COMPACT));
    json_decref(j);
    serve_stop(&s);
    return ok;
}

static void s_matrix(const char *launcher)
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
    if (s_phase(launcher, dir, "before"))
        s_phase(launcher, dir, "after"); /* a new korch serve on the same sessions */
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK_EQ(system(cmd), 0);
out:
    if (llm > 0) {
        kill(llm, SIGTERM);
        waitpid(llm, NULL, 0);
    }
}

/* The launchers (the rows; the ways are the peer's table). */
TEST_T(server_files_listing_local, 240) { s_matrix("local"); }
TEST_T(server_files_listing_sandbox, 240) { s_matrix("sandbox"); }
TEST_T(server_files_listing_docker, 300) { s_matrix("docker"); }
