/*  The REST routes of the Jupyter Server kernel API.
 *
 *  Shapes follow jupyter_server 1.23 (services/kernels/handlers.py,
 *  services/sessions/handlers.py + sessionmanager.py, services/api):
 *    GET  /api                        {version}           (no token needed)
 *    GET  /api/status                 {started, last_activity, kernels, connections,
 *                                      pool?: {NAME: {size, ready, starting}} (korch's)}
 *    GET  /api/kernelspecs            {default, kernelspecs: {name: {name, spec, resources}}}
 *    GET  /api/kernelspecs/{name}
 *    GET  /kernelspecs/{name}/{file}  a kernelspec resource (logo-32x32.png ...; resources.c)
 *    GET  /api/kernels                [model]
 *    POST /api/kernels {name?, path?, env?}   201 model, once the kernel is ready
 *                                     (at once from the warm pool, pool.c)
 *    GET|DELETE /api/kernels/{id}     model | 204 once it is gone
 *    POST /api/kernels/{id}/interrupt 204
 *    POST /api/kernels/{id}/restart   200 model, once it is ready again
 *    GET|POST /api/sessions, GET|PATCH|DELETE /api/sessions/{id}
 *  A kernel model is {id, name, last_activity, execution_state, connections};
 *  a session {id, path, name, type, kernel: model, notebook?: {path, name}}.
 *  Errors are {"message": ...}.
 */
#include "server_int.h"
#include "korch/kernelspec.h"
#include "korch/log.h"
#include "korch/session.h"
#include "korch/uuid.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SEGS 8

/* ------------------------------------------------------------ sessions */

static json_t *s_session_model(korch_server_t *s, json_t *sess)
{
    srv_kernel_t *mk = srv_kernel_find(s, json_string_value(json_object_get(sess, "kernel_id")));
    if (!mk)
        return NULL;
    json_t *m = json_pack("{s:O, s:O, s:O, s:O, s:o}", "id", json_object_get(sess, "id"), "path",
                          json_object_get(sess, "path"), "name", json_object_get(sess, "name"), "type",
                          json_object_get(sess, "type"), "kernel", srv_kernel_model(mk));
    if (m && strcmp(json_string_value(json_object_get(sess, "type")), "notebook") == 0)
        json_object_set_new(m, "notebook", json_pack("{s:O, s:O}", "path", json_object_get(sess, "path"), "name",
                                                     json_object_get(sess, "name")));
    return m;
}

static json_t *s_session_by_path(korch_server_t *s, const char *path)
{
    for (json_t *sess = zhashx_first(srv_state(s)->sessions); sess; sess = zhashx_next(srv_state(s)->sessions))
        if (strcmp(json_string_value(json_object_get(sess, "path")), path) == 0 &&
            srv_kernel_find(s, json_string_value(json_object_get(sess, "kernel_id"))))
            return sess;
    return NULL;
}

void srv_api_kernel_gone(korch_server_t *s, const char *kernel_id)
{
    srv_agents_kernel_gone(s, kernel_id);
    zhashx_t *all = srv_state(s)->sessions;
    zlistx_t *keys = zhashx_keys(all);
    for (const char *k = keys ? zlistx_first(keys) : NULL; k; k = zlistx_next(keys)) {
        json_t *sess = zhashx_lookup(all, k);
        if (sess && strcmp(json_string_value(json_object_get(sess, "kernel_id")), kernel_id) == 0)
            zhashx_delete(all, k);
    }
    zlistx_destroy(&keys);
}

/* ------------------------------------------------- waiting on a kernel */

/* Take the first waiter that waits for ready (not for the kernel's end). */
static srv_req_t *s_take_waiter(srv_kernel_t *mk)
{
    for (srv_req_t *req = zlistx_first(mk->waiters); req; req = zlistx_next(mk->waiters))
        if (req->wait != SRV_WAIT_DELETE) {
            zlistx_delete(mk->waiters, zlistx_cursor(mk->waiters));
            return req;
        }
    return NULL;
}

