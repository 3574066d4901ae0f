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
 *  not there (404), as for every route of a session. */
#include "agents_int.h"
#include "audit.h"
#include "quota.h"
#include "korch/agent.h"
#include "korch/fsutil.h"
#include "korch/log.h"
#include "korch/uuid.h"

#include <stdio.h>
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
    if (o->max_agent_sessions > 0 && (int)zhashx_size(srv_sa_all(s)) >= o->max_agent_sessions) {
        srv_respond_error(req, 403, "the agent session limit (%d) is reached", o->max_agent_sessions);
        return;
    }
    int running;
    if (!srv_quota_session_ok(s, req, srv_agents_owned(srv_parts(s)->agents, req->user.name, &running)) ||
        !srv_quota_kernel_ok(s, req) || !srv_quota_turn_ok(s, req))
        return; /* 429 */
    char id[37];
    korch_uuid(id);
    srv_agent_t *sa = srv_sa_new(s, id);
    if (!sa) {
        srv_respond_error(req, 500, "out of memory");
        return;
    }
    korch_err_t err = {0};
    json_t *info = NULL;
    korch_agent_branch_opts_t bo = {.parent_dir = parent->cfg.dir, .dir = sa->cfg.dir, .step = step, .turn = turn,
                                    .llm = llm, .parent_id = parent->id, .id = id};
    if (korch_mkdirs(o->agent_dir && *o->agent_dir ? o->agent_dir : "korch-sessions", 0755, &err) != KORCH_OK ||
        korch_agent_branch(&bo, &info, &err) != KORCH_OK) {
        /* a parent with no transcript yet has no step at all */
        if (err.rc == KORCH_E_NOTFOUND)
            srv_respond_error(req, 400, "step %d is out of range: the session has no step that ran code yet", step);
        else
            srv_respond_error(req, err.rc == KORCH_E_INVALID ? 400 : 500, "%s", err.msg);
        srv_sa_free(&sa);
        return;
    }
    /* the asker's, within the parent's budgets (a branch does not escape a lowered one) */
    snprintf(sa->owner, sizeof sa->owner, "%s", req->user.name);
    snprintf(sa->cfg.llm, sizeof sa->cfg.llm, "%s", llm);
    snprintf(sa->cfg.kernel_name, sizeof sa->cfg.kernel_name, "%s", parent->cfg.kernel_name);
    json_t *budget = srv_sa_budget_json(parent);
    srv_sa_budget_set(sa, budget);
    json_decref(budget);
    korch_iso8601_now(sa->created);
    size_t i;
    json_t *in;
    json_array_foreach(json_object_get(info, "inputs"), i, in) if (json_is_true(json_object_get(in, "copied")))
        json_array_append(sa->files, json_object_get(in, "name"));
    json_t *par = json_object_get(info, "parent");
    sa->state = A_STOPPED;
    snprintf(sa->error, sizeof sa->error, "a new branch of session %s from its step %d", parent->id,
             (int)json_integer_value(json_object_get(par, "index")));
    zhashx_insert(srv_sa_all(s), sa->id, sa);
    srv_sa_save(sa);
    srv_audit(srv_parts(s)->audit, &req->user, "session.branch", "session", sa->id,
              json_pack("{s:s, s:O, s:s}", "parent", parent->id, "step", json_object_get(par, "index"), "llm", llm));
    korch_notice("agent session %s: a branch of %s from its step %d (turn %d, step %d), model %s", sa->id, parent->id,
                 (int)json_integer_value(json_object_get(par, "index")),
                 (int)json_integer_value(json_object_get(par, "turn")),
                 (int)json_integer_value(json_object_get(par, "step")), llm);
    srv_sa_turn_open(sa, req, json_is_true(detach));
    srv_sa_stream_eventj(sa, "branch", json_pack("{s:i, s:s, s:O, s:s}", "step", 0, "session", sa->id, "parent", par,
                                                 "llm", llm));
    json_decref(info);
    srv_sa_resume(sa, json_string_value(c));
}
