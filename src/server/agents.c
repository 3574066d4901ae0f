/*  The agent API: agent sessions served over REST, their turns streamed as
 *  server-sent events.
 *
 *  The routes (POST /api/agent/sessions to create one, GET .../{session_id}
 *  with its transcript, POST .../messages for a turn, PUT and GET
 *  .../files/{path*}, ...) are in routes.c's table, each naming its handler
 *  here; src/server/openapi.yaml describes every route and event. An
 *  upload (PUT .../files/{path*}) is spooled to disk as it arrives
 *  (server.c) and checked before its bytes come (srv_agent_upload_ok).
 *
 *  Threads. A korch_agent blocks while it thinks (libcurl easy) and owns its
 *  korch_llm, so each session runs its agent in an actor (agent_actor.c)
 *  with a loop of its own. The kernel is one of the server's kernels, owned
 *  by the main thread like any other: the actor attaches to it through its
 *  connection file (korch_agent_opts_t.existing), so a notebook attached to
 *  the same kernel over the websocket sees every execution of the agent
 *  live, and the kernel's lifecycle (restarts, culling, shutdown) stays the
 *  server's. The session struct outlives its thread: it is freed only after
 *  zactor_destroy.
 *
 *  Persistence. A session is a directory under opts.agent_dir: session.json
 *  (what this file needs to list and resume it), the agent's
 *  transcript.jsonl, notebook.ipynb and figures/, and files/ (a local
 *  kernel's work dir; for containers, copies of the uploads). A session
 *  without a kernel - after a server restart, or once its kernel was shut
 *  down or culled - is "stopped"; its next message starts a kernel and the
 *  agent resumes the transcript, re-running its successful cells.
 *  session.json also names the session's kernel: when a restarted korch
 *  serve of the same --instance re-adopts that very kernel (kmgr.c), the
 *  session goes back onto it at once (its variables live: the agent
 *  rebuilds nothing) and owns it again, as before. Only a kernel the kernel
 *  manager re-adopted, and that no other session is on, is taken; one that
 *  cannot be reached makes the session resume as a stopped one does.
 *
 *  Following a turn. Every event of a turn gets an SSE `id:` (1, 2, ...)
 *  and goes into the turn's log (bounded: the oldest go first past
 *  MAX_LOG_BYTES) as well as to the POST's stream. GET .../events replays
 *  the log after ?after=N (or Last-Event-ID) and then follows the turn live
 *  until its `done`: a page reloaded mid-turn loses nothing. A POST with
 *  "detach": true lets its turn go on when its client leaves (the page
 *  does that); without it, leaving cancels the step, as before.
 */
#include "agents_int.h"
#include "download.h"
#include "relay.h"
#include "quota.h"
#include "audit.h"
#include "korch/agent.h"
#include "korch/launcher.h"
#include "korch/llm.h"
#include "korch/fsutil.h"
#include "korch/log.h"
#include "korch/media.h"
#include "korch/notebook.h"
#include "korch/path.h"
#include "korch/session.h"
#include "korch/workdir.h"
#include "korch/uuid.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------ turns */

static void s_on_stream_gone(srv_req_t *req, void *arg)
{
    srv_agent_t *sa = arg;
    if (sa->stream != req)
        return;
    srv_stream_release(&sa->stream);
    if (sa->detach) {
        korch_info("agent session %s: the client left its stream; the turn goes on (detached)", sa->id);
        return;
    }
    if (sa->state == A_RUNNING || sa->state == A_STARTING) {
        korch_info("agent session %s: the client closed its stream; cancelling the step", sa->id);
        free(sa->pending_question);
        sa->pending_question = NULL;
        atomic_store(&sa->cfg.cancel, 1);
        if (sa->actor)
            zstr_send(sa->actor, "INTERRUPT");
    }
}

void srv_sa_turn_open(srv_agent_t *sa, srv_req_t *req, bool detach)
{
    srv_sa_touch(sa);
    srv_sa_log_clear(sa);
    sa->turn_by = req->user; /* its executions' audit lines are the sender's */
    sa->turn_open = true;
    sa->next_id = 1;
    sa->detach = detach;
    sa->stream = req;
    srv_stream_begin(req, "text/event-stream", s_on_stream_gone, sa);
    sa->keepalive = korch_loop_timer(srv_parts(sa->srv)->loop, KEEPALIVE_MS, 0, srv_sa_on_keepalive, sa);
}

