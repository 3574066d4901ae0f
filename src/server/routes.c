/*  The route table and its matcher (see routes.h).
 *
 *  The table is compiled once into a trie of segments: a node per literal,
 *  parameter or tail segment of the patterns, and at the node where a
 *  pattern ends, its routes by method. A request path is split into its
 *  segments once and walked down the trie, literals first, with
 *  backtracking; no string is compared more than once per node. The
 *  summaries are the OpenAPI document's (tests/peers/openapi_check.py
 *  checks both ways that the table and src/server/openapi.yaml agree:
 *  every route documented, every documented operation routed, the same
 *  summary and the same authentication).
 */
#include "server_int.h"
#include "metrics.h"
#include "hub.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ----------------------------------------------------- handlers of others */

static void s_metrics(korch_server_t *s, srv_req_t *req, const srv_params_t *p, json_t *body)
{
    srv_metrics_respond(s, req);
}

static void s_resource(korch_server_t *s, srv_req_t *req, const srv_params_t *p, json_t *body)
{
    srv_kernelspec_resource(s, req, srv_param(p, "kernel_name"), srv_param(p, "file"));
}

static void s_web(korch_server_t *s, srv_req_t *req, const srv_params_t *p, json_t *body)
{
    if (srv_hub_page_login(s, req)) /* no user, the Hub's OAuth on: its login first */
        return;
    if (!srv_web_serve(req)) /* "/static//korch.js": not its exact path */
        srv_respond_error(req, 404, "not found");
}

/* ------------------------------------------------------------------ table */

#define TOKEN SRV_AUTH_TOKEN
#define OPEN SRV_AUTH_NONE
#define NONE SRV_BODY_NONE
#define JSON SRV_BODY_JSON
#define UPLOAD SRV_BODY_UPLOAD

