/*  The client libraries against a live `korch serve` with real kernels:
 *
 *  - pyclient_installed_in_venv_kernels: src/python pip-installed the way
 *    docs/python.md says (a venv with --system-site-packages, pip install
 *    --no-build-isolation --no-deps, with --no-index to prove no index is
 *    asked; the venv --without-pip, running Debian's pip, which it sees:
 *    ensurepip alone takes 10 s here), then
 *    tests/peers/pyclient_kernel.py run by the venv's python against korch
 *    serve: code and structured outputs, interrupt / timeout / restart /
 *    death / shutdown, files through the kernel, HTTP errors, and the kernel as the attacker
 *    (malformed messages, bad base64, a flood, an oversized message).
 *  - pyclient_agent_sessions_and_ts_client: the scripted LLM behind korch
 *    serve --llm; tests/peers/pyclient_agent.py (turns as live iterators of
 *    events checked against docs/events.schema.json, files, interrupt,
 *    follow), then the TypeScript client src/web/src/api.ts built on its own
 *    (`node src/web/build.mjs --client`): its declarations type-checked
 *    (tests/npm/api_types.ts), tests/npm/api_client.mjs and the example
 *    src/web/examples/ask.mjs in Node against the same server.
 *  - pyclient_typed_mypy_strict: `mypy --strict` (Debian's mypy) on the package.
 *  Afterwards no kernel may be left. */
#include "serve_fixture.h"

static bool s_peer_ok(const char *const *argv, int timeout_s, const char *needle)
{
    json_t *j = serve_peer_json(argv, timeout_s);
    bool ok = CHECK(json_is_true(json_object_get(j, "ok")));
    if (ok) {
        char *d = json_dumps(json_object_get(j, "details"), JSON_COMPACT);
        fprintf(stderr, "  %s: %s\n", strrchr(argv[1], '/') + 1, d ? d : "");
        if (needle)
            CHECK_CONTAINS(d, needle);
        free(d);
    }
    json_decref(j);
    return ok;
}

TEST_T(pyclient_installed_in_venv_kernels, 240)
{
    char *dir = korch_test_mkdir("/tmp/korch-pyclient-XXXXXX");
    if (!CHECK(dir))
        return;
    char venv[700], py[760], src[700], site[1000];
    snprintf(venv, sizeof venv, "%s/venv", dir);
    snprintf(py, sizeof py, "%s/bin/python", venv);
    snprintf(src, sizeof src, "%s/src/python", korch_test_root());
    const char *mk[] = {PY, "-m", "venv", "--system-site-packages", "--without-pip", venv, NULL};
    char *out = NULL, *err = NULL;
    if (!CHECK_EQ(korch_test_run(mk, NULL, &out, &err, 60), 0)) {
        fprintf(stderr, "  python3 -m venv failed (python3-venv installed?)\n%s%s\n", out ? out : "", err ? err : "");
        goto out;
    }
    free(out);
    free(err);
    out = err = NULL;
    /* the docs' command; --no-index proves no index is asked; a copy of
       the source so no build/ or egg-info is left in the repository */
    char copy[800];
    snprintf(copy, sizeof copy, "%s/src", dir);
    const char *cp[] = {"cp", "-r", src, copy, NULL};
    if (!CHECK_EQ(korch_test_run(cp, NULL, NULL, NULL, 30), 0))
        goto out;
    const char *inst[] = {py, "-m", "pip", "install", "--no-build-isolation", "--no-deps", "--no-index", copy, NULL};
    if (!CHECK_EQ(korch_test_run(inst, NULL, &out, &err, 120), 0)) {
        fprintf(stderr, "  pip install failed\n%s%s\n", out ? out : "", err ? err : "");
        goto out;
    }
    CHECK_CONTAINS(out, "Successfully installed korch-client-");
    /* installed with its py.typed marker, and imported from the venv */
    snprintf(site, sizeof site, "import korch_client, os; d = os.path.dirname(korch_client.__file__); "
                                "print(d.startswith('%s/lib/'), os.path.exists(os.path.join(d, 'py.typed')))", venv);
    free(out);
    out = NULL;
    const char *imp[] = {py, "-c", site, NULL};
    korch_test_run(imp, NULL, &out, NULL, 30);
    CHECK_STREQ(out, "True True\n");
    serve_t s;
    if (serve_start(&s)) {
        const char *peer[] = {py, serve_peer("pyclient_kernel.py"), "--url", s.line, NULL};
        s_peer_ok(peer, 150, "\"package\":\"/tmp/korch-pyclient-");
        CHECK_EQ(serve_kernel_count(&s), 0);
        serve_stop(&s);
    }
out:
    free(out);
    free(err);
    korch_test_rmdir(dir);
}

