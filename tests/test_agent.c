/*  The agent end to end: korch run / korch chat against a real kernel and
 *  the scripted LLM server (tests/peers/llm_server.py, scenarios in
 *  tests/peers/agent_scenarios.py), for each provider's wire format.
 *  Most tests are a row of s_cases (agent_fixture.h): a scenario, korch's
 *  runs and what each must print, and the checks beyond that. The live
 *  progress (streamed code, waits, tokens, the terminal) is in
 *  test_agent_live.c. */
#include "agent_fixture.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

static void s_analysis(const char *llm, bool vision)
{
    fx_t f;
    if (!s_fx(&f, "analysis"))
        return;
    char csv[600];
    snprintf(csv, sizeof csv, "%s/scripts/demo/sales.csv", korch_test_root());
    int rc = s_run((const char *[]){"--llm", llm, vision ? "--vision" : "--no-vision", "--file", csv, "--session",
                                    f.session, "What is the total revenue?", NULL},
                   &f.out, &f.err);
    CHECK_EQ(rc, 0);
    /* 28607.50 and 3870 only exist if the kernel's real output reached the model */
    CHECK_CONTAINS(f.out, "Total revenue is 28607.50 from 3695 units");
    CHECK_CONTAINS(f.out, vision ? "chart seen as 1 image(s)" : "chart named: image/png");
    CHECK_CONTAINS(f.err, "KeyError");
    if (rc != 0)
        fprintf(stderr, "%s\n", f.err);
    /* the session: PNG, notebook that validates, transcript */
    char path[700];
    snprintf(path, sizeof path, "%s/figures/fig-1.png", f.session);
    size_t len = 0;
    char *png = korch_read_file(path, 1 << 24, &len, NULL);
    CHECK(png && len > 1000 && memcmp(png, "\x89PNG", 4) == 0);
    free(png);
    char code[1600];
    snprintf(code, sizeof code,
             "import nbformat\nnb = nbformat.read('%s/notebook.ipynb', as_version=4)\nnbformat.validate(nb)\n"
             "code = [c for c in nb.cells if c.cell_type == 'code']\n"
             "pngs = sum(1 for c in code for o in c.outputs if 'image/png' in o.get('data', {}))\n"
             "errs = sum(1 for c in code for o in c.outputs if o.output_type == 'error')\n"
             "print(len(code), pngs, errs, [c.execution_count for c in code])",
             f.session);
    s_py_prints(code, "4 1 1 [1, 2, 3, 4]\n");
    char *t = s_slurp(f.session, "transcript.jsonl");
    CHECK_CONTAINS(t, "\"type\":\"final\"");
    CHECK_CONTAINS(t, "\"type\":\"execution\"");
    free(t);
    /* what korch sent: the tool result with the real number went back */
    snprintf(code, sizeof code,
             "import json, urllib.request\nr = json.load(urllib.request.urlopen('http://127.0.0.1:%d/s/analysis/requests'))\n"
             "print(len(r), any('UNITS=3695' in json.dumps(x) for x in r))",
             f.srv.port);
    s_py_prints(code, "5 True\n");
    s_fx_end(&f);
}

TEST_T(agent_openai_analysis_with_error_and_chart, 180) { s_analysis("openai:gpt-4o-mini", true); }
TEST_T(agent_anthropic_analysis_with_error_and_chart, 180) { s_analysis("anthropic:claude-sonnet-4-5", true); }
TEST_T(agent_ollama_analysis_with_error_and_chart, 180) { s_analysis("ollama:llama3.1", false); }

/* The same session with the kernel in a hardened container. */
TEST_T(agent_analysis_in_docker, 180)
{
    s_launcher = "docker";
    s_analysis("openai:gpt-4o-mini", true);
}

/* The same session with the kernel in the sandbox (bubblewrap + a cgroup). */
TEST_T(agent_analysis_in_sandbox, 180)
{
    s_launcher = "sandbox";
    s_analysis("openai:gpt-4o-mini", true);
}

