/*  korch_server: a Jupyter-Server-compatible kernel gateway.
 *
 *  One thread, one event loop: libwebsockets serves HTTP and WebSocket on a
 *  libuv loop that is embedded in the korch_loop (its epoll fd is polled
 *  like any other fd, its timeout becomes a korch timer), so kernels,
 *  clients and timers all share korch's loop and nothing blocks.
 *
 *  The API is Jupyter Server's kernel API (what `jupyter server
 *  --gateway-url` and @jupyterlab/services use): /api, /api/status,
 *  /api/kernelspecs, /api/kernels, /api/sessions and the channels
 *  websocket in both of Jupyter's formats (see wsmsg.h). korch signs toward
 *  the kernel and verifies what comes back; clients never hold the key.
 *
 *  Limits: every buffer fed from outside is bounded (request bodies, one by
 *  one and all together; client messages, per-connection send queues,
 *  per-session replay buffers). A client that does not read is dropped,
 *  never the kernel. Connections that send no request (then those that
 *  presented no token) are closed first when connections run short, and
 *  after header_timeout_ms in any case: one that presented the token is
 *  never closed to make room.
 *
 *  Ownership: the caller owns the loop and the launcher, which outlive the
 *  server. Destroying the server shuts its kernels down.
 */
#ifndef KORCH_SERVER_H
#define KORCH_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <jansson.h>
#include "korch/error.h"
#include "korch/launcher.h"
#include "korch/loop.h"

typedef struct korch_server korch_server_t;

