/*  The Jupyter Server kernel API's handlers: kernelspecs, kernels,
 *  sessions, status. routes.c's table says which route each one serves
 *  (and src/server/openapi.yaml documents them); a handler sees its path's
 *  parameters by name and, for the routes that read one, the JSON body.
 *
 *  Shapes follow jupyter_server 1.23 (services/kernels/handlers.py,
 *  services/sessions/handlers.py + sessionmanager.py, services/api).
 *  A kernel start is answered 201 once the kernel is ready (at once from
 *  the warm pool, pool.c), a restart 200 once it is ready again, a delete
 *  204 once it is gone. A kernel model is {id, name, last_activity,
 *  execution_state, connections}; a session {id, path, name, type,
 *  kernel: model, notebook?: {path, name}}; /api/status is {started,
 *  last_activity, kernels, connections, pool?: {NAME: {size, ready,
 *  starting}} (korch's)}. Errors are {"message": ...}.
 */
#include "server_int.h"
#include "relay.h"
#include "metrics.h"
#include "quota.h"
#include "audit.h"
#include "korch/kernelspec.h"
#include "korch/log.h"
#include "korch/session.h"
#include "korch/uuid.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct srv_api {
    korch_server_t *srv;
    zhashx_t *sessions;         /* jupyter session id -> json model core (owned) */
};

/* The Jupyter kernel model, with korch's "untrusted" (taint.h) (new). */
static json_t *s_model(srv_kernel_t *mk)
{
    json_t *m = srv_kernel_model(mk);
    if (m)
        srv_kernel_taint_model(mk, m);
    return m;
}

static srv_api_t *s_api(korch_server_t *s) { return srv_parts(s)->api; }
static srv_kmgr_t *s_kmgr(korch_server_t *s) { return srv_parts(s)->kmgr; }

/* ------------------------------------------------------------ sessions */

static json_t *s_session_model(korch_server_t *s, json_t *sess)
{
    srv_kernel_t *mk = srv_kmgr_find(s_kmgr(s), json_string_value(json_object_get(sess, "kernel_id")));
    if (!mk)
        return NULL;
    json_t *m = json_pack("{s:O, s:O, s:O, s:O, s:o}", "id", json_object_get(sess, "id"), "path",
                          json_object_get(sess, "path"), "name", json_object_get(sess, "name"), "type",
                          json_object_get(sess, "type"), "kernel", s_model(mk));
    if (m && strcmp(json_string_value(json_object_get(sess, "type")), "notebook") == 0)
        json_object_set_new(m, "notebook", json_pack("{s:O, s:O}", "path", json_object_get(sess, "path"), "name",
                                                     json_object_get(sess, "name")));
    return m;
}

/* Whose sess is ("" = nobody's). */
static const char *s_owner(json_t *sess)
{
    const char *owner = json_string_value(json_object_get(sess, "owner"));
    return owner ? owner : "";
}

/* May the request's user see sess (ident.h: another user's is not there)? */
static bool s_session_mine(const srv_req_t *req, json_t *sess) { return srv_user_may(&req->user, s_owner(sess)); }

/* The session of path of req's user (two users' notebooks of one path are two sessions). */
static json_t *s_session_by_path(korch_server_t *s, srv_req_t *req, const char *path)
{
    zhashx_t *all = s_api(s)->sessions;
    for (json_t *sess = zhashx_first(all); sess; sess = zhashx_next(all))
        if (strcmp(json_string_value(json_object_get(sess, "path")), path) == 0 &&
            strcmp(s_owner(sess), req->user.name) == 0 &&
            srv_kmgr_find(s_kmgr(s), json_string_value(json_object_get(sess, "kernel_id"))))
            return sess;
    return NULL;
}

/* A kernel is gone: so are its sessions. */
static void s_on_kernel(srv_kernel_t *mk, srv_kev_t ev, const char *detail, void *arg)
{
    srv_api_t *a = arg;
    if (ev != SRV_KEV_GONE)
        return;
    zlistx_t *keys = zhashx_keys(a->sessions);
    for (const char *k = keys ? zlistx_first(keys) : NULL; k; k = zlistx_next(keys)) {
        json_t *sess = zhashx_lookup(a->sessions, k);
        if (sess && strcmp(json_string_value(json_object_get(sess, "kernel_id")), mk->id) == 0)
            zhashx_delete(a->sessions, k);
    }
    zlistx_destroy(&keys);
}

