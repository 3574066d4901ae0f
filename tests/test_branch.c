/*  Branching a session from one of its steps (issue 23 item 3) with korch
 *  run --branch, real local kernels and the scripted LLM
 *  (tests/peers/branch_scenarios.py: its replies depend on what korch
 *  sent). The parent defines a at step 1, an unseeded random r at step 2 and
 *  b at step 3; a branch's model asks the kernel which exist and what r is.
 *  The API and the page: tests/test_branch_serve.c. */
#include "llm_fixture.h"
#include "run_fixture.h"
#include "korch/fsutil.h"
#include "korch/loop.h"

#include <jansson.h>
#include <sys/stat.h>
#include <unistd.h>

/* Every file below dir with its bytes' digest, mode and size (new string):
   equal before and after means untouched, byte for byte. */
static char *s_tree(const char *dir)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "cd '%s' && find . -printf '%%p %%y %%m %%s %%T@\\n' | sort && find . -type f | sort | xargs -r sha256sum",
             dir);
    const char *argv[] = {"/bin/sh", "-c", cmd, NULL};
    char *out = NULL;
    CHECK_EQ(korch_test_run(argv, NULL, &out, NULL, 30), 0);
    return out;
}

/* The transcript's records (new array). */
static json_t *s_records(const char *session)
{
    char path[400];
    snprintf(path, sizeof path, "%s/transcript.jsonl", session);
    size_t len = 0;
    char *text = korch_read_file(path, 64u << 20, &len, NULL);
    json_t *r = run_lines(text);
    free(text);
    return r;
}

/* The parent's three steps (a, r, b) with one model; a branch from step 2
   with another: a is there, r is the parent's very number (the snapshot of
   step 2 restored over a re-run that drew another one: "differed", step 2
   named), b (step 3) is absent; from step 1 the re-run reproduces. The
   branch's transcript names its parent, step and model; the parent's dir
   is the same byte for byte. Every event and record matches the schema. */
TEST_T(branch_cli_state_from_step_n_with_another_model, 240)
{
    llm_server_t llm = {0};
    if (!llm_server_start(&llm))
        return;
    llm_server_env(&llm, "branch");
    unsetenv("KORCH_PRICES");
    char *dir = korch_test_mkdir("/tmp/korch-branch-XXXXXX"), parent[300], br[300], path[400], *out = NULL, *err = NULL;
    snprintf(parent, sizeof parent, "%s/parent", dir);
    int64_t t0 = korch_now_ms();
    CHECK_EQ(run_korch((const char *[]){"--llm", "openai:gpt-4o-mini", "--json", "--session", parent, "Build it", NULL},
                   &out, &err),
             0);
    int64_t parent_ms = korch_now_ms() - t0;
    json_t *lines = run_lines(out);
    const char *answer = json_string_value(json_object_get(run_event(lines, "final"), "text"));
    char r_parent[32] = "";
    const char *rp = answer ? strstr(answer, " R=") : NULL;
    if (CHECK(rp != NULL))
        sscanf(rp + 3, "%31[0-9]", r_parent);
    CHECK_GT(strlen(r_parent), 8);
    json_int_t parent_turn_ms = json_integer_value(json_object_get(run_event(lines, "done"), "elapsed_ms"));
    json_decref(lines);
    free(out);
    free(err);
    /* the snapshot after the last step is written once: snapshot.json is that step's snapshots/exec-3.json */
    struct stat s_now, s_kept;
    snprintf(path, sizeof path, "%s/snapshot.json", parent);
    bool now_ok = stat(path, &s_now) == 0;
    snprintf(path, sizeof path, "%s/snapshots/exec-3.json", parent);
    if (CHECK(now_ok) && CHECK(stat(path, &s_kept) == 0))
        CHECK(s_now.st_ino == s_kept.st_ino && s_now.st_dev == s_kept.st_dev);
    char *before = s_tree(parent);

    /* from step 2, another model */
    snprintf(br, sizeof br, "%s/b2", dir);
    t0 = korch_now_ms();
    CHECK_EQ(run_korch((const char *[]){"--branch", parent, "--from-step", "2", "--llm", "openai:gpt-4.1-mini", "--json",
                                    "--session", br, "BRANCHQ which names are there?", NULL},
                   &out, &err),
             0);
    int64_t branch_ms = korch_now_ms() - t0;
    snprintf(path, sizeof path, "%s/events-b2.jsonl", dir);
    run_spit(path, out ? out : "");
    json_decref(run_schema("cli", path));
    lines = run_lines(out);
    char want[160];
    snprintf(want, sizeof want, "model=gpt-4.1-mini have=a,r r=%s", r_parent);
    CHECK_STREQ(json_string_value(json_object_get(run_event(lines, "final"), "text")), want);
    json_t *ev = run_event(lines, "branch");
    json_t *state = json_object_get(ev, "state");
    CHECK_STREQ(json_string_value(json_object_get(ev, "llm")), "openai:gpt-4.1-mini");
    CHECK_STREQ(json_string_value(json_object_get(json_object_get(ev, "parent"), "session")), "parent");
    CHECK_EQ(json_integer_value(json_object_get(json_object_get(ev, "parent"), "step")), 2);
    CHECK_STREQ(json_string_value(json_object_get(state, "status")), "differed");
    CHECK_EQ(json_integer_value(json_object_get(state, "rerun")), 2);
    CHECK_EQ(json_integer_value(json_object_get(state, "same")), 1);
    CHECK(json_is_true(json_object_get(state, "restored")));
    json_t *d0 = json_array_get(json_object_get(state, "differences"), 0);
    CHECK_EQ(json_integer_value(json_object_get(d0, "step")), 2);
    char printed[64];
    snprintf(printed, sizeof printed, "R %s\n", r_parent);
    CHECK_STREQ(json_string_value(json_object_get(d0, "printed")), printed);
    CHECK_CONTAINS(json_string_value(json_object_get(state, "message")), "exactly the parent's");
    double rebuild_s = json_real_value(json_object_get(state, "seconds"));
    json_decref(lines);
    free(out);
    free(err);
    /* its transcript: the branch's model first, its parent and step recorded */
    json_t *recs = s_records(br);
    CHECK_STREQ(json_string_value(json_object_get(json_array_get(recs, 0), "llm")), "openai:gpt-4.1-mini");
    size_t i;
    json_t *r;
    int branch_recs = 0;
    json_array_foreach(recs, i, r) if (strcmp(json_string_value(json_object_get(r, "type")) ?: "", "branch") == 0)
    {
        branch_recs++;
        CHECK_EQ(json_integer_value(json_object_get(json_object_get(r, "parent"), "step")), 2);
        CHECK_STREQ(json_string_value(json_object_get(json_object_get(r, "parent"), "llm")), "openai:gpt-4o-mini");
    }
    CHECK_EQ(branch_recs, 2); /* made, then rebuilt (with its state) */
    json_decref(recs);
    snprintf(path, sizeof path, "%s/transcript.jsonl", br);
    json_decref(run_schema("transcript", path));

    /* from step 1, the parent's model: a alone, reproduced */
    snprintf(br, sizeof br, "%s/b1", dir);
    CHECK_EQ(run_korch((const char *[]){"--branch", parent, "--from-step", "1", "--json", "--session", br,
                                    "BRANCHQ which names are there?", NULL},
                   &out, &err),
             0);
    lines = run_lines(out);
    CHECK_STREQ(json_string_value(json_object_get(run_event(lines, "final"), "text")), "model=gpt-4o-mini have=a r=None");
    CHECK_STREQ(json_string_value(json_object_get(json_object_get(run_event(lines, "branch"), "state"), "status")),
                "reproduced");
    json_decref(lines);
    free(out);
    free(err);

    /* and step 2 of turn 1 asked for by turn, as the page does: the stderr words */
    snprintf(br, sizeof br, "%s/bt", dir);
    CHECK_EQ(run_korch((const char *[]){"--branch", parent, "--turn", "1", "--from-step", "3", "--session", br,
                                    "BRANCHQ which names are there?", NULL},
                   &out, &err),
             0);
    CHECK_CONTAINS(out, "have=a,r,b");
    CHECK_CONTAINS(err, "branching from step 3 of 3 (turn 1, step 3)");
    CHECK_CONTAINS(err, "This session is a branch of session parent from its step 3");
    free(out);
    free(err);

    char *after = s_tree(parent);
    CHECK_STREQ(after, before); /* the parent untouched, byte for byte */
    free(before);
    free(after);
    fprintf(stderr,
            "branch cost (local launcher, scripted model): parent run %.2f s (its turn %.2f s), branch run %.2f s, "
            "of which the rebuild (2 cells re-run, snapshot restored) %.3f s\n",
            (double)parent_ms / 1e3, (double)parent_turn_ms / 1e3, (double)branch_ms / 1e3, rebuild_s);
    korch_test_rmdir(dir);
    llm_server_stop(&llm);
}