void srv_api_kernel_ready(srv_kernel_t *mk)
{
    korch_server_t *s = mk->srv;
    srv_req_t *req;
    while ((req = s_take_waiter(mk))) {
        json_t *sess = NULL;
        switch (req->wait) {
        case SRV_WAIT_START:
            srv_metrics_launch_time(s, req->t0_us);
            srv_respond(req, 201, srv_kernel_model(mk));
            break;
        case SRV_WAIT_RESTART:
            srv_respond(req, 200, srv_kernel_model(mk));
            break;
        case SRV_WAIT_AGENT:
            srv_agent_kernel_ready(req, mk);
            break;
        case SRV_WAIT_SESSION:
        case SRV_WAIT_SESSION_PATCH:
            sess = zhashx_lookup(srv_state(s)->sessions, req->arg);
            if (!sess) {
                srv_respond_error(req, 404, "session was deleted meanwhile");
                break;
            }
            json_object_set_new(sess, "kernel_id", json_string(mk->id));
            srv_metrics_launch_time(s, req->t0_us);
            srv_respond(req, req->wait == SRV_WAIT_SESSION ? 201 : 200, s_session_model(s, sess));
            if (req->arg2[0] && strcmp(req->arg2, mk->id) != 0) {
                srv_kernel_t *old = srv_kernel_find(s, req->arg2);
                if (old)
                    srv_kernel_delete(old, NULL);
            }
            break;
        default:
            break;
        }
    }
}

void srv_api_kernel_failed(srv_kernel_t *mk, const char *why)
{
    korch_server_t *s = mk->srv;
    srv_req_t *req;
    while ((req = s_take_waiter(mk))) {
        if (req->wait == SRV_WAIT_SESSION)
            zhashx_delete(srv_state(s)->sessions, req->arg);
        if (req->wait == SRV_WAIT_AGENT)
            srv_agent_kernel_failed(req, mk, why);
        else if (mk->doomed) /* deleted by another request meanwhile: not a server error */
            srv_respond_error(req, 409, "kernel %s was shut down before it was ready (%s)", mk->id, why);
        else
            srv_respond_error(req, 500, "%s", why);
    }
}

/* ------------------------------------------------------------ kernels */

static void s_wait_on(srv_kernel_t *mk, srv_req_t *req, srv_wait_t what)
{
    srv_req_wait(req, what);
    zlistx_add_end(mk->waiters, req);
    /* a kernel from the warm pool is ready already: answer now */
    if (what != SRV_WAIT_RESTART && what != SRV_WAIT_DELETE && mk->ever_ready && !mk->doomed) {
        korch_kernel_state_t ks = korch_kernel_state(mk->k);
        if (ks == KORCH_KERNEL_IDLE || ks == KORCH_KERNEL_BUSY)
            srv_api_kernel_ready(mk);
    }
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
    static const char *const hints[] = {"KERNEL_LAUNCH_TIMEOUT", "KERNEL_WORKING_DIR"};
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
    srv_state_t *st = srv_state(s);
    if (st->opts.max_kernels > 0 && srv_kernels_live(s) >= (size_t)st->opts.max_kernels) {
        srv_respond_error(req, 403, "maximum number of kernels reached (%d); shut one down first",
                          st->opts.max_kernels);
        return NULL;
    }
    /* a ready kernel from the warm pool when there is one */
    srv_kernel_t *mk = s_env_needs_fresh_start(env) ? NULL : srv_pool_take(s, name);
    if (mk)
        return mk;
    korch_err_t err = {0};
    mk = srv_kernel_start(s, name, env, &err);
    if (!mk)
        srv_respond_error(req, err.rc == KORCH_E_NOTFOUND ? notfound_status
                               : err.rc == KORCH_E_INVALID ? 400
                                                           : 500,
                          "%s", err.msg);
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
    const char *name = json_is_string(jn) && *json_string_value(jn) ? json_string_value(jn)
                                                                    : srv_state(s)->opts.kernel;
    srv_kernel_t *mk = s_start(s, req, name, env, 404);
    if (!mk)
        return;
    snprintf(req->location, sizeof req->location, "/api/kernels/%s", mk->id);
    s_wait_on(mk, req, SRV_WAIT_START);
}

