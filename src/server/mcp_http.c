/*  MCP's Streamable HTTP transport at /mcp (mcp_int.h), behind korch's
 *  token like every route but the open ones (front.c checks it before a
 *  handler runs: "Authorization: token T", "Bearer T" or ?token=T).
 *
 *  From the spec (basic/transports, 2025-11-25):
 *
 *    "Every JSON-RPC message sent from the client MUST be a new HTTP POST
 *     request to the MCP endpoint."  "If the input is a JSON-RPC response
 *     or notification: If the server accepts the input, the server MUST
 *     return HTTP status code 202 Accepted with no body."  "If the input
 *     is a JSON-RPC request, the server MUST either return Content-Type:
 *     text/event-stream ... or Content-Type: application/json, to return
 *     one JSON object."  korch answers JSON.
 *
 *    "A server using the Streamable HTTP transport MAY assign a session ID
 *     at initialization time, by including it in an MCP-Session-Id header
 *     on the HTTP response containing the InitializeResult."  "Servers that
 *     require a session ID SHOULD respond to requests without an
 *     MCP-Session-Id header (other than initialization) with HTTP 400 Bad
 *     Request."  "The server MAY terminate the session at any time, after
 *     which it MUST respond to requests containing that session ID with
 *     HTTP 404 Not Found."  A DELETE with the header ends it.
 *
 *    GET (a stream for server-initiated messages): "the server MUST either
 *     return Content-Type: text/event-stream ... or else return HTTP 405
 *     Method Not Allowed": korch has nothing to say unasked, so the route
 *     table has no GET for /mcp and the router answers 405 with Allow.
 *
 *  Each session has its own kernel (mcp_tools.c), listed in /api/kernels
 *  like any other and untrusted from its start (taint.h): a notebook
 *  watching it sees its executions, never script from it. Sessions are
 *  bounded (MAX_SESSIONS) and end after IDLE_MS without a request.
 */
#include "mcp_int.h"
#include "ident.h"
#include "relay.h"
#include "korch/log.h"
#include "korch/uuid.h"

#include <errno.h>
#include <libwebsockets.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_SESSIONS 128
#define IDLE_MS (24LL * 3600 * 1000)
#define SWEEP_MS 60000

typedef struct s_sess s_sess_t;

/* A POST waiting for its answer. */
typedef struct {
    s_sess_t *sess;
    srv_req_t *req;
    srv_mcp_call_t *call;
    bool initialize;            /* hands out the session id */
} s_post_t;

struct s_sess {
    srv_mcp_t *m;
    char id[40];
    char owner[64];             /* who made it (ident.h): only they (and admins) reach it */
    int64_t last_ms;
    zlistx_t *posts;            /* s_post_t* (owned) */
};

struct srv_mcps {
    korch_server_t *srv;
    zhashx_t *all;              /* id -> s_sess_t* (owned) */
    int sweep;                  /* timer */
};

static srv_mcps_t *s_part(korch_server_t *s) { return srv_parts(s)->mcps; }

/* ------------------------------------------------------------ sessions */

static void s_post_free(s_post_t **pp)
{
    free(*pp);
    *pp = NULL;
}

static void s_sess_free(s_sess_t **ps)
{
    s_sess_t *x = *ps;
    if (!x)
        return;
    *ps = NULL;
    s_post_t *p;
    while (x->posts && (p = zlistx_detach(x->posts, NULL))) {
        srv_mcp_call_cancel(&p->call);
        srv_respond_error(p->req, 404, "the MCP session ended (deleted or expired): initialize a new one");
        s_post_free(&p);
    }
    zlistx_destroy(&x->posts);
    srv_mcp_destroy(&x->m);
    free(x);
}

static void s_sess_destructor(void **item) { s_sess_free((s_sess_t **)item); }

static void s_on_kernel(srv_kernel_t *mk, const char *session_id, void *arg)
{
    char why[96];
    snprintf(why, sizeof why, "MCP session %.40s runs a model's code in it", session_id);
    srv_kernel_taint(mk, why);
}

