/*  korch serve: a Jupyter-Server-compatible kernel gateway.
 *
 *  korch serve [--ip 127.0.0.1] [--port 8888] [--token T] [--launcher auto]
 *              [--kernel python3] [--max-kernels N] [--allow-origin O]...
 *              [--pool N] [--pool NAME=N]... [--cull-idle-timeout S] [--cull-interval S]
 *              [--cull-connected] [--cull-busy] [--llm P:M] [--agent-dir DIR]
 *              [--max-agent-sessions N] [--max-steps N] [--max-body B] [--max-upload B]
 *              [--max-body-total B] [--max-upload-total B] [--instance NAME]
 *              [--max-connections-per-client N] [--trusted-proxy CIDR]...
 *
 *  Prints `http://IP:PORT/?token=TOKEN` as the first line on stdout once it
 *  listens, then serves until SIGINT / SIGTERM, when it shuts its kernels
 *  down. Point Jupyter Server at it with
 *  `jupyter server --gateway-url=http://IP:PORT --GatewayClient.auth_token=TOKEN`.
 */
#include "cli.h"
#include "korch/instance.h"
#include "korch/ledger.h"
#include "korch/llm_gate.h"
#include "korch/log.h"
#include "korch/netaddr.h"
#include "korch/server.h"
#include "korch/users.h"

#include <getopt.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ORIGINS 32
#define MAX_POOL_SPECS 16
#define MAX_PROXIES 32

/* long-only options of the pool and the culler */
enum { OPT_POOL = 300, OPT_CULL_IDLE, OPT_CULL_INTERVAL, OPT_CULL_CONNECTED, OPT_CULL_BUSY };
/* long-only options of the agent API */
enum { OPT_LLM = 400, OPT_AGENT_DIR, OPT_MAX_AGENT_SESSIONS, OPT_MAX_STEPS, OPT_PRICES, OPT_MAX_TOKENS, OPT_MAX_SECONDS, OPT_MAX_COST,
       OPT_SESSION_MB };
enum { OPT_MAX_UPLOAD = 500, OPT_MAX_BODY_TOTAL, OPT_MAX_UPLOAD_TOTAL, OPT_INSTANCE };
/* long-only options of connections */
enum { OPT_TRUSTED_PROXY = 600, OPT_MAX_CONN_PER_CLIENT };
/* long-only options of a team's korch (docs/team.md) */
enum { OPT_USERS = 700, OPT_AUDIT, OPT_AUDIT_CODE, OPT_QUOTA, OPT_CONTEXT_CHARS, OPT_LLM_IN_FLIGHT };
/* long-only options of korch as a JupyterHub service (docs/team.md) */
enum { OPT_HUB = 750, OPT_HUB_API_URL, OPT_HUB_ADMIN_GROUP, OPT_HUB_CACHE, OPT_HUB_LOGIN_URL };

