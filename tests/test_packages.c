/*  Packages in a confined kernel (korch/packages.h, docs/files.md): real
 *  pip in a sandbox and a container, from a wheelhouse and from a PEP 503
 *  index on 127.0.0.1 (tests/peers/pkg_index.py: wheels the test builds
 *  with zipfile) reached through korch's forwarder; the kernel attacks:
 *  another host, its own network, the read-only wheelhouse, a wheel with a
 *  path-traversal entry. And the forwarder itself, byte by byte. */
#include "test.h"
#include "llm_fixture.h"
#include "../src/launcher/pkgfwd.h"
#include "korch/launcher.h"
#include "korch/loop.h"

#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define PY "/usr/bin/python3"

static const char *s_peer(void)
{
    static char p[600];
    snprintf(p, sizeof p, "%s/tests/peers/pkg_index.py", korch_test_root());
    return p;
}

/* The index on 127.0.0.1 serving dir (built there); its pid, port in *port. */
static pid_t s_index(const char *dir, int *port)
{
    char line[32];
    const char *argv[] = {PY, s_peer(), dir, NULL};
    pid_t pid = korch_test_spawn_line(argv, line, sizeof line, 20, NULL);
    *port = pid > 0 ? (int)strtol(line, NULL, 10) : 0;
    return pid;
}

static void s_stop(pid_t pid)
{
    if (pid > 0) {
        kill(pid, SIGTERM);
        waitpid(pid, NULL, 0);
    }
}

/* One request through the forwarder's socket in dir; the reply (new). */
static char *s_ask(const char *dir, const char *req)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s/%s", dir, KORCH_PKGFWD_SOCK);
    int fd = -1;
    for (int i = 0; i < 100 && fd < 0; i++) { /* the thread binds it */
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
            close(fd);
            fd = -1;
            usleep(20000);
        }
    }
    if (fd < 0)
        return strdup("");
    struct timeval tv = {.tv_sec = 10};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    size_t len = strlen(req), cap = 1 << 16, n = 0;
    if (write(fd, req, len) != (ssize_t)len) {
        close(fd);
        return strdup("");
    }
    char *out = calloc(1, cap + 1);
    ssize_t r;
    while (out && n < cap && (r = read(fd, out + n, cap - n)) > 0)
        n += (size_t)r;
    close(fd);
    return out;
}

/* The allow-list, and what the forwarder makes of requests a kernel can
   send: only GET of an allowed http:// host or CONNECT to one passes;
   userinfo, relative targets, other methods, an oversized head are
   refused with the allowed hosts named. */
