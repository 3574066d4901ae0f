/*  A kernel's SVG and HTML, saved and displayed, never run script in
 *  korch's origin (issue 21 items 3-4): the scripted model
 *  (tests/peers/attack_scenarios.py "svgattack") has the kernel write
 *  evil.svg, chart.svg, evil.html and a file with a CR/LF in its name and
 *  display the SVG and the HTML; tests/npm/webapp_svg.js checks the headers
 *  korch serves them with and, in Debian's Chromium, clicks every way to
 *  open or download them: the script's flag and its call to korch's API
 *  never happen. The Content-Disposition encoding itself is
 *  tests/test_download.c's. */
#include "serve_fixture.h"

#include <jansson.h>

TEST_T(downloads_kernel_svg_and_html_never_run_in_the_page_origin, 300)
{
    if (!serve_npm_ready())
        return;
    char line[64], url[128], dir[] = "/tmp/korch-dl-XXXXXX";
    const char *llm_argv[] = {PY, serve_peer("llm_server.py"), NULL};
    pid_t llm = korch_test_spawn_line(llm_argv, line, sizeof line, 10, NULL);
    if (!CHECK_GT(llm, 0))
        return;
    snprintf(url, sizeof url, "http://127.0.0.1:%ld/s/svgattack/v1", strtol(line, NULL, 10));
    unsetenv("KORCH_LLM");
    setenv("OPENAI_BASE_URL", url, 1);
    setenv("OPENAI_API_KEY", "sk-test", 1);
    if (!CHECK(mkdtemp(dir) != NULL))
        goto out_llm;
    const char *extra[] = {"--agent-dir", dir, "--llm", "openai:gpt-4o-mini", NULL};
    serve_t s;
    if (serve_start_args(&s, extra)) {
        char script[700];
        snprintf(script, sizeof script, "%s/tests/npm/webapp_svg.js", korch_test_root());
        const char *argv[] = {"node", script, s.line, NULL};
        char *out = NULL, *err = NULL;
        int rc = korch_test_run(argv, NULL, &out, &err, 240);
        json_t *j = out ? json_loads(out, JSON_DISABLE_EOF_CHECK, NULL) : NULL;
        if (!CHECK_EQ(rc, 0) || !CHECK(json_is_true(json_object_get(j, "ok")))) {
            fprintf(stderr, "  %s%s\n", out ? out : "(no output)", err ? err : "");
            serve_log_tail(&s);
        } else
            fprintf(stderr, "  %s", out);
        CHECK_GT((int)json_integer_value(json_object_get(j, "checks")), 30);
        json_decref(j);
        free(out);
        free(err);
        serve_stop(&s);
        unlink(s.log);
    }
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK_EQ(system(cmd), 0);
out_llm:
    kill(llm, SIGTERM);
    waitpid(llm, NULL, 0);
    unsetenv("OPENAI_BASE_URL");
    unsetenv("OPENAI_API_KEY");
}