static void s_json_free(void **item)
{
    json_decref(*item);
    *item = NULL;
}

srv_api_t *srv_api_new(korch_server_t *s)
{
    srv_api_t *a = calloc(1, sizeof *a);
    if (!a || !(a->sessions = zhashx_new())) {
        free(a);
        return NULL;
    }
    a->srv = s;
    zhashx_set_destructor(a->sessions, s_json_free);
    srv_kmgr_listen(srv_parts(s)->kmgr, s_on_kernel, a);
    return a;
}

void srv_api_destroy(srv_api_t **pa)
{
    srv_api_t *a = *pa;
    if (!a)
        return;
    zhashx_destroy(&a->sessions);
    free(a);
    *pa = NULL;
}

/* ------------------------------------------------- waiting on a kernel */

/* A request waiting for its kernel to be ready. */
typedef enum { W_START, W_RESTART, W_SESSION, W_SESSION_PATCH } s_wait_kind_t;

typedef struct {
    korch_server_t *srv;
    srv_req_t *req;
    s_wait_kind_t kind;
    char sess[64];              /* the session (W_SESSION*) */
    char old[64];               /* the kernel to shut down after a session patch */
} s_waiting_t;

static void s_on_ready(srv_kernel_t *mk, const char *error, void *arg)
{
    s_waiting_t *w = arg;
    korch_server_t *s = w->srv;
    srv_req_t *req = w->req;
    zhashx_t *sessions = s_api(s)->sessions;
    json_t *sess = NULL;
    if (error) {
        if (w->kind == W_SESSION)
            zhashx_delete(sessions, w->sess);
        if (mk->doomed) /* deleted by another request meanwhile: not a server error */
            srv_respond_error(req, 409, "kernel %s was shut down before it was ready (%s)", mk->id, error);
        else
            srv_respond_error(req, 500, "%s", error);
        free(w);
        return;
    }
    switch (w->kind) {
    case W_START:
        srv_metrics_launch_time(srv_parts(s)->metrics, req->t0_us);
        srv_respond(req, 201, s_model(mk));
        break;
    case W_RESTART:
        srv_respond(req, 200, s_model(mk));
        break;
    case W_SESSION:
    case W_SESSION_PATCH:
        sess = zhashx_lookup(sessions, w->sess);
        if (!sess) {
            srv_respond_error(req, 404, "session was deleted meanwhile");
            break;
        }
        json_object_set_new(sess, "kernel_id", json_string(mk->id));
        srv_metrics_launch_time(srv_parts(s)->metrics, req->t0_us);
        srv_respond(req, w->kind == W_SESSION ? 201 : 200, s_session_model(s, sess));
        if (w->old[0] && strcmp(w->old, mk->id) != 0)
            srv_kmgr_delete(srv_kmgr_find(s_kmgr(s), w->old));
        break;
    }
    free(w);
}

/* req waits for mk to be ready (answered at once - a round later - when it is). */
static void s_wait_on(korch_server_t *s, srv_kernel_t *mk, srv_req_t *req, s_wait_kind_t kind, const char *sess,
                      const char *old)
{
    s_waiting_t *w = calloc(1, sizeof *w);
    if (!w) {
        srv_respond_error(req, 500, "out of memory");
        return;
    }
    *w = (s_waiting_t){.srv = s, .req = req, .kind = kind};
    snprintf(w->sess, sizeof w->sess, "%s", sess ? sess : "");
    snprintf(w->old, sizeof w->old, "%s", old ? old : "");
    srv_req_wait(req);
    if (!srv_kernel_when_ready(mk, s_on_ready, w)) {
        free(w);
        srv_respond_error(req, mk->doomed ? 409 : 500, "kernel %s %s", mk->id,
                          mk->doomed ? "is being shut down" : "cannot be waited for (out of memory)");
    }
}

