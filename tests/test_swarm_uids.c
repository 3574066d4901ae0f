/*  Swarm kernels run as kernel uids (src/launcher/kuid.h), not as uid 1000:
 *  the test swarm's nodes are engines on this machine, so a kernel's
 *  process is a process of this host, and uid 1000 here is an account
 *  (as on most machines: the first person's). That account, and the other
 *  kernel's uid, try what the issue found (#22): the HMAC key through
 *  /proc/PID/root, planting a file, signals, the environment. A kernel
 *  re-adopted by the next `korch kernel --instance` has its uid claimed
 *  again, so no kernel started meanwhile shares it.
 *
 *  Uses the cluster of scripts/swarm-up.sh (kept for the next swarm test of
 *  a run, as swarm_fixture.h says) and, to reach the kernels' overlay, an
 *  attachable container on node 1 whose network namespace the test enters,
 *  as swarm_launcher does. */
#include "swarm_fixture.h"

#include "korch/fsutil.h"
#include "korch/kernel.h"
#include "korch/loop.h"
#include "korch/swarm.h"
#include "../src/launcher/kuid.h"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define SU_NET "korch-uidtest-kernels"
#define SU_ANCHOR "korch-uidtest-anchor"

/* `korch kernel --launcher swarm --instance inst` in the background, its
   stderr in log; its pid once it says "started" or "re-adopted" (the word
   into how), or -1. */
static pid_t su_korch_kernel(const char *image, const char *inst, const char *conn, const char *log, char *how,
                             size_t hlen)
{
    unlink(log);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int nul = open("/dev/null", O_RDWR);
        if (fd >= 0)
            dup2(fd, 2);
        if (nul >= 0) {
            dup2(nul, 0);
            dup2(nul, 1);
        }
        execl(korch_test_korch_bin(), "korch", "kernel", "--launcher", "swarm", "--image", image, "--instance", inst,
              "--connection-file", conn, (char *)NULL);
        _exit(127);
    }
    double end = s_mono_ms() + 120000;
    while (pid > 0 && s_mono_ms() < end) {
        char *text = korch_read_file(log, 1 << 20, NULL, NULL);
        const char *hit = text ? strstr(text, "re-adopted") : NULL;
        if (!hit && text)
            hit = strstr(text, " started (");
        if (hit) {
            snprintf(how, hlen, "%s", strstr(hit, "re-adopted") == hit ? "re-adopted" : "started");
            free(text);
            return pid;
        }
        free(text);
        if (waitpid(pid, NULL, WNOHANG) == pid)
            break;
        usleep(100 * 1000);
    }
    char *text = korch_read_file(log, 1 << 20, NULL, NULL);
    fprintf(stderr, "korch kernel did not start:\n%s\n", text ? text : "");
    free(text);
    if (pid > 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    return -1;
}

/* The "uid:gid" of instance inst's one service, as a uid (0 if none). */
static uid_t su_service_uid(korch_docker_t *d, const char *inst)
{
    char label[160];
    snprintf(label, sizeof label, "korch.instance=%s", inst);
    json_t *svcs = s_list(d, "services", "label", label);
    const char *user = json_string_value(json_object_get(
        json_object_get(json_object_get(json_object_get(json_array_get(svcs, 0), "Spec"), "TaskTemplate"),
                        "ContainerSpec"),
        "User"));
    uid_t uid = 0;
    unsigned u = 0, g = 0;
    if (json_array_size(svcs) == 1 && user && sscanf(user, "%u:%u", &u, &g) == 2 && u == g)
        uid = (uid_t)u;
    else
        fprintf(stderr, "instance %s: %zu service(s), user '%s'\n", inst, json_array_size(svcs), user ? user : "");
    json_decref(svcs);
    return uid;
}

/* The host pid of the ipykernel running as uid (on a node of this host),
   waiting up to 10 s for it; 0 if none. */
static pid_t su_kernel_pid(uid_t uid)
{
    double end = s_mono_ms() + 10000;
    do {
        pid_t found = korch_test_pid_of_uid(uid, "ipykernel");
        if (found)
            return found;
        usleep(200 * 1000);
    } while (s_mono_ms() < end);
    return 0;
}

/* korch_test_attack_as's files in a swarm kernel: 1 the key (the kernel's
   copy of its connection file), 2 the swarm secret, 4 a planted file (and
   8 a signal, 16 its environment). */
static const char *const su_attack_files[3] = {"/tmp/kernel.json", "/run/secrets/kernel.json", "/tmp/planted.txt"};

