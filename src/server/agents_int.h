/*  Inside the agent API (agents*.c): the agent session and what its files
 *  share. Not an API outside src/server (that is server_int.h's srv_agent_*
 *  handlers and srv_agents_*).
 *
 *  The files, top to bottom; each calls only those below it:
 *
 *  agents.c          the route handlers (one per route of routes.c, each
 *                    with the session its path names), turns (POST
 *                    .../messages, GET .../events), srv_agents_new/destroy.
 *  agents_branch.c   a new session from a step of another (POST .../branch).
 *  agents_create.c   creating a session (POST /api/agent/sessions) and
 *                    loading the saved ones at start (srv_agents_load).
 *  agents_files.c    the session's files: uploads, downloads, listing, figures.
 *  agents_kernel.c   the session's kernel: starting or attaching to one,
 *                    putting the pending files, the actor's start, resuming
 *                    a stopped session, the kernel manager's events.
 *  agents_session.c  one session: its model and session.json, freeing it,
 *                    its lifecycle (stop, doom, fail), the actor's events,
 *                    the file ops under way.
 *  agents_sync.c     a confined session's copies of what the code wrote, for a resume.
 *  agents_stream.c   a turn's events: the SSE stream, the log, followers.
 *  agents_budget.c   a session's budgets per turn (tokens, seconds, cost).
 *  agents_verify.c   POST .../verify: the clean notebook re-run in a fresh kernel.
 *
 *  Everything here runs on the server's loop thread; the session's agent
 *  runs in its actor (agent_actor.c) and talks to it through the actor's
 *  pipe only. A json_t argument is borrowed unless the comment says stolen.
 */
#ifndef KORCH_SERVER_AGENTS_INT_H
#define KORCH_SERVER_AGENTS_INT_H

#include "agent_actor.h"
#include "fjournal.h"

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
typedef enum { A_STARTING, A_IDLE, A_RUNNING, A_STOPPED } srv_sa_state_t;

static const char *const srv_sa_state_names[] = {"starting", "idle", "running", "stopped"};

typedef struct srv_agent srv_agent_t;
typedef struct srv_sa_verify srv_sa_verify_t;

struct srv_agent {
    korch_server_t *srv;
    srv_agent_cfg_t cfg;        /* what its actor reads; cfg.cancel is set by main */
    char id[40];
    char owner[64];             /* the user whose session it is (ident.h); "" = nobody's (an admin's) */
    srv_user_t turn_by;         /* who sent the running (or last) turn's message: its executions' audit lines */
    char kernel_id[40];         /* "" when stopped */
    char created[32], last_activity[32];
    bool owns_kernel;
    bool reattaching;           /* starting on its own kernel from before korch's restart (re-adopted) */
    bool announce_live;         /* the next turn is told it resumed in that kernel */
    char saved_kernel[40];      /* stopped, loaded from disk: the kernel session.json names ("" none) */
    bool saved_owns;            /* and whether the session owned it */
    bool doomed;                /* deleted: freed when its actor has gone */
    srv_sa_state_t state;
    int turns;
    int64_t tokens;
    json_t *usage;              /* the session's tokens as the last turn's done said them (null = unknown), or NULL */
    char error[512];            /* why it stopped, for the model */
    json_t *files;              /* names uploaded through the API */
    srv_fjournal_t *journal;    /* uploads and removals, laid over the agent's listing (confined kernels) */
    json_t *pending_files;      /* [{name, data(base64)}] to put once the kernel is ready */
    char *pending_question;     /* a message that resumed a stopped session */
    zactor_t *actor;
    srv_kwait_t *waiting;       /* for its kernel to be ready */
    korch_op_t *start_op;       /* putting pending_files[start_next - 1] into the new kernel */
    size_t start_next;
    zlistx_t *fileops;          /* srv_sa_fileop_t* (owned): PUT / GET of files/ on its kernel */
    zlistx_t *syncs;            /* copies of what the code wrote, being read from its kernel (agents_sync.c) */
    srv_req_t *creating;        /* POST waiting for the agent to be ready */
    srv_req_t *stream;          /* the running turn's event stream (its POST) */
    bool detach;                /* that POST's client may leave: the turn goes on */
    bool turn_open;             /* from the POST to its `done` */
    uint64_t next_id;           /* the SSE id of the turn's next event */
    zlistx_t *log;              /* srv_sa_logged_t* (owned): the turn's events so far */
    size_t log_bytes;
    uint64_t log_dropped;       /* events dropped from the log's front */
    zlistx_t *followers;        /* srv_req_t* of GET .../events (owned streams) */
    int keepalive;              /* timer, -1 none */
    srv_sa_verify_t *verify;    /* a verification under way (agents_verify.c), or NULL */
};

