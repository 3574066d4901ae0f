/*  A kernel's taint in korch serve's relay (issue 21 item 1): the kernel,
 *  and the model through the agent API, attack a person's Jupyter client.
 *  tests/peers/taint_check.py drives a real korch serve and a real
 *  ipykernel over both websocket framings: a table of attacks (IPython
 *  hooks, display_pub and displayhook replaced, a thread displaying later,
 *  update_display_data on the person's display id, JavaScript, %%javascript
 *  and %%html, markdown and SVG with script, an HTML widget's comm, a
 *  custom widget module, a page payload, help links), each followed by the
 *  person's next cell; nothing with script may arrive, a note must say
 *  why; the same script arrives intact before the taint, after a restart
 *  and after the owner lifts it.
 */
#include "test.h"
#include "serve_fixture.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

static void s_check(const char *protocol, bool agent)
{
    pid_t llm = -1;
    char line[64] = "", url[256];
    if (agent) {
        const char *argv[] = {PY, serve_peer("llm_server.py"), NULL};
        llm = korch_test_spawn_line(argv, line, sizeof line, 10, NULL);
        int port = llm > 0 ? (int)strtol(line, NULL, 10) : 0;
        if (!CHECK_GT(port, 0))
            return;
        snprintf(url, sizeof url, "http://127.0.0.1:%d/s/taint_hook/v1", port);
        setenv("OPENAI_BASE_URL", url, 1);
        setenv("OPENAI_API_KEY", "sk-test", 1);
    }
    unsetenv("KORCH_LLM");
    char dir[] = "/tmp/korch-taint-XXXXXX";
    if (!CHECK(mkdtemp(dir) != NULL))
        goto out;
    const char *extra[] = {"--agent-dir", dir, agent ? "--llm" : NULL, "openai:gpt-4o-mini", NULL};
    serve_t s;
    if (serve_start_args(&s, extra)) {
        const char *argv[] = {PY, serve_peer("taint_check.py"), "--url", s.line, "--protocol", protocol,
                              agent ? "--agent" : NULL, NULL};
        char *out = NULL, *err = NULL;
        int rc = korch_test_run(argv, NULL, &out, &err, 240);
        json_t *j = out ? json_loads(out, JSON_DISABLE_EOF_CHECK, NULL) : NULL;
        if (!CHECK_EQ(rc, 0) || !CHECK(json_is_true(json_object_get(j, "ok")))) {
            fprintf(stderr, "  %s\n%s\n", out ? out : "(no output)", err ? err : "");
            serve_log_tail(&s);
        } else
            fprintf(stderr, "  %.300s\n", out);
        json_decref(j);
        free(out);
        free(err);
        serve_stop(&s);
        unlink(s.log);
    }
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    const char *rm[] = {"sh", "-c", cmd, NULL};
    korch_test_run(rm, NULL, NULL, NULL, 30);
out:
    if (llm > 0) {
        kill(llm, SIGTERM);
        waitpid(llm, NULL, 0);
    }
}

/* The model's code (the agent API in a notebook's kernel) is the attacker. */
TEST_T(taint_agent_hook_v1, 300) { s_check("v1", true); }
/* A client asked for the taint; the legacy framing. */
TEST_T(taint_rest_legacy, 300) { s_check("legacy", false); }
