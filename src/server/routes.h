/*  The route table of korch serve: every HTTP route (and the websocket
 *  upgrade path) once, with what the router and the OpenAPI check need.
 *  Not a public API.
 *
 *  A pattern is a path of segments; a segment is a literal ("kernels"),
 *  a parameter ("{kernel_id}": one non-empty segment) or, last, a tail
 *  ("{path*}": the rest of the path, one or more segments joined with '/',
 *  never "." or ".."). Parameter names are the OpenAPI document's
 *  (src/server/openapi.yaml), so the check compares paths as written.
 *
 *  Matching (srv_route_match) works on the path as libwebsockets hands it
 *  over: percent-decoded (so "%2F" is a '/' by then and cannot hide a
 *  segment boundary), dot segments resolved, no query. Empty segments are
 *  skipped, so "//" and a trailing slash change nothing (as before the
 *  table). Literals win over parameters; a path that names a route with
 *  other methods is 405 (allow lists them, for the Allow header RFC 9110
 *  15.5.6 asks for; jupyter_server answers 405 too, without Allow), one
 *  that names none is 404. HEAD is not served (405), as in jupyter_server's
 *  API handlers.
 *
 *  Threading: the table is constant; the matcher compiles it once
 *  (pthread_once) and is then read-only, so any thread may call it.
 */
#ifndef KORCH_SRV_ROUTES_H
#define KORCH_SRV_ROUTES_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "korch/error.h"
#include "korch/server.h"

typedef struct srv_req srv_req_t;

#define SRV_ROUTE_MAX_PATH 1024     /* bytes of a path, with its NUL (srv_req_t.path) */
#define SRV_ROUTE_MAX_SEGS 64       /* segments of a request path */
#define SRV_ROUTE_MAX_PARAMS 4

/* A matched route's parameters: values are NUL-terminated, in buf. */
typedef struct {
    int n;
    const char *name[SRV_ROUTE_MAX_PARAMS];     /* the pattern's ("kernel_id"), static */
    const char *value[SRV_ROUTE_MAX_PARAMS];
    char buf[SRV_ROUTE_MAX_PATH];
} srv_params_t;

/* The value of parameter name (borrowed), or "" when the route has none.
   (In http.c, beside the request, so handlers never call routes.c.) */
const char *srv_param(const srv_params_t *p, const char *name);

/* A route's handler. body: the request's JSON object (borrowed) when the
   route reads one (SRV_BODY_JSON) and the request had one, else NULL. The
   handler responds now or takes the request over (srv_req_wait). */
typedef void srv_handler_fn(korch_server_t *s, srv_req_t *req, const srv_params_t *p, json_t *body);

typedef enum {
    SRV_AUTH_TOKEN,                 /* the server's token (header or ?token=) */
    SRV_AUTH_NONE,                  /* open: GET /api, the web app's files */
} srv_auth_t;

typedef enum {
    SRV_BODY_NONE,                  /* none read as JSON (a body is read up to --max-body and ignored) */
    SRV_BODY_JSON,                  /* a JSON object, optional, up to --max-body; malformed is 400 */
    SRV_BODY_UPLOAD,                /* raw bytes up to --max-upload, spooled to disk (body.c) */
} srv_body_kind_t;

typedef struct {
    const char *method;             /* "GET", "POST", "PUT", "PATCH", "DELETE" */
    const char *pattern;            /* "/api/kernels/{kernel_id}/restart" */
    srv_handler_fn *handler;
    srv_auth_t auth;
    srv_body_kind_t body;
    bool websocket;                 /* the upgrade target (a GET without upgrade gets the handler) */
    const char *summary;            /* one line, the OpenAPI operation's summary */
} srv_route_t;

/* The table (constant, static storage) and its length. */
const srv_route_t *srv_routes(size_t *n);

typedef enum {
    SRV_MATCH_OK,                   /* *route and params set */
    SRV_MATCH_NOT_FOUND,            /* 404 */
    SRV_MATCH_METHOD,               /* 405: allow = "GET, POST" */
    SRV_MATCH_BAD_PATH,             /* 400: a tail parameter with a "." or ".." segment, or a NUL */
    SRV_MATCH_TOO_LONG,             /* 414: SRV_ROUTE_MAX_PATH bytes or more, or too many segments */
} srv_match_t;

/* Match method + path (len bytes; a NUL inside is SRV_MATCH_BAD_PATH)
   against the table. params may be NULL; allow (may be NULL) gets the
   methods of the path for SRV_MATCH_METHOD, "" otherwise. */
srv_match_t srv_route_match(const char *method, const char *path, size_t len, const srv_route_t **route,
                            srv_params_t *params, char *allow, size_t allow_len);

/* The table as JSON (new): [{method, path, summary, auth, body, websocket}],
   path with OpenAPI's parameter syntax ("{path*}" written "{path}"). */
json_t *srv_routes_json(void);


/* ----------------------------------------------- the handlers it names */

/* api.c */
srv_handler_fn srv_api_version, srv_api_status, srv_api_kernelspecs, srv_api_kernelspec, srv_api_kernels_list,
    srv_api_kernels_start, srv_api_kernel_get, srv_api_kernel_delete, srv_api_kernel_interrupt,
    srv_api_kernel_restart, srv_api_kernel_channels, srv_api_sessions_list, srv_api_sessions_create,
    srv_api_session_get, srv_api_session_patch, srv_api_session_delete, srv_api_kernel_untrust, srv_api_kernel_trust,
    srv_api_me;
/* mcp_http.c */
srv_handler_fn srv_mcp_post, srv_mcp_delete;
/* agents.c */
srv_handler_fn srv_agent_list, srv_agent_create, srv_agent_get, srv_agent_delete, srv_agent_message,
    srv_agent_interrupt, srv_agent_notebook, srv_agent_events, srv_agent_files, srv_agent_file_get,
    srv_agent_file_put, srv_agent_file_delete, srv_agent_figure, srv_agent_branch, srv_agent_verify;
/* hub_oauth.c: korch's page logs in through JupyterHub */
srv_handler_fn srv_hub_login, srv_hub_callback;

#endif
