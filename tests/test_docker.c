/*  The Docker API client and launcher against the real dockerd and the kernel
 *  image (scripts/dockerd.sh, scripts/build-image.sh). No kernel client yet:
 *  the kernel is judged by the ipc socket files it creates.
 *
 *  KORCH_TEST_NO_DOCKER=1 makes them fail at once with a clear message on a
 *  machine without a Docker engine (a test that cannot run has not passed).
 */
#include "test.h"
#include "kernel_fixture.h"

#include "korch/conn.h"
#include "korch/docker.h"
#include "korch/docker_api.h"
#include "korch/instance.h"
#include "korch/kernelspec.h"
#include "korch/launcher.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define IMAGE "korch-kernel-python3:latest"

static bool s_skip(void)
{
    const char *s = getenv("KORCH_TEST_NO_DOCKER");
    if (s && *s && strcmp(s, "0") != 0) {
        /* A test that cannot run has not passed: say so and fail. */
        CHECK(!"KORCH_TEST_NO_DOCKER is set, but this test needs dockerd");
        return true;
    }
    return false;
}

static double s_now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* A fresh 0700 runtime dir and an ipc conn whose prefix lies in it. */
static bool s_runtime(char *dir, size_t len, korch_conn_t *conn)
{
    snprintf(dir, len, "/tmp/korch-test-docker.XXXXXX");
    if (!mkdtemp(dir))
        return false;
    char prefix[PATH_MAX + 16];
    snprintf(prefix, sizeof prefix, "%s/kernel", dir);
    korch_err_t err = {0};
    return korch_conn_init_ipc(conn, prefix, &err) == KORCH_OK;
}

static void s_rmrf(const char *dir)
{
    const char *argv[] = {"rm", "-rf", dir, NULL};
    korch_test_run(argv, NULL, NULL, NULL, 10);
}

/* All five sockets of conn exist, within timeout_ms. */
static bool s_wait_sockets(const korch_conn_t *conn, int timeout_ms)
{
    double end = s_now_ms() + timeout_ms;
    while (s_now_ms() < end) {
        int n = 0;
        for (int i = 0; i < KORCH_CH__COUNT; i++) {
            char path[PATH_MAX + 16];
            struct stat st;
            snprintf(path, sizeof path, "%s-%d", conn->ip, conn->port[i]);
            if (stat(path, &st) == 0 && S_ISSOCK(st.st_mode))
                n++;
        }
        if (n == KORCH_CH__COUNT)
            return true;
        usleep(20 * 1000);
    }
    return false;
}

/* Inspect a container; NULL when it does not exist. */
static json_t *s_inspect(const char *id, long *status)
{
    korch_err_t err = {0};
    korch_docker_t *d = korch_docker_new(NULL, NULL, &err);
    if (!d)
        return NULL;
    char path[160];
    snprintf(path, sizeof path, "/containers/%s/json", id);
    korch_docker_reply_t r;
    json_t *j = NULL;
    *status = 0;
    if (korch_docker_request(d, "GET", path, NULL, &r, &err) == KORCH_OK) {
        *status = r.status;
        if (r.status == 200)
            j = json_incref(r.json);
        korch_docker_reply_clear(&r);
    }
    korch_docker_destroy(&d);
    return j;
}

/* Run the loop until the end of p is seen; why it ended into why. */
static bool s_wait_dead(korch_proc_t *p, char *why, size_t whylen, int timeout_ms)
{
    bool dead = korch_proc_wait_exit(p, timeout_ms);
    snprintf(why, whylen, "%s", korch_proc_exit_why(p));
    return dead;
}

/* A kernelspec whose argv is a python one-liner, for signal and OOM tests. */
static korch_kernelspec_t *s_script_spec(const char *code)
{
    korch_kernelspec_t *s = calloc(1, sizeof *s);
    s->name = strdup("python3");
    s->dir = strdup("/nonexistent");
    s->argv = calloc(4, sizeof *s->argv);
    s->argv[0] = strdup("/usr/bin/python3");
    s->argv[1] = strdup("-c");
    s->argv[2] = strdup(code);
    s->env = json_object();
    s->json = json_object();
    return s;
}

