/*  A team's korch serve over time (issue 26), with real parts: `korch serve
 *  --users FILE` on local kernels, the scripted LLM (scenario "owner") and
 *  tests/peers/team_soak.py as the users' clients.
 *
 *  team_soak_memory_flat_over_turns: 3 users x 2 agent sessions run 30
 *  turns each (the conversation fills --context-chars 4000), then 80 more
 *  each; korch serve's RSS, read while all are idle, may grow by at most
 *  6 KiB a turn between the two (the old korch grew ~17-24 KiB a turn: its
 *  agents kept every message and notebook cell, each kernel connection a
 *  string and a hash item per message seen). Every answer to its owner.
 *
 *  team_day_use_survives_a_restart: carol (tokens_per_day=1) and dave (no
 *  limit) each run a turn; korch serve is restarted on the same agent dir;
 *  /api/me still says what they used today, carol's next turn is refused
 *  429 for tokens_per_day and dave's use adds up.
 *
 *  team_hub_oauth_callback_waiting_at_shutdown_is_freed: korch serve
 *  under valgrind stopped while an /oauth_callback waits on the Hub.
 *
 *  team_model_rate_limit_shared_fairly: the model's key allows 4 requests
 *  a second (scenario "ratelimited": 429 with retry-after-ms beyond); ann
 *  runs 10 sessions turning back to back, ben one session 6 turns in a
 *  row. ben's turns all complete and fast (each waits for at most one of
 *  ann's calls at the key's gate); ann's are slowed, not failed; nothing
 *  reaches the wrong owner. The old korch sent every session's calls
 *  straight on and gave up after 2 retries: turns failed with HTTP 429.
 */
#include "serve_fixture.h"
#include "llm_fixture.h"
#include "korch/fsutil.h"
#include "korch/users.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* A users file of names (each with sessions=quota[i] when > 0, tokens_per_day
   = tpd[i] when > 0); their tokens into toks ("name=T,..."). */
static bool s_users(const char *path, const char *const *names, const int *sessions, const int *tpd, char *toks,
                    size_t len)
{
    korch_err_t err = {0};
    korch_users_t *u = korch_users_load(path, true, &err);
    if (!CHECK(u != NULL))
        return false;
    size_t o = 0;
    bool ok = true;
    for (int i = 0; names[i] && ok; i++) {
        char t[KORCH_TOKEN_MAX], id[KORCH_TOKEN_ID_MAX];
        ok = korch_users_add(u, names[i], "user", &err) == KORCH_OK &&
             korch_users_mint(u, names[i], t, id, &err) == KORCH_OK &&
             (!sessions || sessions[i] <= 0 ||
              korch_users_set_quota(u, names[i], "sessions", json_integer(sessions[i]), &err) == KORCH_OK) &&
             (!tpd || tpd[i] <= 0 ||
              korch_users_set_quota(u, names[i], "tokens_per_day", json_integer(tpd[i]), &err) == KORCH_OK);
        o += (size_t)snprintf(toks + o, len - o, "%s%s=%s", i ? "," : "", names[i], t);
    }
    ok = ok && korch_users_save(u, &err) == KORCH_OK;
    if (!ok)
        fprintf(stderr, "  users file: %s\n", err.msg);
    korch_users_destroy(&u);
    return CHECK(ok);
}

/* team_soak.py's JSON (new), its output shown when it did not hold. */
static json_t *s_soak(const serve_t *s, const char *toks, const char *const *more, int timeout_s)
{
    char pid[24];
    snprintf(pid, sizeof pid, "%d", (int)s->pid);
    const char *argv[24] = {PY, serve_peer("team_soak.py"), "--url", s->url, "--tokens", toks, "--pid", pid};
    int n = 8;
    for (int i = 0; more[i] && n < 23; i++)
        argv[n++] = more[i];
    argv[n] = NULL;
    char *out = NULL;
    int rc = korch_test_run(argv, NULL, &out, NULL, timeout_s);
    json_t *res = out ? json_loads(out, JSON_DISABLE_EOF_CHECK, NULL) : NULL;
    if (!CHECK_EQ(rc, 0) || !CHECK(json_is_true(json_object_get(res, "ok")))) {
        fprintf(stderr, "  team_soak.py: %s\n", out ? out : "(no output)");
        serve_log_tail(s);
    }
    free(out);
    return res;
}