static s_sess_t *s_sess_new(korch_server_t *s, const char *id, const char *owner)
{
    const srv_parts_t *p = srv_parts(s);
    const korch_server_opts_t *o = p->opts;
    s_sess_t *x = calloc(1, sizeof *x);
    if (!x)
        return NULL;
    snprintf(x->id, sizeof x->id, "%s", id);
    snprintf(x->owner, sizeof x->owner, "%s", owner);
    x->last_ms = korch_now_ms();
    x->posts = zlistx_new();
    /* a local kernel works in a directory of the session's own, not in
       korch serve's; a confined one in its launcher's work dir */
    char dir[PATH_MAX] = "";
    bool confined = o->launcher && (korch_launcher_caps(o->launcher) & KORCH_LAUNCHER_CONFINED);
    if (!confined) {
        const char *base = o->agent_dir ? o->agent_dir : "korch-sessions";
        char parent[PATH_MAX];
        korch_err_t err = {0};
        if (korch_path_join(parent, sizeof parent, base, "mcp", &err) != KORCH_OK ||
            korch_path_join(dir, sizeof dir, parent, id, &err) != KORCH_OK)
            dir[0] = 0;
        else {
            (void)mkdir(base, 0700);
            (void)mkdir(parent, 0700);
            if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
                korch_warn("mcp: cannot create '%s': %s (the kernel works in korch's directory)", dir,
                           strerror(errno));
                dir[0] = 0;
            }
        }
    }
    srv_mcp_opts_t mo = {.loop = p->loop,
                         .kmgr = p->kmgr,
                         .pool = p->pool,
                         .kernel = o->kernel,
                         .cwd = *dir ? dir : NULL,
                         .owner = owner,
                         .max_kernels = o->max_kernels,
                         .max_upload = o->max_upload,
                         .on_kernel = s_on_kernel};
    x->m = x->posts ? srv_mcp_new(&mo, id) : NULL;
    if (!x->m) {
        zlistx_destroy(&x->posts);
        free(x);
        return NULL;
    }
    return x;
}

static int s_on_sweep(korch_loop_t *loop, int id, void *arg)
{
    srv_mcps_t *a = arg;
    int64_t now = korch_now_ms();
    zlistx_t *gone = zlistx_new();
    for (s_sess_t *x = zhashx_first(a->all); x && gone; x = zhashx_next(a->all))
        if (!zlistx_size(x->posts) && !srv_mcp_busy(x->m) && now - x->last_ms > IDLE_MS)
            zlistx_add_end(gone, x->id);
    for (char *sid = gone ? zlistx_first(gone) : NULL; sid; sid = zlistx_next(gone)) {
        korch_notice("mcp session %.8s ended: idle for a day", sid);
        zhashx_delete(a->all, sid);
    }
    zlistx_destroy(&gone);
    return 0;
}

srv_mcps_t *srv_mcps_new(korch_server_t *s)
{
    srv_mcps_t *a = calloc(1, sizeof *a);
    if (!a)
        return NULL;
    a->srv = s;
    a->all = zhashx_new();
    if (!a->all) {
        free(a);
        return NULL;
    }
    zhashx_set_destructor(a->all, s_sess_destructor);
    a->sweep = korch_loop_timer(srv_parts(s)->loop, SWEEP_MS, 0, s_on_sweep, a);
    return a;
}

void srv_mcps_destroy(srv_mcps_t **pa)
{
    srv_mcps_t *a = *pa;
    if (!a)
        return;
    *pa = NULL;
    if (a->sweep >= 0)
        korch_loop_timer_end(srv_parts(a->srv)->loop, a->sweep);
    zhashx_destroy(&a->all); /* their kernels are deleted with them */
    free(a);
}

size_t srv_mcps_count(srv_mcps_t *a) { return a ? zhashx_size(a->all) : 0; }

/* ------------------------------------------------------------ requests */

/* A JSON-RPC error as the whole answer of a POST (no session to speak for it). */
static void s_rpc_error(srv_req_t *req, int status, int code, const char *msg)
{
    /* "message" beside JSON-RPC's members: what korch's other routes' errors say */
    json_t *j = json_pack("{s:s, s:n, s:{s:i, s:s}, s:s}", "jsonrpc", "2.0", "id", "error", "code", code, "message",
                          msg, "message", msg);
    char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (text)
        srv_respond_raw(req, status, "application/json", text, strlen(text));
    else
        srv_respond_error(req, 503, "out of memory");
    free(text);
}

static void s_on_answer(const char *json, size_t len, void *arg)
{
    s_post_t *p = arg;
    s_sess_t *x = p->sess;
    void *h = zlistx_find(x->posts, p);
    if (h)
        zlistx_detach(x->posts, h);
    p->call = NULL;
    if (p->initialize && srv_mcp_initialized(x->m))
        srv_req_set_header(p->req, "mcp-session-id:", x->id);
    if (!json)
        srv_respond_raw(p->req, 202, "application/json", "", 0);
    else
        srv_respond_raw(p->req, 200, "application/json", json, len);
    x->last_ms = korch_now_ms();
    s_post_free(&p);
}

/* Is a header value one of the revisions korch speaks? */
static bool s_version_ok(const char *v)
{
    for (int i = 0; srv_mcp_versions[i]; i++)
        if (strcmp(v, srv_mcp_versions[i]) == 0)
            return true;
    return false;
}

