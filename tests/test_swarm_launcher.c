/*  swarm_launcher: `korch serve --launcher swarm` on the test cluster of
 *  scripts/swarm-up.sh (swarm_fixture.h), with real kernels, end to end.
 *  (test_swarm_cluster.c checks the cluster and the plumbing itself.)
 *
 *  korch reaches the kernels' overlay the way a process on a manager can:
 *  from the network namespace of an attachable container on it (an
 *  "anchor" on node 1), keeping the host's files and the manager's unix
 *  socket. The test process enters that namespace (setns) before it starts
 *  korch serve, which inherits it; scripts run from the host's again. In
 *  production korch is a service on the network (docker-compose.yml).
 *
 *  What it checks: the launcher refuses an engine that is no manager and
 *  makes the network (internal, attachable; unencrypted here: see
 *  docs/launchers.md); six kernels started at once spread over the three nodes, each
 *  a service with its secret; state, a PNG, interrupt and restart through
 *  the gateway; DELETE leaves no service, secret or container; node 3's
 *  engine stopped: its kernels are reported dead and restarted on live
 *  nodes while the others keep their state; korch stopped: nothing left.
 *  Figures (stderr, "swarm-launcher: ..."): start through swarm and local
 *  docker, an execution's round trip over the overlay and over ipc, kernels
 *  per second across three nodes, the time to see a node go.
 */
#include "swarm_fixture.h"

#include "serve_fixture.h"
#include "korch/fsutil.h"
#include "korch/swarm.h"
#include "korch/kernel.h"
#include "korch/loop.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define SL_NET "korch-swarmtest-kernels"
#define SL_ANCHOR "korch-swarmtest-anchor"
#define SL_INSTANCE "swarmtest"
#define SL_KERNELS 6