/* A non-negative number of seconds or kernels; -1 when it is not one. */
static int s_count(const char *v)
{
    char *end;
    long n = strtol(v, &end, 10);
    return end == v || *end || n < 0 || n > 1000000 ? -1 : (int)n;
}

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
            "      --users FILE         named users with their own tokens, roles and quotas (korch user\n"
            "                           add); each sees only their own kernels, sessions and files.\n"
            "                           With it no token is generated (--token T adds an admin one)\n"
            "      --quota KEY=N        a default quota of every named user (users file and Hub users; the\n"
            "                           file's own over it): kernels, sessions, memory_mb, cpus,\n"
            "                           tokens_per_day, cost_per_day. Repeatable\n"
            "      --audit FILE         append who started, ran, uploaded, downloaded and deleted what\n"
            "                           to FILE as JSON lines (each execution's code as its SHA-256)\n"
            "      --audit-code         the audit log holds each execution's code itself too\n"
            "      --hub                korch as a JupyterHub service: a request's user is the owner of its\n"
            "                           Hub token (GET /hub/api/user); the page logs in through the Hub's\n"
            "                           OAuth. Reads $JUPYTERHUB_API_URL, _API_TOKEN, _SERVICE_NAME,\n"
            "                           _CLIENT_ID, _OAUTH_CALLBACK_URL (the Hub sets them for a managed\n"
            "                           service; docs/team.md)\n"
            "      --hub-api-url URL    the Hub's API (implies --hub; default $JUPYTERHUB_API_URL)\n"
            "      --hub-admin-group G  members of this Hub group are korch admins (see everyone's)\n"
            "      --hub-cache-seconds N  how long a token's owner is kept (default 30: a token revoked\n"
            "                           at the Hub is refused within N s)\n"
            "      --hub-login-url URL  the Hub's authorize URL as browsers reach it (default\n"
            "                           $JUPYTERHUB_HOST$JUPYTERHUB_BASE_URL/hub/api/oauth2/authorize)\n"
            "  -k, --kernel NAME        default kernelspec (default python3)\n");
    korch_cli_launcher_help(f, 6, 27, "auto");
    fprintf(f,
            "      --max-kernels N      refuse to start more than N kernels (default: no limit)\n"
            "      --allow-origin O     a browser origin allowed besides this host's own; repeatable;\n"
            "                           '*' allows any\n"
            "      --max-body BYTES     request body limit (default 1048576)\n"
            "      --max-upload BYTES   limit of one file upload to an agent session (default 64 MiB)\n"
            "      --max-body-total BYTES  request bodies in memory at once, all together (default 64 MiB)\n"
            "      --max-upload-total BYTES  uploads being received at once, on disk (default 1 GiB)\n"
            "      --pool N             keep N kernels of the default kernelspec started and ready;\n"
            "                           POST /api/kernels hands one out at once (default 0)\n"
            "      --pool NAME=N        the same for kernelspec NAME; repeatable\n"
            "      --cull-idle-timeout S  shut down kernels idle for more than S seconds (default 0: never)\n"
            "      --cull-interval S    check for idle kernels every S seconds (default 300)\n"
            "      --cull-connected     cull idle kernels even with open websockets\n"
            "      --cull-busy          cull idle kernels even while busy\n"
            "      --llm PROVIDER:MODEL the model agent sessions use (default $KORCH_LLM): openai:MODEL,\n"
            "                           anthropic:MODEL, ollama:MODEL or replay:FILE; keys and base URLs\n"
            "                           come from the environment (OPENAI_API_KEY, ...), never from clients\n"
            "      --agent-dir DIR      where agent sessions keep transcript, notebook and figures\n"
            "                           (default ./korch-sessions)\n"
            "      --max-agent-sessions N  refuse more than N agent sessions (default: no limit)\n"
            "      --max-steps N        model calls per agent turn (default 20)\n"
            "      --llm-in-flight N    model calls in flight per API key at most (default 8); beyond it, and\n"
            "                           after the provider's 429s, users take turns (docs/team.md)\n"
            "      --context-chars N    what an agent's model request sends, roughly (default 120000): the\n"
            "                           older turns go (from memory too; the transcript keeps them)\n"
            "      --max-tokens N, --max-seconds N, --max-cost X   budgets per agent turn, as korch run's\n"
            "                           (a session may ask for lower ones: POST {\"budget\": {...}})\n"
            "      --session-mb N       output budget of each agent session on disk (transcript, notebook,\n"
            "                           figures; across its turns, resumes and kernel restarts), as korch\n"
            "                           run's (default 256, at least 2)\n"
            "      --prices FILE        a price table turning tokens into cost (default $KORCH_PRICES; none built in)\n"
            "      --no-access-log      no line per request on stderr\n"
            "      --max-connections-per-client N  connections open at once from one client\n"
            "                           (an address, an IPv6 /64; default 256)\n"
            "      --trusted-proxy CIDR a reverse proxy (address or block, e.g. 10.0.0.0/8 or ::1) whose\n"
            "                           X-Forwarded-For names the client, for the per-client limit and\n"
            "                           the log; repeatable. From any other peer the header is ignored\n"
            "      --instance NAME      this korch's stable name (default $KORCH_INSTANCE, else random).\n"
            "                           Docker and swarm kernels outlive a korch that is killed: the next\n"
            "                           korch serve of the same instance (and runtime dir) re-adopts them\n"
            "                           with their ids and variables, and removes those that died meanwhile.\n"
            "                           Without it, what a gone korch left is removed. Sandbox and local\n"
            "                           kernels are never re-adopted: they are korch's child processes on\n"
            "                           this host and end with it (bubblewrap --die-with-parent; ipykernel\n"
            "                           watches JPY_PARENT_PID), and their connections lived in korch only.\n"
            "                           SIGTERM / Ctrl-C still shut every kernel down.\n"
            KORCH_CLI_ENV_HELP
            "  -h, --help               this text\n");
}

