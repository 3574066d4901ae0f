/*  korch run / korch chat: the agent on the command line.
 *
 *  korch run [--llm P:M] [--file PATH]... [--session DIR] [--max-steps N]
 *            [--launcher docker|local|auto] [--json] "task"
 *  korch chat [same options]
 *
 *  Progress goes to stderr (step, code, live outputs, elapsed time); the
 *  final answer alone to stdout; --json prints one event per line instead.
 *  Ctrl-C interrupts the running step; the session and its kernel stay.
 */
#include "cli.h"
#include "korch/agent.h"
#include "korch/instance.h"
#include "korch/log.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    bool json, quiet, chat;
    const char *llm_spec, *session, *launcher_name, *kernel_name;
    double workdir_mb;      /* --workdir-mb */
    int max_steps;
    long max_result;
    long long max_tokens, context_chars;
    int max_seconds;
    int timeout_s;
    bool fence, no_vision, vision;
    json_t *files;
    int64_t step_t0;
    bool in_text;           /* assistant text is being streamed on stderr */
    korch_agent_t *agent;
} run_ctx_t;

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
            "  --context-chars N     roughly how much conversation is sent per request (default 120000);\n"
            "                        older outputs and images are elided first, then the oldest turns\n"
            "  --timeout S           per code execution (default 300)\n"
            "  --launcher NAME       local, docker or auto (default auto)\n"
            "  --kernel NAME         kernelspec (default python3)\n"
            "  --fence               the model has no tool calling: code in ```python fences\n"
            "  --vision / --no-vision   whether the model is shown charts as images (default: by model)\n"
            "  --json                one JSON event per line on stdout\n"
            KORCH_CLI_ENV_HELP
            "  --workdir-mb N        docker: the work dir (files/) is a tmpfs of N MiB while the kernel runs,\n"
            "                        copied back after (default 512; the kernel gets ENOSPC beyond)\n"
            "  -q, --quiet           no progress on stderr\n"
            "  -h, --help            this text\n",
            cmd, strcmp(cmd, "run") == 0 ? " \"task\"" : "",
            strcmp(cmd, "run") == 0
                ? "Ask one question; the model writes code, korch runs it in a persistent kernel and shows\n"
                  "the model the results until it answers. The answer alone goes to stdout."
                : "A multi-turn conversation over one kernel. Commands: /files, /notebook, /save, /quit.\n"
                  "Ctrl-C interrupts the running step; Ctrl-D or /quit ends the session.");
}

/* ------------------------------------------------------------ events */

static int64_t s_t0;

static void s_json_event(const char *kind, int step, json_t *fields)
{
    json_t *ev = fields ? fields : json_object();
    json_object_set_new(ev, "event", json_string(kind));
    json_object_set_new(ev, "step", json_integer(step));
    json_object_set_new(ev, "t_ms", json_integer(korch_now_ms() - s_t0)); /* since korch started */
    json_dumpf(ev, stdout, JSON_COMPACT | JSON_ENSURE_ASCII);
    putchar('\n');
    fflush(stdout);
    json_decref(ev);
}

static void s_end_text(run_ctx_t *c)
{
    if (c->in_text) {
        fputc('\n', stderr);
        c->in_text = false;
    }
}

