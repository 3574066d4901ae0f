/*  A team's korch serve (issue 26) with real parts: `korch serve --users
 *  FILE --audit FILE --audit-code`, the scripted LLM (scenario "owner",
 *  tests/peers/team_scenarios.py) and tests/peers/team_check.py as four
 *  users' clients: REST, the channels websocket and the agent API, each
 *  user seeing and touching only their own things (404 for another's), an
 *  admin everything, quotas answered 429 with used and limit, /metrics per
 *  user; then the page (tests/npm/webapp_users.js, Chromium): each user's
 *  lists only their own sessions, the admin's all. Then the audit log, line by line: who started, ran (the code's
 *  SHA-256 computed here), connected, uploaded, downloaded and deleted
 *  what; nothing of bob's on alice's things.
 */
#include "serve_fixture.h"
#include "llm_fixture.h"
#include "korch/fsutil.h"
#include "korch/users.h"

#include <jansson.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Make the users file: alice, bob (kernels=2 sessions=1), carol
   (tokens_per_day=1), root (admin); their tokens into toks ("name=T,..."). */
static bool s_users(const char *path, char *toks, size_t len)
{
    korch_err_t err = {0};
    korch_users_t *u = korch_users_load(path, true, &err);
    if (!CHECK(u != NULL))
        return false;
    static const char *const names[] = {"alice", "bob", "carol", "root"};
    size_t o = 0;
    bool ok = true;
    for (int i = 0; i < 4 && ok; i++) {
        char t[KORCH_TOKEN_MAX], id[KORCH_TOKEN_ID_MAX];
        ok = korch_users_add(u, names[i], i == 3 ? "admin" : "user", &err) == KORCH_OK &&
             korch_users_mint(u, names[i], t, id, &err) == KORCH_OK;
        o += (size_t)snprintf(toks + o, len - o, "%s%s=%s", i ? "," : "", names[i], t);
    }
    ok = ok && korch_users_set_quota(u, "bob", "kernels", json_integer(2), &err) == KORCH_OK &&
         korch_users_set_quota(u, "bob", "sessions", json_integer(1), &err) == KORCH_OK &&
         korch_users_set_quota(u, "carol", "tokens_per_day", json_integer(1), &err) == KORCH_OK &&
         korch_users_save(u, &err) == KORCH_OK;
    if (!ok)
        fprintf(stderr, "  users file: %s\n", err.msg);
    korch_users_destroy(&u);
    return CHECK(ok);
}

static void s_sha256_hex(const char *s, char hex[65])
{
    unsigned char h[32];
    unsigned int n = 32;
    EVP_Digest(s, strlen(s), h, &n, EVP_sha256(), NULL);
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", h[i]);
}

/* Lines of the audit log with user and action (and id, when not NULL). */
static int s_count(json_t *lines, const char *user, const char *action, const char *id)
{
    int n = 0;
    size_t i;
    json_t *l;
    json_array_foreach(lines, i, l) {
        if (strcmp(json_string_value(json_object_get(l, "user")), user) == 0 &&
            strcmp(json_string_value(json_object_get(l, "action")), action) == 0 &&
            (!id || strcmp(json_string_value(json_object_get(l, "id")), id) == 0))
            n++;
    }
    return n;
}

