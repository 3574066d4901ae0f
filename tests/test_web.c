/*  The web page's rendering of the agent events (src/web/src/turn.ts), in
 *  Debian's Chromium: tests/npm/webapp_events.js bundles the turn view with
 *  the page's own esbuild and feeds it every event of the contract (step,
 *  status, text, code_delta, code with its language, output with append,
 *  result with figures, files, final, done with the turn's tokens) plus one
 *  it does not know, with script in the text, the code, a file name and the
 *  outputs: each rendered, none run; and a host's cells (the JupyterLab
 *  panel's CellSink) fed each call's code, outputs and result by step and
 *  call, the chat rendering no output itself. The whole page against a real server
 *  is server_agent_web_page_in_chromium (tests/test_server_agent.c). */
#include "serve_fixture.h"

#include <jansson.h>

TEST_T(web_turn_view_renders_the_contract_events, 120)
{
    if (!serve_npm_ready())
        return;
    char script[700], esbuild[700];
    snprintf(script, sizeof script, "%s/tests/npm/webapp_events.js", korch_test_root());
    snprintf(esbuild, sizeof esbuild, "%s/src/web/node_modules/esbuild/package.json", korch_test_root());
    if (!CHECK(access(esbuild, R_OK) == 0)) {
        fprintf(stderr, "  no src/web/node_modules: run make (it installs the page's npm dependencies)\n");
        return;
    }
    const char *argv[] = {"node", script, NULL};
    char *out = NULL, *err = NULL;
    int rc = korch_test_run(argv, NULL, &out, &err, 100);
    json_t *j = out ? json_loads(out, JSON_DISABLE_EOF_CHECK, NULL) : NULL;
    if (!CHECK_EQ(rc, 0) || !CHECK(json_is_true(json_object_get(j, "ok"))))
        fprintf(stderr, "  %s%s\n", out ? out : "(no output)", err ? err : "");
    else
        fprintf(stderr, "  %s", out);
    CHECK_GT((int)json_integer_value(json_object_get(j, "checks")), 15);
    json_decref(j);
    free(out);
    free(err);
}
