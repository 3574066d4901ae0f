/*  A kernel's SVG and HTML, saved and displayed, never run script in
 *  korch's origin (issue 21 items 3-4): the scripted model
 *  (tests/peers/attack_scenarios.py "svgattack") has the kernel write
 *  evil.svg, chart.svg, evil.html and a file with a CR/LF in its name and
 *  display the SVG and the HTML; tests/npm/webapp_svg.js checks the headers
 *  korch serves them with and, in Debian's Chromium, clicks every way to
 *  open or download them: the script's flag and its call to korch's API
 *  never happen. The Content-Disposition encoding itself is
 *  tests/test_download.c's. */
#include "llm_fixture.h"
#include "serve_fixture.h"

#include <jansson.h>

TEST_T(downloads_kernel_svg_and_html_never_run_in_the_page_origin, 300)
{
    if (!serve_npm_ready())
        return;
    char dir[] = "/tmp/korch-dl-XXXXXX", cmd[128];
    llm_server_t llm = {0};
    if (!llm_server_start(&llm) || !CHECK(mkdtemp(dir) != NULL))
        goto out;
    llm_server_env(&llm, "svgattack");
    const char *extra[] = {"--agent-dir", dir, "--llm", "openai:gpt-4o-mini", NULL};
    serve_t s;
    if (serve_start_args(&s, extra)) {
        char script[700];
        snprintf(script, sizeof script, "%s/tests/npm/webapp_svg.js", korch_test_root());
        const char *argv[] = {"node", script, s.line, NULL};
        json_t *j = serve_peer_json(argv, 240);
        if (!CHECK(json_is_true(json_object_get(j, "ok"))))
            serve_log_tail(&s);
        else
            fprintf(stderr, "  %d checks\n", (int)json_integer_value(json_object_get(j, "checks")));
        CHECK_GT((int)json_integer_value(json_object_get(j, "checks")), 30);
        json_decref(j);
        serve_stop(&s);
        unlink(s.log);
    }
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK_EQ(system(cmd), 0);
out:
    llm_server_stop(&llm);
}
