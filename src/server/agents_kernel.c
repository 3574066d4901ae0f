#include "agents_int.h"
#include "relay.h"
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

/* ------------------------------------------------------ the kernel */

/* The files are in: write the connection file, start the actor. */
static void s_start_actor(srv_agent_t *sa, srv_kernel_t *mk)
{
    korch_err_t err = {0};
    json_array_clear(sa->pending_files);
    if (korch_conn_save(korch_kernel_conn(mk->k), sa->cfg.conn_path, &err) != KORCH_OK) {
        srv_sa_fail(sa, 500, "cannot write the kernel's connection file: %s", err.msg);
        return;
    }
    /* the agent may run code from here on (a resumed session rebuilds its
       state by running the code of its snapshot): untrusted outputs */
    char why[96];
    snprintf(why, sizeof why, "agent session %.40s is attached to it", sa->id);
    srv_kernel_taint(mk, why);
    korch_proc_usage_src(korch_kernel_proc(mk->k), &sa->cfg.usage_src); /* each step's CPU and memory, from the actor */
    snprintf(sa->cfg.party, sizeof sa->cfg.party, "%s", sa->owner);
    sa->actor = srv_agent_actor_new(&sa->cfg);
    if (!sa->actor) {
        srv_sa_fail(sa, 500, "cannot start the agent's thread");
        return;
    }
    korch_loop_reader(srv_parts(sa->srv)->loop, zactor_sock(sa->actor), srv_sa_on_actor, sa);
}

static void s_put_next(srv_agent_t *sa);

static void s_on_pending_put(korch_rc_t rc, const korch_err_t *err, void *arg)
{
    srv_agent_t *sa = arg;
    sa->start_op = NULL;
    json_t *f = json_array_get(sa->pending_files, sa->start_next - 1);
    const char *name = json_string_value(json_object_get(f, "name"));
    if (rc != KORCH_OK) {
        srv_sa_fail(sa, 500, "cannot put '%s' into the kernel's work dir: %s", name, err ? err->msg : "unknown error");
        return;
    }
    if (sa->creating) /* the POST's files are uploads; a resume's copies are what they were */
        srv_sa_add_file(sa, name);
    s_put_next(sa);
}

/* Put the next pending file (asynchronously: a container's archive upload
   never blocks the loop), or, when all are in, start the actor. */
static void s_put_next(srv_agent_t *sa)
{
    srv_kernel_t *mk = srv_kmgr_find(srv_sa_kmgr(sa->srv), sa->kernel_id);
    korch_proc_t *proc = mk ? korch_kernel_proc(mk->k) : NULL;
    if (!proc) {
        srv_sa_fail(sa, 409, "the kernel went away while the session started");
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
        srv_sa_fail(sa, 500, "cannot put '%s' into the kernel's work dir: out of memory", name);
        return;
    }
    if (sa->creating) /* a new session: its copy for a resumed container */
        srv_sa_keep_copy(sa, name, data, len);
    sa->start_op = korch_proc_put_file(proc, name, data, len, s_on_pending_put, sa, &err); /* data copied */
    free(data);
    if (!sa->start_op)
        srv_sa_fail(sa, 500, "cannot put '%s' into the kernel's work dir: %s", name, err.msg);
}

/* The kernel is ready: put the files, then the actor. */
static void s_kernel_ready(srv_agent_t *sa, srv_kernel_t *mk)
{
    sa->start_next = 0;
    s_put_next(sa);
}

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
        srv_sa_stop(sa, why);
        if (q)
            srv_sa_resume(sa, q);
        free(q);
        return;
    }
    srv_sa_fail(sa, mk->doomed ? 409 : 500, "the kernel did not start: %s", error);
}