static const srv_route_t s_table[] = {
    /* the web app (web.c): no secret in it, so open */
    {"GET", "/", s_web, OPEN, NONE, false, "The web app's page"},
    {"GET", "/static/korch.js", s_web, OPEN, NONE, false, "The web app's script"},
    {"GET", "/static/korch.css", s_web, OPEN, NONE, false, "The web app's style sheet"},
    /* the Jupyter Server kernel API (api.c, resources.c) */
    {"GET", "/api", srv_api_version, OPEN, NONE, false,
     "The server's version (open, as in jupyter_server; clients probe it)"},
    {"GET", "/api/status", srv_api_status, TOKEN, NONE, false, "Activity of the server"},
    {"GET", "/api/me", srv_api_me, TOKEN, NONE, false,
     "Who the token is: name, role, quotas and what they use (korch's; docs/team.md)"},
    {"GET", "/api/kernelspecs", srv_api_kernelspecs, TOKEN, NONE, false, "The kernelspecs korch can start"},
    {"GET", "/api/kernelspecs/{kernel_name}", srv_api_kernelspec, TOKEN, NONE, false, "One kernelspec"},
    {"GET", "/kernelspecs/{kernel_name}/{file}", s_resource, TOKEN, NONE, false,
     "A kernelspec's logo, kernel.js or kernel.css"},
    {"GET", "/api/kernels", srv_api_kernels_list, TOKEN, NONE, false,
     "The running kernels (warm pool kernels are not listed until handed out)"},
    {"POST", "/api/kernels", srv_api_kernels_start, TOKEN, JSON, false, "Start a kernel"},
    {"GET", "/api/kernels/{kernel_id}", srv_api_kernel_get, TOKEN, NONE, false, "One kernel"},
    {"DELETE", "/api/kernels/{kernel_id}", srv_api_kernel_delete, TOKEN, NONE, false, "Shut a kernel down"},
    {"POST", "/api/kernels/{kernel_id}/interrupt", srv_api_kernel_interrupt, TOKEN, JSON, false,
     "Interrupt a kernel (by signal or interrupt_request, as its kernelspec says)"},
    {"POST", "/api/kernels/{kernel_id}/restart", srv_api_kernel_restart, TOKEN, JSON, false, "Restart a kernel"},
    {"GET", "/api/kernels/{kernel_id}/channels", srv_api_kernel_channels, TOKEN, NONE, true,
     "The kernel's channels over a websocket"},
    {"POST", "/api/kernels/{kernel_id}/untrusted", srv_api_kernel_untrust, TOKEN, JSON, false,
     "Make a kernel's outputs untrusted: nothing it shows may run script in a client, until it restarts"},
    {"DELETE", "/api/kernels/{kernel_id}/untrusted", srv_api_kernel_trust, TOKEN, NONE, false,
     "Trust a kernel's outputs again (the owner's deliberate choice)"},
    {"GET", "/api/sessions", srv_api_sessions_list, TOKEN, NONE, false,
     "The sessions (a notebook or console path bound to a kernel)"},
    {"POST", "/api/sessions", srv_api_sessions_create, TOKEN, JSON, false,
     "Create a session, starting a kernel unless kernel.id names one"},
    {"GET", "/api/sessions/{session_id}", srv_api_session_get, TOKEN, NONE, false, "One session"},
    {"PATCH", "/api/sessions/{session_id}", srv_api_session_patch, TOKEN, JSON, false,
     "Rename a session or move it to another kernel"},
    {"DELETE", "/api/sessions/{session_id}", srv_api_session_delete, TOKEN, NONE, false,
     "Delete a session and shut its kernel down"},
    /* Prometheus (metrics.c) */
    {"GET", "/metrics", s_metrics, TOKEN, NONE, false, "Prometheus metrics (text exposition format 0.0.4)"},
    /* the agent API (agents.c) */
    {"GET", "/api/agent/sessions", srv_agent_list, TOKEN, NONE, false,
     "The agent sessions (also those a previous server left in --agent-dir)"},
    {"POST", "/api/agent/sessions", srv_agent_create, TOKEN, JSON, false, "Create an agent session"},
    {"GET", "/api/agent/sessions/{session_id}", srv_agent_get, TOKEN, NONE, false,
     "One agent session, with its transcript"},
    {"DELETE", "/api/agent/sessions/{session_id}", srv_agent_delete, TOKEN, NONE, false,
     "Delete an agent session (and its kernel, when the session started it)"},
    {"POST", "/api/agent/sessions/{session_id}/messages", srv_agent_message, TOKEN, JSON, false,
     "One turn of the conversation, streamed as server-sent events"},
    {"POST", "/api/agent/sessions/{session_id}/branch", srv_agent_branch, TOKEN, JSON, false,
     "A new session from one of this one's steps, with a question (and another model), streamed as a turn"},
    {"POST", "/api/agent/sessions/{session_id}/interrupt", srv_agent_interrupt, TOKEN, NONE, false,
     "Cancel the running step (the session and its kernel stay)"},
    {"GET", "/api/agent/sessions/{session_id}/notebook", srv_agent_notebook, TOKEN, NONE, false,
     "The session as a notebook (nbformat 4.5)"},
    {"GET", "/api/agent/sessions/{session_id}/events", srv_agent_events, TOKEN, NONE, false,
     "Follow the running turn (server-sent events, replayed from the start)"},
    {"GET", "/api/agent/sessions/{session_id}/files", srv_agent_files, TOKEN, NONE, false,
     "The files in the session's work dir (uploads and what the code wrote)"},
    {"PUT", "/api/agent/sessions/{session_id}/files/{path*}", srv_agent_file_put, TOKEN, UPLOAD, false,
     "Upload a file into the kernel's work dir"},
    {"GET", "/api/agent/sessions/{session_id}/files/{path*}", srv_agent_file_get, TOKEN, NONE, false,
     "Download a file from the kernel's work dir"},
    {"DELETE", "/api/agent/sessions/{session_id}/files/{path*}", srv_agent_file_delete, TOKEN, NONE, false,
     "Remove a file from the kernel's work dir"},
    {"GET", "/api/agent/sessions/{session_id}/figures/{name}", srv_agent_figure, TOKEN, NONE, false,
     "A chart of the session (displayed by the kernel, or an image file the code saved)"},
    {"POST", "/api/agent/sessions/{session_id}/verify", srv_agent_verify, TOKEN, NONE, false,
     "Verify the last answer in a fresh kernel (the clean notebook re-run)"},
    /* the MCP server (mcp_http.c): Streamable HTTP, JSON answers; GET is 405 (no server-initiated stream) */
    {"POST", "/mcp", srv_mcp_post, TOKEN, NONE, false,
     "One MCP (JSON-RPC) message: initialize makes a session (Mcp-Session-Id), tools/call runs the tools"},
    {"DELETE", "/mcp", srv_mcp_delete, TOKEN, NONE, false, "End the MCP session its Mcp-Session-Id names (and its kernel)"},
    /* korch's page logs in through JupyterHub's OAuth (hub_oauth.c): open, as a login is */
    {"GET", "/hub/login", srv_hub_login, OPEN, NONE, false, "Log in through JupyterHub (a redirect to its OAuth)"},
    {"GET", "/oauth_callback", srv_hub_callback, OPEN, NONE, false,
     "JupyterHub's OAuth redirect back: the code for a login cookie"},
};

#undef TOKEN
#undef OPEN
#undef NONE
#undef JSON
#undef UPLOAD

#define NROUTES (sizeof s_table / sizeof s_table[0])
_Static_assert(NROUTES < 128, "s_node_t.route holds a route's index in a signed char");

const srv_route_t *srv_routes(size_t *n)
{
    *n = NROUTES;
    return s_table;
}