/* kill -9 during a slow model call, then resume: nothing said before is lost. */
TEST_T(agent_resume_after_kill_9, 180)
{
    fx_t f;
    if (!s_fx(&f, "slowthink"))
        return;
    char transcript[600];
    snprintf(transcript, sizeof transcript, "%s/transcript.jsonl", f.session);
    pid_t pid = fork();
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        dup2(devnull, 1);
        dup2(devnull, 2);
        execl(korch_test_korch_bin(), "korch", "run", "--launcher", "local", "--llm", "openai:gpt-4o-mini",
              "--session", f.session, "think slowly", (char *)NULL);
        _exit(127);
    }
    /* wait until step 1's execution is on disk, then kill korch mid-answer */
    bool seen = false;
    for (int i = 0; i < 600 && !seen; i++) {
        usleep(100000);
        char *t = korch_read_file(transcript, 1 << 24, NULL, NULL);
        seen = t && strstr(t, "\"type\":\"execution\"");
        free(t);
    }
    CHECK(seen);
    usleep(1500000);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    s_agent_run(&f, &(agent_run_t){.llm = "openai:gpt-4o-mini", .question = "resume please",
                                    .err = {"resumed session"}, .out = {"State after resume: resumed ok."}});
    s_fx_end(&f);
}

static void s_excel(const char *launcher)
{
    fx_t f;
    if (!s_fx(&f, "excel"))
        return;
    s_launcher = launcher;
    char xlsx[600], code[900];
    snprintf(xlsx, sizeof xlsx, "%s/given.xlsx", f.dir);
    /* an .xlsx made by openpyxl on the host, given to the model */
    snprintf(code, sizeof code, "import pandas as pd\npd.DataFrame({'n': [5, 7]}).to_excel('%s', index=False)", xlsx);
    const char *py[] = {"/usr/bin/python3", "-c", code, NULL};
    CHECK_EQ(korch_test_run(py, NULL, NULL, NULL, 60), 0);
    s_agent_run(&f, &(agent_run_t){.llm = "openai:gpt-4o-mini",
                                    .args = {"--memory", "700", "--pids", "200", "--file", xlsx},
                                    .question = "excel",
                                    .out = {"Excel: XLSX=42, UPLOADED=12",
                                            /* --memory 700 reached the container */
                                            strcmp(launcher, "docker") == 0 ? "MEM=734003200" : NULL},
                                    .err = {"created t.xlsx"}});
    s_launcher = "local";
    s_fx_end(&f);
}

TEST_T(agent_xlsx_read_and_written, 180) { s_excel("local"); }
TEST_T(agent_xlsx_read_and_written_in_docker, 180) { s_excel("docker"); }

/* ---- the checks beyond what a run prints, for the table below ---- */

/* The notebook marks the restart, and the cell whose kernel died has a note. */
static void s_died_in_the_notebook(fx_t *f)
{
    char code[1600];
    snprintf(code, sizeof code,
             "import nbformat\nnb = nbformat.read('%s/notebook.ipynb', as_version=4)\nnbformat.validate(nb)\n"
             "died = [c for c in nb.cells if c.cell_type == 'code' and c.metadata.get('korch', {}).get('status') == 'died']\n"
             "marks = [c for c in nb.cells if c.cell_type == 'markdown' and 'kernel restarted here' in c.source]\n"
             "print(len(died), 'kernel died' in died[0].metadata['korch']['note'] if died else None, len(marks),"
             " nb.cells.index(marks[0]) == nb.cells.index(died[0]) + 1 if died and marks else None)",
             f->session);
    s_py_prints(code, "1 True 1 True\n");
}

