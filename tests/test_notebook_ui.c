/*  The classic Jupyter Notebook 6.4 web UI (Debian's python3-notebook) with
 *  korch serve as its --gateway-url, in Debian's Chromium through
 *  playwright-core (tests/npm/notebook_ui.js starts the notebook server
 *  with dirs and a token of its own, drives the page, prints one JSON
 *  line). What a user does and sees: a new notebook, state across cells,
 *  output streaming while a cell runs, a matplotlib chart, a DataFrame
 *  table, a traceback, input(), interrupt keeping state, restart, an
 *  ipywidgets slider shown again after a page reload, the websocket
 *  dropped mid-cell with nothing lost, a 12 MB print cut with a note, and
 *  the kernel culled by korch (the dead-kernel dialog).
 *
 *  Screenshots: build/screenshots/notebook-{local,docker-pool}-NN-STEP.png
 *  (beside the binaries under test). korch culls after CULL_S idle
 *  seconds: no step leaves the kernel silent that long, the last waits
 *  for it. */
#include "serve_fixture.h"

#include <jansson.h>
#include <glob.h>
#include <libgen.h>
#include <limits.h>
#include <sys/stat.h>

#define CULL_S "20"

/* UI is "notebook" or "jupyterlab" (tests/npm/UI_ui.js); ROOT the chroot
 *  JupyterLab runs in (NULL for the Notebook, which runs on the host). */
