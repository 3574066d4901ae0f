/*  korch run / korch chat: the agent on the command line.
 *
 *  korch run [--llm P:M] [--file PATH]... [--session DIR] [--max-steps N]
 *            [--launcher auto|docker|sandbox|swarm|local] [--json] "task"
 *  korch chat [same options]
 *  korch run --branch DIR --from-step N [--turn T] [--llm P:M] "question"
 *            a new session from step N of the one in DIR (korch_agent_branch)
 *
 *  Progress goes to stderr as it happens: the step, the model's text and
 *  code as it writes them, live outputs, and what the step waits on (on a
 *  terminal one status line redrawn in place: elapsed time, retries after
 *  429/5xx; otherwise plain lines). The final answer alone goes to stdout,
 *  except on a terminal where it has just been shown as it streamed (it is
 *  not printed twice). Each turn ends with its token count. --json prints
 *  one event per line instead. Ctrl-C interrupts the running step; the
 *  session and its kernel stay.
 */
#include "agent_cli.h"

static void s_help(FILE *f, const char *cmd)
{
    fprintf(f,
            "usage: korch %s [options]%s\n\n"
            "%s\n\n"
            "  --llm PROVIDER:MODEL  openai:gpt-4o-mini | anthropic:MODEL | ollama:MODEL | replay:FILE\n"
            "                        (default $KORCH_LLM). Keys: OPENAI_API_KEY, ANTHROPIC_API_KEY;\n"
            "                        endpoints: OPENAI_BASE_URL, ANTHROPIC_BASE_URL, OLLAMA_HOST\n"
            "  -f, --file PATH       give the model a file (copied into the kernel's working dir; repeatable)\n"
            "  --session DIR         the session directory: transcript, files, figures, notebook.ipynb\n"
            "                        (resumed when it exists; default ./korch-sessions/<time>)\n"
            "  --max-steps N         code runs per question before korch asks for the answer (default 20)\n"
            "  --max-result N        characters of each result the model sees (default 4000)\n"
            "  --max-tokens N        token budget per question (input + output; default none)\n"
            "  --max-seconds N       time budget per question (default none)\n"
            "  --prices FILE         a price table (JSON; see docs/trust.md) turning tokens into cost\n"
            "                        (default $KORCH_PRICES; none is built in)\n"
            "  --max-cost X          cost budget per question, in the price table's currency\n"
            "  --clean-notebook      also write notebook-clean.ipynb: the notebook without the failed attempts\n"
            "  --verify              after each answer, re-run the clean notebook in a fresh kernel (same launcher\n"
            "                        and kernelspec, the session's input files) and compare the outputs the\n"
            "                        answer's numbers came from; the result goes into the notebook's metadata\n"
            "  --branch DIR          start a new session from a step of the session in DIR (--from-step N),\n"
            "                        with this question and, with --llm, another model: its kernel state is\n"
            "                        rebuilt by re-running the cells up to that step (outputs compared) and\n"
            "                        restoring the snapshot kept after it; DIR is left as it is\n"
            "  --from-step N         with --branch: the session's N-th step that ran code (1 = the first)\n"
            "  --turn T              with --from-step N: step N of turn T (as the page and the notebook number them)\n"
            "  --session-mb N        output budget of the session on disk: transcript, notebook and figures\n"
            "                        together, across kernel restarts and resumes (default 256)\n"
            "  --context-chars N     roughly how much conversation is sent per request (default 120000);\n"
            "                        older outputs and images are elided first, then the oldest turns\n"
            "  --timeout S           per code execution (default 300)\n"
            "  --kernel NAME         kernelspec (default python3)\n",
            cmd, strcmp(cmd, "run") == 0 ? " \"task\"" : "",
            strcmp(cmd, "run") == 0
                ? "Ask one question; the model writes code, korch runs it in a persistent kernel and shows\n"
                  "the model the results until it answers. The answer alone goes to stdout."
                : "A multi-turn conversation over one kernel. Commands:\n"
                  "  /files         the files in the kernel's working dir\n"
                  "  /file PATH     give the model a file (copied into the working dir)\n"
                  "  /notebook      where the notebook and transcript are (written after every step)\n"
                  "  /save PATH     write the notebook (.ipynb) to PATH as well\n"
                  "  /quit          end the session (or Ctrl-D)\n"
                  "Ctrl-C interrupts the running step.");
    korch_cli_launcher_help(f, 2, 24, "auto");
    fprintf(f,
            "  --fence               the model has no tool calling: code in ```python fences\n"
            "  --no-fence            a reply with a code fence and no tool call is the answer (default:\n"
            "                        the fenced code is run, as code interpreters do)\n"
            "  --system TEXT         add TEXT to korch's system prompt\n"
            "  --system-replace TEXT use TEXT as the system prompt instead of korch's\n"
            "  --system-file FILE    the same, from a file\n"
            "  --vision / --no-vision   whether the model is shown charts as images (default: by model)\n"
            "  --json                one JSON event per line on stdout\n"
            KORCH_CLI_ENV_HELP
            "  --workdir-mb N        docker: the work dir (files/) is a tmpfs of N MiB while the kernel runs,\n"
            "                        copied back after (default 512; the kernel gets ENOSPC beyond)\n"
            "  -q, --quiet           no progress on stderr\n"
            "  -h, --help            this text\n\n"
            "Resuming (--session DIR of an earlier session) uses the model recorded in it unless --llm\n"
            "is given. A .env file in the current directory is read for KORCH_*, OPENAI_*, ANTHROPIC_*\n"
            "and OLLAMA_* variables; the real environment wins over it.\n");
}

