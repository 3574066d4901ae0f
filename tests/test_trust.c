/*  Results a person can trust (issue 23), end to end with korch run, real
 *  kernels and the scripted LLM (tests/peers/trust_scenarios.py): one event
 *  schema ending in done (docs/events.schema.json, checked by
 *  tests/peers/events_schema.py with python3-jsonschema), numbers with
 *  receipts, an honest ledger, a notebook that re-runs under Debian's
 *  nbconvert, and the rough edges. */
#include "llm_fixture.h"
#include "run_fixture.h"
#include "korch/fsutil.h"
#include "korch/loop.h"

#include <math.h>

#include <jansson.h>
#include <sys/stat.h>

/* python3 -c CODE: its stdout (new), or NULL when it failed. */
static char *s_py(const char *code)
{
    const char *argv[] = {"/usr/bin/python3", "-c", code, NULL};
    char *out = NULL, *err = NULL;
    int rc = korch_test_run(argv, NULL, &out, &err, 120);
    if (!CHECK_EQ(rc, 0))
        fprintf(stderr, "python: %s\n%s\n", out ? out : "", err ? err : "");
    free(err);
    if (rc != 0) {
        free(out);
        return NULL;
    }
    return out;
}

/* The scripted model quotes printed numbers exactly, rounded, as a percent
   of a printed ratio, without their sign, and one it made up: every event
   of the run matches the schema and ends in done, the final event's
   receipts say which is which, and so do the transcript, the notebook's
   answer cell and the CLI. */
TEST_T(trust_run_json_events_schema_and_receipts, 180)
{
    llm_server_t llm = {0};
    if (!llm_server_start(&llm))
        return;
    llm_server_env(&llm, "receipts");
    unsetenv("KORCH_PRICES");
    char *dir = korch_test_mkdir("/tmp/korch-trust-XXXXXX"), session[300], path[400], *out = NULL, *err = NULL;
    snprintf(session, sizeof session, "%s/s", dir);
    int rc = run_korch((const char *[]){"--llm", "openai:gpt-4o-mini", "--json", "--session", session, "What is the total?",
                                    NULL},
                   &out, &err);
    CHECK_EQ(rc, 0);
    snprintf(path, sizeof path, "%s/events.jsonl", dir);
    run_spit(path, out ? out : "");
    json_t *sum = run_schema("cli", path);
    CHECK_STREQ(json_string_value(json_object_get(sum, "last")), "done");
    CHECK_EQ(json_integer_value(json_object_get(json_object_get(sum, "kinds"), "final")), 1);
    CHECK_GT(json_integer_value(json_object_get(json_object_get(sum, "kinds"), "usage")), 2);
    json_decref(sum);
    snprintf(path, sizeof path, "%s/transcript.jsonl", session);
    json_decref(run_schema("transcript", path));
    json_t *lines = run_lines(out);
    json_t *final = run_event(lines, "final");
    json_t *rec = json_object_get(final, "receipts");
    /* total exact, total rounded, the percent, the delta, its magnitude, 17.3 made up */
    const char *forms[] = {"exact", "rounded", "percent", "exact", "magnitude", NULL};
    if (CHECK_EQ(json_array_size(rec), 6))
        for (size_t i = 0; i < 6; i++) {
            json_t *r = json_array_get(rec, i);
            if (forms[i]) {
                CHECK_STREQ(json_string_value(json_object_get(r, "form")), forms[i]);
                CHECK_EQ(json_integer_value(json_object_get(r, "step")), 3); /* the step that printed it */
            } else {
                CHECK_STREQ(json_string_value(json_object_get(r, "text")), "17.3");
                CHECK(json_is_false(json_object_get(r, "found")));
                CHECK_STREQ(json_string_value(json_object_get(r, "note")), "not computed by the kernel");
            }
        }
    json_t *done = run_event(lines, "done");
    CHECK_STREQ(json_string_value(json_object_get(done, "status")), "ok");
    CHECK_GT(json_integer_value(json_object_get(json_object_get(json_object_get(done, "tokens"), "turn"), "input")), 0);
    json_decref(lines);
    free(out);
    free(err);
    /* the notebook's answer cell shows and holds the receipts */
    char code[1200];
    snprintf(code, sizeof code,
             "import nbformat\nnb = nbformat.read('%s/notebook.ipynb', as_version=4)\nnbformat.validate(nb)\n"
             "a = [c for c in nb.cells if c.metadata.get('korch', {}).get('answer')][-1]\n"
             "print(len(a.metadata['korch']['receipts']), '**17.3: not computed by the kernel**' in a.source)",
             session);
    char *v = s_py(code);
    CHECK_STREQ(v, "6 True\n");
    free(v);
    /* the CLI says it under the answer */
    snprintf(session, sizeof session, "%s/s2", dir);
    CHECK_EQ(run_korch((const char *[]){"--llm", "openai:gpt-4o-mini", "--session", session, "What is the total?", NULL},
                   &out, &err),
             0);
    CHECK_CONTAINS(err, "numbers: 6 in the answer, 1 not computed by the kernel");
    CHECK_CONTAINS(err, "17.3           NOT COMPUTED BY THE KERNEL");
    CHECK_CONTAINS(err, "percent of '0.");
    free(out);
    free(err);
    korch_test_rmdir(dir);
    llm_server_stop(&llm);
}

