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
#include "server_int.h"
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

#define MAX_SSE_PENDING (64u << 20)     /* bytes waiting for a stream's client before it is dropped */
#define KEEPALIVE_MS 15000               /* an SSE comment while a turn is quiet (proxies time out) */
#define MAX_TRANSCRIPT (256u << 20)
#define MAX_NOTEBOOK (256u << 20)
#define MAX_LOG_BYTES (16u << 20)       /* a turn's event log for GET .../events */
#define MAX_FOLLOWERS 16                 /* GET .../events streams per session */

/* starting: its kernel and agent are getting ready (for a new session, or
   for a stopped one that got a message); stopped: on disk only, with no
   kernel (after a restart of the server, or when its kernel was shut
   down or culled): the next message resumes it in a fresh kernel. */
typedef enum { A_STARTING, A_IDLE, A_RUNNING, A_STOPPED } s_state_t;

static const char *s_state_names[] = {"starting", "idle", "running", "stopped"};

typedef struct srv_agent srv_agent_t;

struct srv_agent {
    korch_server_t *srv;
    srv_agent_cfg_t cfg;        /* what its actor reads; cfg.cancel is set by main */
    char id[40];
    char kernel_id[40];         /* "" when stopped */
    char created[32], last_activity[32];
    bool owns_kernel;
    bool reattaching;           /* starting on its own kernel from before korch's restart (re-adopted) */
    bool announce_live;         /* the next turn is told it resumed in that kernel */
    char saved_kernel[40];      /* stopped, loaded from disk: the kernel session.json names ("" none) */
    bool saved_owns;            /* and whether the session owned it */
    bool doomed;                /* deleted: freed when its actor has gone */
    s_state_t state;
    int turns;
    int64_t tokens;
    json_t *usage;              /* the session's tokens as the last turn's done said them (null = unknown), or NULL */
    char error[512];            /* why it stopped, for the model */
    json_t *files;              /* names uploaded through the API */
    json_t *pending_files;      /* [{name, data(base64)}] to put once the kernel is ready */
    char *pending_question;     /* a message that resumed a stopped session */
    zactor_t *actor;
    srv_kwait_t *waiting;       /* for its kernel to be ready */
    korch_op_t *start_op;       /* putting pending_files[start_next - 1] into the new kernel */
    size_t start_next;
    zlistx_t *fileops;          /* s_fileop_t* (owned): PUT / GET of files/ on its kernel */
    srv_req_t *creating;        /* POST waiting for the agent to be ready */
    srv_req_t *stream;          /* the running turn's event stream (its POST) */
    bool detach;                /* that POST's client may leave: the turn goes on */
    bool turn_open;             /* from the POST to its `done` */
    uint64_t next_id;           /* the SSE id of the turn's next event */
    zlistx_t *log;              /* s_logged_t* (owned): the turn's events so far */
    size_t log_bytes;
    uint64_t log_dropped;       /* events dropped from the log's front */
    zlistx_t *followers;        /* srv_req_t* of GET .../events (owned streams) */
    int keepalive;              /* timer, -1 none */
};

/* One event as written on the wire ("id: N\nevent: NAME\ndata: JSON\n\n"). */
typedef struct {
    uint64_t id;
    size_t len;
    char text[];
} s_logged_t;

/* ============================================================ main side */

struct srv_agents {
    korch_server_t *srv;
    zhashx_t *all;              /* agent session id -> srv_agent_t (owned) */
    zlistx_t *doomed;           /* srv_agent_t* deleted, waiting for their threads to end (owned) */
};

static zhashx_t *s_all(korch_server_t *s) { return srv_parts(s)->agents->all; }
static zlistx_t *s_doomed(korch_server_t *s) { return srv_parts(s)->agents->doomed; }
static srv_kmgr_t *s_kmgr(korch_server_t *s) { return srv_parts(s)->kmgr; }
static const korch_server_opts_t *s_opts(korch_server_t *s) { return srv_parts(s)->opts; }

static void s_touch(srv_agent_t *sa) { korch_iso8601_now(sa->last_activity); }

static bool s_isolated(korch_server_t *s)
{
    /* every kernel has a work dir of its own (containers), not a host dir */
    korch_launcher_t *l = s_opts(s)->launcher;
    return (korch_launcher_caps(l) & KORCH_LAUNCHER_CONFINED) != 0;
}

static json_t *s_budget_json(const srv_agent_t *sa);
static void s_budget_set(srv_agent_t *sa, json_t *b);

static json_t *s_model(srv_agent_t *sa)
{
    json_t *m = json_pack("{s:s, s:o, s:s, s:s, s:s, s:s, s:s, s:i, s:I, s:O, s:b}", "id", sa->id, "kernel_id",
                          sa->kernel_id[0] ? json_string(sa->kernel_id) : json_null(), "kernel_name",
                          sa->cfg.kernel_name, "llm", sa->cfg.llm, "created", sa->created, "last_activity",
                          sa->last_activity, "state", s_state_names[sa->state], "turns", sa->turns, "tokens",
                          (json_int_t)sa->tokens, "files", sa->files, "owns_kernel", sa->owns_kernel);
    if (m && sa->usage)
        json_object_set(m, "usage", sa->usage);
    if (m)
        json_object_set_new(m, "budget", s_budget_json(sa));
    if (m && sa->state == A_STOPPED && sa->error[0])
        json_object_set_new(m, "stopped_because", json_string(sa->error));
    return m;
}

/* session.json: what a restarted server needs to list and resume it. */
static void s_save(srv_agent_t *sa)
{
    json_t *j = json_pack("{s:i, s:s, s:s, s:s, s:s, s:i, s:I, s:O}", "version", 1, "id", sa->id, "llm", sa->cfg.llm,
                          "kernel_name", sa->cfg.kernel_name, "created", sa->created, "turns", sa->turns, "tokens",
                          (json_int_t)sa->tokens, "files", sa->files);
    if (j)
        json_object_set_new(j, "budget", s_budget_json(sa));
    /* its kernel, for a korch serve restarted with the same --instance to
       give back (a hint only: srv_agents_load's reader checks it) */
    if (j && sa->state != A_STOPPED && sa->kernel_id[0]) {
        json_object_set_new(j, "kernel_id", json_string(sa->kernel_id));
        json_object_set_new(j, "owns_kernel", json_boolean(sa->owns_kernel));
    }
    char *text = j ? json_dumps(j, JSON_INDENT(1)) : NULL;
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/session.json", sa->cfg.dir);
    korch_err_t err = {0};
    if (!text || korch_write_file(path, text, strlen(text), &err) != KORCH_OK)
        korch_warn("agent session %s: cannot save its state: %s", sa->id, text ? err.msg : "out of memory");
    free(text);
    json_decref(j);
}

static void s_followers_end(srv_agent_t *sa);
static void s_log_clear(srv_agent_t *sa);

static void s_fileops_cancel(srv_agent_t *sa, int status, const char *why);

static void s_free(srv_agent_t **psa)
{
    srv_agent_t *sa = *psa;
    if (!sa)
        return;
    *psa = NULL;
    json_decref(sa->usage);
    if (sa->keepalive >= 0)
        korch_loop_timer_end(srv_parts(sa->srv)->loop, sa->keepalive);
    if (sa->actor) {
        korch_loop_reader_end(srv_parts(sa->srv)->loop, zactor_sock(sa->actor));
        atomic_store(&sa->cfg.cancel, 1);
        zactor_destroy(&sa->actor); /* $TERM, then joins */
    }
    srv_kwait_cancel(&sa->waiting);
    korch_op_cancel(&sa->start_op);
    s_fileops_cancel(sa, 503, "the agent session is gone");
    zlistx_destroy(&sa->fileops);
    if (sa->creating)
        srv_respond_error(sa->creating, 503, "the server is shutting down");
    if (sa->stream) {
        srv_stream_end(sa->stream);
        srv_stream_release(&sa->stream);
    }
    s_followers_end(sa);
    zlistx_destroy(&sa->followers);
    s_log_clear(sa);
    zlistx_destroy(&sa->log);
    if (sa->doomed && sa->cfg.dir[0]) /* DELETE: the session's files go with it */
        korch_fs_rm_tree(sa->cfg.dir); /* never through the kernel's links */
    json_decref(sa->files);
    json_decref(sa->pending_files);
    free(sa->pending_question);
    free(sa);
}

/* ---------------------------------------------------------- streams */

