/*  A real 3-node Docker Swarm on this machine (scripts/swarm-up.sh), and the
 *  exact plumbing the swarm launcher will use, through the manager's Engine
 *  API as korch will call it: an internal attachable overlay network, the
 *  connection file (key included) as a swarm secret, one service per kernel
 *  (one replica, restart condition none, placement by the node label
 *  korch.node, hardened: read-only root, no capabilities, uid 1000, init,
 *  memory/CPU/pids limits), the kernel binding tcp on its own task address.
 *  A client service on the overlay (tests/peers/swarm_client.py: real
 *  jupyter_client) executes print(6*7) on each kernel by its task address and
 *  gets 42, and reaches nothing off the overlay. Then one node's engine is stopped and the swarm must give its
 *  task up (desired state shutdown, node down) within seconds. Then
 *  everything is removed (services, secrets, network; swarm-down.sh) and
 *  nothing of ours is left: no namespace, bridge, iptables rule, process,
 *  mount, cgroup or data root. In a run of the suite the cluster is kept
 *  up for the next swarm test instead and the last one takes it down and
 *  checks that (s_swarm_done in swarm_fixture.h).
 *
 *  Figures go to stderr ("swarm: ..."): swarm up / down times, service create
 *  to first kernel_info_reply per node, execute and heartbeat round trips
 *  over the overlay against ZeroMQ over ipc, the time to see a node go.
 *
 *  It owns /run/korch-swarm: a swarm brought up by hand is taken down at the
 *  end (of the last swarm test of the run).
 */
#include "swarm_fixture.h"

#include "korch/media.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define S_NET "korch-swarmtest"
#define S_CLIENT "korch-swarmtest-client"
#define S_STOPPED_NODE 3          /* whose engine is stopped */
#define S_GONE_WITHIN_S 30        /* the swarm must give its task up by then */

/* The host's wall clock, which the containers share (answered_at). */
static double s_wall_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Wait until the service's task reaches one of the states (space-separated);
   the task (new reference) or NULL on timeout. */
static json_t *s_wait_task(korch_docker_t *d, const char *service, const char *states, int timeout_ms)
{
    double end = s_mono_ms() + timeout_ms;
    while (s_mono_ms() < end) {
        json_t *t = s_task(d, service);
        char word[40];
        snprintf(word, sizeof word, " %s ", s_task_state(t));
        char set[200];
        snprintf(set, sizeof set, " %s ", states);
        if (t && strstr(set, word))
            return t;
        json_decref(t);
        usleep(100 * 1000);
    }
    json_t *t = s_task(d, service);
    fprintf(stderr, "task of %s: state '%s' (error '%s'), wanted one of '%s'\n", service, s_task_state(t),
            json_string_value(json_object_get(json_object_get(t, "Status"), "Err")) ?: "", states);
    json_decref(t);
    return NULL;
}

/* The task's address on our network ("10.234.1.5", without the /24). */
static bool s_task_addr(json_t *t, char *buf, size_t len)
{
    size_t i;
    json_t *a;
    json_array_foreach(json_object_get(t, "NetworksAttachments"), i, a) {
        const char *net = json_string_value(json_object_get(json_object_get(json_object_get(a, "Network"), "Spec"),
                                                            "Name"));
        const char *ad = json_string_value(json_array_get(json_object_get(a, "Addresses"), 0));
        if (net && ad && !strcmp(net, S_NET)) {
            snprintf(buf, len, "%s", ad);
            buf[strcspn(buf, "/")] = 0;
            return true;
        }
    }
    return false;
}

/* A connection file for a kernel that binds tcp on every address of its
   container (there is one: the overlay's): fixed ports, a random key. */
static char *s_conn_file(void)
{
    unsigned char raw[16];
    char key[33];
    FILE *f = fopen("/dev/urandom", "rb");
    bool ok = f && fread(raw, 1, sizeof raw, f) == sizeof raw;
    if (f)
        fclose(f);
    if (!ok)
        return NULL;
    for (size_t i = 0; i < sizeof raw; i++)
        snprintf(key + 2 * i, 3, "%02x", raw[i]);
    json_t *c = json_pack("{s:i, s:i, s:i, s:i, s:i, s:s, s:s, s:s, s:s, s:s}", "shell_port", 50001, "iopub_port",
                          50002, "stdin_port", 50003, "control_port", 50004, "hb_port", 50005, "ip", "0.0.0.0",
                          "key", key, "transport", "tcp", "signature_scheme", "hmac-sha256", "kernel_name",
                          "python3");
    char *s = c ? json_dumps(c, JSON_COMPACT) : NULL;
    json_decref(c);
    return s;
}