/* What a person can get wrong, each an error that says what to do, exit 2,
   and no dir left behind: step 0, a step past the last, a turn without that
   step, no session at the parent's path, a branch dir that exists, the
   step without --branch. The parent untouched. */
TEST_T(branch_cli_bad_inputs, 120)
{
    llm_server_t llm = {0};
    if (!llm_server_start(&llm))
        return;
    llm_server_env(&llm, "branch");
    char *dir = korch_test_mkdir("/tmp/korch-branch-XXXXXX"), parent[300], br[300], *out = NULL, *err = NULL;
    snprintf(parent, sizeof parent, "%s/parent", dir);
    snprintf(br, sizeof br, "%s/br", dir);
    CHECK_EQ(run_korch((const char *[]){"--llm", "openai:gpt-4o-mini", "--session", parent, "Build it", NULL}, &out, &err),
             0);
    free(out);
    free(err);
    char *before = s_tree(parent);
    struct {
        const char *args[12];
        const char *says;
    } cases[] = {
        {{"--branch", parent, "--from-step", "0", "--session", br, "q", NULL}, "--from-step wants a whole number from 1"},
        {{"--branch", parent, "--from-step", "4", "--session", br, "q", NULL},
         "step 4 is out of range: the session has 3 steps that ran code (1 to 3)"},
        {{"--branch", parent, "--turn", "2", "--from-step", "1", "--session", br, "q", NULL},
         "turn 2 has no step 1 that ran code (it has 0 such steps); the session has 3 in all"},
        {{"--branch", "/nonexistent/korch-parent", "--from-step", "1", "--session", br, "q", NULL},
         "no session to branch from in '/nonexistent/korch-parent' (it has no transcript.jsonl)"},
        {{"--branch", parent, "--from-step", "1", "--session", parent, "q", NULL},
         "exists already: a branch starts in a new session dir"},
        {{"--from-step", "1", "--session", br, "q", NULL}, "--from-step and --turn go with --branch DIR"},
        {{"--branch", parent, "--session", br, "q", NULL}, "--branch DIR needs --from-step N"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        CHECK_EQ(run_korch(cases[i].args, &out, &err), 2);
        if (!CHECK_CONTAINS(err, cases[i].says))
            fprintf(stderr, "case %zu\n", i);
        CHECK(access(br, F_OK) != 0);
        free(out);
        free(err);
    }
    char *after = s_tree(parent);
    CHECK_STREQ(after, before);
    free(before);
    free(after);
    korch_test_rmdir(dir);
    llm_server_stop(&llm);
}
