/*  Receipts and the clean notebook on korch's page (issue 23), in Debian's
 *  Chromium (tests/npm/webapp_receipts.js): the scripted model
 *  ("receipts") answers with five numbers the kernel printed and one it
 *  made up, after a failed attempt. The tooltip a hover shows on each
 *  number is its receipt (or "not computed by the kernel"), a computed one
 *  links to its step, and "Clean notebook" downloads the notebook without
 *  the failed attempt. Screenshot: build/screenshots/webapp-receipts.png.
 *  And the Verify button and the ledger (webapp_verify.js). */
#include "llm_fixture.h"
#include "serve_fixture.h"

#include <jansson.h>
#include <libgen.h>
#include <limits.h>

/* korch serve (launcher, the scripted model's "receipts") judged by tests/npm/SCRIPT, at least min_checks. */
static void s_web(const char *launcher, const char *script_name, int min_checks)
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
    const char *extra[] = {"--agent-dir", dir, "--llm", "openai:gpt-4o-mini", "--launcher", launcher, NULL};
    serve_t s;
    if (serve_start_args(&s, extra)) {
        char script[700];
        snprintf(script, sizeof script, "%s/tests/npm/%s", korch_test_root(), script_name);
        const char *argv[] = {"node", script, s.line, shots, NULL};
        json_t *j = serve_peer_json(argv, 180);
        if (!CHECK(json_is_true(json_object_get(j, "ok"))))
            serve_log_tail(&s);
        else
            fprintf(stderr, "  %d checks\n", (int)json_integer_value(json_object_get(j, "checks")));
        CHECK_GE((int)json_integer_value(json_object_get(j, "checks")), min_checks);
        json_decref(j);
        serve_stop(&s);
        unlink(s.log);
    }
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK_EQ(system(cmd), 0);
out:
    llm_server_stop(&llm);
}

TEST_T(trust_web_receipts_hover_and_clean_notebook_in_chromium, 240) { s_web("local", "webapp_receipts.js", 10); }
/* Verify and the ledger on the page (tests/npm/webapp_verify.js): each
   step's CPU seconds and peak memory (sandbox kernels: a cgroup) and the
   turn's sums; the Verify button's result under the answer, after a reload
   too, and in the notebook's metadata. Screenshot: webapp-verify.png. */
TEST_T(trust_web_verify_button_and_ledger_in_chromium, 240) { s_web("sandbox", "webapp_verify.js", 10); }
