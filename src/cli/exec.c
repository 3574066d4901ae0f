/*  korch exec: run code cells in one kernel and show what a notebook shows.
 *
 *  korch exec [-c CODE]... [FILE|-] [--kernel NAME] [--launcher local]
 *             [--existing CONN] [--timeout S] [--json] [--out DIR] ...
 *
 *  Cells run in order in ONE kernel, so state persists between them. A FILE
 *  is split into cells at lines starting with "# %%" (the percent format of
 *  Jupytext, VS Code and Spyder).
 */
#include "cli.h"
#include "korch/path.h"
#include "korch/instance.h"
#include "korch/kernel.h"
#include "korch/log.h"
#include "korch/media.h"
#include "korch/termsafe.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_CODE_BYTES (64u << 20)

typedef struct {
    /* options */
    const char *kernel_name, *existing, *out_dir, *cwd;
    korch_launcher_choice_t lc;     /* --launcher and its limits (korch_cli_launcher_opt) */
    double timeout_s;
    bool json, allow_stdin, keep_going, quiet;
    size_t max_stream;
    /* state */
    korch_loop_t *loop;
    korch_kernel_t *k;
    korch_exec_t *cur;
    int figures;
    bool quit;
    int64_t last_interrupt;
    korch_termsafe_t *ts_out, *ts_err; /* the kernel's stdout and stderr on ours (termsafe.h) */
    json_t *saved;          /* paths of images saved for the current execution */
} exec_ctx_t;

static void s_help(FILE *f)
{
    fprintf(f,
            "usage: korch exec [-c CODE]... [FILE|-] [options]\n\n"
            "Run code in a Jupyter kernel; cells run in order in one kernel, so variables persist.\n"
            "FILE is split into cells at lines starting with '# %%%%'; '-' reads standard input.\n\n"
            "  -c, --code CODE       a cell to run (repeatable, runs in order)\n"
            "  -k, --kernel NAME     kernelspec to start (default python3; `korch kernelspecs` lists them)\n");
    korch_cli_launcher_help(f, 6, 24, "local");
    fprintf(f,
            "      --existing FILE   attach to a running kernel's connection file instead of starting one\n"
            "  -t, --timeout S       interrupt an execution after S seconds (restart if it will not stop)\n"
            "      --json            one JSON object per execution, one per line:\n"
            "                        {\"status\",\"execution_count\",\"outputs\":[nbformat],\"elapsed_ms\"}\n"
            "  -o, --out DIR         save images (png, jpeg, gif, svg) there as fig-N.EXT\n"
            "      --cwd DIR         the kernel's working directory\n"
            KORCH_CLI_ENV_HELP
            "      --allow-stdin     answer input() from this terminal\n"
            "      --keep-going      run the remaining cells after one fails\n"
            "      --max-output N    keep at most N bytes of stream output per execution (default 8 MiB)\n"
            "  -q, --quiet           no progress lines on stderr\n"
            "  -h, --help            this text\n\n"
            "Exit status: 0 when every execution succeeded, 1 when one failed, 2 on a usage or start error.\n");
}

/* ---------------------------------------------------------------- output */

/* One value from the kernel (a result, a traceback line) on stdout: its
   colours kept on a terminal, every other control function neutralised. */
static void s_print_value(const char *text, unsigned flags)
{
    korch_termsafe_fputs(text, flags | korch_termsafe_flags_for(STDOUT_FILENO, false), stdout);
}

/* Save every image of a mime bundle; print a line for each. Returns how many. */
static int s_save_images(exec_ctx_t *c, json_t *data)
{
    int n = 0;
    const char *mime;
    json_t *v;
    json_object_foreach(data, mime, v) {
        const char *ext = korch_image_ext(mime);
        if (!ext || !json_is_string(v))
            continue;
        n++;
        size_t len = 0;
        unsigned char *bytes = NULL;
        if (strcmp(ext, "svg") == 0) {
            bytes = (unsigned char *)strdup(json_string_value(v));
            len = bytes ? strlen((char *)bytes) : 0;
        } else
            bytes = korch_b64_decode(json_string_value(v), json_string_length(v), &len);
        if (!bytes) {
            if (!c->json)
                printf("[%s: not valid base64]\n", mime);
            continue;
        }
        char dims[48] = "";
        int w, h;
        if (korch_image_size(bytes, len, &w, &h))
            snprintf(dims, sizeof dims, " %dx%d", w, h);
        if (c->out_dir) {
            char path[4096];
            korch_err_t err = {0};
            if (korch_path_fmt(path, sizeof path, &err, "%s/fig-%d.%s", c->out_dir, ++c->figures, ext) == KORCH_OK &&
                korch_write_file(path, bytes, len, &err) == KORCH_OK) {
                json_array_append_new(c->saved, json_string(path));
                if (!c->json)
                    printf("[%s%s saved to %s]\n", mime, dims, path);
            } else
                fprintf(stderr, "korch: %s\n", err.msg);
        } else if (!c->json)
            printf("[%s%s, %zu bytes; use --out DIR to save it]\n", mime, dims, len);
        free(bytes);
    }
    return n;
}