/* Each agent session runs on a thread of its own; glibc gives threads
   arenas of their own (up to 8 per CPU), and what a turn frees in one
   stays mapped there between others' live blocks: the team soak's RSS grew
   ~3x faster than its heap. Two arenas keep it near the heap (the threads
   mostly wait on kernels and models, not on malloc). $MALLOC_ARENA_MAX
   still decides when set. */
static void s_few_arenas(void)
{
#ifdef M_ARENA_MAX
    if (!getenv("MALLOC_ARENA_MAX"))
        mallopt(M_ARENA_MAX, 2);
#endif
}

int korch_cmd_serve(int argc, char **argv)
{
    s_few_arenas();
    const char *llm = NULL, *agent_dir = NULL;
    int max_agent_sessions = 0, max_steps = 0, max_seconds = 0;
    int64_t max_tokens = 0;
    double max_cost = 0, session_mb = 0;
    const char *prices_path = getenv("KORCH_PRICES");
    korch_prices_t *prices = NULL;
    korch_llm_gates_t *gates = NULL;
    int llm_in_flight = 8;
    const char *ip = "127.0.0.1", *token = NULL, *kernel = "python3", *users = NULL, *audit = NULL;
    bool audit_code = false;
    json_t *quotas = NULL;
    size_t context_chars = 0;
    const char *hub_url = NULL, *hub_admins = NULL, *hub_login = NULL;
    bool hub = false;
    int hub_cache = 0;
    korch_launcher_choice_t lo = {.name = "auto"}; /* --launcher and its limits */
    const char *origins[MAX_ORIGINS + 1] = {0};
    int norigins = 0, port = 8888, max_kernels = 0;
    size_t max_body = 0, max_upload = 0, max_body_total = 0, max_upload_total = 0;
    bool no_access_log = false;
    /* a stack or compose service sets it in its environment */
    const char *instance_name = getenv("KORCH_INSTANCE") && *getenv("KORCH_INSTANCE") ? getenv("KORCH_INSTANCE") : NULL;
    const char *pool_specs[MAX_POOL_SPECS + 1] = {0};
    int npool_specs = 0, pool_size = 0, cull_idle = 0, cull_interval = 0, n;
    bool cull_connected = false, cull_busy = false;
    const char *proxies[MAX_PROXIES + 1] = {0};
    int nproxies = 0, max_per_client = 0;
    korch_cli_load_dotenv(".env"); /* keys and KORCH_LLM; the real environment wins */
    static const struct option longopts[] = {
        {"pool", required_argument, 0, OPT_POOL},
        {"cull-idle-timeout", required_argument, 0, OPT_CULL_IDLE},
        {"cull-interval", required_argument, 0, OPT_CULL_INTERVAL},
        {"cull-connected", no_argument, 0, OPT_CULL_CONNECTED},
        {"cull-busy", no_argument, 0, OPT_CULL_BUSY},
        {"llm", required_argument, 0, OPT_LLM},
        {"agent-dir", required_argument, 0, OPT_AGENT_DIR},
        {"max-agent-sessions", required_argument, 0, OPT_MAX_AGENT_SESSIONS},
        {"max-steps", required_argument, 0, OPT_MAX_STEPS},
        {"context-chars", required_argument, 0, OPT_CONTEXT_CHARS},
        {"llm-in-flight", required_argument, 0, OPT_LLM_IN_FLIGHT},
        {"prices", required_argument, 0, OPT_PRICES},
        {"max-tokens", required_argument, 0, OPT_MAX_TOKENS},
        {"max-seconds", required_argument, 0, OPT_MAX_SECONDS},
        {"max-cost", required_argument, 0, OPT_MAX_COST},
        {"session-mb", required_argument, 0, OPT_SESSION_MB},
        {"max-upload", required_argument, 0, OPT_MAX_UPLOAD},
        {"max-body-total", required_argument, 0, OPT_MAX_BODY_TOTAL},
        {"max-upload-total", required_argument, 0, OPT_MAX_UPLOAD_TOTAL},
        {"instance", required_argument, 0, OPT_INSTANCE},
        {"users", required_argument, 0, OPT_USERS},
        {"audit", required_argument, 0, OPT_AUDIT},
        {"quota", required_argument, 0, OPT_QUOTA},
        {"audit-code", no_argument, 0, OPT_AUDIT_CODE},
        {"hub", no_argument, 0, OPT_HUB},
        {"hub-api-url", required_argument, 0, OPT_HUB_API_URL},
        {"hub-admin-group", required_argument, 0, OPT_HUB_ADMIN_GROUP},
        {"hub-cache-seconds", required_argument, 0, OPT_HUB_CACHE},
        {"hub-login-url", required_argument, 0, OPT_HUB_LOGIN_URL},
        {"trusted-proxy", required_argument, 0, OPT_TRUSTED_PROXY},
        {"max-connections-per-client", required_argument, 0, OPT_MAX_CONN_PER_CLIENT},
        {"ip", required_argument, 0, 'i'},          {"port", required_argument, 0, 'p'},
        {"token", required_argument, 0, 't'},       KORCH_CLI_LAUNCHER_LONGOPTS,
        {"kernel", required_argument, 0, 'k'},      {"max-kernels", required_argument, 0, 'M'},
        {"allow-origin", required_argument, 0, 'o'}, {"max-body", required_argument, 0, 'B'},
        {"no-access-log", no_argument, 0, 'q'},     {"help", no_argument, 0, 'h'},
        {"env", required_argument, 0, KORCH_CLI_OPT_ENV},
        {0, 0, 0, 0},
    };
    optind = 1;
    int opt;
    char *end;
    korch_err_t err = {0};
    while ((opt = getopt_long(argc, argv, "+p:k:h", longopts, NULL)) != -1) {
        if (korch_cli_launcher_opt(&lo, opt, optarg))
            continue;
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
        case OPT_USERS: users = optarg; break;
        case OPT_AUDIT: audit = optarg; break;
        case OPT_LLM_IN_FLIGHT:
            llm_in_flight = (int)korch_cli_num("llm-in-flight", optarg, 1, 10000, true, "calls");
            break;
        case OPT_CONTEXT_CHARS:
            context_chars = (size_t)korch_cli_num("context-chars", optarg, 1000, 1e10, true, "characters");
            break;
        case OPT_QUOTA: {
            const char *eq = strchr(optarg, '=');
            char key[32];
            snprintf(key, sizeof key, "%.*s", eq ? (int)(eq - optarg) : 0, optarg);
            if (!eq || !korch_users_quota_key(key)) {
                fprintf(stderr, "korch serve: --quota '%s' is not KEY=N with KEY one of kernels, sessions, "
                                "memory_mb, cpus, tokens_per_day, cost_per_day\n", optarg);
                json_decref(quotas);
                return 2;
            }
            double v = korch_cli_num("quota", eq + 1, 0, 1e15, false, key);
            if (!quotas)
                quotas = json_object();
            json_object_set_new(quotas, key, v == (double)(long long)v ? json_integer((long long)v) : json_real(v));
            break;
        }
        case OPT_AUDIT_CODE: audit_code = true; break;
        case OPT_HUB: hub = true; break;
        case OPT_HUB_API_URL: hub = true, hub_url = optarg; break;
        case OPT_HUB_ADMIN_GROUP: hub_admins = optarg; break;
        case OPT_HUB_LOGIN_URL: hub_login = optarg; break;
        case OPT_HUB_CACHE:
            if ((hub_cache = s_count(optarg)) <= 0) {
                fprintf(stderr, "korch serve: bad --hub-cache-seconds '%s' (a number above 0)\n", optarg);
                return 2;
            }
            break;
        case 'k': kernel = optarg; break;
        case 'M': max_kernels = (int)korch_cli_num("max-kernels", optarg, 1, 100000, true, "kernels"); break;
        case 'o':
            if (norigins == MAX_ORIGINS) {
                fprintf(stderr, "korch serve: at most %d --allow-origin\n", MAX_ORIGINS);
                return 2;
            }
            origins[norigins++] = optarg;
            break;
        case 'B': max_body = (size_t)korch_cli_num("max-body", optarg, 1024, 1e12, true, "bytes"); break;
        case OPT_MAX_UPLOAD: max_upload = (size_t)korch_cli_num("max-upload", optarg, 1024, 1e13, true, "bytes"); break;
        case OPT_MAX_BODY_TOTAL: max_body_total = (size_t)korch_cli_num("max-body-total", optarg, 1024, 1e13, true, "bytes"); break;
        case OPT_MAX_UPLOAD_TOTAL: max_upload_total = (size_t)korch_cli_num("max-upload-total", optarg, 1024, 1e13, true, "bytes"); break;
        case 'q': no_access_log = true; break;
        case OPT_INSTANCE: instance_name = optarg; break;
        case KORCH_CLI_OPT_ENV:
            if (!korch_cli_env_opt("serve", optarg))
                return 2;
            break;
        case OPT_POOL:
            if (strchr(optarg, '=')) { /* checked by the server: the kernelspec must exist */
                if (npool_specs == MAX_POOL_SPECS) {
                    fprintf(stderr, "korch serve: at most %d --pool NAME=N\n", MAX_POOL_SPECS);
                    return 2;
                }
                pool_specs[npool_specs++] = optarg;
            } else if ((pool_size = s_count(optarg)) < 0) {
                fprintf(stderr, "korch serve: bad --pool '%s' (a number, or NAME=N)\n", optarg);
                return 2;
            }
            break;
        case OPT_CULL_IDLE:
        case OPT_CULL_INTERVAL:
            if ((n = s_count(optarg)) < 0) {
                fprintf(stderr, "korch serve: bad number of seconds '%s'\n", optarg);
                return 2;
            }
            *(opt == OPT_CULL_IDLE ? &cull_idle : &cull_interval) = n;
            break;
        case OPT_LLM: llm = optarg; break;
        case OPT_PRICES: prices_path = optarg; break;
        case OPT_MAX_TOKENS:
        case OPT_MAX_SECONDS:
        case OPT_MAX_COST: {
            double v = strtod(optarg, &end);
            if (end == optarg || *end || v < 0) {
                fprintf(stderr, "korch serve: bad budget '%s' (a number >= 0)\n", optarg);
                return 2;
            }
            if (opt == OPT_MAX_TOKENS)
                max_tokens = (int64_t)v;
            else if (opt == OPT_MAX_SECONDS)
                max_seconds = (int)v;
            else
                max_cost = v;
            break;
        }
        case OPT_SESSION_MB:
            session_mb = strtod(optarg, &end);
            if (end == optarg || *end || !(session_mb >= 2 && session_mb < 1e9)) {
                fprintf(stderr, "korch serve: bad --session-mb '%s' (megabytes, at least 2)\n", optarg);
                return 2;
            }
            break;
        case OPT_AGENT_DIR: agent_dir = optarg; break;
        case OPT_MAX_AGENT_SESSIONS:
        case OPT_MAX_STEPS:
            if ((n = s_count(optarg)) < 0) {
                fprintf(stderr, "korch serve: bad number '%s'\n", optarg);
                return 2;
            }
            *(opt == OPT_MAX_STEPS ? &max_steps : &max_agent_sessions) = n;
            break;
        case OPT_TRUSTED_PROXY: {
            korch_cidr_t block;
            if (nproxies == MAX_PROXIES) {
                fprintf(stderr, "korch serve: at most %d --trusted-proxy\n", MAX_PROXIES);
                return 2;
            }
            if (korch_cidr_parse(optarg, &block, &err) != KORCH_OK) {
                fprintf(stderr, "korch serve: --trusted-proxy: %s\n", err.msg);
                return 2;
            }
            proxies[nproxies++] = optarg;
            break;
        }
        case OPT_MAX_CONN_PER_CLIENT:
            if ((n = s_count(optarg)) <= 0) {
                fprintf(stderr, "korch serve: bad --max-connections-per-client '%s' (a number above 0)\n", optarg);
                return 2;
            }
            max_per_client = n;
            break;
        case OPT_CULL_CONNECTED: cull_connected = true; break;
        case OPT_CULL_BUSY: cull_busy = true; break;
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
    korch_loop_t *loop = NULL;
    korch_launcher_t *launcher = NULL;
    korch_server_t *srv = NULL;
    gates = korch_llm_gates_new(llm_in_flight);
    if (prices_path && *prices_path && !(prices = korch_prices_load(prices_path, &err))) {
        fprintf(stderr, "korch serve: --prices: %s\n", err.msg);
        return 2;
    }
    if (max_cost > 0 && !prices) {
        korch_prices_destroy(&prices);
        fprintf(stderr, "korch serve: --max-cost needs a price table (--prices FILE or KORCH_PRICES)\n");
        return 2;
    }
    korch_instance_t *inst = korch_instance_new(instance_name, &err);
    if (!inst) {
        fprintf(stderr, "korch serve: %s\n", err.msg);
        goto out;
    }
    loop = korch_loop_new();
    if (!loop)
        goto out;
    lo.kernel = kernel;
    lo.instance = korch_instance_name(inst);
    launcher = korch_launcher_choose(loop, &lo, &err);
    if (!launcher) {
        fprintf(stderr, "korch serve: %s\n", err.msg);
        goto out;
    }
    korch_launcher_sweep(launcher, korch_instance_name(inst));
    { /* the default kernelspec's template (--fork) imports while korch starts up */
        korch_err_t werr = {0};
        korch_kernelspec_t *wspec = korch_kernelspec_find(kernel, &werr);
        if (wspec && korch_launcher_warm(launcher, wspec, &werr) != KORCH_OK)
            korch_warn("kernel '%s' will start without its template: %s", kernel, werr.msg);
        korch_kernelspec_destroy(&wspec);
    }
    bool adopt = instance_name && (korch_launcher_caps(launcher) & KORCH_LAUNCHER_ADOPTS);
    if (instance_name && !adopt)
        korch_notice("instance '%s': the %s launcher's kernels die with korch, so a restarted korch serve has "
                     "none to re-adopt (docker and swarm kernels outlive it)",
                     instance_name, korch_launcher_name(launcher));
    if (hub && !hub_url && !(hub_url = getenv("JUPYTERHUB_API_URL"))) {
        fprintf(stderr, "korch serve: --hub: no JupyterHub API URL (give --hub-api-url URL, or run korch as a Hub "
                        "service, which sets $JUPYTERHUB_API_URL)\n");
        goto out;
    }
    if (hub && token && !*token) {
        fprintf(stderr, "korch serve: --hub with --token '' would let anyone in as an admin: give a token, or none\n");
        goto out;
    }
    korch_server_opts_t so = {.ip = ip, .port = port, .token = token, .users_file = users, .audit_file = audit,
                              .default_quota = quotas,
                              .audit_code = audit_code, .kernel_memory_mb = lo.memory_mb, .kernel_cpus = lo.cpus,
                              .launcher = launcher,
                              .hub_api_url = hub ? hub_url : NULL, .hub_admin_group = hub_admins,
                              .hub_cache_s = hub_cache, .hub_login_url = hub_login,
                              .hub_prefix = hub ? getenv("JUPYTERHUB_SERVICE_PREFIX") : NULL,
                              .kernel = kernel,
                              .adopt = adopt,
                              .max_kernels = max_kernels, .allow_origins = origins, .max_body = max_body,
                              .max_upload = max_upload, .max_body_total = max_body_total,
                              .max_upload_total = max_upload_total,
                              .no_access_log = no_access_log, .pool_size = pool_size, .pool_specs = pool_specs,
                              .cull_idle_timeout = cull_idle, .cull_interval = cull_interval,
                              .cull_connected = cull_connected, .cull_busy = cull_busy, .llm = llm,
                              .agent_dir = agent_dir, .max_agent_sessions = max_agent_sessions,
                              .agent_max_steps = max_steps,
                              .agent_context_chars = context_chars, .agent_max_tokens = max_tokens,
                              .agent_max_seconds = max_seconds, .agent_max_cost = max_cost, .agent_prices = prices,
                              .llm_gates = gates,
                              .agent_session_bytes = (uint64_t)(session_mb * 1024 * 1024),
                              .trusted_proxies = proxies, .max_connections_per_peer = max_per_client};
    if (!gates) {
        fprintf(stderr, "korch serve: out of memory\n");
        goto out;
    }
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
            korch_server_port(srv), korch_launcher_name(launcher),
            *tok || users ? "" : "; authentication is OFF: anyone who can connect can run code");
    korch_server_run(srv, korch_cli_flag_set, &quit);
    fprintf(stderr, "korch: shutting down\n");
    rc = 0;
out:
    korch_server_destroy(&srv);
    korch_launcher_destroy(&launcher);
    korch_loop_destroy(&loop);
    korch_instance_destroy(&inst);
    korch_prices_destroy(&prices);
    korch_llm_gates_destroy(&gates);
    json_decref(quotas);
    return rc;
}