/* The failed attempt is tagged raises-exception, so Debian's nbconvert
   runs the session's notebook through in a fresh kernel; the clean export
   has no dead end and prints the same numbers when re-run. */
TEST_T(trust_notebook_reruns_under_nbconvert, 240)
{
    llm_server_t llm = {0};
    if (!llm_server_start(&llm))
        return;
    llm_server_env(&llm, "receipts");
    unsetenv("KORCH_PRICES");
    char *dir = korch_test_mkdir("/tmp/korch-trust-XXXXXX"), session[300], *out = NULL, *err = NULL;
    snprintf(session, sizeof session, "%s/s", dir);
    CHECK_EQ(run_korch((const char *[]){"--llm", "openai:gpt-4o-mini", "--clean-notebook", "--session", session,
                                    "What is the total?", NULL},
                   &out, &err),
             0);
    CHECK_CONTAINS(err, "notebook-clean.ipynb");
    free(out);
    free(err);
    char code[2400];
    snprintf(code, sizeof code,
             "import nbformat, subprocess, sys\n"
             "d = '%s'\n"
             "nb = nbformat.read(d + '/notebook.ipynb', as_version=4)\n"
             "code = [c for c in nb.cells if c.cell_type == 'code']\n"
             "tags = [c.metadata.get('tags', []) for c in code]\n"
             "clean = nbformat.read(d + '/notebook-clean.ipynb', as_version=4)\n"
             "nbformat.validate(clean)\n"
             "cc = [c for c in clean.cells if c.cell_type == 'code']\n"
             "def run(name):\n"
             "    r = subprocess.run([sys.executable, '-m', 'nbconvert', '--to', 'notebook', '--execute', '--output', name + '-run',\n"
             "                        d + '/' + name + '.ipynb'], cwd=d + '/files', capture_output=True, text=True)\n"
             "    return r.returncode, r.stderr[-400:]\n"
             "rc1, e1 = run('notebook')\n"
             "rc2, e2 = run('notebook-clean')\n"
             "ran = nbformat.read(d + '/notebook-clean-run.ipynb', as_version=4)\n"
             "out = lambda c: ''.join(o.get('text', '') for o in c.outputs if o.output_type == 'stream')\n"
             "same = out([c for c in ran.cells if c.cell_type == 'code'][-1]) == out(cc[-1])\n"
             "print(len(code), tags, len(cc), clean.metadata['korch']['clean']['dropped'], rc1, rc2, same)\n"
             "if rc1 or rc2: print(e1, e2, file=sys.stderr)\n",
             session);
    char *v = s_py(code);
    CHECK_STREQ(v, "3 [[], ['raises-exception'], []] 2 1 0 0 True\n");
    free(v);
    korch_test_rmdir(dir);
    llm_server_stop(&llm);
}

/* The replay provider (make demo's) reports no usage: unknown everywhere,
   never 0 or -1; a token budget says it cannot be applied. */