/* A script kernel in a container of a docker launcher of opts (NULL: the
   defaults), started: the launcher, its runtime dir and conn, the proc. */
typedef struct {
    korch_launcher_t *l;
    korch_kernelspec_t *spec;
    korch_proc_t *p;
    korch_conn_t conn;
    char dir[PATH_MAX];
    korch_err_t err;
} s_script_t;

static bool s_script_start(s_script_t *s, const korch_docker_opts_t *o, const char *code)
{
    memset(s, 0, sizeof *s);
    s->l = korch_launcher_docker_new(fx_loop(), o, &s->err);
    if (!CHECK(s->l))
        return false;
    CHECK(s_runtime(s->dir, sizeof s->dir, &s->conn));
    s->spec = s_script_spec(code);
    korch_launch_t req = {.spec = s->spec, .conn = &s->conn, .runtime_dir = s->dir};
    if (CHECK_EQ(korch_launcher_start_wait(s->l, &req, &s->p, &s->err), KORCH_OK))
        return true;
    fprintf(stderr, "  %s\n", s->err.msg);
    return false;
}

static void s_script_end(s_script_t *s)
{
    korch_proc_destroy(&s->p);
    korch_kernelspec_destroy(&s->spec);
    korch_launcher_destroy(&s->l);
    if (s->dir[0])
        s_rmrf(s->dir);
}

TEST(docker_api_ping_version)
{
    if (s_skip())
        return;
    korch_err_t err = {0};
    korch_docker_t *d = korch_docker_new(NULL, NULL, &err);
    if (!CHECK(d))
        return;
    CHECK_EQ(korch_docker_ping(d, &err), KORCH_OK);
    CHECK_STREQ(err.msg, "");
    json_t *v = korch_docker_version(d, &err);
    CHECK(v);
    CHECK(json_is_string(json_object_get(v, "ApiVersion")));
    CHECK(json_is_string(json_object_get(v, "Version")));
    json_decref(v);
    korch_docker_destroy(&d);
    CHECK(d == NULL);
}

TEST(docker_api_missing_socket)
{
    korch_err_t err = {0};
    korch_docker_t *d = korch_docker_new(NULL, "unix:///nonexistent/korch/docker.sock", &err);
    if (!CHECK(d))
        return;
    CHECK_EQ(korch_docker_ping(d, &err), KORCH_E_DOCKER);
    CHECK_STREQ(err.msg,
                "cannot reach docker at '/nonexistent/korch/docker.sock': no such socket (is dockerd running?)");
    korch_docker_destroy(&d);
}

TEST(docker_api_connection_refused)
{
    char dir[] = "/tmp/korch-test-sock.XXXXXX", path[PATH_MAX], host[PATH_MAX + 8];
    if (!CHECK(mkdtemp(dir)))
        return;
    snprintf(path, sizeof path, "%s/docker.sock", dir);
    snprintf(host, sizeof host, "unix://%s", path);
    /* A socket file nobody listens on: what a crashed dockerd leaves. */
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path, path, strlen(path) + 1);
    CHECK_EQ(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    korch_err_t err = {0};
    korch_docker_t *d = korch_docker_new(NULL, host, &err);
    if (CHECK(d)) {
        CHECK_EQ(korch_docker_ping(d, &err), KORCH_E_DOCKER);
        char want[PATH_MAX + 100];
        snprintf(want, sizeof want, "cannot reach docker at '%s': connection refused (is dockerd running?)", path);
        CHECK_STREQ(err.msg, want);
    }
    korch_docker_destroy(&d);
    close(fd);
    unlink(path);
    rmdir(dir);
}