/* korch run --json: one event a line; two steps, one code, one final. */
static void s_json_events(fx_t *f)
{
    int steps = 0, codes = 0, finals = 0;
    char *save = NULL;
    for (char *l = strtok_r(f->out, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        json_t *ev = json_loads(l, 0, NULL);
        if (!CHECK(ev))
            continue;
        const char *kind = json_string_value(json_object_get(ev, "event"));
        steps += kind && strcmp(kind, "step") == 0;
        codes += kind && strcmp(kind, "code") == 0;
        finals += kind && strcmp(kind, "final") == 0;
        json_decref(ev);
    }
    CHECK_EQ(steps, 2);
    CHECK_EQ(codes, 1);
    CHECK_EQ(finals, 1);
}

/* What was said is on disk though the model failed. */
static void s_question_and_error_kept(fx_t *f)
{
    char *t = s_slurp(f->session, "transcript.jsonl");
    CHECK_CONTAINS(t, "\"content\":\"first question\"");
    CHECK_CONTAINS(t, "\"type\":\"error\"");
    free(t);
}

/* The PNG the code saved is a figure; leak.png -> /etc/passwd was not copied. */
static void s_figure_kept_link_not(fx_t *f)
{
    char *png = s_slurp(f->session, "figures/fig-1.png");
    CHECK(png && memcmp(png, "\x89PNG", 4) == 0);
    free(png);
    char *none = s_slurp(f->session, "figures/fig-2.png");
    CHECK(none == NULL);
    free(none);
}

/* Two files named sales.csv in a/ and b/; a prompt in a file. */
static void s_two_sales(fx_t *f)
{
    char a[600], b[600];
    snprintf(a, sizeof a, "%s/a", f->dir);
    snprintf(b, sizeof b, "%s/b", f->dir);
    mkdir(a, 0755);
    mkdir(b, 0755);
    s_spit(a, "sales.csv", "x,y\n1,2\n");
    s_spit(b, "sales.csv", "x,y\n3,4\n5,6\n");
    s_spit(f->dir, "prompt.txt", "FROM-A-FILE");
}

static void s_both_sales_kept(fx_t *f)
{
    char *one = s_slurp(f->session, "files/sales.csv"), *two = s_slurp(f->session, "files/sales-2.csv");
    CHECK_STREQ(one, "x,y\n1,2\n");
    CHECK_STREQ(two, "x,y\n3,4\n5,6\n");
    free(one);
    free(two);
}

/* The untagged fence was not run: one execution only. */
static void s_one_execution(fx_t *f)
{
    char *t = s_slurp(f->session, "transcript.jsonl");
    const char *first = t ? strstr(t, "\"type\":\"execution\"") : NULL;
    CHECK(first && !strstr(first + 1, "\"type\":\"execution\""));
    free(t);
}

/* .env in the test's dir, korch run from there (s_back_from_dotenv returns). */
static char s_cwd[1024];
static void s_dotenv(fx_t *f)
{
    s_spit(f->dir, ".env",
           "# korch settings\nKORCH_LLM=\"openai:gpt-4o-mini\"\n"
           "export OPENAI_BASE_URL=http://127.0.0.1:9/v1 # the real environment's wins\nPATH=/nonexistent\n");
    CHECK(getcwd(s_cwd, sizeof s_cwd) != NULL);
    CHECK_EQ(chdir(f->dir), 0);
}

static void s_back_from_dotenv(fx_t *f)
{
    (void)f;
    CHECK_EQ(chdir(s_cwd), 0);
}

/* The random number R=... the first turn printed, into f->r; the snapshot. */
static void s_take_r(fx_t *f)
{
    const char *p = f->out ? strstr(f->out, "R=") : NULL;
    CHECK(p && sscanf(p, "R=%63[0-9.e-]", f->r) == 1);
    if (f->r[0] && f->r[strlen(f->r) - 1] == '.') /* the sentence's full stop */
        f->r[strlen(f->r) - 1] = 0;
}

static void s_take_r_and_snapshot(fx_t *f)
{
    s_take_r(f);
    char *snap = s_slurp(f->session, "snapshot.json");
    CHECK_CONTAINS(snap, "\"variables\":[\"items\",\"partial\",\"r\"]");
    free(snap);
}

/* Restored from the snapshot: R kept; then the snapshot removed. */
static void s_restored_then_no_snapshot(fx_t *f)
{
    char want[200], path[600];
    snprintf(want, sizeof want, "After resume: LINES=1 ITEMS=1 R=%s PARTIAL=set before failing TOLD=restored.", f->r);
    CHECK_CONTAINS(f->out, want);
    snprintf(path, sizeof path, "%s/snapshot.json", f->session);
    CHECK_EQ(unlink(path), 0);
}

/* Replayed: a new random number, and the notebook says so. */
static void s_replayed(fx_t *f)
{
    CHECK(f->r[0] && !strstr(f->out ? f->out : "", f->r));
    char *nb = s_slurp(f->session, "notebook.ipynb");
    CHECK_CONTAINS(nb, "korch: The session was resumed in a fresh kernel");
    free(nb);
}

static void s_rebuilt(fx_t *f)
{
    char want[200];
    snprintf(want, sizeof want, "After resume: LINES=2 R=%s TWICE=42.", f->r);
    CHECK_CONTAINS(f->out, want);
}

/* Debian registers IRkernel's kernelspec as "ir"; if not, register its own. */
static void s_r_kernel(fx_t *f)
{
    struct stat st;
    char jp[600];
    snprintf(jp, sizeof jp, "%s/jupyter", f->dir);
    if (stat("/usr/share/jupyter/kernels/ir/kernel.json", &st) != 0) {
        char cmd[1400];
        snprintf(cmd, sizeof cmd, "mkdir -p '%s/kernels' && cp -r /usr/lib/R/site-library/IRkernel/kernelspec '%s/kernels/ir'",
                 jp, jp);
        CHECK_EQ(system(cmd), 0);
        setenv("JUPYTER_PATH", jp, 1);
    }
    s_spit(f->dir, "nums.csv", "x\n1.5\n2.5\n4.25\n");
}

static void s_r_notebook(fx_t *f)
{
    char *png = s_slurp(f->session, "figures/fig-1.png");
    CHECK(png && memcmp(png, "\x89PNG", 4) == 0);
    free(png);
    char code[1600];
    snprintf(code, sizeof code,
             "import nbformat\nnb = nbformat.read('%s/notebook.ipynb', as_version=4)\nnbformat.validate(nb)\n"
             "print(nb.metadata.kernelspec.name, nb.metadata.kernelspec.language, nb.metadata.language_info.name,"
             " len([c for c in nb.cells if c.cell_type == 'code']))",
             f->session);
    s_py_prints(code, "ir R R 2\n");
    unsetenv("JUPYTER_PATH");
}

/* The kernel planted a symlink in files/ where data.csv goes, to a victim. */
static void s_planted_link(fx_t *f)
{
    char files[600], link[700], victim[600];
    snprintf(files, sizeof files, "%s/files", f->session);
    CHECK_EQ(korch_mkdirs(files, 0755, NULL), KORCH_OK);
    s_spit(f->dir, "victim", "untouched");
    snprintf(victim, sizeof victim, "%s/victim", f->dir);
    snprintf(link, sizeof link, "%s/data.csv", files);
    CHECK_EQ(symlink(victim, link), 0);
    s_spit(f->dir, "data.csv", "a\n1\n");
}

static void s_victim_untouched(fx_t *f)
{
    char *v = s_slurp(f->dir, "victim"), *kept = s_slurp(f->session, "files/data-2.csv");
    CHECK_STREQ(v, "untouched");
    CHECK_STREQ(kept, "a\n1\n");
    free(v);
    free(kept);
}

/* A question longer than any fixed buffer: 100 KB and " END-OF-IT". */
#define S_LONG 100000
static void s_long_question(fx_t *f)
{
    f->question = malloc(S_LONG + 16);
    for (size_t i = 0; f->question && i < S_LONG; i++)
        f->question[i] = (char)('a' + i % 26);
    if (CHECK(f->question))
        memcpy(f->question + S_LONG, " END-OF-IT", 11);
}

static void s_long_question_whole(fx_t *f)
{
    char *text = s_slurp(f->session, "notebook.ipynb");
    json_t *nb = text ? json_loads(text, 0, NULL) : NULL;
    json_t *cell = json_array_get(json_object_get(nb, "cells"), 0);
    json_t *src = json_object_get(cell, "source");
    /* nbformat source: a string or a list of lines; one line here */
    const char *s = json_is_array(src) ? json_string_value(json_array_get(src, 0)) : json_string_value(src);
    CHECK_STREQ(json_string_value(json_object_get(cell, "cell_type")), "markdown");
    if (CHECK(s)) {
        CHECK_EQ(strlen(s), strlen("**User:** ") + S_LONG + 10);
        CHECK(strstr(s, " END-OF-IT") != NULL);
    }
    json_decref(nb);
    free(text);
}

/* A plain file where the session's parent dir should be. */
static void s_file_in_the_way(fx_t *f) { s_spit(f->dir, "file", "x"); }

static void s_names_the_file(fx_t *f)
{
    char blocked[600];
    snprintf(blocked, sizeof blocked, "%s/file", f->dir);
    CHECK_CONTAINS(f->err, blocked);
}

#define OPENAI "openai:gpt-4o-mini"
#define ANTHROPIC "anthropic:claude-sonnet-4-5"
#define OLLAMA "ollama:llama3.1"

static const agent_case_t s_cases[] = {
    /* korch chat: two turns in one process; then a new korch process on the
       same session: the transcript is reloaded and the kernel's state
       rebuilt by re-running the successful cells */
    {"multi_turn_and_resume_after_restart", "turns", NULL,
     {{.chat = "remember a number\n/files\nnow use it\n", .llm = OPENAI, .timeout_s = 170,
       .out = {"Stored.", "The answer is 43."}},
      {.llm = OPENAI, .question = "use it again", .err = {"resumed session"}, .out = {"The answer is 43."}}}},
    {"kernel_death_is_told_and_session_goes_on", "dies", NULL,
     {{.llm = ANTHROPIC, .question = "go", .out = {"Recovered: FRESH False."}, .err = {"kernel died"},
       .then = s_died_in_the_notebook}}},
    {"max_steps_then_final_answer_without_tools", "forever", NULL,
     {{.llm = OLLAMA, .args = {"--max-steps", "3"}, .question = "loop", .out = {"Stopped after 3 results."},
       .err = {"step limit"}}}},
    {"malformed_tool_json_goes_back_to_the_model", "badjson", NULL,
     {{.llm = OPENAI, .question = "go", .out = {"Fixed: OK 5."}}}},
    {"fence_mode", "fence", NULL,
     {{.llm = OLLAMA, .args = {"--fence"}, .question = "compute", .out = {"The kernel said FENCE=42."}}}},
    /* then resuming without --llm: the model recorded in the session; no LLM
       configured (a new session): say how to configure one */
    {"json_events_and_no_llm_message", "turns", NULL,
     {{.llm = OPENAI, .args = {"--json"}, .question = "remember a number", .then = s_json_events},
      {.question = "use it", .out = {"The answer is 43."}, .err = {"model openai:gpt-4o-mini"}},
      {.session = "fresh", .question = "anything", .rc = 2, .err = {"no LLM configured", "OPENAI_API_KEY"}}}},
    {"tool_call_printed_as_text_is_run", "printed", NULL,
     {{.llm = OPENAI, .question = "go", .out = {"Ran it: PRINTED 42."}}}},
    /* The model's API keeps failing: a clear error, and what was said is on disk. */
    {"model_500s_give_a_clear_error_and_keep_the_session", "fail500", NULL,
     {{.llm = ANTHROPIC, .question = "first question", .rc = 1, .err = {"500"}, .then = s_question_and_error_kept}}},
    /* make demo's command in a fresh clone: the session dir's parents do not
       exist yet (twice); something in the way: a clear error naming it */
    {"session_dir_parents_are_created", "turns", s_file_in_the_way,
     {{.session = "out/deeper/demo-session", .llm = OPENAI, .question = "remember a number", .out = {"Stored."}},
      {.llm = OPENAI, .question = "remember a number", .out = {"Stored."}},
      {.session = "file/sub/s", .llm = OPENAI, .question = "x", .rc = 2, .err = {"is not a directory"},
       .then = s_names_the_file}}},
    /* out.csv, a saved PNG, a folder of reports; then a deletion. The model
       gets names and sizes; the terminal says so; the PNG is a figure;
       symlinks the code planted are neither listed nor followed. */
    {"files_the_code_writes_are_told", "writer", NULL,
     {{.llm = OPENAI, .args = {"--vision"}, .question = "write files",
       .out = {"IMAGES=1", /* the PNG the code saved was shown to the vision model */
               "FIRST: created out.csv (", "created reports/r0.txt (9 bytes); created reports/r1.txt (9 bytes)",
               "created x.png (", "kept as figure fig-1.png", "SECOND: deleted out.csv"},
       .not_out = {"leak", "etcdir", "passwd"}, .err = {"[files: created out.csv"},
       .then = s_figure_kept_link_not}}},
    /* Two files with one base name: both kept, the second under a free name,
       said so; the same bytes again are not copied twice. --system adds to
       korch's prompt; --system-replace and --system-file replace it. */
    {"same_base_name_uploads_are_kept_apart", "sysecho", s_two_sales,
     {{.llm = OPENAI,
       .args = {"--file", "@/a/sales.csv", "--file", "@/b/sales.csv", "--file", "@/a/sales.csv", "--system",
                "EXTRA-RULE-7"},
       .question = "files?", .err = {"kept as 'sales-2.csv'"},
       .out = {"- sales.csv (8 bytes)", "- sales-2.csv (12 bytes)", "careful data analyst", "EXTRA-RULE-7>>"},
       .not_out = {"sales-3"}, .then = s_both_sales_kept},
      {.llm = OPENAI, .args = {"--system-replace", "ONLY-THIS"}, .question = "again", .out = {"SYSTEM<<ONLY-THIS>>"}},
      {.llm = OPENAI, .args = {"--system-file", "@/prompt.txt"}, .question = "again",
       .out = {"SYSTEM<<FROM-A-FILE>>"}}}},
    /* A ```python fence and no tool call is run (code interpreter
       behaviour); --no-fence makes it the answer. */
    {"fenced_reply_is_run_unless_no_fence", "fencerun", NULL,
     {{.llm = ANTHROPIC, .question = "go", .out = {"Ran the fence: FENCERUN=42.\n```\nFENCERUN=42\n```"},
       .then = s_one_execution},
      {.session = "s2", .llm = ANTHROPIC, .args = {"--no-fence"}, .question = "go",
       .out = {"```python\nprint('FENCERUN=%d' % (40 + 2))"}}}},
    /* .env in the working directory: read for KORCH_LLM and the rest; the real environment wins. */
    {"dotenv_is_read_and_the_environment_wins", "turns", s_dotenv,
     {{.question = "remember a number", .out = {"Stored."}, .err = {"model openai:gpt-4o-mini"},
       .then = s_back_from_dotenv}}},
    /* Resume from the snapshot: an append is not repeated, a random value
       is kept, a variable a failing cell set is kept; the model is told.
       Without the snapshot: the cells are re-run, and the model is told
       that instead. */
    {"resume_restores_the_snapshot_then_falls_back_to_replay", "snapshot", NULL,
     {{.llm = OPENAI, .question = "set up", .then = s_take_r_and_snapshot},
      {.question = "check", .err = {"restored 4 name(s) from the snapshot", "side effects did not repeat"},
       .then = s_restored_then_no_snapshot},
      {.question = "check", .out = {"LINES=2 ITEMS=1", "PARTIAL=None TOLD=re-run."},
       .err = {"side effects happened again", "1 cell(s) that failed were not re-run"}, .then = s_replayed}}},
    /* Any kernel: IRkernel (Debian's r-cran-irkernel) driven from its
       language_info: run_code, an R prompt, R notebook metadata; the model
       quotes the mean the kernel printed; the PNG it saved is a figure. */
    {"r_kernel_reads_a_csv_and_plots", "rstats", s_r_kernel,
     {{.llm = OPENAI, .args = {"--kernel", "ir", "--file", "@/nums.csv"}, .question = "mean of x?",
       .out = {"The mean is 2.750; plot saved; system names R: yes."}, .then = s_r_notebook}}},
    /* The kernel planted a symlink where an upload goes: korch never writes through it. */
    {"upload_never_follows_a_planted_symlink", "sysecho", s_planted_link,
     {{.llm = OPENAI, .args = {"--file", "@/data.csv"}, .question = "hi", .err = {"kept as 'data-2.csv'"},
       .then = s_victim_untouched}}},
    /* A function defined in a cell is not in the snapshot: the cells are
       re-run to rebuild it, then the snapshot goes over them (its random
       value kept). */
    {"resume_rebuilds_what_the_snapshot_could_not_keep", "snapfunc", NULL,
     {{.llm = OPENAI, .question = "set up", .then = s_take_r},
      {.question = "check",
       .err = {"not in the snapshot: twice (function, defined in a cell)", "were re-run first to rebuild them"},
       .then = s_rebuilt}}},
    /* A question longer than any fixed buffer (100 KB) reaches the notebook
       whole: its markdown cell was once cut at 64 KiB. */
    {"long_question_is_not_cut_in_the_notebook", "sysecho", s_long_question,
     {{.llm = OPENAI, .then = s_long_question_whole}}},
};

AGENT_CASE(s_cases, multi_turn_and_resume_after_restart)
AGENT_CASE(s_cases, kernel_death_is_told_and_session_goes_on)
AGENT_CASE(s_cases, max_steps_then_final_answer_without_tools)
AGENT_CASE(s_cases, malformed_tool_json_goes_back_to_the_model)
AGENT_CASE(s_cases, fence_mode)
AGENT_CASE(s_cases, json_events_and_no_llm_message)
AGENT_CASE(s_cases, tool_call_printed_as_text_is_run)
AGENT_CASE(s_cases, model_500s_give_a_clear_error_and_keep_the_session)
AGENT_CASE(s_cases, session_dir_parents_are_created)
AGENT_CASE(s_cases, files_the_code_writes_are_told)
AGENT_CASE(s_cases, same_base_name_uploads_are_kept_apart)
AGENT_CASE(s_cases, fenced_reply_is_run_unless_no_fence)
AGENT_CASE(s_cases, dotenv_is_read_and_the_environment_wins)
AGENT_CASE_T(s_cases, resume_restores_the_snapshot_then_falls_back_to_replay, 240)
AGENT_CASE_T(s_cases, r_kernel_reads_a_csv_and_plots, 240)
AGENT_CASE_T(s_cases, upload_never_follows_a_planted_symlink, 120)
AGENT_CASE(s_cases, resume_rebuilds_what_the_snapshot_could_not_keep)
AGENT_CASE_T(s_cases, long_question_is_not_cut_in_the_notebook, 120)