TEST_T(trust_unknown_usage_is_unknown, 180)
{
    char *dir = korch_test_mkdir("/tmp/korch-trust-XXXXXX"), session[300], spec[700], csv[600], path[400], *out = NULL, *err = NULL;
    snprintf(session, sizeof session, "%s/s", dir);
    snprintf(spec, sizeof spec, "replay:%s/scripts/demo/replay.json", korch_test_root());
    snprintf(csv, sizeof csv, "%s/scripts/demo/sales.csv", korch_test_root());
    unsetenv("KORCH_PRICES");
    CHECK_EQ(run_korch((const char *[]){"--llm", spec, "--json", "--max-tokens", "100000", "--file", csv, "--session",
                                    session, "Which region brings the most revenue?", NULL},
                   &out, &err),
             0);
    json_t *lines = run_lines(out);
    json_t *turn = json_object_get(json_object_get(run_event(lines, "done"), "tokens"), "turn");
    CHECK(json_is_null(json_object_get(turn, "input")));
    CHECK(json_is_null(json_object_get(turn, "output")));
    CHECK_EQ(json_integer_value(json_object_get(turn, "calls")), 5);
    json_t *notice = run_event(lines, "notice");
    CHECK_CONTAINS(json_string_value(json_object_get(notice, "text")),
                   "the token budget cannot be applied: the model's API does not report its token usage");
    json_decref(lines);
    snprintf(path, sizeof path, "%s/events.jsonl", dir);
    run_spit(path, out ? out : "");
    json_decref(run_schema("cli", path));
    free(out);
    free(err);
    snprintf(path, sizeof path, "%s/transcript.jsonl", session);
    char code[1600];
    snprintf(code, sizeof code,
             "import json\nu = [json.loads(l) for l in open('%s') if '\"usage\"' in l]\n"
             "u = [r for r in u if r['type'] == 'usage']\n"
             "print(len(u), all(r['tokens']['input'] is None and r['tokens']['output'] is None for r in u),"
             " any('input_tokens' in r for r in u))\n"
             "import nbformat\nnb = nbformat.read('%s/notebook.ipynb', as_version=4)\n"
             "l = nb.metadata['korch']['ledger']\nprint(l['tokens'], l['cost'], l['llm'].startswith('replay:'))",
             path, session);
    char *v = s_py(code);
    CHECK_STREQ(v, "5 True False\n{'input': None, 'output': None, 'calls': 5, 'unreported': 5} None True\n");
    free(v);
    /* the CLI's line: unknown, not "0 in" */
    snprintf(session, sizeof session, "%s/s2", dir);
    CHECK_EQ(run_korch((const char *[]){"--llm", spec, "--file", csv, "--session", session, "Which region?", NULL}, &out,
                   &err),
             0);
    CHECK_CONTAINS(err, "tokens: unknown (the model's API did not report usage)");
    CHECK(!strstr(err, "0 in + 0 out"));
    free(out);
    free(err);
    korch_test_rmdir(dir);
}

/* A price table turns the reported tokens into cost, per call and per
   turn; a cost budget ends a turn with stopped_by "cost". */
TEST_T(trust_price_table_and_cost_budget, 180)
{
    llm_server_t llm = {0};
    if (!llm_server_start(&llm))
        return;
    llm_server_env(&llm, "receipts");
    unsetenv("KORCH_PRICES");
    char *dir = korch_test_mkdir("/tmp/korch-trust-XXXXXX"), session[300], prices[400], *out = NULL, *err = NULL;
    snprintf(prices, sizeof prices, "%s/prices.json", dir);
    run_spit(prices, "{\"currency\": \"EUR\", \"models\": {\"openai:*\": {\"input_per_mtok\": 2.5, "
                   "\"output_per_mtok\": 10}}}\n");
    snprintf(session, sizeof session, "%s/s", dir);
    CHECK_EQ(run_korch((const char *[]){"--llm", "openai:gpt-4o-mini", "--json", "--prices", prices, "--session", session,
                                    "What is the total?", NULL},
                   &out, &err),
             0);
    json_t *lines = run_lines(out);
    json_t *done = run_event(lines, "done");
    json_t *turn = json_object_get(json_object_get(done, "tokens"), "turn");
    json_t *cost = json_object_get(json_object_get(done, "cost"), "turn");
    double want = ((double)json_integer_value(json_object_get(turn, "input")) * 2.5 +
                   (double)json_integer_value(json_object_get(turn, "output")) * 10) /
                  1e6;
    CHECK_STREQ(json_string_value(json_object_get(cost, "currency")), "EUR");
    CHECK(want > 0 && fabs(json_number_value(json_object_get(cost, "amount")) - want) < 1e-7);
    json_decref(lines);
    free(out);
    free(err);
    /* a budget smaller than one call: the turn stops after its first step */
    snprintf(session, sizeof session, "%s/s2", dir);
    CHECK_EQ(run_korch((const char *[]){"--llm", "openai:gpt-4o-mini", "--json", "--prices", prices, "--max-cost",
                                    "0.0000001", "--session", session, "What is the total?", NULL},
                   &out, &err),
             0);
    lines = run_lines(out);
    done = run_event(lines, "done");
    CHECK_STREQ(json_string_value(json_object_get(done, "stopped_by")), "cost");
    CHECK_CONTAINS(json_string_value(json_object_get(run_event(lines, "notice"), "text")),
                   "the cost budget for this question is used up after 1 step");
    json_decref(lines);
    free(out);
    free(err);
    /* a broken table is a clear error before anything starts */
    run_spit(prices, "{\"currency\": \"EUR\", \"models\": {\"openai:*\": {\"input_per_mtok\": -1}}}\n");
    CHECK_EQ(run_korch((const char *[]){"--llm", "openai:gpt-4o-mini", "--prices", prices, "--session", session, "q", NULL},
                   &out, &err),
             2);
    CHECK_CONTAINS(err, "needs non-negative numbers input_per_mtok and output_per_mtok");
    free(out);
    free(err);
    korch_test_rmdir(dir);
    llm_server_stop(&llm);
}

