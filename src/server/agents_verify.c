/*  POST /api/agent/sessions/{id}/verify: the session's clean notebook re-run
 *  in a fresh kernel and the answer's numbers compared (korch_agent_verify_in,
 *  the CLI's --verify code), streamed as the turn's events are: a `notice`,
 *  the `verify` event, `done` (GET .../events follows it too).
 *
 *  On the loop, never blocking: a fresh kernel of the session's kernelspec
 *  from the kernel manager (a warm one where each has a work dir of its own,
 *  else one started in {session}/verify), counted against the kernel limit
 *  and the user's quota and owned by the session's user; the session's
 *  uploads put into it by the launcher's put_file (asynchronous); then its
 *  connection file handed to the actor (VERIFY), which runs the cells on its
 *  own thread and answers "verified" with the stream's done. The kernel is
 *  shut down after, whatever happened (its work dir removed on the
 *  launcher's worker). The session is "running" meanwhile: a message gets
 *  409 until the verification's done.
 */
#include "agents_int.h"
#include "quota.h"
#include "relay.h"
#include "korch/fsutil.h"
#include "korch/launcher.h"
#include "korch/log.h"
#include "korch/session.h"

#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct srv_sa_verify {
    srv_agent_t *sa;
    char kernel_id[40];
    srv_kwait_t *waiting;       /* for the fresh kernel to be ready */
    korch_op_t *op;             /* putting sa->files[next - 1] */
    size_t next;
    int64_t started;            /* korch_now_ms at the POST */
    bool sent;                  /* the actor has the VERIFY */
    char dir[PATH_MAX + 16];    /* a host kernel's work dir ("" for a container's own) */
    char conn[PATH_MAX + 32];   /* its connection file, for the actor */
};

#define MAX_VERIFY_INPUT (1u << 30) /* an upload put into the fresh kernel */

static srv_kernel_t *s_kernel(srv_sa_verify_t *v)
{
    return v->kernel_id[0] ? srv_kmgr_find(srv_sa_kmgr(v->sa->srv), v->kernel_id) : NULL;
}

/* The verification is over (done, failed or the session went): its kernel
   shut down, its files removed, the session idle again unless it stopped. */
static void s_end(srv_agent_t *sa)
{
    srv_sa_verify_t *v = sa->verify;
    if (!v)
        return;
    sa->verify = NULL;
    srv_kwait_cancel(&v->waiting);
    korch_op_cancel(&v->op);
    srv_kmgr_delete(s_kernel(v));
    if (v->conn[0])
        unlink(v->conn);
    if (v->dir[0]) { /* after the kernel: on the launcher's worker, in order */
        korch_launcher_t *l = srv_sa_opts(sa->srv)->launcher;
        if (l)
            korch_launcher_remove_dir(l, v->dir);
        else
            korch_fs_rm_tree(v->dir);
    }
    if (sa->state == A_RUNNING)
        sa->state = A_IDLE;
    free(v);
}