typedef struct {
    const char *ip;                     /* listen address (default 127.0.0.1) */
    int port;                           /* 0 = any free port (see korch_server_port) */
    const char *token;                  /* NULL = generate one; "" = no authentication (with
                                           users_file: NULL = none, the users' tokens only) */
    json_t *default_quota;              /* {KEY: N} every named user's quota under the users file's
                                           (korch/users.h keys; borrowed), or NULL: a Hub user
                                           without a users file has these */
    const char *users_file;             /* named users, roles, hashed tokens, quotas (korch/users.h;
                                           korch user add); NULL = the single token */
    const char *audit_file;             /* JSON lines of who did what (docs/team.md); NULL = none */
    bool audit_code;                    /* the audit log holds each execution's code, not only its hash */
    double kernel_memory_mb, kernel_cpus;   /* each kernel's limits (the launcher's --memory, --cpus),
                                           for the memory_mb and cpus quotas; 0 = not known */
    /* JupyterHub (docs/team.md): korch as a Hub service, each request's
       user asked of the Hub's API with the user's own Hub token; NULL
       hub_api_url = no Hub. The rest default from $JUPYTERHUB_* (what the
       Hub gives a managed service). */
    const char *hub_api_url;            /* http://127.0.0.1:8081/hub/api */
    const char *hub_service_name;       /* default $JUPYTERHUB_SERVICE_NAME, else "korch" */
    const char *hub_admin_group;        /* members of this Hub group are korch admins */
    int hub_cache_s;                    /* seconds a token's owner is kept (default 30) */
    const char *hub_login_url;          /* the Hub's authorize URL as browsers reach it (OAuth) */
    const char *hub_prefix;             /* the path the Hub's proxy routes here ("/services/korch/",
                                           $JUPYTERHUB_SERVICE_PREFIX): stripped from requests */
    korch_launcher_t *launcher;         /* borrowed; NULL = local processes */
    bool adopt;                         /* re-adopt the kernels an earlier korch of the launcher's
                                           instance left (launchers that can: docker, swarm) */
    const char *kernel;                 /* default kernelspec (default python3) */
    int max_kernels;                    /* 0 = no limit */
    const char *const *allow_origins;   /* NULL-terminated; "*" allows any origin */
    size_t max_body;                    /* request body limit (default 1 MiB) -> 413 */
    size_t max_upload;                  /* PUT of an agent session's file (default 64 MiB); spooled
                                           to disk as it arrives, never held in memory */
    size_t max_body_total;              /* request bodies held in memory at once, all requests
                                           together (default 64 MiB) -> 503 */
    size_t max_upload_total;            /* uploads being received at once, on disk (default 1 GiB) -> 503 */
    int max_connections;                /* open at once (default 1024; at most RLIMIT_NOFILE / 2) */
    int max_connections_per_peer;       /* open at once from one client: an address or IPv6 /64, or
                                           behind a trusted proxy its X-Forwarded-For client (default 256) */
    const char *const *trusted_proxies; /* NULL-terminated address blocks ("10.0.0.0/8", "::1"):
                                           connections from them name their client in
                                           X-Forwarded-For (for limits and the log); from any
                                           other peer the header is ignored */
    int header_timeout_ms;              /* a connection's request headers must be complete this long
                                           after its accept (default 5000) */
    size_t max_ws_message;              /* one client websocket message (default 64 MiB) */
    size_t max_ws_queue;                /* bytes queued toward one client before it is dropped
                                           (default 64 MiB; one message always fits) */
    size_t max_replay_bytes;            /* kept per disconnected session_id (default 16 MiB) */
    int kernel_start_timeout_ms;        /* default 60000 */
    bool no_access_log;                 /* default: one line per request on stderr */
    /* the agent API (/api/agent/...) */
    const char *llm;                    /* "provider:model" sessions use by default; NULL = $KORCH_LLM */
    const char *agent_dir;              /* where sessions live (default ./korch-sessions) */
    int max_agent_sessions;             /* 0 = no limit */
    int agent_max_steps;                /* per turn (default 20) */
    size_t agent_context_chars;         /* what a model request sends, roughly: each session's
                                           conversation in memory is cut to it (default 120000) */
    /* Budgets per turn of every session, as korch run's (0 = none); a POST
       /api/agent/sessions {"budget": {tokens, seconds, cost}} may lower them
       for its session. A cost budget needs agent_prices. */
    int64_t agent_max_tokens;
    int agent_max_seconds;
    double agent_max_cost;
    const struct korch_prices *agent_prices;   /* borrowed, outlives the server; NULL = no price table */
    struct korch_llm_gates *llm_gates;  /* the agents' model calls share each key's rate limit fairly between
                                           users (korch/llm_gate.h); borrowed, outlives the server; NULL = none */
    uint64_t agent_session_bytes;       /* each session's output budget on disk (transcript, notebook,
                                           figures) across turns, resumes and restarts; 0 = 128 MiB */
    /* Warm pool: kernels started ahead, handed out on POST /api/kernels
       (and sessions) at once, refilled in the background one start at a
       time. Pool kernels are not listed and not counted in max_kernels
       until handed out, and are never culled. */
    int pool_size;                      /* ready kernels of the default kernelspec (0 = none) */
    const char *const *pool_specs;      /* NULL-terminated "NAME=N" for other kernelspecs (or the
                                           default one, overriding pool_size) */
    /* Idle culling, with jupyter_server's meanings (MappingKernelManager). */
    int cull_idle_timeout;              /* seconds of inactivity before a kernel is shut down; 0 = off */
    int cull_interval;                  /* seconds between checks (default 300) */
    bool cull_connected;                /* also cull kernels with open websockets */
    bool cull_busy;                     /* also cull busy kernels */
} korch_server_opts_t;

/* Listen and serve on loop. NULL + err when it cannot listen. */
korch_server_t *korch_server_new(korch_loop_t *loop, const korch_server_opts_t *opts, korch_err_t *err);

/* Close every connection and shut every kernel down (runs the loop for
   that: call it outside the loop's handlers). */
void korch_server_destroy(korch_server_t **s);

/* The port it listens on (the real one when opts.port was 0). */
int korch_server_port(const korch_server_t *s);

/* The token clients must present (borrowed; "" when authentication is off). */
const char *korch_server_token(const korch_server_t *s);

/* Run the loop until quit(arg) holds (checked after every round; a handler
   that breaks the loop makes it check). Nothing waits for between rounds:
   kernels are shut down on the loop without blocking it. */
void korch_server_run(korch_server_t *s, bool (*quit)(void *arg), void *arg);

#endif
