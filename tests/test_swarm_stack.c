/*  docker-compose.yml as a Docker Swarm stack, on the real 3-node test swarm
 *  (scripts/swarm-up.sh, which also builds the korch image from this
 *  checkout and publishes it with the kernel image in the cluster's
 *  registry): `docker stack deploy -c docker-compose.yml korch` exactly as
 *  docs/launchers.md tells a user, with only the variables the file documents.
 *
 *  Then, from the host (outside the swarm, through the port published on
 *  the manager's address): korch serve answers; a kernel started through
 *  its REST API is a swarm service running on a node; two executes over
 *  the websocket share state; a matplotlib PNG comes back; the agent API
 *  puts files into its session's kernel (at creation and by PUT) and gets
 *  what the kernel wrote. korch's container is killed (docker kill, SIGKILL,
 *  on its node): swarm starts a new task, which re-adopts the kernel (same
 *  id, same service, its variables kept) through its stable instance and
 *  runtime volume. `docker stack rm korch`: korch's SIGTERM path removes
 *  its kernels, so no korch service, kernel service, secret or container is
 *  left on any node. swarm-down.sh then leaves nothing on the machine
 *  (this is the last swarm test of the suite: s_swarm_done).
 *
 *  Figures on stderr ("swarm-stack: ..."): deploy to answering, kernel
 *  start, kill to re-adopted and answering, stack rm to nothing left.
 */
#include "swarm_fixture.h"
#include "serve_fixture.h"

#include <signal.h>
#include <sys/stat.h>

#define ST_STACK "korch"
#define ST_SERVICE "korch_serve"
#define ST_NET "korch-kernels"
#define ST_PORT "8888"

/* The stack client peer; its JSON line (new), NULL when it printed none. */
static json_t *st_peer(const char *url, const char *token, const char *mode, const char *arg, int timeout_s)
{
    const char *argv[] = {PY, serve_peer("stack_client.py"), mode, url, token, arg, NULL};
    return serve_peer_json(argv, timeout_s);
}

/* argv[0..n) then args (NULL-ended), run: its status, stdout into *out
   when out is given; what it printed goes to stderr when it failed. */