/* POST /secrets/create; the secret's id into buf. */
static bool s_secret(korch_docker_t *d, const char *name, const char *data, char *buf, size_t len)
{
    char *b64 = korch_b64_encode((const unsigned char *)data, strlen(data));
    json_t *body = b64 ? json_pack("{s:s, s:s, s:{s:s}}", "Name", name, "Data", b64, "Labels", "korch.test", "swarm")
                       : NULL;
    json_t *r = body ? s_api(d, "POST", "/secrets/create", body, 201) : NULL;
    const char *id = json_string_value(json_object_get(r, "ID"));
    if (id)
        snprintf(buf, len, "%s", id);
    json_decref(r);
    json_decref(body);
    free(b64);
    return id != NULL;
}

/* A secret reference: mounted at /run/secrets/file, readable by uid 1000 only. */
static json_t *s_secret_ref(const char *id, const char *name, const char *file)
{
    return json_pack("{s:{s:s, s:s, s:s, s:i}, s:s, s:s}", "File", "Name", file, "UID", "1000", "GID", "1000",
                     "Mode", 0400, "SecretID", id, "SecretName", name);
}

/* POST /services/create (steals spec's container part cs); id into buf. */
static bool s_service(korch_docker_t *d, const char *name, const char *node, json_t *cs, bool hardened, char *buf,
                      size_t len)
{
    char constraint[64];
    snprintf(constraint, sizeof constraint, "node.labels.korch.node==%s", node);
    json_t *res = hardened ? json_pack("{s:{s:I, s:I, s:I}}", "Limits", "MemoryBytes", (json_int_t)1 << 30,
                                       "NanoCPUs", (json_int_t)1000000000, "Pids", (json_int_t)256)
                           : json_object();
    json_t *spec = json_pack("{s:s, s:{s:s}, s:{s:o, s:o, s:{s:s}, s:{s:[s]}, s:[{s:s}]}, s:{s:{s:i}}, s:{s:s}}",
                             "Name", name, "Labels", "korch.test", "swarm", "TaskTemplate", "ContainerSpec", cs,
                             "Resources", res, "RestartPolicy", "Condition", "none", "Placement", "Constraints",
                             constraint, "Networks", "Target", S_NET, "Mode", "Replicated", "Replicas", 1,
                             "EndpointSpec", "Mode", "dnsrr");
    json_t *r = spec ? s_api(d, "POST", "/services/create", spec, 201) : NULL;
    const char *id = json_string_value(json_object_get(r, "ID"));
    if (id)
        snprintf(buf, len, "%s", id);
    json_decref(r);
    json_decref(spec);
    return id != NULL;
}

/* The service's logs (stdout and stderr), demultiplexed: a new string. */
static char *s_logs(korch_docker_t *d, const char *id)
{
    char path[200];
    snprintf(path, sizeof path, "/services/%s/logs?stdout=1&stderr=1", id);
    korch_err_t err = {0};
    korch_docker_reply_t r;
    if (korch_docker_request(d, "GET", path, NULL, &r, &err) != KORCH_OK)
        return NULL;
    char *out = calloc(1, r.body_len + 1);
    size_t w = 0;
    /* Without a TTY each chunk is [stream, 0, 0, 0, size (big-endian u32)] + data. */
    for (size_t p = 0; out && p + 8 <= r.body_len;) {
        const unsigned char *h = (const unsigned char *)r.body + p;
        size_t n = (size_t)h[4] << 24 | (size_t)h[5] << 16 | (size_t)h[6] << 8 | h[7];
        if (p + 8 + n > r.body_len)
            break;
        memcpy(out + w, r.body + p + 8, n);
        w += n;
        p += 8 + n;
    }
    korch_docker_reply_clear(&r);
    return out;
}