TEST_SOLO_T(team_soak_memory_flat_over_turns, 600)
{
    char *dir = korch_test_mkdir("/tmp/korch-teamsoak-XXXXXX");
    char users[300], agents[300], toks[2048];
    snprintf(users, sizeof users, "%s/users.json", dir);
    snprintf(agents, sizeof agents, "%s/sessions", dir);
    llm_server_t llm = {0};
    serve_t s = {0};
    json_t *res = NULL;
    const char *names[] = {"u0", "u1", "u2", NULL};
    if (!s_users(users, names, NULL, NULL, toks, sizeof toks) || !llm_server_start(&llm))
        goto out;
    llm_server_env(&llm, "owner");
    const char *extra[] = {"--users", users, "--agent-dir", agents, "--llm", "openai:gpt-4o-mini",
                           "--context-chars", "4000", "--no-access-log", NULL};
    if (!CHECK(serve_start_args(&s, extra)))
        goto out;
    const char *more[] = {"--sessions", "2", "--warm", "30", "--turns", "80", "flat", NULL};
    res = s_soak(&s, toks, more, 560);
    json_t *d = json_object_get(res, "details");
    json_int_t per = json_integer_value(json_object_get(d, "growth_per_turn_bytes"));
    double load[1] = {0};
    getloadavg(load, 1);
    fprintf(stderr, "  %lld sessions: RSS %lld KiB after %lld warm-up turns, %lld KiB after %lld more (%+lld B a turn; "
                    "%.0f s; load %.1f)\n",
            (long long)json_integer_value(json_object_get(d, "sessions")),
            (long long)json_integer_value(json_object_get(d, "rss_warm_kb")),
            (long long)json_integer_value(json_object_get(d, "warm_turns")),
            (long long)json_integer_value(json_object_get(d, "rss_end_kb")),
            (long long)json_integer_value(json_object_get(d, "turns")), (long long)per,
            json_number_value(json_object_get(d, "seconds_measured")), load[0]);
    CHECK_EQ(json_integer_value(json_object_get(d, "wrong_answers")), 0);
    CHECK_EQ(json_integer_value(json_object_get(d, "turns")), 6 * 80);
    CHECK(json_is_integer(json_object_get(d, "growth_per_turn_bytes")));
    CHECK_LT(per, 6144);
out:
    serve_stop(&s);
    llm_server_stop(&llm);
    json_decref(res);
    korch_test_rmdir(dir);
}