static void s_ui_cull(const char *ui, const char *label, const char *root, const char *const *extra, bool pool,
                      int timeout_s, const char *cull_s)
{
    char script[700], shots[PATH_MAX + 32], bin[PATH_MAX];
    snprintf(script, sizeof script, "%s/tests/npm/%s_ui.js", korch_test_root(), ui);
    snprintf(bin, sizeof bin, "%s", korch_test_korch_bin());
    snprintf(shots, sizeof shots, "%s/screenshots", dirname(bin));
    if (!serve_npm_ready())
        return;
    const char *args[16] = {"--cull-idle-timeout", cull_s, "--cull-interval", "1", "--cull-connected"};
    int n = 5;
    for (int i = 0; extra && extra[i] && n < 15; i++)
        args[n++] = extra[i];
    args[n] = NULL;
    serve_t s;
    if (!serve_start_args(&s, args))
        return;
    const char *argv[] = {"node", script, s.line, shots, label, cull_s, root, NULL};
    char *out = NULL, *err = NULL;
    int rc = korch_test_run(argv, NULL, &out, &err, timeout_s);
    json_t *j = NULL; /* the one result line */
    for (const char *p = out; p && *p && !j; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (*p == '{')
            j = json_loadb(p, strcspn(p, "\n"), 0, NULL);
    bool ok = CHECK(j != NULL) && CHECK(json_is_true(json_object_get(j, "ok"))) && CHECK_EQ(rc, 0);
    size_t i;
    json_t *f;
    json_array_foreach(json_object_get(j, "failures"), i, f)
        fprintf(stderr, "  %s_ui %s: %s\n", ui, label, json_string_value(f));
    char *d = j ? json_dumps(json_object_get(j, "details"), JSON_COMPACT) : NULL;
    fprintf(stderr, "  %s_ui %s: %s (%.1f s) %.3000s\n", ui, label, ok ? "ok" : "FAILED",
            json_number_value(json_object_get(j, "seconds")), d ? d : "");
    free(d);
    json_decref(j);
    if (!ok && err && *err) {
        size_t len = strlen(err);
        fprintf(stderr, "  --- %s_ui.js stderr (tail) ---\n%s\n", ui, len > 4000 ? err + len - 4000 : err);
    }
    /* the dead-kernel dialog came from korch's culler, not from a crash */
    bool pooled = serve_log_has(&s, "handed out from the warm pool");
    bool culled = serve_log_has(&s, "korch: culling idle kernel");
    bool died = serve_log_has(&s, " dead: ");
    if (!CHECK(culled) || !CHECK(!died) || !CHECK(pooled == pool))
        fprintf(stderr, "  %s_ui %s: korch's log: culled %d, a kernel died %d, from the pool %d\n", ui, label,
                culled, died, pooled);
    int left = serve_kernel_count(&s);
    CHECK_EQ(left, 0);
    serve_stop(&s);
    if (!ok || !culled || died || pooled != pool || left)
        serve_log_tail(&s);
    unlink(s.log);
    free(out);
    free(err);
}

static void s_ui(const char *ui, const char *label, const char *root, const char *const *extra, bool pool,
                 int timeout_s)
{
    s_ui_cull(ui, label, root, extra, pool, timeout_s, CULL_S);
}

TEST_T(notebook_ui_local, 240) { s_ui("notebook", "local", NULL, NULL, false, 200); }

/* Containers, the kernel handed out from a warm pool of one. */
static const char *const s_docker_pool[] = {"--launcher", "docker", "--pool", "1", NULL};
TEST_T(notebook_ui_docker_pool, 300) { s_ui("notebook", "docker-pool", NULL, s_docker_pool, true, 260); }

/* JupyterLab 4 (Debian trixie's, in a chroot scripts/jupyterlab-chroot.sh
 *  makes once and keeps in KORCH_JLAB_ROOT, default /var/cache/korch/trixie-jlab;
 *  the first run makes it, about two minutes) with korch serve as its
 *  gateway: a notebook from the launcher, state, a chart, interrupt, a widget
 *  after a reload, restart, the kernel culled while open.
 *  Screenshots: build/screenshots/jupyterlab-local-NN-STEP.png */
static const char *s_jlab_root(void)
{
    const char *root = getenv("KORCH_JLAB_ROOT");
    root = root && *root ? root : "/var/cache/korch/trixie-jlab";
    char script[700];
    snprintf(script, sizeof script, "%s/scripts/jupyterlab-chroot.sh", korch_test_root());
    const char *argv[] = {"/bin/sh", script, root, NULL};
    char *out = NULL, *err = NULL;
    int rc = korch_test_run(argv, NULL, &out, &err, 900);
    if (!CHECK_EQ(rc, 0))
        fprintf(stderr, "  jupyterlab-chroot.sh: %s%s\n", out ? out : "", err ? err : "");
    else
        fprintf(stderr, "  %s", out ? out : "");
    free(out);
    free(err);
    return rc == 0 ? root : NULL;
}

/* korch-jupyterlab's wheel as a user builds it, on this Debian 12 host, not in
 *  the chroot (`make jupyterlab-wheel`: npm's @jupyterlab/builder, nothing to
 *  do when dist/ has it from the current sources; the first run's npm ci takes
 *  about a minute) -> its path, or NULL. The tests pip-install it in the chroot. */
static const char *s_jlab_wheel(void)
{
    static char whl[PATH_MAX];
    const char *argv[] = {"make", "-s", "--no-print-directory", "-C", korch_test_root(), "jupyterlab-wheel", NULL};
    char *out = NULL, *err = NULL;
    int rc = korch_test_run(argv, NULL, &out, &err, 600);
    if (!CHECK_EQ(rc, 0))
        fprintf(stderr, "  make jupyterlab-wheel: %s%s\n", out ? out : "", err ? err : "");
    else if (out && *out)
        fprintf(stderr, "  %s", out);
    free(out);
    free(err);
    char pat[PATH_MAX];
    snprintf(pat, sizeof pat, "%s/dist/korch_jupyterlab-*-py3-none-any.whl", korch_test_root());
    glob_t g;
    bool found = rc == 0 && glob(pat, 0, NULL, &g) == 0 && g.gl_pathc > 0;
    if (found)
        snprintf(whl, sizeof whl, "%s", g.gl_pathv[g.gl_pathc - 1]);
    if (rc == 0 && !CHECK(found))
        fprintf(stderr, "  no wheel '%s'\n", pat);
    if (rc == 0)
        globfree(&g);
    return found ? whl : NULL;
}

/* The kernel runs in the chroot too, with trixie's ipykernel and ipywidgets 8
 *  (JupyterLab 4's widget manager speaks ipywidgets 8; bookworm's is 6): a
 *  kernelspec "python3" first in KORCH_KERNELSPEC_PATH whose argv chroots,
 *  its connection file (and ipc sockets) in a runtime dir under the chroot's
 *  /tmp. Host paths hold there as they are: in the chroot, ROOT is a symlink
 *  to its "/". */
static bool s_jlab_kernelspec(const char *root, char *spec, size_t spec_len, char *rt, size_t rt_len)
{
    snprintf(spec, spec_len, "/tmp/korch-jlab-spec-XXXXXX");
    snprintf(rt, rt_len, "%s/tmp/korch-rt-jlab-XXXXXX", root);
    if (!CHECK(mkdtemp(spec) != NULL) || !CHECK(mkdtemp(rt) != NULL))
        return false;
    char path[2 * PATH_MAX + 32];
    snprintf(path, sizeof path, "mkdir -p \"$(dirname '%s%s')\" && ln -sfn / '%s%s'", root, root, root, root);
    if (!CHECK_EQ(system(path), 0))
        return false;
    snprintf(path, sizeof path, "%s/python3", spec);
    if (!CHECK_EQ(mkdir(path, 0755), 0))
        return false;
    snprintf(path, sizeof path, "%s/python3/kernel.json", spec);
    FILE *f = fopen(path, "w");
    if (!CHECK(f != NULL))
        return false;
    fprintf(f,
            "{\"argv\": [\"/usr/sbin/chroot\", \"%s\", \"/usr/bin/python3\", \"-m\", \"ipykernel_launcher\", \"-f\",\n"
            "          \"{connection_file}\"],\n"
            " \"display_name\": \"Python 3 (korch, trixie)\", \"language\": \"python\", \"interrupt_mode\": \"signal\",\n"
            " \"metadata\": {\"debugger\": false}}\n",
            root);
    fclose(f);
    setenv("KORCH_KERNELSPEC_PATH", spec, 1);
    return true;
}

/* LLM: NULL for the plain gateway path, or the scripted LLM's scenario for
 *  the agent panel (the extension's wheel, `make jupyterlab-wheel`, installed). */
static void s_jlab(const char *label, const char *llm)
{
    const char *root = s_jlab_root();
    char spec[64], rt[PATH_MAX], cmd[2 * PATH_MAX + 32];
    const char *old_rt = getenv("KORCH_RUNTIME_DIR");
    char *saved_rt = old_rt ? strdup(old_rt) : NULL;
    if (root && s_jlab_kernelspec(root, spec, sizeof spec, rt, sizeof rt)) {
        setenv("KORCH_RUNTIME_DIR", rt, 1);
        pid_t llm_pid = 0;
        char line[64], url[128], agent_dir[] = "/tmp/korch-jlab-agent-XXXXXX";
        const char *extra[] = {"--llm", "openai:gpt-4o-mini", "--agent-dir", agent_dir, NULL};
        if (llm) {
            const char *llm_argv[] = {PY, serve_peer("llm_server.py"), NULL};
            llm_pid = korch_test_spawn_line(llm_argv, line, sizeof line, 10, NULL);
            snprintf(url, sizeof url, "http://127.0.0.1:%ld/s/%s/v1", llm_pid > 0 ? strtol(line, NULL, 10) : 0L, llm);
            setenv("OPENAI_BASE_URL", url, 1);
            setenv("OPENAI_API_KEY", "sk-test", 1);
            const char *whl = s_jlab_wheel();
            if (whl)
                setenv("KORCH_JLAB_WHEEL", whl, 1);
            CHECK(mkdtemp(agent_dir) != NULL);
        }
        if (!llm || (CHECK_GT(llm_pid, 0) && getenv("KORCH_JLAB_WHEEL")))
            s_ui_cull("jupyterlab", label, root, llm ? extra : NULL, false, 240, llm ? "25" : CULL_S);
        if (llm_pid > 0) {
            kill(llm_pid, SIGTERM);
            waitpid(llm_pid, NULL, 0);
        }
        if (llm) {
            unsetenv("OPENAI_BASE_URL");
            unsetenv("OPENAI_API_KEY");
            unsetenv("KORCH_JLAB_WHEEL");
            snprintf(cmd, sizeof cmd, "rm -rf '%s'", agent_dir);
            CHECK_EQ(system(cmd), 0);
        }
    }
    unsetenv("KORCH_KERNELSPEC_PATH");
    if (saved_rt)
        setenv("KORCH_RUNTIME_DIR", saved_rt, 1);
    else
        unsetenv("KORCH_RUNTIME_DIR");
    free(saved_rt);
    if (root) {
        snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'", spec, rt);
        CHECK_EQ(system(cmd), 0);
    }
}

TEST_T(jupyterlab_ui_local, 1200) { s_jlab("local", NULL); }

/* The korch agent panel (src/jupyterlab: the wheel built on the host with
 *  npm's @jupyterlab/builder, pip-installed in the chroot; the server
 *  extension proxying the agent API): a DataFrame defined by hand, the panel asked about it, the answer
 *  quotes its total, the agent's cells appear below with a chart, a reload
 *  keeps the notebook and the panel's history. Scripted LLM scenario "jlab". */
TEST_T(jupyterlab_agent_panel, 1200) { s_jlab("agent", "jlab"); }

/* korch_jupyterlab's server extension (src/jupyterlab) in the chroot's real
 *  jupyter_server 2: /api/agent/... proxied to korch serve with the gateway's
 *  credentials, SSE streamed through, a 503 without a gateway
 *  (tests/peers/jlab_proxy_check.py; the LLM is the scripted one, scenario
 *  "chunks"). The wheel is pip-installed under the chroot's /tmp (--prefix),
 *  the peer copied there. */
TEST_T(jupyterlab_agent_proxy, 1200)
{
    const char *root = s_jlab_root();
    if (!root)
        return;
    char line[64], url[128], tmp[PATH_MAX], cmd[3 * PATH_MAX];
    const char *llm_argv[] = {PY, serve_peer("llm_server.py"), NULL};
    pid_t llm = korch_test_spawn_line(llm_argv, line, sizeof line, 10, NULL);
    if (!CHECK_GT(llm, 0))
        return;
    snprintf(url, sizeof url, "http://127.0.0.1:%ld/s/chunks/v1", strtol(line, NULL, 10));
    unsetenv("KORCH_LLM");
    setenv("OPENAI_BASE_URL", url, 1);
    setenv("OPENAI_API_KEY", "sk-test", 1);
    char agent_dir[] = "/tmp/korch-jproxy-agent-XXXXXX";
    snprintf(tmp, sizeof tmp, "%s/tmp/korch-jproxy-XXXXXX", root);
    if (!CHECK(mkdtemp(agent_dir) != NULL) || !CHECK(mkdtemp(tmp) != NULL))
        goto out_llm;
    /* the wheel's package, pip-installed with --prefix under TMP: its site dir is the peer's EXT_DIR */
    const char *whl = s_jlab_wheel();
    const char *inside = tmp + strlen(root); /* the same dir as the chroot sees it */
    snprintf(cmd, sizeof cmd, "cp '%s' '%s/tests/peers/jlab_proxy_check.py' '%s/'", whl ? whl : "/nonexistent",
             korch_test_root(), tmp);
    if (!CHECK(whl != NULL) || !CHECK_EQ(system(cmd), 0))
        goto out_tmp;
    char sh[2 * PATH_MAX + 256], site[PATH_MAX] = "";
    snprintf(sh, sizeof sh,
             "python3 -m pip install -q --root-user-action=ignore --no-deps --no-index --prefix='%s/prefix' '%s/%s' && "
             "dirname \"$(find '%s/prefix' -path '*-packages/korch_jupyterlab' -type d)\"",
             inside, inside, strrchr(whl, '/') + 1, inside);
    const char *pip_argv[] = {"/usr/sbin/chroot", root, "/bin/sh", "-c", sh, NULL};
    char *pip_out = NULL, *pip_err = NULL;
    int pip_rc = korch_test_run(pip_argv, NULL, &pip_out, &pip_err, 120);
    if (pip_rc == 0 && pip_out)
        snprintf(site, sizeof site, "%.*s", (int)strcspn(pip_out, "\n"), pip_out);
    if (!CHECK_EQ(pip_rc, 0) || !CHECK(site[0] == '/'))
        fprintf(stderr, "  pip install of the wheel: %s%s\n", pip_out ? pip_out : "", pip_err ? pip_err : "");
    free(pip_out);
    free(pip_err);
    if (site[0] != '/')
        goto out_tmp;
    const char *extra[] = {"--agent-dir", agent_dir, "--llm", "openai:gpt-4o-mini", NULL};
    serve_t s;
    if (serve_start_args(&s, extra)) {
        char peer[PATH_MAX + 32];
        snprintf(peer, sizeof peer, "%s/jlab_proxy_check.py", inside);
        const char *argv[] = {"/usr/sbin/chroot", root, "/usr/bin/python3", peer, s.line, site, NULL};
        char *out = NULL, *err = NULL;
        int rc = korch_test_run(argv, NULL, &out, &err, 180);
        json_t *j = out ? json_loads(out, JSON_DISABLE_EOF_CHECK, NULL) : NULL;
        if (!CHECK_EQ(rc, 0) || !CHECK(json_is_true(json_object_get(j, "ok")))) {
            fprintf(stderr, "  %s%s\n", out ? out : "(no output)", err ? err : "");
            serve_log_tail(&s);
        } else
            fprintf(stderr, "  %s", out);
        json_decref(j);
        free(out);
        free(err);
        CHECK_EQ(serve_kernel_count(&s), 0);
        serve_stop(&s);
        unlink(s.log);
    }
out_tmp:
    snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'", tmp, agent_dir);
    CHECK_EQ(system(cmd), 0);
out_llm:
    kill(llm, SIGTERM);
    waitpid(llm, NULL, 0);
    unsetenv("OPENAI_BASE_URL");
    unsetenv("OPENAI_API_KEY");
}

/* Issue 21: the model as the attacker of the person's JupyterLab 4, korch
 *  serve as the gateway and no korch extension (the relay must hold
 *  alone): the agent API's turn in the notebook's kernel (scripted LLM
 *  "taint_hook") registers an IPython hook displaying HTML with a
 *  contents-API PUT, then a table of variants; no window flag, no file, the
 *  note shown, tables and charts kept; untainted before, and again after a
 *  restart (tests/npm/jupyterlab_untrusted.js). */
/* ui: "jupyterlab" (in the chroot, ext: with korch's extension) or
 *  "notebook" (Notebook 6.4 on the host): tests/npm/UI_untrusted.js. */
static void s_untrusted(const char *ui, bool ext)
{
    bool lab = strcmp(ui, "jupyterlab") == 0;
    const char *root = lab ? s_jlab_root() : NULL;
    char spec[64] = "", rt[PATH_MAX] = "", cmd[2 * PATH_MAX + 32], line[64], url[128], script[700],
        shots[PATH_MAX + 32], bin[PATH_MAX];
    char agent_dir[] = "/tmp/korch-ui-untrusted-XXXXXX";
    if ((lab && !root) || !serve_npm_ready() || (lab && !s_jlab_kernelspec(root, spec, sizeof spec, rt, sizeof rt)))
        return;
    const char *old_rt = getenv("KORCH_RUNTIME_DIR");
    char *saved_rt = old_rt ? strdup(old_rt) : NULL;
    if (lab)
        setenv("KORCH_RUNTIME_DIR", rt, 1);
    const char *llm_argv[] = {PY, serve_peer("llm_server.py"), NULL};
    pid_t llm = korch_test_spawn_line(llm_argv, line, sizeof line, 10, NULL);
    if (CHECK_GT(llm, 0) && CHECK(mkdtemp(agent_dir) != NULL)) {
        snprintf(url, sizeof url, "http://127.0.0.1:%ld/s/taint_hook/v1", strtol(line, NULL, 10));
        unsetenv("KORCH_LLM");
        setenv("OPENAI_BASE_URL", url, 1);
        setenv("OPENAI_API_KEY", "sk-test", 1);
        const char *extra[] = {"--agent-dir", agent_dir, "--llm", "openai:gpt-4o-mini", NULL};
        serve_t s;
        if (serve_start_args(&s, extra)) {
            snprintf(script, sizeof script, "%s/tests/npm/%s_untrusted.js", korch_test_root(), ui);
            snprintf(bin, sizeof bin, "%s", korch_test_korch_bin());
            snprintf(shots, sizeof shots, "%s/screenshots", dirname(bin));
            const char *argv[] = {"node", script, s.line, shots, root, NULL}; /* root NULL ends it for the Notebook */
            char *out = NULL, *err = NULL;
            const char *whl = ext ? s_jlab_wheel() : NULL;
            if (whl)
                setenv("KORCH_JLAB_WHEEL", whl, 1);
            int rc = ext && !whl ? -1 : korch_test_run(argv, NULL, &out, &err, 600);
            unsetenv("KORCH_JLAB_WHEEL");
            json_t *j = NULL;
            for (const char *p = out; p && *p && !j; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
                if (*p == '{')
                    j = json_loadb(p, strcspn(p, "\n"), 0, NULL);
            bool ok = CHECK(j != NULL) && CHECK(json_is_true(json_object_get(j, "ok"))) && CHECK_EQ(rc, 0);
            size_t i;
            json_t *f;
            json_array_foreach(json_object_get(j, "failures"), i, f)
                fprintf(stderr, "  %s_untrusted: %s\n", ui, json_string_value(f));
            char *d = j ? json_dumps(json_object_get(j, "details"), JSON_COMPACT) : NULL;
            fprintf(stderr, "  %s_untrusted: %s (%.1f s) %.3000s\n", ui, ok ? "ok" : "FAILED",
                    json_number_value(json_object_get(j, "seconds")), d ? d : "");
            free(d);
            json_decref(j);
            if (!ok && err && *err) {
                size_t len = strlen(err);
                fprintf(stderr, "  --- stderr (tail) ---\n%s\n", len > 4000 ? err + len - 4000 : err);
                serve_log_tail(&s);
            }
            free(out);
            free(err);
            serve_stop(&s);
            unlink(s.log);
        }
        unsetenv("OPENAI_BASE_URL");
        unsetenv("OPENAI_API_KEY");
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", agent_dir);
        CHECK_EQ(system(cmd), 0);
    }
    if (llm > 0) {
        kill(llm, SIGTERM);
        waitpid(llm, NULL, 0);
    }
    unsetenv("KORCH_KERNELSPEC_PATH");
    if (saved_rt)
        setenv("KORCH_RUNTIME_DIR", saved_rt, 1);
    else
        unsetenv("KORCH_RUNTIME_DIR");
    free(saved_rt);
    if (lab) {
        snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'", spec, rt);
        CHECK_EQ(system(cmd), 0);
    }
}

TEST_T(jupyterlab_untrusted_outputs, 900) { s_untrusted("jupyterlab", false); }

/* The same with korch's extension installed: its badge ("code from the agent
 *  ran in this kernel: outputs are shown untrusted") after the agent's turn,
 *  the person's outputs rendered untrusted, the badge gone after a restart. */
TEST_T(jupyterlab_untrusted_outputs_extension, 900) { s_untrusted("jupyterlab", true); }

/* Notebook 6.4 (Debian's, on the host, the kernel too): the model's hook and
 *  the variants (tests/npm/notebook_untrusted.js). */
TEST_T(notebook_untrusted_outputs, 600) { s_untrusted("notebook", false); }