static bool su_wait_services(korch_docker_t *d, const char *inst, size_t want, int timeout_ms)
{
    char label[160];
    snprintf(label, sizeof label, "korch.instance=%s", inst);
    double end = s_mono_ms() + timeout_ms;
    size_t n = 999;
    do {
        json_t *a = s_list(d, "services", "label", label);
        n = a ? json_array_size(a) : 999;
        json_decref(a);
        if (n == want)
            return true;
        usleep(200 * 1000);
    } while (s_mono_ms() < end);
    fprintf(stderr, "instance %s: %zu service(s), want %zu\n", inst, n, want);
    return false;
}

static void su_stop(pid_t *pid, int sig)
{
    if (*pid > 0) {
        kill(*pid, sig);
        waitpid(*pid, NULL, 0);
    }
    *pid = -1;
}

TEST_T(swarm_kernel_uids, 600)
{
    korch_docker_t *d = NULL, *d1 = NULL;
    korch_err_t err = {0};
    char host[256], image[256], h1[256], anchor_id[80] = "";
    char ia[64], ib[64], conn_a[PATH_MAX], conn_b[PATH_MAX], log_a[PATH_MAX], log_b[PATH_MAX], how[32];
    pid_t pa = -1, pb = -1;
    int host_ns = -1;
    bool anchored = false;
    double t0 = s_mono_ms();

    if (!CHECK_EQ(s_script("swarm-up.sh", "3", 600), 0))
        goto down;
    if (!CHECK(s_env("DOCKER_HOST", host, sizeof host)) || !CHECK(s_env("KORCH_SWARM_IMAGE", image, sizeof image)) ||
        !CHECK(s_env("KORCH_SWARM_NODE1_HOST", h1, sizeof h1)))
        goto down;
    double up_ms = s_mono_ms() - t0;
    setenv("DOCKER_HOST", host, 1);
    setenv("KORCH_SWARM_NETWORK", SU_NET, 1);
    setenv("KORCH_SWARM_ENCRYPTED", "0", 1);
    snprintf(ia, sizeof ia, "uidtest-a-%d", (int)getpid());
    snprintf(ib, sizeof ib, "uidtest-b-%d", (int)getpid());
    snprintf(conn_a, sizeof conn_a, "/tmp/korch-uidtest-a-%d.json", (int)getpid());
    snprintf(conn_b, sizeof conn_b, "/tmp/korch-uidtest-b-%d.json", (int)getpid());
    snprintf(log_a, sizeof log_a, "/tmp/korch-uidtest-a-%d.log", (int)getpid());
    snprintf(log_b, sizeof log_b, "/tmp/korch-uidtest-b-%d.log", (int)getpid());
    d = korch_docker_new(NULL, host, &err);
    d1 = korch_docker_new(NULL, h1, &err);
    if (!CHECK(d) || !CHECK(d1))
        goto down;
    s_delete(d1, "containers", SU_ANCHOR "?force=1", 10000);

    /* The kernels' network (the launcher makes it), then the anchor on it. */
    {
        korch_loop_t *loop = korch_loop_new();
        korch_swarm_opts_t o;
        korch_swarm_opts_init(&o);
        o.host = host;
        korch_launcher_t *l = korch_launcher_swarm_new(loop, &o, &err);
        if (!CHECK(l))
            fprintf(stderr, "swarm launcher: %s\n", err.msg);
        korch_launcher_destroy(&l);
        korch_loop_destroy(&loop);
        json_t *body = json_pack("{s:s, s:[s, s], s:s, s:{s:s, s:b, s:[s], s:b}}", "Image", image, "Cmd", "sleep",
                                 "infinity", "User", "65534:65534", "HostConfig", "NetworkMode", SU_NET,
                                 "ReadonlyRootfs", 1, "CapDrop", "ALL", "Init", 1);
        json_t *r = s_api(d1, "POST", "/containers/create?name=" SU_ANCHOR, body, 201);
        json_decref(body);
        if (!CHECK(r))
            goto out;
        snprintf(anchor_id, sizeof anchor_id, "%s", json_string_value(json_object_get(r, "Id")) ?: "");
        json_decref(r);
        char path[200];
        snprintf(path, sizeof path, "/containers/%s/start", anchor_id);
        json_decref(s_api(d1, "POST", path, NULL, 204));
        snprintf(path, sizeof path, "/containers/%s/json", anchor_id);
        r = s_api(d1, "GET", path, NULL, 200);
        long pid = (long)json_integer_value(json_object_get(json_object_get(r, "State"), "Pid"));
        json_decref(r);
        char nsp[64];
        snprintf(nsp, sizeof nsp, "/proc/%ld/ns/net", pid);
        host_ns = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
        int fd = open(nsp, O_RDONLY | O_CLOEXEC);
        if (!CHECK_GT(pid, 1) || !CHECK_GE(fd, 0) || !CHECK_GE(host_ns, 0) || !CHECK_EQ(setns(fd, CLONE_NEWNET), 0)) {
            if (fd >= 0)
                close(fd);
            goto out;
        }
        close(fd);
        anchored = true;
    }

    /* Two kernels, each its own uid of the range, no account's. */
    double t1 = s_mono_ms();
    pa = su_korch_kernel(image, ia, conn_a, log_a, how, sizeof how);
    pb = su_korch_kernel(image, ib, conn_b, log_b, how, sizeof how);
    if (!CHECK_GT(pa, 0) || !CHECK_GT(pb, 0))
        goto out;
    double start_ms = s_mono_ms() - t1;
    uid_t ua = su_service_uid(d, ia), ub = su_service_uid(d, ib);
    uid_t first = 0, last = 0;
    CHECK(korch_kuid_range(&first, &last, NULL));
    fprintf(stderr, "  swarm kernel uids %u and %u\n", (unsigned)ua, (unsigned)ub);
    CHECK(ua != ub);
    CHECK(ua >= first && ua <= last && ub >= first && ub <= last);
    CHECK(getpwuid(ua) == NULL && getpwuid(ub) == NULL && getgrgid((gid_t)ua) == NULL);
    pid_t ka = su_kernel_pid(ua), kb = su_kernel_pid(ub);
    if (!CHECK_GT(ka, 0) || !CHECK_GT(kb, 0))
        goto out;

    /* The host's uid 1000 (an account here; made when missing, as a
       person's would be) and the other kernel's uid try each attack. */
    {
        struct passwd *pw = getpwuid(1000);
        uid_t person = 1000;
        gid_t person_gid = pw ? pw->pw_gid : 1000;
        CHECK_EQ(korch_test_attack_as(person, person_gid, ka, su_attack_files), 0);
        CHECK_EQ(korch_test_attack_as(ub, (gid_t)ub, ka, su_attack_files), 0);
        CHECK_EQ(korch_test_attack_as(ua, (gid_t)ua, kb, su_attack_files) & 8, 0);
        CHECK(korch_test_attack_as(ua, (gid_t)ua, ka, su_attack_files) & 8); /* the probe is live: a's own uid signals it */
    }

    /* The claim: held by the korch that runs it, gone with a kill -9, taken
       again by the korch that re-adopts it. */
    {
        korch_err_t e = {0};
        korch_kuid_t *k = korch_kuid_claim(ua, &e);
        CHECK(!k);
        CHECK_CONTAINS(e.msg, "in use by another kernel");
        korch_kuid_release(&k);
        su_stop(&pa, SIGKILL);
        korch_err_clear(&e);
        k = korch_kuid_claim(ua, &e); /* nobody holds it while its korch is down */
        CHECK(k);
        korch_kuid_release(&k);
        pa = su_korch_kernel(image, ia, conn_a, log_a, how, sizeof how);
        if (!CHECK_GT(pa, 0))
            goto out;
        CHECK_STREQ(how, "re-adopted");
        korch_err_clear(&e);
        k = korch_kuid_claim(ua, &e);
        if (!CHECK(!k))
            fprintf(stderr, "the re-adopting korch does not hold uid %u\n", (unsigned)ua);
        CHECK_CONTAINS(e.msg, "in use by another kernel");
        korch_kuid_release(&k);
        CHECK_EQ(su_service_uid(d, ia), ua);
    }
    fprintf(stderr, "swarm-uids: cluster up %.1f s, two kernels started in %.1f s, the whole test %.1f s\n",
            up_ms / 1e3, start_ms / 1e3, (s_mono_ms() - t0) / 1e3);

out:
    su_stop(&pa, SIGTERM);
    su_stop(&pb, SIGTERM);
    if (d) {
        CHECK(su_wait_services(d, ia, 0, 20000));
        CHECK(su_wait_services(d, ib, 0, 20000));
    }
    unlink(conn_a);
    unlink(conn_b);
    unlink(log_a);
    unlink(log_b);
    if (anchored && host_ns >= 0)
        CHECK_EQ(setns(host_ns, CLONE_NEWNET), 0);
    if (host_ns >= 0)
        close(host_ns);
    if (d1 && anchor_id[0]) {
        char path[200];
        snprintf(path, sizeof path, "/containers/%s?force=1", anchor_id);
        json_decref(s_api(d1, "DELETE", path, NULL, 204));
    }
    if (d)
        CHECK(s_delete(d, "networks", SU_NET, 30000));
down:
    unsetenv("KORCH_SWARM_NETWORK");
    unsetenv("KORCH_SWARM_ENCRYPTED");
    s_swarm_done();
    korch_docker_destroy(&d);
    korch_docker_destroy(&d1);
}