TEST_T(team_model_rate_limit_shared_fairly, 400)
{
    char *dir = korch_test_mkdir("/tmp/korch-teamfair-XXXXXX");
    char users[300], agents[300], toks[2048];
    snprintf(users, sizeof users, "%s/users.json", dir);
    snprintf(agents, sizeof agents, "%s/sessions", dir);
    llm_server_t llm = {0};
    serve_t s = {0};
    json_t *res = NULL;
    const char *names[] = {"ann", "ben", NULL};
    if (!s_users(users, names, NULL, NULL, toks, sizeof toks) || !llm_server_start(&llm))
        goto out;
    llm_server_env(&llm, "ratelimited");
    const char *extra[] = {"--users", users, "--agent-dir", agents, "--llm", "openai:gpt-4o-mini", "--no-access-log",
                           NULL};
    if (!CHECK(serve_start_args(&s, extra)))
        goto out;
    const char *more[] = {"--sessions", "10", "--turns", "6", "fair", NULL};
    res = s_soak(&s, toks, more, 380);
    json_t *d = json_object_get(res, "details"), *ann = json_object_get(d, "ann"), *ben = json_object_get(d, "ben");
    json_t *ag = json_object_get(ann, "gate"), *bg = json_object_get(ben, "gate");
    double load[1] = {0};
    getloadavg(load, 1);
    fprintf(stderr, "  ben: %lld turns in %.1f s (p50 %.2f s, max %.2f s; %g calls, %g answered 429, %.1f s waited)\n"
                    "  ann: %lld turns meanwhile over 10 sessions (p50 %.2f s, max %.2f s; %g calls, %g answered 429, "
                    "%.1f s waited); load %.1f\n",
            (long long)json_integer_value(json_object_get(ben, "turns")),
            json_number_value(json_object_get(d, "light_seconds")), json_number_value(json_object_get(ben, "p50_s")),
            json_number_value(json_object_get(ben, "max_s")), json_number_value(json_object_get(bg, "calls_total")),
            json_number_value(json_object_get(bg, "rate_limited_total")),
            json_number_value(json_object_get(bg, "wait_seconds_total")),
            (long long)json_integer_value(json_object_get(ann, "turns")), json_number_value(json_object_get(ann, "p50_s")),
            json_number_value(json_object_get(ann, "max_s")), json_number_value(json_object_get(ag, "calls_total")),
            json_number_value(json_object_get(ag, "rate_limited_total")),
            json_number_value(json_object_get(ag, "wait_seconds_total")), load[0]);
    CHECK_EQ(json_integer_value(json_object_get(ben, "turns")), 6);
    CHECK_EQ(json_integer_value(json_object_get(ben, "failed")), 0);
    CHECK_EQ(json_integer_value(json_object_get(ann, "failed")), 0);
    CHECK_GE(json_integer_value(json_object_get(ann, "turns")), 10);
    /* the key was contended: the provider said 429 to somebody */
    CHECK_GT(json_number_value(json_object_get(ag, "rate_limited_total")) +
                 json_number_value(json_object_get(bg, "rate_limited_total")), 0.5);
    /* ben's turn is 2 model calls, each behind at most one of ann's at 4 a
       second, plus his kernel's run: seconds, where ann's 10 sessions wait
       their turns at the key for far longer */
    double ben_ms = 1000 * json_number_value(json_object_get(ben, "p50_s"));
    CHECK_LT(ben_ms, 8000);
    CHECK_LT(ben_ms, 1000 * json_number_value(json_object_get(ann, "p50_s")));
out:
    serve_stop(&s);
    llm_server_stop(&llm);
    json_decref(res);
    korch_test_rmdir(dir);
}

/* A user's field of team_soak.py turn's details. */
static json_t *s_of(json_t *res, const char *user, const char *key)
{
    return json_object_get(json_object_get(json_object_get(res, "details"), user), key);
}

static json_int_t s_tokens_today(json_t *res, const char *user)
{
    return json_integer_value(json_object_get(json_object_get(s_of(res, user, "me"), "used"), "tokens_today"));
}

TEST_T(team_day_use_survives_a_restart, 240)
{
    char *dir = korch_test_mkdir("/tmp/korch-teamday-XXXXXX");
    char users[300], agents[300], toks[2048], days[400];
    snprintf(users, sizeof users, "%s/users.json", dir);
    snprintf(agents, sizeof agents, "%s/sessions", dir);
    snprintf(days, sizeof days, "%s/.quota-today.json", agents);
    llm_server_t llm = {0};
    serve_t s = {0};
    json_t *first = NULL, *second = NULL;
    const char *names[] = {"carol", "dave", NULL};
    const int tpd[] = {1, 0};
    if (!s_users(users, names, NULL, tpd, toks, sizeof toks) || !llm_server_start(&llm))
        goto out;
    llm_server_env(&llm, "owner");
    const char *extra[] = {"--users", users, "--agent-dir", agents, "--llm", "openai:gpt-4o-mini", NULL};
    const char *more[] = {"turn", NULL};
    if (!CHECK(serve_start_args(&s, extra)))
        goto out;
    first = s_soak(&s, toks, more, 180);
    json_int_t c1 = s_tokens_today(first, "carol"), d1 = s_tokens_today(first, "dave");
    CHECK_EQ(json_integer_value(s_of(first, "carol", "status")), 200);
    CHECK_STREQ(json_string_value(s_of(first, "carol", "done")), "ok");
    CHECK_GT(c1, 0);
    CHECK_GT(d1, 0);
    serve_stop(&s);
    struct stat st;
    if (CHECK_EQ(stat(days, &st), 0))
        CHECK_EQ(st.st_mode & 0777, 0600);
    if (!CHECK(serve_start_args(&s, extra)))
        goto out;
    second = s_soak(&s, toks, more, 180);
    /* carol's day is spent: refused before anything runs, her use as before */
    CHECK_EQ(json_integer_value(s_of(second, "carol", "status")), 429);
    json_t *why = s_of(second, "carol", "refused");
    CHECK_STREQ(json_string_value(json_object_get(why, "quota")), "tokens_per_day");
    CHECK_EQ((json_int_t)json_number_value(json_object_get(why, "used")), c1);
    CHECK_EQ(s_tokens_today(second, "carol"), c1);
    /* dave's turn adds to what he used before the restart */
    CHECK_EQ(json_integer_value(s_of(second, "dave", "status")), 200);
    CHECK_GT(s_tokens_today(second, "dave"), d1);
    fprintf(stderr, "  tokens today before the restart: carol %lld, dave %lld; after: carol %lld (refused), dave %lld\n",
            (long long)c1, (long long)d1, (long long)s_tokens_today(second, "carol"),
            (long long)s_tokens_today(second, "dave"));
out:
    serve_stop(&s);
    llm_server_stop(&llm);
    json_decref(first);
    json_decref(second);
    korch_test_rmdir(dir);
}