static void s_message(srv_agent_t *sa, srv_req_t *req, const srv_params_t *p, json_t *body)
{
    json_t *c = json_object_get(body, "content");
    if (!json_is_string(c) || json_string_length(c) == 0) {
        srv_respond_error(req, 400, "a message needs a non-empty string 'content'");
        return;
    }
    /* going back onto its re-adopted kernel, no turn yet: this turn waits for it */
    bool queue = sa->state == A_STARTING && sa->reattaching && !sa->pending_question && !sa->creating;
    if (!queue && (sa->state == A_RUNNING || sa->state == A_STARTING)) {
        srv_respond_error(req, 409, "a turn is %s in this session; interrupt it or wait for its 'done'",
                          sa->state == A_RUNNING ? "running" : "starting");
        return;
    }
    json_t *detach = json_object_get(body, "detach");
    if (detach && !json_is_boolean(detach)) {
        srv_respond_error(req, 400, "'detach' must be true or false");
        return;
    }
    if (!srv_quota_turn_ok(sa->srv, req)) /* 429: today's tokens or cost are spent */
        return;
    srv_audit_code(srv_parts(sa->srv)->audit, &req->user, "session.message", "session", sa->id,
                   json_string_value(c), json_string_length(c));
    srv_sa_turn_open(sa, req, json_is_true(detach));
    if (queue) /* the agent's own notice follows once it is on the kernel */
        srv_sa_stream_eventj(sa, "notice", json_pack("{s:s}", "text",
                                                "the server restarted: waiting for the session's kernel, which it is "
                                                "re-adopting"));
    else if (sa->announce_live)
        srv_sa_stream_eventj(sa, "notice", json_pack("{s:s}", "text",
                                                "resumed the session in its kernel, which kept running while the "
                                                "server restarted: its variables are as they were"));
    sa->announce_live = false;
    if (queue)
        sa->pending_question = strdup(json_string_value(c));
    else if (sa->state == A_STOPPED)
        srv_sa_resume(sa, json_string_value(c));
    else
        srv_sa_ask(sa, json_string_value(c));
}

static void s_on_follower_gone(srv_req_t *req, void *arg)
{
    srv_agent_t *sa = arg;
    void *h = zlistx_find(sa->followers, req);
    if (h)
        zlistx_delete(sa->followers, h);
    srv_stream_release(&req);
}

/* GET .../events: the running turn's events after ?after=N (or the
   Last-Event-ID header), then the live ones until its `done`. */
static void s_follow(srv_agent_t *sa, srv_req_t *req, const srv_params_t *p, json_t *body)
{
    if (!sa->turn_open) {
        srv_respond(req, 204, NULL);
        return;
    }
    if (zlistx_size(sa->followers) >= MAX_FOLLOWERS) {
        srv_respond_error(req, 429, "%d clients follow this session's turn already", MAX_FOLLOWERS);
        return;
    }
    char arg[32] = "";
    uint64_t after = 0;
    if (srv_req_query(req, "after", arg, sizeof arg) || srv_req_header(req, "last-event-id:", arg, sizeof arg)) {
        char *end = NULL;
        errno = 0;
        unsigned long long v = strtoull(arg, &end, 10);
        if (errno || end == arg || *end || arg[0] == '-') {
            srv_respond_error(req, 400, "'after' must be an event id (a number), not '%s'", arg);
            return;
        }
        after = v;
    }
    srv_stream_begin(req, "text/event-stream", s_on_follower_gone, sa);
    zlistx_add_end(sa->followers, req);
    srv_sa_logged_t *first = zlistx_first(sa->log);
    if (sa->log_dropped && first && after + 1 < first->id) {
        char note[160];
        int n = snprintf(note, sizeof note,
                         "event: notice\ndata: {\"text\":\"events 1 to %llu of this turn are no longer kept\"}\n\n",
                         (unsigned long long)first->id - 1);
        srv_stream_write(req, note, (size_t)n, MAX_SSE_PENDING);
    }
    for (srv_sa_logged_t *e = first; e; e = zlistx_next(sa->log))
        if (e->id > after && srv_stream_write(req, e->text, e->len, MAX_SSE_PENDING) != KORCH_OK)
            break;
}

/* ------------------------------------------------------ the others */

static void s_get(srv_agent_t *sa, srv_req_t *req, const srv_params_t *p, json_t *body)
{
    json_t *m = srv_sa_model(sa);
    json_t *records = json_array();
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/transcript.jsonl", sa->cfg.dir);
    size_t len = 0;
    char *text = korch_fs_read(path, MAX_TRANSCRIPT, true, &len, NULL);
    /* one record per line; a line being written (no newline yet) is left out */
    for (char *line = text, *nl; line && (nl = memchr(line, '\n', len - (size_t)(line - text))); line = nl + 1) {
        json_t *r = json_loadb(line, (size_t)(nl - line), 0, NULL);
        json_object_del(r, "saved"); /* host paths (older sessions): figures carry names */
        if (r)
            json_array_append_new(records, r);
    }
    free(text);
    json_object_set_new(m, "transcript", records);
    srv_respond(req, 200, m);
}

