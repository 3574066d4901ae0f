/*  korch's own death with container kernels, through the CLI as a user would
 *  meet it: `korch kernel` killed with -9 while its kernel is busy, then
 *  started again (re-adoption with the variables kept), a dead instance's
 *  container swept by another, nothing left behind. And docker-compose.yml
 *  validated by Debian's docker-compose.
 */
#include "test.h"
#include "../src/launcher/kuid.h"
#include "kernel_fixture.h"

#include "korch/docker.h"
#include "korch/instance.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double s_now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* Start argv in the background, stdout and stderr into files. */
static pid_t s_spawn(const char *const *argv, const char *out_path, const char *err_path)
{
    pid_t pid = fork();
    if (pid == 0) {
        int o = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int e = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int n = open("/dev/null", O_RDONLY);
        if (o < 0 || e < 0 || n < 0)
            _exit(127);
        dup2(n, 0);
        dup2(o, 1);
        dup2(e, 2);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    return pid;
}

/* A whole (small) file as a new string, "" when missing. */
static char *s_slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    char *buf = calloc(1, 1 << 16);
    if (f && buf) {
        size_t n = fread(buf, 1, (1 << 16) - 1, f);
        buf[n] = 0;
    }
    if (f)
        fclose(f);
    return buf;
}

/* Wait until path contains needle; false on timeout or when pid exits first. */
static bool s_wait_text(const char *path, const char *needle, pid_t pid, int timeout_ms)
{
    double end = s_now_ms() + timeout_ms;
    while (s_now_ms() < end) {
        char *t = s_slurp(path);
        bool hit = t && strstr(t, needle);
        free(t);
        if (hit)
            return true;
        if (pid > 0 && waitpid(pid, NULL, WNOHANG) == pid)
            return false;
        usleep(100 * 1000);
    }
    return false;
}

/* Wait for pid to exit: its status (>= 0 exit code, -1 signal or timeout,
   in which case it is killed). */
static int s_wait_exit(pid_t pid, int timeout_ms)
{
    double end = s_now_ms() + timeout_ms;
    int status = 0;
    while (s_now_ms() < end) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid)
            return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        if (r < 0)
            return -1;
        usleep(50 * 1000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return -1;
}

/* Containers labelled with this instance, as korch_launcher_list sees them. */
static json_t *s_list(korch_launcher_t *l, const char *instance)
{
    korch_err_t err = {0};
    json_t *list = korch_launcher_list(l, instance, &err);
    if (!list)
        fprintf(stderr, "  cannot list: %s\n", err.msg);
    return list;
}

static size_t s_count(korch_launcher_t *l, const char *instance)
{
    json_t *list = s_list(l, instance);
    size_t n = list ? json_array_size(list) : 999;
    json_decref(list);
    return n;
}

/* A container labelled as korch labels its kernels' (instance, a kernel
   id, a runtime dir in our base), of korch scope `scope` (NULL: no
   korch.scope label, as an older korch made them): what another machine's
   korch on a shared engine (or an older korch) leaves. Running (sleep)
   when run, else only created. Its id in id ("" on failure). */
static void s_fake(const char *instance, const char *scope, bool run, char *id, size_t len)
{
    char base[PATH_MAX], li[128], lk[96], lr[PATH_MAX + 32], ls[64];
    id[0] = 0;
    if (korch_runtime_base(base, sizeof base, NULL) != KORCH_OK)
        return;
    snprintf(li, sizeof li, "korch.instance=%s", instance);
    snprintf(lk, sizeof lk, "korch.kernel_id=%08x-0000-4000-8000-%012x", (unsigned)getpid(), (unsigned)rand());
    snprintf(lr, sizeof lr, "korch.runtime_dir=%s/f%011x", base, (unsigned)rand());
    snprintf(ls, sizeof ls, "korch.scope=%s", scope ? scope : "");
    const char *argv[] = {"docker", run ? "run" : "create", "--label", li, "--label", lk, "--label",
                          "korch.kernelspec=python3", "--label", lr, "--network", "none", "--label", ls,
                          NULL, NULL, NULL, NULL, NULL};
    int n = 14;
    if (!scope)
        n -= 2; /* no korch.scope label */
    if (run)
        argv[n++] = "-d";
    argv[n++] = "korch-kernel-python3:latest";
    argv[n++] = "sleep";
    argv[n++] = "300";
    argv[n] = NULL;
    char *out = NULL;
    if (korch_test_run(argv, NULL, &out, NULL, 60) == 0 && out) {
        out[strcspn(out, "\n")] = 0;
        snprintf(id, len, "%s", out);
    }
    free(out);
}