/* One event as written on the wire ("id: N\nevent: NAME\ndata: JSON\n\n"). */
typedef struct {
    uint64_t id;
    size_t len;
    char text[];
} srv_sa_logged_t;

/* ============================================================ main side */

struct srv_agents {
    korch_server_t *srv;
    zhashx_t *all;              /* agent session id -> srv_agent_t (owned) */
    zlistx_t *doomed;           /* srv_agent_t* deleted, waiting for their threads to end (owned) */
    zlistx_t *branching;        /* branches whose dirs are being made (agents_branch.c) */
};

/* A PUT or GET of a file in the kernel's work dir, under way. */
typedef struct {
    srv_agent_t *sa;
    srv_req_t *req;             /* answered when op ends (or is cancelled) */
    korch_op_t *op;
    char rel[PATH_MAX];
    bool remove;                /* a DELETE the actor does (op is NULL): answered by its "removed" */
} srv_sa_fileop_t;

static inline zhashx_t *srv_sa_all(korch_server_t *s) { return srv_parts(s)->agents->all; }
static inline zlistx_t *srv_sa_doomed(korch_server_t *s) { return srv_parts(s)->agents->doomed; }
static inline srv_kmgr_t *srv_sa_kmgr(korch_server_t *s) { return srv_parts(s)->kmgr; }
static inline const korch_server_opts_t *srv_sa_opts(korch_server_t *s) { return srv_parts(s)->opts; }

/* agents_budget.c */
/* Is b (a POST's "budget", may be NULL) {tokens, seconds, cost} of numbers
   >= 0 (cost only with a price table)? Else false and why. */
bool srv_sa_budget_ok(korch_server_t *s, json_t *b, char *why, size_t len);
/* Lower the session's budgets (the server's, in cfg) to b's. */
void srv_sa_budget_set(srv_agent_t *sa, json_t *b);
/* {tokens, seconds, cost}, null where there is none. New object. */
json_t *srv_sa_budget_json(const srv_agent_t *sa);
/* agents_sync.c: a step's "files" changes (borrowed) copied into files/ (confined kernels) */
void srv_sa_sync_step(srv_agent_t *sa, json_t *changes);
void srv_sa_sync_cancel(srv_agent_t *sa);

/* agents_verify.c */
void srv_sa_verify(srv_agent_t *sa, srv_req_t *req, const srv_params_t *p, json_t *body);
/* the actor's "verified" (done_json: the stream's done) */
void srv_sa_verified(srv_agent_t *sa, const char *done_json);
/* the kernel manager's event on mk: the verification's kernel went before the actor had it */
void srv_sa_verify_on_kernel(srv_agent_t *sa, srv_kernel_t *mk, srv_kev_t ev);
/* the session stops or goes: its verification ends (its stream with why) */
void srv_sa_verify_cancel(srv_agent_t *sa, const char *why);