TEST(docker_api_bad_host)
{
    korch_err_t err = {0};
    CHECK(korch_docker_new(NULL, "ssh://user@host", &err) == NULL);
    CHECK_EQ(err.rc, KORCH_E_INVALID);
    CHECK_CONTAINS(err.msg, "'ssh://user@host' is not supported");
}

TEST(docker_api_image_missing)
{
    if (s_skip())
        return;
    korch_err_t err = {0};
    korch_docker_t *d = korch_docker_new(NULL, NULL, &err);
    if (!CHECK(d))
        return;
    CHECK(korch_docker_image_inspect(d, "korch-no-such-image:nope", &err) == NULL);
    CHECK_EQ(err.rc, KORCH_E_NOTFOUND);
    CHECK_STREQ(err.msg, "image 'korch-no-such-image:nope' not found (build it with: make image)");
    korch_err_clear(&err);
    json_t *img = korch_docker_image_inspect(d, IMAGE, &err);
    if (!CHECK(img))
        fprintf(stderr, "  %s\n", err.msg);
    json_decref(img);
    korch_docker_destroy(&d);
}

TEST(docker_launcher_unreachable)
{
    korch_docker_opts_t o;
    korch_docker_opts_init(&o);
    o.host = "unix:///nonexistent/korch/docker.sock";
    korch_err_t err = {0};
    CHECK(korch_launcher_docker_new(fx_loop(), &o, &err) == NULL);
    CHECK_EQ(err.rc, KORCH_E_DOCKER);
    CHECK_CONTAINS(err.msg, "cannot reach docker at '/nonexistent/korch/docker.sock'");
}

TEST(docker_launcher_image_missing)
{
    if (s_skip())
        return;
    korch_docker_opts_t o;
    korch_docker_opts_init(&o);
    o.image = "korch-no-such-image:nope";
    korch_err_t err = {0};
    korch_launcher_t *l = korch_launcher_docker_new(fx_loop(), &o, &err);
    if (!CHECK(l))
        return;
    char dir[PATH_MAX];
    korch_conn_t conn;
    CHECK(s_runtime(dir, sizeof dir, &conn));
    korch_kernelspec_t *spec = korch_kernelspec_load("kernelspec/python3", "python3", &err);
    CHECK(spec);
    korch_launch_t req = {.spec = spec, .conn = &conn, .runtime_dir = dir, .kernel_id = "test-missing-image"};
    korch_proc_t *p = NULL;
    CHECK_EQ(korch_launcher_start_wait(l, &req, &p, &err), KORCH_E_NOTFOUND);
    CHECK_STREQ(err.msg, "image 'korch-no-such-image:nope' not found (build it with: make image)");
    CHECK(p == NULL);
    /* the failed start's tmpfs goes on the launcher's worker */
    CHECK(korch_launcher_settle(l, 10000));
    struct stat st;
    CHECK_EQ(stat(dir, &st), 0);
    CHECK_EQ(st.st_uid, geteuid()); /* given back */
    korch_kernelspec_destroy(&spec);
    korch_launcher_destroy(&l);
    s_rmrf(dir);
}