static void s_log_clear(srv_agent_t *sa)
{
    s_logged_t *e;
    while (sa->log && (e = zlistx_first(sa->log))) {
        zlistx_delete(sa->log, zlistx_cursor(sa->log));
        free(e);
    }
    sa->log_bytes = 0;
    sa->log_dropped = 0;
}

static void s_log_add(srv_agent_t *sa, uint64_t id, const char *text, size_t len)
{
    s_logged_t *e = malloc(sizeof *e + len);
    if (!e)
        return;
    e->id = id;
    e->len = len;
    memcpy(e->text, text, len);
    zlistx_add_end(sa->log, e);
    sa->log_bytes += len;
    while (sa->log_bytes > MAX_LOG_BYTES && zlistx_size(sa->log) > 1) {
        s_logged_t *old = zlistx_first(sa->log);
        zlistx_delete(sa->log, zlistx_cursor(sa->log));
        sa->log_bytes -= old->len;
        sa->log_dropped++;
        free(old);
    }
}

/* The followers' streams end (a `done` was written to them, or the session goes). */
static void s_followers_end(srv_agent_t *sa)
{
    srv_req_t *f;
    while (sa->followers && (f = zlistx_first(sa->followers))) {
        zlistx_delete(sa->followers, zlistx_cursor(sa->followers));
        srv_stream_end(f);
        srv_stream_release(&f);
    }
}

/* Write to every subscriber of the turn; one that does not read is dropped
   (the POST's client cancels the turn then, unless it detached). */
static void s_stream_write_all(srv_agent_t *sa, const char *buf, size_t n)
{
    if (sa->stream && srv_stream_write(sa->stream, buf, n, MAX_SSE_PENDING) == KORCH_E_TOOBIG) {
        srv_stream_release(&sa->stream);
        if (!sa->detach) { /* treated as a client that left (the turn is cancelled) */
            atomic_store(&sa->cfg.cancel, 1);
            if (sa->actor)
                zstr_send(sa->actor, "INTERRUPT");
        }
    }
    srv_req_t *slow[MAX_FOLLOWERS];
    size_t nslow = 0;
    for (srv_req_t *f = sa->followers ? zlistx_first(sa->followers) : NULL; f; f = zlistx_next(sa->followers))
        if (srv_stream_write(f, buf, n, MAX_SSE_PENDING) == KORCH_E_TOOBIG && nslow < MAX_FOLLOWERS)
            slow[nslow++] = f;
    for (size_t i = 0; i < nslow; i++) {
        zlistx_delete(sa->followers, zlistx_find(sa->followers, slow[i]));
        srv_stream_release(&slow[i]);
    }
}

static int s_on_keepalive(korch_loop_t *loop, int id, void *arg)
{
    srv_agent_t *sa = arg;
    s_stream_write_all(sa, ": keepalive\n\n", 13);
    return 0;
}

static void s_stream_event(srv_agent_t *sa, const char *name, const char *json)
{
    if (!sa->turn_open)
        return;
    size_t nl = strlen(name), jl = strlen(json);
    char *buf = malloc(nl + jl + 64);
    if (!buf)
        return;
    uint64_t id = sa->next_id++;
    int n = snprintf(buf, nl + jl + 64, "id: %llu\nevent: %s\ndata: %s\n\n", (unsigned long long)id, name, json);
    s_log_add(sa, id, buf, (size_t)n);
    s_stream_write_all(sa, buf, (size_t)n);
    free(buf);
}

static void s_stream_eventj(srv_agent_t *sa, const char *name, json_t *data)
{
    char *text = data ? json_dumps(data, JSON_COMPACT) : NULL;
    json_decref(data);
    if (text)
        s_stream_event(sa, name, text);
    free(text);
}

/* The turn's last event, then the stream ends. */
static void s_stream_done(srv_agent_t *sa, const char *done_json)
{
    if (sa->keepalive >= 0)
        korch_loop_timer_end(srv_parts(sa->srv)->loop, sa->keepalive);
    sa->keepalive = -1;
    s_stream_event(sa, "done", done_json);
    if (sa->stream) {
        srv_stream_end(sa->stream);
        srv_stream_release(&sa->stream);
    }
    s_followers_end(sa);
    s_log_clear(sa);
    sa->turn_open = false;
}

/* A turn that ends here rather than in the agent (it was deleted, its start
   failed): done as the agent's would be, with no tokens spent this turn. */
static void s_stream_end_turn(srv_agent_t *sa, const char *status, const char *msg)
{
    json_t *session = sa->usage ? json_incref(sa->usage) : json_pack("{s:i, s:i, s:i}", "input", 0, "output", 0, "calls", 0);
    json_t *done = json_pack("{s:s, s:s, s:s, s:i, s:i, s:{s:{s:i, s:i, s:i}, s:o}, s:{s:n, s:n}}", "event", "done",
                             "status", status, "message", msg, "steps", 0, "elapsed_ms", 0, "tokens", "turn", "input",
                             0, "output", 0, "calls", 0, "session", session, "cost", "turn", "session");
    char *text = done ? json_dumps(done, JSON_COMPACT) : NULL;
    s_stream_done(sa, text ? text : "{}");
    free(text);
    json_decref(done);
}

/* ------------------------------------------------------- lifecycle */

/* No kernel any more (it was shut down, culled or died for good, or the
   session's start failed): stop the actor; the next message resumes. */
static void s_stop(srv_agent_t *sa, const char *why)
{
    if (sa->state == A_STOPPED)
        return;
    korch_info("agent session %s stopped: %s", sa->id, why);
    snprintf(sa->error, sizeof sa->error, "%s", why);
    sa->state = A_STOPPED;
    if (sa->actor) {
        atomic_store(&sa->cfg.cancel, 1);
        zstr_send(sa->actor, "$TERM"); /* its last "done" ends a running turn's stream */
    }
    srv_kwait_cancel(&sa->waiting);
    korch_op_cancel(&sa->start_op);
    s_fileops_cancel(sa, 409, "the session's kernel was shut down");
    srv_kernel_t *mk = sa->owns_kernel ? srv_kmgr_find(s_kmgr(sa->srv), sa->kernel_id) : NULL;
    sa->kernel_id[0] = 0;
    sa->owns_kernel = false;
    sa->reattaching = sa->announce_live = false;
    sa->cfg.resume_live = false;
    srv_kmgr_delete(mk);
    if (!sa->doomed) /* no kernel to give back after a restart */
        s_save(sa);
}

/* Deleted: unlisted now, freed (with its directory) once its actor has gone. */
static void s_doom(srv_agent_t *sa)
{
    sa->doomed = true;
    zhashx_t *all = s_all(sa->srv);
    if (zhashx_lookup(all, sa->id) == sa)
        zhashx_delete(all, sa->id);
    if (sa->creating)
        srv_respond_error(sa->creating, 503, "the agent session was deleted while it started");
    sa->creating = NULL;
    s_stream_end_turn(sa, "interrupted", "the session was deleted");
    s_stop(sa, "deleted");
    if (!sa->actor) {
        s_free(&sa);
        return;
    }
    zlistx_add_end(s_doomed(sa->srv), sa);
}