/* Is container id still there (any state)? */
static bool s_exists(const char *id)
{
    const char *argv[] = {"docker", "inspect", "--format", "{{.Id}}", id, NULL};
    return id[0] && korch_test_run(argv, NULL, NULL, NULL, 30) == 0;
}

/* Remove container id (if any) and forget it. */
static void s_rm(char *id)
{
    const char *argv[] = {"docker", "rm", "-f", "-v", id, NULL};
    if (id[0])
        korch_test_run(argv, NULL, NULL, NULL, 60);
    id[0] = 0;
}

/* Run `korch exec --existing conn -q -c code`: its stdout, exit status in *st. */
static char *s_exec(const char *conn, const char *code, int *st)
{
    const char *argv[] = {korch_test_korch_bin(), "exec", "--existing", conn, "-q", "-c", code, NULL};
    char *out = NULL, *err = NULL;
    *st = korch_test_run(argv, NULL, &out, &err, 60);
    if (*st != 0)
        fprintf(stderr, "  korch exec -c '%s' exited %d: %s\n", code, *st, err ? err : "");
    free(err);
    return out ? out : strdup("");
}

TEST_T(docker_cli_kill9_readopt_and_sweep, 240)
{
    char dir[] = "/tmp/korch-test-cli.XXXXXX";
    if (!CHECK(mkdtemp(dir)))
        return;
    char inst_t[64], inst_a[64], inst_b[64], conn[PATH_MAX], conn_a[PATH_MAX], conn_b[PATH_MAX];
    char out1[PATH_MAX], err1[PATH_MAX], out2[PATH_MAX], err2[PATH_MAX], bout[PATH_MAX], berr[PATH_MAX];
    char outa[PATH_MAX], erra[PATH_MAX], outb[PATH_MAX], errb[PATH_MAX];
    snprintf(inst_t, sizeof inst_t, "ktest-T-%d", (int)getpid());
    snprintf(inst_a, sizeof inst_a, "ktest-A-%d", (int)getpid());
    snprintf(inst_b, sizeof inst_b, "ktest-B-%d", (int)getpid());
    snprintf(conn, sizeof conn, "%s/T.json", dir);
    snprintf(conn_a, sizeof conn_a, "%s/A.json", dir);
    snprintf(conn_b, sizeof conn_b, "%s/B.json", dir);
    snprintf(out1, sizeof out1, "%s/kernel1.out", dir);
    snprintf(err1, sizeof err1, "%s/kernel1.err", dir);
    snprintf(out2, sizeof out2, "%s/kernel2.out", dir);
    snprintf(err2, sizeof err2, "%s/kernel2.err", dir);
    snprintf(outa, sizeof outa, "%s/kernel-a.out", dir);
    snprintf(erra, sizeof erra, "%s/kernel-a.err", dir);
    snprintf(outb, sizeof outb, "%s/kernel-b.out", dir);
    snprintf(errb, sizeof errb, "%s/kernel-b.err", dir);
    snprintf(bout, sizeof bout, "%s/busy.out", dir);
    snprintf(berr, sizeof berr, "%s/busy.err", dir);
    const char *korch = korch_test_korch_bin();
    korch_err_t err = {0};
    korch_launcher_t *l = korch_launcher_docker_new(fx_loop(), NULL, &err);
    pid_t k1 = -1, k2 = -1, busy = -1;
    json_t *list = NULL;
    char rdir[PATH_MAX] = "", rdir_a[PATH_MAX] = "";
    char f_t[80] = "", f_a[80] = "", old_a[80] = "", want[400];
    int st = 0;
    char *out = NULL, *text = NULL;
    if (!CHECK(l)) {
        fprintf(stderr, "  %s\n", err.msg);
        goto out;
    }

    /* 1. korch kernel T, a variable, then a busy execution. */
    const char *kt[] = {korch, "kernel", "--launcher", "docker", "--instance", inst_t, "--connection-file", conn, NULL};
    k1 = s_spawn(kt, out1, err1);
    if (!CHECK(s_wait_text(err1, "korch: kernel ", k1, 60000))) {
        fprintf(stderr, "  stderr: %s\n", (text = s_slurp(err1)));
        goto out;
    }
    text = s_slurp(err1);
    CHECK_CONTAINS(text, " started (docker launcher, instance 'ktest-T-");
    free(text);
    text = NULL;
    out = s_exec(conn, "x = 42", &st);
    CHECK_EQ(st, 0);
    free(out);
    const char *kb[] = {korch, "exec", "--existing", conn, "-q", "-c",
                        "import time; time.sleep(8); print('slept', x)", NULL};
    busy = s_spawn(kb, bout, berr);
    usleep(1500 * 1000); /* the execution is running in the kernel now */
    list = s_list(l, inst_t);
    if (!CHECK(list && json_array_size(list) == 1))
        goto out;
    snprintf(rdir, sizeof rdir, "%s", json_string_value(json_object_get(json_array_get(list, 0), "runtime_dir")));
    char cid[80];
    snprintf(cid, sizeof cid, "%s", json_string_value(json_object_get(json_array_get(list, 0), "id")));
    json_decref(list);
    list = NULL;

    /* 2. kill -9 korch: the container lives on, still busy. */
    CHECK_EQ(kill(k1, SIGKILL), 0);
    CHECK_EQ(s_wait_exit(k1, 10000), -1);
    k1 = -1;
    list = s_list(l, inst_t);
    if (CHECK(list && json_array_size(list) == 1)) {
        CHECK_STREQ(json_string_value(json_object_get(json_array_get(list, 0), "id")), cid);
        CHECK_STREQ(json_string_value(json_object_get(json_array_get(list, 0), "state")), "running");
    }
    json_decref(list);
    list = NULL;

    /* 3. korch kernel T again: re-adopts, the variable is there. A running
       container labelled T of another korch scope (another machine's
       korch T on this engine) is neither adopted nor removed: a notice. */
    s_fake(inst_t, "rt-00000000000000ff", true, f_t, sizeof f_t);
    CHECK(f_t[0]);
    k2 = s_spawn(kt, out2, err2);
    if (!CHECK(s_wait_text(err2, "korch: kernel ", k2, 60000))) {
        fprintf(stderr, "  stderr: %s\n", (text = s_slurp(err2)));
        goto out;
    }
    text = s_slurp(err2);
    CHECK_CONTAINS(text, "re-adopted: its variables are kept (docker launcher, instance 'ktest-T-");
    snprintf(want, sizeof want, "left 1 container(s) of korch instance '%s' alone: their korch.scope label is not "
             "this runtime dir's", inst_t);
    CHECK_CONTAINS(text, want);
    CHECK(s_exists(f_t));
    free(text);
    text = NULL;
    /* The client that was busy when korch died got its answer. */
    CHECK_EQ(s_wait_exit(busy, 30000), 0);
    busy = -1;
    text = s_slurp(bout);
    CHECK_STREQ(text, "slept 42\n");
    free(text);
    text = NULL;
    out = s_exec(conn, "print(x)", &st);
    CHECK_EQ(st, 0);
    CHECK_STREQ(out, "42\n");
    free(out);
    /* Its kernel uid is claimed again by the korch that re-adopted it: no
       kernel started now can get it (src/launcher/kuid.h). */
    out = s_exec(conn, "import os; print(os.getuid())", &st);
    uid_t kuid = out ? (uid_t)strtoul(out, NULL, 10) : 0;
    if (CHECK(korch_kuid_is_kernel(kuid))) {
        korch_err_t ke = {0};
        korch_kuid_t *claim = korch_kuid_claim(kuid, &ke);
        CHECK(!claim);
        CHECK_CONTAINS(ke.msg, "in use by another kernel");
        korch_kuid_release(&claim);
    }
    free(out);
    out = NULL;
    list = s_list(l, inst_t);
    if (CHECK(list && json_array_size(list) == 2)) /* ours and the other scope's */
        for (size_t i = 0; i < 2; i++)
            if (strcmp(json_string_value(json_object_get(json_array_get(list, i), "id")), f_t) != 0)
                CHECK_STREQ(json_string_value(json_object_get(json_array_get(list, i), "id")), cid); /* the same one */
    json_decref(list);
    list = NULL;

    /* 4. SIGTERM: the kernel shuts down, its container and runtime dir go. */
    CHECK_EQ(kill(k2, SIGTERM), 0);
    CHECK_EQ(s_wait_exit(k2, 30000), 0);
    k2 = -1;
    CHECK_EQ(s_count(l, inst_t), 1); /* the other scope's only */
    CHECK(s_exists(f_t));
    s_rm(f_t);
    CHECK_EQ(s_count(l, inst_t), 0);
    CHECK(rdir[0] && access(rdir, F_OK) != 0);

    /* 5. A dies by -9; B's start removes A's container (A is gone); B's
       SIGTERM leaves nothing. */
    const char *ka[] = {korch, "kernel", "--launcher", "docker", "--instance", inst_a, "--connection-file", conn_a,
                        NULL};
    k1 = s_spawn(ka, outa, erra);
    if (!CHECK(s_wait_text(erra, "korch: kernel ", k1, 60000)))
        goto out;
    list = s_list(l, inst_a);
    if (CHECK(list && json_array_size(list) == 1))
        snprintf(rdir_a, sizeof rdir_a, "%s",
                 json_string_value(json_object_get(json_array_get(list, 0), "runtime_dir")));
    json_decref(list);
    list = NULL;
    CHECK_EQ(kill(k1, SIGKILL), 0);
    s_wait_exit(k1, 10000);
    k1 = -1;
    CHECK_EQ(s_count(l, inst_a), 1);
    /* Labelled A too: one of another korch scope (A is not gone there),
       one of an older korch without the label: B's sweep leaves both. */
    s_fake(inst_a, "rt-00000000000000fe", false, f_a, sizeof f_a);
    s_fake(inst_a, NULL, false, old_a, sizeof old_a);
    CHECK(f_a[0] && old_a[0]);
    CHECK_EQ(s_count(l, inst_a), 3);
    const char *kbb[] = {korch, "kernel", "--launcher", "docker", "--instance", inst_b, "--connection-file", conn_b,
                         NULL};
    k2 = s_spawn(kbb, outb, errb);
    if (!CHECK(s_wait_text(errb, "korch: kernel ", k2, 60000)))
        goto out;
    text = s_slurp(errb);
    snprintf(want, sizeof want, "removed 1 container(s) left by korch instance '%s', which is gone", inst_a);
    CHECK_CONTAINS(text, want);
    snprintf(want, sizeof want, "left 1 container(s) of korch instance '%s' alone: they carry no korch.scope label "
             "(an older korch made them)", inst_a);
    CHECK_CONTAINS(text, want);
    snprintf(want, sizeof want, "docker rm -f -v $(docker ps -aq --filter label=korch.instance=%s)", inst_a);
    CHECK_CONTAINS(text, want);
    free(text);
    text = NULL;
    CHECK(s_exists(f_a));
    CHECK(s_exists(old_a));
    CHECK_EQ(s_count(l, inst_a), 2);
    s_rm(f_a);
    s_rm(old_a);
    CHECK_EQ(s_count(l, inst_a), 0);
    CHECK(rdir_a[0] && access(rdir_a, F_OK) != 0); /* its runtime dir went with it */
    CHECK_EQ(s_count(l, inst_b), 1);
    out = s_exec(conn_b, "print('b works')", &st);
    CHECK_STREQ(out, "b works\n");
    free(out);
    out = NULL;
    CHECK_EQ(kill(k2, SIGTERM), 0);
    CHECK_EQ(s_wait_exit(k2, 30000), 0);
    k2 = -1;
    CHECK_EQ(s_count(l, inst_b), 0);

out:
    if (busy > 0)
        s_wait_exit(busy, 1);
    if (k1 > 0) {
        kill(k1, SIGTERM);
        s_wait_exit(k1, 20000);
    }
    if (k2 > 0) {
        kill(k2, SIGTERM);
        s_wait_exit(k2, 20000);
    }
    free(text);
    json_decref(list);
    s_rm(f_t);
    s_rm(f_a);
    s_rm(old_a);
    if (l) {
        /* Nothing of this test's instances is left, whatever happened above. */
        json_t *all = s_list(l, NULL);
        size_t i, mine = 0;
        json_t *c;
        json_array_foreach(all, i, c) {
            const char *inst = json_string_value(json_object_get(c, "instance"));
            char suffix[32];
            snprintf(suffix, sizeof suffix, "-%d", (int)getpid());
            if (inst && strncmp(inst, "ktest-", 6) == 0 && strlen(inst) > strlen(suffix) &&
                strcmp(inst + strlen(inst) - strlen(suffix), suffix) == 0)
                mine++;
        }
        CHECK(all != NULL);
        CHECK_EQ(mine, 0);
        json_decref(all);
        korch_launcher_remove_all(l, inst_t, NULL);
        korch_launcher_remove_all(l, inst_a, NULL);
        korch_launcher_remove_all(l, inst_b, NULL);
    }
    korch_launcher_destroy(&l);
    const char *rm[] = {"rm", "-rf", dir, NULL};
    korch_test_run(rm, NULL, NULL, NULL, 10);
}