static void s_kernels(korch_server_t *s, srv_req_t *req, char **seg, int nseg, json_t *body)
{
    const char *m = req->method;
    if (nseg == 2) {
        if (strcmp(m, "GET") == 0) {
            json_t *list = json_array();
            for (srv_kernel_t *mk = zhashx_first(srv_state(s)->kernels); mk;
                 mk = zhashx_next(srv_state(s)->kernels))
                json_array_append_new(list, srv_kernel_model(mk));
            srv_respond(req, 200, list);
        } else if (strcmp(m, "POST") == 0)
            s_kernels_post(s, req, body);
        else
            srv_respond_error(req, 405, "method not allowed");
        return;
    }
    srv_kernel_t *mk = srv_kernel_find(s, seg[2]);
    if (!mk) {
        srv_respond_error(req, 404, "Kernel does not exist: %.80s", seg[2]);
        return;
    }
    korch_err_t err = {0};
    if (nseg == 3) {
        if (strcmp(m, "GET") == 0)
            srv_respond(req, 200, srv_kernel_model(mk));
        else if (strcmp(m, "DELETE") == 0)
            srv_kernel_delete(mk, req);
        else
            srv_respond_error(req, 405, "method not allowed");
        return;
    }
    if (nseg != 4 || strcmp(m, "POST") != 0) {
        srv_respond_error(req, nseg == 4 && strcmp(seg[3], "channels") == 0 ? 400 : 404,
                          nseg == 4 && strcmp(seg[3], "channels") == 0 ? "a websocket upgrade is needed" : "not found");
        return;
    }
    if (strcmp(seg[3], "interrupt") == 0) {
        if (korch_kernel_interrupt(mk->k, &err) != KORCH_OK)
            srv_respond_error(req, 500, "%s", err.msg);
        else
            srv_respond(req, 204, NULL);
    } else if (strcmp(seg[3], "restart") == 0) {
        if (srv_kernel_restart(mk, &err) != KORCH_OK)
            srv_respond_error(req, 500, "%s", err.msg);
        else
            s_wait_on(mk, req, SRV_WAIT_RESTART);
    } else
        srv_respond_error(req, 404, "not found");
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
    json_t *existing = s_session_by_path(s, json_string_value(path));
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
    json_t *sess = json_pack("{s:s, s:O, s:s, s:s, s:s}", "id", id, "path", path, "name",
                             json_is_string(jname) ? json_string_value(jname) : "", "type", ptype, "kernel_id", "");
    if (!sess) {
        srv_respond_error(req, 500, "out of memory");
        return;
    }
    if (kid) {
        srv_kernel_t *mk = srv_kernel_find(s, kid);
        if (!mk) {
            json_decref(sess);
            srv_respond_error(req, 404, "Kernel does not exist: %.80s", kid);
            return;
        }
        json_object_set_new(sess, "kernel_id", json_string(mk->id));
        zhashx_insert(srv_state(s)->sessions, id, sess);
        snprintf(req->location, sizeof req->location, "/api/sessions/%s", id);
        srv_respond(req, 201, s_session_model(s, sess));
        return;
    }
    srv_kernel_t *mk = s_start(s, req, kname ? kname : srv_state(s)->opts.kernel, NULL, 501);
    if (!mk) {
        json_decref(sess);
        return;
    }
    json_object_set_new(sess, "kernel_id", json_string(mk->id));
    zhashx_insert(srv_state(s)->sessions, id, sess);
    snprintf(req->location, sizeof req->location, "/api/sessions/%s", id);
    snprintf(req->arg, sizeof req->arg, "%s", id);
    s_wait_on(mk, req, SRV_WAIT_SESSION);
}