/* ------------------------------------------------------------ signals */

static int s_on_signal(korch_loop_t *loop, int fd, void *arg)
{
    run_ctx_t *c = arg;
    int sig = korch_cli_take_signal();
    if (c->agent)
        korch_agent_interrupt(c->agent);
    if (sig != SIGINT)
        exit(130); /* SIGTERM/SIGHUP: everything on disk is already consistent */
    return 0;
}

/* A Ctrl-C during a model call: the loop is not running then, so look at
   the signal directly. */
static bool s_cancelled(void *arg) { return korch_cli_signal_pending(); }

/* ------------------------------------------------------------ set-up */

static void s_default_session(char *buf, size_t len)
{
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    char stamp[32];
    strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
    /* made (with its parent, errors reported) by the agent: korch_mkdirs */
    snprintf(buf, len, "korch-sessions/%s-%d", stamp, (int)getpid());
}

/* The model an earlier session in dir was run with (its transcript's first
   record), new string; NULL when there is none. */
static char *s_recorded_llm(const char *dir)
{
    char path[4200];
    FILE *f = korch_path_join(path, sizeof path, dir, "transcript.jsonl", NULL) == KORCH_OK ? fopen(path, "r") : NULL;
    if (!f)
        return NULL;
    char line[8192];
    char *out = NULL;
    if (fgets(line, sizeof line, f)) {
        json_t *rec = json_loads(line, 0, NULL);
        const char *llm = json_string_value(json_object_get(rec, "llm"));
        const char *type = json_string_value(json_object_get(rec, "type"));
        if (llm && *llm && type && strcmp(type, "session") == 0)
            out = strdup(llm);
        json_decref(rec);
    }
    fclose(f);
    return out;
}

static void s_chat_command(run_ctx_t *c, const char *line)
{
    if (strcmp(line, "/files") == 0) {
        json_t *files = korch_agent_files(c->agent);
        size_t i;
        json_t *f;
        json_array_foreach(files, i, f) {
            fputs("  ", stdout);
            korch_termsafe_fputs(json_string_value(json_object_get(f, "path")), KORCH_TERMSAFE_LINE, stdout);
            printf(" (%lld bytes)\n", (long long)json_integer_value(json_object_get(f, "size")));
        }
        if (!json_array_size(files))
            printf("  (no files; /file PATH adds one)\n");
        json_decref(files);
    } else if (strncmp(line, "/file ", 6) == 0) {
        korch_err_t err = {0};
        char *stored = NULL;
        if (korch_agent_add_file(c->agent, line + 6, &stored, &err) == KORCH_OK)
            printf("  added %s as %s\n", line + 6, stored);
        else
            printf("  %s\n", err.msg);
        free(stored);
    } else if (strcmp(line, "/notebook") == 0) {
        printf("  notebook: %s/notebook.ipynb (written after every step)\n  transcript: %s/transcript.jsonl\n",
               korch_agent_session_dir(c->agent), korch_agent_session_dir(c->agent));
    } else if (strncmp(line, "/save", 5) == 0 && (line[5] == 0 || line[5] == ' ')) {
        const char *path = line + 5;
        while (*path == ' ')
            path++;
        korch_err_t err = {0};
        if (!*path)
            printf("  /save PATH writes the notebook to PATH (it is kept in %s/notebook.ipynb too)\n",
                   korch_agent_session_dir(c->agent));
        else if (korch_agent_save_notebook(c->agent, path, &err) == KORCH_OK)
            printf("  notebook written to %s\n", path);
        else
            printf("  %s\n", err.msg);
    } else
        printf("  commands: /files, /file PATH, /notebook, /save PATH, /quit\n");
    fflush(stdout);
}

