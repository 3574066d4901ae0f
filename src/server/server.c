/*  korch_server: libwebsockets on a libuv loop embedded in korch's loop;
 *  HTTP requests and websocket connections.
 *
 *  Loop integration. Debian's libwebsockets 4.1.6 is built without
 *  LWS_WITH_EXTERNAL_POLL (no ADD_POLL_FD callbacks), but with libuv as an
 *  event-library plugin, and libuv is made to be embedded: uv_backend_fd()
 *  is an epoll fd that is readable whenever one of its watchers is ready,
 *  and uv_backend_timeout() is the wait until its next timer. So lws runs
 *  on a private uv_loop_t whose backend fd is one more korch_loop poller,
 *  its timeout one korch timer, and uv_run(UV_RUN_NOWAIT) services it. One
 *  subtlety: libuv applies watcher changes (lws_callback_on_writable) only
 *  inside uv_run, so whoever asks lws for a write also schedules a "kick"
 *  (a 0 ms korch timer that runs uv_run once more, in the same round).
 *
 *  Requests (front.c). A connection is admitted by conns.c (limits per address,
 *  a header deadline, idle ones closed first). A request is parsed by lws;
 *  korch checks the Origin, the token (constant time), the body's framing
 *  and size, reads the body as it comes (body.c: bounded one by one and all
 *  together, chunked decoded, uploads spooled to disk), then routes it
 *  (api.c). Handlers answer at once or later (a kernel start waits for the
 *  kernel to be ready); the response is written from lws's writable
 *  callback, which every response asks for (s_wake) unless it answers the
 *  request being handled in its own callback. One access-log line per
 *  request on stderr, the client's path escaped.
 *
 *  Websockets (ws.c). /api/kernels/{id}/channels; the subprotocol
 *  v1.kernel.websocket.jupyter.org is chosen when offered, else the
 *  legacy format. Messages are reassembled up to max_ws_message; frames for
 *  the client wait in a bounded queue (max_ws_queue bytes) and a client
 *  that lets it overflow is dropped.
 */
#include "server_core.h"
#include "relay.h"
#include "ws.h"
#include "trace.h"
#include "users.h"
#include "quota.h"
#include "audit.h"
#include "hub.h"
#include "korch/closeguard.h"
#include "korch/path.h"
#include "korch/fsutil.h"
#include "korch/log.h"
#include "korch/session.h"
#include "korch/uuid.h"

#include <libwebsockets.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

static void s_kick(korch_server_t *s);
static void s_kick_cb(void *arg) { s_kick(arg); }

_Static_assert(offsetof(struct korch_server, parts) == 0, "srv_parts reads the parts at the server's start");
int korch_server_port(const korch_server_t *s) { return s->port; }
const char *korch_server_token(const korch_server_t *s) { return s->token; }

/* ------------------------------------------------------------- libuv glue */

static int s_on_uv_timer(korch_loop_t *loop, int id, void *arg);

/* Service lws: one non-blocking libuv iteration, then re-arm the timer. */
static void s_uv_service(korch_server_t *s)
{
    if (!s->uv_ok)
        return;
    uv_run(&s->uv, UV_RUN_NOWAIT);
    if (s->uv_timer >= 0)
        korch_loop_timer_end(s->loop, s->uv_timer);
    s->uv_timer = -1;
    int t = uv_backend_timeout(&s->uv);
    if (t >= 0)
        s->uv_timer = korch_loop_timer(s->loop, t > 1000 ? 1000 : t, 1, s_on_uv_timer, s);
}

static int s_on_uv_timer(korch_loop_t *loop, int id, void *arg)
{
    korch_server_t *s = arg;
    s->uv_timer = -1;
    s_uv_service(s);
    return 0;
}

static int s_on_uv_fd(korch_loop_t *loop, int fd, void *arg)
{
    s_uv_service(arg);
    return 0;
}

static int s_on_kick(korch_loop_t *loop, int id, void *arg)
{
    korch_server_t *s = arg;
    s->kick_timer = -1;
    s_uv_service(s);
    return 0;
}