static void s_notebook(srv_agent_t *sa, srv_req_t *req, const srv_params_t *p, json_t *body)
{
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/notebook.ipynb", sa->cfg.dir);
    size_t len = 0;
    char *nb = korch_fs_read(path, MAX_NOTEBOOK, true, &len, NULL);
    if (!nb) {
        srv_respond_error(req, 404, "the session has no notebook yet");
        return;
    }
    char clean[8];
    if (srv_req_query(req, "clean", clean, sizeof clean) && strcmp(clean, "0") != 0) {
        /* ?clean=1: without the dead ends (korch_notebook_clean) */
        json_t *doc = json_loadb(nb, len, 0, NULL);
        json_t *c = doc ? korch_notebook_clean(doc) : NULL;
        char *text = c ? json_dumps(c, JSON_INDENT(1) | JSON_ENSURE_ASCII) : NULL;
        if (text)
            srv_respond_file(req, "notebook.ipynb", "application/x-ipynb+json", text, strlen(text)); /* outputs are the kernel's */
        else
            srv_respond_error(req, 500, "the session's notebook cannot be read as JSON");
        free(text);
        json_decref(c);
        json_decref(doc);
    } else
        srv_respond_file(req, "notebook.ipynb", "application/x-ipynb+json", nb, len);
    free(nb);
}

static void s_on_gone(const char *kernel_id, void *arg) { srv_respond(arg, 204, NULL); }

static void s_delete(srv_agent_t *sa, srv_req_t *req, const srv_params_t *p, json_t *body)
{
    korch_notice("agent session %s deleted", sa->id);
    srv_audit(srv_parts(req->srv)->audit, &req->user, "session.delete", "session", sa->id, NULL);
    srv_kernel_t *mk = sa->owns_kernel ? srv_kmgr_find(srv_sa_kmgr(req->srv), sa->kernel_id) : NULL;
    sa->owns_kernel = false; /* deleted below, answering req once it is gone */
    srv_sa_doom(sa);
    srv_kmgr_delete(mk);
    srv_req_wait(req);
    if (!mk || !srv_kernel_when_gone(mk, s_on_gone, req))
        srv_respond(req, 204, NULL);
}

static void s_interrupt(srv_agent_t *sa, srv_req_t *req, const srv_params_t *p, json_t *body)
{
    if (sa->state == A_RUNNING) {
        atomic_store(&sa->cfg.cancel, 1);
        zstr_send(sa->actor, "INTERRUPT");
    }
    srv_respond(req, 204, NULL);
}

static void s_files(srv_agent_t *sa, srv_req_t *req, const srv_params_t *p, json_t *body)
{
    srv_respond(req, 200, srv_sa_file_list(sa));
}

/* ------------------------------------------------------ the handlers */

void srv_agent_list(korch_server_t *s, srv_req_t *req, const srv_params_t *p, json_t *body)
{
    json_t *list = json_array();
    for (srv_agent_t *sa = zhashx_first(srv_sa_all(s)); sa; sa = zhashx_next(srv_sa_all(s)))
        if (srv_user_may(&req->user, sa->owner)) /* each user their own; an admin all */
            json_array_append_new(list, srv_sa_model(sa));
    srv_respond(req, 200, list);
}

void srv_agent_create(korch_server_t *s, srv_req_t *req, const srv_params_t *p, json_t *body)
{
    srv_sa_create(s, req, body);
}

/* What a route under /api/agent/sessions/{session_id} does with its session. */
typedef void s_session_fn(srv_agent_t *sa, srv_req_t *req, const srv_params_t *p, json_t *body);

/* fn with the session the path names, or 404. */
static void s_with(korch_server_t *s, srv_req_t *req, const srv_params_t *p, json_t *body, s_session_fn *fn)
{
    const char *id = srv_param(p, "session_id");
    srv_agent_t *sa = zhashx_lookup(srv_sa_all(s), id);
    if (sa && srv_user_may(&req->user, sa->owner)) /* another user's is not there for you (ident.h) */
        fn(sa, req, p, body);
    else
        srv_respond_error(req, 404, "no agent session '%s'", id);
}

/* The same for a route of its files, with the audit log's line. */
static void s_with_file(korch_server_t *s, srv_req_t *req, const srv_params_t *p, json_t *body, s_session_fn *fn,
                        const char *action)
{
    srv_agent_t *sa = zhashx_lookup(srv_sa_all(s), srv_param(p, "session_id"));
    if (sa && srv_user_may(&req->user, sa->owner)) {
        const char *path = srv_param(p, "path");
        json_t *d = json_pack("{s:s}", "path", *path ? path : strcmp(action, "file.download") == 0 ? "notebook.ipynb" : "");
        if (d && strcmp(action, "file.upload") == 0)
            json_object_set_new(d, "size", json_integer((json_int_t)req->body_len));
        srv_audit(srv_parts(s)->audit, &req->user, action, "session", sa->id, d);
    }
    s_with(s, req, p, body, fn);
}