TEST_T(docker_launcher_kernel, 90)
{
    if (s_skip())
        return;
    korch_err_t err = {0};
    korch_docker_opts_t o;
    korch_docker_opts_init(&o);
    char instance[64];
    snprintf(instance, sizeof instance, "korch-test-%d", (int)getpid());
    o.instance = instance;
    korch_launcher_t *l = korch_launcher_docker_new(fx_loop(), &o, &err);
    if (!CHECK(l)) {
        fprintf(stderr, "  %s\n", err.msg);
        return;
    }
    CHECK_STREQ(korch_launcher_transport(l), "ipc");
    char dir[PATH_MAX];
    korch_conn_t conn;
    CHECK(s_runtime(dir, sizeof dir, &conn));
    korch_kernelspec_t *spec = korch_kernelspec_load("kernelspec/python3", "python3", &err);
    if (!CHECK(spec))
        goto out;
    char kid[64];
    snprintf(kid, sizeof kid, "test-%d", (int)getpid());
    const char *env[] = {"KORCH_TEST=1", NULL};
    korch_launch_t req = {.spec = spec, .conn = &conn, .runtime_dir = dir, .env = env, .kernel_id = kid};
    korch_proc_t *p = NULL;
    double t0 = s_now_ms();
    if (!CHECK_EQ(korch_launcher_start_wait(l, &req, &p, &err), KORCH_OK)) {
        fprintf(stderr, "  %s\n", err.msg);
        goto out;
    }
    double t_started = s_now_ms();
    bool up = s_wait_sockets(&conn, 15000);
    double t_up = s_now_ms();
    if (!CHECK(up))
        fprintf(stderr, "  kernel log:\n%s\n", korch_proc_log_tail(p));
    printf("  container start %.0f ms, sockets after %.0f ms\n", t_started - t0, t_up - t0);
    char why[256] = "";
    CHECK(!s_wait_dead(p, why, sizeof why, 200)); /* no end while the kernel runs */

    /* The connection file the kernel read: our key, the in-container path. */
    char cf[PATH_MAX + 16];
    snprintf(cf, sizeof cf, "%s/kernel.json", dir);
    korch_conn_t inside;
    if (CHECK_EQ(korch_conn_load(&inside, cf, &err), KORCH_OK)) {
        CHECK_STREQ(inside.ip, "/run/korch/kernel");
        CHECK_STREQ(inside.key, conn.key);
        CHECK_STREQ(inside.transport, "ipc");
    }

    /* The hardening, as the engine recorded it. */
    const char *id = korch_proc_backend_id(p);
    CHECK(id && strlen(id) == 64);
    long status = 0;
    json_t *c = id ? s_inspect(id, &status) : NULL;
    if (CHECK(c)) {
        json_t *h = json_object_get(c, "HostConfig"), *cfg = json_object_get(c, "Config");
        CHECK_STREQ(json_string_value(json_object_get(h, "NetworkMode")), "none");
        CHECK(json_is_true(json_object_get(h, "ReadonlyRootfs")));
        CHECK(json_is_true(json_object_get(h, "Init")));
        CHECK_EQ(json_integer_value(json_object_get(h, "Memory")), 1LL << 30);
        CHECK_EQ(json_integer_value(json_object_get(h, "MemorySwap")), 1LL << 30);
        CHECK_EQ(json_integer_value(json_object_get(h, "NanoCpus")), 1000000000LL);
        CHECK_EQ(json_integer_value(json_object_get(h, "PidsLimit")), 256);
        CHECK_STREQ(json_string_value(json_array_get(json_object_get(h, "CapDrop"), 0)), "ALL");
        CHECK_STREQ(json_string_value(json_array_get(json_object_get(h, "SecurityOpt"), 0)), "no-new-privileges");
        json_t *ul = json_array_get(json_object_get(h, "Ulimits"), 0);
        CHECK_STREQ(json_string_value(json_object_get(ul, "Name")), "nofile");
        CHECK_EQ(json_integer_value(json_object_get(ul, "Hard")), 4096);
        CHECK_CONTAINS(json_string_value(json_object_get(json_object_get(h, "Tmpfs"), "/tmp")), "size=268435456");
        /* The work dir: a tmpfs volume the archive endpoints can reach. */
        json_t *wm = NULL, *m;
        size_t mi;
        json_array_foreach(json_object_get(h, "Mounts"), mi, m) {
            if (strcmp(json_string_value(json_object_get(m, "Target")), "/home/korch/work") == 0)
                wm = m;
        }
        json_t *vo = json_object_get(json_object_get(json_object_get(wm, "VolumeOptions"), "DriverConfig"), "Options");
        CHECK_STREQ(json_string_value(json_object_get(wm, "Type")), "volume");
        CHECK_STREQ(json_string_value(json_object_get(vo, "type")), "tmpfs");
        CHECK_CONTAINS(json_string_value(json_object_get(vo, "o")), "size=536870912");
        CHECK_CONTAINS(json_string_value(json_object_get(vo, "o")), "uid=");
        unsigned cu = 0, cg = 0;
        if (geteuid() == 0) { /* a uid no account has, set at create time (src/launcher/kuid.h) */
            CHECK_EQ(sscanf(json_string_value(json_object_get(cfg, "User")), "%u:%u", &cu, &cg), 2);
            CHECK(cu >= 2000000000u && cu == cg);
        }
        json_t *labels = json_object_get(cfg, "Labels");
        CHECK_STREQ(json_string_value(json_object_get(labels, "korch.kernel_id")), kid);
        CHECK_STREQ(json_string_value(json_object_get(labels, "korch.instance")), instance);
        char scope[KORCH_SCOPE_LEN] = "";
        CHECK_EQ(korch_runtime_scope(NULL, scope, sizeof scope, NULL), KORCH_OK);
        CHECK_STREQ(json_string_value(json_object_get(labels, "korch.scope")), scope); /* this runtime dir's */
        CHECK_STREQ(json_string_value(json_array_get(json_object_get(cfg, "Cmd"), 0)), "python3");
        CHECK_STREQ(json_string_value(json_array_get(json_object_get(cfg, "Cmd"), 4)), "/run/korch/kernel.json");
        CHECK_STREQ(json_string_value(json_object_get(cfg, "WorkingDir")), "/home/korch/work");
        bool has_env = false;
        size_t i;
        json_t *e;
        json_array_foreach(json_object_get(cfg, "Env"), i, e) has_env |= strcmp(json_string_value(e), "KORCH_TEST=1") == 0;
        CHECK(has_env);
        json_decref(c);
    }

    /* Listed under our instance. */
    json_t *list = korch_launcher_list(l, instance, &err);
    if (CHECK(list) && CHECK_EQ(json_array_size(list), 1)) {
        CHECK_STREQ(json_string_value(json_object_get(json_array_get(list, 0), "kernel_id")), kid);
        CHECK_STREQ(json_string_value(json_object_get(json_array_get(list, 0), "state")), "running");
    }
    json_decref(list);

    /* An idle ipykernel ignores SIGINT: delivered, and the kernel lives on. */
    CHECK_EQ(korch_proc_signal_wait(p, SIGINT, &err), KORCH_OK);
    CHECK(!s_wait_dead(p, why, sizeof why, 300));

    char idcopy[80];
    snprintf(idcopy, sizeof idcopy, "%s", id ? id : "none");
    korch_proc_destroy(&p);
    CHECK(p == NULL);
    /* removed in the background, on the loop */
    for (int64_t end = korch_now_ms() + 10000; korch_now_ms() < end;) {
        json_decref(s_inspect(idcopy, &status));
        if (status == 404)
            break;
        korch_loop_run(fx_loop(), NULL, NULL, 50);
    }
    c = s_inspect(idcopy, &status);
    CHECK(c == NULL);
    CHECK_EQ(status, 404);
    json_decref(c);
    /* the tmpfs is unmounted on the launcher's worker: done once settled */
    CHECK(korch_launcher_settle(l, 10000));
    struct stat st;
    CHECK_EQ(stat(dir, &st), 0);
    CHECK_EQ(st.st_uid, geteuid());
    CHECK_EQ(st.st_mode & 0777, 0700);
    list = korch_launcher_list(l, instance, &err);
    CHECK(list && json_array_size(list) == 0);
    json_decref(list);
out:
    korch_kernelspec_destroy(&spec);
    korch_launcher_destroy(&l);
    CHECK(l == NULL);
    s_rmrf(dir);
}