/* Starting (a new session, or resuming one) failed. */
static void s_fail(srv_agent_t *sa, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void s_fail(srv_agent_t *sa, int status, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    korch_warn("agent session %s: %s", sa->id, msg);
    if (sa->creating) { /* nobody has seen this session: it goes */
        srv_respond_error(sa->creating, status, "%s", msg);
        sa->creating = NULL;
        s_doom(sa);
        return;
    }
    free(sa->pending_question);
    sa->pending_question = NULL;
    s_stream_eventj(sa, "error", json_pack("{s:s}", "message", msg));
    s_stream_end_turn(sa, "error", msg);
    s_stop(sa, msg);
}

static void s_ask(srv_agent_t *sa, const char *question)
{
    sa->state = A_RUNNING;
    atomic_store(&sa->cfg.cancel, 0);
    zstr_sendx(sa->actor, "ASK", question, NULL);
}

static int s_on_actor(korch_loop_t *loop, zsock_t *sock, void *arg)
{
    srv_agent_t *sa = arg;
    zmsg_t *m = zmsg_recv(sock);
    if (!m)
        return 0;
    char *cmd = zmsg_signal(m) >= 0 ? NULL : zmsg_popstr(m); /* a signal: the thread's last word */
    if (!cmd) {
        zmsg_destroy(&m);
        return 0;
    }
    if (strcmp(cmd, "ready") == 0 && sa->state == A_STARTING) {
        sa->state = A_IDLE;
        korch_notice("agent session %s ready on kernel %s%s", sa->id, sa->kernel_id,
                     sa->reattaching ? " (its own, re-adopted: nothing rebuilt)" : "");
        sa->announce_live = sa->reattaching && !sa->pending_question; /* a waiting turn was told already */
        sa->reattaching = false;
        s_save(sa); /* its kernel's id, for a restart */
        if (sa->creating) {
            srv_respond(sa->creating, 201, s_model(sa));
            sa->creating = NULL;
        }
        if (sa->pending_question) {
            s_ask(sa, sa->pending_question);
            free(sa->pending_question);
            sa->pending_question = NULL;
        }
    } else if (strcmp(cmd, "failed") == 0) {
        char *why = zmsg_popstr(m);
        s_fail(sa, 500, "cannot start the agent: %s", why ? why : "unknown error");
        free(why);
    } else if (strcmp(cmd, "event") == 0) {
        char *name = zmsg_popstr(m), *json = zmsg_popstr(m);
        if (name && json)
            s_stream_event(sa, name, json);
        free(name);
        free(json);
    } else if (strcmp(cmd, "done") == 0) {
        char *json = zmsg_popstr(m);
        json_t *d = json ? json_loads(json, 0, NULL) : NULL;
        json_t *used = json_object_get(json_object_get(d, "tokens"), "session");
        if (json_is_object(used)) {
            json_decref(sa->usage);
            sa->usage = json_deep_copy(used);
            /* what was reported; s_model's "usage" says what is unknown */
            sa->tokens = json_integer_value(json_object_get(used, "input")) +
                         json_integer_value(json_object_get(used, "output"));
        }
        const char *status = json_string_value(json_object_get(d, "status"));
        srv_parts(sa->srv)->metrics->agent_turns[!status || strcmp(status, "ok") == 0 ? 0
                                                : strcmp(status, "interrupted") == 0 ? 1 : 2]++;
        json_decref(d);
        s_stream_done(sa, json ? json : "{}");
        free(json);
        if (sa->state == A_RUNNING)
            sa->state = A_IDLE;
        sa->turns++;
        s_touch(sa);
        if (!sa->doomed)
            s_save(sa);
    } else if (strcmp(cmd, "bye") == 0) {
        /* the actor has finished: join it */
        korch_loop_reader_end(loop, sock);
        zactor_destroy(&sa->actor);
        free(cmd);
        zmsg_destroy(&m);
        zlistx_t *doomed = s_doomed(sa->srv);
        void *h = zlistx_find(doomed, sa);
        if (h) {
            zlistx_delete(doomed, h);
            s_free(&sa);
        }
        return 0;
    }
    free(cmd);
    zmsg_destroy(&m);
    return 0;
}

/* ------------------------------------------------------ the kernel */


/* A container's work dir is its own: keep a copy of each uploaded file in
   the session's files/ so a resumed session (a new container) gets it back.
   A local kernel works in files/ itself. */
static void s_keep_copy(srv_agent_t *sa, const char *rel, const void *data, size_t len)
{
    if (!s_isolated(sa->srv))
        return;
    char dir[PATH_MAX + 8];
    snprintf(dir, sizeof dir, "%s/files", sa->cfg.dir);
    korch_err_t err = {0};
    korch_fs_opts_t o = {.mode = 0644};
    if (korch_fs_write_rel(dir, rel, data, len, true, &o, &err) != KORCH_OK)
        korch_warn("agent session %s: cannot keep a copy of '%s': %s", sa->id, rel, err.msg);
}

static void s_add_file(srv_agent_t *sa, const char *name)
{
    size_t i;
    json_t *v;
    json_array_foreach(sa->files, i, v) if (strcmp(json_string_value(v), name) == 0) return;
    json_array_append_new(sa->files, json_string(name));
}

/* The files are in: write the connection file, start the actor. */
static void s_start_actor(srv_agent_t *sa, srv_kernel_t *mk)
{
    korch_err_t err = {0};
    json_array_clear(sa->pending_files);
    if (korch_conn_save(korch_kernel_conn(mk->k), sa->cfg.conn_path, &err) != KORCH_OK) {
        s_fail(sa, 500, "cannot write the kernel's connection file: %s", err.msg);
        return;
    }
    sa->actor = srv_agent_actor_new(&sa->cfg);
    if (!sa->actor) {
        s_fail(sa, 500, "cannot start the agent's thread");
        return;
    }
    korch_loop_reader(srv_parts(sa->srv)->loop, zactor_sock(sa->actor), s_on_actor, sa);
}

static void s_put_next(srv_agent_t *sa);

static void s_on_pending_put(korch_rc_t rc, const korch_err_t *err, void *arg)
{
    srv_agent_t *sa = arg;
    sa->start_op = NULL;
    json_t *f = json_array_get(sa->pending_files, sa->start_next - 1);
    const char *name = json_string_value(json_object_get(f, "name"));
    if (rc != KORCH_OK) {
        s_fail(sa, 500, "cannot put '%s' into the kernel's work dir: %s", name, err ? err->msg : "unknown error");
        return;
    }
    s_add_file(sa, name);
    s_put_next(sa);
}

/* Put the next pending file (asynchronously: a container's archive upload
   never blocks the loop), or, when all are in, start the actor. */
static void s_put_next(srv_agent_t *sa)
{
    srv_kernel_t *mk = srv_kmgr_find(s_kmgr(sa->srv), sa->kernel_id);
    korch_proc_t *proc = mk ? korch_kernel_proc(mk->k) : NULL;
    if (!proc) {
        s_fail(sa, 409, "the kernel went away while the session started");
        return;
    }
    if (sa->start_next >= json_array_size(sa->pending_files)) {
        s_start_actor(sa, mk);
        return;
    }
    json_t *f = json_array_get(sa->pending_files, sa->start_next++);
    const char *name = json_string_value(json_object_get(f, "name"));
    const char *b64 = json_string_value(json_object_get(f, "data"));
    size_t len = 0;
    korch_err_t err = {0};
    unsigned char *data = korch_b64_decode(b64, strlen(b64), &len);
    if (!data) {
        s_fail(sa, 500, "cannot put '%s' into the kernel's work dir: out of memory", name);
        return;
    }
    if (sa->creating) /* a new session: its copy for a resumed container */
        s_keep_copy(sa, name, data, len);
    sa->start_op = korch_proc_put_file(proc, name, data, len, s_on_pending_put, sa, &err); /* data copied */
    free(data);
    if (!sa->start_op)
        s_fail(sa, 500, "cannot put '%s' into the kernel's work dir: %s", name, err.msg);
}

/* The kernel is ready: put the files, then the actor. */
static void s_kernel_ready(srv_agent_t *sa, srv_kernel_t *mk)
{
    sa->start_next = 0;
    s_put_next(sa);
}

static void s_resume(srv_agent_t *sa, const char *question);
static void s_claim_any(srv_agents_t *a, srv_kernel_t *mk);

/* Its kernel got ready, or failed first. */
static void s_on_kernel_ready(srv_kernel_t *mk, const char *error, void *arg)
{
    srv_agent_t *sa = arg;
    sa->waiting = NULL;
    if (!error) {
        s_kernel_ready(sa, mk);
        return;
    }
    sa->kernel_id[0] = 0; /* the server cleans a failed kernel up itself */
    sa->owns_kernel = false;
    if (sa->reattaching) { /* as if it had not been re-adopted: stopped, or resumed for a waiting turn */
        char why[512];
        snprintf(why, sizeof why, "its kernel could not be re-adopted after the server restarted: %.300s", error);
        char *q = sa->pending_question;
        sa->pending_question = NULL;
        s_stop(sa, why);
        if (q)
            s_resume(sa, q);
        free(q);
        return;
    }
    s_fail(sa, mk->doomed ? 409 : 500, "the kernel did not start: %s", error);
}

/* The kernel manager's listener: a kernel is gone, sessions on it are stopped. */
static void s_on_kernel(srv_kernel_t *mk, srv_kev_t ev, const char *detail, void *arg)
{
    srv_agents_t *a = arg;
    if (ev == SRV_KEV_STARTED && mk->adopted) { /* a session's own kernel from before the restart? */
        s_claim_any(a, mk);
        return;
    }
    if (ev == SRV_KEV_RESTARTING || ev == SRV_KEV_DEAD) {
        /* its process is replaced or gone, and with it the ops on it (the
           launcher cancels them): answer what waited on them */
        for (srv_agent_t *sa = zhashx_first(a->all); sa; sa = zhashx_next(a->all))
            if (strcmp(sa->kernel_id, mk->id) == 0)
                s_fileops_cancel(sa, 503, "the session's kernel restarted or died meanwhile");
        zlistx_t *list = zhashx_values(a->all);
        for (srv_agent_t *sa = list ? zlistx_first(list) : NULL; sa; sa = zlistx_next(list))
            if (strcmp(sa->kernel_id, mk->id) == 0 && sa->start_op) {
                korch_op_cancel(&sa->start_op);
                s_fail(sa, 500, "the kernel %s while the session started", ev == SRV_KEV_DEAD ? "died" : "restarted");
            }
        zlistx_destroy(&list);
        return;
    }
    if (ev != SRV_KEV_GONE)
        return;
    zlistx_t *list = zhashx_values(a->all);
    for (srv_agent_t *sa = list ? zlistx_first(list) : NULL; sa; sa = zlistx_next(list))
        if (strcmp(sa->kernel_id, mk->id) == 0) {
            sa->owns_kernel = false;
            if (sa->state == A_RUNNING)
                s_stream_eventj(sa, "error", json_pack("{s:s}", "message", "the session's kernel was shut down"));
            s_stop(sa, "its kernel was shut down");
        }
    zlistx_destroy(&list);
}

static int s_attach(srv_agent_t *sa, srv_kernel_t *mk, char *why, size_t why_len);

/* Give the session a kernel: kernel_id's (attach), else a new one it owns.
   Returns 0, or an HTTP status with why. */
static int s_begin(srv_agent_t *sa, const char *name, const char *kernel_id, char *why, size_t why_len)
{
    korch_server_t *s = sa->srv;
    const korch_server_opts_t *o = s_opts(s);
    srv_kernel_t *mk = NULL;
    if (kernel_id) {
        mk = srv_kmgr_find(s_kmgr(s), kernel_id);
        if (!mk || mk->doomed) {
            snprintf(why, why_len, "no kernel '%s'", kernel_id);
            return 404;
        }
    } else {
        if (o->max_kernels > 0 && (int)srv_kmgr_count(s_kmgr(s)) >= o->max_kernels) {
            snprintf(why, why_len, "the kernel limit (%d) is reached", o->max_kernels);
            return 403;
        }
        /* a warm kernel where each has a work dir of its own (containers);
           a local one starts in the session's files/ */
        if (s_isolated(s))
            mk = srv_pool_take(srv_parts(s)->pool, name);
        if (!mk) {
            char cwd[PATH_MAX + 8];
            snprintf(cwd, sizeof cwd, "%s/files", sa->cfg.dir);
            korch_err_t err = {0};
            mk = srv_kmgr_start(s_kmgr(s), &(srv_kstart_t){.name = name, .cwd = s_isolated(s) ? NULL : cwd}, &err);
            if (!mk) {
                snprintf(why, why_len, "%s", err.msg);
                return korch_rc_http_status(err.rc);
            }
        }
        sa->owns_kernel = true;
    }
    sa->saved_kernel[0] = 0; /* on a kernel now: nothing to claim after a restart */
    sa->cfg.resume_live = false;
    return s_attach(sa, mk, why, why_len);
}

/* The session goes onto mk (owns_kernel said already): starting until mk
   is ready. Returns 0, or an HTTP status with why. */
static int s_attach(srv_agent_t *sa, srv_kernel_t *mk, char *why, size_t why_len)
{
    korch_server_t *s = sa->srv;
    /* a local kernel of ours works in files/: the agent watches it for what the code writes */
    if (sa->owns_kernel && !s_isolated(s))
        snprintf(sa->cfg.workdir, sizeof sa->cfg.workdir, "%s/files", sa->cfg.dir);
    else
        sa->cfg.workdir[0] = 0;
    /* a container's work dir is in its volume: the agent lists it from inside the kernel */
    sa->cfg.workdir_in_kernel = sa->owns_kernel && s_isolated(s);
    snprintf(sa->kernel_id, sizeof sa->kernel_id, "%s", mk->id);
    snprintf(sa->cfg.kernel_name, sizeof sa->cfg.kernel_name, "%s", mk->name);
    sa->state = A_STARTING;
    sa->error[0] = 0;
    /* ready now (a pool kernel, a running one): a loop round later */
    sa->waiting = srv_kernel_when_ready(mk, s_on_kernel_ready, sa);
    if (!sa->waiting) {
        snprintf(why, why_len, "the kernel is being shut down");
        return 409;
    }
    return 0;
}

/* A session loaded from disk goes back onto the kernel its session.json
   names, now that the kernel manager re-adopts it: never trusting the
   file, only a kernel re-adopted from an earlier korch of this instance
   (no client started it), of the session's kernelspec, and only one no
   other session is on. The agent
   then rebuilds nothing (resume_live). True when it did. */
static bool s_claim(srv_agent_t *sa, srv_kernel_t *mk)
{
    srv_agents_t *a = srv_parts(sa->srv)->agents;
    if (sa->doomed || sa->state != A_STOPPED || !sa->saved_kernel[0] || strcmp(sa->saved_kernel, mk->id) != 0 ||
        !mk->adopted || mk->doomed || mk->pooled || strcmp(mk->name, sa->cfg.kernel_name) != 0)
        return false;
    for (srv_agent_t *o = a ? zhashx_first(a->all) : NULL; o; o = zhashx_next(a->all))
        if (o != sa && strcmp(o->kernel_id, mk->id) == 0) {
            korch_warn("agent session %s: kernel %s is session %s's already; resuming in a fresh kernel instead",
                       sa->id, mk->id, o->id);
            sa->saved_kernel[0] = 0;
            return false;
        }
    sa->saved_kernel[0] = 0;
    sa->owns_kernel = sa->saved_owns;
    sa->reattaching = true;
    sa->cfg.resume_live = true;
    snprintf(sa->error, sizeof sa->error, "the server restarted");
    char why[256];
    if (s_attach(sa, mk, why, sizeof why) != 0) { /* doomed meanwhile: stays stopped */
        sa->state = A_STOPPED;
        sa->owns_kernel = sa->reattaching = sa->cfg.resume_live = false;
        sa->kernel_id[0] = 0;
        return false;
    }
    korch_notice("agent session %s: going back onto its kernel %s, re-adopted", sa->id, mk->id);
    return true;
}

/* mk re-adopted: the first stopped session whose kernel it was goes back
   onto it; any other that names it is told it is taken (s_claim). */
static void s_claim_any(srv_agents_t *a, srv_kernel_t *mk)
{
    zlistx_t *list = zhashx_values(a->all);
    for (srv_agent_t *sa = list ? zlistx_first(list) : NULL; sa; sa = zlistx_next(list))
        if (strcmp(sa->saved_kernel, mk->id) == 0)
            s_claim(sa, mk);
    zlistx_destroy(&list);
}

/* ----------------------------------------------------------- create */

/* files: [{name, content, format: text|base64}] -> [{name, data: base64}] or an error. */
static json_t *s_check_files(json_t *files, char *why, size_t why_len)
{
    json_t *out = json_array();
    size_t i;
    json_t *f;
    if (files && !json_is_array(files)) {
        snprintf(why, why_len, "'files' must be an array of {name, content, format}");
        goto fail;
    }
    json_array_foreach(files, i, f) {
        for (size_t j = 0; j < i; j++)
            if (json_equal(json_object_get(json_array_get(files, j), "name"), json_object_get(f, "name"))) {
                snprintf(why, why_len, "files[%zu] and files[%zu] are both named '%s': give each file its own name",
                         j, i, json_string_value(json_object_get(f, "name")));
                goto fail;
            }
        const char *name = json_string_value(json_object_get(f, "name"));
        const char *content = json_string_value(json_object_get(f, "content"));
        const char *format = json_string_value(json_object_get(f, "format"));
        if (!name || !content) {
            snprintf(why, why_len, "files[%zu] needs a 'name' and a string 'content'", i);
            goto fail;
        }
        if (!korch_safe_relpath(name)) {
            snprintf(why, why_len, "file name '%s' is not a plain path inside the work dir", name);
            goto fail;
        }
        if (format && strcmp(format, "text") != 0 && strcmp(format, "base64") != 0) {
            snprintf(why, why_len, "files[%zu]: format '%s' is not 'text' or 'base64'", i, format);
            goto fail;
        }
        char *b64 = NULL;
        if (format && strcmp(format, "base64") == 0) {
            size_t n = 0;
            unsigned char *raw = korch_b64_decode(content, strlen(content), &n);
            if (!raw) {
                snprintf(why, why_len, "files[%zu] ('%s'): content is not valid base64", i, name);
                goto fail;
            }
            free(raw);
            b64 = strdup(content);
        } else
            b64 = korch_b64_encode((const unsigned char *)content, json_string_length(json_object_get(f, "content")));
        json_array_append_new(out, json_pack("{s:s, s:s}", "name", name, "data", b64 ? b64 : ""));
        free(b64);
    }
    return out;
fail:
    json_decref(out);
    return NULL;
}

/* Whether this server can talk to the model at all (a key it lacks, an
   unknown provider, no model): said at once, not when the first message
   fails. Makes no request. */
static bool s_llm_usable(const char *spec, char *why, size_t why_len)
{
    korch_llm_opts_t lo = {0};
    korch_err_t err = {0};
    korch_llm_t *llm = NULL;
    if (korch_llm_parse_spec(spec, &lo, &err) == KORCH_OK)
        llm = korch_llm_new(&lo, &err);
    if (llm) {
        korch_llm_destroy(&llm);
        return true;
    }
    const char *key = lo.provider ? korch_llm_key_env(lo.provider) : NULL;
    if (key && (!getenv(key) || !*getenv(key)))
        snprintf(why, why_len,
                 "this server has no API key for '%s': set %s in the environment of korch serve (or ask for "
                 "another \"llm\")", spec, key);
    else
        snprintf(why, why_len, "cannot use llm '%s': %s", spec, err.msg);
    return false;
}

static const char *s_llm_spec(korch_server_t *s, json_t *body, char *why, size_t why_len)
{
    json_t *j = json_object_get(body, "llm");
    const char *want = json_string_value(j);
    if (j && !want) {
        snprintf(why, why_len, "'llm' must be a string \"provider:model\"");
        return NULL;
    }
    if (want) {
        /* a client picks the provider and model; where requests go and with
           which key is the server's configuration alone */
        korch_llm_opts_t lo = {0};
        korch_err_t err = {0};
        if (korch_llm_parse_spec(want, &lo, &err) != KORCH_OK) {
            snprintf(why, why_len, "%s", err.msg);
            return NULL;
        }
        if (strcmp(lo.provider, "openai") != 0 && strcmp(lo.provider, "anthropic") != 0 &&
            strcmp(lo.provider, "ollama") != 0) {
            snprintf(why, why_len, "llm provider '%s' cannot be chosen by a client (openai, anthropic or ollama)",
                     lo.provider);
            return NULL;
        }
        return s_llm_usable(want, why, why_len) ? want : NULL;
    }
    const char *dflt = s_opts(s)->llm;
    if (!dflt || !*dflt)
        dflt = getenv("KORCH_LLM");
    return dflt && *dflt ? dflt : "";
}

static const char *s_base(korch_server_t *s)
{
    const char *b = s_opts(s)->agent_dir;
    return b && *b ? b : "korch-sessions";
}

/* A session's budgets ({tokens, seconds, cost}, each optional): numbers
   >= 0; cost needs the server's price table. */
static bool s_budget_ok(korch_server_t *s, json_t *b, char *why, size_t len)
{
    if (!b)
        return true;
    const char *k;
    json_t *v;
    if (!json_is_object(b))
        goto bad;
    json_object_foreach(b, k, v) {
        if ((strcmp(k, "tokens") != 0 && strcmp(k, "seconds") != 0 && strcmp(k, "cost") != 0) || !json_is_number(v) ||
            json_number_value(v) < 0)
            goto bad;
    }
    if (json_object_get(b, "cost") && !s_opts(s)->agent_prices) {
        snprintf(why, len, "a cost budget needs a price table: start korch serve with --prices FILE (or KORCH_PRICES)");
        return false;
    }
    return true;
bad:
    snprintf(why, len, "'budget' must be {\"tokens\": N, \"seconds\": N, \"cost\": X} with numbers >= 0 (each optional)");
    return false;
}

/* Lower the server's per-turn budgets to the session's own (never raise them). */
static void s_budget_set(srv_agent_t *sa, json_t *b)
{
    json_t *t = json_object_get(b, "tokens"), *sec = json_object_get(b, "seconds"), *c = json_object_get(b, "cost");
    if (json_is_number(t) && json_number_value(t) > 0 &&
        (!sa->cfg.max_tokens || json_number_value(t) < (double)sa->cfg.max_tokens))
        sa->cfg.max_tokens = (int64_t)json_number_value(t);
    if (json_is_number(sec) && json_number_value(sec) > 0 &&
        (!sa->cfg.max_seconds || json_number_value(sec) < sa->cfg.max_seconds))
        sa->cfg.max_seconds = (int)json_number_value(sec);
    if (json_is_number(c) && json_number_value(c) > 0 && (!sa->cfg.max_cost || json_number_value(c) < sa->cfg.max_cost))
        sa->cfg.max_cost = json_number_value(c);
}

static json_t *s_budget_json(const srv_agent_t *sa)
{
    return json_pack("{s:o, s:o, s:o}", "tokens", sa->cfg.max_tokens ? json_integer(sa->cfg.max_tokens) : json_null(),
                     "seconds", sa->cfg.max_seconds ? json_integer(sa->cfg.max_seconds) : json_null(), "cost",
                     sa->cfg.max_cost > 0 ? json_real(sa->cfg.max_cost) : json_null());
}

static srv_agent_t *s_new(korch_server_t *s, const char *id)
{
    srv_agent_t *sa = calloc(1, sizeof *sa);
    if (!sa)
        return NULL;
    sa->srv = s;
    sa->keepalive = -1;
    sa->files = json_array();
    sa->pending_files = json_array();
    sa->log = zlistx_new();
    sa->followers = zlistx_new();
    sa->fileops = zlistx_new();
    snprintf(sa->id, sizeof sa->id, "%s", id);
    snprintf(sa->cfg.id, sizeof sa->cfg.id, "%s", id);
    sa->cfg.max_steps = s_opts(s)->agent_max_steps;
    sa->cfg.max_tokens = s_opts(s)->agent_max_tokens;
    sa->cfg.max_seconds = s_opts(s)->agent_max_seconds;
    sa->cfg.max_cost = s_opts(s)->agent_max_cost;
    sa->cfg.prices = s_opts(s)->agent_prices;
    snprintf(sa->cfg.dir, sizeof sa->cfg.dir, "%s/%s", s_base(s), id);
    snprintf(sa->cfg.conn_path, sizeof sa->cfg.conn_path, "%s/kernel.json", sa->cfg.dir);
    if (!sa->files || !sa->pending_files || !sa->log || !sa->followers || !sa->fileops) {
        s_free(&sa);
        return NULL;
    }
    return sa;
}

static void s_create(korch_server_t *s, srv_req_t *req, json_t *body)
{
    const korch_server_opts_t *o = s_opts(s);
    char why[sizeof ((korch_err_t *)0)->msg + 256]; /* an error's message and more: never cut */
    if (o->max_agent_sessions > 0 && (int)zhashx_size(s_all(s)) >= o->max_agent_sessions) {
        srv_respond_error(req, 403, "the agent session limit (%d) is reached", o->max_agent_sessions);
        return;
    }
    const char *llm = s_llm_spec(s, body, why, sizeof why);
    if (!llm) {
        srv_respond_error(req, 400, "%s", why);
        return;
    }
    if (!*llm) {
        srv_respond_error(req, 503,
                          "no LLM is configured on this server: start korch serve with --llm PROVIDER:MODEL "
                          "(or set KORCH_LLM), or send \"llm\" in the request");
        return;
    }
    if (!json_object_get(body, "llm") && !s_llm_usable(llm, why, sizeof why)) {
        srv_respond_error(req, 503, "the server's own llm is not usable: %s", why); /* its configuration, not the request */
        return;
    }
    json_t *jk = json_object_get(body, "kernel_id"), *jn = json_object_get(body, "kernel_name");
    if ((jk && !json_is_string(jk)) || (jn && !json_is_string(jn))) {
        srv_respond_error(req, 400, "'kernel_id' and 'kernel_name' must be strings");
        return;
    }
    json_t *budget = json_object_get(body, "budget");
    if (!s_budget_ok(s, budget, why, sizeof why)) {
        srv_respond_error(req, 400, "%s", why);
        return;
    }
    json_t *files = s_check_files(json_object_get(body, "files"), why, sizeof why);
    if (!files) {
        srv_respond_error(req, 400, "%s", why);
        return;
    }
    char id[37];
    korch_uuid(id);
    srv_agent_t *sa = s_new(s, id);
    if (!sa) {
        json_decref(files);
        srv_respond_error(req, 500, "out of memory");
        return;
    }
    json_decref(sa->pending_files);
    sa->pending_files = files;
    s_budget_set(sa, budget);
    korch_iso8601_now(sa->created);
    s_touch(sa);
    snprintf(sa->cfg.llm, sizeof sa->cfg.llm, "%s", llm);
    char files_dir[PATH_MAX + 8];
    snprintf(files_dir, sizeof files_dir, "%s/files", sa->cfg.dir);
    korch_err_t merr = {0};
    if (korch_mkdirs(s_base(s), 0755, &merr) != KORCH_OK || mkdir(sa->cfg.dir, 0700) != 0 ||
        mkdir(files_dir, 0755) != 0) {
        if (!merr.rc)
            korch_err_set(&merr, KORCH_E_IO, "cannot create the session dir '%s': %s", sa->cfg.dir, strerror(errno));
        srv_respond_error(req, 500, "%s", merr.msg);
        s_free(&sa);
        return;
    }
    zhashx_insert(s_all(s), sa->id, sa);
    sa->creating = req;
    srv_req_wait(req); /* answered when the agent says ready */
    int status = s_begin(sa, jn ? json_string_value(jn) : o->kernel, json_string_value(jk), why, sizeof why);
    if (status)
        s_fail(sa, status, "%s", why);
}

/* Sessions a previous server left in agent_dir (those with a session.json). */
void srv_agents_load(srv_agents_t *a)
{
    korch_server_t *s = a->srv;
    DIR *d = opendir(s_base(s));
    struct dirent *de;
    int n = 0;
    while (d && (de = readdir(d))) {
        if (de->d_name[0] == '.' || strlen(de->d_name) != 36 || zhashx_lookup(s_all(s), de->d_name))
            continue;
        srv_agent_t *sa = s_new(s, de->d_name);
        char path[PATH_MAX + 16];
        snprintf(path, sizeof path, "%s/session.json", sa ? sa->cfg.dir : "");
        size_t jlen = 0; /* never blocking on a FIFO a local kernel made, never through a link */
        char *jtext = sa ? korch_fs_read(path, 1u << 20, true, &jlen, NULL) : NULL;
        json_t *j = jtext ? json_loadb(jtext, jlen, 0, NULL) : NULL;
        free(jtext);
        const char *llm = json_string_value(json_object_get(j, "llm"));
        const char *kn = json_string_value(json_object_get(j, "kernel_name"));
        const char *id = json_string_value(json_object_get(j, "id"));
        if (!llm || !kn || !id || strcmp(id, de->d_name) != 0) {
            json_decref(j);
            s_free(&sa);
            continue;
        }
        snprintf(sa->cfg.llm, sizeof sa->cfg.llm, "%s", llm);
        snprintf(sa->cfg.kernel_name, sizeof sa->cfg.kernel_name, "%s", kn);
        const char *created = json_string_value(json_object_get(j, "created"));
        snprintf(sa->created, sizeof sa->created, "%s", created ? created : "");
        snprintf(sa->last_activity, sizeof sa->last_activity, "%s", sa->created);
        sa->turns = (int)json_integer_value(json_object_get(j, "turns"));
        sa->tokens = json_integer_value(json_object_get(j, "tokens"));
        s_budget_set(sa, json_object_get(j, "budget"));
        size_t i;
        json_t *v;
        json_array_foreach(json_object_get(j, "files"), i, v) if (json_is_string(v) &&
                                                               korch_safe_relpath(json_string_value(v)))
            json_array_append(sa->files, v);
        /* the kernel it was on: a hint, taken only if the kernel manager re-adopts that kernel (s_claim) */
        json_t *jk = json_object_get(j, "kernel_id");
        if (json_is_string(jk) && json_string_length(jk) < sizeof sa->saved_kernel) {
            snprintf(sa->saved_kernel, sizeof sa->saved_kernel, "%s", json_string_value(jk));
            sa->saved_owns = json_is_true(json_object_get(j, "owns_kernel"));
        }
        json_decref(j);
        sa->state = A_STOPPED;
        snprintf(sa->error, sizeof sa->error, "the server restarted");
        zhashx_insert(s_all(s), sa->id, sa);
        n++;
        srv_kernel_t *mk = sa->saved_kernel[0] ? srv_kmgr_find(s_kmgr(s), sa->saved_kernel) : NULL;
        if (mk) /* re-adopted already (sessions are usually loaded first: then s_on_kernel claims it) */
            s_claim(sa, mk);
    }
    if (d)
        closedir(d);
    if (n)
        korch_notice("%d agent session(s) in %s, resumed on their next message", n, s_base(s));
}

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

/* A stopped session got a message: a fresh kernel, the agent resumes the
   transcript (re-running its successful cells), then the question. */
static void s_resume(srv_agent_t *sa, const char *question)
{
    char note[PATH_MAX + 128];
    snprintf(note, sizeof note, "resuming the session (%s): starting a kernel", sa->error);
    s_stream_eventj(sa, "notice", json_pack("{s:s}", "text", note));
    sa->pending_question = strdup(question);
    json_array_clear(sa->pending_files);
    if (s_isolated(sa->srv)) { /* a new container: the uploads again, from the copies */
        size_t i;
        json_t *v;
        json_array_foreach(sa->files, i, v) {
            char dir[PATH_MAX + 8];
            snprintf(dir, sizeof dir, "%s/files", sa->cfg.dir);
            size_t len = 0;
            char *data = korch_fs_read_rel(dir, json_string_value(v), s_opts(sa->srv)->max_upload, &len,
                                           NULL);
            char *b64 = data ? korch_b64_encode((const unsigned char *)data, len) : NULL;
            if (b64)
                json_array_append_new(sa->pending_files, json_pack("{s:O, s:s}", "name", v, "data", b64));
            free(b64);
            free(data);
        }
    }
    char why[sizeof ((korch_err_t *)0)->msg + 256]; /* an error's message and more: never cut */
    int status = s_begin(sa, sa->cfg.kernel_name, NULL, why, sizeof why);
    if (status)
        s_fail(sa, status, "%s", why);
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
    s_touch(sa);
    s_log_clear(sa);
    sa->turn_open = true;
    sa->next_id = 1;
    sa->detach = json_is_true(detach);
    sa->stream = req;
    srv_stream_begin(req, "text/event-stream", s_on_stream_gone, sa);
    sa->keepalive = korch_loop_timer(srv_parts(sa->srv)->loop, KEEPALIVE_MS, 0, s_on_keepalive, sa);
    if (queue) /* the agent's own notice follows once it is on the kernel */
        s_stream_eventj(sa, "notice", json_pack("{s:s}", "text",
                                                "the server restarted: waiting for the session's kernel, which it is "
                                                "re-adopting"));
    else if (sa->announce_live)
        s_stream_eventj(sa, "notice", json_pack("{s:s}", "text",
                                                "resumed the session in its kernel, which kept running while the "
                                                "server restarted: its variables are as they were"));
    sa->announce_live = false;
    if (queue)
        sa->pending_question = strdup(json_string_value(c));
    else if (sa->state == A_STOPPED)
        s_resume(sa, json_string_value(c));
    else
        s_ask(sa, json_string_value(c));
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
    s_logged_t *first = zlistx_first(sa->log);
    if (sa->log_dropped && first && after + 1 < first->id) {
        char note[160];
        int n = snprintf(note, sizeof note,
                         "event: notice\ndata: {\"text\":\"events 1 to %llu of this turn are no longer kept\"}\n\n",
                         (unsigned long long)first->id - 1);
        srv_stream_write(req, note, (size_t)n, MAX_SSE_PENDING);
    }
    for (s_logged_t *e = first; e; e = zlistx_next(sa->log))
        if (e->id > after && srv_stream_write(req, e->text, e->len, MAX_SSE_PENDING) != KORCH_OK)
            break;
}

/* ------------------------------------------------------------- files */

/* A PUT or GET of a file in the kernel's work dir, under way. */
typedef struct {
    srv_agent_t *sa;
    srv_req_t *req;             /* answered when op ends (or is cancelled) */
    korch_op_t *op;
    char rel[PATH_MAX];
} s_fileop_t;

static s_fileop_t *s_fileop_new(srv_agent_t *sa, srv_req_t *req, const char *rel)
{
    s_fileop_t *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    f->sa = sa;
    f->req = req;
    snprintf(f->rel, sizeof f->rel, "%s", rel);
    return f;
}

/* Its op ended: off the session's list, freed; the request is the caller's. */
static srv_req_t *s_fileop_end(s_fileop_t *f)
{
    srv_req_t *req = f->req;
    void *h = zlistx_find(f->sa->fileops, f);
    if (h)
        zlistx_delete(f->sa->fileops, h);
    free(f);
    return req;
}

/* The session's kernel (or the session) goes: its file ops are cancelled
   and their requests answered. */
static void s_fileops_cancel(srv_agent_t *sa, int status, const char *why)
{
    s_fileop_t *f;
    while (sa->fileops && (f = zlistx_first(sa->fileops))) {
        korch_op_cancel(&f->op);
        srv_respond_error(s_fileop_end(f), status, "%s", why);
    }
}

static void s_on_put_done(korch_rc_t rc, const korch_err_t *err, void *arg);

/* The final move of an upload (spooled to an unnamed file by server.c)
   into the kernel's work dir: the spooled file goes to the launcher's
   put_file_fd (a host work dir is written from it off the loop), a body in
   memory to put_file (which copies it); answered when the op ends. */
static korch_rc_t s_place_upload(srv_agent_t *sa, korch_proc_t *proc, const char *rel, srv_req_t *req,
                                 korch_err_t *err)
{
    s_fileop_t *f = s_fileop_new(sa, req, rel);
    if (!f)
        return korch_err_set(err, KORCH_E_NOMEM, "out of memory");
    const void *data;
    size_t len;
    korch_rc_t rc = KORCH_OK;
    int fd = req->rx && !req->body ? srv_body_fd(req->rx) : -1;
    if (fd >= 0 && !(f->op = korch_proc_put_file_fd(proc, rel, fd, req->body_len, s_on_put_done, f, err)))
        rc = err->rc ? err->rc : KORCH_E_IO;
    if (fd < 0)
        rc = srv_req_upload_map(req, &data, &len, err);
    if (fd < 0 && rc == KORCH_OK && !(f->op = korch_proc_put_file(proc, rel, data, len, s_on_put_done, f, err)))
        rc = err->rc ? err->rc : KORCH_E_IO;
    srv_req_upload_unmap(req);
    if (rc != KORCH_OK) {
        free(f);
        return rc;
    }
    srv_req_wait(req);
    zlistx_add_end(sa->fileops, f);
    return KORCH_OK;
}

static json_t *s_url(srv_agent_t *sa, const char *what, const char *path) { return srv_agent_url(sa->id, what, path); }

static bool s_uploaded(srv_agent_t *sa, const char *name)
{
    size_t i;
    json_t *v;
    json_array_foreach(sa->files, i, v) if (strcmp(json_string_value(v), name) == 0) return true;
    return false;
}

/* Every file in the session's files/ (a local kernel's work dir: uploads
   and what the code wrote; for containers, the copies of the uploads),
   walked without following the kernel's symlinks, bounded. */
static json_t *s_file_list(srv_agent_t *sa)
{
    char dir[PATH_MAX + 16];
    json_t *list = NULL;
    if (s_isolated(sa->srv)) { /* the agent's latest listing from inside the container */
        snprintf(dir, sizeof dir, "%s/workdir.json", sa->cfg.dir);
        size_t len = 0;
        char *text = korch_read_file(dir, 16u << 20, &len, NULL);
        json_t *j = text ? json_loadb(text, len, 0, NULL) : NULL;
        free(text);
        if (json_is_array(j))
            list = j;
        else
            json_decref(j);
    }
    if (!list) {
        snprintf(dir, sizeof dir, "%s/files", sa->cfg.dir);
        korch_workdir_t *w = korch_workdir_new(dir, NULL);
        json_t *scan = w ? korch_workdir_scan(w, NULL) : NULL;
        list = w ? korch_workdir_list(w) : json_array();
        korch_workdir_destroy(&w);
        json_decref(scan);
    }
    size_t i;
    json_t *f;
    json_array_foreach(list, i, f) {
        const char *path = json_string_value(json_object_get(f, "path"));
        json_object_set_new(f, "name", json_string(path));
        json_object_set_new(f, "url", s_url(sa, "files", path));
        json_object_set_new(f, "mime", json_string(korch_mime_for(path)));
        json_object_set_new(f, "uploaded", json_boolean(s_uploaded(sa, path)));
    }
    return list;
}

/* GET .../figures/{name}: a chart the agent kept (figures/fig-N.ext). */
static void s_figure(srv_agent_t *sa, srv_req_t *req, const srv_params_t *p, json_t *body)
{
    const char *name = srv_param(p, "name");
    int num = 0, used = 0;
    char ext[8] = "";
    if (strlen(name) > 40 || sscanf(name, "fig-%d.%7[a-z]%n", &num, ext, &used) != 2 ||
        used != (int)strlen(name) || num <= 0) {
        srv_respond_error(req, 404, "no figure '%s' (figures are named fig-N.png, .jpg or .svg)", name);
        return;
    }
    const char *mime = korch_mime_for(name);
    if (strncmp(mime, "image/", 6) != 0) {
        srv_respond_error(req, 404, "no figure '%s'", name);
        return;
    }
    char dir[PATH_MAX + 16];
    snprintf(dir, sizeof dir, "%s/figures", sa->cfg.dir);
    size_t len = 0;
    korch_err_t err = {0};
    char *data = korch_workdir_read(dir, name, MAX_NOTEBOOK, &len, &err);
    if (!data) {
        srv_respond_error(req, korch_rc_http_status(err.rc), "%s", err.msg);
        return;
    }
    srv_respond_raw(req, 200, mime, data, len);
    free(data);
}

/* The path a files route names, checked; NULL when req has been answered 400. */
static const char *s_rel(srv_req_t *req, const srv_params_t *p)
{
    const char *rel = srv_param(p, "path");
    if (korch_safe_relpath(rel))
        return rel;
    srv_respond_error(req, 400, "'%s' is not a plain path inside the work dir", req->path);
    return NULL;
}

/* The session's kernel process, when it has one running (NULL else). */
static korch_proc_t *s_proc(srv_agent_t *sa)
{
    srv_kernel_t *mk = sa->kernel_id[0] ? srv_kmgr_find(s_kmgr(sa->srv), sa->kernel_id) : NULL;
    return mk && sa->state != A_STARTING ? korch_kernel_proc(mk->k) : NULL;
}

static void s_file_put(srv_agent_t *sa, srv_req_t *req, const srv_params_t *p, json_t *body)
{
    const char *rel = s_rel(req, p);
    if (!rel)
        return;
    korch_proc_t *proc = s_proc(sa);
    korch_err_t err = {0};
    if (!proc) {
        srv_respond_error(req, 409, "the session has no kernel running (it is %s): send a message first",
                          s_state_names[sa->state]);
        return;
    }
    if (s_place_upload(sa, proc, rel, req, &err) != KORCH_OK)
        srv_respond_error(req, err.rc == KORCH_E_INVALID ? 400 : 500, "cannot write '%s': %s", rel, err.msg);
}

static void s_on_put_done(korch_rc_t rc, const korch_err_t *err, void *arg)
{
    s_fileop_t *f = arg;
    f->op = NULL;
    srv_agent_t *sa = f->sa;
    char rel[PATH_MAX];
    snprintf(rel, sizeof rel, "%s", f->rel);
    srv_req_t *req = s_fileop_end(f);
    if (rc != KORCH_OK) {
        srv_respond_error(req, rc == KORCH_E_INVALID ? 400 : 500, "cannot write '%s': %s", rel,
                          err ? err->msg : "unknown error");
        return;
    }
    /* a container's work dir is its own: the copy for a resumed session */
    const void *data;
    size_t len;
    korch_err_t merr = {0};
    if (s_isolated(sa->srv) && srv_req_upload_map(req, &data, &len, &merr) == KORCH_OK)
        s_keep_copy(sa, rel, data, len);
    srv_req_upload_unmap(req);
    bool replaced = s_uploaded(sa, rel);
    s_add_file(sa, rel);
    s_save(sa);
    if (sa->actor)
        zstr_send(sa->actor, "FILES");
    s_touch(sa);
    /* PUT replaces by definition; the answer says when it did */
    srv_respond(req, replaced ? 200 : 201,
                json_pack("{s:s, s:I, s:b, s:o}", "name", rel, "size", (json_int_t)req->body_len, "replaced", replaced,
                          "url", s_url(sa, "files", rel)));
}

static void s_file_respond(srv_req_t *req, const char *rel, korch_rc_t rc, const char *msg, char *data, size_t len)
{
    if (rc != KORCH_OK)
        /* not there, or too big, is the client's to hear; anything else (a link
           the kernel planted, INVALID) is the server's */
        srv_respond_error(req, rc == KORCH_E_NOTFOUND || rc == KORCH_E_TOOBIG ? korch_rc_http_status(rc) : 500, "%s",
                          msg);
    else
        srv_respond_raw(req, 200, korch_mime_for(rel), data, len);
}

static void s_on_get_done(korch_rc_t rc, const korch_err_t *err, char *data, size_t len, void *arg)
{
    s_fileop_t *f = arg;
    f->op = NULL;
    char rel[PATH_MAX];
    snprintf(rel, sizeof rel, "%s", f->rel);
    srv_req_t *req = s_fileop_end(f);
    s_file_respond(req, rel, rc, err ? err->msg : "unknown error", data, len);
    free(data);
}

static void s_file_get(srv_agent_t *sa, srv_req_t *req, const srv_params_t *p, json_t *body)
{
    const char *rel = s_rel(req, p);
    if (!rel)
        return;
    korch_proc_t *proc = s_proc(sa);
    korch_err_t err = {0};
    size_t max = s_opts(sa->srv)->max_upload;
    if (proc) { /* from the kernel (a container's archive download never blocks the loop) */
        s_fileop_t *f = s_fileop_new(sa, req, rel);
        if (f && (f->op = korch_proc_get_file(proc, rel, max, s_on_get_done, f, &err))) {
            srv_req_wait(req);
            zlistx_add_end(sa->fileops, f);
            return;
        }
        free(f);
        s_file_respond(req, rel, f ? err.rc : KORCH_E_NOMEM, f ? err.msg : "out of memory", NULL, 0);
        return;
    }
    /* stopped: what is left on the host, read without following the kernel's symlinks */
    char dir[PATH_MAX + 8];
    size_t len = 0;
    snprintf(dir, sizeof dir, "%s/files", sa->cfg.dir);
    char *data = korch_workdir_read(dir, rel, max, &len, &err);
    s_file_respond(req, rel, data ? KORCH_OK : err.rc, err.msg, data, len);
    free(data);
}

bool srv_agent_upload_ok(korch_server_t *s, srv_req_t *req)
{
    const char *id = srv_param(&req->params, "session_id");
    srv_agent_t *sa = zhashx_lookup(s_all(s), id);
    if (!sa) {
        srv_respond_error(req, 404, "no agent session '%s'", id);
        return false;
    }
    srv_kernel_t *mk = sa->kernel_id[0] ? srv_kmgr_find(s_kmgr(s), sa->kernel_id) : NULL;
    if (!mk || sa->state == A_STARTING) {
        srv_respond_error(req, 409, "the session has no kernel running (it is %s): send a message first",
                          s_state_names[sa->state]);
        return false;
    }
    return true;
}

/* ------------------------------------------------------ the others */

static void s_get(srv_agent_t *sa, srv_req_t *req, const srv_params_t *p, json_t *body)
{
    json_t *m = s_model(sa);
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
            srv_respond_raw(req, 200, "application/x-ipynb+json", text, strlen(text));
        else
            srv_respond_error(req, 500, "the session's notebook cannot be read as JSON");
        free(text);
        json_decref(c);
        json_decref(doc);
    } else
        srv_respond_raw(req, 200, "application/x-ipynb+json", nb, len);
    free(nb);
}