static int st_run(const char **argv, int n, const char *const *args, char **out, int timeout_s)
{
    for (int i = 0; args[i] && n < 15; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    char *o = NULL, *e = NULL;
    int st = korch_test_run(argv, NULL, &o, &e, timeout_s);
    if (st != 0)
        fprintf(stderr, "%s %s: status %d\n%s%s", argv[0], args[0], st, o ? o : "", e ? e : "");
    if (out)
        *out = o;
    else
        free(o);
    free(e);
    return st;
}

/* `docker ARGS...` against the manager (DOCKER_HOST is set); its status. */
static int st_docker(const char *const *args, char **out, int timeout_s)
{
    const char *argv[16] = {"docker"};
    return st_run(argv, 1, args, out, timeout_s);
}

/* korch's last log lines, for a failure's context. */
static void st_korch_logs(void)
{
    const char *argv[] = {"docker", "service", "logs", "--tail", "40", ST_SERVICE, NULL};
    char *o = NULL, *e = NULL;
    korch_test_run(argv, NULL, &o, &e, 30);
    fprintf(stderr, "  --- docker service logs %s ---\n%s%s  ---\n", ST_SERVICE, o ? o : "", e ? e : "");
    free(o);
    free(e);
}

/* The running task of korch's service: its id and node id (false if none). */
static bool st_korch_task(korch_docker_t *d, char *id, size_t idlen, char *node, size_t nlen)
{
    json_t *tasks = s_list(d, "tasks", "service", ST_SERVICE);
    bool found = false;
    size_t i;
    json_t *t;
    json_array_foreach(tasks, i, t) {
        if (!found && !strcmp(s_task_state(t), "running") &&
            !strcmp(json_string_value(json_object_get(t, "DesiredState")) ?: "", "running")) {
            snprintf(id, idlen, "%s", json_string_value(json_object_get(t, "ID")) ?: "");
            snprintf(node, nlen, "%s", json_string_value(json_object_get(t, "NodeID")) ?: "");
            found = true;
        }
    }
    json_decref(tasks);
    return found;
}

/* What of the stack and of korch's kernels is still there: services of
   the stack or labelled korch.instance, korch's secrets, containers on any
   node. A description into buf, or false when nothing is. */
static bool st_left(korch_docker_t *d, char *buf, size_t len)
{
    json_t *a = s_list(d, "services", "label", "com.docker.stack.namespace=" ST_STACK);
    json_t *b = s_list(d, "services", "label", "korch.instance");
    json_t *c = s_list(d, "secrets", "label", "korch.instance");
    bool left = true;
    if (!a || !b || !c)
        snprintf(buf, len, "the manager did not answer");
    else if (json_array_size(a))
        snprintf(buf, len, "%zu service(s) of the stack", json_array_size(a));
    else if (json_array_size(b))
        snprintf(buf, len, "%zu kernel service(s)", json_array_size(b));
    else if (json_array_size(c))
        snprintf(buf, len, "%zu kernel secret(s)", json_array_size(c));
    else
        left = false;
    for (int i = 1; !left && i <= S_NODES; i++) {
        char var[40], host[256];
        snprintf(var, sizeof var, "KORCH_SWARM_NODE%d_HOST", i);
        long n = s_env(var, host, sizeof host) ? s_containers(host) : -1;
        if (n != 0) {
            snprintf(buf, len, "%ld container(s) on node %d", n, i);
            left = true;
        }
    }
    json_decref(a);
    json_decref(b);
    json_decref(c);
    return left;
}

static bool st_wait_nothing_left(korch_docker_t *d, int timeout_ms, char *buf, size_t len)
{
    double end = s_mono_ms() + timeout_ms;
    while (st_left(d, buf, len)) {
        if (s_mono_ms() > end)
            return false;
        usleep(250 * 1000);
    }
    return true;
}

/* The stack's and korch's leftovers of a crashed earlier run, on a swarm
   that is still up. */
static void st_clean(korch_docker_t *d)
{
    char what[512];
    const char *rm[] = {"stack", "rm", ST_STACK, NULL};
    st_docker(rm, NULL, 60);
    json_t *old = s_list(d, "services", "label", "korch.instance");
    size_t i;
    json_t *x;
    json_array_foreach(old, i, x) s_delete(d, "services", json_string_value(json_object_get(x, "ID")), 10000);
    json_decref(old);
    old = s_list(d, "secrets", "label", "korch.instance");
    json_array_foreach(old, i, x) s_delete(d, "secrets", json_string_value(json_object_get(x, "ID")), 10000);
    json_decref(old);
    st_wait_nothing_left(d, 30000, what, sizeof what);
}

TEST_T(swarm_stack, 900)
{
    korch_docker_t *d = NULL, *d1 = NULL;
    korch_err_t err = {0};
    json_t *nodes = NULL, *j = NULL;
    char host[256], kimage[256], image[256], sock[256], addr[64], h1[256];
    char token[33], url[128], kid[80] = "", what[512];
    bool deployed = false;

    double t_up = s_mono_ms();
    if (!CHECK_EQ(s_script("swarm-up.sh", "3", 900), 0))
        goto down;
    t_up = s_mono_ms() - t_up;
    if (!CHECK(s_env("DOCKER_HOST", host, sizeof host)) || !CHECK(s_env("KORCH_SWARM_IMAGE", kimage, sizeof kimage)) ||
        !CHECK(s_env("KORCH_SWARM_KORCH_IMAGE", image, sizeof image)) ||
        !CHECK(s_env("KORCH_SWARM_MANAGER_SOCK", sock, sizeof sock)) ||
        !CHECK(s_env("KORCH_SWARM_MANAGER_ADDR", addr, sizeof addr)) ||
        !CHECK(s_env("KORCH_SWARM_NODE1_HOST", h1, sizeof h1)))
        goto down;
    setenv("DOCKER_HOST", host, 1);
    d = korch_docker_new(NULL, host, &err);
    d1 = korch_docker_new(NULL, h1, &err);
    if (!CHECK(d) || !CHECK(d1))
        goto down;
    nodes = s_api(d, "GET", "/nodes", NULL, 200);
    st_clean(d);

    /* The kernels' network, made before the stack as docs/launchers.md says
       (unencrypted: this machine's kernel has no ESP, see docs/launchers.md). */
    {
        korch_docker_reply_t r0 = {0};
        long have = korch_docker_request(d, "GET", "/networks/" ST_NET, NULL, &r0, NULL) == KORCH_OK ? r0.status : 0;
        korch_docker_reply_clear(&r0);
        if (have != 200) {
            json_t *body = json_pack("{s:s, s:s, s:b, s:b, s:b}", "Name", ST_NET, "Driver", "overlay", "Internal", 1,
                                     "Attachable", 1, "CheckDuplicate", 1);
            json_t *r = s_api(d, "POST", "/networks/create", body, 201);
            json_decref(body);
            if (!CHECK(r))
                goto out;
            json_decref(r);
        }
    }

    /* Deploy, with the variables the file documents. */
    {
        FILE *f = fopen("/dev/urandom", "r");
        unsigned char raw[16] = {0};
        CHECK(f && fread(raw, 1, sizeof raw, f) == sizeof raw);
        if (f)
            fclose(f);
        for (int i = 0; i < 16; i++)
            snprintf(token + 2 * i, 3, "%02x", raw[i]);
        snprintf(url, sizeof url, "http://%s:%s/", addr, ST_PORT);
        setenv("KORCH_IMAGE", image, 1);
        setenv("KORCH_KERNEL_IMAGE", kimage, 1);
        setenv("KORCH_TOKEN", token, 1);
        setenv("KORCH_DOCKER_SOCK", sock, 1);
        setenv("KORCH_SWARM_ENCRYPTED", "0", 1);
        setenv("KORCH_PORT", ST_PORT, 1);
        /* the agent API needs a model to open a session; no turn runs */
        setenv("KORCH_LLM", "openai:gpt-4o-mini", 1);
        setenv("OPENAI_API_KEY", "sk-test-not-called", 1);
        char file[PATH_MAX];
        snprintf(file, sizeof file, "%s/docker-compose.yml", korch_test_root());
        const char *dep[] = {"stack", "deploy", "-c", file, ST_STACK, NULL};
        double t0 = s_mono_ms();
        if (!CHECK_EQ(st_docker(dep, NULL, 120), 0))
            goto out;
        deployed = true;
        j = st_peer(url, token, "wait", "180", 200);
        if (!CHECK(json_is_true(json_object_get(j, "ok")))) {
            st_korch_logs();
            goto out;
        }
        json_decref(j);
        j = NULL;
        fprintf(stderr, "swarm-stack: swarm-up (korch image built and published) %.1f s; stack deploy to korch "
                        "answering on %s %.1f s\n",
                t_up / 1e3, url, (s_mono_ms() - t0) / 1e3);
    }

    /* korch runs on the manager, the single-host service not at all. */
    char task0[80] = "", knode[80] = "";
    if (!CHECK(st_korch_task(d, task0, sizeof task0, knode, sizeof knode)))
        goto out;
    CHECK_STREQ(s_node_label(nodes, knode), "node1");
    {
        json_t *single = s_list(d, "tasks", "service", "korch_korch");
        CHECK_EQ(json_array_size(single), 0);
        json_decref(single);
    }

    /* A kernel through the REST API: a service on a node; state; a PNG. */
    char ksvc[80] = "";
    {
        j = st_peer(url, token, "up", NULL, 300);
        if (!CHECK(json_is_true(json_object_get(j, "ok")))) {
            st_korch_logs();
            goto out;
        }
        snprintf(kid, sizeof kid, "%s", json_string_value(json_object_get(j, "kernel")) ?: "");
        double start_s = json_number_value(json_object_get(j, "start_s"));
        json_decref(j);
        j = NULL;
        char label[160];
        snprintf(label, sizeof label, "korch.kernel_id=%s", kid);
        json_t *svcs = s_list(d, "services", "label", label);
        CHECK_EQ(json_array_size(svcs), 1);
        snprintf(ksvc, sizeof ksvc, "%s", json_string_value(json_object_get(json_array_get(svcs, 0), "ID")) ?: "");
        json_decref(svcs);
        json_t *t = s_task(d, ksvc);
        const char *on = s_node_label(nodes, json_string_value(json_object_get(t, "NodeID")));
        CHECK_STREQ(s_task_state(t), "running");
        CHECK(!strncmp(on, "node", 4));
        fprintf(stderr, "swarm-stack: a kernel through the stack's korch: started in %.2f s, on %s\n", start_s, on);
        json_decref(t);
    }

    /* The agent API's files on that swarm kernel. */
    {
        j = st_peer(url, token, "files", NULL, 400);
        if (!CHECK(json_is_true(json_object_get(j, "ok"))))
            st_korch_logs();
        json_decref(j);
        j = NULL;
    }

    /* korch's container killed on its node: swarm restarts the task, which
       re-adopts the kernel. */
    {
        char path[300], cid[80] = "";
        snprintf(path, sizeof path, "com.docker.swarm.task.id=%s", task0);
        json_t *cs = s_list(d1, "containers/json", "label", path);
        snprintf(cid, sizeof cid, "%s", json_string_value(json_object_get(json_array_get(cs, 0), "Id")) ?: "");
        json_decref(cs);
        if (!CHECK(cid[0]))
            goto out;
        snprintf(path, sizeof path, "/containers/%s/kill?signal=KILL", cid);
        double t0 = s_mono_ms();
        json_t *r = s_api(d1, "POST", path, NULL, 204);
        if (!CHECK(r))
            goto out;
        json_decref(r);
        char task1[80] = "";
        double end = s_mono_ms() + 120000;
        while (s_mono_ms() < end) {
            if (st_korch_task(d, task1, sizeof task1, knode, sizeof knode) && strcmp(task1, task0))
                break;
            task1[0] = 0;
            usleep(250 * 1000);
        }
        if (!CHECK(task1[0])) {
            st_korch_logs();
            goto out;
        }
        j = st_peer(url, token, "wait", "120", 150);
        CHECK(json_is_true(json_object_get(j, "ok")));
        json_decref(j);
        double back_ms = s_mono_ms() - t0;
        j = st_peer(url, token, "check", kid, 200);
        if (!CHECK(json_is_true(json_object_get(j, "ok"))))
            st_korch_logs();
        json_decref(j);
        j = NULL;
        /* the same service: adopted, not started again */
        char label[160];
        snprintf(label, sizeof label, "korch.kernel_id=%s", kid);
        json_t *svcs = s_list(d, "services", "label", label);
        CHECK_EQ(json_array_size(svcs), 1);
        CHECK_STREQ(json_string_value(json_object_get(json_array_get(svcs, 0), "ID")) ?: "", ksvc);
        json_decref(svcs);
        fprintf(stderr, "swarm-stack: korch's container killed: a new task answering after %.1f s, the kernel "
                        "re-adopted with its state\n",
                back_ms / 1e3);
    }

    /* docker stack rm: korch's SIGTERM removes its kernels; nothing left. */
    {
        const char *rm[] = {"stack", "rm", ST_STACK, NULL};
        double t0 = s_mono_ms();
        CHECK_EQ(st_docker(rm, NULL, 60), 0);
        deployed = false;
        if (!CHECK(st_wait_nothing_left(d, 90000, what, sizeof what)))
            fprintf(stderr, "after docker stack rm: %s\n", what);
        fprintf(stderr, "swarm-stack: docker stack rm to nothing left (services, kernels, secrets, containers): "
                        "%.1f s\n",
                (s_mono_ms() - t0) / 1e3);
        /* What stays by design: the network made before the stack and the
           named volumes; both go now, so nothing uses them. */
        CHECK(s_delete(d, "networks", ST_NET, 30000));
        CHECK(s_delete(d1, "volumes", ST_STACK "_runtime", 30000));
        CHECK(s_delete(d1, "volumes", ST_STACK "_sessions", 30000));
    }

out:
    if (deployed) {
        st_korch_logs();
        st_clean(d);
    }
    if (d)
        s_delete(d, "networks", ST_NET, 30000);
down:
    unsetenv("DOCKER_HOST");
    s_swarm_done();
    const char *vars[] = {"KORCH_IMAGE", "KORCH_KERNEL_IMAGE", "KORCH_TOKEN", "KORCH_DOCKER_SOCK",
                          "KORCH_SWARM_ENCRYPTED", "KORCH_PORT", "KORCH_LLM", "OPENAI_API_KEY", NULL};
    for (int i = 0; vars[i]; i++)
        unsetenv(vars[i]);
    json_decref(nodes);
    json_decref(j);
    korch_docker_destroy(&d);
    korch_docker_destroy(&d1);
}

/* `docker-compose ARGS...` on the host's engine for project proj: its
   status, stdout into *out when out is given. */
static int st_compose(const char *file, const char *proj, const char *const *args, char **out, int timeout_s)
{
    const char *argv[16] = {"docker-compose", "-f", file, "-p", proj};
    return st_run(argv, 5, args, out, timeout_s);
}

/* The same file under Debian's docker-compose 1.29 on one host (its .env
   picks the single-host service): `docker-compose up` runs korch kernel in
   a container of the host's engine, whose kernel answers through the
   connection file on the host; the stack's serve does not run; `down`
   leaves no container of the project or of its kernel. */
TEST_T(swarm_stack_file_under_docker_compose, 240)
{
    char file[PATH_MAX], dir[] = "/tmp/korch-compose-XXXXXX", proj[64], conn[PATH_MAX];
    const char *old_rt = getenv("KORCH_RUNTIME_DIR");
    char saved[PATH_MAX] = "";
    if (old_rt)
        snprintf(saved, sizeof saved, "%s", old_rt);
    snprintf(file, sizeof file, "%s/docker-compose.yml", korch_test_root());
    snprintf(proj, sizeof proj, "korchtest%d", (int)getpid());
    if (!CHECK_EQ(s_script("build-korch-image.sh", NULL, 600), 0) || !CHECK(mkdtemp(dir) != NULL))
        return;
    unsetenv("DOCKER_HOST");
    setenv("KORCH_RUNTIME_DIR", dir, 1); /* the same path in korch's container and here */
    snprintf(conn, sizeof conn, "%s/compose.json", dir);
    const char *up[] = {"up", "-d", NULL};
    if (CHECK_EQ(st_compose(file, proj, up, NULL, 120), 0)) {
        struct stat sb;
        double end = s_mono_ms() + 60000;
        while ((stat(conn, &sb) != 0 || sb.st_size == 0) && s_mono_ms() < end)
            usleep(200 * 1000);
        const char *ex[] = {korch_test_korch_bin(), "exec", "--existing", conn, "-c", "print(6 * 7)", NULL};
        char *out = NULL, *err = NULL;
        CHECK_EQ(korch_test_run(ex, NULL, &out, &err, 90), 0);
        CHECK_STREQ(out, "42\n");
        if (!out || strcmp(out, "42\n"))
            fprintf(stderr, "korch exec: %s\n", err ? err : "");
        free(out);
        free(err);
        out = NULL;
        const char *ps[] = {"ps", "--services", "--filter", "status=running", NULL};
        CHECK_EQ(st_compose(file, proj, ps, &out, 60), 0);
        CHECK_STREQ(out, "korch\n");
        free(out);
    }
    const char *down[] = {"down", "-v", NULL};
    CHECK_EQ(st_compose(file, proj, down, NULL, 120), 0);
    /* nothing of the project, nor a kernel container of this runtime dir */
    char filt[128], *left = NULL;
    snprintf(filt, sizeof filt, "label=com.docker.compose.project=%s", proj);
    const char *pa[] = {"docker", "ps", "-aq", "--filter", filt, NULL};
    CHECK_EQ(korch_test_run(pa, NULL, &left, NULL, 30), 0);
    CHECK_STREQ(left ? left : "", "");
    free(left);
    left = NULL;
    const char *ka[] = {"docker", "ps", "-a", "--filter", "label=korch.instance=compose", "--format",
                        "{{.Label \"korch.runtime_dir\"}}", NULL};
    CHECK_EQ(korch_test_run(ka, NULL, &left, NULL, 30), 0);
    CHECK(!left || !strstr(left, dir));
    free(left);
    if (saved[0])
        setenv("KORCH_RUNTIME_DIR", saved, 1);
    else
        unsetenv("KORCH_RUNTIME_DIR");
    const char *rm[] = {"rm", "-rf", dir, NULL};
    korch_test_run(rm, NULL, NULL, NULL, 30);
}