static void s_on_event(const korch_agent_event_t *ev, void *arg)
{
    run_ctx_t *c = arg;
    if (c->json) {
        switch (ev->type) {
        case KORCH_AGENT_STEP: s_json_event("step", ev->step, NULL); break;
        case KORCH_AGENT_TEXT:
            s_json_event("text", ev->step, json_pack("{s:s%}", "delta", ev->text, ev->text_len));
            break;
        case KORCH_AGENT_CODE: s_json_event("code", ev->step, json_pack("{s:s}", "code", ev->text)); break;
        case KORCH_AGENT_OUTPUT: s_json_event("output", ev->step, json_pack("{s:O}", "output", ev->data)); break;
        case KORCH_AGENT_RESULT:
            s_json_event("result", ev->step, json_pack("{s:O, s:s}", "result", ev->data, "model_sees", ev->text));
            break;
        case KORCH_AGENT_FINAL: s_json_event("final", ev->step, json_pack("{s:s}", "answer", ev->text)); break;
        case KORCH_AGENT_ERROR: s_json_event("error", ev->step, json_pack("{s:s}", "message", ev->text)); break;
        case KORCH_AGENT_NOTICE: s_json_event("notice", ev->step, json_pack("{s:s}", "text", ev->text)); break;
        }
        return;
    }
    if (c->quiet && ev->type != KORCH_AGENT_ERROR)
        return;
    switch (ev->type) {
    case KORCH_AGENT_STEP:
        s_end_text(c);
        c->step_t0 = korch_now_ms();
        fprintf(stderr, "\n── step %d ──\n", ev->step);
        break;
    case KORCH_AGENT_TEXT:
        if (c->chat)
            break; /* chat prints the answer on stdout at the end */
        fwrite(ev->text, 1, ev->text_len, stderr);
        c->in_text = true;
        break;
    case KORCH_AGENT_CODE: {
        s_end_text(c);
        fprintf(stderr, "▶ code:\n");
        const char *p = ev->text;
        while (*p) {
            size_t n = strcspn(p, "\n");
            fprintf(stderr, "    %.*s\n", (int)n, p);
            p += n + (p[n] == '\n');
        }
        break;
    }
    case KORCH_AGENT_OUTPUT: {
        const char *type = json_string_value(json_object_get(ev->data, "output_type"));
        if (!type)
            break;
        if (strcmp(type, "stream") == 0) {
            json_t *t = json_object_get(ev->data, "text");
            fwrite(json_string_value(t), 1, json_string_length(t), stderr);
        } else if (strcmp(type, "error") == 0) {
            fprintf(stderr, "%s: %s\n", json_string_value(json_object_get(ev->data, "ename")),
                    json_string_value(json_object_get(ev->data, "evalue")));
        } else {
            json_t *data = json_object_get(ev->data, "data");
            if (json_object_get(data, "image/png"))
                fprintf(stderr, "[image/png]\n");
            else if (json_is_string(json_object_get(data, "text/plain")))
                fprintf(stderr, "%s\n", json_string_value(json_object_get(data, "text/plain")));
        }
        break;
    }
    case KORCH_AGENT_RESULT: {
        json_t *saved = json_object_get(ev->data, "saved");
        size_t i;
        json_t *p;
        json_array_foreach(saved, i, p) fprintf(stderr, "[chart saved to %s]\n", json_string_value(p));
        fprintf(stderr, "  (%s, %.2f s)\n", json_string_value(json_object_get(ev->data, "status")),
                (double)json_integer_value(json_object_get(ev->data, "elapsed_ms")) / 1e3);
        break;
    }
    case KORCH_AGENT_FINAL: s_end_text(c); break;
    case KORCH_AGENT_ERROR:
        s_end_text(c);
        fprintf(stderr, "korch: %s\n", ev->text);
        break;
    case KORCH_AGENT_NOTICE:
        s_end_text(c);
        fprintf(stderr, "korch: %s\n", ev->text);
        break;
    }
    fflush(stderr);
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
    mkdir("korch-sessions", 0755);
    snprintf(buf, len, "korch-sessions/%s-%d", stamp, (int)getpid());
}

static void s_chat_command(run_ctx_t *c, const char *line)
{
    if (strcmp(line, "/files") == 0) {
        json_t *files = korch_agent_files(c->agent);
        size_t i;
        json_t *f;
        json_array_foreach(files, i, f) printf("  %s\n", json_string_value(f));
        if (!json_array_size(files))
            printf("  (no files; /file PATH adds one)\n");
        json_decref(files);
    } else if (strncmp(line, "/file ", 6) == 0) {
        korch_err_t err = {0};
        if (korch_agent_add_file(c->agent, line + 6, &err) == KORCH_OK)
            printf("  added %s\n", line + 6);
        else
            printf("  %s\n", err.msg);
    } else if (strcmp(line, "/notebook") == 0 || strcmp(line, "/save") == 0) {
        printf("  notebook: %s/notebook.ipynb (written after every step)\n  transcript: %s/transcript.jsonl\n",
               korch_agent_session_dir(c->agent), korch_agent_session_dir(c->agent));
    } else
        printf("  commands: /files, /file PATH, /notebook, /save, /quit\n");
    fflush(stdout);
}