static void s_on_gone(const char *kernel_id, void *arg) { srv_respond(arg, 204, NULL); }

/* Shut mk down; req gets 204 once it is gone. */
static void s_kernel_delete(korch_server_t *s, srv_kernel_t *mk, srv_req_t *req)
{
    srv_audit(srv_parts(s)->audit, &req->user, "kernel.delete", "kernel", mk->id, NULL);
    srv_kmgr_delete(mk);
    srv_req_wait(req);
    if (!srv_kernel_when_gone(mk, s_on_gone, req))
        srv_respond(req, 204, NULL);
}

/* Does the request's env need a kernel started for it? KERNEL_* variables
   are how Kernel Gateway clients parameterise a kernel: korch puts them in
   the new process's environment (s_env in kernels.c), which a kernel
   started before the request cannot have, so such a request gets a fresh
   kernel, never a pooled one. Two are exceptions: jupyter_server's
   GatewayClient sends KERNEL_LAUNCH_TIMEOUT with every start and
   KERNEL_WORKING_DIR with every start that has a path (gateway/managers.py),
   and korch acts on neither (a ready kernel needs no launch timeout; korch
   does not chdir to a path of the client's host). Refusing the pool for
   them would refuse it to every JupyterLab behind a jupyter_server. */
static bool s_env_needs_fresh_start(json_t *env)
{
    static const char *const hints[] = {"KERNEL_LAUNCH_TIMEOUT", "KERNEL_WORKING_DIR", "KERNEL_KORCH_UNTRUSTED"};
    const char *name;
    json_t *val;
    json_object_foreach(env, name, val) {
        if (strncmp(name, "KERNEL_", 7) != 0 || !json_is_string(val))
            continue; /* not passed to the kernel anyway */
        bool hint = false;
        for (size_t i = 0; i < sizeof hints / sizeof hints[0]; i++)
            hint = hint || strcmp(name, hints[i]) == 0;
        if (!hint)
            return true;
    }
    return false;
}

/* Start a kernel for req (limits checked); NULL when req has been answered. */
static srv_kernel_t *s_start(korch_server_t *s, srv_req_t *req, const char *name, json_t *env, int notfound_status)
{
    const srv_parts_t *p = srv_parts(s);
    if (p->opts->max_kernels > 0 && srv_kmgr_count(p->kmgr) >= (size_t)p->opts->max_kernels) {
        srv_respond_error(req, 403, "maximum number of kernels reached (%d); shut one down first",
                          p->opts->max_kernels);
        return NULL;
    }
    /* a ready kernel from the warm pool when there is one */
    if (!srv_quota_kernel_ok(s, req))
        return NULL; /* 429, with what is used and the limit */
    srv_kernel_t *mk = s_env_needs_fresh_start(env) ? NULL : srv_pool_take(p->pool, name);
    korch_err_t err = {0};
    if (!mk)
        mk = srv_kmgr_start(p->kmgr, &(srv_kstart_t){.name = name, .env = env}, &err);
    if (!mk) {
        srv_respond_error(req, err.rc == KORCH_E_NOTFOUND ? notfound_status : korch_rc_http_status(err.rc), "%s",
                          err.msg);
        return NULL;
    }
    snprintf(mk->owner, sizeof mk->owner, "%s", req->user.name); /* its user's from now (ident.h) */
    srv_audit(p->audit, &req->user, "kernel.start", "kernel", mk->id, json_pack("{s:s}", "name", mk->name));
    return mk;
}

