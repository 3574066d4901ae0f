/*  korch kernel: keep one kernel running for others to attach to.
 *
 *  korch kernel [--launcher auto|docker|sandbox|swarm|local] [--instance NAME]
 *               [--connection-file PATH] [--kernel NAME] ...
 *
 *  Starts a kernel (or, with the docker launcher, re-adopts the one a dead
 *  korch of the same instance name left running, variables and all), writes
 *  a connection file clients can use (`korch exec --existing PATH`,
 *  `jupyter console --existing PATH`), restarts the kernel if it dies, and
 *  shuts it down on SIGTERM or Ctrl-C. On start it also removes containers
 *  whose korch instance is gone, so a korch killed with -9 leaks nothing.
 */
#include "cli.h"
#include "korch/path.h"
#include "korch/instance.h"
#include "korch/kernel.h"
#include "korch/log.h"

#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void s_help(FILE *f)
{
    fprintf(f,
            "usage: korch kernel [options]\n\n"
            "Start a kernel and keep it running for clients to attach to; restart it if it dies;\n"
            "shut it down on SIGTERM or Ctrl-C.\n\n"
            "  -k, --kernel NAME           kernelspec (default python3)\n");
    korch_cli_launcher_help(f, 6, 30, "auto");
    fprintf(f,
            "      --instance NAME         this korch's name; a container left by a dead korch of the\n"
            "                              same name is re-adopted with its variables (default: random)\n"
            "      --connection-file PATH  where to write the connection file (default: in the runtime dir)\n"
            "      --cwd DIR               the kernel's working directory (docker, sandbox: mounted from the host)\n"
            KORCH_CLI_ENV_HELP
            "  -h, --help                  this text\n");
}

static void s_on_state(korch_kernel_t *k, korch_kernel_state_t st, const char *detail, void *arg)
{
    if (st == KORCH_KERNEL_RESTARTING || st == KORCH_KERNEL_DEAD)
        fprintf(stderr, "korch: kernel %s%s%s\n", korch_kernel_state_name(st), detail ? ": " : "", detail ? detail : "");
}

int korch_cmd_kernel(int argc, char **argv)
{
    const char *kernel_name = "python3", *instance_name = NULL, *conn_path = NULL, *cwd = NULL;
    korch_launcher_choice_t lo = {.name = "auto"}; /* --launcher and its limits */
    static const struct option longopts[] = {
        {"kernel", required_argument, 0, 'k'},    KORCH_CLI_LAUNCHER_LONGOPTS,
        {"instance", required_argument, 0, 'i'},  {"connection-file", required_argument, 0, 'f'},
        {"cwd", required_argument, 0, 'C'},       {"help", no_argument, 0, 'h'},
        {"env", required_argument, 0, KORCH_CLI_OPT_ENV},
        {0, 0, 0, 0},
    };
    optind = 1;
    int opt;
    while ((opt = getopt_long(argc, argv, "+k:h", longopts, NULL)) != -1) {
        if (korch_cli_launcher_opt(&lo, opt, optarg))
            continue;
        switch (opt) {
        case 'k': kernel_name = optarg; break;
        case 'i': instance_name = optarg; break;
        case 'f': conn_path = optarg; break;
        case 'C': cwd = optarg; break;
        case KORCH_CLI_OPT_ENV:
            if (!korch_cli_env_opt("kernel", optarg))
                return 2;
            break;
        case 'h': s_help(stdout); return 0;
        default: s_help(stderr); return 2;
        }
    }
    int rc = 2;
    korch_err_t err = {0};
    korch_loop_t *loop = NULL;
    korch_launcher_t *launcher = NULL;
    korch_kernel_t *k = NULL;
    json_t *mine = NULL;
    char kid[64] = "", path_buf[PATH_MAX];
    bool quit = false, adopted = false;
    korch_instance_t *inst = korch_instance_new(instance_name, &err);
    if (!inst) {
        fprintf(stderr, "korch kernel: %s\n", err.msg);
        goto out;
    }
    loop = korch_loop_new();
    if (!loop)
        goto out;
    lo.kernel = kernel_name;
    lo.workdir = cwd;
    lo.instance = korch_instance_name(inst);
    launcher = korch_launcher_choose(loop, &lo, &err);
    if (!launcher) {
        fprintf(stderr, "korch kernel: %s\n", err.msg);
        goto out;
    }
    korch_launcher_sweep(launcher, korch_instance_name(inst));
    if (korch_launcher_caps(launcher) & KORCH_LAUNCHER_ADOPTS) {
        /* Our own kernel from a previous life of this instance (of our
           scope: list_mine leaves another korch's alone, with a notice)? */
        mine = korch_launcher_list_mine(launcher, &err);
        size_t i;
        json_t *c;
        json_array_foreach(mine, i, c) {
            const char *state = json_string_value(json_object_get(c, "state"));
            const char *id = json_string_value(json_object_get(c, "kernel_id"));
            if (!kid[0] && id && state && strcmp(state, "running") == 0)
                snprintf(kid, sizeof kid, "%s", id);
        }
    }
    korch_cli_stop_on_signal(loop, &quit);
    korch_kernel_opts_t ko = {.kernelspec = kernel_name, .launcher = launcher, .cwd = cwd};
    if (kid[0]) {
        ko.kernel_id = kid;
        ko.adopt = true;
        k = korch_kernel_new(loop, &ko, &err);
        if (k && korch_kernel_wait_ready(k, &err) == KORCH_OK)
            adopted = true;
        else {
            fprintf(stderr, "korch: cannot re-adopt kernel %s: %s; starting a new one\n", kid, err.msg);
            korch_kernel_destroy(&k);
            korch_launcher_remove_all(launcher, korch_instance_name(inst), NULL);
            korch_err_clear(&err);
        }
    }
    if (!k) {
        ko.kernel_id = NULL;
        ko.adopt = false;
        k = korch_kernel_new(loop, &ko, &err);
        if (!k || korch_kernel_wait_ready(k, &err) != KORCH_OK) {
            fprintf(stderr, "korch kernel: %s\n", err.msg);
            goto out;
        }
    }
    if (!conn_path) {
        char base[PATH_MAX];
        if (korch_runtime_base(base, sizeof base, &err) != KORCH_OK) {
            fprintf(stderr, "korch kernel: %s\n", err.msg);
            goto out;
        }
        if (korch_path_fmt(path_buf, sizeof path_buf, &err, "%s/%s.json", base, korch_instance_name(inst))) {
            fprintf(stderr, "korch kernel: %s\n", err.msg);
            goto out;
        }
        conn_path = path_buf;
    }
    if (korch_conn_save(korch_kernel_conn(k), conn_path, &err) != KORCH_OK) {
        fprintf(stderr, "korch kernel: %s\n", err.msg);
        goto out;
    }
    korch_kernel_set_callbacks(k, &(korch_kernel_cb_t){.on_state = s_on_state});
    fprintf(stderr, "korch: kernel %s %s (%s launcher, instance '%s')\n", korch_kernel_id(k),
            adopted ? "re-adopted: its variables are kept" : "started", korch_launcher_name(launcher),
            korch_instance_name(inst));
    printf("%s\n", conn_path);
    fflush(stdout);
    korch_loop_run(loop, korch_cli_flag_set, &quit, -1);
    fprintf(stderr, "korch: shutting the kernel down\n");
    unlink(conn_path); /* it would point at sockets that are about to go */
    rc = 0;
out:
    korch_kernel_destroy(&k);
    korch_launcher_destroy(&launcher);
    korch_loop_destroy(&loop);
    korch_instance_destroy(&inst);
    json_decref(mine);
    return rc;
}
