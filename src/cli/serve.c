/*  korch serve: a Jupyter-Server-compatible kernel gateway.
 *
 *  korch serve [--ip 127.0.0.1] [--port 8888] [--token T] [--launcher auto]
 *              [--kernel python3] [--max-kernels N] [--allow-origin O]...
 *
 *  Prints `http://IP:PORT/?token=TOKEN` as the first line on stdout once it
 *  listens, then serves until SIGINT / SIGTERM, when it shuts its kernels
 *  down. Point Jupyter Server at it with
 *  `jupyter server --gateway-url=http://IP:PORT --GatewayClient.auth_token=TOKEN`.
 */
#include "cli.h"
#include "korch/instance.h"
#include "korch/log.h"
#include "korch/server.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ORIGINS 32

static void s_help(FILE *f)
{
    fprintf(f,
            "usage: korch serve [options]\n\n"
            "Serve the Jupyter Server kernel API (REST + websocket) so JupyterLab, Jupyter Server\n"
            "(--gateway-url) or any @jupyterlab/services client runs its kernels through korch.\n\n"
            "      --ip ADDR            listen address (default 127.0.0.1)\n"
            "  -p, --port N             port (default 8888; 0 = any free port)\n"
            "      --token T            token clients must present (default: generated and printed;\n"
            "                           '' turns authentication off)\n"
            "      --launcher NAME      docker, local or auto (default auto)\n"
            "  -k, --kernel NAME        default kernelspec (default python3)\n"
            "      --max-kernels N      refuse to start more than N kernels (default: no limit)\n"
            "      --allow-origin O     a browser origin allowed besides this host's own; repeatable;\n"
            "                           '*' allows any\n"
            "      --max-body BYTES     request body limit (default 1048576)\n"
            "      --no-access-log      no line per request on stderr\n"
            "      --image NAME, --memory MB, --cpus N, --pids N   docker limits, as for korch exec\n"
            "  -h, --help               this text\n");
}

int korch_cmd_serve(int argc, char **argv)
{
    const char *ip = "127.0.0.1", *token = NULL, *launcher_name = "auto", *kernel = "python3", *image = NULL;
    const char *origins[MAX_ORIGINS + 1] = {0};
    int norigins = 0, port = 8888, max_kernels = 0;
    size_t max_body = 0;
    double memory_mb = 0, cpus = 0;
    long pids = 0;
    bool no_access_log = false;
    static const struct option longopts[] = {
        {"ip", required_argument, 0, 'i'},          {"port", required_argument, 0, 'p'},
        {"token", required_argument, 0, 't'},       {"launcher", required_argument, 0, 'L'},
        {"kernel", required_argument, 0, 'k'},      {"max-kernels", required_argument, 0, 'M'},
        {"allow-origin", required_argument, 0, 'o'}, {"max-body", required_argument, 0, 'B'},
        {"no-access-log", no_argument, 0, 'q'},     {"image", required_argument, 0, 'I'},
        {"memory", required_argument, 0, 'm'},      {"cpus", required_argument, 0, 'P'},
        {"pids", required_argument, 0, 'd'},        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    optind = 1;
    int opt;
    char *end;
    while ((opt = getopt_long(argc, argv, "+p:k:h", longopts, NULL)) != -1) {
        switch (opt) {
        case 'i': ip = optarg; break;
        case 'p':
            port = (int)strtol(optarg, &end, 10);
            if (*end || port < 0 || port > 65535) {
                fprintf(stderr, "korch serve: bad port '%s'\n", optarg);
                return 2;
            }
            break;
        case 't': token = optarg; break;
        case 'L': launcher_name = optarg; break;
        case 'k': kernel = optarg; break;
        case 'M': max_kernels = (int)strtol(optarg, NULL, 10); break;
        case 'o':
            if (norigins == MAX_ORIGINS) {
                fprintf(stderr, "korch serve: at most %d --allow-origin\n", MAX_ORIGINS);
                return 2;
            }
            origins[norigins++] = optarg;
            break;
        case 'B': max_body = (size_t)strtoull(optarg, NULL, 10); break;
        case 'q': no_access_log = true; break;
        case 'I': image = optarg; break;
        case 'm': memory_mb = strtod(optarg, NULL); break;
        case 'P': cpus = strtod(optarg, NULL); break;
        case 'd': pids = strtol(optarg, NULL, 10); break;
        case 'h': s_help(stdout); return 0;
        default: s_help(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "korch serve: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    int rc = 1;
    bool quit = false;
    korch_err_t err = {0};
    korch_loop_t *loop = NULL;
    korch_launcher_t *launcher = NULL;
    korch_server_t *srv = NULL;
    korch_instance_t *inst = korch_instance_new(NULL, &err);
    if (!inst) {
        fprintf(stderr, "korch serve: %s\n", err.msg);
        goto out;
    }
    korch_cli_launcher_opts_t lo = {.name = launcher_name, .kernel = kernel, .image = image, .memory_mb = memory_mb,
                                    .cpus = cpus, .pids = pids, .instance = korch_instance_name(inst)};
    launcher = korch_cli_launcher(&lo, &err);
    if (!launcher && err.rc) {
        fprintf(stderr, "korch serve: %s\n", err.msg);
        goto out;
    }
    if (launcher)
        korch_cli_sweep(launcher, korch_instance_name(inst));
    loop = korch_loop_new();
    if (!loop)
        goto out;
    korch_server_opts_t so = {.ip = ip, .port = port, .token = token, .launcher = launcher, .kernel = kernel,
                              .max_kernels = max_kernels, .allow_origins = origins, .max_body = max_body,
                              .no_access_log = no_access_log};
    srv = korch_server_new(loop, &so, &err);
    if (!srv) {
        fprintf(stderr, "korch serve: %s\n", err.msg);
        goto out;
    }
    korch_cli_stop_on_signal(loop, &quit);
    const char *tok = korch_server_token(srv);
    char host[80];
    snprintf(host, sizeof host, strchr(ip, ':') ? "[%s]" : "%s", ip);
    printf("http://%s:%d/%s%s\n", host, korch_server_port(srv), *tok ? "?token=" : "", tok);
    fflush(stdout);
    fprintf(stderr, "korch: serving the Jupyter kernel API on http://%s:%d/ (%s launcher)%s\n", host,
            korch_server_port(srv), launcher ? "docker" : "local",
            *tok ? "" : "; authentication is OFF: anyone who can connect can run code");
    korch_server_run(srv, korch_cli_flag_set, &quit);
    fprintf(stderr, "korch: shutting down\n");
    rc = 0;
out:
    korch_server_destroy(&srv);
    korch_launcher_destroy(&launcher);
    korch_loop_destroy(&loop);
    korch_instance_destroy(&inst);
    return rc;
}
