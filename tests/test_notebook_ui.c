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
#include <libgen.h>
#include <limits.h>

#define CULL_S "20"

static void s_notebook_ui(const char *label, const char *const *extra, bool pool, int timeout_s)
{
    char script[700], shots[PATH_MAX + 32], bin[PATH_MAX];
    snprintf(script, sizeof script, "%s/tests/npm/notebook_ui.js", korch_test_root());
    snprintf(bin, sizeof bin, "%s", korch_test_korch_bin());
    snprintf(shots, sizeof shots, "%s/screenshots", dirname(bin));
    if (!serve_npm_ready())
        return;
    const char *args[16] = {"--cull-idle-timeout", CULL_S, "--cull-interval", "1", "--cull-connected"};
    int n = 5;
    for (int i = 0; extra && extra[i] && n < 15; i++)
        args[n++] = extra[i];
    args[n] = NULL;
    serve_t s;
    if (!serve_start_args(&s, args))
        return;
    const char *argv[] = {"node", script, s.line, shots, label, CULL_S, NULL};
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
        fprintf(stderr, "  notebook_ui %s: %s\n", label, json_string_value(f));
    char *d = j ? json_dumps(json_object_get(j, "details"), JSON_COMPACT) : NULL;
    fprintf(stderr, "  notebook_ui %s: %s (%.1f s) %.3000s\n", label, ok ? "ok" : "FAILED",
            json_number_value(json_object_get(j, "seconds")), d ? d : "");
    free(d);
    json_decref(j);
    if (!ok && err && *err) {
        size_t len = strlen(err);
        fprintf(stderr, "  --- notebook_ui.js stderr (tail) ---\n%s\n", len > 4000 ? err + len - 4000 : err);
    }
    /* the dead-kernel dialog came from korch's culler, not from a crash */
    FILE *lf = fopen(s.log, "r");
    char buf[512];
    bool culled = false, died = false, pooled = false;
    while (lf && fgets(buf, sizeof buf, lf)) {
        pooled = pooled || strstr(buf, "handed out from the warm pool") != NULL;
        culled = culled || strstr(buf, "korch: culling idle kernel") != NULL;
        died = died || strstr(buf, " dead: ") != NULL;
    }
    if (lf)
        fclose(lf);
    if (!CHECK(culled) || !CHECK(!died) || !CHECK(pooled == pool))
        fprintf(stderr, "  notebook_ui %s: korch's log: culled %d, a kernel died %d, from the pool %d\n", label, culled,
                died, pooled);
    int left = serve_kernel_count(&s);
    CHECK_EQ(left, 0);
    serve_stop(&s);
    if (!ok || !culled || died || pooled != pool || left)
        serve_log_tail(&s);
    unlink(s.log);
    free(out);
    free(err);
}

TEST_T(notebook_ui_local, 240) { s_notebook_ui("local", NULL, false, 200); }

/* Containers, the kernel handed out from a warm pool of one. */
static const char *const s_docker_pool[] = {"--launcher", "docker", "--pool", "1", NULL};
TEST_T(notebook_ui_docker_pool, 300) { s_notebook_ui("docker-pool", s_docker_pool, true, 260); }