static void s_kernels_post(korch_server_t *s, srv_req_t *req, json_t *body)
{
    json_t *jn = json_object_get(body, "name");
    if (jn && !json_is_null(jn) && !json_is_string(jn)) {
        srv_respond_error(req, 400, "'name' must be a string");
        return;
    }
    json_t *env = json_object_get(body, "env");
    if (env && !json_is_null(env) && !json_is_object(env)) {
        srv_respond_error(req, 400, "'env' must be an object");
        return;
    }
    json_t *untrusted = json_object_get(body, "untrusted");
    if (untrusted && !json_is_boolean(untrusted)) {
        srv_respond_error(req, 400, "'untrusted' must be true or false");
        return;
    }
    /* a client may ask for its kernel's outputs untrusted from the start:
       "untrusted": true, or KERNEL_KORCH_UNTRUSTED=1 in env (what
       jupyter_server forwards from its own environment) */
    const char *ev = json_string_value(json_object_get(env, "KERNEL_KORCH_UNTRUSTED"));
    bool taint = json_is_true(untrusted) || (ev && *ev && strcmp(ev, "0") != 0);
    const char *name = json_is_string(jn) && *json_string_value(jn) ? json_string_value(jn)
                                                                    : srv_parts(s)->opts->kernel;
    srv_kernel_t *mk = s_start(s, req, name, env, 404);
    if (!mk)
        return;
    if (taint)
        srv_kernel_taint(mk, "asked for when it was started");
    snprintf(req->location, sizeof req->location, "/api/kernels/%s", mk->id);
    s_wait_on(s, mk, req, W_START, NULL, NULL);
}

void srv_api_kernels_list(korch_server_t *s, srv_req_t *req, const srv_params_t *p, json_t *body)
{
    json_t *list = json_array();
    zlistx_t *all = srv_kmgr_list(s_kmgr(s));
    for (srv_kernel_t *mk = all ? zlistx_first(all) : NULL; mk; mk = zlistx_next(all))
        if (srv_user_may(&req->user, mk->owner))
            json_array_append_new(list, s_model(mk));
    zlistx_destroy(&all);
    srv_respond(req, 200, list);
}

void srv_api_kernels_start(korch_server_t *s, srv_req_t *req, const srv_params_t *p, json_t *body)
{
    s_kernels_post(s, req, body);
}

static void s_kernel_get(korch_server_t *s, srv_kernel_t *mk, srv_req_t *req)
{
    srv_respond(req, 200, s_model(mk));
}

static void s_kernel_interrupt(korch_server_t *s, srv_kernel_t *mk, srv_req_t *req)
{
    korch_err_t err = {0};
    if (korch_kernel_interrupt(mk->k, &err) != KORCH_OK)
        srv_respond_error(req, 500, "%s", err.msg);
    else
        srv_respond(req, 204, NULL);
}

static void s_kernel_restart(korch_server_t *s, srv_kernel_t *mk, srv_req_t *req)
{
    korch_err_t err = {0};
    if (srv_kmgr_restart(mk, &err) != KORCH_OK)
        srv_respond_error(req, 500, "%s", err.msg);
    else
        s_wait_on(s, mk, req, W_RESTART, NULL, NULL);
}

/* The channels' path without an upgrade (upgrades go to server.c's s_ws_confirm). */
static void s_kernel_channels(korch_server_t *s, srv_kernel_t *mk, srv_req_t *req)
{
    srv_respond_error(req, 400, "a websocket upgrade is needed");
}

/* What a route under /api/kernels/{kernel_id} does with its kernel. */
typedef void s_kernel_fn(korch_server_t *s, srv_kernel_t *mk, srv_req_t *req);

/* fn with the kernel the path names, or 404. */
static void s_with_kernel(korch_server_t *s, srv_req_t *req, const srv_params_t *p, s_kernel_fn *fn)
{
    const char *id = srv_param(p, "kernel_id");
    srv_kernel_t *mk = srv_kmgr_find(s_kmgr(s), id);
    if (mk && srv_user_may(&req->user, mk->owner)) /* another user's is not there for you (ident.h) */
        fn(s, mk, req);
    else
        srv_respond_error(req, 404, "Kernel does not exist: %.80s", id);
}

void srv_api_kernel_get(korch_server_t *s, srv_req_t *req, const srv_params_t *p, json_t *body)
{
    s_with_kernel(s, req, p, s_kernel_get);
}

void srv_api_kernel_delete(korch_server_t *s, srv_req_t *req, const srv_params_t *p, json_t *body)
{
    s_with_kernel(s, req, p, s_kernel_delete);
}

void srv_api_kernel_interrupt(korch_server_t *s, srv_req_t *req, const srv_params_t *p, json_t *body)
{
    s_with_kernel(s, req, p, s_kernel_interrupt);
}