/* The kernel manager's listener: a kernel is gone, sessions on it are stopped. */
void srv_sa_on_kernel(srv_kernel_t *mk, srv_kev_t ev, const char *detail, void *arg)
{
    srv_agents_t *a = arg;
    for (srv_agent_t *sa = zhashx_first(a->all); sa; sa = zhashx_next(a->all))
        if (sa->verify) /* its verification's kernel? (agents_verify.c) */
            srv_sa_verify_on_kernel(sa, mk, ev);
    if (ev == SRV_KEV_STARTED && mk->adopted) { /* a session's own kernel from before the restart? */
        s_claim_any(a, mk);
        return;
    }
    if (ev == SRV_KEV_RESTARTING || ev == SRV_KEV_DEAD) {
        /* its process is replaced or gone, and with it the ops on it (the
           launcher cancels them): answer what waited on them, and tell the
           agent, whose step sent to that process is lost (its connection
           to the kernel cannot see a restart on the same ports for sure) */
        char t[24];
        snprintf(t, sizeof t, "%lld", (long long)korch_now_ms());
        for (srv_agent_t *sa = zhashx_first(a->all); sa; sa = zhashx_next(a->all))
            if (strcmp(sa->kernel_id, mk->id) == 0) {
                srv_sa_fileops_cancel(sa, 503, "the session's kernel restarted or died meanwhile");
                if (sa->actor)
                    zstr_sendx(sa->actor, "KERNEL_GONE", ev == SRV_KEV_DEAD ? "dead" : "restarted", t,
                               detail ? detail : "", NULL);
            }
        zlistx_t *list = zhashx_values(a->all);
        for (srv_agent_t *sa = list ? zlistx_first(list) : NULL; sa; sa = zlistx_next(list))
            if (strcmp(sa->kernel_id, mk->id) == 0 && sa->start_op) {
                korch_op_cancel(&sa->start_op);
                srv_sa_fail(sa, 500, "the kernel %s while the session started", ev == SRV_KEV_DEAD ? "died" : "restarted");
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
                srv_sa_stream_eventj(sa, "error", json_pack("{s:s}", "message", "the session's kernel was shut down"));
            srv_sa_stop(sa, "its kernel was shut down");
        }
    zlistx_destroy(&list);
}

static int s_attach(srv_agent_t *sa, srv_kernel_t *mk, char *why, size_t why_len);

/* Give the session a kernel: kernel_id's (attach), else a new one it owns.
   Returns 0, or an HTTP status with why. */
int srv_sa_begin(srv_agent_t *sa, const char *name, const char *kernel_id, char *why, size_t why_len)
{
    korch_server_t *s = sa->srv;
    const korch_server_opts_t *o = srv_sa_opts(s);
    srv_kernel_t *mk = NULL;
    if (kernel_id) {
        mk = srv_kmgr_find(srv_sa_kmgr(s), kernel_id);
        if (!mk || mk->doomed) {
            snprintf(why, why_len, "no kernel '%s'", kernel_id);
            return 404;
        }
    } else {
        if (o->max_kernels > 0 && (int)srv_kmgr_count(srv_sa_kmgr(s)) >= o->max_kernels) {
            snprintf(why, why_len, "the kernel limit (%d) is reached", o->max_kernels);
            return 403;
        }
        /* a warm kernel where each has a work dir of its own (containers);
           a local one starts in the session's files/ */
        if (srv_sa_isolated(s))
            mk = srv_pool_take(srv_parts(s)->pool, name);
        if (!mk) {
            char cwd[PATH_MAX + 8];
            snprintf(cwd, sizeof cwd, "%s/files", sa->cfg.dir);
            korch_err_t err = {0};
            mk = srv_kmgr_start(srv_sa_kmgr(s), &(srv_kstart_t){.name = name, .cwd = srv_sa_isolated(s) ? NULL : cwd}, &err);
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
    if (sa->owns_kernel && !srv_sa_isolated(s))
        snprintf(sa->cfg.workdir, sizeof sa->cfg.workdir, "%s/files", sa->cfg.dir);
    else
        sa->cfg.workdir[0] = 0;
    /* a container's work dir is in its volume: the agent lists it from inside the kernel */
    sa->cfg.workdir_in_kernel = sa->owns_kernel && srv_sa_isolated(s);
    snprintf(sa->kernel_id, sizeof sa->kernel_id, "%s", mk->id);
    snprintf(sa->cfg.kernel_name, sizeof sa->cfg.kernel_name, "%s", mk->name);
    if (sa->owns_kernel) /* its user's, as the session is (ident.h) */
        snprintf(mk->owner, sizeof mk->owner, "%s", sa->owner);
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
bool srv_sa_claim(srv_agent_t *sa, srv_kernel_t *mk)
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
   onto it; any other that names it is told it is taken (srv_sa_claim). */
static void s_claim_any(srv_agents_t *a, srv_kernel_t *mk)
{
    zlistx_t *list = zhashx_values(a->all);
    for (srv_agent_t *sa = list ? zlistx_first(list) : NULL; sa; sa = zlistx_next(list))
        if (strcmp(sa->saved_kernel, mk->id) == 0)
            srv_sa_claim(sa, mk);
    zlistx_destroy(&list);
}

/* A stopped session got a message: a fresh kernel, the agent resumes the
   transcript (re-running its successful cells), then the question. */
void srv_sa_resume(srv_agent_t *sa, const char *question)
{
    char note[PATH_MAX + 128];
    snprintf(note, sizeof note, "resuming the session (%s): starting a kernel", sa->error);
    srv_sa_stream_eventj(sa, "notice", json_pack("{s:s}", "text", note));
    sa->pending_question = strdup(question);
    json_array_clear(sa->pending_files);
    if (srv_sa_isolated(sa->srv)) { /* a new container: its files again, from the copies (uploads, what the code wrote) */
        char dir[PATH_MAX + 8];
        snprintf(dir, sizeof dir, "%s/files", sa->cfg.dir);
        korch_workdir_t *w = korch_workdir_new(dir, NULL);
        json_t *scan = w ? korch_workdir_scan(w, NULL) : NULL;
        json_t *copies = w ? korch_workdir_list(w) : NULL;
        korch_workdir_destroy(&w);
        json_decref(scan);
        size_t i;
        json_t *v;
        json_array_foreach(copies, i, v) {
            json_t *name = json_object_get(v, "path");
            size_t len = 0;
            char *data = korch_fs_read_rel(dir, json_string_value(name), srv_sa_opts(sa->srv)->max_upload, &len,
                                           NULL);
            char *b64 = data ? korch_b64_encode((const unsigned char *)data, len) : NULL;
            if (b64)
                json_array_append_new(sa->pending_files, json_pack("{s:O, s:s}", "name", name, "data", b64));
            free(b64);
            free(data);
        }
        json_decref(copies);
    }
    char why[sizeof ((korch_err_t *)0)->msg + 256]; /* an error's message and more: never cut */
    int status = srv_sa_begin(sa, sa->cfg.kernel_name, NULL, why, sizeof why);
    if (status)
        srv_sa_fail(sa, status, "%s", why);
}
