/*  An agent session's korch serve --instance X killed with -9 and started
 *  again: the session goes back onto its own kernel (re-adopted; see
 *  test_server_adopt.c for the kernels themselves), or resumes in a fresh
 *  one when its container went meanwhile.
 */
#include "adopt_fixture.h"

/* ------------------------------------------------- agent sessions */

/* resume_peer.py MODE [A1 [A2]] against s: its JSON line (new), NULL when none. */
static json_t *s_rpeer(const serve_t *s, const char *mode, const char *a1, const char *a2)
{
    const char *argv[] = {PY, serve_peer("resume_peer.py"), s->url, s->token, mode, a1, a2, NULL};
    char *out = NULL, *err = NULL;
    int st = korch_test_run(argv, NULL, &out, &err, 300);
    json_t *j = out ? json_loads(out, JSON_DISABLE_EOF_CHECK, NULL) : NULL;
    if (st != 0 || !json_is_true(json_object_get(j, "ok")))
        fprintf(stderr, "resume_peer.py %s: status %d\n%s\n%s\n", mode, st, out ? out : "", err ? err : "");
    free(out);
    free(err);
    return j;
}

/* The number after "STAMP=" in text into buf ("" when none). */
static void s_stamp(const char *text, char *buf, size_t len)
{
    const char *p = text ? strstr(text, "STAMP=") : NULL;
    size_t n = p ? strspn(p + 6, "0123456789.") : 0;
    while (n && p[6 + n - 1] == '.') /* the sentence's full stop */
        n--;
    snprintf(buf, len, "%.*s", (int)(n < len ? n : len - 1), p ? p + 6 : "");
}

/* notices joined (a new string) */
static char *s_notices(json_t *turn)
{
    json_t *a = json_object_get(turn, "notices");
    size_t i, n = 1;
    json_t *v;
    json_array_foreach(a, i, v) n += json_string_length(v) + 3;
    char *out = calloc(1, n);
    size_t used = 0;
    json_array_foreach(a, i, v) if (out) used += (size_t)snprintf(out + used, n - used, "%s | ", json_string_value(v));
    return out;
}

/* Is the listed kernels' array exactly the ids given (any order)? */
static bool s_listed(json_t *j, const char *a, const char *b)
{
    json_t *ks = json_object_get(j, "kernels");
    size_t want = (a ? 1 : 0) + (b ? 1 : 0);
    if (!CHECK_EQ(json_array_size(ks), want)) {
        char *t = json_dumps(ks, JSON_COMPACT);
        fprintf(stderr, "  listed: %s\n", t ? t : "?");
        free(t);
        return false;
    }
    size_t i;
    json_t *v;
    json_array_foreach(ks, i, v) if (!CHECK((a && strcmp(json_string_value(v), a) == 0) ||
                                            (b && strcmp(json_string_value(v), b) == 0))) return false;
    return true;
}

/* An agent session whose korch serve --instance X is killed with -9 goes
   back onto its own kernel at the restart: a value no snapshot or replay
   could give back (a time inside a closure) is still there, the kernel is
   the same and the only one listed, and the session owns it again (DELETE
   removes it and its container). A second session, whose container was
   killed while korch was down, resumes in a fresh kernel as before
   (snapshot and replay, said), and nothing is left over. */
