/*  The agent's live progress (issue 11), end to end against a real kernel
 *  and the scripted LLM server (agent_fixture.h): code as it is written,
 *  waits, tokens, the terminal, and the lines korch prints. */
#include "agent_fixture.h"

/* korch run --json: code_delta events of each step join to exactly the code
   run, for code whose JSON is full of escapes streamed in 1-5 byte pieces
   (so escapes are cut in the middle); the answer quotes what that code
   printed, which only comes out right if every escape arrived intact. */
static void s_code_deltas(const char *llm)
{
    fx_t f;
    if (!s_fx(&f, "live"))
        return;
    CHECK_EQ(s_run((const char *[]){"--llm", llm, "--json", "--session", f.session, "run the escapes", NULL}, &f.out,
                   &f.err),
             0);
    char *deltas = calloc(1, 1), *code = NULL, *answer = NULL, *save = NULL;
    int ndeltas = 0, code_step = -1, delta_step = -1;
    for (char *l = strtok_r(f.out, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        json_t *ev = json_loads(l, 0, NULL);
        const char *kind = json_string_value(json_object_get(ev, "event"));
        if (kind && strcmp(kind, "code_delta") == 0) {
            json_t *d = json_object_get(ev, "text");
            size_t have = strlen(deltas), add = json_string_length(d);
            deltas = realloc(deltas, have + add + 1);
            memcpy(deltas + have, json_string_value(d), add);
            deltas[have + add] = 0;
            ndeltas++;
            delta_step = (int)json_integer_value(json_object_get(ev, "step"));
            CHECK(!code); /* all of them before the code runs */
        } else if (kind && strcmp(kind, "code") == 0) {
            code = strdup(json_string_value(json_object_get(ev, "code")));
            code_step = (int)json_integer_value(json_object_get(ev, "step"));
        } else if (kind && strcmp(kind, "final") == 0)
            answer = strdup(json_string_value(json_object_get(ev, "text")));
        json_decref(ev);
    }
    CHECK_GT(ndeltas, 10);
    CHECK_EQ(delta_step, code_step);
    CHECK_STREQ(deltas, code);
    CHECK_CONTAINS(code, "name = \"caf\xc3\xa9 \xf0\x9f\x98\x80\"\nquote = \"say \\\"hi\\\"\\tnow\"\npath = \"C:\\\\temp\\\\x\"");
    CHECK_CONTAINS(answer, "The code printed LIVE 6 12 9 caf\xc3\xa9 \xf0\x9f\x98\x80.");
    free(deltas);
    free(code);
    free(answer);
    s_fx_end(&f);
}

TEST_T(agent_openai_code_deltas_join_to_the_code_run, 120) { s_code_deltas("openai:gpt-4o-mini"); }
TEST_T(agent_anthropic_code_deltas_join_to_the_code_run, 120) { s_code_deltas("anthropic:claude-sonnet-4-5"); }

/* korch run --json through a 429 with retry-after: 2: status events say so
   while korch waits (attempt, retry_in_ms counting down, the HTTP status),
   then the model phase again, then the answer. */
static void s_back_off_events(fx_t *f)
{
    int retries = 0, model_after = 0, finals = 0;
    long long first_wait = -1, last_wait = -1;
    char *save = NULL;
    for (char *l = strtok_r(f->out, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        json_t *ev = json_loads(l, 0, NULL);
        const char *kind = json_string_value(json_object_get(ev, "event"));
        const char *phase = json_string_value(json_object_get(ev, "phase"));
        if (kind && strcmp(kind, "status") == 0 && phase && strcmp(phase, "retry") == 0) {
            CHECK(!finals && !model_after);
            CHECK_EQ(json_integer_value(json_object_get(ev, "attempt")), 1);
            CHECK_EQ(json_integer_value(json_object_get(ev, "http_status")), 429);
            CHECK(json_is_integer(json_object_get(ev, "retry_in_ms")));
            CHECK(json_is_integer(json_object_get(ev, "elapsed_ms")));
            last_wait = json_integer_value(json_object_get(ev, "retry_in_ms"));
            if (!retries++)
                first_wait = last_wait;
        } else if (kind && strcmp(kind, "status") == 0 && phase && strcmp(phase, "model") == 0 && retries)
            model_after++;
        else if (kind && strcmp(kind, "final") == 0) {
            finals++;
            CHECK_STREQ(json_string_value(json_object_get(ev, "text")), "Waited, then answered: rate me.");
        }
        json_decref(ev);
    }
    CHECK_GE(retries, 2); /* when the back-off begins, and about every second of it */
    CHECK_EQ(first_wait, 2000);
    CHECK_LT(last_wait, first_wait);
    CHECK_GE(model_after, 1);
    CHECK_EQ(finals, 1);
}

/* The usage the scripted server reported for requests [from, to), as "IN OUT". */
static void s_reported(const llm_server_t *srv, const char *scenario, int from, int to, long long *in, long long *out)
{
    char code[600], *v = NULL;
    snprintf(code, sizeof code,
             "import json, urllib.request\n"
             "r = json.load(urllib.request.urlopen('http://127.0.0.1:%d/s/%s/requests'))[%d:%d]\n"
             "print(sum(x['usage']['input'] for x in r), sum(x['usage']['output'] for x in r), len(r))",
             srv->port, scenario, from, to);
    const char *argv[] = {"/usr/bin/python3", "-c", code, NULL};
    int n = 0;
    *in = *out = -1;
    if (CHECK_EQ(korch_test_run(argv, NULL, &v, NULL, 30), 0))
        CHECK_EQ(sscanf(v, "%lld %lld %d", in, out, &n), 3);
    CHECK_EQ(n, to - from);
    free(v);
}

/* korch chat through pipes, two turns: each ends with the turn's tokens and
   the session's, the numbers the scripted server reported. */
static void s_tokens_as_reported(fx_t *f)
{
    long long in1, out1, in2, out2;
    s_reported(&f->srv, "turns", 0, 2, &in1, &out1);
    s_reported(&f->srv, "turns", 2, 4, &in2, &out2);
    CHECK_GT(in1, 100);
    char want[256];
    snprintf(want, sizeof want, "tokens: %lld in + %lld out (session: %lld in + %lld out) ──\n", in1, out1, in1, out1);
    CHECK_CONTAINS(f->err, want);
    snprintf(want, sizeof want, "tokens: %lld in + %lld out (session: %lld in + %lld out) ──\n", in2, out2, in1 + in2,
             out1 + out2);
    CHECK_CONTAINS(f->err, want);
}

/* korch chat on a terminal (tests/peers/pty_chat.py runs it in a pty): the
   narration, the code and the answer show as the model writes them, the
   answer once; a 429 back-off is one status line counting down in place. */
static void s_pty(const char *scenario, const char *mode)
{
    fx_t f;
    if (!s_fx(&f, scenario))
        return;
    char peer[600];
    snprintf(peer, sizeof peer, "%s/tests/peers/pty_chat.py", korch_test_root());
    const char *argv[] = {"/usr/bin/python3", peer, mode, korch_test_korch_bin(), "chat", "--launcher", "local",
                          "--llm", "openai:gpt-4o-mini", "--session", f.session, NULL};
    int rc = korch_test_run(argv, NULL, &f.out, NULL, 150);
    json_t *j = f.out ? json_loads(f.out, JSON_DISABLE_EOF_CHECK, NULL) : NULL;
    if (!CHECK_EQ(rc, 0) || !CHECK(json_is_true(json_object_get(j, "ok"))))
        fprintf(stderr, "  %s\n", f.out ? f.out : "(no output)");
    else {
        json_object_del(json_object_get(j, "details"), "screen_tail");
        char *d = json_dumps(json_object_get(j, "details"), JSON_COMPACT);
        fprintf(stderr, "  %s\n", d);
        free(d);
    }
    json_decref(j);
    s_fx_end(&f);
}

TEST_T(agent_chat_on_a_terminal_streams_narration_code_and_the_answer_once, 180) { s_pty("narrate", "narrate"); }
TEST_T(agent_chat_on_a_terminal_counts_a_back_off_down_in_place, 180) { s_pty("live", "rate"); }

/* The step limit told once, steps counted without a gap, no doubled "korch: korch:". */
static void s_limit_lines(fx_t *f)
{
    CHECK(!strstr(f->err ? f->err : "", "korch: korch:"));
    CHECK(!strstr(f->err ? f->err : "", "step 5"));
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->session);
    CHECK_EQ(system(cmd), 0);
    llm_server_env(&f->srv, "dies");
}

/* A kernel death told once and noted in the notebook. */
static void s_death_lines(fx_t *f)
{
    int deaths = 0;
    for (const char *p = f->err; p && (p = strstr(p, "kernel died")); p++)
        deaths++;
    CHECK_EQ(deaths, 1);
    char *nb = s_slurp(f->session, "notebook.ipynb");
    CHECK_CONTAINS(nb, "*korch: the kernel restarted here (kernel died: exited 1); the variables defined above are "
                       "gone.*");
    free(nb);
}

static const agent_case_t s_cases[] = {
    /* the same without --json, on a pipe: one plain line when the back-off begins */
    {"status_events_during_a_429_back_off", "live", NULL,
     {{.llm = "openai:gpt-4o-mini", .args = {"--json"}, .question = "rate me", .then = s_back_off_events},
      {.llm = "openai:gpt-4o-mini", .question = "rate me again",
       .err = {"\n  … the model answered HTTP 429: retry 1 in 2.0 s (0.0 s since the request)\n"},
       .out_is = "Waited, then answered: rate me again.\n"}}},
    /* the answers go to stdout once each */
    {"chat_tokens_per_turn_and_session", "turns", NULL,
     {{.chat = "remember a number\nnow use it\n", .llm = "anthropic:claude-sonnet-4-5",
       .out_is = "\nStored.\n\nThe answer is 43.\n", .err = {"── 2 steps, "}, .then = s_tokens_as_reported}}},
    /* Through a pipe the narration streams on stderr and the answer is on stdout once. */
    {"chat_through_a_pipe_answers_once", "narrate", NULL,
     {{.chat = "what is it?\n", .llm = "openai:gpt-4o-mini",
       .out_is = "\nThe kernel says NARR 42, so that is the answer.\n",
       .err = {"── step 1 ──\nLet me work this out in the kernel first, one moment please.\n▶ code:\n"
               "    x = 6 * 7\n    print('NARR', x)\n"}}}},
};

AGENT_CASE_T(s_cases, status_events_during_a_429_back_off, 120)
AGENT_CASE_T(s_cases, chat_tokens_per_turn_and_session, 120)
AGENT_CASE_T(s_cases, chat_through_a_pipe_answers_once, 120)

/* What the terminal says, line by line: no doubled "korch: korch:", steps
   counted without a gap, a kernel death told once and noted in the
   notebook (scenario "dies"), chat --help with the commands that exist,
   /save PATH writing a notebook nbformat accepts (scenario "turns"). */
static const agent_run_t s_progress_runs[] = {
    {.llm = "ollama:llama3.1", .args = {"--max-steps", "3"}, .question = "loop",
     .err = {"\nkorch: the step limit is reached after 3 steps: asking the model for its answer without "
             "more code\n\n── step 4 ──\nStopped after 3 results.\n"},
     .then = s_limit_lines},
    {.llm = "anthropic:claude-sonnet-4-5", .question = "go",
     .err = {"\n  (died, ", "\nkorch: kernel died: exited 1; the kernel was restarted: its variables are lost\n"},
     .then = s_death_lines},
};

TEST_T(agent_progress_lines_are_exact, 180)
{
    fx_t f;
    if (!s_fx(&f, "forever"))
        return;
    s_agent_run(&f, &s_progress_runs[0]);
    s_agent_run(&f, &s_progress_runs[1]);
    s_fx_clear(&f);
    llm_server_env(&f.srv, "turns");
    const char *help[] = {korch_test_korch_bin(), "chat", "--help", NULL};
    CHECK_EQ(korch_test_run(help, NULL, &f.out, NULL, 30), 0);
    CHECK_CONTAINS(f.out, "  /file PATH     give the model a file");
    CHECK_CONTAINS(f.out, "  /save PATH     write the notebook (.ipynb) to PATH as well");
    s_fx_clear(&f);
    char saved[600], cmds[1000], path[700];
    snprintf(saved, sizeof saved, "%s/copy.ipynb", f.dir);
    snprintf(cmds, sizeof cmds, "remember a number\n/save %s\n/save\n/nonsense\n", saved);
    CHECK_EQ(s_chat("openai:gpt-4o-mini", f.session, cmds, &f.out, &f.err), 0);
    snprintf(path, sizeof path, "  notebook written to %s\n", saved);
    CHECK_CONTAINS(f.out, path);
    CHECK_CONTAINS(f.out, "  /save PATH writes the notebook to PATH");
    CHECK_CONTAINS(f.out, "  commands: /files, /file PATH, /notebook, /save PATH, /quit\n");
    char code[1600];
    snprintf(code, sizeof code,
             "import nbformat\nnb = nbformat.read('%s', as_version=4)\nnbformat.validate(nb)\n"
             "print(sum(1 for c in nb.cells if c.cell_type == 'code' and 'secret = 6 * 7' in c.source))", saved);
    s_py_prints(code, "1\n");
    s_fx_end(&f);
}