/* Run the gateway peer; its JSON line (new), NULL when it printed none. */
static json_t *sl_peer(const serve_t *s, const char *mode, const char *const *args, int timeout_s)
{
    const char *argv[16] = {PY, serve_peer("swarm_gateway.py"), mode, s->url, s->token};
    int n = 5;
    for (int i = 0; args && args[i] && n < 15; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    return serve_peer_json(argv, timeout_s);
}

/* A kernel's services (korch.kernel_id=ID) as a new array. */
static json_t *sl_services_of(korch_docker_t *d, const char *kid)
{
    char label[160];
    snprintf(label, sizeof label, "korch.kernel_id=%s", kid);
    return s_list(d, "services", "label", label);
}

/* The node label ("node2") of the running task of kernel kid, "" if none. */
static void sl_kernel_node(korch_docker_t *d, json_t *nodes, const char *kid, char *buf, size_t len)
{
    json_t *svcs = sl_services_of(d, kid);
    buf[0] = 0;
    size_t i;
    json_t *sv;
    json_array_foreach(svcs, i, sv) {
        json_t *t = s_task(d, json_string_value(json_object_get(sv, "ID")));
        if (t && !strcmp(s_task_state(t), "running") &&
            !strcmp(json_string_value(json_object_get(t, "DesiredState")) ?: "", "running"))
            snprintf(buf, len, "%s", s_node_label(nodes, json_string_value(json_object_get(t, "NodeID"))));
        json_decref(t);
    }
    json_decref(svcs);
}

/* Count korch's services and secrets of the instance. */
static void sl_count(korch_docker_t *d, size_t *services, size_t *secrets)
{
    json_t *a = s_list(d, "services", "label", "korch.instance");
    json_t *b = s_list(d, "secrets", "label", "korch.instance");
    *services = a ? json_array_size(a) : 999;
    *secrets = b ? json_array_size(b) : 999;
    json_decref(a);
    json_decref(b);
}

static bool sl_wait_count(korch_docker_t *d, size_t services, size_t secrets, int timeout_ms)
{
    size_t a = 0, b = 0;
    double end = s_mono_ms() + timeout_ms;
    do {
        sl_count(d, &a, &b);
        if (a == services && b == secrets)
            return true;
        usleep(200 * 1000);
    } while (s_mono_ms() < end);
    fprintf(stderr, "services %zu (want %zu), secrets %zu (want %zu)\n", a, services, b, secrets);
    return false;
}

/* DELETE /api/kernels/ID through the gateway: the HTTP status. */
static int sl_delete_kernel(const serve_t *s, const char *kid)
{
    const char *argv[] = {PY, "-c",
                          "import sys,urllib.request as u,urllib.error as e\n"
                          "r=u.Request(sys.argv[1]+'api/kernels/'+sys.argv[3],method='DELETE',"
                          "headers={'Authorization':'token '+sys.argv[2]})\n"
                          "try:\n print(u.urlopen(r,timeout=60).status)\n"
                          "except e.HTTPError as x:\n print(x.code)",
                          s->url, s->token, kid, NULL};
    char *out = NULL;
    int rc = korch_test_run(argv, NULL, &out, NULL, 90);
    int st = rc == 0 && out ? (int)strtol(out, NULL, 10) : -1;
    free(out);
    return st;
}

static double sl_median(json_t *arr)
{
    double v[64];
    size_t n = 0, i;
    json_t *x;
    json_array_foreach(arr, i, x) if (n < 64 && json_is_number(x)) v[n++] = json_number_value(x);
    for (size_t a = 0; a < n; a++)
        for (size_t b = a + 1; b < n; b++)
            if (v[b] < v[a]) {
                double t = v[a];
                v[a] = v[b];
                v[b] = t;
            }
    return n ? (n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2) : -1;
}

/* `korch kernel --launcher swarm --instance SL_INSTANCE` in the background,
   its stderr in log; its pid once it says "started" or "re-adopted" (the
   word into how), or -1. */
static pid_t sl_korch_kernel(const char *image, const char *conn, const char *log, char *how, size_t hlen)
{
    unlink(log); /* not the last run's words */
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
        execl(korch_test_korch_bin(), "korch", "kernel", "--launcher", "swarm", "--image", image, "--instance",
              SL_INSTANCE, "--connection-file", conn, (char *)NULL);
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

/* Python against the kernel of a connection file: its stdout. */
static char *sl_py_kernel(const char *conn, const char *code)
{
    const char *argv[] = {PY, "-c",
                          "import sys\nfrom jupyter_client import BlockingKernelClient\n"
                          "c=BlockingKernelClient(); c.load_connection_file(sys.argv[1]); c.start_channels()\n"
                          "c.wait_for_ready(60)\nout=[]\n"
                          "c.execute_interactive(sys.argv[2], timeout=60, output_hook=lambda m: out.append("
                          "m['content'].get('text','')) if m['msg_type']=='stream' else None)\n"
                          "print(''.join(out), end='')",
                          conn, code, NULL};
    char *out = NULL, *err = NULL;
    if (korch_test_run(argv, NULL, &out, &err, 120) != 0)
        fprintf(stderr, "jupyter_client: %s\n", err ? err : "");
    free(err);
    return out;
}

TEST_T(swarm_launcher, 900)
{
    korch_docker_t *d = NULL, *d1 = NULL;
    korch_err_t err = {0};
    json_t *nodes = NULL, *res = NULL, *dock = NULL;
    serve_t s = {0};
    int host_ns = -1;
    bool anchored = false;
    char host[256], image[256], h1[256], h2[256], anchor_id[80] = "";

    if (!CHECK_EQ(s_script("swarm-up.sh", "3", 600), 0))
        goto down;
    if (!CHECK(s_env("DOCKER_HOST", host, sizeof host)) || !CHECK(s_env("KORCH_SWARM_IMAGE", image, sizeof image)) ||
        !CHECK(s_env("KORCH_SWARM_NODE1_HOST", h1, sizeof h1)) || !CHECK(s_env("KORCH_SWARM_NODE2_HOST", h2, sizeof h2)))
        goto down;

    /* Local docker first, for the figures: the same gateway peer, kernels
       over ipc in containers of the host's engine. */
    unsetenv("DOCKER_HOST");
    {
        const char *args[] = {"--launcher", "docker", NULL};
        if (CHECK(serve_start_args(&s, args))) {
            const char *n6[] = {"6", NULL}; /* as many as through swarm below */
            dock = sl_peer(&s, "time", n6, 300);
            CHECK(json_is_true(json_object_get(dock, "ok")));
            serve_stop(&s);
        }
    }

    setenv("DOCKER_HOST", host, 1);
    setenv("KORCH_SWARM_NETWORK", SL_NET, 1);
    setenv("KORCH_SWARM_ENCRYPTED", "0", 1);
    d = korch_docker_new(NULL, host, &err);
    d1 = korch_docker_new(NULL, h1, &err);
    if (!CHECK(d) || !CHECK(d1))
        goto down;
    nodes = s_api(d, "GET", "/nodes", NULL, 200);
    /* What a crashed earlier run may have left on a cluster still up. */
    {
        json_t *old = s_list(d, "services", "label", "korch.instance");
        size_t i;
        json_t *x;
        json_array_foreach(old, i, x) s_delete(d, "services", json_string_value(json_object_get(x, "ID")), 10000);
        json_decref(old);
        old = s_list(d, "secrets", "label", "korch.instance");
        json_array_foreach(old, i, x) s_delete(d, "secrets", json_string_value(json_object_get(x, "ID")), 10000);
        json_decref(old);
        s_delete(d1, "containers", SL_ANCHOR "?force=1", 10000);
    }

    /* A worker's engine is refused; the manager's makes the network. */
    {
        korch_loop_t *loop = korch_loop_new();
        korch_swarm_opts_t o;
        korch_swarm_opts_init(&o);
        o.host = h2;
        korch_err_clear(&err);
        korch_launcher_t *l = korch_launcher_swarm_new(loop, &o, &err);
        CHECK(!l);
        CHECK(strstr(err.msg, "is not a swarm manager") != NULL);
        korch_launcher_destroy(&l);
        o.host = host;
        korch_err_clear(&err);
        l = korch_launcher_swarm_new(loop, &o, &err);
        if (!CHECK(l))
            fprintf(stderr, "swarm launcher: %s\n", err.msg);
        korch_launcher_destroy(&l);
        korch_loop_destroy(&loop);
        json_t *net = s_api(d, "GET", "/networks/" SL_NET, NULL, 200);
        CHECK_STREQ(json_string_value(json_object_get(net, "Driver")), "overlay");
        CHECK(json_is_true(json_object_get(net, "Internal")));
        CHECK(json_is_true(json_object_get(net, "Attachable")));
        CHECK(!json_object_get(json_object_get(net, "Options"), "encrypted"));
        json_decref(net);
    }

    /* The anchor: an attachable container on node 1, whose namespace the
       test (and korch serve) enters. */
    {
        json_t *body = json_pack("{s:s, s:[s, s], s:s, s:{s:s, s:b, s:[s], s:b}}", "Image", image, "Cmd", "sleep",
                                 "infinity", "User", "1000:1000", "HostConfig", "NetworkMode", SL_NET,
                                 "ReadonlyRootfs", 1, "CapDrop", "ALL", "Init", 1);
        json_t *r = s_api(d1, "POST", "/containers/create?name=" SL_ANCHOR, body, 201);
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

    /* korch serve with the swarm launcher, on the overlay. */
    {
        const char *args[] = {"--launcher", "swarm", "--image", image, NULL};
        if (!CHECK(serve_start_args(&s, args)))
            goto out;
    }
    const char *n6[] = {"6", NULL};
    double t0 = s_mono_ms();
    res = sl_peer(&s, "start", n6, 600);
    double all_ms = s_mono_ms() - t0;
    if (!CHECK(json_is_true(json_object_get(res, "ok"))))
        goto out;
    json_t *kids = json_object_get(res, "kernels");
    if (!CHECK_EQ(json_array_size(kids), SL_KERNELS))
        goto out;

    /* Spread: every node runs some, none more than half. */
    char where[SL_KERNELS][32];
    int per[S_NODES + 1] = {0};
    for (int i = 0; i < SL_KERNELS; i++) {
        sl_kernel_node(d, nodes, json_string_value(json_array_get(kids, i)), where[i], sizeof where[i]);
        int nn = where[i][0] ? atoi(where[i] + 4) : 0;
        if (CHECK(nn >= 1 && nn <= S_NODES))
            per[nn]++;
    }
    fprintf(stderr, "swarm-launcher: %d kernels on node1/2/3: %d/%d/%d\n", SL_KERNELS, per[1], per[2], per[3]);
    for (int i = 1; i <= S_NODES; i++) {
        CHECK_GE(per[i], 1);
        CHECK_LE(per[i], SL_KERNELS / 2);
    }
    CHECK(sl_wait_count(d, SL_KERNELS, SL_KERNELS, 10000));

    /* DELETE: its service and secret go, and its container on its node. */
    {
        const char *k5 = json_string_value(json_array_get(kids, 5));
        CHECK_EQ(sl_delete_kernel(&s, k5), 204);
        CHECK(sl_wait_count(d, SL_KERNELS - 1, SL_KERNELS - 1, 15000));
        json_t *left = sl_services_of(d, k5);
        CHECK_EQ(json_array_size(left), 0);
        json_decref(left);
        char var[40], hn[256];
        snprintf(var, sizeof var, "KORCH_SWARM_NODE%.2s_HOST", where[5] + 4);
        if (CHECK(s_env(var, hn, sizeof hn))) {
            korch_docker_t *dn = korch_docker_new(NULL, hn, &err);
            char label[200], path[600];
            snprintf(label, sizeof label, "korch.kernel_id=%s", k5);
            json_t *f = json_pack("{s:[s]}", "label", label);
            char *fs = json_dumps(f, JSON_COMPACT), *esc = korch_docker_escape(dn, fs);
            snprintf(path, sizeof path, "/containers/json?all=1&filters=%s", esc);
            json_t *cs = NULL;
            double end = s_mono_ms() + 20000;
            do {
                json_decref(cs);
                cs = s_api(dn, "GET", path, NULL, 200);
                if (json_array_size(cs) == 0)
                    break;
                usleep(200 * 1000);
            } while (s_mono_ms() < end);
            CHECK_EQ(json_array_size(cs), 0);
            json_decref(cs);
            free(esc);
            free(fs);
            json_decref(f);
            korch_docker_destroy(&dn);
        }
    }

    /* Node 3's engine stops: its kernels are dead and restarted elsewhere;
       the others keep their state. */
    {
        const char *victims[SL_KERNELS], *kept[SL_KERNELS];
        int nv = 0, nk = 0;
        for (int i = 0; i < SL_KERNELS - 1; i++) {
            const char *k = json_string_value(json_array_get(kids, i));
            if (!strcmp(where[i], "node3"))
                victims[nv++] = k;
            else if (i != 2) /* kernel 2 was restarted: x is gone */
                kept[nk++] = k;
        }
        if (!CHECK_GE(nv, 1))
            goto out;
        char pidf[128], pid_s[32] = "";
        snprintf(pidf, sizeof pidf, S_RUN "/node%d/dockerd.pid", S_STOPPED_NODE);
        FILE *f = fopen(pidf, "r");
        if (f) {
            if (!fgets(pid_s, sizeof pid_s, f))
                pid_s[0] = 0;
            fclose(f);
        }
        pid_t pid = (pid_t)strtol(pid_s, NULL, 10);
        char old[SL_KERNELS][80];
        for (int i = 0; i < nv; i++) {
            json_t *sv = sl_services_of(d, victims[i]);
            snprintf(old[i], sizeof old[i], "%s", json_string_value(json_object_get(json_array_get(sv, 0), "ID")) ?: "");
            json_decref(sv);
        }
        if (!CHECK_GT(pid, 1) || !CHECK_EQ(kill(pid, SIGTERM), 0))
            goto out;
        double stop = s_mono_ms(), moved_ms = -1, dead_ms = -1;
        int moved = 0;
        while (s_mono_ms() - stop < 90000 && moved < nv) {
            moved = 0;
            /* korch removes a dead kernel's service at once: its going is
               the death seen */
            int gone = 0;
            for (int i = 0; i < nv; i++) {
                char path[160];
                snprintf(path, sizeof path, "/services/%.80s", old[i]);
                korch_docker_reply_t rr = {0};
                if (korch_docker_request(d, "GET", path, NULL, &rr, NULL) == KORCH_OK && rr.status == 404)
                    gone++;
                korch_docker_reply_clear(&rr);
            }
            if (gone == nv && dead_ms < 0)
                dead_ms = s_mono_ms() - stop;
            for (int i = 0; i < nv; i++) {
                char nd[32];
                sl_kernel_node(d, nodes, victims[i], nd, sizeof nd);
                if (nd[0] && strcmp(nd, "node3"))
                    moved++;
            }
            if (moved == nv)
                moved_ms = s_mono_ms() - stop;
            else
                usleep(200 * 1000);
        }
        CHECK_EQ(moved, nv);
        CHECK_GE(dead_ms, 0);
        fprintf(stderr,
                "swarm-launcher: node3's engine stopped: its %d kernel(s) seen dead after %.1f s, running again on live "
                "nodes after %.1f s\n",
                nv, dead_ms / 1e3, moved_ms / 1e3);
        for (int i = 0; i < nv; i++) {
            const char *a[] = {victims[i], "60", NULL};
            json_t *j = sl_peer(&s, "fresh", a, 180);
            CHECK(json_is_true(json_object_get(j, "ok")));
            json_decref(j);
        }
        kept[nk] = NULL;
        json_t *j = sl_peer(&s, "check", kept, 180);
        CHECK(json_is_true(json_object_get(j, "ok")));
        json_decref(j);
    }

    /* korch serve killed: the next one (another instance) removes what the
       dead one left, since its lock is free. korch kernel --instance
       re-adopts its kernel, variables kept, across a kill -9. */
    {
        kill(s.pid, SIGKILL);
        waitpid(s.pid, NULL, 0);
        s.pid = 0;
        serve_stop(&s);
        const char *args[] = {"--launcher", "swarm", "--image", image, NULL};
        double t1 = s_mono_ms();
        if (!CHECK(serve_start_args(&s, args)))
            goto out;
        CHECK(sl_wait_count(d, 0, 0, 20000));
        fprintf(stderr, "swarm-launcher: korch serve killed: the next one removed its services in %.1f s\n",
                (s_mono_ms() - t1) / 1e3);
        serve_stop(&s);

        /* korch serve --instance X killed: the next one of X re-adopts its
           kernel (same id, variables kept, interrupt works; the key from
           korch's own copy of the connection file, as the secret cannot be
           read back), and SIGTERM then removes it. */
        char inst[64], tok[256] = "", kid[64] = "";
        snprintf(inst, sizeof inst, "swarm-adopt-%d", (int)getpid());
        const char *ia[] = {"--launcher", "swarm", "--image", image, "--instance", inst, NULL};
        if (!CHECK(serve_start_args(&s, ia)))
            goto out;
        snprintf(tok, sizeof tok, "%s", s.token);
        {
            const char *pa[] = {PY, serve_peer("adopt_peer.py"), "new", s.url, s.token, "kept-on-swarm", NULL};
            char *pout = NULL;
            int prc = korch_test_run(pa, NULL, &pout, NULL, 300);
            json_t *pj = pout ? json_loads(strrchr(pout, '{') ? strrchr(pout, '{') : pout, JSON_DISABLE_EOF_CHECK, NULL)
                              : NULL;
            if (CHECK_EQ(prc, 0) && CHECK(json_is_true(json_object_get(pj, "ok"))))
                snprintf(kid, sizeof kid, "%s", json_string_value(json_object_get(pj, "kernel")) ?: "");
            else
                fprintf(stderr, "adopt_peer.py new: %s\n", pout ? pout : "");
            json_decref(pj);
            free(pout);
        }
        /* a second kernel, whose container is killed on its node while korch is down */
        char kid2[64] = "", svc2[80] = "";
        {
            const char *pa[] = {PY, serve_peer("adopt_peer.py"), "new", s.url, s.token, "dies", NULL};
            char *pout = NULL;
            int prc = korch_test_run(pa, NULL, &pout, NULL, 300);
            json_t *pj = pout ? json_loads(strrchr(pout, '{') ? strrchr(pout, '{') : pout, JSON_DISABLE_EOF_CHECK, NULL)
                              : NULL;
            if (CHECK_EQ(prc, 0) && CHECK(json_is_true(json_object_get(pj, "ok"))))
                snprintf(kid2, sizeof kid2, "%s", json_string_value(json_object_get(pj, "kernel")) ?: "");
            json_decref(pj);
            free(pout);
        }
        char nd2[32] = "";
        if (kid2[0]) {
            json_t *sv = sl_services_of(d, kid2);
            snprintf(svc2, sizeof svc2, "%s", json_string_value(json_object_get(json_array_get(sv, 0), "ID")) ?: "");
            json_decref(sv);
            sl_kernel_node(d, nodes, kid2, nd2, sizeof nd2);
        }
        kill(s.pid, SIGKILL);
        waitpid(s.pid, NULL, 0);
        s.pid = 0;
        serve_stop(&s);
        if (CHECK(svc2[0]) && CHECK(nd2[0])) {
            char nh[160];
            snprintf(nh, sizeof nh, "unix://" S_RUN "/korch-%s.sock", nd2);
            korch_docker_t *dn = korch_docker_new(NULL, nh, NULL);
            json_t *cs = dn ? s_list(dn, "containers/json", "label", "com.docker.swarm.service.id") : NULL;
            size_t ci;
            json_t *cc;
            int killed = 0;
            json_array_foreach(cs, ci, cc) {
                const char *lsvc = json_string_value(
                    json_object_get(json_object_get(cc, "Labels"), "com.docker.swarm.service.id"));
                char kp2[200];
                snprintf(kp2, sizeof kp2, "/containers/%.80s/kill", json_string_value(json_object_get(cc, "Id")) ?: "");
                korch_docker_reply_t kr = {0};
                if (lsvc && !strcmp(lsvc, svc2) && korch_docker_request(dn, "POST", kp2, NULL, &kr, NULL) == KORCH_OK &&
                    kr.status == 204)
                    killed++;
                korch_docker_reply_clear(&kr);
            }
            CHECK_EQ(killed, 1);
            json_decref(cs);
            /* the manager hears of it: its task is past running */
            json_t *t = NULL;
            for (int w = 0; w < 100; w++) {
                json_decref(t);
                t = s_task(d, svc2);
                if (t && strcmp(s_task_state(t), "running"))
                    break;
                usleep(200 * 1000);
            }
            CHECK(t && strcmp(s_task_state(t), "running"));
            json_decref(t);
            korch_docker_destroy(&dn);
        }
        const char *ib[] = {"--launcher", "swarm", "--image", image, "--instance", inst, "--token", tok, NULL};
        t1 = s_mono_ms();
        if (!CHECK(kid[0]) || !CHECK(serve_start_args(&s, ib)))
            goto out;
        {
            const char *pa[] = {PY, serve_peer("adopt_peer.py"), "direct", s.url, s.token, kid, "kept-on-swarm", NULL};
            char *pout = NULL, *perr = NULL;
            int prc = korch_test_run(pa, NULL, &pout, &perr, 240);
            if (!CHECK_EQ(prc, 0)) {
                fprintf(stderr, "adopt_peer.py direct: %s\n%s\n", pout ? pout : "", perr ? perr : "");
                serve_log_tail(&s);
            } else
                fprintf(stderr, "swarm-launcher: korch serve --instance killed: the next one re-adopted kernel %.8s "
                                "with its variables in %.1f s\n",
                        kid, (s_mono_ms() - t1) / 1e3);
            free(pout);
            free(perr);
        }
        /* the one that died meanwhile: removed (service and secret), not listed */
        {
            json_t *sv = sl_services_of(d, kid2);
            CHECK_EQ(json_array_size(sv), 0);
            json_decref(sv);
            CHECK_EQ(serve_kernel_count(&s), 1);
            char *text = korch_read_file(s.log, 1 << 20, NULL, NULL);
            CHECK_CONTAINS(text ? text : "", "not re-adopted: it ended while korch was down");
            free(text);
        }
        serve_stop(&s);
        CHECK(sl_wait_count(d, 0, 0, 20000));

        char conn[PATH_MAX], log[PATH_MAX], how[32] = "";
        snprintf(conn, sizeof conn, "/tmp/korch-swarmtest-%d.json", (int)getpid());
        snprintf(log, sizeof log, "/tmp/korch-swarmtest-%d.log", (int)getpid());
        pid_t kp = sl_korch_kernel(image, conn, log, how, sizeof how);
        if (!CHECK_GT(kp, 0))
            goto out;
        CHECK_STREQ(how, "started");
        char *o = sl_py_kernel(conn, "kept = 6 * 7\nprint('set')");
        CHECK_STREQ(o, "set\n");
        free(o);
        kill(kp, SIGKILL);
        waitpid(kp, NULL, 0);
        kp = sl_korch_kernel(image, conn, log, how, sizeof how);
        if (!CHECK_GT(kp, 0))
            goto out;
        if (!CHECK_STREQ(how, "re-adopted")) {
            char *text = korch_read_file(log, 1 << 20, NULL, NULL);
            fprintf(stderr, "korch kernel's log:\n%s\n", text ? text : "");
            free(text);
        }
        o = sl_py_kernel(conn, "print(kept)");
        CHECK_STREQ(o, "42\n");
        free(o);
        kill(kp, SIGTERM);
        int st = 0;
        CHECK_EQ(waitpid(kp, &st, 0), kp);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        CHECK(sl_wait_count(d, 0, 0, 20000));
        unlink(conn);
        unlink(log);
    }

    /* The agent API on swarm kernels: two turns sharing one kernel's state,
       the model being the scripted LLM server (tests/peers/llm_server.py). */
    {
        char line[64], url[128], dir[] = "/tmp/korch-swarm-agent-XXXXXX";
        const char *la[] = {PY, serve_peer("llm_server.py"), NULL};
        pid_t lp = korch_test_spawn_line(la, line, sizeof line, 10, NULL);
        int port = lp > 0 ? (int)strtol(line, NULL, 10) : 0;
        if (CHECK_GT(port, 0) && CHECK(mkdtemp(dir) != NULL)) {
            snprintf(url, sizeof url, "http://127.0.0.1:%d/s/turns/v1", port);
            setenv("OPENAI_BASE_URL", url, 1);
            setenv("OPENAI_API_KEY", "sk-test", 1);
            const char *args[] = {"--launcher", "swarm", "--image", image, "--agent-dir", dir,
                                  "--llm", "openai:gpt-4o-mini", NULL};
            if (CHECK(serve_start_args(&s, args))) {
                const char *argv[] = {PY, serve_peer("agent_api_client.py"), "--url", s.line, "--agent-dir", dir,
                                      "turns", NULL};
                char *out = NULL, *perr = NULL;
                int rc = korch_test_run(argv, NULL, &out, &perr, 240);
                json_t *j = out ? json_loads(out, JSON_DISABLE_EOF_CHECK, NULL) : NULL;
                if (!CHECK_EQ(rc, 0) || !CHECK(json_is_true(json_object_get(j, "ok")))) {
                    fprintf(stderr, "  %s%s\n", out ? out : "(no output)", perr ? perr : "");
                    serve_log_tail(&s);
                } else
                    fprintf(stderr, "swarm-launcher: agent API on a swarm kernel: %s", out);
                json_decref(j);
                free(out);
                free(perr);
                serve_stop(&s);
            }
            unsetenv("OPENAI_BASE_URL");
            unsetenv("OPENAI_API_KEY");
            char cmd[128];
            snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
            CHECK_EQ(system(cmd), 0);
        }
        if (lp > 0) {
            kill(lp, SIGTERM);
            waitpid(lp, NULL, 0);
        }
        CHECK(sl_wait_count(d, 0, 0, 20000));
    }

    /* In-process, on the same network: files in and out through the
       kernel (links refused), then an OOM kill reported as a death with the
       memory limit named. */
    {
        korch_loop_t *loop = korch_loop_new();
        korch_swarm_opts_t o;
        korch_swarm_opts_init(&o);
        o.host = host;
        o.image = image;
        o.memory = 256LL << 20;
        korch_err_clear(&err);
        korch_launcher_t *l = korch_launcher_swarm_new(loop, &o, &err);
        korch_kernel_opts_t ko = {.launcher = l, .no_auto_restart = true};
        korch_kernel_t *k = l ? korch_kernel_new(loop, &ko, &err) : NULL;
        if (!CHECK(k) || !CHECK_EQ(korch_kernel_wait_ready(k, &err), KORCH_OK)) {
            fprintf(stderr, "swarm kernel: %s\n", err.msg);
        } else {
            korch_proc_t *pr = korch_kernel_proc(k);
            if (!CHECK_EQ(korch_proc_put_file_wait(pr, "in/data.txt", "hello swarm", 11, &err), KORCH_OK))
                fprintf(stderr, "put_file: %s\n", err.msg);
            korch_exec_t *ex = korch_kernel_execute_wait(
                k,
                "import os\ns = open('in/data.txt').read()\nopen('out.txt', 'w').write(s.upper())\n"
                "os.symlink('/etc/passwd', 'link')\nprint(s)",
                NULL, NULL, &err);
            CHECK(ex && korch_exec_result(ex)->status == KORCH_EXEC_OK);
            korch_exec_destroy(&ex);
            char *data = NULL;
            size_t len = 0;
            if (!CHECK_EQ(korch_proc_get_file_wait(pr, "out.txt", 1 << 20, &data, &len, &err), KORCH_OK))
                fprintf(stderr, "get_file: %s\n", err.msg);
            CHECK_STREQ(data ? data : "", "HELLO SWARM");
            free(data);
            data = NULL;
            korch_err_clear(&err);
            CHECK(korch_proc_get_file_wait(pr, "link", 1 << 20, &data, &len, &err) != KORCH_OK);
            if (!CHECK(strstr(err.msg, "Too many levels of symbolic links") != NULL))
                fprintf(stderr, "get_file of a link: %s\n", err.msg);
            free(data);
            data = NULL;
            korch_err_clear(&err);
            CHECK_EQ(korch_proc_get_file_wait(pr, "nothere", 1 << 20, &data, &len, &err), KORCH_E_NOTFOUND);
            free(data);
            double t2 = s_mono_ms();
            ex = korch_kernel_execute_wait(k, "x = bytearray(600 << 20)\nfor i in range(0, len(x), 4096): x[i] = 1",
                                           NULL, NULL, &err);
            const korch_exec_result_t *er = ex ? korch_exec_result(ex) : NULL;
            CHECK(er && er->status == KORCH_EXEC_DIED);
            CHECK(er && strstr(er->detail, "signal 9") && strstr(er->detail, "256 MiB"));
            fprintf(stderr, "swarm-launcher: OOM: the kernel seen dead %.1f s after the cell began: %s\n",
                    (s_mono_ms() - t2) / 1e3, er ? er->detail : "?");
            korch_exec_destroy(&ex);
        }
        korch_kernel_destroy(&k);
        korch_launcher_destroy(&l);
        korch_loop_destroy(&loop);
        CHECK(sl_wait_count(d, 0, 0, 20000));
    }

    /* The figures. */
    {
        double sw = sl_median(json_object_get(res, "start_s"));
        double dk = sl_median(json_object_get(dock, "start_s"));
        double sw_rt = json_number_value(json_object_get(res, "exec_ms_p50"));
        double dk_rt = json_number_value(json_object_get(dock, "exec_ms_p50"));
        double all_s = json_number_value(json_object_get(res, "all_started_s"));
        fprintf(stderr,
                "swarm-launcher: kernel start (POST to kernel_info_reply, median): swarm %.2f s, local docker %.2f s "
                "(x%.1f); execute round trip through the gateway: overlay %.2f ms, ipc %.2f ms (x%.2f); %d kernels "
                "at once across 3 nodes in %.1f s: %.2f kernels/s; interrupt %.2f s, restart %.2f s; the whole "
                "peer %.1f s\n",
                sw, dk, dk > 0 ? sw / dk : 0, sw_rt, dk_rt, dk_rt > 0 ? sw_rt / dk_rt : 0, SL_KERNELS, all_s,
                all_s > 0 ? SL_KERNELS / all_s : 0, json_number_value(json_object_get(res, "interrupt_s")),
                json_number_value(json_object_get(res, "restart_s")), all_ms / 1e3);
    }

out:
    if (s.pid > 0)
        serve_stop(&s);
    /* korch is gone: nothing of its instance is left on the manager. */
    if (d)
        CHECK(sl_wait_count(d, 0, 0, 30000));
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
        CHECK(s_delete(d, "networks", SL_NET, 30000));
down:
    s_swarm_done();
    json_decref(nodes);
    json_decref(res);
    json_decref(dock);
    korch_docker_destroy(&d);
    korch_docker_destroy(&d1);
}