TEST(packages_forwarder_passes_allowed_hosts_only)
{
    CHECK(korch_pkgfwd_allowed("127.0.0.1", "127.0.0.1", 8080));
    CHECK(korch_pkgfwd_allowed("pypi.org, files.pythonhosted.org", "FILES.pythonhosted.org", 443));
    CHECK(korch_pkgfwd_allowed("a.example:8443", "a.example", 8443));
    CHECK(!korch_pkgfwd_allowed("a.example:8443", "a.example", 443));
    CHECK(!korch_pkgfwd_allowed("127.0.0.1:8080", "127.0.0.1", 22));
    CHECK(!korch_pkgfwd_allowed("pypi.org", "pypi.org.evil.example", 443));
    CHECK(!korch_pkgfwd_allowed("pypi.org", "org", 443));
    CHECK(!korch_pkgfwd_allowed("", "pypi.org", 443));

    char *dir = korch_test_mkdir("/tmp/korch-pkgfwd-XXXXXX"), *pkdir = korch_test_mkdir("/tmp/korch-pkidx-XXXXXX");
    int port = 0;
    pid_t idx = dir && pkdir ? s_index(pkdir, &port) : -1;
    korch_err_t err = {0};
    korch_pkgfwd_t *f = idx > 0 ? korch_pkgfwd_new(dir, "127.0.0.1", 1 << 20, &err) : NULL;
    if (!CHECK(f != NULL))
        goto out;
    char req[600];
    snprintf(req, sizeof req, "GET http://127.0.0.1:%d/simple/korch-tiny/ HTTP/1.1\r\nHost: 127.0.0.1\r\n"
             "Proxy-Connection: keep-alive\r\n\r\n", port);
    char *r = s_ask(dir, req);
    CHECK_CONTAINS(r, "200 OK");
    CHECK_CONTAINS(r, "korch_tiny-1.0-py3-none-any.whl");
    free(r);
    static const char *const refused[] = {
        "GET http://localhost:%d/simple/ HTTP/1.1\r\n\r\n",          /* another name for the same host */
        "GET http://127.0.0.1@evil.example:%d/ HTTP/1.1\r\n\r\n",    /* userinfo */
        "GET /simple/ HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n",       /* origin-form */
        "POST http://127.0.0.1:%d/simple/ HTTP/1.1\r\n\r\n",         /* another method */
        "CONNECT evil.example:%d HTTP/1.1\r\n\r\n",
        "GET https://127.0.0.1:%d/ HTTP/1.1\r\n\r\n",                /* https goes through CONNECT */
    };
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        snprintf(req, sizeof req, refused[i], port);
        r = s_ask(dir, req);
        if (!CHECK_CONTAINS(r, "korch allows packages from 127.0.0.1 only"))
            fprintf(stderr, "  request %zu: %s\n", i, req);
        CHECK(strstr(r, " 200 ") == NULL);
        free(r);
    }
    char *big = malloc(20000);
    if (big) {
        memset(big, 'a', 19999);
        big[19999] = 0;
        memcpy(big, "GET http://127.0.0.1/ HTTP/1.1\r\nX: ", 35);
        r = s_ask(dir, big);
        CHECK_CONTAINS(r, "431");
        free(r);
        free(big);
    }
    korch_pkgfwd_destroy(&f);
    CHECK(f == NULL);
out:
    s_stop(idx);
    korch_test_rmdir(dir);
    korch_test_rmdir(pkdir);
}

/* Sources that cannot work are refused before any kernel starts. */
TEST(packages_bad_sources_are_refused_at_start)
{
    korch_loop_t *loop = korch_loop_new();
    korch_err_t err = {0};
    korch_launcher_t *l = korch_launcher_local_new(loop, &err);
    CHECK_EQ(korch_launcher_set_packages(l, &(korch_packages_t){.wheelhouse = "/nonexistent/wheels"}, &err),
             KORCH_E_INVALID);
    CHECK_CONTAINS(err.msg, "--wheelhouse '/nonexistent/wheels'");
    korch_err_clear(&err);
    CHECK_EQ(korch_launcher_set_packages(l, &(korch_packages_t){.index_url = "ftp://x/simple"}, &err),
             KORCH_E_INVALID);
    CHECK_CONTAINS(err.msg, "give an http:// or https:// URL");
    korch_err_clear(&err);
    CHECK_EQ(korch_launcher_set_packages(l, &(korch_packages_t){.index_url = "http://u@x/simple"}, &err),
             KORCH_E_INVALID);
    korch_err_clear(&err);
    CHECK_EQ(korch_launcher_set_packages(l, &(korch_packages_t){.hosts = "pypi.org"}, &err), KORCH_E_INVALID);
    CHECK_CONTAINS(err.msg, "--package-hosts needs --package-index");
    CHECK_EQ(korch_launcher_set_packages(l, &(korch_packages_t){.wheelhouse = "/tmp"}, &err), KORCH_OK);
    korch_launcher_destroy(&l);
    korch_loop_destroy(&loop);
}

/* The cells a kernel runs with both sources: wheelhouse offline, the index
   through korch, Debian's pandas, then the attacks (each caught in the
   cell, so one run does all), and last a %pip that fails: exit 1. */