static void s_on_gone(const char *kernel_id, void *arg) { srv_respond(arg, 204, NULL); }

static void s_delete(srv_agent_t *sa, srv_req_t *req, const srv_params_t *p, json_t *body)
{
    korch_notice("agent session %s deleted", sa->id);
    srv_kernel_t *mk = sa->owns_kernel ? srv_kmgr_find(s_kmgr(req->srv), sa->kernel_id) : NULL;
    sa->owns_kernel = false; /* deleted below, answering req once it is gone */
    s_doom(sa);
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
    srv_respond(req, 200, s_file_list(sa));
}

/* ------------------------------------------------------ the handlers */

void srv_agent_list(korch_server_t *s, srv_req_t *req, const srv_params_t *p, json_t *body)
{
    json_t *list = json_array();
    for (srv_agent_t *sa = zhashx_first(s_all(s)); sa; sa = zhashx_next(s_all(s)))
        json_array_append_new(list, s_model(sa));
    srv_respond(req, 200, list);
}

void srv_agent_create(korch_server_t *s, srv_req_t *req, const srv_params_t *p, json_t *body)
{
    s_create(s, req, body);
}

/* What a route under /api/agent/sessions/{session_id} does with its session. */
typedef void s_session_fn(srv_agent_t *sa, srv_req_t *req, const srv_params_t *p, json_t *body);