static int s_main(const char *cmd, int argc, char **argv)
{
    run_ctx_t c = {.launcher_name = "auto", .kernel_name = "python3", .chat = strcmp(cmd, "chat") == 0};
    s_t0 = korch_now_ms();
    c.files = json_array();
    static const struct option longopts[] = {
        {"llm", required_argument, 0, 'l'},        {"file", required_argument, 0, 'f'},
        {"session", required_argument, 0, 's'},    {"max-steps", required_argument, 0, 'n'},
        {"max-result", required_argument, 0, 'r'}, {"timeout", required_argument, 0, 't'},
        {"launcher", required_argument, 0, 'L'},   {"kernel", required_argument, 0, 'k'},
        {"fence", no_argument, 0, 'F'},            {"vision", no_argument, 0, 'V'},
        {"no-vision", no_argument, 0, 'N'},        {"json", no_argument, 0, 'J'},
        {"quiet", no_argument, 0, 'q'},            {"help", no_argument, 0, 'h'},
        {"max-tokens", required_argument, 0, 'T'}, {"max-seconds", required_argument, 0, 'S'},
        {"context-chars", required_argument, 0, 'X'},
        {"env", required_argument, 0, KORCH_CLI_OPT_ENV},
        {"workdir-mb", required_argument, 0, KORCH_CLI_OPT_WORKDIR_MB},
        {0, 0, 0, 0},
    };
    optind = 1;
    int opt, rc = 2;
    while ((opt = getopt_long(argc, argv, "+f:qh", longopts, NULL)) != -1) {
        switch (opt) {
        case 'l': c.llm_spec = optarg; break;
        case 'f': json_array_append_new(c.files, json_string(optarg)); break;
        case 's': c.session = optarg; break;
        case 'n': c.max_steps = (int)strtol(optarg, NULL, 10); break;
        case 'r': c.max_result = strtol(optarg, NULL, 10); break;
        case 't': c.timeout_s = (int)strtol(optarg, NULL, 10); break;
        case 'L': c.launcher_name = optarg; break;
        case 'k': c.kernel_name = optarg; break;
        case 'F': c.fence = true; break;
        case 'V': c.vision = true; break;
        case 'N': c.no_vision = true; break;
        case 'J': c.json = true; break;
        case 'q': c.quiet = true; break;
        case 'T': c.max_tokens = strtoll(optarg, NULL, 10); break;
        case 'S': c.max_seconds = (int)strtol(optarg, NULL, 10); break;
        case 'X': c.context_chars = strtoll(optarg, NULL, 10); break;
        case KORCH_CLI_OPT_WORKDIR_MB: c.workdir_mb = strtod(optarg, NULL); break;
        case KORCH_CLI_OPT_ENV:
            if (!korch_cli_env_opt(cmd, optarg)) {
                json_decref(c.files);
                return 2;
            }
            break;
        case 'h': s_help(stdout, cmd); json_decref(c.files); return 0;
        default: s_help(stderr, cmd); json_decref(c.files); return 2;
        }
    }
    const char *task = optind < argc ? argv[optind] : NULL;
    korch_err_t err = {0};
    korch_loop_t *loop = NULL;
    korch_llm_t *llm = NULL;
    korch_launcher_t *launcher = NULL;
    korch_instance_t *inst = NULL;
    char session[4096];
    if (!c.chat && !task) {
        fprintf(stderr, "korch run: what should the model do? (korch run [options] \"task\")\n");
        goto out;
    }
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
    if (c.session)
        snprintf(session, sizeof session, "%s", c.session);
    else
        s_default_session(session, sizeof session);
    if (strcmp(c.launcher_name, "local") != 0) {
        inst = korch_instance_new(NULL, &err);
        if (!inst) {
            fprintf(stderr, "korch %s: %s\n", cmd, err.msg);
            goto out;
        }
        korch_cli_launcher_opts_t clo = {.name = c.launcher_name, .kernel = c.kernel_name, .workdir_from_cwd = true,
                                         .give_workdir = true, .instance = korch_instance_name(inst), .quiet = c.quiet || c.json,
                                         .workdir_mb = c.workdir_mb};
        launcher = korch_cli_launcher(&clo, &err);
        if (!launcher && err.rc) {
            fprintf(stderr, "korch %s: %s\n", cmd, err.msg);
            goto out;
        }
        korch_cli_sweep(launcher, korch_instance_name(inst));
    }
    loop = korch_loop_new();
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
        .max_seconds = c.max_seconds,
        .context_chars = c.context_chars > 0 ? (size_t)c.context_chars : 0,
        .on_event = s_on_event,
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
        if (korch_agent_add_file(c.agent, json_string_value(f), &err) != KORCH_OK) {
            fprintf(stderr, "korch %s: %s\n", cmd, err.msg);
            goto out;
        }
    }
    rc = 0;
    if (!c.chat) {
        char *answer = NULL;
        korch_rc_t arc = korch_agent_ask(c.agent, task, &answer, &err);
        if (arc == KORCH_OK) {
            if (!c.json)
                printf("%s\n", answer);
        } else {
            if (!c.json)
                fprintf(stderr, "korch run: %s\n", err.msg);
            else
                s_json_event("error", 0, json_pack("{s:s}", "message", err.msg));
            rc = arc == KORCH_E_INTERRUPTED ? 130 : 1;
        }
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
        if (korch_agent_ask(c.agent, line, &answer, &err) == KORCH_OK) {
            if (!c.json)
                printf("\n%s\n", answer);
            fflush(stdout);
        } else
            fprintf(stderr, "korch: %s\n", err.msg);
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
    json_decref(c.files);
    return rc;
}

int korch_cmd_run(int argc, char **argv) { return s_main("run", argc, argv); }
int korch_cmd_chat(int argc, char **argv) { return s_main("chat", argc, argv); }