static void s_kernel_installs(const char *launcher)
{
    char *pkdir = korch_test_mkdir("/tmp/korch-pkidx-XXXXXX");
    int port = 0;
    pid_t idx = pkdir ? s_index(pkdir, &port) : -1;
    if (!CHECK_GT(idx, 0))
        goto out;
    char wheels[600], index[128], c_attack[1200];
    snprintf(wheels, sizeof wheels, "%s/wheels", pkdir);
    snprintf(index, sizeof index, "http://127.0.0.1:%d/simple", port);
    snprintf(c_attack, sizeof c_attack,
             "import os, socket, urllib.request\n"
             "try:\n    urllib.request.urlopen('http://localhost:%d/simple/', timeout=10)\n"
             "except Exception as e:\n    print('OTHER-HOST:', e)\n"
             "for a in (('127.0.0.1', %d), ('192.0.2.1', 80)):\n"
             "    s = socket.socket()\n    s.settimeout(5)\n"
             "    try:\n        s.connect(a)\n        print('DIRECT-OPEN', a)\n"
             "    except OSError as e:\n        print('DIRECT-CLOSED', a[0], e.errno)\n"
             "try:\n    open('/korch/wheelhouse/x.whl', 'w')\nexcept OSError as e:\n    print('WHEELHOUSE-RO', e.errno)\n"
             "for line in ('install --no-index korch-evil',\n"
             "             'install --force-reinstall --index-url http://localhost:%d/simple korch-remote'):\n"
             "    try:\n        get_ipython().run_line_magic('pip', line)\n        print('INSTALLED', line)\n"
             "    except RuntimeError as e:\n        print('REFUSED', line)\n"
             "print('OWNED' if os.path.exists('/tmp/korch-evil-owned.py') else 'NOT-OWNED')\n",
             port, port, port);
    const char *argv[] = {korch_test_korch_bin(), "exec", "--launcher", launcher, "--wheelhouse", wheels,
                          "--package-index", index, "-c", "%pip install --no-index korch-tiny",
                          "-c", "%pip install korch-remote", "-c",
                          "import sys, korch_tiny, korch_remote, pandas\n"
                          "print('IMPORTED', korch_tiny.VALUE, korch_remote.VALUE, sys.prefix)",
                          "-c", c_attack, "-c", "%pip install korch-nothere", "-c", "print('NOT-REACHED')",
                          NULL, NULL, NULL};
    if (strcmp(launcher, "docker") == 0 && getenv("KORCH_TEST_PKG_IMAGE")) {
        /* an image with pip while the shared one is rebuilt (kernelspec/python3/Dockerfile) */
        size_t n = 0;
        while (argv[n])
            n++;
        argv[n] = "--image";
        argv[n + 1] = getenv("KORCH_TEST_PKG_IMAGE");
    }
    char *out = NULL, *err = NULL;
    int rc = korch_test_run(argv, NULL, &out, &err, 150);
    CHECK_EQ(rc, 1); /* the last %pip failed */
    CHECK_CONTAINS(out, "Processing /korch/wheelhouse/korch_tiny-1.0-py3-none-any.whl");
    CHECK_CONTAINS(out, "Downloading http://127.0.0.1:"); /* korch-remote: only the index has it */
    CHECK_CONTAINS(out, "IMPORTED tiny-ok remote-ok /home/korch/work/.korch-env");
    char want[160];
    snprintf(want, sizeof want, "OTHER-HOST: HTTP Error 403: korch allows packages from 127.0.0.1:%d only", port);
    CHECK_CONTAINS(out, want); /* by default the index's host and port, nothing else */
    CHECK_CONTAINS(out, "DIRECT-CLOSED 127.0.0.1 111");   /* its own loopback: nothing listens */
    CHECK_CONTAINS(out, "DIRECT-CLOSED 192.0.2.1 101");   /* no route at all */
    CHECK(strstr(out ? out : "", "DIRECT-OPEN") == NULL);
    CHECK_CONTAINS(out, "WHEELHOUSE-RO 30");
    CHECK_CONTAINS(out, "REFUSED install --no-index korch-evil");
    CHECK_CONTAINS(out, "outside"); /* pip: "... trying to install outside the target directory" */
    CHECK_CONTAINS(out, "REFUSED install --force-reinstall --index-url http://localhost:");
    CHECK_CONTAINS(out, "NOT-OWNED");
    CHECK_CONTAINS(out, "pip failed (exit status 1): packages come from the wheelhouse /korch/wheelhouse and "
                        "http://127.0.0.1:");
    CHECK(strstr(out ? out : "", "NOT-REACHED") == NULL);
    CHECK_CONTAINS(err, "not an allowed package host");
    if (korch_test_failures())
        fprintf(stderr, "--- stdout\n%s\n--- stderr\n%s\n", out ? out : "", err ? err : "");
    free(out);
    free(err);
out:
    s_stop(idx);
    korch_test_rmdir(pkdir);
}

