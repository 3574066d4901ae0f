/*  The warm pool and idle culling of `korch serve`, judged from outside:
 *  each test starts `build/korch serve --port 0 --launcher L` with the flags
 *  under test, runs one scenario of tests/peers/pool_check.py (urllib for
 *  REST, python3-websocket for the channels; it reports one JSON line), then
 *  stops the server with SIGTERM and checks that every kernel it saw - pool
 *  kernels included - is gone: processes for the local launcher, containers
 *  of the server's instance for docker.
 *
 *  server_pool runs with both launchers (docker:server_pool): containers are
 *  where a pool matters, their start costing ~1.4 s here. */
#include "serve_fixture.h"

#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_PIDS 64

static const char *s_launcher(void)
{
    const char *l = getenv("KORCH_TEST_LAUNCHER");
    return l && strcmp(l, "docker") == 0 ? "docker" : "local";
}

/* Judge pool_check's one JSON line; collect kernel pids and the instance. */
static bool s_judge(const char *what, const char *out, int rc, long *pids, int *npids, char *inst, size_t inst_len)
{
    bool ok = true;
    int lines = 0;
    for (const char *p = out ? out : ""; *p;) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        json_t *j = n && p[0] == '{' ? json_loadb(p, n, 0, NULL) : NULL;
        if (j) {
            lines++;
            size_t i;
            json_t *v;
            json_array_foreach(json_object_get(j, "failures"), i, v)
            {
                char msg[1500];
                snprintf(msg, sizeof msg, "%s: %s", what, json_string_value(v) ? json_string_value(v) : "?");
                ok = korch_test_check(false, __FILE__, __LINE__, msg);
            }
            if (!json_is_true(json_object_get(j, "ok")) && ok)
                ok = korch_test_check(false, __FILE__, __LINE__, "not ok (no failure text)");
            json_t *d = json_object_get(j, "details");
            json_array_foreach(json_object_get(d, "kernel_pids"), i, v)
            {
                if (json_is_integer(v) && *npids < MAX_PIDS)
                    pids[(*npids)++] = (long)json_integer_value(v);
            }
            const char *in = json_string_value(json_object_get(d, "instance"));
            if (in)
                snprintf(inst, inst_len, "%s", in);
            char *ds = json_dumps(d, JSON_COMPACT);
            fprintf(stderr, "  %s: %s (%.1f s) %s\n", what, json_is_true(json_object_get(j, "ok")) ? "ok" : "FAILED",
                    json_number_value(json_object_get(j, "seconds")), ds ? ds : "");
            free(ds);
            json_decref(j);
        }
        p += n + (nl ? 1 : 0);
    }
    if (lines != 1)
        ok = korch_test_check(false, __FILE__, __LINE__, "pool_check.py printed no result line");
    if (rc != 0 && ok)
        ok = korch_test_check(false, __FILE__, __LINE__, "pool_check.py failed without saying why");
    return ok;
}

