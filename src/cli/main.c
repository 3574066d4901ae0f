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

static int s_sigpipe[2] = {-1, -1};
static volatile sig_atomic_t s_last_signal;

static void s_on_signal(int sig)
{
    /* A second SIGTERM before the loop took the first: korch is stuck
       somewhere; end now rather than never (the start-up sweep removes what
       is left behind). */
    if (sig == SIGTERM && s_last_signal == SIGTERM)
        _exit(128 + SIGTERM);
    int saved = errno;
    s_last_signal = sig;
    unsigned char b = (unsigned char)sig;
    if (write(s_sigpipe[1], &b, 1) < 0) { /* pipe full: a signal is pending anyway */
    }
    errno = saved;
}

int korch_cli_signal_pipe(void)
{
    if (s_sigpipe[0] >= 0)
        return s_sigpipe[0];
    if (pipe2(s_sigpipe, O_CLOEXEC | O_NONBLOCK) != 0)
        return -1;
    struct sigaction sa = {0};
    sa.sa_handler = s_on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    return s_sigpipe[0];
}

int korch_cli_take_signal(void)
{
    unsigned char b[64];
    while (s_sigpipe[0] >= 0 && read(s_sigpipe[0], b, sizeof b) > 0)
        ;
    int sig = s_last_signal;
    s_last_signal = 0;
    return sig;
}

bool korch_cli_signal_pending(void) { return s_last_signal != 0; }

static int s_on_stop_signal(korch_loop_t *loop, int fd, void *arg)
{
    *(bool *)arg = true;
    korch_cli_take_signal();
    return -1;
}

bool korch_cli_stop_on_signal(korch_loop_t *loop, bool *quit)
{
    int fd = korch_cli_signal_pipe();
    return fd >= 0 && korch_loop_poller(loop, fd, s_on_stop_signal, quit) == 0;
}

bool korch_cli_flag_set(void *flag) { return *(bool *)flag; }

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