void srv_api_kernel_restart(korch_server_t *s, srv_req_t *req, const srv_params_t *p, json_t *body)
{
    s_with_kernel(s, req, p, s_kernel_restart);
}

void srv_api_kernel_channels(korch_server_t *s, srv_req_t *req, const srv_params_t *p, json_t *body)
{
    s_with_kernel(s, req, p, s_kernel_channels);
}

static void s_kernel_untrust(korch_server_t *s, srv_kernel_t *mk, srv_req_t *req)
{
    srv_kernel_taint(mk, "asked for by a client");
    srv_respond(req, 200, s_model(mk));
}

/* The owner's deliberate choice: its outputs may run script again (until
   the agent's code runs in it again). */
static void s_kernel_trust(korch_server_t *s, srv_kernel_t *mk, srv_req_t *req)
{
    if (srv_kernel_untaint(mk))
        korch_notice("kernel %.8s: its outputs' taint lifted by a client (DELETE .../untrusted)", mk->id);
    srv_respond(req, 200, s_model(mk));
}

void srv_api_kernel_untrust(korch_server_t *s, srv_req_t *req, const srv_params_t *p, json_t *body)
{
    s_with_kernel(s, req, p, s_kernel_untrust);
}

void srv_api_kernel_trust(korch_server_t *s, srv_req_t *req, const srv_params_t *p, json_t *body)
{
    s_with_kernel(s, req, p, s_kernel_trust);
}

/* ------------------------------------------------------------ sessions */

static void s_sessions_post(korch_server_t *s, srv_req_t *req, json_t *body)
{
    if (!body) {
        srv_respond_error(req, 400, "No JSON data provided");
        return;
    }
    json_t *nb = json_object_get(body, "notebook");
    json_t *path = json_object_get(body, "path"), *type = json_object_get(body, "type");
    const char *ptype = json_string_value(type);
    if (json_is_string(json_object_get(nb, "path"))) { /* the deprecated API */
        path = json_object_get(nb, "path");
        ptype = "notebook";
    }
    if (!json_is_string(path)) {
        srv_respond_error(req, 400, "Missing field in JSON data: path");
        return;
    }
    if (!ptype) {
        srv_respond_error(req, 400, "Missing field in JSON data: type");
        return;
    }
    json_t *existing = s_session_by_path(s, req, json_string_value(path));
    if (existing) {
        srv_respond(req, 201, s_session_model(s, existing));
        return;
    }
    json_t *kernel = json_object_get(body, "kernel");
    const char *kid = json_string_value(json_object_get(kernel, "id"));
    const char *kname = json_string_value(json_object_get(kernel, "name"));
    json_t *jname = json_object_get(body, "name");
    char id[37];
    korch_uuid(id);
    json_t *sess = json_pack("{s:s, s:O, s:s, s:s, s:s, s:s}", "id", id, "path", path, "name",
                             json_is_string(jname) ? json_string_value(jname) : "", "type", ptype, "kernel_id", "",
                             "owner", req->user.name);
    if (!sess) {
        srv_respond_error(req, 500, "out of memory");
        return;
    }
    if (kid) {
        srv_kernel_t *mk = srv_kmgr_find(s_kmgr(s), kid);
        if (!mk || !srv_user_may(&req->user, mk->owner)) {
            json_decref(sess);
            srv_respond_error(req, 404, "Kernel does not exist: %.80s", kid);
            return;
        }
        json_object_set_new(sess, "kernel_id", json_string(mk->id));
        zhashx_insert(s_api(s)->sessions, id, sess);
        snprintf(req->location, sizeof req->location, "/api/sessions/%s", id);
        srv_respond(req, 201, s_session_model(s, sess));
        return;
    }
    srv_kernel_t *mk = s_start(s, req, kname ? kname : srv_parts(s)->opts->kernel, NULL, 501);
    if (!mk) {
        json_decref(sess);
        return;
    }
    json_object_set_new(sess, "kernel_id", json_string(mk->id));
    zhashx_insert(s_api(s)->sessions, id, sess);
    snprintf(req->location, sizeof req->location, "/api/sessions/%s", id);
    s_wait_on(s, mk, req, W_SESSION, id, NULL);
}

