/*  The packages a session installed (metadata.korch.packages) come back
 *  wherever its code runs again (docs/files.md "Packages"): a resumed
 *  session's new kernel, verify's fresh kernel, and the kernel that
 *  replaced one that died (a container's work dir, .korch-env in it, is
 *  new). Real kernels, a wheelhouse of wheels the test builds
 *  (tests/peers/pkg_index.py --build-only), the scripted model's
 *  "usercode" scenario (RUN:<code>). */
#include "test.h"
#include "llm_fixture.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PY "/usr/bin/python3"

static bool s_wheels(const char *dir, char *wheels, size_t len)
{
    char build[900];
    snprintf(build, sizeof build, "%s %s/tests/peers/pkg_index.py %s --build-only", PY, korch_test_root(), dir);
    snprintf(wheels, len, "%s/wheels", dir);
    return CHECK_EQ(system(build), 0);
}

static void s_dump(const char *out, const char *err)
{
    if (korch_test_failures())
        fprintf(stderr, "--- stdout\n%s\n--- stderr\n%s\n", out ? out : "", err ? err : "");
}

/* The install's cell fails after pip ran (so the clean notebook drops it,
   %pip and all); a second korch run resumes the session in a new sandbox
   kernel, whose work dir has no .korch-env: the step imports the package
   all the same, and --verify's fresh kernel reproduces. */
TEST_T(packages_reinstalled_at_resume_and_verify, 180)
{
    char *pkdir = korch_test_mkdir("/tmp/korch-pkidx-XXXXXX"), *sess = korch_test_mkdir("/tmp/korch-pksess-XXXXXX");
    llm_server_t llm = {0};
    char wheels[600];
    if (!CHECK(pkdir && sess) || !s_wheels(pkdir, wheels, sizeof wheels) || !llm_server_start(&llm))
        goto out;
    llm_server_env(&llm, "usercode");
    const char *argv1[] = {korch_test_korch_bin(), "run", "--launcher", "sandbox", "--wheelhouse", wheels, "--llm",
                           "openai:gpt-4o-mini", "--session", sess,
                           "RUN:%pip install -q korch-tiny\nraise ValueError('after the install')", NULL};
    char *out = NULL, *err = NULL;
    CHECK_EQ(korch_test_run(argv1, NULL, &out, &err, 100), 0);
    CHECK_CONTAINS(out, "ValueError");
    s_dump(out, err);
    free(out);
    free(err);
    out = err = NULL;
    const char *argv2[] = {korch_test_korch_bin(), "run", "--launcher", "sandbox", "--wheelhouse", wheels, "--llm",
                           "openai:gpt-4o-mini", "--session", sess, "--verify",
                           "RUN:import korch_tiny\nprint('VALUE', korch_tiny.VALUE, 41 + 1)", NULL};
    CHECK_EQ(korch_test_run(argv2, NULL, &out, &err, 150), 0);
    CHECK_CONTAINS(err, "The 1 package(s) it had installed were installed again first.");
    CHECK_CONTAINS(out, "RAN: VALUE tiny-ok 42");
    CHECK_CONTAINS(err, "verify: reproduced in a fresh python3 kernel (1 code cell");
    s_dump(out, err);
    char nb[700];
    snprintf(nb, sizeof nb, "%s/notebook.ipynb", sess);
    json_t *doc = json_load_file(nb, 0, NULL);
    json_t *k = json_object_get(json_object_get(doc, "metadata"), "korch");
    char *pk = json_dumps(json_object_get(k, "packages"), JSON_COMPACT);
    CHECK_STREQ(pk, "[{\"name\":\"korch-tiny\",\"version\":\"1.0\"}]"); /* kept across the resume */
    CHECK_STREQ(json_string_value(json_object_get(json_object_get(k, "verify"), "status")), "reproduced");
    CHECK_EQ(json_integer_value(json_object_get(json_object_get(k, "verify"), "packages")), 1);
    free(pk);
    json_decref(doc);
    /* the transcript stays in the schema (verify's "packages" count) */
    char tr[700], script[700], *sout = NULL;
    snprintf(tr, sizeof tr, "%s/transcript.jsonl", sess);
    snprintf(script, sizeof script, "%s/tests/peers/events_schema.py", korch_test_root());
    const char *sargv[] = {PY, script, "transcript", tr, NULL};
    CHECK_EQ(korch_test_run(sargv, NULL, &sout, NULL, 60), 0);
    free(sout);
    free(out);
    free(err);
out:
    llm_server_stop(&llm);
    korch_test_rmdir(pkdir);
    korch_test_rmdir(sess);
}

/* A docker kernel that dies is replaced by a new container (a new work dir:
   .korch-env and what it held are gone); the session's packages go into
   it before the next step. */
TEST_T(packages_reinstalled_after_a_restart_in_docker, 240)
{
    char *pkdir = korch_test_mkdir("/tmp/korch-pkidx-XXXXXX"), *sess = korch_test_mkdir("/tmp/korch-pksess-XXXXXX");
    llm_server_t llm = {0};
    char wheels[600];
    if (!CHECK(pkdir && sess) || !s_wheels(pkdir, wheels, sizeof wheels) || !llm_server_start(&llm))
        goto out;
    llm_server_env(&llm, "usercode");
    const char *argv[] = {korch_test_korch_bin(), "chat", "--launcher", "docker", "--wheelhouse", wheels, "--llm",
                          "openai:gpt-4o-mini", "--session", sess, NULL};
    char *out = NULL, *err = NULL;
    CHECK_EQ(korch_test_run(argv,
                            "RUN:%pip install -q korch-tiny\n"
                            "RUN:import os; os._exit(1)\n"
                            "RUN:import os, korch_tiny; print('VALUE', korch_tiny.VALUE, sorted(os.listdir('.')))\n",
                            &out, &err, 200),
             0);
    CHECK_CONTAINS(err, "The 1 package(s) the session had installed were installed again.");
    CHECK_CONTAINS(out, "RAN: VALUE tiny-ok ['.korch-env']"); /* a new work dir, the package back in it */
    s_dump(out, err);
    free(out);
    free(err);
out:
    llm_server_stop(&llm);
    korch_test_rmdir(pkdir);
    korch_test_rmdir(sess);
}