/* fn with the session the path names, or 404. */
static void s_with(korch_server_t *s, srv_req_t *req, const srv_params_t *p, json_t *body, s_session_fn *fn)
{
    const char *id = srv_param(p, "session_id");
    srv_agent_t *sa = zhashx_lookup(s_all(s), id);
    if (sa)
        fn(sa, req, p, body);
    else
        srv_respond_error(req, 404, "no agent session '%s'", id);
}

void srv_agent_get(korch_server_t *s, srv_req_t *req, const srv_params_t *p, json_t *body)
{
    s_with(s, req, p, body, s_get);
}

void srv_agent_delete(korch_server_t *s, srv_req_t *req, const srv_params_t *p, json_t *body)
{
    s_with(s, req, p, body, s_delete);
}

void srv_agent_message(korch_server_t *s, srv_req_t *req, const srv_params_t *p, json_t *body)
{
    s_with(s, req, p, body, s_message);
}

void srv_agent_interrupt(korch_server_t *s, srv_req_t *req, const srv_params_t *p, json_t *body)
{
    s_with(s, req, p, body, s_interrupt);
}

void srv_agent_notebook(korch_server_t *s, srv_req_t *req, const srv_params_t *p, json_t *body)
{
    s_with(s, req, p, body, s_notebook);
}

