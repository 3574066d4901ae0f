/*  The swarm's row of the files matrix: tests/peers/files_matrix.py (every
 *  way a file arrives or leaves, the server restarted between its halves),
 *  which tests/test_server_files.c runs for local, sandbox and docker, here
 *  with `korch serve --launcher swarm` on the test swarm (tests/
 *  swarm_fixture.h; its lock is the runner's). korch reaches the kernels'
 *  overlay from the network namespace of an attachable "anchor" container
 *  on node 1, as swarm_launcher does (tests/test_swarm_launcher.c); the
 *  scripted model (tests/peers/llm_server.py, scenario "usercode") and the
 *  peer run there too. */
#include "serve_fixture.h"
#include "swarm_fixture.h"
#include "korch/launcher.h"
#include "korch/loop.h"
#include "korch/swarm.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>

#define SF_NET "korch-swarmtest-files"
#define SF_ANCHOR "korch-swarmtest-files-anchor"

/* korch's services on the manager, polled until none is left. */
static bool sf_none_left(korch_docker_t *d, int timeout_ms)
{
    double end = s_mono_ms() + timeout_ms;
    size_t n = 0;
    do {
        json_t *l = s_list(d, "services", "label", "korch.instance");
        n = json_array_size(l);
        json_decref(l);
        if (!n)
            return true;
        usleep(200 * 1000);
    } while (s_mono_ms() < end);
    fprintf(stderr, "swarm files: %zu korch service(s) left\n", n);
    return false;
}

/* One korch serve on dir and one half of the matrix; true when it held. */
static bool sf_phase(const char *image, const char *dir, const char *phase)
{
    const char *args[] = {"--launcher", "swarm", "--image", image, "--agent-dir", dir, "--pool", "0",
                          "--llm", "openai:gpt-4o-mini", NULL};
    serve_t s;
    if (!CHECK(serve_start_args(&s, args)))
        return false;
    const char *argv[] = {PY, serve_peer("files_matrix.py"), "--url", s.line, "--agent-dir", dir, phase, NULL};
    double t0 = s_mono_ms();
    json_t *j = serve_peer_json(argv, 400);
    bool ok = CHECK(json_is_true(json_object_get(j, "ok")));
    char *text = json_dumps(json_object_get(j, ok ? "details" : "failures"), JSON_COMPACT);
    fprintf(stderr, "  swarm %s (%.1f s): %s\n", phase, (s_mono_ms() - t0) / 1e3, text ? text : "no answer");
    if (!ok)
        serve_log_tail(&s);
    free(text);
    json_decref(j);
    serve_stop(&s);
    return ok;
}

TEST_T(swarm_files_listing, 900)
{
    korch_docker_t *d = NULL, *d1 = NULL;
    korch_err_t err = {0};
    char host[256], image[256], h1[256], anchor_id[80] = "", line[64], url[128];
    char dir[] = "/tmp/korch-swarm-files-XXXXXX";
    int host_ns = -1;
    bool anchored = false, made_dir = false;
    pid_t llm = -1;

    if (!CHECK_EQ(s_script("swarm-up.sh", "3", 600), 0))
        goto down;
    if (!CHECK(s_env("DOCKER_HOST", host, sizeof host)) || !CHECK(s_env("KORCH_SWARM_IMAGE", image, sizeof image)) ||
        !CHECK(s_env("KORCH_SWARM_NODE1_HOST", h1, sizeof h1)))
        goto down;
    setenv("DOCKER_HOST", host, 1);
    setenv("KORCH_SWARM_NETWORK", SF_NET, 1);
    setenv("KORCH_SWARM_ENCRYPTED", "0", 1);
    d = korch_docker_new(NULL, host, &err);
    d1 = korch_docker_new(NULL, h1, &err);
    if (!CHECK(d) || !CHECK(d1))
        goto out;
    s_delete(d1, "containers", SF_ANCHOR "?force=1", 10000); /* a crashed run's */
    {
        /* the launcher makes the kernels' network (internal, attachable) */
        korch_loop_t *loop = korch_loop_new();
        korch_swarm_opts_t o;
        korch_swarm_opts_init(&o);
        o.host = host;
        korch_launcher_t *l = korch_launcher_swarm_new(loop, &o, &err);
        if (!CHECK(l))
            fprintf(stderr, "swarm launcher: %s\n", err.msg);
        korch_launcher_destroy(&l);
        korch_loop_destroy(&loop);
    }
    {
        json_t *body = json_pack("{s:s, s:[s, s], s:s, s:{s:s, s:b, s:[s], s:b}}", "Image", image, "Cmd", "sleep",
                                 "infinity", "User", "1000:1000", "HostConfig", "NetworkMode", SF_NET,
                                 "ReadonlyRootfs", 1, "CapDrop", "ALL", "Init", 1);
        json_t *r = s_api(d1, "POST", "/containers/create?name=" SF_ANCHOR, body, 201);
        json_decref(body);
        if (!CHECK(r))
            goto out;
        snprintf(anchor_id, sizeof anchor_id, "%s", json_string_value(json_object_get(r, "Id")) ?: "");
        json_decref(r);
        char path[200], nsp[64];
        snprintf(path, sizeof path, "/containers/%s/start", anchor_id);
        json_decref(s_api(d1, "POST", path, NULL, 204));
        snprintf(path, sizeof path, "/containers/%s/json", anchor_id);
        r = s_api(d1, "GET", path, NULL, 200);
        long pid = (long)json_integer_value(json_object_get(json_object_get(r, "State"), "Pid"));
        json_decref(r);
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
    const char *la[] = {PY, serve_peer("llm_server.py"), NULL};
    llm = korch_test_spawn_line(la, line, sizeof line, 10, NULL);
    if (!CHECK_GT(llm, 0) || !CHECK((made_dir = mkdtemp(dir) != NULL)))
        goto out;
    snprintf(url, sizeof url, "http://127.0.0.1:%d/s/usercode/v1", (int)strtol(line, NULL, 10));
    setenv("OPENAI_BASE_URL", url, 1);
    setenv("OPENAI_API_KEY", "sk-test", 1);
    unsetenv("KORCH_LLM");
    if (sf_phase(image, dir, "before"))
        sf_phase(image, dir, "after");
    unsetenv("OPENAI_BASE_URL");
    unsetenv("OPENAI_API_KEY");
out:
    if (llm > 0) {
        kill(llm, SIGTERM);
        waitpid(llm, NULL, 0);
    }
    if (made_dir) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        CHECK_EQ(system(cmd), 0);
    }
    if (d)
        CHECK(sf_none_left(d, 30000));
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
        CHECK(s_delete(d, "networks", SF_NET, 30000));
    unsetenv("KORCH_SWARM_NETWORK");
    unsetenv("KORCH_SWARM_ENCRYPTED");
down:
    s_swarm_done();
    korch_docker_destroy(&d);
    korch_docker_destroy(&d1);
}