/* SIGINT through docker-init reaches the program, its output comes back
   through log_tail, exit_fd fires and the exit status is described. */
TEST_T(docker_launcher_signal_and_exit, 60)
{
    if (s_skip())
        return;
    s_script_t k;
    if (!s_script_start(&k, NULL,
                        "import signal, sys, time, os\n"
                        "def h(*a):\n"
                        "    print('got SIGINT in pid', os.getpid(), flush=True); sys.exit(3)\n"
                        "signal.signal(signal.SIGINT, h)\n"
                        "open('/run/korch/kernel-1', 'w').close()\n"
                        "print('ready', file=sys.stderr, flush=True)\n"
                        "time.sleep(60)\n"))
        goto out;
    char marker[PATH_MAX + 8];
    snprintf(marker, sizeof marker, "%s-1", k.conn.ip);
    double end = s_now_ms() + 10000;
    while (access(marker, F_OK) != 0 && s_now_ms() < end)
        usleep(20 * 1000);
    CHECK_EQ(access(marker, F_OK), 0);
    /* the engine's log pipeline is asynchronous: the line may follow the file */
    end = s_now_ms() + 5000;
    while (!strstr(korch_proc_log_tail(k.p), "ready") && s_now_ms() < end)
        korch_loop_run(fx_loop(), NULL, NULL, 50); /* each look asks again in the background */
    CHECK_CONTAINS(korch_proc_log_tail(k.p), "ready");
    CHECK_EQ(korch_proc_signal_wait(k.p, SIGINT, &k.err), KORCH_OK);
    char why[256] = "";
    CHECK(s_wait_dead(k.p, why, sizeof why, 10000));
    CHECK_STREQ(why, "exited 3");
    const char *tail = korch_proc_log_tail(k.p);
    CHECK_CONTAINS(tail, "ready\n");
    CHECK_CONTAINS(tail, "got SIGINT in pid");
    CHECK_EQ(korch_proc_signal_wait(k.p, SIGINT, &k.err), KORCH_E_DIED);
out:
    s_script_end(&k);
}

