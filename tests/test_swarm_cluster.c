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
