/*  A kernel's SVG and HTML, saved and displayed, never run script in
 *  korch's origin (issue 21 items 3-4): the scripted model
 *  (tests/peers/attack_scenarios.py "svgattack") has the kernel write
 *  evil.svg, chart.svg, evil.html and a file with a CR/LF in its name and
 *  display the SVG and the HTML; tests/npm/webapp_svg.js checks the headers
 *  korch serves them with and, in Debian's Chromium, clicks every way to
 *  open or download them: the script's flag and its call to korch's API
 *  never happen. The Content-Disposition encoding itself is
 *  tests/test_download.c's. */
#include "webpeer_fixture.h"

TEST_T(downloads_kernel_svg_and_html_never_run_in_the_page_origin, 300)
{
    CHECK_GT(serve_web_peer("svgattack", NULL, "webapp_svg.js", NULL, 240), 30);
}