TEST_T(packages_in_sandbox, 180) { s_kernel_installs("sandbox"); }

TEST_T(packages_in_docker, 180) { s_kernel_installs("docker"); }

/* An agent session whose code installs a package: the notebook says what
   the kernel's own environment holds (metadata.korch.packages), so a re-run
   knows the set; Debian's packages are not in it. */
TEST_T(packages_recorded_in_the_notebook, 120)
{
    char *pkdir = korch_test_mkdir("/tmp/korch-pkidx-XXXXXX"), *sess = korch_test_mkdir("/tmp/korch-pksess-XXXXXX");
    llm_server_t llm = {0};
    if (!CHECK(pkdir && sess) || !llm_server_start(&llm))
        goto out;
    llm_server_env(&llm, "usercode");
    char build[700], wheels[600], nb[600];
    snprintf(build, sizeof build, "%s %s %s --build-only", PY, s_peer(), pkdir);
    CHECK_EQ(system(build), 0);
    snprintf(wheels, sizeof wheels, "%s/wheels", pkdir);
    const char *argv[] = {korch_test_korch_bin(), "run", "--launcher", "sandbox", "--wheelhouse", wheels, "--llm",
                          "openai:gpt-4o-mini", "--session", sess, "RUN:%pip install korch-tiny", NULL};
    char *out = NULL, *err = NULL;
    CHECK_EQ(korch_test_run(argv, NULL, &out, &err, 100), 0);
    snprintf(nb, sizeof nb, "%s/notebook.ipynb", sess);
    json_t *doc = json_load_file(nb, 0, NULL);
    json_t *pk = json_object_get(json_object_get(json_object_get(doc, "metadata"), "korch"), "packages");
    char *text = json_dumps(pk, JSON_COMPACT);
    CHECK_STREQ(text, "[{\"name\":\"korch-tiny\",\"version\":\"1.0\"}]");
    if (korch_test_failures())
        fprintf(stderr, "--- stdout\n%s\n--- stderr\n%s\n", out ? out : "", err ? err : "");
    free(text);
    json_decref(doc);
    /* the step's transcript record says the same, and stays in the schema */
    char tr[600], script[600], *sout = NULL;
    snprintf(tr, sizeof tr, "%s/transcript.jsonl", sess);
    snprintf(script, sizeof script, "%s/tests/peers/events_schema.py", korch_test_root());
    const char *sargv[] = {PY, script, "transcript", tr, NULL};
    CHECK_EQ(korch_test_run(sargv, NULL, &sout, NULL, 60), 0);
    free(sout);
    sout = NULL;
    const char *gargv[] = {PY, "-c",
                           "import json, sys\n"
                           "print(sum(json.loads(l).get('packages') == [{'name': 'korch-tiny', 'version': '1.0'}]\n"
                           "          for l in open(sys.argv[1])))",
                           tr, NULL};
    korch_test_run(gargv, NULL, &sout, NULL, 10);
    CHECK_STREQ(sout, "1\n");
    free(sout);
    free(out);
    free(err);
out:
    llm_server_stop(&llm);
    korch_test_rmdir(pkdir);
    korch_test_rmdir(sess);
}