TEST_T(swarm_cluster, 900)
{
    korch_docker_t *d = NULL;
    korch_err_t err = {0};
    json_t *nodes = NULL, *t = NULL;
    char *script = NULL, *logs = NULL;
    char host[256], image[256], sids[S_NODES][80], kids[S_NODES][80], client_id[80] = "";
    double created_at[S_NODES];
    memset(sids, 0, sizeof sids);
    memset(kids, 0, sizeof kids);

    double t0 = s_mono_ms();
    if (!CHECK_EQ(s_script("swarm-up.sh", "3", 600), 0))
        goto down;
    double up_ms = s_mono_ms() - t0;
    /* Up again: nothing to do, and nothing breaks. */
    t0 = s_mono_ms();
    if (!CHECK_EQ(s_script("swarm-up.sh", "3", 120), 0))
        goto down;
    double up2_ms = s_mono_ms() - t0;
    fprintf(stderr, "swarm: up %.1f s, up again %.1f s\n", up_ms / 1e3, up2_ms / 1e3);
    if (!CHECK(s_env("DOCKER_HOST", host, sizeof host)) || !CHECK(s_env("KORCH_SWARM_IMAGE", image, sizeof image)))
        goto down;
    d = korch_docker_new(NULL, host, &err);
    if (!CHECK(d))
        goto down;

    /* Three nodes, ready, labelled node1..node3. */
    nodes = s_api(d, "GET", "/nodes", NULL, 200);
    if (!CHECK_EQ(json_array_size(nodes), S_NODES))
        goto out;
    for (int i = 1; i <= S_NODES; i++) {
        char want[16];
        snprintf(want, sizeof want, "node%d", i);
        size_t k;
        json_t *n;
        int hits = 0;
        json_array_foreach(nodes, k, n) {
            const char *id = json_string_value(json_object_get(n, "ID"));
            const char *st = json_string_value(json_object_get(json_object_get(n, "Status"), "State"));
            if (!strcmp(s_node_label(nodes, id), want) && st && !strcmp(st, "ready"))
                hits++;
        }
        CHECK_EQ(hits, 1);
    }

    /* The overlay: internal (no egress), attachable (korch will attach). */
    json_t *net = json_pack("{s:s, s:s, s:b, s:b, s:{s:s}}", "Name", S_NET, "Driver", "overlay", "Internal", 1,
                            "Attachable", 1, "Labels", "korch.test", "swarm");
    json_t *nr = s_api(d, "POST", "/networks/create", net, 201);
    json_decref(net);
    if (!CHECK(nr))
        goto out;
    json_decref(nr);

    /* One connection file per kernel, as a secret. */
    json_t *client_secrets = json_array();
    for (int i = 0; i < S_NODES; i++) {
        char name[64];
        snprintf(name, sizeof name, "korch-swarmtest-k%d", i + 1);
        char *conn = s_conn_file();
        bool ok = CHECK(conn) && CHECK(s_secret(d, name, conn, sids[i], sizeof sids[i]));
        free(conn);
        if (!ok) {
            json_decref(client_secrets);
            goto out;
        }
        json_array_append_new(client_secrets, s_secret_ref(sids[i], name, name));
    }

    /* The client first, on node 1: it waits for the kernels' tasks in DNS. */
    char path[512];
    snprintf(path, sizeof path, "%s/tests/peers/swarm_client.py", korch_test_root());
    script = korch_read_file(path, 1 << 20, NULL, &err);
    if (!CHECK(script)) {
        json_decref(client_secrets);
        goto out;
    }
    /* Off the overlay but reachable from every node: the registry. */
    char outside[128];
    if (!CHECK(s_env("KORCH_SWARM_REGISTRY", outside, sizeof outside))) {
        json_decref(client_secrets);
        goto out;
    }
    json_t *cargs = json_pack("[s, s, s, s, s]", "python3", "-c", script, "120", outside);
    for (int i = 0; i < S_NODES; i++) {
        char a[128];
        snprintf(a, sizeof a, "korch-swarmtest-k%d:korch-swarmtest-k%d", i + 1, i + 1);
        json_array_append_new(cargs, json_string(a));
    }
    json_t *ccs = json_pack("{s:s, s:o, s:o, s:s}", "Image", image, "Command", cargs, "Secrets", client_secrets,
                            "User", "1000:1000");
    if (!CHECK(s_service(d, S_CLIENT, "node1", ccs, false, client_id, sizeof client_id)))
        goto out;
    t = s_wait_task(d, S_CLIENT, "running complete failed", 60000);
    if (!CHECK(t))
        goto out;
    json_decref(t);
    t = NULL;

    /* The kernels, one per node: the secret copied to /tmp (ipykernel
       rewrites its connection file), tcp on the task's own address. */
    const char *kcmd = "cp /run/secrets/kernel.json /tmp/kernel.json && "
                       "exec python3 -m ipykernel_launcher -f /tmp/kernel.json --ip=\"$(hostname -i)\"";
    for (int i = 0; i < S_NODES; i++) {
        char name[64], node[16];
        snprintf(name, sizeof name, "korch-swarmtest-k%d", i + 1);
        snprintf(node, sizeof node, "node%d", i + 1);
        json_t *cs = json_pack("{s:s, s:[s, s, s], s:s, s:b, s:b, s:[s], s:[{s:s, s:s}], s:[o]}", "Image", image,
                               "Command", "/bin/sh", "-c", kcmd, "User", "1000:1000", "ReadOnly", 1, "Init", 1,
                               "CapabilityDrop", "ALL", "Mounts", "Type", "tmpfs", "Target", "/tmp", "Secrets",
                               s_secret_ref(sids[i], name, "kernel.json"));
        created_at[i] = s_wall_s();
        if (!CHECK(s_service(d, name, node, cs, true, kids[i], sizeof kids[i])))
            goto out;
    }

    /* Each kernel's task runs on its node, with an address on the overlay. */
    char addrs[S_NODES][64];
    for (int i = 0; i < S_NODES; i++) {
        char name[64], want[16];
        snprintf(name, sizeof name, "korch-swarmtest-k%d", i + 1);
        snprintf(want, sizeof want, "node%d", i + 1);
        t = s_wait_task(d, name, "running", 60000);
        if (!CHECK(t))
            goto out;
        CHECK_STREQ(s_node_label(nodes, json_string_value(json_object_get(t, "NodeID"))), want);
        addrs[i][0] = 0;
        CHECK(s_task_addr(t, addrs[i], sizeof addrs[i]));
        json_decref(t);
        t = NULL;
    }

    /* The client's verdict, and what it saw. */
    t = s_wait_task(d, S_CLIENT, "complete failed rejected", 150000);
    CHECK(t);
    CHECK_STREQ(s_task_state(t), "complete");
    logs = s_logs(d, client_id);
    if (!CHECK(logs))
        goto out;
    int answered = 0;
    bool egress_seen = false;
    for (char *line = logs, *nl; line && *line; line = nl ? nl + 1 : NULL) {
        nl = strchr(line, '\n');
        if (nl)
            *nl = 0;
        json_t *j = json_loads(line, 0, NULL);
        const char *k = json_string_value(json_object_get(j, "kernel"));
        if (json_object_get(j, "ipc_ms_p50")) {
            fprintf(stderr, "swarm: zeromq ping-pong over ipc in one container: %.3f ms\n",
                    json_real_value(json_object_get(j, "ipc_ms_p50")));
            /* No egress from the internal overlay, though the node reaches it. */
            const char *eg = json_string_value(json_object_get(j, "egress"));
            CHECK(eg && !strncmp(eg, "unreachable", 11));
            fprintf(stderr, "swarm: egress to %s from the overlay: %s\n", outside, eg ? eg : "?");
            egress_seen = true;
        }
        for (int i = 0; k && i < S_NODES; i++) {
            char name[64];
            snprintf(name, sizeof name, "korch-swarmtest-k%d", i + 1);
            if (strcmp(k, name))
                continue;
            if (json_object_get(j, "error"))
                fprintf(stderr, "client: %s: %s\n", k, json_string_value(json_object_get(j, "error")));
            CHECK_STREQ(json_string_value(json_object_get(j, "stdout")), "42\n");
            CHECK_STREQ(json_string_value(json_object_get(j, "status")), "ok");
            /* The address DNS gave (tasks.NAME) is the task's, as the API says. */
            CHECK_STREQ(json_string_value(json_object_get(j, "addr")), addrs[i]);
            double start_s = json_real_value(json_object_get(j, "answered_at")) - created_at[i];
            double dns_s = json_real_value(json_object_get(j, "resolved_at")) - created_at[i];
            CHECK_GT(start_s, 0);
            CHECK_LT(start_s, 90);
            fprintf(stderr,
                    "swarm: kernel on node%d (%s%s): service create -> tasks.NAME resolves %.2f s, "
                    "-> kernel_info_reply %.2f s, execute pass %.2f ms, heartbeat %.3f ms\n",
                    i + 1, addrs[i], i == 0 ? ", the client's node" : ", another node", dns_s, start_s,
                    json_real_value(json_object_get(j, "pass_ms_p50")),
                    json_real_value(json_object_get(j, "hb_ms_p50")));
            answered++;
        }
        json_decref(j);
    }
    if (!CHECK_EQ(answered, S_NODES) || !CHECK(egress_seen))
        fprintf(stderr, "client's logs:\n%s\n", logs);
    json_decref(t);
    t = NULL;

    /* A node's engine stops: the swarm gives its task up (desired state
       shutdown) and marks the node down. The task's observed state stays
       "running" (its last report): a launcher must look at both. */
    {
        char pidf[128], pid_s[32] = "", name[64];
        snprintf(pidf, sizeof pidf, S_RUN "/node%d/dockerd.pid", S_STOPPED_NODE);
        snprintf(name, sizeof name, "korch-swarmtest-k%d", S_STOPPED_NODE);
        FILE *f = fopen(pidf, "r");
        if (f) {
            if (!fgets(pid_s, sizeof pid_s, f))
                pid_s[0] = 0;
            fclose(f);
        }
        pid_t pid = (pid_t)strtol(pid_s, NULL, 10);
        json_t *k = s_task(d, name);
        char node_id[80];
        snprintf(node_id, sizeof node_id, "%s", json_string_value(json_object_get(k, "NodeID")) ?: "");
        json_decref(k);
        if (!CHECK_GT(pid, 1) || !CHECK_EQ(kill(pid, SIGTERM), 0))
            goto out;
        double stop = s_mono_ms(), given_up = -1, down = -1;
        while (s_mono_ms() - stop < S_GONE_WITHIN_S * 1e3 && (given_up < 0 || down < 0)) {
            k = s_task(d, name);
            const char *ds = json_string_value(json_object_get(k, "DesiredState"));
            if (given_up < 0 && ((ds && strcmp(ds, "running")) || (k && strcmp(s_task_state(k), "running"))))
                given_up = s_mono_ms() - stop;
            json_decref(k);
            char np[128];
            snprintf(np, sizeof np, "/nodes/%s", node_id);
            json_t *n = s_api(d, "GET", np, NULL, 200);
            const char *ns = json_string_value(json_object_get(json_object_get(n, "Status"), "State"));
            if (down < 0 && ns && !strcmp(ns, "down"))
                down = s_mono_ms() - stop;
            json_decref(n);
            usleep(100 * 1000);
        }
        CHECK_GE(given_up, 0);
        CHECK_GE(down, 0);
        fprintf(stderr, "swarm: node%d's engine stopped: task given up after %.1f s, node down after %.1f s\n",
                S_STOPPED_NODE, given_up / 1e3, down / 1e3);
    }

out:
    /* Services, secrets, the network: removed through the API, and gone. */
    if (d) {
        if (client_id[0])
            CHECK(s_delete(d, "services", client_id, 10000));
        for (int i = 0; i < S_NODES; i++)
            if (kids[i][0])
                CHECK(s_delete(d, "services", kids[i], 10000));
        for (int i = 0; i < S_NODES; i++)
            if (sids[i][0])
                CHECK(s_delete(d, "secrets", sids[i], 10000));
        CHECK(s_delete(d, "networks", S_NET, 30000));
        json_t *left = s_list(d, "services", "label", "korch.test=swarm");
        CHECK_EQ(json_array_size(left), 0);
        json_decref(left);
        left = s_list(d, "secrets", "label", "korch.test=swarm");
        CHECK_EQ(json_array_size(left), 0);
        json_decref(left);
        /* The live nodes remove their task containers. */
        for (int i = 1; i <= S_NODES; i++) {
            char var[40], h[256];
            snprintf(var, sizeof var, "KORCH_SWARM_NODE%d_HOST", i);
            if (i == S_STOPPED_NODE || !s_env(var, h, sizeof h))
                continue;
            double end = s_mono_ms() + 20000;
            while (s_containers(h) != 0 && s_mono_ms() < end)
                usleep(200 * 1000);
            CHECK_EQ(s_containers(h), 0);
        }
    }
down:
    s_swarm_done();
    json_decref(t);
    json_decref(nodes);
    free(logs);
    free(script);
    korch_docker_destroy(&d);
}

/* ======================================================================
 *  swarm_launcher: `korch serve --launcher swarm` on the same kind of
 *  cluster, with real kernels, end to end.
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
 * ====================================================================== */

#include "serve_fixture.h"
#include "korch/swarm.h"
#include "korch/kernel.h"
#include "korch/loop.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/wait.h>

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