/* docker-compose.yml: Debian's docker-compose (v1) validates it; it names
   the single-host korch service (started, from .env) and the swarm stack's
   serve (not started by docker-compose; tests/test_swarm_stack.c deploys
   it as a stack). */
TEST_T(docker_compose_config_validates, 60)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/docker-compose.yml", korch_test_root());
    /* The file's defaults, not the test runner's KORCH_RUNTIME_DIR. */
    const char *argv[] = {"env", "-u", "KORCH_RUNTIME_DIR", "docker-compose", "-f", path, "config", NULL};
    char *out = NULL, *err = NULL;
    int st = korch_test_run(argv, NULL, &out, &err, 30);
    if (!CHECK_EQ(st, 0))
        fprintf(stderr, "  docker-compose config: %s\n  (install it with: apt-get install docker-compose)\n",
                err ? err : "");
    const char *sargv[] = {"env", "-u", "KORCH_RUNTIME_DIR", "docker-compose", "-f", path, "config", "--services", NULL};
    char *services = NULL;
    CHECK_EQ(korch_test_run(sargv, NULL, &services, NULL, 30), 0);
    CHECK_CONTAINS(services, "korch\n");
    CHECK_CONTAINS(services, "serve\n");
    if (out) {
        /* What matters for the kernel containers korch starts from inside. */
        CHECK_CONTAINS(out, "/var/run/docker.sock:/var/run/docker.sock");
        CHECK_CONTAINS(out, "/run/korch:/run/korch");
        CHECK_CONTAINS(out, "KORCH_RUNTIME_DIR: /run/korch");
        CHECK_CONTAINS(out, "- --instance\n");
        CHECK_CONTAINS(out, "- compose\n");
        CHECK_CONTAINS(out, "dockerfile: scripts/Dockerfile.korch");
        /* .env: docker-compose runs korch, not the stack's serve */
        CHECK_CONTAINS(out, "  korch:\n    build:");
        CHECK_CONTAINS(out, "deploy:\n      replicas: 1\n");
        CHECK_CONTAINS(out, "      replicas: 0\n");
        CHECK_CONTAINS(out, "- swarm\n");
        CHECK_CONTAINS(out, "mode: host");
        CHECK_CONTAINS(out, "version: '3.8'");
    }
    free(out);
    free(err);
    free(services);
}