static void s_session_patch(korch_server_t *s, json_t *sess, srv_req_t *req, const srv_params_t *p, json_t *body)
{
    if (!body) {
        srv_respond_error(req, 400, "No JSON data provided");
        return;
    }
    json_t *nb = json_object_get(body, "notebook");
    if (json_is_string(json_object_get(nb, "path"))) {
        json_object_set(sess, "path", json_object_get(nb, "path"));
        json_object_set_new(sess, "type", json_string("notebook"));
    }
    const char *fields[] = {"path", "name", "type"};
    for (size_t i = 0; i < 3; i++) {
        json_t *v = json_object_get(body, fields[i]);
        if (json_is_string(v))
            json_object_set(sess, fields[i], v);
    }
    json_t *kernel = json_object_get(body, "kernel");
    const char *kid = json_string_value(json_object_get(kernel, "id"));
    const char *kname = json_string_value(json_object_get(kernel, "name"));
    char old[64];
    snprintf(old, sizeof old, "%s", json_string_value(json_object_get(sess, "kernel_id")));
    if (kid) {
        srv_kernel_t *mk = srv_kmgr_find(s_kmgr(s), kid);
        if (!mk || !srv_user_may(&req->user, mk->owner)) {
            srv_respond_error(req, 400, "No such kernel: %.80s", kid);
            return;
        }
        json_object_set_new(sess, "kernel_id", json_string(mk->id));
        srv_respond(req, 200, s_session_model(s, sess));
        srv_kernel_t *before = strcmp(old, mk->id) != 0 ? srv_kmgr_find(s_kmgr(s), old) : NULL;
        srv_kmgr_delete(before);
        return;
    }
    if (kname) {
        srv_kernel_t *mk = s_start(s, req, kname, NULL, 501);
        if (!mk)
            return;
        s_wait_on(s, mk, req, W_SESSION_PATCH, json_string_value(json_object_get(sess, "id")), old);
        return;
    }
    json_t *model = s_session_model(s, sess);
    if (model)
        srv_respond(req, 200, model);
    else
        srv_respond_error(req, 404, "the session's kernel is gone");
}

void srv_api_sessions_list(korch_server_t *s, srv_req_t *req, const srv_params_t *p, json_t *body)
{
    zhashx_t *all = s_api(s)->sessions;
    json_t *list = json_array();
    for (json_t *sess = zhashx_first(all); sess; sess = zhashx_next(all)) {
        json_t *model = s_session_mine(req, sess) ? s_session_model(s, sess) : NULL;
        if (model)
            json_array_append_new(list, model);
    }
    srv_respond(req, 200, list);
}

void srv_api_sessions_create(korch_server_t *s, srv_req_t *req, const srv_params_t *p, json_t *body)
{
    s_sessions_post(s, req, body);
}

static void s_session_get(korch_server_t *s, json_t *sess, srv_req_t *req, const srv_params_t *p, json_t *body)
{
    srv_respond(req, 200, s_session_model(s, sess));
}

static void s_session_delete(korch_server_t *s, json_t *sess, srv_req_t *req, const srv_params_t *p,
                             json_t *body)
{
    srv_kernel_t *mk = srv_kmgr_find(s_kmgr(s), json_string_value(json_object_get(sess, "kernel_id")));
    zhashx_delete(s_api(s)->sessions, srv_param(p, "session_id")); /* frees sess */
    if (mk)
        s_kernel_delete(s, mk, req);
    else
        srv_respond(req, 204, NULL);
}

/* What a route under /api/sessions/{session_id} does with its session (borrowed). */
typedef void s_session_fn(korch_server_t *s, json_t *sess, srv_req_t *req, const srv_params_t *p, json_t *body);

/* fn with the session the path names, or 404; one whose kernel is gone is
   forgotten. */