static void s_kick(korch_server_t *s)
{
    if (s->kick_timer < 0 && s->uv_ok)
        s->kick_timer = korch_loop_timer(s->loop, 0, 1, s_on_kick, s);
}

#define CONN_PENDING 128             /* connections without their request headers yet (conns.c) */
#define CONN_PENDING_PER_PEER 16     /* the same from one address */
#define SRV_MAX_TRUSTED_PROXIES 32   /* --trusted-proxy blocks */

/* ------------------------------------------------------------- websockets */

static void s_ws_open(korch_server_t *s, srv_pss_t *pss, struct lws *wsi)
{
    char uri[SRV_ROUTE_MAX_PATH] = "", id[64] = "";
    int64_t t0 = srv_now_us();
    srv_front_ws_route(wsi, uri, sizeof uri, id, sizeof id); /* confirmed: it matches */
    srv_ws_t *ws = srv_ws_new(&s->http, wsi, s->opts.max_ws_message, s->ws_seq + 1);
    if (!ws) {
        lws_set_timeout(wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
        return;
    }
    if (!ws->has_session_id)
        s->ws_seq++;
    pss->ws = ws;
    if (!srv_front_ws_user(s, wsi, uri, &ws->user)) { /* confirmed a moment ago: a revoked token */
        srv_http_log(&s->http, "GET", uri, 403, t0, wsi);
        srv_ws_close(ws, "missing or wrong token");
        return;
    }
    srv_touch(s);
    srv_kernel_t *mk = srv_kmgr_find(s->parts.kmgr, id);
    srv_http_log(&s->http, "GET", uri, mk ? 101 : 404, t0, wsi);
    if (!mk) {
        srv_ws_close(ws, "kernel is gone");
        return;
    }
    korch_info("websocket %s on kernel %.8s (%s)", ws->session_key, id, ws->proto == KORCH_WS_V1 ? "v1" : "legacy");
    srv_audit(s->parts.audit, &ws->user, "kernel.connect", "kernel", mk->id, NULL);
    srv_kernel_attach(mk, ws);
}

/* A fragment of a client's message; a complete one goes to its kernel. */
static int s_ws_receive(srv_ws_t *ws, const void *in, size_t len)
{
    int r = srv_ws_receive(ws, in, len);
    if (r == 1) {
        srv_kernel_client_message(ws, ws->rx.p, ws->rx.len, ws->rx_binary);
        srv_ws_received(ws);
    }
    return r < 0 ? -1 : 0;
}

/* --------------------------------------------------------- lws callback */

static int s_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in, size_t len)
{
    struct lws_context *ctx = lws_get_context(wsi);
    korch_server_t *s = ctx ? lws_context_user(ctx) : NULL;
    srv_pss_t *pss = user;
    switch (reason) {
    case LWS_CALLBACK_SERVER_NEW_CLIENT_INSTANTIATED: {
        /* Nagle + delayed ACKs cost jupyter_server 40 ms per message */
        int one = 1, fd = (int)lws_get_socket_fd(wsi);
        if (fd >= 0)
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        /* at a limit, and nothing idle to close for it: refused */
        return s && !srv_conns_accept(s->parts.conns, wsi, fd) ? -1 : 0;
    }
    case LWS_CALLBACK_WSI_DESTROY:
        if (s)
            srv_conns_closed(s->parts.conns, wsi);
        return 0;
    case LWS_CALLBACK_HTTP:
        return s && pss ? srv_front_http_begin(s, pss, wsi, in) : -1;
    case LWS_CALLBACK_HTTP_BODY:
        return s && pss ? srv_front_http_body(s, pss, wsi, in, len) : -1;
    case LWS_CALLBACK_HTTP_BODY_COMPLETION:
        return s && pss ? srv_front_http_body_done(s, pss, wsi) : -1;
    case LWS_CALLBACK_HTTP_WRITEABLE:
        return s && pss ? srv_front_finish(s, pss, wsi) : -1;
    case LWS_CALLBACK_CLOSED_HTTP:
    case LWS_CALLBACK_HTTP_DROP_PROTOCOL:
        if (pss && pss->req && pss->req->streaming) {
            srv_front_stream_lost(s, pss->req);
            pss->req = NULL;
            return 0;
        }
        if (pss && pss->req) {
            if (pss->req->who_pending) /* its identity was being looked up: never answered now */
                srv_ident_cancel(s->parts.ident, pss->req);
            pss->req->who_pending = false;
            pss->req->wsi = NULL;
            if (pss->req->owner == SRV_REQ_CONN || pss->req->responded)
                srv_req_free(&pss->req);
            pss->req = NULL; /* a waiting request is its waiter's now */
        }
        return 0;
    case LWS_CALLBACK_HTTP_CONFIRM_UPGRADE:
        return s ? srv_front_ws_confirm(s, wsi) : -1;
    case LWS_CALLBACK_ESTABLISHED:
        if (s && pss)
            s_ws_open(s, pss, wsi);
        return 0;
    case LWS_CALLBACK_RECEIVE:
        return s && pss && pss->ws ? s_ws_receive(pss->ws, in, len) : 0;
    case LWS_CALLBACK_SERVER_WRITEABLE:
        return s && pss && pss->ws ? srv_ws_writable(pss->ws) : 0;
    case LWS_CALLBACK_CLOSED:
        if (pss && pss->ws) {
            korch_info("websocket %s closed", pss->ws->session_key);
            pss->ws->wsi = NULL;
            srv_kernel_detach(pss->ws);
            srv_ws_destroy(&pss->ws);
        }
        return 0;
    default:
        break;
    }
    return lws_callback_http_dummy(wsi, reason, user, in, len);
}

