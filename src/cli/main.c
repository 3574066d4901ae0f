/*  korch: a Jupyter-kernel orchestrator.  `korch --help` lists commands. */
#include "cli.h"
#include "korch/kernelspec.h"
#include "korch/korch.h"
#include "korch/log.h"

#include <czmq.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int s_kernelspecs(int argc, char **argv)
{
    json_t *list = korch_kernelspec_list();
    json_t *path = korch_kernelspec_path();
    bool as_json = argc > 1 && strcmp(argv[1], "--json") == 0;
    if (as_json) {
        json_dumpf(list, stdout, JSON_INDENT(2));
        putchar('\n');
    } else {
        const char *name;
        json_t *v;
        printf("Available kernelspecs:\n");
        json_object_foreach(list, name, v) {
            printf("  %-16s %s\n", name,
                   json_string_value(json_object_get(json_object_get(v, "spec"), "display_name")));
        }
        printf("Searched:\n");
        size_t i;
        json_array_foreach(path, i, v) printf("  %s\n", json_string_value(v));
    }
    json_decref(list);
    json_decref(path);
    return 0;
}

static void s_usage(FILE *f)
{
    fprintf(f, "usage: korch <command> [options]\n\n"
               "Commands:\n"
               "  run          ask a model a question; it writes code, korch runs it, until it answers\n"
               "  chat         a multi-turn conversation with the model over one kernel\n"
               "  exec         run code in a Jupyter kernel and show what a notebook would\n"
               "  kernel       keep a kernel running for clients to attach to (re-adopts after a crash)\n"
               "  serve        serve the Jupyter kernel API (for JupyterLab / jupyter server --gateway-url)\n"
               "  mcp          an MCP server on stdio (desktop and IDE agents run code through it)\n"
               "  user         the users of a team's korch serve (--users FILE): add, list, revoke\n"
               "  kernelspecs  list the kernels korch can start\n"
               "  version      print korch's version\n\n"
               "`korch <command> --help` describes a command. KORCH_LOG=debug|info|warn|error sets the log level.\n");
}

int main(int argc, char **argv)
{
    korch_init();
    if (argc < 2) {
        s_usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        s_usage(stdout);
        return 0;
    }
    if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "version") == 0) {
        printf("korch %s\n", KORCH_VERSION);
        return 0;
    }
    int rc;
    if (strcmp(cmd, "exec") == 0)
        rc = korch_cmd_exec(argc - 1, argv + 1);
    else if (strcmp(cmd, "run") == 0)
        rc = korch_cmd_run(argc - 1, argv + 1);
    else if (strcmp(cmd, "chat") == 0)
        rc = korch_cmd_chat(argc - 1, argv + 1);
    else if (strcmp(cmd, "serve") == 0)
        rc = korch_cmd_serve(argc - 1, argv + 1);
    else if (strcmp(cmd, "mcp") == 0)
        rc = korch_cmd_mcp(argc - 1, argv + 1);
    else if (strcmp(cmd, "user") == 0)
        rc = korch_cmd_user(argc - 1, argv + 1);
    else if (strcmp(cmd, "kernel") == 0)
        rc = korch_cmd_kernel(argc - 1, argv + 1);
    else if (strcmp(cmd, "kernelspecs") == 0)
        rc = s_kernelspecs(argc - 1, argv + 1);
    else {
        fprintf(stderr, "korch: unknown command '%s'\n", cmd);
        s_usage(stderr);
        rc = 2;
    }
    zsys_shutdown();
    return rc;
}