/* A ```javascript block in a Python kernel is neither run nor the answer:
   the model is asked for Python and answers from what the kernel printed. */
TEST_T(trust_foreign_fence_asks_for_the_kernels_language, 180)
{
    llm_server_t llm = {0};
    if (!llm_server_start(&llm))
        return;
    llm_server_env(&llm, "jsfence");
    unsetenv("KORCH_PRICES");
    char *dir = korch_test_mkdir("/tmp/korch-trust-XXXXXX"), session[300], *out = NULL, *err = NULL;
    snprintf(session, sizeof session, "%s/s", dir);
    CHECK_EQ(run_korch((const char *[]){"--llm", "openai:gpt-4o-mini", "--session", session, "sum 1 2 3", NULL}, &out,
                   &err),
             0);
    CHECK_STREQ(out, "The sum is 6.\n");
    CHECK_CONTAINS(err, "the model wrote javascript code, which this python kernel cannot run: asked for python");
    free(out);
    free(err);
    korch_test_rmdir(dir);
    llm_server_stop(&llm);
}

/* A model endpoint nobody listens on: said before a kernel starts, and no
   session dir is left behind. */
TEST_T(trust_bad_endpoint_is_found_first_and_leaves_nothing, 60)
{
    char *dir = korch_test_mkdir("/tmp/korch-trust-XXXXXX"), session[300], *out = NULL, *err = NULL;
    snprintf(session, sizeof session, "%s/s", dir);
    setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1", 1);
    setenv("OPENAI_API_KEY", "sk-test", 1);
    int64_t t0 = korch_now_ms();
    CHECK_EQ(run_korch((const char *[]){"--llm", "openai:gpt-4o-mini", "--session", session, "q", NULL}, &out, &err), 2);
    CHECK_LT(korch_now_ms() - t0, 5000);
    CHECK_CONTAINS(err, "cannot reach the model 'openai:gpt-4o-mini' at 'http://127.0.0.1:9/v1'");
    CHECK_CONTAINS(err, "check OPENAI_BASE_URL");
    CHECK(!strstr(err, "starting the kernel"));
    struct stat st;
    CHECK(stat(session, &st) != 0);
    free(out);
    free(err);
    korch_test_rmdir(dir);
}

/* --fence: each code block shown once on stderr; stdout and stderr to one
   file (make demo through a pipe): the answer once. */
TEST_T(trust_fence_code_and_answer_shown_once, 180)
{
    llm_server_t llm = {0};
    if (!llm_server_start(&llm))
        return;
    llm_server_env(&llm, "fence");
    unsetenv("KORCH_PRICES");
    char *dir = korch_test_mkdir("/tmp/korch-trust-XXXXXX"), cmd[1600], log[400];
    snprintf(log, sizeof log, "%s/both.log", dir);
    snprintf(cmd, sizeof cmd,
             "'%s' run --launcher local --llm ollama:llama3.1 --fence --session '%s/s' compute > '%s' 2>&1",
             korch_test_korch_bin(), dir, log);
    CHECK_EQ(system(cmd), 0);
    size_t len = 0;
    char *text = korch_read_file(log, 1 << 20, &len, NULL);
    int codes = 0, answers = 0;
    for (const char *p = text; p && (p = strstr(p, "print('FENCE=%d' % (20 + 22))")); p++)
        codes++;
    for (const char *p = text; p && (p = strstr(p, "The kernel said FENCE=42.")); p++)
        answers++;
    CHECK_EQ(codes, 1);
    CHECK_EQ(answers, 1);
    if (codes != 1 || answers != 1)
        fprintf(stderr, "%s\n", text);
    free(text);
    korch_test_rmdir(dir);
    llm_server_stop(&llm);
}