static void s_with_session(korch_server_t *s, srv_req_t *req, const srv_params_t *p, json_t *body,
                           s_session_fn *fn)
{
    zhashx_t *all = s_api(s)->sessions;
    const char *id = srv_param(p, "session_id");
    json_t *sess = zhashx_lookup(all, id);
    json_t *model = sess ? s_session_model(s, sess) : NULL;
    if (!model || !s_session_mine(req, sess)) {
        if (sess && !model)
            zhashx_delete(all, id); /* its kernel is gone */
        srv_respond_error(req, 404, "Session not found: %.80s", id);
        return;
    }
    json_decref(model);
    fn(s, sess, req, p, body);
}

void srv_api_session_get(korch_server_t *s, srv_req_t *req, const srv_params_t *p, json_t *body)
{
    s_with_session(s, req, p, body, s_session_get);
}

void srv_api_session_patch(korch_server_t *s, srv_req_t *req, const srv_params_t *p, json_t *body)
{
    s_with_session(s, req, p, body, s_session_patch);
}

void srv_api_session_delete(korch_server_t *s, srv_req_t *req, const srv_params_t *p, json_t *body)
{
    s_with_session(s, req, p, body, s_session_delete);
}

/* ------------------------------------------------------------- routing */

/* ------------------------------------------------------------- the rest */

void srv_api_version(korch_server_t *s, srv_req_t *req, const srv_params_t *p, json_t *body)
{
    srv_respond(req, 200, json_pack("{s:s}", "version", KORCH_VERSION));
}

void srv_api_kernelspecs(korch_server_t *s, srv_req_t *req, const srv_params_t *p, json_t *body)
{
    json_t *list = korch_kernelspec_list();
    if (!list)
        srv_respond_error(req, 500, "cannot list kernelspecs");
    else
        srv_respond(req, 200, json_pack("{s:s, s:o}", "default", srv_parts(s)->opts->kernel, "kernelspecs", list));
}

void srv_api_kernelspec(korch_server_t *s, srv_req_t *req, const srv_params_t *p, json_t *body)
{
    json_t *list = korch_kernelspec_list();
    if (!list) {
        srv_respond_error(req, 500, "cannot list kernelspecs");
        return;
    }
    const char *name = srv_param(p, "kernel_name");
    json_t *one = json_object_get(list, name);
    if (one)
        srv_respond(req, 200, json_incref(one));
    else
        srv_respond_error(req, 404, "Kernel spec %.80s not found", name);
    json_decref(list);
}

/* GET /api/me: who the token is, their quotas and what they use (quota.h). */
void srv_api_me(korch_server_t *s, srv_req_t *req, const srv_params_t *params, json_t *body)
{
    int running, sessions = srv_agents_owned(srv_parts(s)->agents, req->user.name, &running);
    json_t *me = srv_quota_report(s, &req->user, sessions, running);
    if (me) {
        json_object_set_new(me, "name", json_string(req->user.name));
        json_object_set_new(me, "role", json_string(srv_role_name(req->user.role)));
    }
    srv_respond(req, 200, me);
}

void srv_api_status(korch_server_t *s, srv_req_t *req, const srv_params_t *params, json_t *body)
{
    const srv_parts_t *p = srv_parts(s);
    int conns = 0;
    int kernels = 0;
    zlistx_t *all = srv_kmgr_list(p->kmgr);
    for (srv_kernel_t *mk = all ? zlistx_first(all) : NULL; mk; mk = zlistx_next(all))
        if (srv_user_may(&req->user, mk->owner)) /* a user's own, an admin's all */
            conns += (int)mk->connections, kernels++;
    zlistx_destroy(&all);
    /* ISO 8601 of one format: the later one sorts last */
    const char *kla = srv_kmgr_last_activity(p->kmgr);
    const char *last = strcmp(kla, p->last_activity) > 0 ? kla : p->last_activity;
    json_t *status = json_pack("{s:s, s:s, s:i, s:i}", "started", p->started, "last_activity", last, "kernels",
                               req->user.role == SRV_ROLE_ADMIN ? (int)srv_kmgr_count(p->kmgr) : kernels,
                               "connections", conns);
    json_t *pool = srv_pool_status(p->pool); /* korch's own key; Jupyter clients ignore it */
    if (status && pool)
        json_object_set_new(status, "pool", pool);
    else
        json_decref(pool);
    srv_respond(req, 200, status);
}