static void s_print_bundle(exec_ctx_t *c, json_t *output)
{
    json_t *data = json_object_get(output, "data");
    if (s_save_images(c, data) > 0 || c->json)
        return;
    json_t *plain = json_object_get(data, "text/plain");
    if (json_is_string(plain)) {
        s_print_value(json_string_value(plain), 0);
        putchar('\n');
        return;
    }
    const char *mime;
    json_t *v;
    json_object_foreach(data, mime, v) {
        fputs("[", stdout);
        korch_termsafe_fputs(mime, KORCH_TERMSAFE_LINE, stdout); /* the kernel names it */
        printf(", %zu bytes]\n", json_is_string(v) ? json_string_length(v) : 0);
    }
}

static void s_on_output(korch_exec_t *ex, korch_output_event_t ev, json_t *output, size_t index, void *arg)
{
    exec_ctx_t *c = arg;
    const char *type = json_string_value(json_object_get(output, "output_type"));
    if (ev == KORCH_OUTPUT_CLEAR || !type)
        return;
    if (strcmp(type, "stream") == 0) {
        if (c->json)
            return;
        const char *name = json_string_value(json_object_get(output, "name"));
        json_t *text = json_object_get(output, "text");
        bool err = name && strcmp(name, "stderr") == 0;
        FILE *f = err ? stderr : stdout;
        korch_termsafe_fwrite(err ? c->ts_err : c->ts_out, f, json_string_value(text), json_string_length(text));
        fflush(f);
        return;
    }
    if (strcmp(type, "error") == 0) {
        if (c->json)
            return;
        json_t *tb = json_object_get(output, "traceback");
        size_t i;
        json_t *line;
        if (json_array_size(tb) == 0) {
            s_print_value(json_string_value(json_object_get(output, "ename")), KORCH_TERMSAFE_LINE);
            fputs(": ", stdout);
            s_print_value(json_string_value(json_object_get(output, "evalue")), 0);
            putchar('\n');
        }
        json_array_foreach(tb, i, line) {
            s_print_value(json_string_value(line), 0); /* IPython's colours stay on a terminal */
            putchar('\n');
        }
        fflush(stdout);
        return;
    }
    s_print_bundle(c, output);
    fflush(stdout);
}

static void s_on_input(korch_exec_t *ex, const char *prompt, bool password, void *arg)
{
    exec_ctx_t *c = arg;
    char line[65536] = "";
    korch_termsafe_fputs(prompt, 0, stderr); /* the kernel wrote it */
    fflush(stderr);
    if (!c->allow_stdin || !fgets(line, sizeof line, stdin))
        line[0] = 0;
    line[strcspn(line, "\n")] = 0;
    korch_exec_input_reply(ex, line, NULL);
}

/* ----------------------------------------------------------------- cells */

/* Split source into cells at "# %%" lines; appends new strings to cells. */
static void s_split_cells(const char *src, json_t *cells)
{
    const char *p = src, *cell = src;
    while (*p) {
        const char *eol = strchr(p, '\n');
        const char *next = eol ? eol + 1 : p + strlen(p);
        if (strncmp(p, "# %%", 4) == 0) {
            if (p > cell)
                json_array_append_new(cells, json_stringn(cell, (size_t)(p - cell)));
            cell = next;
        }
        p = next;
    }
    if (*cell)
        json_array_append_new(cells, json_string(cell));
}

/* ------------------------------------------------------------- the run */

static int s_on_signal(korch_loop_t *loop, int fd, void *arg)
{
    exec_ctx_t *c = arg;
    int sig = korch_cli_take_signal();
    int64_t now = korch_now_ms();
    if (sig == SIGINT && c->k && c->cur && now - c->last_interrupt > 2000) {
        c->last_interrupt = now;
        korch_err_t err = {0};
        fprintf(stderr, "\nkorch: interrupting the kernel (Ctrl-C again within 2 s to quit)\n");
        if (korch_kernel_interrupt(c->k, &err) != KORCH_OK)
            fprintf(stderr, "korch: %s\n", err.msg);
        return 0;
    }
    c->quit = true;
    korch_loop_break(c->loop);
    return -1;
}

static bool s_cur_done_or_quit(void *arg)
{
    exec_ctx_t *c = arg;
    return c->quit || !c->cur || korch_exec_done(c->cur);
}