/* agents_stream.c */
void srv_sa_log_clear(srv_agent_t *sa);
void srv_sa_followers_end(srv_agent_t *sa);
int srv_sa_on_keepalive(korch_loop_t *loop, int id, void *arg);
void srv_sa_stream_event(srv_agent_t *sa, const char *name, const char *json);
void srv_sa_stream_eventj(srv_agent_t *sa, const char *name, json_t *data);
void srv_sa_stream_done(srv_agent_t *sa, const char *done_json);
void srv_sa_stream_end_turn(srv_agent_t *sa, const char *status, const char *msg);

/* agents_session.c */
void srv_sa_touch(srv_agent_t *sa);
bool srv_sa_isolated(korch_server_t *s);
json_t *srv_sa_model(srv_agent_t *sa);
void srv_sa_save(srv_agent_t *sa);
void srv_sa_free(srv_agent_t **psa);
void srv_sa_stop(srv_agent_t *sa, const char *why);
void srv_sa_doom(srv_agent_t *sa);
void srv_sa_fail(srv_agent_t *sa, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void srv_sa_ask(srv_agent_t *sa, const char *question);
int srv_sa_on_actor(korch_loop_t *loop, zsock_t *sock, void *arg);
void srv_sa_keep_copy(srv_agent_t *sa, const char *rel, const void *data, size_t len);
void srv_sa_add_file(srv_agent_t *sa, const char *name);
srv_sa_fileop_t *srv_sa_fileop_new(srv_agent_t *sa, srv_req_t *req, const char *rel);
srv_req_t *srv_sa_fileop_end(srv_sa_fileop_t *f);
void srv_sa_fileops_cancel(srv_agent_t *sa, int status, const char *why);
json_t *srv_sa_url(srv_agent_t *sa, const char *what, const char *path);
bool srv_sa_uploaded(srv_agent_t *sa, const char *name);
/* rel was put into the work dir (size bytes) / is gone from it: the uploads, the journal and session.json say so. */
void srv_sa_file_added(srv_agent_t *sa, const char *rel, int64_t size);
void srv_sa_file_gone(srv_agent_t *sa, const char *rel);

/* agents_kernel.c */
void srv_sa_on_kernel(srv_kernel_t *mk, srv_kev_t ev, const char *detail, void *arg);
int srv_sa_begin(srv_agent_t *sa, const char *name, const char *kernel_id, char *why, size_t why_len);
bool srv_sa_claim(srv_agent_t *sa, srv_kernel_t *mk);
void srv_sa_resume(srv_agent_t *sa, const char *question);

/* agents.c: a turn's stream begins on req (its events go there; detach: it goes on when req's client leaves). */
void srv_sa_turn_open(srv_agent_t *sa, srv_req_t *req, bool detach);

/* agents_branch.c: POST .../branch on parent (the asker may use it) */
void srv_sa_branch(srv_agent_t *parent, srv_req_t *req, const srv_params_t *p, json_t *body);
/* The server goes: the branches being made are cut loose (their dirs removed when the worker is done). */
void srv_sa_branches_cancel(srv_agents_t *a);

/* agents_create.c */
void srv_sa_create(korch_server_t *s, srv_req_t *req, json_t *body);
/* A session struct with the server's defaults, its dir named (not made), not listed yet; NULL without memory. */
srv_agent_t *srv_sa_new(korch_server_t *s, const char *id);
/* The model body's "llm" asks for (checked), else the server's; "" none; NULL + why when refused. */
const char *srv_sa_llm_spec(korch_server_t *s, json_t *body, char *why, size_t why_len);

/* agents_files.c */
json_t *srv_sa_file_list(srv_agent_t *sa);
void srv_sa_figure(srv_agent_t *sa, srv_req_t *req, const srv_params_t *p, json_t *body);
void srv_sa_file_put(srv_agent_t *sa, srv_req_t *req, const srv_params_t *p, json_t *body);
void srv_sa_file_get(srv_agent_t *sa, srv_req_t *req, const srv_params_t *p, json_t *body);
void srv_sa_file_delete(srv_agent_t *sa, srv_req_t *req, const srv_params_t *p, json_t *body);

#endif