TEST_T(docker_launcher_oom, 60)
{
    if (s_skip())
        return;
    korch_docker_opts_t o;
    korch_docker_opts_init(&o);
    o.memory = 64LL << 20;
    s_script_t k;
    if (s_script_start(&k, &o, "b = b'x' * (512 << 20)\n")) {
        char why[256] = "";
        CHECK(s_wait_dead(k.p, why, sizeof why, 20000));
        CHECK_STREQ(why, "out of memory (limit 64 MiB)");
        CHECK_EQ(korch_proc_kill_wait(k.p, &k.err), KORCH_OK); /* already dead: a no-op */
    }
    s_script_end(&k);
}

TEST_T(docker_launcher_kill, 60)
{
    if (s_skip())
        return;
    s_script_t k;
    if (s_script_start(&k, NULL, "import time; time.sleep(60)\n")) {
        char why[256] = "";
        CHECK(!s_wait_dead(k.p, why, sizeof why, 100));
        double t0 = s_now_ms();
        CHECK_EQ(korch_proc_kill_wait(k.p, &k.err), KORCH_OK);
        printf("  kill took %.0f ms\n", s_now_ms() - t0);
        CHECK(korch_proc_exited(k.p));
        CHECK_STREQ(korch_proc_exit_why(k.p), "killed by signal 9 (Killed)");
    }
    s_script_end(&k);
}

/* How many mounts sit on dir (its mount point field in mountinfo). */
static int s_mounts_on(const char *dir)
{
    FILE *f = fopen("/proc/self/mountinfo", "r");
    char *line = NULL, needle[PATH_MAX + 4];
    size_t cap = 0;
    int n = 0;
    snprintf(needle, sizeof needle, " %s ", dir);
    while (f && getline(&line, &cap, f) > 0)
        n += strstr(line, needle) != NULL;
    free(line);
    if (f)
        fclose(f);
    return n;
}