TEST_T(server_adopt_agent_session_back_on_its_kernel, 600)
{
    korch_err_t err = {0};
    korch_docker_t *d = korch_docker_new(NULL, NULL, &err);
    if (!CHECK(d != NULL)) {
        fprintf(stderr, "  docker: %s\n", err.msg);
        return;
    }
    char inst[64], dir[] = "/tmp/korch-adopt-agent-XXXXXX", url[256], line[64], cmd[512];
    snprintf(inst, sizeof inst, "adopt-agent-%d", (int)getpid());
    serve_t s = {0};
    json_t *j = NULL;
    pid_t llm = 0;
    char sid[2][64] = {"", ""}, kid[2][64] = {"", ""}, cid[2][80] = {"", ""}, stamp[2][64] = {"", ""};
    char got[64], k3[64] = "";
    char *notes = NULL;
    if (!CHECK(mkdtemp(dir) != NULL))
        goto out;
    const char *largv[] = {PY, serve_peer("llm_server.py"), NULL};
    llm = korch_test_spawn_line(largv, line, sizeof line, 10, NULL);
    if (!CHECK_GT(llm, 0))
        goto out;
    snprintf(url, sizeof url, "http://127.0.0.1:%d/s/stamp/v1", (int)strtol(line, NULL, 10));
    unsetenv("KORCH_LLM");
    setenv("OPENAI_BASE_URL", url, 1);
    setenv("OPENAI_API_KEY", "sk-test", 1);
    const char *args[] = {"--launcher", "docker", "--instance", inst, "--agent-dir", dir, "--pool", "0",
                          "--llm", "openai:gpt-4o-mini", NULL};
    if (!CHECK(serve_start_args(&s, args)))
        goto out;
    /* two sessions, one turn each: STAMP printed */
    for (int i = 0; i < 2; i++) {
        j = s_rpeer(&s, "new", NULL, NULL);
        json_t *m = json_object_get(j, "session");
        if (!CHECK(json_is_true(json_object_get(j, "ok"))))
            goto out;
        snprintf(sid[i], sizeof sid[i], "%s", json_string_value(json_object_get(m, "id")));
        snprintf(kid[i], sizeof kid[i], "%s", json_string_value(json_object_get(m, "kernel_id")));
        json_decref(j);
        j = s_rpeer(&s, "turn", sid[i], "remember the time");
        if (!CHECK(json_is_true(json_object_get(j, "ok"))))
            goto out;
        s_stamp(json_string_value(json_object_get(j, "final")), stamp[i], sizeof stamp[i]);
        CHECK(stamp[i][0]);
        json_decref(j);
        j = NULL;
        s_container_of(d, kid[i], cid[i], sizeof cid[i]);
        CHECK(cid[i][0]);
    }

    /* kill -9; the second session's container dies meanwhile */
    kill(s.pid, SIGKILL);
    waitpid(s.pid, NULL, 0);
    s.pid = 0;
    serve_stop(&s);
    char path[200];
    snprintf(path, sizeof path, "/containers/%s/kill", cid[1]);
    CHECK_EQ(s_post(d, path, NULL, NULL), 204);
    /* and a copy of the first session appears, its session.json naming the
       same kernel: session.json is not trusted, only one gets that kernel */
    char forged[40];
    korch_uuid(forged);
    snprintf(cmd, sizeof cmd, "cp -a '%s/%s' '%s/%s'", dir, sid[0], dir, forged);
    CHECK_EQ(system(cmd), 0);
    {
        char sj[PATH_MAX];
        snprintf(sj, sizeof sj, "%s/%s/session.json", dir, forged);
        json_t *f = json_load_file(sj, 0, NULL);
        CHECK_STREQ(json_string_value(json_object_get(f, "kernel_id")), kid[0]);
        json_object_set_new(f, "id", json_string(forged));
        CHECK_EQ(json_dump_file(f, sj, 0), 0);
        json_decref(f);
    }
    if (!CHECK(serve_start_args(&s, args)))
        goto out;

    /* the first (or its copy) is back on its kernel, which is the only one
       listed; the other is stopped, to resume in a fresh kernel */
    char win[64] = "", lose[64] = "";
    for (int i = 0; i < 2; i++) {
        const char *id = i ? forged : sid[0];
        j = s_rpeer(&s, "get", id, NULL);
        json_t *m = json_object_get(j, "session");
        if (json_is_string(json_object_get(m, "kernel_id")))
            snprintf(win, sizeof win, "%s", id);
        else {
            snprintf(lose, sizeof lose, "%s", id);
            CHECK_STREQ(json_string_value(json_object_get(m, "state")), "stopped");
        }
        json_decref(j);
    }
    if (!CHECK(win[0] && lose[0]))
        goto out;
    j = s_rpeer(&s, "get", win, NULL);
    json_t *m = json_object_get(j, "session");
    CHECK_STREQ(json_string_value(json_object_get(m, "state")), "idle");
    CHECK_STREQ(json_string_value(json_object_get(m, "kernel_id")), kid[0]);
    CHECK(json_is_true(json_object_get(m, "owns_kernel")));
    s_listed(j, kid[0], NULL);
    json_decref(j);
    CHECK(!s_exists(d, cid[1]));
    CHECK(serve_log_has(&s, "resuming in a fresh kernel instead"));
    /* the one stopped goes without touching the kernel */
    j = s_rpeer(&s, "delete", lose, NULL);
    CHECK(json_is_true(json_object_get(j, "ok")));
    s_listed(j, kid[0], NULL);
    json_decref(j);
    snprintf(sid[0], sizeof sid[0], "%s", win);
    /* its variables are live: the same time, nothing rebuilt */
    j = s_rpeer(&s, "turn", sid[0], "recall the stamp");
    CHECK(json_is_true(json_object_get(j, "ok")));
    s_stamp(json_string_value(json_object_get(j, "final")), got, sizeof got);
    CHECK_STREQ(got, stamp[0]);
    notes = s_notices(j);
    CHECK_CONTAINS(notes, "kept running");
    CHECK(!strstr(notes, "fresh kernel"));
    free(notes);
    notes = NULL;
    json_decref(j);
    j = s_rpeer(&s, "get", sid[0], NULL);
    s_listed(j, kid[0], NULL);
    json_decref(j);
    CHECK(s_exists(d, cid[0]));

    /* the second resumes in a fresh kernel, said, its time made again */
    j = s_rpeer(&s, "turn", sid[1], "recall the stamp");
    CHECK(json_is_true(json_object_get(j, "ok")));
    s_stamp(json_string_value(json_object_get(j, "final")), got, sizeof got);
    CHECK(got[0] && strcmp(got, stamp[1]) != 0);
    notes = s_notices(j);
    CHECK_CONTAINS(notes, "resuming the session (the server restarted): starting a kernel");
    CHECK_CONTAINS(notes, "fresh kernel");
    json_decref(j);
    j = s_rpeer(&s, "get", sid[1], NULL);
    m = json_object_get(j, "session");
    snprintf(k3, sizeof k3, "%s", json_string_value(json_object_get(m, "kernel_id")) ?: "");
    CHECK(k3[0] && strcmp(k3, kid[1]) != 0);
    s_listed(j, kid[0], k3);
    json_decref(j);

    /* killed again, and a message at once: it waits for the kernel being
       re-adopted (never a 409), and both sessions are back on their kernels */
    kill(s.pid, SIGKILL);
    waitpid(s.pid, NULL, 0);
    s.pid = 0;
    serve_stop(&s);
    if (!CHECK(serve_start_args(&s, args)))
        goto out;
    j = s_rpeer(&s, "turn", sid[0], "recall the stamp");
    CHECK(json_is_true(json_object_get(j, "ok")));
    s_stamp(json_string_value(json_object_get(j, "final")), got, sizeof got);
    CHECK_STREQ(got, stamp[0]);
    free(notes);
    notes = s_notices(j);
    CHECK(strstr(notes, "waiting for the session's kernel") || strstr(notes, "kept running"));
    fprintf(stderr, "server-adopt: a message at once after the restart %s\n",
            strstr(notes, "waiting for the session's kernel") ? "waited for the kernel being re-adopted"
                                                              : "came after the re-adoption");
    CHECK(!strstr(notes, "fresh kernel"));
    json_decref(j);
    j = s_rpeer(&s, "get", sid[1], NULL);
    m = json_object_get(j, "session");
    CHECK_STREQ(json_string_value(json_object_get(m, "state")), "idle");
    CHECK_STREQ(json_string_value(json_object_get(m, "kernel_id")), k3);
    s_listed(j, kid[0], k3);
    json_decref(j);

    /* DELETE: each session's kernel goes, container and all */
    j = s_rpeer(&s, "delete", sid[0], NULL);
    CHECK(json_is_true(json_object_get(j, "ok")));
    s_listed(j, k3, NULL);
    json_decref(j);
    CHECK(s_wait_none(d, "korch.kernel_id", kid[0], 30000));
    j = s_rpeer(&s, "delete", sid[1], NULL);
    CHECK(json_is_true(json_object_get(j, "ok")));
    s_listed(j, NULL, NULL);
    CHECK(s_wait_none(d, "korch.kernel_id", k3, 30000));
    serve_stop(&s);
    CHECK(s_wait_none(d, "korch.instance", inst, 30000));
out:
    if (s.pid > 0)
        serve_log_tail(&s);
    free(notes);
    json_decref(j);
    serve_stop(&s);
    s_remove_label(d, inst);
    korch_docker_destroy(&d);
    if (llm > 0) {
        kill(llm, SIGTERM);
        waitpid(llm, NULL, 0);
    }
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK_EQ(system(cmd), 0);
}
