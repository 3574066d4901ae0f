/*  Receipts and the clean notebook on korch's page (issue 23), in Debian's
 *  Chromium (tests/npm/webapp_receipts.js): the scripted model
 *  ("receipts") answers with five numbers the kernel printed and one it
 *  made up, after a failed attempt. The tooltip a hover shows on each
 *  number is its receipt (or "not computed by the kernel"), a computed one
 *  links to its step, and "Clean notebook" downloads the notebook without
 *  the failed attempt. Screenshot: build/screenshots/webapp-receipts.png. */
#include "webpeer_fixture.h"

#include <libgen.h>
#include <limits.h>

TEST_T(trust_web_receipts_hover_and_clean_notebook_in_chromium, 240)
{
    char bin[PATH_MAX], shots[PATH_MAX + 16];
    snprintf(bin, sizeof bin, "%s", korch_test_korch_bin());
    snprintf(shots, sizeof shots, "%s/screenshots", dirname(bin));
    CHECK_GE(serve_web_peer("receipts", "webapp_receipts.js", (const char *[]){shots, NULL}, 180), 10);
}