static bool s_ready_or_quit(void *arg)
{
    exec_ctx_t *c = arg;
    korch_kernel_state_t st = korch_kernel_state(c->k);
    return c->quit || (st != KORCH_KERNEL_STARTING && st != KORCH_KERNEL_RESTARTING);
}

static void s_report(exec_ctx_t *c, const korch_exec_result_t *r)
{
    if (c->json) {
        json_t *line = json_pack("{s:s, s:o, s:O, s:I}", "status", korch_exec_status_name(r->status),
                                 "execution_count",
                                 r->execution_count >= 0 ? json_integer(r->execution_count) : json_null(), "outputs",
                                 r->outputs, "elapsed_ms", (json_int_t)r->elapsed_ms);
        if (r->detail[0])
            json_object_set_new(line, "detail", json_string(r->detail));
        if (r->dropped_bytes)
            json_object_set_new(line, "dropped_bytes", json_integer((json_int_t)r->dropped_bytes));
        if (r->restarted)
            json_object_set_new(line, "restarted", json_true());
        if (json_array_size(c->saved))
            json_object_set(line, "saved", c->saved);
        json_dumpf(line, stdout, JSON_COMPACT | JSON_ENSURE_ASCII); /* \u escapes: no C1 or bidi raw */
        putchar('\n');
        fflush(stdout);
        json_decref(line);
        return;
    }
    korch_termsafe_fend(c->ts_out, stdout); /* the execution's streams end: a colour left on is reset */
    korch_termsafe_fend(c->ts_err, stderr);
    if (r->status == KORCH_EXEC_TIMEOUT || r->status == KORCH_EXEC_DIED) {
        fputs("korch: ", stderr);
        korch_termsafe_fputs(r->detail, 0, stderr);
        fputc('\n', stderr);
    }
    else if (r->status == KORCH_EXEC_ABORTED)
        fprintf(stderr, "korch: execution aborted by the kernel (an earlier request failed)\n");
}