/* protocols[0] serves HTTP and websockets without a subprotocol (legacy);
   a client offering v1 gets protocols[1]. */
static const struct lws_protocols s_protocols[] = {
    {"http", s_callback, sizeof(srv_pss_t), 0, 0, NULL, 0},
    {KORCH_WS_V1_PROTOCOL, s_callback, sizeof(srv_pss_t), 0, 0, NULL, 0},
    {NULL, NULL, 0, 0, 0, NULL, 0},
};

static void s_lws_log(int level, const char *line)
{
    size_t n = strlen(line);
    while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
        n--;
    /* korch_log escapes what lws quotes from clients */
    korch_log(level == LLL_ERR ? KORCH_LOG_ERROR : level == LLL_WARN ? KORCH_LOG_WARN : KORCH_LOG_DEBUG,
              "lws: %.*s", (int)n, line);
}

/* ---------------------------------------------------------------- public */

korch_server_t *korch_server_new(korch_loop_t *loop, const korch_server_opts_t *opts, korch_err_t *err)
{
    korch_server_t *s = calloc(1, sizeof *s);
    if (!s) {
        korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        return NULL;
    }
    s->loop = loop;
    s->uv_timer = s->kick_timer = -1;
    s->uv_fd = -1;
    s->spool_fd = -1;
    korch_server_opts_t o = opts ? *opts : (korch_server_opts_t){0};
    korch_cidr_t proxies[SRV_MAX_TRUSTED_PROXIES];
    size_t nproxies = 0;
    for (; o.trusted_proxies && o.trusted_proxies[nproxies]; nproxies++)
        if (nproxies == SRV_MAX_TRUSTED_PROXIES) {
            korch_err_set(err, KORCH_E_INVALID, "more than %d trusted proxies (give address blocks: 10.0.0.0/8)",
                          SRV_MAX_TRUSTED_PROXIES);
            goto fail;
        } else if (korch_cidr_parse(o.trusted_proxies[nproxies], &proxies[nproxies], err) != KORCH_OK)
            goto fail;
    o.trusted_proxies = NULL; /* the caller's strings; conns keeps the blocks */
    snprintf(s->ip, sizeof s->ip, "%s", o.ip ? o.ip : "127.0.0.1");
    snprintf(s->kernel, sizeof s->kernel, "%s", o.kernel ? o.kernel : "python3");
    if (o.token)
        snprintf(s->token, sizeof s->token, "%s", o.token);
    else if (!o.users_file) {
        unsigned char raw[24];
        if (RAND_bytes(raw, sizeof raw) != 1) {
            korch_err_set(err, KORCH_E_IO, "cannot generate a token (openssl RAND_bytes failed)");
            goto fail;
        }
        for (size_t i = 0; i < sizeof raw; i++)
            snprintf(s->token + 2 * i, 3, "%02x", raw[i]);
    }
    size_t norig = 0;
    while (o.allow_origins && o.allow_origins[norig])
        norig++;
    s->origins = calloc(norig + 1, sizeof *s->origins);
    for (size_t i = 0; s->origins && i < norig; i++)
        s->origins[i] = strdup(o.allow_origins[i]);
    o.ip = s->ip;
    o.kernel = s->kernel;
    o.token = s->token;
    o.allow_origins = (const char *const *)s->origins;
    if (!o.max_body)
        o.max_body = 1 << 20;
    if (!o.max_upload)
        o.max_upload = 64u << 20;
    if (!o.max_ws_message)
        o.max_ws_message = 64u << 20;
    if (!o.max_ws_queue)
        o.max_ws_queue = 64u << 20;
    if (!o.max_replay_bytes)
        o.max_replay_bytes = 16u << 20;
    if (o.kernel_start_timeout_ms <= 0)
        o.kernel_start_timeout_ms = 60000;
    if (!o.max_body_total)
        o.max_body_total = 64u << 20;
    if (!o.max_upload_total)
        o.max_upload_total = (size_t)1 << 30;
    if (o.header_timeout_ms <= 0)
        o.header_timeout_ms = 5000;
    if (o.max_connections_per_peer <= 0)
        o.max_connections_per_peer = 256;
    /* connections need file descriptors: take the hard limit, keep half
       for kernels (each has its sockets and pipes) */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    int fd_room = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < 1u << 20
                      ? (int)(rl.rlim_cur / 2)
                      : 1 << 19;
    if (o.max_connections <= 0)
        o.max_connections = 1024;
    if (o.max_connections > fd_room)
        o.max_connections = fd_room;
    s->opts = o;
    s->http = (srv_http_t){.kick = s_kick_cb, .kick_arg = s, .metrics = &s->metrics,
                           .no_access_log = o.no_access_log, .max_ws_queue = o.max_ws_queue,
                           .max_ws_message = o.max_ws_message};
    s->body_mem = (srv_budget_t){0, o.max_body_total, "--max-body-total"};
    s->body_disk = (srv_budget_t){0, o.max_upload_total, "--max-upload-total"};
    korch_iso8601_now(s->started);
    srv_touch(s);
    s->parts = (srv_parts_t){.opts = &s->opts, .loop = loop, .metrics = &s->metrics, .started = s->started,
                             .last_activity = s->last_activity};
    /* who asks (ident.h): the users file's tokens, then the single token
       (or, with neither, nobody is asked: open) */
    if (!(s->parts.ident = srv_ident_new())) {
        korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        goto fail;
    }
    if (o.users_file) {
        if (!(s->parts.users = srv_users_new(o.users_file, err)) ||
            srv_ident_add(s->parts.ident, &srv_users_resolver, s->parts.users, err) != KORCH_OK)
            goto fail;
    }
    if (*s->token ? srv_ident_add_token(s->parts.ident, s->token, err) != KORCH_OK
                  : !o.users_file && srv_ident_add_open(s->parts.ident, err) != KORCH_OK)
        goto fail;
    if (!(s->parts.quota = srv_quota_new(&s->opts))) {
        korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        goto fail;
    }
    if (o.audit_file && !(s->parts.audit = srv_audit_new(o.audit_file, o.audit_code, err)))
        goto fail;
    if (o.hub_api_url) { /* last: any token the others do not know is asked of the Hub */
        srv_hub_opts_t ho = {.api_url = o.hub_api_url, .service_name = o.hub_service_name,
                             .admin_group = o.hub_admin_group, .cache_s = o.hub_cache_s,
                             .login_url = o.hub_login_url};
        srv_hub_opts_from_env(&ho);
        if (!(s->parts.hub = srv_hub_new(loop, &ho, err)) ||
            srv_ident_add(s->parts.ident, &srv_hub_resolver, s->parts.hub, err) != KORCH_OK)
            goto fail;
    }
    /* the kernel manager first, then those who listen to it */
    s->parts.kmgr = srv_kmgr_new(&(srv_kmgr_opts_t){.loop = loop, .launcher = o.launcher,
                                              .start_timeout_ms = o.kernel_start_timeout_ms},
                           err);
    if (!s->parts.kmgr)
        goto fail;
    s->parts.relay = srv_relay_new(s->parts.kmgr, &(srv_relay_opts_t){.loop = loop, .max_replay_bytes = o.max_replay_bytes,
                                                          .metrics = &s->metrics, .audit = s->parts.audit});
    srv_metrics_listen(&s->metrics, s->parts.kmgr);
    s->parts.api = s->parts.relay ? srv_api_new(s) : NULL;
    s->parts.agents = s->parts.api ? srv_agents_new(s) : NULL;
    s->parts.mcps = s->parts.agents ? srv_mcps_new(s) : NULL;
    if (!s->origins || !s->parts.mcps) {
        korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        goto fail;
    }
    srv_agents_load(s->parts.agents);

    if (uv_loop_init(&s->uv) != 0) {
        korch_err_set(err, KORCH_E_IO, "cannot create the libuv loop");
        goto fail;
    }
    s->uv_ok = true;
    int lvl = LLL_ERR | (korch_log_level <= KORCH_LOG_WARN ? LLL_WARN : 0) |
              (korch_log_level <= KORCH_LOG_DEBUG ? LLL_NOTICE : 0);
    lws_set_log_level(lvl, s_lws_log);
    void *foreign[1] = {&s->uv};
    struct lws_context_creation_info info;
    memset(&info, 0, sizeof info);
    info.port = o.port;
    info.iface = s->ip;
    info.protocols = s_protocols;
    info.user = s;
    info.foreign_loops = foreign;
    info.options = LWS_SERVER_OPTION_LIBUV;
    if (!strchr(s->ip, ':'))
        info.options |= LWS_SERVER_OPTION_DISABLE_IPV6;
    info.max_http_header_data = 16384; /* browsers' cookies */
    /* Header tables: one per connection still sending its headers (at most
       CONN_PENDING, conns.c) plus the requests in progress, so a new
       connection never queues for one (16 KiB each, when in use). */
    info.max_http_header_pool = CONN_PENDING + 192;
    info.timeout_secs = 30;
    info.pt_serv_buf_size = 64 * 1024;
    info.ka_time = 60, info.ka_probes = 3, info.ka_interval = 10;
    s->ctx = lws_create_context(&info);
    if (!s->ctx) {
        korch_err_set(err, KORCH_E_IO, "cannot listen on %s:%d (in use, or not an address of this host?)", s->ip,
                      o.port);
        goto fail;
    }
    /* with a foreign (libuv) loop the context is made even when the listen
       socket is not: its vhost is missing then */
    struct lws_vhost *vh = lws_get_vhost_by_name(s->ctx, "default");
    s->port = vh ? lws_get_vhost_listen_port(vh) : -1;
    if (s->port <= 0) {
        korch_err_set(err, KORCH_E_IO, "cannot listen on %s:%d (in use, or not an address of this host?)", s->ip,
                      o.port);
        /* a context without its vhost cannot be taken down on the libuv
           loop (its handles call into lws's unloaded event-lib plugin):
           left to the exit that follows */
        s->ctx = NULL;
        s->uv_ok = false;
        goto fail;
    }
    srv_conns_limits_t lim = {.max_connections = o.max_connections,
                              .max_per_peer = o.max_connections_per_peer,
                              .max_pending = CONN_PENDING,
                              .max_pending_per_peer = CONN_PENDING_PER_PEER,
                              .header_timeout_ms = o.header_timeout_ms,
                              .trusted_proxies = proxies,
                              .ntrusted_proxies = nproxies};
    if (!(s->parts.conns = srv_conns_new(loop, &s->metrics, s_kick_cb, s, &lim))) {
        korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        goto fail;
    }
    s->uv_fd = uv_backend_fd(&s->uv);
    if (s->uv_fd < 0 || korch_loop_poller(loop, s->uv_fd, s_on_uv_fd, s) != 0) {
        korch_err_set(err, KORCH_E_IO, "cannot poll the libuv loop");
        goto fail;
    }
    if (srv_pool_new(s->parts.kmgr, loop, &s->opts, &s->parts.pool, err) != KORCH_OK ||
        srv_cull_new(s->parts.kmgr, loop, &s->opts, &s->parts.cull, err) != KORCH_OK)
        goto fail;
    if (o.adopt) /* listed now, ready once each handshake is done on the loop */
        srv_kmgr_adopt_mine(s->parts.kmgr);
    s_uv_service(s);
    srv_trace_open();
    return s;
fail:
    korch_server_destroy(&s);
    return NULL;
}