/* --verify re-runs the clean notebook in a fresh kernel: seeded numbers
   reproduce; an unseeded one differs; a dead end whose variable a later
   cell used makes the clean notebook fail. Each result is in the event,
   the notebook's metadata and the CLI's line, with its cost in seconds
   beside the turn's. */
static void s_verify(llm_server_t *llm, const char *dir, const char *scenario, const char *want)
{
    llm_server_env(llm, scenario);
    unsetenv("KORCH_PRICES");
    char session[400], *out = NULL, *err = NULL;
    snprintf(session, sizeof session, "%s/%s", dir, scenario);
    CHECK_EQ(run_korch((const char *[]){"--llm", "openai:gpt-4o-mini", "--json", "--verify", "--session", session, "q", NULL},
                   &out, &err),
             0);
    json_t *lines = run_lines(out);
    json_t *v = json_object_get(run_event(lines, "verify"), "verify");
    CHECK_STREQ(json_string_value(json_object_get(v, "status")), want);
    CHECK_STREQ(json_string_value(json_object_get(json_array_get(lines, json_array_size(lines) - 1), "event")), "done");
    fprintf(stderr, "  %s: verify %s in %.2f s, the turn took %.2f s\n", scenario, want,
            json_number_value(json_object_get(v, "seconds")), json_number_value(json_object_get(v, "turn_seconds")));
    char path[500];
    snprintf(path, sizeof path, "%s/events.jsonl", session);
    run_spit(path, out ? out : "");
    json_decref(run_schema("cli", path));
    if (strcmp(want, "differed") == 0)
        CHECK_EQ(json_array_size(json_object_get(v, "differences")), 1);
    if (strcmp(want, "failed") == 0)
        CHECK_CONTAINS(json_string_value(json_object_get(v, "message")), "raised NameError: name 'd' is not defined");
    json_decref(lines);
    free(out);
    free(err);
    char code[800];
    snprintf(code, sizeof code,
             "import nbformat\nnb = nbformat.read('%s/notebook.ipynb', as_version=4)\n"
             "print(nb.metadata['korch']['verify']['status'])",
             session);
    char *st = s_py(code), expect[32];
    snprintf(expect, sizeof expect, "%s\n", want);
    CHECK_STREQ(st, expect);
    free(st);
}

TEST_T(trust_verify_reproduced_differed_failed, 240)
{
    llm_server_t llm = {0};
    if (!llm_server_start(&llm))
        return;
    char *dir = korch_test_mkdir("/tmp/korch-trust-XXXXXX");
    s_verify(&llm, dir, "receipts", "reproduced");
    s_verify(&llm, dir, "drift", "differed");
    s_verify(&llm, dir, "deadend", "failed");
    /* the CLI's line */
    llm_server_env(&llm, "receipts");
    char session[400], *out = NULL, *err = NULL;
    snprintf(session, sizeof session, "%s/text", dir);
    CHECK_EQ(run_korch((const char *[]){"--llm", "openai:gpt-4o-mini", "--verify", "--session", session, "q", NULL}, &out,
                   &err),
             0);
    CHECK_CONTAINS(err, "verify: reproduced in a fresh python3 kernel (2 code cells, 5 numbers compared)");
    free(out);
    free(err);
    korch_test_rmdir(dir);
    llm_server_stop(&llm);
}

/* CPU seconds and peak memory per step from the kernel's cgroup (sandbox:
   korch's; docker: the container's, read on the host), in the result events
   and the transcript's execution records: a step that burns 0.6 s of CPU
   (and finds its cgroup out of reach: the counters are korch's, not the
   kernel's word), one that touches 200 MiB, a quiet one whose peak is its
   own again (v1: reset per step). */
