/*  Receipts and the clean notebook on korch's page (issue 23), in Debian's
 *  Chromium (tests/npm/webapp_receipts.js): the scripted model
 *  ("receipts") answers with five numbers the kernel printed and one it
 *  made up, after a failed attempt. The tooltip a hover shows on each
 *  number is its receipt (or "not computed by the kernel"), a computed one
 *  links to its step, and "Clean notebook" downloads the notebook without
 *  the failed attempt. Screenshot: build/screenshots/webapp-receipts.png. */
#include "llm_fixture.h"
#include "serve_fixture.h"

#include <jansson.h>
#include <libgen.h>
#include <limits.h>

TEST_T(trust_web_receipts_hover_and_clean_notebook_in_chromium, 240)
{
    if (!serve_npm_ready())
        return;
    char dir[] = "/tmp/korch-trustweb-XXXXXX", cmd[128], bin[PATH_MAX], shots[PATH_MAX + 16];
    llm_server_t llm = {0};
    if (!llm_server_start(&llm) || !CHECK(mkdtemp(dir) != NULL))
        goto out;
    llm_server_env(&llm, "receipts");
    snprintf(bin, sizeof bin, "%s", korch_test_korch_bin());
    snprintf(shots, sizeof shots, "%s/screenshots", dirname(bin));
    const char *extra[] = {"--agent-dir", dir, "--llm", "openai:gpt-4o-mini", NULL};
    serve_t s;
    if (serve_start_args(&s, extra)) {
        char script[700];
        snprintf(script, sizeof script, "%s/tests/npm/webapp_receipts.js", korch_test_root());
        const char *argv[] = {"node", script, s.line, shots, NULL};
        json_t *j = serve_peer_json(argv, 180);
        if (!CHECK(json_is_true(json_object_get(j, "ok"))))
            serve_log_tail(&s);
        else
            fprintf(stderr, "  %d checks\n", (int)json_integer_value(json_object_get(j, "checks")));
        CHECK_GE((int)json_integer_value(json_object_get(j, "checks")), 10);
        json_decref(j);
        serve_stop(&s);
        unlink(s.log);
    }
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK_EQ(system(cmd), 0);
out:
    llm_server_stop(&llm);
}