/* A restart destroys the proc and starts again on the same runtime dir at
   once: the old tmpfs's unmount (on the launcher's worker) comes before
   the new mount, so the new kernel has exactly one tmpfs there, its own;
   a removal asked right after a destroy comes after the unmount: nothing
   is left mounted or on disk. */
TEST_T(docker_launcher_restart_waits_for_the_unmount, 90)
{
    if (s_skip())
        return;
    korch_err_t err = {0};
    korch_docker_opts_t o;
    korch_docker_opts_init(&o);
    korch_launcher_t *l = korch_launcher_docker_new(fx_loop(), &o, &err);
    if (!CHECK(l))
        return;
    char dir[PATH_MAX], kid[64];
    korch_conn_t conn;
    CHECK(s_runtime(dir, sizeof dir, &conn));
    snprintf(kid, sizeof kid, "test-unmount-%d", (int)getpid());
    korch_kernelspec_t *spec = korch_kernelspec_load("kernelspec/python3", "python3", &err);
    korch_launch_t req = {.spec = spec, .conn = &conn, .runtime_dir = dir, .kernel_id = kid};
    korch_proc_t *p = NULL;
    bool root = geteuid() == 0;
    for (int round = 0; spec && round < 3; round++) {
        if (!CHECK_EQ(korch_launcher_start_wait(l, &req, &p, &err), KORCH_OK)) {
            fprintf(stderr, "  round %d: %s\n", round, err.msg);
            break;
        }
        if (root)
            CHECK_EQ(s_mounts_on(dir), 1);
        if (!CHECK(s_wait_sockets(&conn, 15000)))
            fprintf(stderr, "  round %d: kernel log:\n%s\n", round, korch_proc_log_tail(p));
        korch_proc_destroy(&p); /* and at once the next start, as kernel.c's restart does */
    }
    korch_launcher_remove_dir(l, dir);
    CHECK(korch_launcher_settle(l, 15000));
    CHECK_EQ(s_mounts_on(dir), 0);
    CHECK_EQ(access(dir, F_OK), -1);
    korch_kernelspec_destroy(&spec);
    korch_launcher_destroy(&l);
    s_rmrf(dir);
}

/* opts.workdir: a host directory is the kernel's cwd, files go both ways. */
TEST_T(docker_launcher_workdir, 60)
{
    if (s_skip())
        return;
    char work[] = "/tmp/korch-test-work.XXXXXX";
    if (!CHECK(mkdtemp(work)))
        return;
    /* a user's own dir is bind-mounted as it is (not given to the kernel's
       uid, which no account has): this one lets anyone in */
    CHECK_EQ(chmod(work, 0777), 0);
    char in[PATH_MAX + 16], outp[PATH_MAX + 16];
    snprintf(in, sizeof in, "%s/in.txt", work);
    snprintf(outp, sizeof outp, "%s/out.txt", work);
    FILE *f = fopen(in, "w");
    if (CHECK(f)) {
        fputs("hello", f);
        fclose(f);
    }
    korch_docker_opts_t o;
    korch_docker_opts_init(&o);
    o.workdir = work;
    s_script_t k;
    if (!s_script_start(&k, &o,
                        "import os\n"
                        "data = open('in.txt').read()\n"
                        "open('out.txt', 'w').write(data + ' from ' + os.getcwd())\n"))
        goto out;
    char why[256] = "";
    CHECK(s_wait_dead(k.p, why, sizeof why, 15000));
    if (!CHECK_STREQ(why, "exited 0"))
        fprintf(stderr, "  log: %s\n", korch_proc_log_tail(k.p));
    char buf[256] = "";
    f = fopen(outp, "r");
    if (CHECK(f)) {
        if (!fgets(buf, sizeof buf, f))
            buf[0] = 0;
        fclose(f);
    }
    CHECK_STREQ(buf, "hello from /home/korch/work");
out:
    s_script_end(&k);
    s_rmrf(work);
}