TEST_T(pyclient_agent_sessions_and_ts_client, 240)
{
    char line[64], agents[] = "/tmp/korch-pyclient-agents-XXXXXX", url[256], mod[800], types[800];
    const char *largv[] = {PY, serve_peer("llm_server.py"), NULL};
    pid_t llm = korch_test_spawn_line(largv, line, sizeof line, 10, NULL);
    char *web = korch_test_mkdir("/tmp/korch-pyclient-web-XXXXXX");
    if (!CHECK_GT(llm, 0) || !CHECK(web) || !CHECK(mkdtemp(agents)))
        goto out;
    snprintf(url, sizeof url, "http://127.0.0.1:%d/s/pyclient/v1", atoi(line));
    setenv("OPENAI_BASE_URL", url, 1);
    setenv("OPENAI_API_KEY", "sk-test", 1);
    unsetenv("KORCH_LLM");
    /* the TypeScript client built on its own, while the server starts */
    char build[700];
    snprintf(build, sizeof build, "%s/src/web/build.mjs", korch_test_root());
    const char *b[] = {"node", build, "--client", web, NULL};
    char *bout = NULL, *berr = NULL;
    bool built = CHECK_EQ(korch_test_run(b, NULL, &bout, &berr, 120), 0);
    if (!built)
        fprintf(stderr, "  node build.mjs --client failed (src/web/node_modules: make builds it)\n%s%s\n",
                bout ? bout : "", berr ? berr : "");
    free(bout);
    free(berr);
    snprintf(mod, sizeof mod, "%s/api.js", web);
    snprintf(types, sizeof types, "%s/api_types.ts", web);
    if (built) { /* its declarations, type-checked strictly by a program that uses them */
        char tsc[700], from[700];
        snprintf(tsc, sizeof tsc, "%s/src/web/node_modules/.bin/tsc", korch_test_root());
        snprintf(from, sizeof from, "%s/tests/npm/api_types.ts", korch_test_root());
        const char *cp[] = {"cp", from, types, NULL};
        const char *tc[] = {tsc, "--noEmit", "--strict", "--target", "ES2022", "--module", "ESNext",
                            "--moduleResolution", "Bundler", "--lib", "ES2022,DOM,DOM.Iterable", "--skipLibCheck",
                            types, NULL};
        char *tout = NULL;
        CHECK_EQ(korch_test_run(cp, NULL, NULL, NULL, 10), 0);
        if (!CHECK_EQ(korch_test_run(tc, NULL, &tout, NULL, 60), 0))
            fprintf(stderr, "  tsc on tests/npm/api_types.ts:\n%s\n", tout ? tout : "");
        free(tout);
    }
    const char *extra[] = {"--agent-dir", agents, "--llm", "openai:gpt-4o-mini", NULL};
    serve_t s;
    if (serve_start_args(&s, extra)) {
        char src[700];
        snprintf(src, sizeof src, "%s/src/python", korch_test_root());
        const char *peer[] = {PY, serve_peer("pyclient_agent.py"), "--url", s.line, "--src", src, NULL};
        s_peer_ok(peer, 120, NULL);
        if (built) {
            char js[700], ex[700], csv[800], env[900];
            snprintf(js, sizeof js, "%s/tests/npm/api_client.mjs", korch_test_root());
            const char *node[] = {"node", js, mod, s.line, NULL};
            s_peer_ok(node, 120, NULL);
            /* the example, as its header says to run it */
            snprintf(ex, sizeof ex, "%s/src/web/examples/ask.mjs", korch_test_root());
            snprintf(csv, sizeof csv, "%s/data.csv", web);
            FILE *f = fopen(csv, "w");
            CHECK(f && fputs("n\n1\n2\n39\n", f) >= 0 && fclose(f) == 0);
            snprintf(env, sizeof env, "KORCH_API_JS=%s", mod);
            const char *exa[] = {"env", env, "node", ex, s.line, csv, "what is the total?", NULL};
            char *eout = NULL, *eerr = NULL;
            CHECK_EQ(korch_test_run(exa, NULL, &eout, &eerr, 60), 0);
            CHECK_CONTAINS(eout, "TOTAL=42");
            CHECK_CONTAINS(eout, "The total is 42.\n(ok, 3 steps");
            if (korch_test_failures())
                fprintf(stderr, "  ask.mjs:\n%s%s\n", eout ? eout : "", eerr ? eerr : "");
            free(eout);
            free(eerr);
        }
        CHECK_EQ(serve_kernel_count(&s), 0);
        serve_stop(&s);
    }
out:
    if (llm > 0) {
        kill(llm, SIGTERM);
        waitpid(llm, NULL, 0);
    }
    korch_test_rmdir(web);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", agents);
    CHECK_EQ(system(cmd), 0);
}

/* The package's annotations hold: mypy --strict (pyproject.toml's [tool.mypy]). */
TEST_T(pyclient_typed_mypy_strict, 120)
{
    char *dir = korch_test_mkdir("/tmp/korch-pyclient-mypy-XXXXXX");
    char src[700];
    snprintf(src, sizeof src, "%s/src/python", korch_test_root());
    const char *argv[] = {"sh", "-c", "cd \"$1\" && exec mypy --python-executable /usr/bin/python3 --cache-dir \"$2\" korch_client",
                          "mypy", src, dir ? dir : "/tmp", NULL};
    char *out = NULL, *err = NULL;
    int rc = korch_test_run(argv, NULL, &out, &err, 100);
    if (!CHECK_EQ(rc, 0))
        fprintf(stderr, "  mypy (Debian's package `mypy`, scripts/setup.sh installs it):\n%s%s\n", out ? out : "",
                err ? err : "");
    CHECK_CONTAINS(out, "Success: no issues found");
    free(out);
    free(err);
    korch_test_rmdir(dir);
}
