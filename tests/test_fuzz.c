/*  The libFuzzer targets of tests/fuzz/, each run for a bounded time on its
 *  seed corpus (tests/fuzz/corpus/NAME/, which holds the regression inputs
 *  of the bugs they found). Built by `make fuzz` (clang, ASan + UBSan that
 *  aborts) into build-fuzz/fuzz/, or $KORCH_FUZZ_DIR.
 *
 *  A run fails on any crash, leak, UBSan report, broken property (the
 *  targets abort), timeout of one input (10 s: a server that spins) or
 *  out-of-memory. New inputs go to a scratch dir, never into the committed
 *  corpus; a failing input is copied to /tmp/korch-fuzz-NAME-crash for
 *  reproducing: build-fuzz/fuzz/NAME /tmp/korch-fuzz-NAME-crash.
 *
 *  libFuzzer replays the whole seed corpus before -max_total_time counts
 *  (fuzz_http's takes 15 s here), so every budget below runs every committed
 *  regression input. The CI budgets (about 65 s for the five) are where the
 *  edge coverage stops growing on this machine: wsmsg, routes and jsonstr
 *  reach at 5 s the edges they reach at 15 s (273/274, 160/161, 127/127);
 *  wire still finds edges up to 20 s and http runs at 45 inputs/s, so those
 *  keep their time. A deeper search is `make fuzz-long` (KORCH_FUZZ_SECONDS
 *  per target, 300 by default).
 */
#include "test.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static bool s_fuzz_bin(const char *name, char *path, size_t len)
{
    const char *dir = getenv("KORCH_FUZZ_DIR");
    if (dir && *dir)
        snprintf(path, len, "%s/%s", dir, name);
    else
        snprintf(path, len, "%s/build-fuzz/fuzz/%s", korch_test_root(), name);
    if (access(path, X_OK) != 0) {
        fprintf(stderr, "  %s is missing: run `make fuzz` (make test does)\n", path);
        return false;
    }
    return true;
}

/* The last n lines of s, for the failure report. */
static const char *s_tail(const char *s, int n)
{
    const char *p = s + strlen(s);
    while (p > s && n >= 0)
        if (*--p == '\n')
            n--;
    return p;
}

static long s_stat(const char *log, const char *key)
{
    const char *p = strstr(log, key);
    return p ? strtol(p + strlen(key), NULL, 10) : -1;
}

/* Copy the crash/timeout/leak artifact the run left in dir, if any. */
static void s_keep_artifact(const char *name, const char *dir)
{
    char cmd[PATH_MAX * 2 + 128];
    snprintf(cmd, sizeof cmd,
             "f=$(ls -1 '%s'/crash-* '%s'/leak-* '%s'/timeout-* '%s'/oom-* 2>/dev/null | head -1); "
             "[ -n \"$f\" ] && cp \"$f\" /tmp/korch-fuzz-%s-crash && echo \"  input kept: /tmp/korch-fuzz-%s-crash\" >&2",
             dir, dir, dir, dir, name, name);
    const char *argv[] = {"sh", "-c", cmd, NULL};
    korch_test_run(argv, NULL, NULL, NULL, 10);
}

/* KORCH_FUZZ_SECONDS (make fuzz-long) instead of the CI budget; the test's
   alarm moves with it. */
static int s_budget(int ci_seconds)
{
    const char *v = getenv("KORCH_FUZZ_SECONDS");
    long s = v && *v ? strtol(v, NULL, 10) : 0;
    if (s <= 0 || s > 86400)
        return ci_seconds;
    alarm((unsigned)s + 120);
    return (int)s;
}

static void s_run_fuzzer(const char *name, int ci_seconds)
{
    int seconds = s_budget(ci_seconds);
    char bin[PATH_MAX], corpus[PATH_MAX], work[] = "/tmp/korch-fuzz-XXXXXX";
    char artifacts[PATH_MAX + 2], scratch[PATH_MAX];
    if (!CHECK(s_fuzz_bin(name, bin, sizeof bin)))
        return;
    snprintf(corpus, sizeof corpus, "%s/tests/fuzz/corpus/%s", korch_test_root(), name);
    struct stat st;
    if (!CHECK(stat(corpus, &st) == 0 && S_ISDIR(st.st_mode)))
        return;
    if (!CHECK(mkdtemp(work)))
        return;
    snprintf(scratch, sizeof scratch, "%s/new", work);
    snprintf(artifacts, sizeof artifacts, "%s/", work);
    mkdir(scratch, 0700);
    char art_opt[PATH_MAX + 32], time_opt[64];
    snprintf(art_opt, sizeof art_opt, "-artifact_prefix=%s", artifacts);
    snprintf(time_opt, sizeof time_opt, "-max_total_time=%d", seconds);
    /* the first dir receives new inputs; the committed corpus is only read */
    const char *argv[] = {bin, time_opt, "-timeout=10", "-rss_limit_mb=2048",
                          "-print_final_stats=1", "-detect_leaks=1", art_opt, scratch, corpus, NULL};
    setenv("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1", 1);
    setenv("TMPDIR", work, 1); /* what a target leaves behind goes with work */
    char *out = NULL, *err = NULL;
    int rc = korch_test_run(argv, NULL, &out, &err, seconds + 75);
    long runs = s_stat(err ? err : "", "stat::number_of_executed_units:");
    long rate = s_stat(err ? err : "", "stat::average_exec_per_sec:");
    bool clean = err && !strstr(err, "ERROR: libFuzzer") && !strstr(err, "ERROR: AddressSanitizer") &&
                 !strstr(err, "ERROR: LeakSanitizer") && !strstr(err, "runtime error:") &&
                 !strstr(err, "property failed");
    fprintf(stderr, "  %s: %ld inputs in %d s (%ld/s), exit %d\n", name, runs, seconds, rate, rc);
    if (!CHECK_EQ(rc, 0) || !CHECK(clean) || !CHECK_GT(runs, 100)) {
        fprintf(stderr, "%s\n", s_tail(err ? err : "", 40));
        s_keep_artifact(name, work);
    }
    free(out);
    free(err);
    char rm[PATH_MAX + 16];
    snprintf(rm, sizeof rm, "rm -rf '%s'", work);
    const char *rmv[] = {"sh", "-c", rm, NULL};
    korch_test_run(rmv, NULL, NULL, NULL, 30);
}

/* Websocket messages from clients, both framings, with the round trip. */
TEST_T(fuzz_wsmsg, 120) { s_run_fuzzer("fuzz_wsmsg", 5); }

/* Signed kernel wire messages: HMAC, replay, the bounded stream decoder. */
TEST_T(fuzz_wire, 120) { s_run_fuzzer("fuzz_wire", 20); }

/* The router: any method and path, its promises about parameters, 404 and 405. */
TEST_T(fuzz_routes, 120) { s_run_fuzzer("fuzz_routes", 5); }

/* Raw HTTP into a real in-process korch_server (its seed corpus alone, full
   of kernel starts and restarts, takes about 15 s to replay). */
TEST_T(fuzz_http, 120) { s_run_fuzzer("fuzz_http", 30); }

/* The JSON string scanner against jansson, bounded decodes, cut points. */
TEST_T(fuzz_jsonstr, 120) { s_run_fuzzer("fuzz_jsonstr", 5); }

/* korch_htmlsafe: the rewrite of a tainted kernel's HTML is inert by an
   independent judge, and a fixed point. */
TEST_T(fuzz_htmlsafe, 120) { s_run_fuzzer("fuzz_htmlsafe", 10); }