static void s_sessions_patch(korch_server_t *s, srv_req_t *req, json_t *sess, json_t *body)
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
        srv_kernel_t *mk = srv_kernel_find(s, kid);
        if (!mk) {
            srv_respond_error(req, 400, "No such kernel: %.80s", kid);
            return;
        }
        json_object_set_new(sess, "kernel_id", json_string(mk->id));
        srv_respond(req, 200, s_session_model(s, sess));
        srv_kernel_t *before = strcmp(old, mk->id) != 0 ? srv_kernel_find(s, old) : NULL;
        if (before)
            srv_kernel_delete(before, NULL);
        return;
    }
    if (kname) {
        srv_kernel_t *mk = s_start(s, req, kname, NULL, 501);
        if (!mk)
            return;
        snprintf(req->arg, sizeof req->arg, "%s", json_string_value(json_object_get(sess, "id")));
        snprintf(req->arg2, sizeof req->arg2, "%s", old);
        s_wait_on(mk, req, SRV_WAIT_SESSION_PATCH);
        return;
    }
    json_t *model = s_session_model(s, sess);
    if (model)
        srv_respond(req, 200, model);
    else
        srv_respond_error(req, 404, "the session's kernel is gone");
}

static void s_sessions(korch_server_t *s, srv_req_t *req, char **seg, int nseg, json_t *body)
{
    const char *m = req->method;
    zhashx_t *all = srv_state(s)->sessions;
    if (nseg == 2) {
        if (strcmp(m, "GET") == 0) {
            json_t *list = json_array();
            for (json_t *sess = zhashx_first(all); sess; sess = zhashx_next(all)) {
                json_t *model = s_session_model(s, sess);
                if (model)
                    json_array_append_new(list, model);
            }
            srv_respond(req, 200, list);
        } else if (strcmp(m, "POST") == 0)
            s_sessions_post(s, req, body);
        else
            srv_respond_error(req, 405, "method not allowed");
        return;
    }
    json_t *sess = nseg == 3 ? zhashx_lookup(all, seg[2]) : NULL;
    json_t *model = sess ? s_session_model(s, sess) : NULL;
    if (!model) {
        if (sess)
            zhashx_delete(all, seg[2]); /* its kernel is gone */
        srv_respond_error(req, 404, "Session not found: %.80s", nseg >= 3 ? seg[2] : "");
        return;
    }
    if (strcmp(m, "GET") == 0)
        srv_respond(req, 200, model);
    else if (strcmp(m, "PATCH") == 0) {
        json_decref(model);
        s_sessions_patch(s, req, sess, body);
    } else if (strcmp(m, "DELETE") == 0) {
        json_decref(model);
        srv_kernel_t *mk = srv_kernel_find(s, json_string_value(json_object_get(sess, "kernel_id")));
        zhashx_delete(all, seg[2]);
        if (mk)
            srv_kernel_delete(mk, req);
        else
            srv_respond(req, 204, NULL);
    } else {
        json_decref(model);
        srv_respond_error(req, 405, "method not allowed");
    }
}

/* ------------------------------------------------------------- routing */

static void s_kernelspecs(korch_server_t *s, srv_req_t *req, char **seg, int nseg)
{
    if (strcmp(req->method, "GET") != 0) {
        srv_respond_error(req, 405, "method not allowed");
        return;
    }
    json_t *list = korch_kernelspec_list();
    if (!list) {
        srv_respond_error(req, 500, "cannot list kernelspecs");
        return;
    }
    if (nseg == 2) {
        srv_respond(req, 200, json_pack("{s:s, s:o}", "default", srv_state(s)->opts.kernel, "kernelspecs", list));
        return;
    }
    json_t *one = nseg == 3 ? json_object_get(list, seg[2]) : NULL;
    if (one)
        srv_respond(req, 200, json_incref(one));
    else
        srv_respond_error(req, 404, "Kernel spec %.80s not found", nseg >= 3 ? seg[2] : "");
    json_decref(list);
}

