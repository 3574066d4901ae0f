/*  Packages on the swarm launcher (docs/files.md "Packages"): none. Its
 *  kernels' runtime dirs are on other nodes, where korch serves no
 *  forwarder socket and has no wheelhouse to bind, so --wheelhouse and
 *  --package-index are refused before any service is made, and a kernel
 *  on the internal overlay refuses %pip install at once, saying why and
 *  what to ask for, instead of pip's PEP 668 text. The real 3-node test
 *  swarm (scripts/swarm-up.sh), reached from an anchor container's network
 *  namespace on the kernels' overlay, as swarm_files_listing does. */
#include "swarm_fixture.h"

#include "korch/launcher.h"
#include "korch/loop.h"
#include "korch/swarm.h"

#include <fcntl.h>
#include <sched.h>

#define SP_NET "korch-swarmtest-pkg"
#define SP_ANCHOR "korch-swarmtest-pkg-anchor"

TEST_T(swarm_packages_refused, 600)
{
    korch_docker_t *d = NULL, *d1 = NULL;
    korch_err_t err = {0};
    char host[256], image[256], h1[256], anchor_id[80] = "";
    int host_ns = -1;
    bool anchored = false;
    if (!CHECK_EQ(s_script("swarm-up.sh", "3", 600), 0))
        goto down;
    if (!CHECK(s_env("DOCKER_HOST", host, sizeof host)) || !CHECK(s_env("KORCH_SWARM_IMAGE", image, sizeof image)) ||
        !CHECK(s_env("KORCH_SWARM_NODE1_HOST", h1, sizeof h1)))
        goto down;
    setenv("DOCKER_HOST", host, 1);
    setenv("KORCH_SWARM_NETWORK", SP_NET, 1);
    setenv("KORCH_SWARM_ENCRYPTED", "0", 1);
    d = korch_docker_new(NULL, host, &err);
    d1 = korch_docker_new(NULL, h1, &err);
    if (!CHECK(d) || !CHECK(d1))
        goto out;
    /* a source is refused at start, before any kernel */
    {
        const char *argv[] = {korch_test_korch_bin(), "exec", "--launcher", "swarm", "--image", image,
                              "--wheelhouse", "/tmp", "-c", "print('NOT-REACHED')", NULL};
        char *out = NULL, *e = NULL;
        CHECK_EQ(korch_test_run(argv, NULL, &out, &e, 120), 2);
        CHECK_CONTAINS(e, "the swarm launcher cannot give its kernels packages (--wheelhouse, --package-index)");
        CHECK(strstr(out ? out : "", "NOT-REACHED") == NULL);
        free(out);
        free(e);
    }
    s_delete(d1, "containers", SP_ANCHOR "?force=1", 10000); /* a crashed run's */
    {
        /* the launcher makes the kernels' network (internal, attachable) */
        korch_loop_t *loop = korch_loop_new();
        korch_swarm_opts_t o;
        korch_swarm_opts_init(&o);
        o.host = host;
        korch_launcher_t *l = korch_launcher_swarm_new(loop, &o, &err);
        if (!CHECK(l))
            fprintf(stderr, "swarm launcher: %s\n", err.msg);
        CHECK(l && (korch_launcher_caps(l) & KORCH_LAUNCHER_OFFLINE));
        korch_launcher_destroy(&l);
        korch_loop_destroy(&loop);
    }
    {
        json_t *body = json_pack("{s:s, s:[s, s], s:s, s:{s:s, s:b, s:[s], s:b}}", "Image", image, "Cmd", "sleep",
                                 "infinity", "User", "65534:65534", "HostConfig", "NetworkMode", SP_NET,
                                 "ReadonlyRootfs", 1, "CapDrop", "ALL", "Init", 1);
        json_t *r = s_api(d1, "POST", "/containers/create?name=" SP_ANCHOR, body, 201);
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
    /* a kernel on the overlay: %pip install refused, one line, the cell an error */
    {
        const char *argv[] = {korch_test_korch_bin(), "exec", "--launcher", "swarm", "--image", image, "-c",
                              "print('ALIVE')", "-c", "%pip install tabulate", "-c", "print('NOT-REACHED')", NULL};
        char *out = NULL, *e = NULL;
        CHECK_EQ(korch_test_run(argv, NULL, &out, &e, 240), 1);
        CHECK_CONTAINS(out, "ALIVE");
        CHECK_CONTAINS(out, "PackageError: no package source: the swarm launcher gives its kernels none (they have "
                            "no network, and korch serves packages only to kernels whose runtime dir is on its host)");
        CHECK(strstr(out ? out : "", "NOT-REACHED") == NULL);
        CHECK(strstr(out ? out : "", "externally-managed") == NULL);
        if (korch_test_failures())
            fprintf(stderr, "--- stdout\n%s\n--- stderr\n%s\n", out ? out : "", e ? e : "");
        free(out);
        free(e);
    }
out:
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
        CHECK(s_delete(d, "networks", SP_NET, 30000));
    unsetenv("KORCH_SWARM_NETWORK");
    unsetenv("KORCH_SWARM_ENCRYPTED");
down:
    s_swarm_done();
    korch_docker_destroy(&d);
    korch_docker_destroy(&d1);
}