/* The routes under /api/agent/sessions/{session_id}: each is fn with its
   session (routes.h declares them). */
#define SESSION_ROUTE(handler, fn)                                                                              \
    void handler(korch_server_t *s, srv_req_t *req, const srv_params_t *p, json_t *body)                      \
    {                                                                                                           \
        s_with(s, req, p, body, fn);                                                                            \
    }
SESSION_ROUTE(srv_agent_get, s_get)
SESSION_ROUTE(srv_agent_delete, s_delete)
SESSION_ROUTE(srv_agent_message, s_message)
SESSION_ROUTE(srv_agent_interrupt, s_interrupt)
SESSION_ROUTE(srv_agent_events, s_follow)
SESSION_ROUTE(srv_agent_files, s_files)
SESSION_ROUTE(srv_agent_figure, srv_sa_figure)
SESSION_ROUTE(srv_agent_branch, srv_sa_branch)
SESSION_ROUTE(srv_agent_verify, srv_sa_verify)
#define FILE_ROUTE(handler, fn, action)                                                                         \
    void handler(korch_server_t *s, srv_req_t *req, const srv_params_t *p, json_t *body)                      \
    {                                                                                                           \
        s_with_file(s, req, p, body, fn, action);                                                               \
    }
FILE_ROUTE(srv_agent_notebook, s_notebook, "file.download")
FILE_ROUTE(srv_agent_file_get, srv_sa_file_get, "file.download")
FILE_ROUTE(srv_agent_file_put, srv_sa_file_put, "file.upload")
FILE_ROUTE(srv_agent_file_delete, srv_sa_file_delete, "file.delete")

int srv_agents_owned(srv_agents_t *a, const char *name, int *running)
{
    int n = 0;
    *running = 0;
    for (srv_agent_t *sa = a ? zhashx_first(a->all) : NULL; sa; sa = zhashx_next(a->all))
        if (strcmp(sa->owner, name) == 0) {
            n++;
            *running += sa->state == A_RUNNING;
        }
    return n;
}

void srv_agents_count(srv_agents_t *a, uint64_t n[4])
{
    memset(n, 0, 4 * sizeof *n);
    for (srv_agent_t *sa = zhashx_first(a->all); sa; sa = zhashx_next(a->all))
        n[sa->state]++;
}

/* Is an agent's turn running in mk? (Its restart keeps the taint then:
   the agent goes on running code in the new process.) */
static bool s_turn_running(srv_kernel_t *mk, void *arg)
{
    srv_agents_t *a = arg;
    for (srv_agent_t *sa = zhashx_first(a->all); sa; sa = zhashx_next(a->all))
        if ((sa->state == A_RUNNING || (sa->state == A_STARTING && sa->actor)) && strcmp(sa->kernel_id, mk->id) == 0)
            return true;
    return false;
}

srv_agents_t *srv_agents_new(korch_server_t *s)
{
    srv_agents_t *a = calloc(1, sizeof *a);
    if (!a || !(a->all = zhashx_new()) || !(a->doomed = zlistx_new()) || !(a->branching = zlistx_new())) {
        if (a) {
            zhashx_destroy(&a->all);
            zlistx_destroy(&a->doomed);
        }
        free(a);
        return NULL;
    }
    a->srv = s;
    srv_kmgr_listen(srv_parts(s)->kmgr, srv_sa_on_kernel, a);
    if (srv_parts(s)->relay)
        srv_relay_hold_taint(srv_parts(s)->relay, s_turn_running, a);
    return a;
}

void srv_agents_destroy(srv_agents_t **pa)
{
    srv_agents_t *a = *pa;
    if (!a)
        return;
    srv_sa_branches_cancel(a);
    srv_agent_t *sa;
    while ((sa = zhashx_first(a->all))) {
        zhashx_delete(a->all, sa->id);
        srv_sa_free(&sa);
    }
    while ((sa = zlistx_first(a->doomed))) {
        zlistx_delete(a->doomed, zlistx_cursor(a->doomed));
        srv_sa_free(&sa);
    }
    srv_kmgr_unlisten(srv_parts(a->srv)->kmgr, srv_sa_on_kernel, a);
    if (srv_parts(a->srv)->relay)
        srv_relay_hold_taint(srv_parts(a->srv)->relay, NULL, NULL);
    zhashx_destroy(&a->all);
    zlistx_destroy(&a->doomed);
    zlistx_destroy(&a->branching);
    free(a);
    *pa = NULL;
}

size_t srv_agents_closing(const srv_agents_t *a) { return a ? zlistx_size(a->doomed) : 0; }
