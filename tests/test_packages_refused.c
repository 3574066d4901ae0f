/*  A kernel without a package source (docs/files.md "Packages"): %pip
 *  install in a confined Python kernel is refused at once, saying what is
 *  allowed and who can change it, and the cell fails (korch exec exits 1),
 *  the same whether the kernel was exec'd by bwrap, forked from the fork
 *  server's template (KORCH_FORK=1) or started in a container. */
#include "test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NONE_SAID                                                                                                  \
    "PackageError: no package source: korch was started without --wheelhouse or --package-index, and this kernel " \
    "has no network, so nothing can be installed; ask the operator of korch to give one"

/* How the kernel began: a forked kernel's command line is its template's. */
static const char s_how[] = "print('STARTED', 'FORKED' if b'korch-template' in open('/proc/self/cmdline', 'rb').read() "
                            "else 'EXECED')";

static void s_refused(const char *launcher, bool fork, const char *want_start)
{
    const char *argv[] = {"/usr/bin/env", fork ? "KORCH_FORK=1" : "KORCH_FORK=0", korch_test_korch_bin(), "exec",
                          "--launcher", launcher, "-c", s_how, "-c", "%pip list --format freeze", "-c",
                          "try:\n    get_ipython().run_line_magic('pip', 'install -q tabulate')\n"
                          "except RuntimeError as e:\n    print('CAUGHT', type(e).__name__)\n",
                          "-c", "%pip install tabulate", "-c", "print('NOT-REACHED')", NULL};
    char *out = NULL, *err = NULL;
    int rc = korch_test_run(argv, NULL, &out, &err, 150);
    CHECK_EQ(rc, 1); /* the %pip cell failed */
    CHECK_CONTAINS(out, want_start);
    CHECK_CONTAINS(out, "ipykernel==");        /* %pip list still runs: only installs are refused */
    CHECK_CONTAINS(out, "CAUGHT PackageError"); /* a RuntimeError, for code that catches one */
    CHECK_CONTAINS(out, NONE_SAID);
    CHECK(strstr(out ? out : "", "NOT-REACHED") == NULL);
    CHECK(strstr(out ? out : "", "externally-managed") == NULL); /* no PEP 668 wall: pip never ran */
    CHECK(strstr(out ? out : "", "Traceback") == NULL);          /* one line, not a stack */
    if (korch_test_failures())
        fprintf(stderr, "--- stdout\n%s\n--- stderr\n%s\n", out ? out : "", err ? err : "");
    free(out);
    free(err);
}

TEST_T(packages_none_refused_in_sandbox, 120) { s_refused("sandbox", false, "STARTED EXECED"); }

/* The fork server's kernels get the same guard: it comes in the argv they are forked with. */
TEST_T(packages_none_refused_in_sandbox_forked, 120) { s_refused("sandbox", true, "STARTED FORKED"); }

TEST_T(packages_none_refused_in_docker, 150) { s_refused("docker", false, "STARTED EXECED"); }

/* A local kernel is the user's own Python with the host's network: its %pip is left alone. */
TEST_T(packages_none_local_pip_left_alone, 60)
{
    const char *argv[] = {korch_test_korch_bin(), "exec", "--launcher", "local", "-c",
                          "print('GUARD', getattr(get_ipython().find_line_magic('pip'), 'korch', False))", NULL};
    char *out = NULL;
    CHECK_EQ(korch_test_run(argv, NULL, &out, NULL, 60), 0);
    CHECK_CONTAINS(out, "GUARD False");
    free(out);
}
