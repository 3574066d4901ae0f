#include "agents_int.h"
#include "audit.h"
#include "quota.h"
#include "relay.h"
#include "metrics.h"
#include "korch/agent.h"
#include "korch/launcher.h"
#include "korch/llm.h"
#include "korch/fsutil.h"
#include "korch/log.h"
#include "korch/media.h"
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

void srv_sa_touch(srv_agent_t *sa) { korch_iso8601_now(sa->last_activity); }

bool srv_sa_isolated(korch_server_t *s)
{
    /* every kernel has a work dir of its own (containers), not a host dir */
    korch_launcher_t *l = srv_sa_opts(s)->launcher;
    return (korch_launcher_caps(l) & KORCH_LAUNCHER_CONFINED) != 0;
}

json_t *srv_sa_model(srv_agent_t *sa)
{
    json_t *m = json_pack("{s:s, s:o, s:s, s:s, s:s, s:s, s:s, s:i, s:I, s:O, s:b}", "id", sa->id, "kernel_id",
                          sa->kernel_id[0] ? json_string(sa->kernel_id) : json_null(), "kernel_name",
                          sa->cfg.kernel_name, "llm", sa->cfg.llm, "created", sa->created, "last_activity",
                          sa->last_activity, "state", srv_sa_state_names[sa->state], "turns", sa->turns, "tokens",
                          (json_int_t)sa->tokens, "files", sa->files, "owns_kernel", sa->owns_kernel);
    if (m && sa->usage) /* "tokens" is what was reported; this says what is unknown */
        json_object_set(m, "usage", sa->usage);
    if (m)
        json_object_set_new(m, "budget", srv_sa_budget_json(sa));
    if (m)
        json_object_set_new(m, "owner", json_string(sa->owner));
    if (m && sa->state == A_STOPPED && sa->error[0])
        json_object_set_new(m, "stopped_because", json_string(sa->error));
    return m;
}

/* session.json: what a restarted server needs to list and resume it. */
void srv_sa_save(srv_agent_t *sa)
{
    json_t *j = json_pack("{s:i, s:s, s:s, s:s, s:s, s:i, s:I, s:O}", "version", 1, "id", sa->id, "llm", sa->cfg.llm,
                          "kernel_name", sa->cfg.kernel_name, "created", sa->created, "turns", sa->turns, "tokens",
                          (json_int_t)sa->tokens, "files", sa->files);
    if (j)
        json_object_set_new(j, "budget", srv_sa_budget_json(sa));
    if (j)
        json_object_set_new(j, "owner", json_string(sa->owner));
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

void srv_sa_free(srv_agent_t **psa)
{
    srv_agent_t *sa = *psa;
    if (!sa)
        return;
    *psa = NULL;
    if (sa->keepalive >= 0)
        korch_loop_timer_end(srv_parts(sa->srv)->loop, sa->keepalive);
    if (sa->actor) {
        korch_loop_reader_end(srv_parts(sa->srv)->loop, zactor_sock(sa->actor));
        atomic_store(&sa->cfg.cancel, 1);
        zactor_destroy(&sa->actor); /* $TERM, then joins */
    }
    srv_sa_verify_cancel(sa, "the agent session is gone");
    srv_kwait_cancel(&sa->waiting);
    korch_op_cancel(&sa->start_op);
    srv_sa_fileops_cancel(sa, 503, "the agent session is gone");
    zlistx_destroy(&sa->fileops);
    srv_sa_sync_cancel(sa);
    zlistx_destroy(&sa->syncs);
    if (sa->creating)
        srv_respond_error(sa->creating, 503, "the server is shutting down");
    if (sa->stream) {
        srv_stream_end(sa->stream);
        srv_stream_release(&sa->stream);
    }
    srv_sa_followers_end(sa);
    zlistx_destroy(&sa->followers);
    srv_sa_log_clear(sa);
    zlistx_destroy(&sa->log);
    if (sa->doomed && sa->cfg.dir[0]) /* DELETE: the session's files go with it */
        korch_fs_rm_tree(sa->cfg.dir); /* never through the kernel's links */
    json_decref(sa->files);
    json_decref(sa->usage);
    srv_fjournal_destroy(&sa->journal);
    json_decref(sa->pending_files);
    free(sa->pending_question);
    free(sa);
}

/* ------------------------------------------------------- lifecycle */

/* No kernel any more (it was shut down, culled or died for good, or the
   session's start failed): stop the actor; the next message resumes. */
void srv_sa_stop(srv_agent_t *sa, const char *why)
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
    srv_sa_verify_cancel(sa, "the session stopped during its verification");
    srv_kwait_cancel(&sa->waiting);
    korch_op_cancel(&sa->start_op);
    srv_sa_fileops_cancel(sa, 409, "the session's kernel was shut down");
    srv_kernel_t *mk = sa->owns_kernel ? srv_kmgr_find(srv_sa_kmgr(sa->srv), sa->kernel_id) : NULL;
    sa->kernel_id[0] = 0;
    sa->owns_kernel = false;
    sa->reattaching = sa->announce_live = false;
    sa->cfg.resume_live = false;
    srv_kmgr_delete(mk);
    if (!sa->doomed) /* no kernel to give back after a restart */
        srv_sa_save(sa);
}