static void s_fail(srv_agent_t *sa, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void s_fail(srv_agent_t *sa, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    korch_warn("agent session %s: verification: %s", sa->id, msg);
    srv_sa_stream_eventj(sa, "error", json_pack("{s:s}", "message", msg));
    srv_sa_stream_end_turn(sa, "error", msg);
    s_end(sa);
}

/* The session's copy of upload rel ({session}/files/rel, no component a
   link, a regular file within the bound), opened for the launcher to put
   (no read on the loop: put_file_fd maps or copies it on its worker). -1
   when it is not there (any more). */
static int s_open_input(srv_agent_t *sa, const char *rel, size_t *len)
{
    char files[PATH_MAX + 8], dir[PATH_MAX];
    snprintf(files, sizeof files, "%s/files", sa->cfg.dir);
    snprintf(dir, sizeof dir, "%s", rel);
    char *slash = strrchr(dir, '/');
    const char *base = slash ? slash + 1 : dir;
    if (slash)
        *slash = 0;
    int top = korch_fs_open_dir(files, NULL);
    int d = top >= 0 ? korch_fs_open_dir_at(top, slash ? dir : "", false, NULL, NULL) : -1;
    int fd = d >= 0 && *base ? openat(d, base, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC) : -1;
    struct stat st;
    if (fd >= 0 && (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size > MAX_VERIFY_INPUT)) {
        close(fd);
        fd = -1;
    }
    if (fd >= 0)
        *len = (size_t)st.st_size;
    if (d >= 0)
        close(d);
    if (top >= 0)
        close(top);
    return fd;
}

static void s_put_next(srv_sa_verify_t *v);

static void s_on_put(korch_rc_t rc, const korch_err_t *err, void *arg)
{
    srv_sa_verify_t *v = arg;
    v->op = NULL;
    if (rc != KORCH_OK) {
        s_fail(v->sa, "cannot put '%s' into the verification's kernel: %s",
               json_string_value(json_array_get(v->sa->files, v->next - 1)), err ? err->msg : "unknown error");
        return;
    }
    s_put_next(v);
}

/* The next upload into the fresh kernel's work dir, or, all in, the actor's VERIFY. */
static void s_put_next(srv_sa_verify_t *v)
{
    srv_agent_t *sa = v->sa;
    srv_kernel_t *mk = s_kernel(v);
    korch_proc_t *proc = mk ? korch_kernel_proc(mk->k) : NULL;
    if (!proc) {
        s_fail(sa, "the verification's kernel went away");
        return;
    }
    korch_err_t err = {0};
    while (v->next < json_array_size(sa->files)) {
        const char *name = json_string_value(json_array_get(sa->files, v->next++));
        size_t len = 0;
        int fd = s_open_input(sa, name, &len);
        if (fd < 0) /* removed by the code since: the re-run meets what the person receiving it would */
            continue;
        v->op = korch_proc_put_file_fd(proc, name, fd, len, s_on_put, v, &err); /* fd borrowed: the op keeps a dup */
        close(fd);
        if (!v->op)
            s_fail(sa, "cannot put '%s' into the verification's kernel: %s", name, err.msg);
        return;
    }
    snprintf(v->conn, sizeof v->conn, "%s/verify-kernel.json", sa->cfg.dir);
    if (korch_conn_save(korch_kernel_conn(mk->k), v->conn, &err) != KORCH_OK) {
        v->conn[0] = 0;
        s_fail(sa, "cannot write the verification kernel's connection file: %s", err.msg);
        return;
    }
    char t[32];
    snprintf(t, sizeof t, "%lld", (long long)v->started);
    v->sent = true;
    zstr_sendx(sa->actor, "VERIFY", v->conn, t, NULL);
}

static void s_on_ready(srv_kernel_t *mk, const char *error, void *arg)
{
    srv_sa_verify_t *v = arg;
    v->waiting = NULL;
    if (error) {
        s_fail(v->sa, "the verification's kernel did not start: %s", error);
        return;
    }
    s_put_next(v);
}

static void s_on_stream_gone(srv_req_t *req, void *arg)
{
    srv_agent_t *sa = arg;
    if (sa->stream == req) /* the verification goes on: its result is recorded all the same */
        srv_stream_release(&sa->stream);
}

void srv_sa_verify(srv_agent_t *sa, srv_req_t *req, const srv_params_t *p, json_t *body)
{
    korch_server_t *s = sa->srv;
    const korch_server_opts_t *o = srv_sa_opts(s);
    if (sa->state != A_IDLE || !sa->actor) {
        srv_respond_error(req, 409, "%s",
                          sa->state == A_RUNNING    ? "a turn or a verification is running in this session; wait for its 'done'"
                          : sa->state == A_STOPPED ? "the session is stopped (it has no kernel): send it a message first"
                                                   : "the session is starting; wait until it is ready");
        return;
    }
    if (sa->turns == 0) {
        srv_respond_error(req, 409, "nothing to verify yet: the session has not answered a question");
        return;
    }
    if (o->max_kernels > 0 && (int)srv_kmgr_count(srv_sa_kmgr(s)) >= o->max_kernels) {
        srv_respond_error(req, 403, "the kernel limit (%d) is reached: verification needs a fresh kernel",
                          o->max_kernels);
        return;
    }
    if (!srv_quota_kernel_ok(s, req)) /* 429: the user's kernels, memory or CPUs */
        return;
    srv_sa_verify_t *v = calloc(1, sizeof *v);
    if (!v) {
        srv_respond_error(req, 500, "out of memory");
        return;
    }
    v->sa = sa;
    v->started = korch_now_ms();
    srv_kernel_t *mk = srv_sa_isolated(s) ? srv_pool_take(srv_parts(s)->pool, sa->cfg.kernel_name) : NULL;
    korch_err_t err = {0};
    if (!mk) {
        if (!srv_sa_isolated(s)) {
            snprintf(v->dir, sizeof v->dir, "%s/verify", sa->cfg.dir);
            korch_fs_rm_tree(v->dir); /* a server's that stopped during one */
            if (korch_mkdirs(v->dir, 0755, &err) != KORCH_OK) {
                free(v);
                srv_respond_error(req, 500, "cannot make the verification's work dir: %s", err.msg);
                return;
            }
        }
        mk = srv_kmgr_start(srv_sa_kmgr(s), &(srv_kstart_t){.name = sa->cfg.kernel_name, .cwd = v->dir[0] ? v->dir : NULL},
                            &err);
        if (!mk) {
            if (v->dir[0])
                korch_fs_rm_tree(v->dir);
            free(v);
            srv_respond_error(req, korch_rc_http_status(err.rc), "cannot start the verification's kernel: %s", err.msg);
            return;
        }
    }
    snprintf(v->kernel_id, sizeof v->kernel_id, "%s", mk->id);
    snprintf(mk->owner, sizeof mk->owner, "%s", sa->owner); /* counted as its user's, as the session's is */
    char why[96];
    snprintf(why, sizeof why, "agent session %.40s's code is re-run in it (verify)", sa->id);
    srv_kernel_taint(mk, why);
    sa->verify = v;
    sa->state = A_RUNNING;
    korch_notice("agent session %s: verifying in kernel %s", sa->id, mk->id);
    srv_sa_touch(sa);
    srv_sa_log_clear(sa);
    sa->turn_open = true;
    sa->next_id = 1;
    sa->detach = true;
    sa->stream = req;
    srv_stream_begin(req, "text/event-stream", s_on_stream_gone, sa);
    sa->keepalive = korch_loop_timer(srv_parts(s)->loop, KEEPALIVE_MS, 0, srv_sa_on_keepalive, sa);
    char note[256];
    snprintf(note, sizeof note, "verifying: the clean notebook re-runs in a fresh %s kernel (%s)", sa->cfg.kernel_name,
             mk->id);
    srv_sa_stream_eventj(sa, "notice", json_pack("{s:s}", "text", note));
    v->waiting = srv_kernel_when_ready(mk, s_on_ready, v);
    if (!v->waiting)
        s_fail(sa, "the verification's kernel is being shut down");
}

void srv_sa_verified(srv_agent_t *sa, const char *done_json)
{
    srv_sa_stream_done(sa, done_json);
    s_end(sa);
    srv_sa_touch(sa);
}

void srv_sa_verify_on_kernel(srv_agent_t *sa, srv_kernel_t *mk, srv_kev_t ev)
{
    srv_sa_verify_t *v = sa->verify;
    if (!v || strcmp(v->kernel_id, mk->id) != 0 || v->sent) /* once sent, the actor sees its kernel die */
        return;
    if (ev == SRV_KEV_RESTARTING || ev == SRV_KEV_DEAD || ev == SRV_KEV_DELETED) {
        korch_op_cancel(&v->op); /* the launcher cancels it: its done never comes */
        if (ev == SRV_KEV_DELETED)
            v->kernel_id[0] = 0;
        s_fail(sa, "the verification's kernel %s before it ran anything",
               ev == SRV_KEV_DELETED ? "was shut down" : ev == SRV_KEV_DEAD ? "died" : "restarted");
    }
}

void srv_sa_verify_cancel(srv_agent_t *sa, const char *why)
{
    if (!sa->verify)
        return;
    if (sa->turn_open)
        srv_sa_stream_end_turn(sa, "error", why);
    s_end(sa);
}