void srv_mcp_post(korch_server_t *s, srv_req_t *req, const srv_params_t *params, json_t *body)
{
    srv_mcps_t *a = s_part(s);
    char ctype[128] = "", sid[64] = "", ver[40] = "";
    if (req->wsi && lws_hdr_copy(req->wsi, ctype, sizeof ctype, WSI_TOKEN_HTTP_CONTENT_TYPE) > 0 &&
        strncasecmp(ctype, "application/json", 16) != 0) {
        s_rpc_error(req, 415, -32700, "an MCP message is sent as Content-Type: application/json");
        return;
    }
    bool has_sid = srv_req_header(req, "mcp-session-id:", sid, sizeof sid);
    if (srv_req_header(req, "mcp-protocol-version:", ver, sizeof ver) && !s_version_ok(ver)) {
        char msg[160];
        snprintf(msg, sizeof msg, "Bad Request: unsupported MCP-Protocol-Version '%.40s' (korch speaks %s to 2024-11-05)",
                 ver, MCP_LATEST_VERSION);
        s_rpc_error(req, 400, -32600, msg);
        return;
    }
    /* a look at the message: initialize makes a session */
    json_t *msg = req->body_len ? json_loadb(req->body, req->body_len, 0, NULL) : NULL;
    const char *method = json_string_value(json_object_get(msg, "method"));
    bool initialize = method && strcmp(method, "initialize") == 0 && json_object_get(msg, "id");
    bool msg_array = json_is_array(msg), bad = !msg || msg_array;
    json_decref(msg);
    if (bad) {
        s_rpc_error(req, 400, msg_array ? -32600 : -32700,
                    msg_array ? "Invalid Request: JSON-RPC batches are not supported (MCP dropped them in 2025-06-18); "
                                "send one message at a time"
                              : "Parse error: the body is not one JSON-RPC message (JSON, UTF-8)");
        return;
    }
    s_sess_t *x = NULL;
    if (has_sid) {
        x = zhashx_lookup(a->all, sid);
        if (x && !srv_user_may(&req->user, x->owner))
            x = NULL; /* another user's: as if there were none (ids cannot be probed) */
        if (!x) {
            s_rpc_error(req, 404, -32001, "Session not found: it ended (deleted, expired or korch restarted); "
                                          "initialize a new one");
            return;
        }
    } else if (!initialize) {
        s_rpc_error(req, 400, -32600, "Bad Request: no Mcp-Session-Id header: send initialize first");
        return;
    } else {
        if (zhashx_size(a->all) >= MAX_SESSIONS) {
            char m[160];
            snprintf(m, sizeof m, "too many MCP sessions (at most %d): end one (DELETE /mcp) or wait", MAX_SESSIONS);
            s_rpc_error(req, 503, -32603, m);
            return;
        }
        char id[37];
        if (korch_uuid(id) != KORCH_OK || !(x = s_sess_new(s, id, req->user.name))) {
            s_rpc_error(req, 503, -32603, "cannot make an MCP session: out of memory");
            return;
        }
        zhashx_insert(a->all, x->id, x);
    }
    x->last_ms = korch_now_ms();
    s_post_t *p = calloc(1, sizeof *p);
    if (!p) {
        s_rpc_error(req, 503, -32603, "out of memory");
        return;
    }
    p->sess = x;
    p->req = req;
    p->initialize = initialize;
    srv_req_wait(req);
    zlistx_add_end(x->posts, p);
    srv_mcp_call_t *c = srv_mcp_handle(x->m, req->body, req->body_len, s_on_answer, p);
    if (c)
        p->call = c; /* p is still listed: its answer comes later */
    if (initialize && !srv_mcp_initialized(x->m) && !has_sid)
        zhashx_delete(a->all, x->id); /* initialize failed: no session */
}

void srv_mcp_delete(korch_server_t *s, srv_req_t *req, const srv_params_t *params, json_t *body)
{
    srv_mcps_t *a = s_part(s);
    char sid[64] = "";
    if (!srv_req_header(req, "mcp-session-id:", sid, sizeof sid)) {
        srv_respond_error(req, 400, "DELETE /mcp ends the session its Mcp-Session-Id header names: it has none");
        return;
    }
    s_sess_t *x = zhashx_lookup(a->all, sid);
    if (!x || !srv_user_may(&req->user, x->owner)) {
        srv_respond_error(req, 404, "no MCP session '%.40s' (it ended already)", sid);
        return;
    }
    korch_info("mcp session %.8s ended by its client", sid);
    zhashx_delete(a->all, sid); /* its kernel is shut down */
    srv_respond(req, 204, NULL);
}