/* Deleted: unlisted now, freed (with its directory) once its actor has gone. */
void srv_sa_doom(srv_agent_t *sa)
{
    sa->doomed = true;
    zhashx_t *all = srv_sa_all(sa->srv);
    if (zhashx_lookup(all, sa->id) == sa)
        zhashx_delete(all, sa->id);
    if (sa->creating)
        srv_respond_error(sa->creating, 503, "the agent session was deleted while it started");
    sa->creating = NULL;
    srv_sa_stream_end_turn(sa, "interrupted", "the session was deleted");
    srv_sa_stop(sa, "deleted");
    if (!sa->actor) {
        srv_sa_free(&sa);
        return;
    }
    zlistx_add_end(srv_sa_doomed(sa->srv), sa);
}

/* Starting (a new session, or resuming one) failed. */
void srv_sa_fail(srv_agent_t *sa, int status, const char *fmt, ...)
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
        srv_sa_doom(sa);
        return;
    }
    free(sa->pending_question);
    sa->pending_question = NULL;
    srv_sa_stream_eventj(sa, "error", json_pack("{s:s}", "message", msg));
    srv_sa_stream_end_turn(sa, "error", msg);
    srv_sa_stop(sa, msg);
}

void srv_sa_ask(srv_agent_t *sa, const char *question)
{
    /* the agent's code is about to run in this kernel: from now on nothing
       it shows may run script in a person's client (taint.h), before the
       actor can send it anything */
    char why[96];
    snprintf(why, sizeof why, "code from agent session %.40s runs in it", sa->id);
    srv_kernel_taint(srv_kmgr_find(srv_parts(sa->srv)->kmgr, sa->kernel_id), why);
    sa->state = A_RUNNING;
    atomic_store(&sa->cfg.cancel, 0);
    zstr_sendx(sa->actor, "ASK", question, NULL);
}

int srv_sa_on_actor(korch_loop_t *loop, zsock_t *sock, void *arg)
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
        srv_sa_save(sa); /* its kernel's id, for a restart */
        if (sa->creating) {
            srv_respond(sa->creating, 201, srv_sa_model(sa));
            sa->creating = NULL;
        }
        if (sa->pending_question) {
            srv_sa_ask(sa, sa->pending_question);
            free(sa->pending_question);
            sa->pending_question = NULL;
        }
    } else if (strcmp(cmd, "failed") == 0) {
        char *why = zmsg_popstr(m);
        srv_sa_fail(sa, 500, "cannot start the agent: %s", why ? why : "unknown error");
        free(why);
    } else if (strcmp(cmd, "event") == 0) {
        char *name = zmsg_popstr(m), *json = zmsg_popstr(m);
        if (name && json)
            srv_sa_stream_event(sa, name, json);
        if (name && json && strcmp(name, "code") == 0 && srv_parts(sa->srv)->audit) { /* the agent's code runs */
            json_t *d = json_loads(json, 0, NULL);
            json_t *code = json_object_get(d, "code");
            /* as the turn's sender: the owner, or an admin acting on it, with their role */
            srv_user_t who = sa->turn_by;
            if (!who.name[0]) {
                who.role = SRV_ROLE_USER;
                snprintf(who.name, sizeof who.name, "%s", sa->owner);
            }
            if (json_is_string(code))
                srv_audit_code(srv_parts(sa->srv)->audit, &who, "session.execute", "session", sa->id,
                               json_string_value(code), json_string_length(code));
            json_decref(d);
        }
        if (name && json && strcmp(name, "files") == 0 && srv_sa_isolated(sa->srv) && sa->owns_kernel) {
            json_t *d = json_loads(json, 0, NULL);
            srv_sa_sync_step(sa, json_object_get(d, "files"));
            json_decref(d);
        }
        free(name);
        free(json);
    } else if (strcmp(cmd, "done") == 0) {
        char *json = zmsg_popstr(m);
        json_t *d = json ? json_loads(json, 0, NULL) : NULL;
        json_t *used = json_object_get(json_object_get(d, "tokens"), "session");
        if (json_is_object(used)) {
            json_decref(sa->usage);
            sa->usage = json_deep_copy(used);
            sa->tokens = json_integer_value(json_object_get(used, "input")) +
                         json_integer_value(json_object_get(used, "output"));
        }
        json_t *turn = json_object_get(json_object_get(d, "tokens"), "turn");
        json_t *cost = json_object_get(json_object_get(json_object_get(d, "cost"), "turn"), "amount");
        srv_quota_charge(sa->srv, sa->owner,
                         json_integer_value(json_object_get(turn, "input")) +
                             json_integer_value(json_object_get(turn, "output")),
                         json_is_number(cost) ? json_number_value(cost) : 0);
        const char *status = json_string_value(json_object_get(d, "status"));
        srv_parts(sa->srv)->metrics->agent_turns[!status || strcmp(status, "ok") == 0 ? 0
                                                : strcmp(status, "interrupted") == 0 ? 1 : 2]++;
        json_decref(d);
        srv_sa_stream_done(sa, json ? json : "{}");
        free(json);
        if (sa->state == A_RUNNING)
            sa->state = A_IDLE;
        sa->turns++;
        srv_sa_touch(sa);
        if (!sa->doomed)
            srv_sa_save(sa);
    } else if (strcmp(cmd, "verified") == 0) { /* POST .../verify's end (agents_verify.c) */
        char *json = zmsg_popstr(m);
        srv_sa_verified(sa, json ? json : "{}");
        free(json);
    } else if (strcmp(cmd, "removed") == 0) { /* a DELETE the actor did */
        char *rel = zmsg_popstr(m), *num = zmsg_popstr(m), *msg = zmsg_popstr(m);
        korch_rc_t rc = num ? (korch_rc_t)strtol(num, NULL, 10) : KORCH_E_IO;
        srv_sa_fileop_t *f = NULL;
        for (srv_sa_fileop_t *o = zlistx_first(sa->fileops); o && !f; o = zlistx_next(sa->fileops))
            if (o->remove && rel && strcmp(o->rel, rel) == 0)
                f = o;
        if (f) {
            srv_req_t *req = srv_sa_fileop_end(f);
            if (rc == KORCH_OK) {
                srv_sa_file_gone(sa, rel);
                srv_respond(req, 204, NULL);
            } else
                srv_respond_error(req, rc == KORCH_E_NOTFOUND ? 404 : rc == KORCH_E_INVALID ? 400 : 500, "%s",
                                  msg && *msg ? msg : korch_strerror(rc));
        }
        free(rel);
        free(num);
        free(msg);
    } else if (strcmp(cmd, "bye") == 0) {
        /* the actor has finished: join it */
        korch_loop_reader_end(loop, sock);
        zactor_destroy(&sa->actor);
        free(cmd);
        zmsg_destroy(&m);
        zlistx_t *doomed = srv_sa_doomed(sa->srv);
        void *h = zlistx_find(doomed, sa);
        if (h) {
            zlistx_delete(doomed, h);
            srv_sa_free(&sa);
        }
        return 0;
    }
    free(cmd);
    zmsg_destroy(&m);
    return 0;
}