static void s_status(korch_server_t *s, srv_req_t *req)
{
    srv_state_t *st = srv_state(s);
    int conns = 0;
    for (srv_kernel_t *mk = zhashx_first(st->kernels); mk; mk = zhashx_next(st->kernels))
        conns += (int)zlistx_size(mk->conns);
    json_t *status = json_pack("{s:s, s:s, s:i, s:i}", "started", st->started, "last_activity", st->last_activity,
                               "kernels", (int)zhashx_size(st->kernels), "connections", conns);
    json_t *pool = srv_pool_status(s); /* korch's own key; Jupyter clients ignore it */
    if (status && pool)
        json_object_set_new(status, "pool", pool);
    else
        json_decref(pool);
    srv_respond(req, 200, status);
}

json_t *srv_req_json(srv_req_t *req, bool *bad)
{
    *bad = false;
    if (!req->body_len)
        return NULL;
    json_error_t jerr;
    json_t *body = json_loadb(req->body, req->body_len, JSON_REJECT_DUPLICATES, &jerr);
    if (!json_is_object(body)) {
        srv_respond_error(req, 400, "malformed JSON body: %s", body ? "not an object" : jerr.text);
        json_decref(body);
        *bad = true;
        return NULL;
    }
    return body;
}

void srv_api(korch_server_t *s, srv_req_t *req)
{
    char path[sizeof req->path];
    snprintf(path, sizeof path, "%s", req->path);
    size_t plen = strlen(path);
    if (plen > 1 && path[plen - 1] == '/')
        path[plen - 1] = 0;
    char *seg[MAX_SEGS];
    int nseg = 0;
    for (char *save = NULL, *p = strtok_r(path, "/", &save); p; p = strtok_r(NULL, "/", &save)) {
        if (nseg == MAX_SEGS) {
            srv_respond_error(req, 404, "not found");
            return;
        }
        seg[nseg++] = p;
    }
    if (nseg == 1 && strcmp(seg[0], "metrics") == 0) { /* GET /metrics, Prometheus' text (metrics.c) */
        srv_metrics_respond(s, req);
        return;
    }
    if (nseg == 3 && strcmp(seg[0], "kernelspecs") == 0) { /* a kernelspec's logo (resources.c) */
        srv_kernelspec_resource(s, req, seg[1], seg[2]);
        return;
    }
    if (nseg == 0 || strcmp(seg[0], "api") != 0) {
        srv_respond_error(req, 404, "not found");
        return;
    }
    if (nseg >= 2 && strcmp(seg[1], "agent") == 0) { /* parses its own bodies (uploads are raw) */
        srv_agent_api(s, req, seg, nseg);
        return;
    }
    bool bad = false;
    json_t *body = srv_req_json(req, &bad);
    if (bad)
        return;
    if (nseg == 1) {
        if (strcmp(req->method, "GET") == 0)
            srv_respond(req, 200, json_pack("{s:s}", "version", KORCH_VERSION));
        else
            srv_respond_error(req, 405, "method not allowed");
    } else if (strcmp(seg[1], "status") == 0 && nseg == 2)
        s_status(s, req);
    else if (strcmp(seg[1], "kernelspecs") == 0)
        s_kernelspecs(s, req, seg, nseg);
    else if (strcmp(seg[1], "kernels") == 0)
        s_kernels(s, req, seg, nseg, body);
    else if (strcmp(seg[1], "sessions") == 0)
        s_sessions(s, req, seg, nseg, body);
    else
        srv_respond_error(req, 404, "not found");
    json_decref(body);
}
