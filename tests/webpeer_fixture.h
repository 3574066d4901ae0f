/*  Test fixture: korch serve's page checked by a Node script of tests/npm/
 *  in Debian's Chromium, with the scripted model (llm_fixture.h) on one of
 *  its scenarios and the sessions in a fresh agent dir. Header-only: include
 *  it from one test file each. */
#ifndef KORCH_WEBPEER_FIXTURE_H
#define KORCH_WEBPEER_FIXTURE_H

#include "llm_fixture.h"
#include "serve_fixture.h"

#include <jansson.h>

/* korch serve --agent-dir DIR --llm openai:gpt-4o-mini [--launcher L]
   (launcher NULL: serve's default), the model on scenario, then `node
   tests/npm/SCRIPT PAGE_URL ARGS...` (args: NULL or NULL-terminated) for
   at most timeout_s: it must say ok. The number of checks the script made
   ("checks" in its JSON line), -1 when it did not say ok or could not run. */
static inline int serve_web_peer(const char *scenario, const char *launcher, const char *script,
                                 const char *const *args, int timeout_s)
{
    int checks = -1;
    if (!serve_npm_ready())
        return -1;
    char dir[] = "/tmp/korch-webpeer-XXXXXX", cmd[128];
    llm_server_t llm = {0};
    if (!llm_server_start(&llm) || !CHECK(mkdtemp(dir) != NULL))
        goto out;
    llm_server_env(&llm, scenario);
    const char *extra[] = {"--agent-dir", dir, "--llm", "openai:gpt-4o-mini", launcher ? "--launcher" : NULL,
                           launcher, NULL};
    serve_t s;
    if (serve_start_args(&s, extra)) {
        char path[700];
        snprintf(path, sizeof path, "%s/tests/npm/%s", korch_test_root(), script);
        const char *argv[16] = {"node", path, s.line};
        for (int i = 0; args && args[i] && i < 12; i++)
            argv[3 + i] = args[i];
        json_t *j = serve_peer_json(argv, timeout_s);
        checks = (int)json_integer_value(json_object_get(j, "checks"));
        if (!CHECK(json_is_true(json_object_get(j, "ok")))) {
            serve_log_tail(&s);
            checks = -1;
        } else
            fprintf(stderr, "  %d checks\n", checks);
        json_decref(j);
        serve_stop(&s);
        unlink(s.log);
    }
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK_EQ(system(cmd), 0);
out:
    llm_server_stop(&llm);
    return checks;
}

#endif
