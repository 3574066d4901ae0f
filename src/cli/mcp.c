/*  korch mcp: an MCP server on stdio for desktop and IDE agents.
 *
 *  korch mcp [--launcher auto] [--kernel python3] [--workdir DIR] [--max-chars N] [--env NAME[=V]]...
 *
 *  Reads one JSON-RPC message per line on stdin and answers on stdout (logs
 *  on stderr), until stdin closes or SIGINT / SIGTERM; then it shuts its
 *  kernel down. The protocol and the tools are src/server/mcp*.c's, the
 *  same as /mcp on korch serve.
 */
#include "cli.h"
#include "korch/instance.h"
#include "korch/log.h"
#include "korch/mcp.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { OPT_WORKDIR = 700, OPT_MAX_CHARS };

static void s_help(FILE *f)
{
    fprintf(f,
            "usage: korch mcp [options]\n\n"
            "An MCP (Model Context Protocol) server on stdin/stdout: the client (a desktop assistant, an IDE\n"
            "agent) starts it and calls its tools: run_code in a persistent kernel (text, errors, charts as\n"
            "images), upload_file, list_files, fetch_file, interrupt, restart, list_kernelspecs.\n\n"
            "  -k, --kernel NAME        the kernelspec the session starts (default python3)\n");
    korch_cli_launcher_help(f, 6, 27, "auto");
    fprintf(f,
            "      --workdir DIR        a local kernel's working directory (default: the current one)\n"
            "      --max-chars N        text of one tool result, cut in the middle past it (default 4000)\n"
            KORCH_CLI_ENV_HELP
            "  -h, --help               this text\n\n"
            "A client's configuration (claude_desktop_config.json and the like):\n"
            "  {\"mcpServers\": {\"korch\": {\"command\": \"korch\", \"args\": [\"mcp\"]}}}\n");
}

int korch_cmd_mcp(int argc, char **argv)
{
    const char *kernel = "python3", *workdir = NULL;
    size_t max_chars = 0;
    korch_launcher_choice_t lo = {.name = "auto", .quiet = true};
    static const struct option longopts[] = {
        {"kernel", required_argument, 0, 'k'},   KORCH_CLI_LAUNCHER_LONGOPTS,
        {"workdir", required_argument, 0, OPT_WORKDIR}, {"max-chars", required_argument, 0, OPT_MAX_CHARS},
        {"env", required_argument, 0, KORCH_CLI_OPT_ENV}, {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    optind = 1;
    int opt;
    char *end;
    while ((opt = getopt_long(argc, argv, "+k:h", longopts, NULL)) != -1) {
        if (korch_cli_launcher_opt(&lo, opt, optarg))
            continue;
        switch (opt) {
        case 'k': kernel = optarg; break;
        case OPT_WORKDIR: workdir = optarg; break;
        case OPT_MAX_CHARS: {
            unsigned long long n = strtoull(optarg, &end, 10);
            if (*end || n < 100 || n > (64u << 20)) {
                fprintf(stderr, "korch mcp: bad --max-chars '%s' (100 to 67108864)\n", optarg);
                return 2;
            }
            max_chars = (size_t)n;
            break;
        }
        case KORCH_CLI_OPT_ENV:
            if (!korch_cli_env_opt("mcp", optarg))
                return 2;
            break;
        case 'h': s_help(stdout); return 0;
        default: s_help(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "korch mcp: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    int rc = 1;
    bool quit = false;
    korch_err_t err = {0};
    korch_loop_t *loop = NULL;
    korch_launcher_t *launcher = NULL;
    korch_instance_t *inst = korch_instance_new(getenv("KORCH_INSTANCE") && *getenv("KORCH_INSTANCE")
                                                    ? getenv("KORCH_INSTANCE")
                                                    : NULL,
                                                &err);
    if (!inst) {
        fprintf(stderr, "korch mcp: %s\n", err.msg);
        goto out;
    }
    if (!(loop = korch_loop_new()))
        goto out;
    lo.kernel = kernel;
    lo.instance = korch_instance_name(inst);
    if (!(launcher = korch_launcher_choose(loop, &lo, &err))) {
        fprintf(stderr, "korch mcp: %s\n", err.msg);
        goto out;
    }
    korch_launcher_sweep(launcher, korch_instance_name(inst));
    korch_cli_stop_on_signal(loop, &quit);
    korch_mcp_stdio_opts_t mo = {.launcher = launcher, .kernel = kernel, .cwd = workdir, .in_fd = STDIN_FILENO,
                                 .out_fd = STDOUT_FILENO, .max_chars = max_chars, .quit = korch_cli_flag_set,
                                 .quit_arg = &quit};
    if (korch_mcp_stdio_run(loop, &mo, &err) != KORCH_OK) {
        fprintf(stderr, "korch mcp: %s\n", err.msg);
        goto out;
    }
    rc = 0;
out:
    korch_launcher_destroy(&launcher);
    korch_loop_destroy(&loop);
    korch_instance_destroy(&inst);
    return rc;
}