static int s_main(const char *cmd, int argc, char **argv)
{
    run_ctx_t c = {.lc = {.name = "auto"}, .kernel_name = "python3", .chat = strcmp(cmd, "chat") == 0,
                   .col0 = true, .code_index = -1};
    cli_agent_t0 = korch_now_ms();
    c.files = json_array();
    static const struct option longopts[] = {
        {"llm", required_argument, 0, 'l'},        {"file", required_argument, 0, 'f'},
        {"session", required_argument, 0, 's'},    {"max-steps", required_argument, 0, 'n'},
        {"max-result", required_argument, 0, 'r'}, {"timeout", required_argument, 0, 't'},
        KORCH_CLI_LAUNCHER_LONGOPTS,               {"kernel", required_argument, 0, 'k'},
        {"fence", no_argument, 0, 'F'},            {"vision", no_argument, 0, 'V'},
        {"no-vision", no_argument, 0, 'N'},        {"json", no_argument, 0, 'J'},
        {"quiet", no_argument, 0, 'q'},            {"help", no_argument, 0, 'h'},
        {"max-tokens", required_argument, 0, 'T'}, {"max-seconds", required_argument, 0, 'S'},
        {"context-chars", required_argument, 0, 'X'}, {"session-mb", required_argument, 0, 'B'},
        {"env", required_argument, 0, KORCH_CLI_OPT_ENV},
        {"workdir-mb", required_argument, 0, KORCH_CLI_OPT_WORKDIR_MB},
        {"no-fence", no_argument, 0, 'G'},         {"system", required_argument, 0, 'y'},
        {"system-replace", required_argument, 0, 'Y'}, {"system-file", required_argument, 0, 'Z'},
        {"prices", required_argument, 0, 'C'},     {"max-cost", required_argument, 0, 'D'},
        {"clean-notebook", no_argument, 0, 'E'},   {"verify", no_argument, 0, 'W'},
        {"branch", required_argument, 0, 'b'},     {"from-step", required_argument, 0, 'P'},
        {"turn", required_argument, 0, 'U'},
        {0, 0, 0, 0},
    };
    optind = 1;
    int opt, rc = 2;
    while ((opt = getopt_long(argc, argv, "+f:qh", longopts, NULL)) != -1) {
        if (korch_cli_launcher_opt(&c.lc, opt, optarg))
            continue;
        switch (opt) {
        case 'l': c.llm_spec = optarg; break;
        case 'f': json_array_append_new(c.files, json_string(optarg)); break;
        case 's': c.session = optarg; break;
        case 'n': c.max_steps = (int)korch_cli_num("max-steps", optarg, 1, 10000, true, "steps"); break;
        case 'r': c.max_result = (long)korch_cli_num("max-result", optarg, 64, 1 << 30, true, "characters"); break;
        case 't': c.timeout_s = (int)korch_cli_num("timeout", optarg, 1, 86400, true, "seconds"); break;
        case 'k': c.kernel_name = optarg; break;
        case 'F': c.fence = true; break;
        case 'V': c.vision = true; break;
        case 'N': c.no_vision = true; break;
        case 'J': c.json = true; break;
        case 'q': c.quiet = true; break;
        case 'T': c.max_tokens = (long long)korch_cli_num("max-tokens", optarg, 0, 1e12, true, "tokens, 0 = no limit"); break;
        case 'S': c.max_seconds = (int)korch_cli_num("max-seconds", optarg, 0, 1e7, true, "seconds, 0 = no limit"); break;
        case 'X': c.context_chars = (long long)korch_cli_num("context-chars", optarg, 0, 1e10, true, "characters"); break;
        case 'B': {
            char *end;
            c.session_mb = strtod(optarg, &end);
            if (*end || !(c.session_mb >= 2 && c.session_mb < 1e9)) {
                fprintf(stderr, "korch %s: bad --session-mb '%s' (megabytes, at least 2)\n", cmd, optarg);
                json_decref(c.files);
                return 2;
            }
            break;
        }
        case KORCH_CLI_OPT_WORKDIR_MB: c.workdir_mb = korch_cli_num("workdir-mb", optarg, 1, 1 << 24, false, "MiB"); break;
        case KORCH_CLI_OPT_ENV:
            if (!korch_cli_env_opt(cmd, optarg)) {
                json_decref(c.files);
                return 2;
            }
            break;
        case 'G': c.no_fence = true; break;
        case 'y': c.system_append = optarg; break;
        case 'Y': c.system_replace = optarg; break;
        case 'Z': c.system_file = optarg; break;
        case 'C': c.prices_path = optarg; break;
        case 'D': c.max_cost = korch_cli_num("max-cost", optarg, 0, 1e9, false, "dollars, 0 = no limit"); break;
        case 'E': c.clean_notebook = true; break;
        case 'W': c.verify = true; break;
        case 'b': c.branch = optarg; break;
        case 'P': c.from_step = (int)korch_cli_num("from-step", optarg, 1, 1e6, true, "a step, 1 = the first"); break;
        case 'U': c.from_turn = (int)korch_cli_num("turn", optarg, 1, 1e6, true, "a turn, 1 = the first"); break;
        case 'h': s_help(stdout, cmd); json_decref(c.files); return 0;
        default: s_help(stderr, cmd); json_decref(c.files); return 2;
        }
    }
    const char *task = optind < argc ? argv[optind] : NULL;
    c.tty = !c.json && isatty(STDERR_FILENO);
    unsigned ts_flags = c.tty ? KORCH_TERMSAFE_SGR : 0;
    c.ts_model = korch_termsafe_new(ts_flags);
    c.ts_stream[0] = korch_termsafe_new(ts_flags | (c.tty ? KORCH_TERMSAFE_CR : 0));
    c.ts_stream[1] = korch_termsafe_new(ts_flags | (c.tty ? KORCH_TERMSAFE_CR : 0));
    korch_err_t err = {0};
    korch_loop_t *loop = NULL;
    korch_llm_t *llm = NULL;
    korch_launcher_t *launcher = NULL;
    korch_instance_t *inst = NULL;
    char session[4096];
    char *recorded = NULL, *system_text = NULL;
    if (!c.ts_model || !c.ts_stream[0] || !c.ts_stream[1]) {
        fprintf(stderr, "korch %s: out of memory\n", cmd);
        goto out;
    }
    if (!c.chat && !task) {
        fprintf(stderr, "korch run: what should the model do? (korch run [options] \"task\")\n");
        goto out;
    }
    if (c.system_file && c.system_replace) {
        fprintf(stderr, "korch %s: give --system-replace or --system-file, not both\n", cmd);
        goto out;
    }
    if (c.system_file) {
        system_text = korch_read_file(c.system_file, 1u << 20, NULL, &err);
        if (!system_text) {
            fprintf(stderr, "korch %s: --system-file: %s\n", cmd, err.msg);
            goto out;
        }
        c.system_replace = system_text;
    }
    if ((c.from_step || c.from_turn) && !c.branch) {
        fprintf(stderr, "korch %s: --from-step and --turn go with --branch DIR (the session to branch from)\n", cmd);
        goto out;
    }
    if (c.branch && !c.from_step) {
        fprintf(stderr, "korch %s: --branch DIR needs --from-step N: the step to branch from (1 = the first that ran code)\n", cmd);
        goto out;
    }
    if (c.branch) { /* said before a model is chosen: the parent may be where it would come from */
        char tp[4200];
        if (korch_path_join(tp, sizeof tp, c.branch, "transcript.jsonl", NULL) != KORCH_OK || access(tp, F_OK) != 0) {
            fprintf(stderr, "korch %s: --branch: no session to branch from in '%s' (it has no transcript.jsonl)\n",
                    cmd, c.branch);
            goto out;
        }
    }
    korch_cli_load_dotenv(".env");
    if (!c.llm_spec && c.branch && (recorded = s_recorded_llm(c.branch)))
        c.llm_spec = recorded;
    if (!c.llm_spec && c.session && (recorded = s_recorded_llm(c.session)))
        c.llm_spec = recorded;
    if (!c.llm_spec)
        c.llm_spec = getenv("KORCH_LLM");
    if (!c.llm_spec || !*c.llm_spec) {
        fprintf(stderr,
                "korch %s: no LLM configured. Pick one with --llm or KORCH_LLM:\n"
                "  --llm openai:gpt-4o-mini        with OPENAI_API_KEY set (OPENAI_BASE_URL for vLLM, llama.cpp, LM Studio)\n"
                "  --llm anthropic:claude-sonnet-4-5   with ANTHROPIC_API_KEY set\n"
                "  --llm ollama:llama3.1           with Ollama running (OLLAMA_HOST)\n"
                "  --llm replay:FILE               plays a recorded conversation (make demo uses one)\n",
                cmd);
        goto out;
    }
    korch_llm_opts_t lo = {0};
    if (korch_llm_parse_spec(c.llm_spec, &lo, &err) != KORCH_OK) {
        fprintf(stderr, "korch %s: %s\n", cmd, err.msg);
        goto out;
    }
    lo.fence_mode = c.fence;
    if (c.vision || c.no_vision) {
        lo.vision = c.vision;
        lo.vision_set = true;
    }
    llm = korch_llm_new(&lo, &err);
    if (!llm) {
        fprintf(stderr, "korch %s: %s\n", cmd, err.msg);
        goto out;
    }
    /* a model that cannot be reached is said before any kernel starts or session dir is made */
    if (korch_llm_probe(llm, &err) != KORCH_OK) {
        fprintf(stderr, "korch %s: %s\n", cmd, err.msg);
        goto out;
    }
    if (!c.prices_path)
        c.prices_path = getenv("KORCH_PRICES");
    if (c.prices_path && *c.prices_path && !(c.prices = korch_prices_load(c.prices_path, &err))) {
        fprintf(stderr, "korch %s: --prices: %s\n", cmd, err.msg);
        goto out;
    }
    if (c.max_cost > 0 && !c.prices) {
        fprintf(stderr, "korch %s: --max-cost needs a price table (--prices FILE or KORCH_PRICES)\n", cmd);
        goto out;
    }
    if (c.session) {
        if (korch_path_fmt(session, sizeof session, &err, "%s", c.session)) {
            fprintf(stderr, "korch %s: --session: %s\n", cmd, err.msg);
            goto out;
        }
    } else
        s_default_session(session, sizeof session);
    if (c.branch) {
        json_t *info = NULL;
        korch_agent_branch_opts_t bo = {.parent_dir = c.branch, .dir = session, .step = c.from_step,
                                        .turn = c.from_turn, .llm = korch_llm_name(llm)};
        if (korch_agent_branch(&bo, &info, &err) != KORCH_OK) {
            fprintf(stderr, "korch %s: --branch: %s\n", cmd, err.msg);
            goto out;
        }
        json_t *p = json_object_get(info, "parent");
        if (!c.quiet && !c.json)
            fprintf(stderr, "korch: branching from step %d of %d (turn %d, step %d) of %s into %s\n",
                    (int)json_integer_value(json_object_get(p, "index")),
                    (int)json_integer_value(json_object_get(info, "steps")),
                    (int)json_integer_value(json_object_get(p, "turn")),
                    (int)json_integer_value(json_object_get(p, "step")), c.branch, session);
        json_decref(info);
    }
    loop = korch_loop_new();
    if (!loop)
        goto out;
    if (korch_launcher_needs_instance(c.lc.name)) {
        inst = korch_instance_new(NULL, &err);
        if (!inst) {
            fprintf(stderr, "korch %s: %s\n", cmd, err.msg);
            goto out;
        }
        korch_launcher_choice_t clo = c.lc;
        clo.kernel = c.kernel_name;
        clo.workdir_from_cwd = true;
        clo.give_workdir = true;
        clo.instance = korch_instance_name(inst);
        clo.quiet = c.quiet || c.json;
        clo.workdir_mb = c.workdir_mb;
        launcher = korch_launcher_choose(loop, &clo, &err);
        if (!launcher) {
            fprintf(stderr, "korch %s: %s\n", cmd, err.msg);
            goto out;
        }
        korch_launcher_sweep(launcher, korch_instance_name(inst));
    } else {
        /* its kernels are korch's own processes: no instance, no limits (it says what that means) */
        launcher = korch_launcher_choose(loop, &(korch_launcher_choice_t){.name = c.lc.name, .packages = c.lc.packages},
                                         &err);
    }
    int sigfd = korch_cli_signal_pipe();
    korch_loop_poller(loop, sigfd, s_on_signal, &c);
    korch_agent_opts_t ao = {
        .llm = llm,
        .loop = loop,
        .launcher = launcher,
        .kernelspec = c.kernel_name,
        .session_dir = session,
        .max_steps = c.max_steps,
        .max_result_chars = c.max_result > 0 ? (size_t)c.max_result : 0,
        .exec_timeout_s = c.timeout_s,
        .max_tokens = c.max_tokens > 0 ? c.max_tokens : 0,
        .max_session_bytes = (uint64_t)(c.session_mb * 1024 * 1024),
        .max_seconds = c.max_seconds,
        .max_cost = c.max_cost,
        .prices = c.prices,
        .context_chars = c.context_chars > 0 ? (size_t)c.context_chars : 0,
        .no_fence_run = c.no_fence,
        .system_append = c.system_append,
        .system_replace = c.system_replace,
        .on_event = cli_agent_on_event,
        .cancelled = s_cancelled,
        .arg = &c,
    };
    if (!c.quiet && !c.json)
        fprintf(stderr, "korch: session %s, model %s, starting the kernel...\n", session, korch_llm_name(llm));
    c.agent = korch_agent_new(&ao, &err);
    if (!c.agent) {
        fprintf(stderr, "korch %s: %s\n", cmd, err.msg);
        goto out;
    }
    size_t i;
    json_t *f;
    json_array_foreach(c.files, i, f) {
        if (korch_agent_add_file(c.agent, json_string_value(f), NULL, &err) != KORCH_OK) {
            fprintf(stderr, "korch %s: %s\n", cmd, err.msg);
            goto out;
        }
    }
    rc = 0;
    if (!c.chat) {
        char *answer = NULL;
        c.steps = 0;
        korch_rc_t arc = korch_agent_ask(c.agent, task, &answer, &err);
        if (arc != KORCH_OK) {
            if (!c.json) {
                cli_agent_end_text(&c);
                fputs("korch run: ", stderr); /* the provider's words may be in it */
                korch_termsafe_fputs(err.msg, 0, stderr);
                fputc('\n', stderr);
            }
            rc = arc == KORCH_E_INTERRUPTED ? 130 : 1;
        }
        cli_agent_turn_end(&c, arc, answer, err.msg);
        free(answer);
        if (!c.quiet && !c.json)
            fprintf(stderr, "korch: notebook %s/notebook.ipynb, charts in %s/figures\n",
                    korch_agent_session_dir(c.agent), korch_agent_session_dir(c.agent));
        goto out;
    }
    char *line = NULL;
    size_t cap = 0;
    for (;;) {
        if (!c.json) {
            fprintf(stderr, "\nyou> ");
            fflush(stderr);
        }
        ssize_t n = getline(&line, &cap, stdin);
        if (n < 0) {
            if (errno == EINTR && !feof(stdin)) {
                clearerr(stdin);
                continue;
            }
            break;
        }
        line[strcspn(line, "\n")] = 0;
        if (!*line)
            continue;
        if (strcmp(line, "/quit") == 0 || strcmp(line, "/exit") == 0)
            break;
        if (line[0] == '/') {
            s_chat_command(&c, line);
            continue;
        }
        char *answer = NULL;
        korch_err_clear(&err);
        korch_cli_take_signal(); /* a Ctrl-C at the prompt is not meant for this question */
        c.steps = 0;
        korch_rc_t arc = korch_agent_ask(c.agent, line, &answer, &err);
        if (arc != KORCH_OK) {
            cli_agent_end_text(&c);
            cli_agent_out_value(&c, "korch: ", err.msg, 0, "\n");
        }
        cli_agent_turn_end(&c, arc, answer, err.msg);
        free(answer);
    }
    free(line);
    if (!c.quiet && !c.json)
        fprintf(stderr, "korch: session saved in %s\n", korch_agent_session_dir(c.agent));
out:
    korch_agent_destroy(&c.agent);
    korch_launcher_destroy(&launcher);
    korch_instance_destroy(&inst);
    korch_llm_destroy(&llm);
    korch_loop_destroy(&loop);
    korch_prices_destroy(&c.prices);
    json_decref(c.receipts);
    json_decref(c.files);
    korch_termsafe_destroy(&c.ts_model);
    korch_termsafe_destroy(&c.ts_stream[0]);
    korch_termsafe_destroy(&c.ts_stream[1]);
    free(recorded);
    free(system_text);
    return rc;
}

int korch_cmd_run(int argc, char **argv) { return s_main("run", argc, argv); }
int korch_cmd_chat(int argc, char **argv) { return s_main("chat", argc, argv); }