/* A free port on 127.0.0.1 (bound and released). */
static int s_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof a;
    int port = 0;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &l) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

/* An /oauth_callback waiting on the Hub's token endpoint when korch serve
   stops: answered and freed (valgrind: no definite leak). The "Hub" is a
   socket that takes the request and never answers. */
TEST_T(team_hub_oauth_callback_waiting_at_shutdown_is_freed, 180)
{
    int hub = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    if (!CHECK(hub >= 0 && bind(hub, (struct sockaddr *)&a, sizeof a) == 0 && listen(hub, 8) == 0 &&
               getsockname(hub, (struct sockaddr *)&a, &al) == 0)) {
        if (hub >= 0)
            close(hub);
        return;
    }
    int port = s_free_port();
    char api[128], login[160], cb[128], portarg[16], log[128];
    snprintf(api, sizeof api, "http://127.0.0.1:%d/hub/api", ntohs(a.sin_port));
    snprintf(login, sizeof login, "http://127.0.0.1:%d/hub/api/oauth2/authorize", ntohs(a.sin_port));
    snprintf(cb, sizeof cb, "http://127.0.0.1:%d/oauth_callback", port);
    snprintf(portarg, sizeof portarg, "%d", port);
    snprintf(log, sizeof log, "/tmp/korch-oauth-vg-%d.log", (int)getpid());
    pid_t pid = fork();
    if (pid == 0) {
        setenv("JUPYTERHUB_API_TOKEN", "service-secret", 1);
        setenv("JUPYTERHUB_CLIENT_ID", "service-korch", 1);
        setenv("JUPYTERHUB_OAUTH_CALLBACK_URL", cb, 1);
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execlp("valgrind", "valgrind", "--leak-check=full", "--errors-for-leak-kinds=definite", "--error-exitcode=99",
               korch_test_korch_bin(), "serve", "--port", portarg, "--launcher", "local", "--token", "t", "--hub",
               "--hub-api-url", api, "--hub-login-url", login, "--no-access-log", (char *)NULL);
        _exit(127);
    }
    /* up (valgrind is slow to start): its port answers */
    int c = -1;
    for (int i = 0; i < 600 && c < 0; i++) {
        c = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in k = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        if (connect(c, (struct sockaddr *)&k, sizeof k) != 0) {
            close(c);
            c = -1;
            usleep(100000);
        }
    }
    if (CHECK(c >= 0)) {
        const char *rq = "GET /oauth_callback?code=abc&state=s1 HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                         "Cookie: korch-oauth-state=s1\r\n\r\n";
        CHECK_EQ(write(c, rq, strlen(rq)), (ssize_t)strlen(rq));
        /* the exchange reached the Hub (accepted, never answered), then korch stops */
        struct pollfd p = {hub, POLLIN, 0};
        CHECK_EQ(poll(&p, 1, 60000), 1);
        int h = accept(hub, NULL, NULL);
        usleep(300000);
        kill(pid, SIGTERM);
        int st = 0;
        waitpid(pid, &st, 0);
        pid = -1;
        if (!CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
            char *text = korch_read_file(log, 1 << 20, NULL, NULL);
            fprintf(stderr, "  korch serve under valgrind ended 0x%x:\n%s\n", st,
                    text ? (strlen(text) > 6000 ? text + strlen(text) - 6000 : text) : "");
            free(text);
        }
        if (h >= 0)
            close(h);
        close(c);
    }
    if (pid > 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    close(hub);
    unlink(log);
}