TEST_T(server_team_two_users_rest_ws_agent_quotas_audit, 240)
{
    char *dir = korch_test_mkdir("/tmp/korch-team-XXXXXX");
    char users[300], audit[300], agents[300], toks[2048];
    snprintf(users, sizeof users, "%s/users.json", dir);
    snprintf(audit, sizeof audit, "%s/audit.jsonl", dir);
    snprintf(agents, sizeof agents, "%s/sessions", dir);
    llm_server_t llm = {0};
    serve_t s = {0};
    char *out = NULL, *text = NULL;
    json_t *res = NULL, *lines = json_array();
    if (!serve_npm_ready() || !s_users(users, toks, sizeof toks) || !llm_server_start(&llm))
        goto out;
    llm_server_env(&llm, "owner");
    const char *extra[] = {"--users", users, "--audit", audit, "--audit-code", "--agent-dir", agents,
                           "--llm", "openai:gpt-4o-mini", NULL};
    if (!CHECK(serve_start_args(&s, extra)))
        goto out;
    const char *argv[] = {PY, serve_peer("team_check.py"), "--url", s.url, "--tokens", toks, "two-users", NULL};
    int rc = korch_test_run(argv, NULL, &out, NULL, 200);
    res = out ? json_loads(out, JSON_DISABLE_EOF_CHECK, NULL) : NULL;
    if (!CHECK_EQ(rc, 0) || !CHECK(json_is_true(json_object_get(res, "ok")))) {
        fprintf(stderr, "  team_check.py: %s\n", out ? out : "(no output)");
        serve_log_tail(&s);
    }
    /* the page per user in Chromium (tests/npm/webapp_users.js), the same server */
    char script[600];
    snprintf(script, sizeof script, "%s/tests/npm/webapp_users.js", korch_test_root());
    const char *web[] = {"node", script, s.url, toks, NULL};
    char *wout = NULL;
    rc = korch_test_run(web, NULL, &wout, NULL, 120);
    json_t *wres = wout ? json_loads(wout, JSON_DISABLE_EOF_CHECK, NULL) : NULL;
    if (!CHECK_EQ(rc, 0) || !CHECK(json_is_true(json_object_get(wres, "ok"))))
        fprintf(stderr, "  webapp_users.js: %s\n", wout ? wout : "(no output)");
    json_decref(wres);
    free(wout);
    serve_stop(&s);
    /* the audit log */
    size_t len = 0;
    korch_err_t err = {0};
    text = korch_fs_read(audit, 64u << 20, true, &len, &err);
    if (!CHECK(text != NULL))
        goto out;
    for (char *line = text, *nl; (nl = strchr(line, '\n')); line = nl + 1) {
        json_t *j = json_loadb(line, (size_t)(nl - line), 0, NULL);
        if (!CHECK(json_is_object(j) && json_is_string(json_object_get(j, "time")) &&
                   json_is_string(json_object_get(j, "user")) && json_is_string(json_object_get(j, "action"))))
            fprintf(stderr, "  bad audit line: %.*s\n", (int)(nl - line), line);
        json_array_append_new(lines, j ? j : json_null());
    }
    json_t *d = json_object_get(res, "details");
    const char *ka = json_string_value(json_object_get(d, "alice_kernel"));
    const char *sid = json_string_value(json_object_get(d, "alice_session"));
    if (!CHECK(ka && sid))
        goto out;
    CHECK_EQ(s_count(lines, "alice", "kernel.start", ka), 1);
    CHECK_EQ(s_count(lines, "alice", "kernel.connect", ka), 1);
    CHECK_EQ(s_count(lines, "bob", "kernel.connect", NULL), 0); /* refused: no line */
    CHECK_EQ(s_count(lines, "bob", "kernel.delete", ka), 0);
    CHECK_EQ(s_count(lines, "alice", "session.create", sid), 1);
    CHECK_EQ(s_count(lines, "alice", "session.message", sid), 1);
    CHECK_GE(s_count(lines, "alice", "session.execute", sid), 1);
    /* the admin's turn in alice's session: its execution is the admin's, with the admin's role */
    CHECK_GE(s_count(lines, "root", "session.execute", sid), 1);
    size_t k;
    json_t *e;
    json_array_foreach(lines, k, e) {
        const char *who = json_string_value(json_object_get(e, "user"));
        if (strcmp(json_string_value(json_object_get(e, "action")), "session.execute") == 0 && who)
            CHECK_STREQ(json_string_value(json_object_get(e, "role")), strcmp(who, "root") == 0 ? "admin" : "user");
    }
    CHECK_EQ(s_count(lines, "alice", "file.upload", sid), 1);
    CHECK_EQ(s_count(lines, "alice", "file.download", sid), 1);
    CHECK_EQ(s_count(lines, "alice", "session.delete", sid), 1);
    CHECK_EQ(s_count(lines, "bob", "session.message", NULL), 0);
    CHECK_EQ(s_count(lines, "root", "session.delete", NULL), 1); /* the admin deleted bob's */
    CHECK_GE(s_count(lines, "bob", "kernel.start", NULL), 2);
    CHECK_EQ(s_count(lines, "bob", "kernel.start", NULL), 2); /* the third was refused (429) */
    /* alice's execution over the websocket: its code and the code's hash */
    const char *code = "secret_a = 41\nprint(secret_a + 1)";
    char want[65];
    s_sha256_hex(code, want);
    bool seen = false;
    size_t i;
    json_t *l;
    json_array_foreach(lines, i, l) {
        if (strcmp(json_string_value(json_object_get(l, "action")), "kernel.execute") ||
            strcmp(json_string_value(json_object_get(l, "id")), ka))
            continue;
        if (strcmp(json_string_value(json_object_get(l, "code")), code) == 0) {
            seen = true;
            CHECK_STREQ(json_string_value(json_object_get(l, "code_sha256")), want);
            CHECK_STREQ(json_string_value(json_object_get(l, "user")), "alice");
            CHECK_STREQ(json_string_value(json_object_get(l, "role")), "user");
        }
    }
    CHECK(seen);
out:
    serve_stop(&s);
    llm_server_stop(&llm);
    json_decref(res);
    json_decref(lines);
    free(out);
    free(text);
    korch_test_rmdir(dir);
}