void korch_server_run(korch_server_t *s, bool (*quit)(void *arg), void *arg)
{
    /* nothing is deferred to between rounds any more: kernels are released
       from a timer, and their teardown never runs the loop (kmgr.h) */
    while (!(quit && quit(arg)))
        korch_loop_run(s->loop, quit, arg, -1);
}

void korch_server_destroy(korch_server_t **ps)
{
    if (!ps || !*ps)
        return;
    korch_server_t *s = *ps;
    *ps = NULL;
    s->closing = true;
    srv_cull_destroy(&s->parts.cull);
    srv_pool_destroy(&s->parts.pool); /* its kernels are shut down with the others */
    srv_agents_destroy(&s->parts.agents); /* before their kernels */
    srv_mcps_destroy(&s->parts.mcps);
    if (s->parts.kmgr)
        srv_kmgr_delete_all(s->parts.kmgr); /* the relay and api hear of it */
    struct lws_context *ctx = s->ctx;
    s->ctx = NULL;
    /* lws 4.1 closes its cancel pipe twice: its closes held (korch/closeguard.h) */
    korch_close_hold();
    if (ctx)
        lws_context_destroy(ctx);
    korch_close_second();
    if (s->uv_fd >= 0)
        korch_loop_poller_end(s->loop, s->uv_fd);
    if (s->uv_timer >= 0)
        korch_loop_timer_end(s->loop, s->uv_timer);
    if (s->kick_timer >= 0)
        korch_loop_timer_end(s->loop, s->kick_timer);
    if (s->uv_ok) {
        /* let lws's handles close, then the loop */
        for (int i = 0; i < 100 && uv_run(&s->uv, UV_RUN_NOWAIT); i++)
            ;
        /* with a foreign loop, lws finishes destroying the context only
           once its handles have closed: the second call does that */
        if (ctx)
            lws_context_destroy(ctx);
        if (uv_loop_close(&s->uv) != 0)
            korch_debug("libuv loop still had handles at exit");
    }
    korch_close_release();
    srv_conns_destroy(&s->parts.conns); /* after lws: its connections are gone */
    if (s->spool_fd >= 0)
        close(s->spool_fd);
    srv_kmgr_destroy(&s->parts.kmgr);
    srv_api_destroy(&s->parts.api);
    srv_relay_destroy(&s->parts.relay);
    srv_ident_destroy(&s->parts.ident); /* and the users file's resolver */
    srv_quota_destroy(&s->parts.quota);
    srv_audit_destroy(&s->parts.audit);
    srv_trace_close();
    for (char **o = s->origins; o && *o; o++)
        free(*o);
    free(s->origins);
    free(s->http.ws_scratch);
    free(s);
}