/* A container's work dir is its own: keep a copy of each uploaded file in
   the session's files/ so a resumed session (a new container) gets it back.
   A local kernel works in files/ itself. */
void srv_sa_keep_copy(srv_agent_t *sa, const char *rel, const void *data, size_t len)
{
    if (!srv_sa_isolated(sa->srv))
        return;
    char dir[PATH_MAX + 8];
    snprintf(dir, sizeof dir, "%s/files", sa->cfg.dir);
    korch_err_t err = {0};
    korch_fs_opts_t o = {.mode = 0644};
    if (korch_fs_write_rel(dir, rel, data, len, true, &o, &err) != KORCH_OK)
        korch_warn("agent session %s: cannot keep a copy of '%s': %s", sa->id, rel, err.msg);
}

void srv_sa_add_file(srv_agent_t *sa, const char *name)
{
    size_t i;
    json_t *v;
    json_array_foreach(sa->files, i, v) if (strcmp(json_string_value(v), name) == 0) return;
    json_array_append_new(sa->files, json_string(name));
}

srv_sa_fileop_t *srv_sa_fileop_new(srv_agent_t *sa, srv_req_t *req, const char *rel)
{
    srv_sa_fileop_t *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    f->sa = sa;
    f->req = req;
    snprintf(f->rel, sizeof f->rel, "%s", rel);
    return f;
}

/* Its op ended: off the session's list, freed; the request is the caller's. */
srv_req_t *srv_sa_fileop_end(srv_sa_fileop_t *f)
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
void srv_sa_fileops_cancel(srv_agent_t *sa, int status, const char *why)
{
    srv_sa_sync_cancel(sa);
    srv_sa_fileop_t *f;
    while (sa->fileops && (f = zlistx_first(sa->fileops))) {
        korch_op_cancel(&f->op);
        srv_respond_error(srv_sa_fileop_end(f), status, "%s", why);
    }
}

json_t *srv_sa_url(srv_agent_t *sa, const char *what, const char *path) { return srv_agent_url(sa->id, what, path); }

bool srv_sa_uploaded(srv_agent_t *sa, const char *name)
{
    size_t i;
    json_t *v;
    json_array_foreach(sa->files, i, v) if (strcmp(json_string_value(v), name) == 0) return true;
    return false;
}

void srv_sa_file_added(srv_agent_t *sa, const char *rel, int64_t size)
{
    srv_sa_add_file(sa, rel);
    srv_fjournal_put(sa->journal, rel, size);
    srv_sa_save(sa);
    srv_sa_touch(sa);
}

void srv_sa_file_gone(srv_agent_t *sa, const char *rel)
{
    size_t i;
    json_t *v;
    json_array_foreach(sa->files, i, v) if (strcmp(json_string_value(v), rel) == 0) {
        json_array_remove(sa->files, i);
        break;
    }
    srv_fjournal_delete(sa->journal, rel);
    srv_sa_save(sa);
    srv_sa_touch(sa);
}
