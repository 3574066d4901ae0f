/*  Branching a session from a step in korch serve (issue 23 item 3): the
 *  API, POST /api/agent/sessions/{id}/branch, as two users of a team's
 *  server (tests/peers/branch_api_client.py), and the page's "Branch from
 *  here" button in Debian's Chromium (tests/npm/webapp_branch.js). Real
 *  local kernels; the scripted model of tests/peers/branch_scenarios.py,
 *  whose replies depend on what korch sent. The CLI: tests/test_branch.c. */
#include "webpeer_fixture.h"
#include "korch/users.h"

#include <jansson.h>
#include <libgen.h>
#include <limits.h>

/* The users file: alice and bob, plain users; their tokens into toks ("alice=T,bob=T"). */
static bool s_users(const char *path, char *toks, size_t len)
{
    korch_err_t err = {0};
    korch_users_t *u = korch_users_load(path, true, &err);
    if (!CHECK(u != NULL))
        return false;
    static const char *const names[] = {"alice", "bob"};
    size_t o = 0;
    bool ok = true;
    for (int i = 0; i < 2 && ok; i++) {
        char t[KORCH_TOKEN_MAX], id[KORCH_TOKEN_ID_MAX];
        ok = korch_users_add(u, names[i], "user", &err) == KORCH_OK &&
             korch_users_mint(u, names[i], t, id, &err) == KORCH_OK;
        o += (size_t)snprintf(toks + o, len - o, "%s%s=%s", i ? "," : "", names[i], t);
    }
    ok = ok && korch_users_save(u, &err) == KORCH_OK;
    if (!ok)
        fprintf(stderr, "  users file: %s\n", err.msg);
    korch_users_destroy(&u);
    return CHECK(ok);
}

/* alice's session, branched from step 2 with anthropic: the state of step 2
   (a, and the parent's very random r: the snapshot over a re-run that drew
   another) and not step 3's b; its first event names the new session; the
   parent's dir is the same byte for byte; bad steps are 400s that say the
   range; bob's branch of her session is a 404 and he cannot see hers. */
TEST_T(branch_serve_api_two_users, 240)
{
    char *dir = korch_test_mkdir("/tmp/korch-branchapi-XXXXXX");
    char users[300], agents[300], toks[1024];
    snprintf(users, sizeof users, "%s/users.json", dir);
    snprintf(agents, sizeof agents, "%s/sessions", dir);
    llm_server_t llm = {0};
    serve_t s = {0};
    if (!s_users(users, toks, sizeof toks) || !llm_server_start(&llm))
        goto out;
    llm_server_env(&llm, "branch");
    const char *extra[] = {"--users", users, "--agent-dir", agents, "--llm", "openai:gpt-4o-mini", NULL};
    if (!CHECK(serve_start_args(&s, extra)))
        goto out;
    const char *argv[] = {PY, serve_peer("branch_api_client.py"), "--url", s.url, "--agent-dir", agents, "--tokens",
                          toks, NULL};
    json_t *j = serve_peer_json(argv, 200);
    if (!CHECK(json_is_true(json_object_get(j, "ok"))))
        serve_log_tail(&s);
    else {
        char *d = json_dumps(json_object_get(j, "details"), JSON_COMPACT);
        fprintf(stderr, "  %s\n", d ? d : "");
        free(d);
    }
    json_decref(j);
    serve_stop(&s);
out:
    llm_server_stop(&llm);
    korch_test_rmdir(dir);
}


/* The page: a step's "Branch from here" asks what to do next (and a model);
   the page moves to the new session, listed beside the parent, cut after
   that step, which answers with the state of that step; the parent's
   transcript and page are as they were (tests/npm/webapp_branch.js).
   Screenshots: webapp-branch-form.png, webapp-branch.png. */
TEST_T(branch_web_button_in_chromium, 240)
{
    char bin[PATH_MAX], shots[PATH_MAX + 16];
    snprintf(bin, sizeof bin, "%s", korch_test_korch_bin());
    snprintf(shots, sizeof shots, "%s/screenshots", dirname(bin));
    const char *args[] = {shots, NULL};
    CHECK_GE(serve_web_peer("branch", "local", "webapp_branch.js", args, 200), 12);
}