void srv_agent_events(korch_server_t *s, srv_req_t *req, const srv_params_t *p, json_t *body)
{
    s_with(s, req, p, body, s_follow);
}

void srv_agent_files(korch_server_t *s, srv_req_t *req, const srv_params_t *p, json_t *body)
{
    s_with(s, req, p, body, s_files);
}

void srv_agent_file_get(korch_server_t *s, srv_req_t *req, const srv_params_t *p, json_t *body)
{
    s_with(s, req, p, body, s_file_get);
}

void srv_agent_file_put(korch_server_t *s, srv_req_t *req, const srv_params_t *p, json_t *body)
{
    s_with(s, req, p, body, s_file_put);
}

void srv_agent_figure(korch_server_t *s, srv_req_t *req, const srv_params_t *p, json_t *body)
{
    s_with(s, req, p, body, s_figure);
}

void srv_agents_count(srv_agents_t *a, uint64_t n[4])
{
    memset(n, 0, 4 * sizeof *n);
    for (srv_agent_t *sa = zhashx_first(a->all); sa; sa = zhashx_next(a->all))
        n[sa->state]++;
}

srv_agents_t *srv_agents_new(korch_server_t *s)
{
    srv_agents_t *a = calloc(1, sizeof *a);
    if (!a || !(a->all = zhashx_new()) || !(a->doomed = zlistx_new())) {
        if (a)
            zhashx_destroy(&a->all);
        free(a);
        return NULL;
    }
    a->srv = s;
    srv_kmgr_listen(srv_parts(s)->kmgr, s_on_kernel, a);
    return a;
}

void srv_agents_destroy(srv_agents_t **pa)
{
    srv_agents_t *a = *pa;
    if (!a)
        return;
    srv_agent_t *sa;
    while ((sa = zhashx_first(a->all))) {
        zhashx_delete(a->all, sa->id);
        s_free(&sa);
    }
    while ((sa = zlistx_first(a->doomed))) {
        zlistx_delete(a->doomed, zlistx_cursor(a->doomed));
        s_free(&sa);
    }
    srv_kmgr_unlisten(srv_parts(a->srv)->kmgr, s_on_kernel, a);
    zhashx_destroy(&a->all);
    zlistx_destroy(&a->doomed);
    free(a);
    *pa = NULL;
}