static void s_usage_steps(const char *launcher)
{
    llm_server_t llm = {0};
    char *dir = korch_test_mkdir("/tmp/korch-trust-XXXXXX"), session[400], *out = NULL, *err = NULL;
    if (!CHECK(dir) || !llm_server_start(&llm))
        goto out;
    llm_server_env(&llm, "usage");
    snprintf(session, sizeof session, "%s/s", dir);
    const char *argv[] = {korch_test_korch_bin(), "run", "--launcher", launcher, "--llm", "openai:gpt-4o-mini",
                          "--session", session, "--json", "measure it", NULL};
    int rc = korch_test_run(argv, NULL, &out, &err, 100);
    if (!CHECK_EQ(rc, 0))
        fprintf(stderr, "%.3000s\n%.3000s\n", out ? out : "", err ? err : "");
    CHECK_CONTAINS(out, "cgroup out of reach");
    char path[500];
    json_t *use[3] = {NULL, NULL, NULL};
    int n = 0;
    for (char *line = out; line && *line && n < 3;) {
        char *nl = strchr(line, '\n');
        json_t *j = json_loadb(line, nl ? (size_t)(nl - line) : strlen(line), 0, NULL);
        if (j && !strcmp(json_string_value(json_object_get(j, "event")) ?: "", "result"))
            use[n++] = json_incref(json_object_get(j, "usage"));
        json_decref(j);
        line = nl ? nl + 1 : NULL;
    }
    if (CHECK_EQ(n, 3)) {
        double cpu0 = json_number_value(json_object_get(use[0], "cpu_s"));
        double cpu2 = json_number_value(json_object_get(use[2], "cpu_s"));
        json_int_t m1 = json_integer_value(json_object_get(use[1], "mem_peak_bytes"));
        json_int_t m2 = json_integer_value(json_object_get(use[2], "mem_peak_bytes"));
        const char *of = json_string_value(json_object_get(use[1], "peak_of")) ?: "";
        fprintf(stderr, "  steps: cpu %.2f / %.2f / %.2f s, peak %.0f / %.0f / %.0f MiB (peak of the %s)\n", cpu0,
                json_number_value(json_object_get(use[1], "cpu_s")), cpu2,
                json_integer_value(json_object_get(use[0], "mem_peak_bytes")) / 1048576.0, m1 / 1048576.0,
                m2 / 1048576.0, of);
        CHECK(cpu0 >= 0.5 && cpu0 < 5);
        CHECK(cpu2 >= 0 && cpu2 < 0.4);
        CHECK_GE(m1, 200LL << 20);
        if (!strcmp(of, "step")) /* cgroup v1 (this machine): the quiet step's peak is its own */
            CHECK_LT(m2, m1 - (150LL << 20));
    }
    for (int i = 0; i < 3; i++)
        json_decref(use[i]);
    /* the notebook's ledger sums them */
    snprintf(path, sizeof path, "%s/notebook.ipynb", session);
    json_t *nb = json_load_file(path, 0, NULL);
    json_t *kl = json_object_get(json_object_get(json_object_get(json_object_get(nb, "metadata"), "korch"), "ledger"),
                                 "kernel");
    CHECK(json_number_value(json_object_get(kl, "cpu_s")) >= 0.5);
    CHECK_GE(json_integer_value(json_object_get(kl, "mem_peak_bytes")), 200LL << 20);
    json_decref(nb);
    /* the transcript's execution records carry the same */
    snprintf(path, sizeof path, "%s/transcript.jsonl", session);
    char *t = korch_read_file(path, 1 << 24, NULL, NULL);
    CHECK_CONTAINS(t, "\"usage\":{\"cpu_s\":");
    free(t);
    json_decref(run_schema("transcript", path));
    char cli[500];
    snprintf(cli, sizeof cli, "%s/run.jsonl", dir);
    run_spit(cli, out ? out : "");
    json_decref(run_schema("cli", cli));
out:
    free(out);
    free(err);
    llm_server_stop(&llm);
    if (dir)
        korch_test_rmdir(dir);
}
TEST_T(trust_cpu_and_peak_memory_per_step_from_the_cgroup, 120) { s_usage_steps("sandbox"); }
/* The same for a docker kernel: its container's cgroup, found on this host by its id (solo: docker). */
TEST_T(trust_cpu_and_peak_memory_per_step_in_docker, 150) { s_usage_steps("docker"); }
