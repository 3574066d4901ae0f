/*  POST /api/agent/sessions/{session_id}/branch {step, turn?, content,
 *  llm?, detach?}: a new session made from one of this one's steps
 *  (korch_agent_branch: the conversation up to it, its input files, the
 *  snapshot kept after it), the asker's own, which starts its kernel as a
 *  stopped session resumes (its successful cells re-run and compared, the
 *  snapshot restored over them) and then asks content; the answer is that
 *  turn's stream, as POST .../messages gives, beginning with a `branch`
 *  event naming the new session. The parent is only read: its dir, its
 *  state, its kernel are left as they are (it may even be running a turn:
 *  the steps it finished are complete records). Another user's session is
 *  not there (404), as for every route of a session.
 *
 *  The branch's dir is plain file work that can be big (its transcript, up
 *  to 2 GiB of input files, the figures): korch_agent_branch runs on the
 *  launcher's worker (korch_launcher_host_work), never on the server's
 *  loop; the request is held meanwhile and answered once the dir is made
 *  (a 400 naming the step range when it could not be). The branch is listed
 *  only then. */
#include "agents_int.h"
#include "audit.h"
#include "quota.h"
#include "korch/agent.h"
#include "korch/fsutil.h"
#include "korch/launcher.h"
#include "korch/log.h"
#include "korch/uuid.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "step" / "turn" of body: a whole number from 1, or 0 when absent (turn); -1 bad. */
static int s_int(json_t *body, const char *key)
{
    json_t *v = json_object_get(body, key);
    if (!v)
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 1000000)
        return -1;
    return (int)json_integer_value(v);
}

/* A branch being made: the loop's part, then the worker's (copies only). */
typedef struct {
    korch_server_t *srv;        /* NULL once the server let go of it (srv_sa_branches_cancel) */
    srv_req_t *req;             /* held: answered once the dir is made */
    srv_agent_t *sa;            /* the branch, not listed yet (owned) */
    char *content;              /* the question to ask it */
    bool detach;
    char parent_id[64];
    bool queued;                /* on the worker: s_done frees it */
    /* the worker's */
    char agent_dir[PATH_MAX], parent_dir[PATH_MAX], dir[PATH_MAX], llm[256], id[64];
    int step, turn;
    json_t *info;
    korch_err_t err;
} s_branch_t;

static void s_job_free(s_branch_t *j)
{
    zlistx_t *l = j->srv ? srv_parts(j->srv)->agents->branching : NULL;
    void *h = l ? zlistx_find(l, j) : NULL;
    if (h)
        zlistx_delete(l, h);
    srv_sa_free(&j->sa);
    json_decref(j->info);
    free(j->content);
    free(j);
}

/* On the worker: the dir, from the parent's (only read). */
static void s_run(void *arg)
{
    s_branch_t *j = arg;
    korch_agent_branch_opts_t bo = {.parent_dir = j->parent_dir, .dir = j->dir, .step = j->step, .turn = j->turn,
                                    .llm = j->llm, .parent_id = j->parent_id, .id = j->id};
    if (korch_mkdirs(j->agent_dir, 0755, &j->err) == KORCH_OK)
        korch_agent_branch(&bo, &j->info, &j->err);
}

/* Back on the loop: the branch listed and started, its turn streamed on req. */
static void s_done(void *arg)
{
    s_branch_t *j = arg;
    korch_server_t *s = j->srv;
    if (!s) { /* the server went meanwhile */
        if (j->info)
            korch_fs_rm_tree(j->dir);
        s_job_free(j);
        return;
    }
    srv_req_t *req = j->req;
    srv_agent_t *sa = j->sa;
    if (!j->info) {
        /* a parent with no transcript yet has no step at all */
        if (j->err.rc == KORCH_E_NOTFOUND)
            srv_respond_error(req, 400, "step %d is out of range: the session has no step that ran code yet", j->step);
        else
            srv_respond_error(req, j->err.rc == KORCH_E_INVALID ? 400 : 500, "%s", j->err.msg);
        s_job_free(j);
        return;
    }
    if (!req->wsi) { /* the asker left before it could know the branch's id: nobody's, gone again */
        srv_respond(req, 204, NULL);
        if (srv_sa_opts(s)->launcher)
            korch_launcher_remove_dir(srv_sa_opts(s)->launcher, j->dir);
        else
            korch_fs_rm_tree(j->dir);
        s_job_free(j);
        return;
    }
    json_t *info = j->info;
    j->sa = NULL;
    j->info = NULL;
    size_t i;
    json_t *in;
    json_array_foreach(json_object_get(info, "inputs"), i, in) if (json_is_true(json_object_get(in, "copied")))
        json_array_append(sa->files, json_object_get(in, "name"));
    json_t *par = json_object_get(info, "parent");
    sa->state = A_STOPPED;
    snprintf(sa->error, sizeof sa->error, "a new branch of session %s from its step %d", j->parent_id,
             (int)json_integer_value(json_object_get(par, "index")));
    zhashx_insert(srv_sa_all(s), sa->id, sa);
    srv_sa_save(sa);
    srv_audit(srv_parts(s)->audit, &req->user, "session.branch", "session", sa->id,
              json_pack("{s:s, s:O, s:s}", "parent", j->parent_id, "step", json_object_get(par, "index"), "llm",
                        sa->cfg.llm));
    korch_notice("agent session %s: a branch of %s from its step %d (turn %d, step %d), model %s", sa->id,
                 j->parent_id, (int)json_integer_value(json_object_get(par, "index")),
                 (int)json_integer_value(json_object_get(par, "turn")),
                 (int)json_integer_value(json_object_get(par, "step")), sa->cfg.llm);
    srv_sa_turn_open(sa, req, j->detach);
    srv_sa_stream_eventj(sa, "branch", json_pack("{s:i, s:s, s:O, s:s}", "step", 0, "session", sa->id, "parent", par,
                                                 "llm", sa->cfg.llm));
    json_decref(info);
    srv_sa_resume(sa, j->content);
    s_job_free(j);
}

