/*  Receipts and the clean notebook on korch's page (issue 23), in Debian's
 *  Chromium (tests/npm/webapp_receipts.js): the scripted model
 *  ("receipts") answers with five numbers the kernel printed and one it
 *  made up, after a failed attempt. The tooltip a hover shows on each
 *  number is its receipt (or "not computed by the kernel"), a computed one
 *  links to its step, and "Clean notebook" downloads the notebook without
 *  the failed attempt. Screenshot: build/screenshots/webapp-receipts.png.
 *  And the Verify button and the ledger (webapp_verify.js), and what it
 *  shows when a number was not reproduced (webapp_differed.js). */
#include "webpeer_fixture.h"

#include <libgen.h>
#include <limits.h>

/* korch serve (launcher, the scripted model on scenario) judged by
   tests/npm/SCRIPT (screenshots into build/screenshots), at least min_checks. */
static void s_web(const char *scenario, const char *launcher, const char *script_name, int min_checks)
{
    char bin[PATH_MAX], shots[PATH_MAX + 16];
    snprintf(bin, sizeof bin, "%s", korch_test_korch_bin());
    snprintf(shots, sizeof shots, "%s/screenshots", dirname(bin));
    const char *args[] = {shots, NULL};
    CHECK_GE(serve_web_peer(scenario, launcher, script_name, args, 180), min_checks);
}

TEST_T(trust_web_receipts_hover_and_clean_notebook_in_chromium, 240) { s_web("receipts", "local", "webapp_receipts.js", 10); }
/* Verify and the ledger on the page (tests/npm/webapp_verify.js): each
   step's CPU seconds and peak memory (sandbox kernels: a cgroup) and the
   turn's sums; the Verify button's result under the answer, after a reload
   too, and in the notebook's metadata. Screenshot: webapp-verify.png. */
TEST_T(trust_web_verify_button_and_ledger_in_chromium, 240) { s_web("receipts", "sandbox", "webapp_verify.js", 10); }
/* Verify's "differed" on the page (tests/npm/webapp_differed.js): the
   scripted model ("drift") quotes an unseeded random number, a fresh kernel
   draws another; the page names the number not printed again, what the
   cell printed then and now (the re-run's output, as metadata.korch.verify
   has it), after a reload too. Screenshot: webapp-differed.png. */
TEST_T(trust_web_verify_differed_in_chromium, 240) { s_web("drift", "local", "webapp_differed.js", 6); }