int korch_cmd_exec(int argc, char **argv)
{
    exec_ctx_t c = {.kernel_name = "python3", .lc = {.name = "local"}};
    korch_launcher_t *launcher = NULL;
    korch_instance_t *inst = NULL;
    json_t *cells = json_array();
    c.saved = json_array();
    int rc = 2;
    static const struct option longopts[] = {
        {"code", required_argument, 0, 'c'},  {"kernel", required_argument, 0, 'k'},
        KORCH_CLI_LAUNCHER_LONGOPTS, {"existing", required_argument, 0, 'E'},
        {"timeout", required_argument, 0, 't'}, {"json", no_argument, 0, 'J'},
        {"out", required_argument, 0, 'o'},   {"cwd", required_argument, 0, 'C'},
        {"allow-stdin", no_argument, 0, 'S'}, {"keep-going", no_argument, 0, 'K'},
        {"max-output", required_argument, 0, 'M'}, {"quiet", no_argument, 0, 'q'},
        {"env", required_argument, 0, KORCH_CLI_OPT_ENV},
        {"help", no_argument, 0, 'h'},        {0, 0, 0, 0},
    };
    optind = 1;
    int opt;
    while ((opt = getopt_long(argc, argv, "+c:k:t:o:qh", longopts, NULL)) != -1) {
        if (korch_cli_launcher_opt(&c.lc, opt, optarg))
            continue;
        switch (opt) {
        case 'c': json_array_append_new(cells, json_string(optarg)); break;
        case 'k': c.kernel_name = optarg; break;
        case 'E': c.existing = optarg; break;
        case 't': {
            char *end;
            c.timeout_s = strtod(optarg, &end);
            if (*end || c.timeout_s <= 0) {
                fprintf(stderr, "korch exec: --timeout wants a positive number of seconds, not '%s'\n", optarg);
                goto out;
            }
            break;
        }
        case 'J': c.json = true; break;
        case 'o': c.out_dir = optarg; break;
        case 'C': c.cwd = optarg; break;
        case 'S': c.allow_stdin = true; break;
        case 'K': c.keep_going = true; break;
        case 'M': c.max_stream = (size_t)korch_cli_num("max-output", optarg, 1024, 1e12, true, "bytes"); break;
        case 'q': c.quiet = true; break;
        case KORCH_CLI_OPT_ENV:
            if (!korch_cli_env_opt("exec", optarg))
                goto out;
            break;
        case 'h':
            s_help(stdout);
            rc = 0;
            goto out;
        default: s_help(stderr); goto out;
        }
    }
    for (int i = optind; i < argc; i++) {
        korch_err_t err = {0};
        char *src = korch_read_file(argv[i], MAX_CODE_BYTES, NULL, &err);
        if (!src) {
            fprintf(stderr, "korch exec: %s\n", err.msg);
            goto out;
        }
        s_split_cells(src, cells);
        free(src);
    }
    if (json_array_size(cells) == 0) {
        fprintf(stderr, "korch exec: nothing to run (give -c CODE or a FILE; --help says more)\n");
        goto out;
    }
    korch_err_t merr = {0};
    if (c.out_dir && korch_mkdirs(c.out_dir, 0755, &merr) != KORCH_OK) {
        fprintf(stderr, "korch exec: %s\n", merr.msg);
        goto out;
    }
    c.ts_out = korch_termsafe_new(korch_termsafe_flags_for(STDOUT_FILENO, true));
    c.ts_err = korch_termsafe_new(korch_termsafe_flags_for(STDERR_FILENO, true));
    if (!c.ts_out || !c.ts_err) {
        fprintf(stderr, "korch exec: out of memory\n");
        goto out;
    }
    c.loop = korch_loop_new();
    int sigfd = korch_cli_signal_pipe();
    if (!c.loop || sigfd < 0) {
        fprintf(stderr, "korch exec: cannot set up the event loop\n");
        goto out;
    }
    korch_loop_poller(c.loop, sigfd, s_on_signal, &c);

    korch_err_t err = {0};
    if (!c.existing && korch_launcher_needs_instance(c.lc.name)) {
        /* Our containers carry a live instance, so a later korch can tell
           they are orphans if this one is killed. */
        inst = korch_instance_new(NULL, &err);
        if (!inst) {
            fprintf(stderr, "korch exec: %s\n", err.msg);
            goto out;
        }
        korch_launcher_choice_t lo = c.lc;
        lo.kernel = c.kernel_name;
        lo.workdir = c.cwd;
        lo.instance = korch_instance_name(inst);
        lo.quiet = c.quiet || c.json;
        launcher = korch_launcher_choose(c.loop, &lo, &err);
        if (!launcher) {
            fprintf(stderr, "korch exec: %s\n", err.msg);
            goto out;
        }
        korch_launcher_sweep(launcher, korch_instance_name(inst));
    } else if (!c.existing && (c.lc.packages.wheelhouse || c.lc.packages.index_url || c.lc.packages.hosts)) {
        /* local, with package sources: its launcher carries them */
        launcher = korch_launcher_choose(c.loop, &(korch_launcher_choice_t){.name = c.lc.name, .packages = c.lc.packages},
                                         &err);
        if (!launcher) {
            fprintf(stderr, "korch exec: %s\n", err.msg);
            goto out;
        }
    }
    korch_kernel_opts_t ko = {
        .launcher = launcher,
        .kernelspec = c.kernel_name,
        .existing = c.existing,
        .cwd = c.cwd,
        .max_stream_bytes = c.max_stream,
    };
    int64_t t0 = korch_now_ms();
    c.k = korch_kernel_new(c.loop, &ko, &err);
    if (!c.k) {
        fprintf(stderr, "korch exec: %s\n", err.msg);
        goto out;
    }
    korch_loop_run(c.loop, s_ready_or_quit, &c, -1);
    if (c.quit || korch_kernel_wait_ready(c.k, &err) != KORCH_OK) {
        if (!c.quit)
            fprintf(stderr, "korch exec: %s\n", err.msg);
        goto out;
    }
    if (!c.quiet && !c.json)
        fprintf(stderr, "korch: kernel '%s' ready in %lld ms\n", c.existing ? c.existing : c.kernel_name,
                (long long)(korch_now_ms() - t0));
    rc = 0;
    korch_exec_opts_t eo = {.timeout_ms = (int)(c.timeout_s * 1000), .allow_stdin = c.allow_stdin};
    korch_exec_cb_t cb = {.on_output = s_on_output, .on_input = s_on_input, .arg = &c};
    size_t i;
    json_t *cell;
    json_array_foreach(cells, i, cell) {
        json_array_clear(c.saved);
        c.cur = korch_kernel_execute(c.k, json_string_value(cell), &eo, &cb, &err);
        if (!c.cur) {
            fprintf(stderr, "korch exec: %s\n", err.msg);
            rc = 1;
            break;
        }
        korch_loop_run(c.loop, s_cur_done_or_quit, &c, -1);
        if (c.quit) {
            rc = 130;
            break;
        }
        const korch_exec_result_t *r = korch_exec_result(c.cur);
        s_report(&c, r);
        bool failed = r->status != KORCH_EXEC_OK;
        korch_exec_destroy(&c.cur);
        if (failed) {
            rc = 1;
            if (!c.keep_going)
                break;
        }
    }
out:
    korch_exec_destroy(&c.cur);
    korch_kernel_destroy(&c.k);
    korch_launcher_destroy(&launcher);
    korch_instance_destroy(&inst);
    korch_loop_destroy(&c.loop);
    json_decref(cells);
    json_decref(c.saved);
    korch_termsafe_destroy(&c.ts_out);
    korch_termsafe_destroy(&c.ts_err);
    return rc;
}