/* ------------------------------------------------------------------ trie */

enum { M_GET, M_POST, M_PUT, M_PATCH, M_DELETE, M__COUNT };
static const char *const s_methods[M__COUNT] = {"GET", "POST", "PUT", "PATCH", "DELETE"};

typedef enum { SEG_LIT, SEG_PARAM, SEG_TAIL } s_seg_kind_t;

typedef struct {
    s_seg_kind_t kind;
    char text[48];                  /* the literal, or the parameter's name */
    size_t len;
    int child, sibling;             /* first child, next sibling: node indices, -1 none */
    signed char route[M__COUNT];    /* a route by method ending here, -1 none */
    bool ends;                      /* some pattern ends here */
} s_node_t;

#define MAX_NODES 96

static s_node_t s_nodes[MAX_NODES];
static int s_nnodes;
static pthread_once_t s_once = PTHREAD_ONCE_INIT;
static bool s_broken;               /* the table does not compile: a programmer's error, asserted in tests */

static int s_method_index(const char *m)
{
    switch (m[0]) {
    case 'G': return strcmp(m, "GET") == 0 ? M_GET : -1;
    case 'P':
        return strcmp(m, "POST") == 0 ? M_POST : strcmp(m, "PUT") == 0 ? M_PUT : strcmp(m, "PATCH") == 0 ? M_PATCH : -1;
    case 'D': return strcmp(m, "DELETE") == 0 ? M_DELETE : -1;
    default: return -1;
    }
}

static int s_node_new(s_seg_kind_t kind, const char *text, size_t len)
{
    if (s_nnodes == MAX_NODES || len >= sizeof s_nodes[0].text)
        return -1;
    s_node_t *n = &s_nodes[s_nnodes];
    memset(n, 0, sizeof *n);
    n->kind = kind;
    memcpy(n->text, text, len);
    n->len = len;
    n->child = n->sibling = -1;
    memset(n->route, -1, sizeof n->route);
    return s_nnodes++;
}

/* The child of parent for this segment, made when there is none. Literals
   go before parameters among siblings, so the walk tries them first. */
static int s_child(int parent, s_seg_kind_t kind, const char *text, size_t len)
{
    int *link = &s_nodes[parent].child;
    for (int i = *link; i >= 0; i = s_nodes[i].sibling)
        if (s_nodes[i].kind == kind && s_nodes[i].len == len && memcmp(s_nodes[i].text, text, len) == 0)
            return i;
    int i = s_node_new(kind, text, len);
    if (i < 0)
        return -1;
    if (kind == SEG_LIT)
        while (*link >= 0 && s_nodes[*link].kind == SEG_LIT)
            link = &s_nodes[*link].sibling;
    else
        while (*link >= 0)
            link = &s_nodes[*link].sibling;
    s_nodes[i].sibling = *link;
    *link = i;
    return i;
}

static void s_compile(void)
{
    s_nnodes = 0;
    int root = s_node_new(SEG_LIT, "", 0);
    for (size_t r = 0; r < NROUTES && !s_broken; r++) {
        const char *p = s_table[r].pattern;
        int node = root, m = s_method_index(s_table[r].method);
        if (p[0] != '/' || m < 0) {
            s_broken = true;
            break;
        }
        while (*p && node >= 0) {
            while (*p == '/')
                p++;
            size_t len = strcspn(p, "/");
            if (!len)
                break;
            if (s_nodes[node].kind == SEG_TAIL) { /* a tail is last */
                node = -1;
                break;
            }
            if (p[0] == '{' && p[len - 1] == '}') {
                bool tail = len > 3 && p[len - 2] == '*';
                node = s_child(node, tail ? SEG_TAIL : SEG_PARAM, p + 1, len - (tail ? 3 : 2));
            } else
                node = s_child(node, SEG_LIT, p, len);
            p += len;
        }
        if (node < 0 || s_nodes[node].route[m] >= 0) { /* too big, or a route twice */
            s_broken = true;
            break;
        }
        s_nodes[node].route[m] = (signed char)r;
        s_nodes[node].ends = true;
    }
}

/* ------------------------------------------------------------------ match */

typedef struct {
    const char *seg[SRV_ROUTE_MAX_SEGS];
    size_t len[SRV_ROUTE_MAX_SEGS];
    int n;
    int bind[SRV_ROUTE_MAX_PARAMS];     /* node of each parameter bound on the way */
    int bind_seg[SRV_ROUTE_MAX_PARAMS]; /* its first segment */
    int nbind;
} s_walk_t;