/* Start the server with extra flags, run one scenario, stop, check leftovers. */
static void s_scenario(const char *scenario, const char *const *extra, int peer_timeout_s)
{
    const char *args[32] = {"--launcher", s_launcher(), "--no-access-log"};
    for (int i = 0; extra[i] && i < 28; i++)
        args[3 + i] = extra[i];
    serve_t s;
    if (!serve_start_args(&s, args))
        return;
    char peer[600], spid[32], what[128];
    snprintf(peer, sizeof peer, "%s/tests/peers/pool_check.py", korch_test_root());
    snprintf(spid, sizeof spid, "%d", (int)s.pid);
    snprintf(what, sizeof what, "pool_check %s (%s)", scenario, s_launcher());
    const char *argv[] = {PY, peer, "--url", s.line, "--server-pid", spid, "--launcher", s_launcher(), scenario,
                          NULL};
    char *out = NULL, *err = NULL;
    int rc = korch_test_run(argv, NULL, &out, &err, peer_timeout_s);
    long pids[MAX_PIDS];
    int npids = 0;
    char inst[128] = "";
    bool ok = s_judge(what, out, rc, pids, &npids, inst, sizeof inst);
    if (!ok && err && *err) {
        size_t n = strlen(err);
        fprintf(stderr, "  --- peer stderr (tail) ---\n%s\n", n > 3000 ? err + n - 3000 : err);
    }
    serve_stop(&s);
    /* nothing outlives the server: handed-out kernels and pool kernels */
    if (strcmp(s_launcher(), "local") == 0) {
        CHECK_GE(npids, 1);
        for (int i = 0; i < npids; i++) {
            bool alive = true;
            for (int t = 0; t < 100 && (alive = serve_pid_alive(pids[i])); t++)
                usleep(100000);
            if (!CHECK(!alive)) {
                fprintf(stderr, "  kernel process %ld outlived korch serve\n", pids[i]);
                kill((pid_t)pids[i], SIGKILL);
                ok = false;
            }
        }
    } else if (CHECK(inst[0] != 0)) {
        char label[200];
        snprintf(label, sizeof label, "label=korch.instance=%s", inst);
        const char *dargv[] = {"docker", "ps", "-aq", "--filter", label, NULL};
        char *dout = NULL;
        int drc = korch_test_run(dargv, NULL, &dout, NULL, 60);
        CHECK_EQ(drc, 0);
        if (!CHECK(dout && strspn(dout, " \n") == strlen(dout))) {
            fprintf(stderr, "  containers of instance %s outlived korch serve: %s\n", inst, dout ? dout : "");
            ok = false;
        }
        free(dout);
    }
    if (!ok)
        serve_log_tail(&s);
    unlink(s.log);
    free(out);
    free(err);
}

/* The pool fills, hands out at once, refills, is not listed or counted,
   replaces a killed kernel, and is shut down with the server. */
/* local and docker only: pool_check.py judges leftovers by process (local)
   or by container (docker); a sandbox variant needs a judge by cgroup. */
static void test_server_pool(void);
__attribute__((constructor)) static void test_register_server_pool(void)
{
    korch_test_register("server_pool", __FILE__, test_server_pool, 420);
    korch_test_register_docker("server_pool", __FILE__, test_server_pool, 420);
}
static void test_server_pool(void)
{
    const char *extra[] = {"--pool", "2", "--max-kernels", "3", NULL};
    s_scenario("pool", extra, 380);
}

/* jupyter_server's culling rules: idle culled, connected and busy kept, the
   pool never culled. */
TEST_T(server_cull, 240)
{
    const char *extra[] = {"--cull-idle-timeout", "2", "--cull-interval", "1", "--pool", "1", NULL};
    s_scenario("cull", extra, 200);
}

TEST_T(server_cull_connected_busy, 150)
{
    const char *extra[] = {"--cull-idle-timeout", "2", "--cull-interval", "1", "--cull-connected", "--cull-busy",
                           NULL};
    s_scenario("cull_all", extra, 110);
}

/* Bad pool specs are refused at start, saying why. */
TEST_T(server_pool_bad_spec, 60)
{
    const struct {
        const char *arg, *want;
    } cases[] = {
        {"nosuchkernel=1", "nosuchkernel"},
        {"python3=x", "not NAME=N"},
        {"python3=1000", "out of range"},
        {"-1", "bad --pool"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *argv[] = {korch_test_korch_bin(), "serve", "--port", "0", "--launcher", "local", "--pool",
                              cases[i].arg, NULL};
        char *out = NULL, *err = NULL;
        int rc = korch_test_run(argv, NULL, &out, &err, 30);
        CHECK_NE(rc, 0);
        if (!CHECK_CONTAINS(err ? err : "", cases[i].want))
            fprintf(stderr, "  --pool %s\n", cases[i].arg);
        free(out);
        free(err);
    }
}