void srv_sa_branches_cancel(srv_agents_t *a)
{
    s_branch_t *j;
    while (a->branching && (j = zlistx_first(a->branching))) {
        zlistx_delete(a->branching, zlistx_cursor(a->branching));
        srv_sa_free(&j->sa);
        j->srv = NULL; /* its request goes with its connection */
        j->req = NULL;
        if (!j->queued)
            s_job_free(j);
    }
}

void srv_sa_branch(srv_agent_t *parent, srv_req_t *req, const srv_params_t *p, json_t *body)
{
    korch_server_t *s = parent->srv;
    const korch_server_opts_t *o = srv_sa_opts(s);
    char why[sizeof ((korch_err_t *)0)->msg + 256];
    int step = s_int(body, "step"), turn = s_int(body, "turn");
    json_t *c = json_object_get(body, "content"), *detach = json_object_get(body, "detach");
    if (step < 1) {
        srv_respond_error(req, 400,
                          "'step' must be a whole number from 1: the session's N-th step that ran code (with "
                          "'turn': that turn's step N)");
        return;
    }
    if (turn < 0) {
        srv_respond_error(req, 400, "'turn' must be a whole number from 1");
        return;
    }
    if (!json_is_string(c) || json_string_length(c) == 0) {
        srv_respond_error(req, 400, "a branch needs a non-empty string 'content': the question to ask it");
        return;
    }
    if (detach && !json_is_boolean(detach)) {
        srv_respond_error(req, 400, "'detach' must be true or false");
        return;
    }
    const char *llm = json_object_get(body, "llm") ? srv_sa_llm_spec(s, body, why, sizeof why) : parent->cfg.llm;
    if (!llm) {
        srv_respond_error(req, 400, "%s", why);
        return;
    }
    zlistx_t *making = srv_parts(s)->agents->branching;
    if (o->max_agent_sessions > 0 &&
        (int)(zhashx_size(srv_sa_all(s)) + zlistx_size(making)) >= o->max_agent_sessions) {
        srv_respond_error(req, 403, "the agent session limit (%d) is reached", o->max_agent_sessions);
        return;
    }
    int running;
    if (!srv_quota_session_ok(s, req, srv_agents_owned(srv_parts(s)->agents, req->user.name, &running)) ||
        !srv_quota_kernel_ok(s, req) || !srv_quota_turn_ok(s, req))
        return; /* 429 */
    char id[37];
    korch_uuid(id);
    s_branch_t *j = calloc(1, sizeof *j);
    srv_agent_t *sa = j ? srv_sa_new(s, id) : NULL;
    if (!sa || !(j->content = strdup(json_string_value(c))) || !zlistx_add_end(making, j)) {
        srv_sa_free(&sa);
        if (j)
            free(j->content);
        free(j);
        srv_respond_error(req, 500, "out of memory");
        return;
    }
    j->srv = s;
    j->req = req;
    j->sa = sa;
    j->detach = json_is_true(detach);
    j->step = step;
    j->turn = turn;
    snprintf(j->parent_id, sizeof j->parent_id, "%s", parent->id);
    snprintf(j->id, sizeof j->id, "%s", id);
    snprintf(j->llm, sizeof j->llm, "%s", llm);
    snprintf(j->agent_dir, sizeof j->agent_dir, "%s", o->agent_dir && *o->agent_dir ? o->agent_dir : "korch-sessions");
    snprintf(j->parent_dir, sizeof j->parent_dir, "%s", parent->cfg.dir);
    snprintf(j->dir, sizeof j->dir, "%s", sa->cfg.dir);
    /* the asker's, within the parent's budgets (a branch does not escape a lowered one), taken now: the
       parent may go meanwhile */
    snprintf(sa->owner, sizeof sa->owner, "%s", req->user.name);
    snprintf(sa->cfg.llm, sizeof sa->cfg.llm, "%s", llm);
    snprintf(sa->cfg.kernel_name, sizeof sa->cfg.kernel_name, "%s", parent->cfg.kernel_name);
    json_t *budget = srv_sa_budget_json(parent);
    srv_sa_budget_set(sa, budget);
    json_decref(budget);
    korch_iso8601_now(sa->created);
    srv_req_wait(req);
    korch_err_t err = {0};
    if (korch_launcher_host_work(o->launcher, s_run, s_done, j, &err) == KORCH_OK) {
        j->queued = true;
        return;
    }
    korch_warn("agent session %s: its branch dir is made on the loop: %s", id, err.msg);
    s_run(j);
    s_done(j);
}