/* The asynchronous client: requests run on the loop, concurrently, done
   once and never from inside the call; a held POST /wait is an ordinary
   request with no timeout, and cancelling it calls nothing. */
typedef struct {
    int done;
    bool in_call, early;
    long status[8];
    korch_rc_t rc;
} s_async_t;

static void s_on_async(korch_rc_t rc, const korch_err_t *err, korch_docker_reply_t *reply, void *arg)
{
    s_async_t *a = arg;
    a->early |= a->in_call;
    if (a->done < 8)
        a->status[a->done] = reply->status;
    a->rc = rc ? rc : a->rc;
    a->done++;
}

static bool s_async_n(void *arg) { return ((s_async_t *)arg)->done >= 4; }

TEST(docker_api_async_requests_on_the_loop)
{
    if (s_skip())
        return;
    korch_err_t err = {0};
    korch_loop_t *loop = korch_loop_new();
    korch_docker_t *d = korch_docker_new(loop, NULL, &err);
    if (!CHECK(d))
        return;
    s_async_t a = {.in_call = true};
    korch_op_t *ops[4];
    for (int i = 0; i < 4; i++)
        ops[i] = korch_docker_request_async(d, "GET", i % 2 ? "/version" : "/_ping", NULL, NULL, s_on_async, &a, &err);
    a.in_call = false;
    for (int i = 0; i < 4; i++)
        CHECK(ops[i]);
    CHECK_EQ(a.done, 0);
    CHECK_EQ(korch_docker_pending(d), 4);
    CHECK(korch_loop_run(loop, s_async_n, &a, 10000));
    CHECK(!a.early);
    CHECK_EQ(a.rc, KORCH_OK);
    for (int i = 0; i < 4; i++)
        CHECK_EQ(a.status[i], 200);
    CHECK_EQ(korch_docker_pending(d), 0);

    /* A wait on a container that never stops: held without a timeout, the
       loop stays free; cancelled, its done is never called. */
    s_async_t w = {0};
    korch_docker_async_opts_t forever = {.timeout_ms = 0};
    char path[200];
    snprintf(path, sizeof path, "/containers/korch-test-no-such-%d/wait", (int)getpid());
    korch_op_t *wait = korch_docker_request_async(d, "POST", path, NULL, &forever, s_on_async, &w, &err);
    CHECK(wait);
    korch_loop_run(loop, s_async_n, &w, 300); /* 404 at once: done once */
    CHECK_EQ(w.done, 1);
    CHECK_EQ(w.status[0], 404);
    s_async_t c = {0};
    korch_op_t *slow = korch_docker_request_async(d, "GET", "/version", NULL, NULL, s_on_async, &c, &err);
    korch_op_cancel(&slow);
    CHECK(slow == NULL);
    korch_loop_run(loop, NULL, NULL, 200);
    CHECK_EQ(c.done, 0);
    /* raw bodies are copied: the caller's buffer may go at once */
    char *junk = strdup("not a tar");
    s_async_t r = {0};
    snprintf(path, sizeof path, "/containers/korch-test-no-such-%d/archive?path=/", (int)getpid());
    CHECK(korch_docker_request_raw_async(d, "PUT", path, "application/x-tar", junk, strlen(junk), NULL, s_on_async,
                                         &r, &err));
    free(junk);
    korch_loop_run(loop, s_async_n, &r, 300);
    CHECK_EQ(r.done, 1);
    CHECK_EQ(r.status[0], 404);
    /* a client without a loop refuses asynchronous requests */
    korch_docker_t *sync = korch_docker_new(NULL, NULL, &err);
    korch_err_clear(&err);
    CHECK(korch_docker_request_async(sync, "GET", "/_ping", NULL, NULL, s_on_async, &r, &err) == NULL);
    CHECK_EQ(err.rc, KORCH_E_STATE);
    korch_docker_destroy(&sync);
    korch_docker_destroy(&d);
    korch_loop_destroy(&loop);
}