/* The node where a pattern matching segments i.. from node ends, or -1. */
static int s_walk(s_walk_t *w, int node, int i)
{
    if (i == w->n)
        return s_nodes[node].ends ? node : -1;
    for (int c = s_nodes[node].child; c >= 0; c = s_nodes[c].sibling) {
        const s_node_t *n = &s_nodes[c];
        if (n->kind == SEG_LIT) {
            if (n->len != w->len[i] || memcmp(n->text, w->seg[i], n->len) != 0)
                continue;
            int end = s_walk(w, c, i + 1);
            if (end >= 0)
                return end;
            continue;
        }
        if (w->nbind == SRV_ROUTE_MAX_PARAMS)
            continue;
        w->bind[w->nbind] = c;
        w->bind_seg[w->nbind] = i;
        w->nbind++;
        if (n->kind == SEG_TAIL) {
            if (n->ends)
                return c;
        } else {
            int end = s_walk(w, c, i + 1);
            if (end >= 0)
                return end;
        }
        w->nbind--;
    }
    return -1;
}

static bool s_dot(const char *s, size_t len) { return (len == 1 && s[0] == '.') || (len == 2 && s[0] == '.' && s[1] == '.'); }

/* The methods of node, "GET, POST", into allow. */
static void s_allow(const s_node_t *n, char *allow, size_t len)
{
    size_t off = 0;
    allow[0] = 0;
    for (int m = 0; m < M__COUNT; m++)
        if (n->route[m] >= 0) {
            int w = snprintf(allow + off, len - off, "%s%s", off ? ", " : "", s_methods[m]);
            if (w < 0 || (size_t)w >= len - off) {
                allow[off] = 0; /* the methods that fit, never half of one */
                return;
            }
            off += (size_t)w;
        }
}

srv_match_t srv_route_match(const char *method, const char *path, size_t len, const srv_route_t **route,
                            srv_params_t *params, char *allow, size_t allow_len)
{
    pthread_once(&s_once, s_compile);
    if (route)
        *route = NULL;
    if (allow && allow_len)
        allow[0] = 0;
    if (s_broken)
        return SRV_MATCH_NOT_FOUND;
    if (len >= SRV_ROUTE_MAX_PATH)
        return SRV_MATCH_TOO_LONG;
    if (memchr(path, 0, len))
        return SRV_MATCH_BAD_PATH;
    s_walk_t w;
    w.n = w.nbind = 0;
    for (size_t i = 0; i < len;) {
        while (i < len && path[i] == '/')
            i++;
        size_t j = i;
        while (j < len && path[j] != '/')
            j++;
        if (j == i)
            break;
        if (w.n == SRV_ROUTE_MAX_SEGS)
            return SRV_MATCH_TOO_LONG;
        w.seg[w.n] = path + i;
        w.len[w.n++] = j - i;
        i = j;
    }
    int end = s_walk(&w, 0, 0);
    if (end < 0)
        return SRV_MATCH_NOT_FOUND;
    const s_node_t *n = &s_nodes[end];
    int m = s_method_index(method);
    if (m < 0 || n->route[m] < 0) {
        if (allow && allow_len)
            s_allow(n, allow, allow_len);
        return SRV_MATCH_METHOD;
    }
    /* bind the parameters: a tail takes the rest, joined with '/' */
    size_t off = 0;
    if (params)
        params->n = 0;
    for (int b = 0; b < w.nbind; b++) {
        const s_node_t *pn = &s_nodes[w.bind[b]];
        int from = w.bind_seg[b], to = pn->kind == SEG_TAIL ? w.n : from + 1;
        if (pn->kind == SEG_TAIL)
            for (int i = from; i < to; i++)
                if (s_dot(w.seg[i], w.len[i]))
                    return SRV_MATCH_BAD_PATH;
        if (!params)
            continue;
        params->name[b] = pn->text;
        params->value[b] = params->buf + off;
        for (int i = from; i < to; i++) {
            if (i > from)
                params->buf[off++] = '/';
            memcpy(params->buf + off, w.seg[i], w.len[i]); /* fits: no more than the path */
            off += w.len[i];
        }
        params->buf[off++] = 0;
        params->n = b + 1;
    }
    if (route)
        *route = &s_table[n->route[m]];
    return SRV_MATCH_OK;
}

json_t *srv_routes_json(void)
{
    json_t *list = json_array();
    for (size_t i = 0; list && i < NROUTES; i++) {
        const srv_route_t *r = &s_table[i];
        char path[256];
        size_t o = 0;
        for (const char *c = r->pattern; *c && o + 1 < sizeof path; c++)
            if (!(*c == '*' && c[1] == '}'))
                path[o++] = *c;
        path[o] = 0;
        static const char *const bodies[] = {"none", "json", "upload"};
        json_array_append_new(list, json_pack("{s:s, s:s, s:s, s:s, s:s, s:b}", "method", r->method, "path", path,
                                              "summary", r->summary, "auth", r->auth == SRV_AUTH_NONE ? "none" : "token",
                                              "body", bodies[r->body], "websocket", r->websocket));
    }
    return list;
}
