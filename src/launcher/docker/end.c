/*  The docker launcher: a kernel container's end (the held POST /wait, the
 *  inspect that says why, its last log lines), signals and kill, and its
 *  removal in the background. */
#include "docker_int.h"
#include "../ctfiles.h"
#include "../container.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Why a stopped container stopped, from its State. */
static void s_describe(docker_proc_t *p, json_t *state)
{
    char lim[32];
    json_int_t code = json_integer_value(json_object_get(state, "ExitCode"));
    const char *error = json_string_value(json_object_get(state, "Error"));
    if (json_is_true(json_object_get(state, "OOMKilled"))) {
        korch_human_bytes(p->memory, lim, sizeof lim);
        snprintf(p->why, sizeof p->why, "out of memory (limit %s)", lim);
    } else if (code > 128 && code < 128 + 65) {
        /* The shell convention, which docker-init keeps: 128 + signal. */
        int sig = (int)(code - 128);
        snprintf(p->why, sizeof p->why, "killed by signal %d (%s)", sig, strsignal(sig));
    } else if (error && *error) {
        snprintf(p->why, sizeof p->why, "exited %lld: %s", (long long)code, error);
    } else {
        snprintf(p->why, sizeof p->why, "exited %lld", (long long)code);
    }
}

/* ------------------------------------------------------------ the end */

/* The held POST /wait answers when the container stops (or the engine goes);
   an inspect then says why (OOMKilled, the exit code, removed), the logs are
   fetched for log_tail, and the end is reported once. */
static void s_wait(docker_proc_t *p);

static void s_ended(docker_proc_t *p)
{
    p->dead = true;
    korch_backend_exited(&p->base, p->why);
}

static void s_on_end_logs(korch_rc_t rc, const korch_err_t *err, korch_docker_reply_t *r, void *arg);

static void s_fetch_logs(docker_proc_t *p, korch_docker_done_fn *done)
{
    char path[160];
    snprintf(path, sizeof path, "/containers/%s/logs?stdout=1&stderr=1&tail=50", p->id);
    p->log_req = korch_docker_request_async(p->l->api, "GET", path, NULL, NULL, done, p, NULL);
}

static void s_keep_logs(docker_proc_t *p, korch_rc_t rc, korch_docker_reply_t *r)
{
    if (rc == KORCH_OK && r->status == 200) {
        size_t n = korch_container_demux((const unsigned char *)r->body, r->body_len, p->tail, DK_TAIL_MAX);
        p->tail[n] = 0;
    }
}

static void s_on_end_logs(korch_rc_t rc, const korch_err_t *err, korch_docker_reply_t *r, void *arg)
{
    docker_proc_t *p = arg;
    p->log_req = NULL;
    s_keep_logs(p, rc, r);
    s_ended(p);
}

/* The end is known (p->why): its last words first, then the report. */
static void s_end(docker_proc_t *p)
{
    korch_op_cancel(&p->log_req);
    s_fetch_logs(p, s_on_end_logs);
    if (!p->log_req)
        s_ended(p);
}

static int s_on_rewait(korch_loop_t *loop, int timer_id, void *arg)
{
    docker_proc_t *p = arg;
    p->rewait_timer = -1;
    s_wait(p);
    return 0;
}

static void s_on_end_inspect(korch_rc_t rc, const korch_err_t *err, korch_docker_reply_t *r, void *arg)
{
    docker_proc_t *p = arg;
    p->wait_req = NULL;
    if (rc) {
        /* no answer to the wait nor to this: the engine (and with it,
           without live-restore, the container) is gone */
        snprintf(p->why, sizeof p->why, "lost the docker engine (%.200s)", err ? err->msg : "no answer");
        return s_end(p);
    }
    if (r->status == 404) {
        snprintf(p->why, sizeof p->why, "container %.12s was removed outside korch", p->id);
        return s_end(p);
    }
    json_t *state = json_object_get(r->json, "State");
    if (r->status != 200 || json_is_true(json_object_get(state, "Running")) ||
        json_is_true(json_object_get(state, "Restarting"))) {
        /* the wait ended early (dockerd restarted under it): wait again */
        if (r->status != 200)
            korch_warn("kernel container %.12s: %s", p->id, korch_docker_reply_message(r));
        p->rewait_timer = korch_loop_timer(p->base.launcher->loop, 500, 1, s_on_rewait, p);
        return;
    }
    s_describe(p, state);
    s_end(p);
}

static void s_on_wait(korch_rc_t rc, const korch_err_t *err, korch_docker_reply_t *r, void *arg)
{
    docker_proc_t *p = arg;
    p->wait_req = NULL;
    if (rc == KORCH_OK && r->status == 404) {
        snprintf(p->why, sizeof p->why, "container %.12s was removed outside korch", p->id);
        return s_end(p);
    }
    char path[160];
    snprintf(path, sizeof path, "/containers/%s/json", p->id);
    korch_err_t e = {0};
    p->wait_req = korch_docker_request_async(p->l->api, "GET", path, NULL, NULL, s_on_end_inspect, p, &e);
    if (!p->wait_req) {
        snprintf(p->why, sizeof p->why, "lost the docker engine (%.200s)", e.msg);
        s_end(p);
    }
}

static void s_wait(docker_proc_t *p)
{
    char path[160];
    snprintf(path, sizeof path, "/containers/%s/wait?condition=not-running", p->id);
    korch_docker_async_opts_t forever = {.timeout_ms = 0};
    korch_err_t e = {0};
    p->wait_req = korch_docker_request_async(p->l->api, "POST", path, NULL, &forever, s_on_wait, p, &e);
    if (!p->wait_req) {
        korch_warn("kernel container %.12s: cannot wait for its end: %s; asking again in 1 s", p->id, e.msg);
        p->rewait_timer = korch_loop_timer(p->base.launcher->loop, 1000, 1, s_on_rewait, p);
    }
}

void dk_watch(docker_proc_t *p) { s_wait(p); }

static void s_unwatch(docker_proc_t *p)
{
    korch_op_cancel(&p->wait_req);
    korch_op_cancel(&p->kill_req);
    korch_op_cancel(&p->log_req);
    if (p->rewait_timer >= 0)
        korch_loop_timer_end(p->base.launcher->loop, p->rewait_timer);
    p->rewait_timer = -1;
}

/* --------------------------------------------------------------- signals */

korch_rc_t dk_signal(korch_proc_t *proc, int sig, korch_op_t *op, korch_err_t *err)
{
    docker_proc_t *p = (docker_proc_t *)proc;
    if (p->dead)
        return korch_err_set(err, KORCH_E_DIED, "kernel container %.12s is gone (%s)", p->id, p->why);
    return korch_ct_signal(p->l->api, p->id, sig, op, err);
}

static void s_on_killed(korch_rc_t rc, const korch_err_t *err, korch_docker_reply_t *r, void *arg)
{
    docker_proc_t *p = arg;
    p->kill_req = NULL;
    if (rc)
        korch_warn("cannot kill kernel container %.12s: %s", p->id, err ? err->msg : "");
    else if (r->status != 204 && r->status != 409 && r->status != 404)
        korch_warn("cannot kill kernel container %.12s: %s", p->id, korch_docker_reply_message(r));
    /* the end comes through the wait */
}

/* SIGKILL; the held wait sees the end (launcher.c finishes the op then). */
korch_rc_t dk_kill(korch_proc_t *proc, korch_op_t *op, korch_err_t *err)
{
    docker_proc_t *p = (docker_proc_t *)proc;
    if (p->dead || p->kill_req)
        return KORCH_OK;
    char path[160];
    snprintf(path, sizeof path, "/containers/%s/kill?signal=%d", p->id, SIGKILL);
    p->kill_req = korch_docker_request_async(p->l->api, "POST", path, NULL, NULL, s_on_killed, p, err);
    return p->kill_req ? KORCH_OK : err && err->rc ? err->rc : KORCH_E_DOCKER;
}

static void s_on_logs(korch_rc_t rc, const korch_err_t *err, korch_docker_reply_t *r, void *arg)
{
    docker_proc_t *p = arg;
    p->log_req = NULL;
    s_keep_logs(p, rc, r);
}

/* What the logs said at the last look; each call while the kernel runs
   asks again in the background (never blocks). After the end: its last
   words, fetched before the end was reported. */
const char *dk_log_tail(korch_proc_t *proc)
{
    docker_proc_t *p = (docker_proc_t *)proc;
    if (!p->dead && !p->log_req && p->id[0])
        s_fetch_logs(p, s_on_logs);
    return p->tail;
}

/* A container to remove in the background (DELETE ?force=1&v=1): a job of
   the launcher, finished (blocking) at its destroy if still pending. */
typedef struct {
    docker_launcher_t *l;
    char id[80];
    korch_op_t *req;
    bool done;
} s_rm_t;

static void s_on_removed(korch_rc_t rc, const korch_err_t *err, korch_docker_reply_t *r, void *arg)
{
    s_rm_t *rm = arg;
    rm->req = NULL;
    rm->done = true;
    if (rc)
        korch_warn("cannot remove container %.12s: %s", rm->id, err ? err->msg : "");
    else if (r->status != 204 && r->status != 404)
        korch_warn("cannot remove container %.12s: %s", rm->id, korch_docker_reply_message(r));
}

static bool s_rm_step(void *arg)
{
    s_rm_t *rm = arg;
    if (!rm->done)
        return false;
    free(rm);
    return true;
}

static void s_rm_finish(void *arg)
{
    s_rm_t *rm = arg;
    if (!rm->done) {
        korch_op_cancel(&rm->req);
        dk_remove(rm->l, rm->id);
    }
    free(rm);
}

void dk_remove_later(docker_launcher_t *l, const char *id)
{
    s_rm_t *rm = calloc(1, sizeof *rm);
    char path[160];
    snprintf(path, sizeof path, "/containers/%s?force=1&v=1", id);
    if (rm) {
        rm->l = l;
        snprintf(rm->id, sizeof rm->id, "%s", id);
        rm->req = korch_docker_request_async(l->api, "DELETE", path, NULL, NULL, s_on_removed, rm, NULL);
    }
    if (!rm || !rm->req) { /* no loop to wait on: now */
        dk_remove(l, id);
        free(rm);
        return;
    }
    korch_backend_job(&l->base, 50, s_rm_step, s_rm_finish, rm);
}

/* Never blocks: the container goes in the background (the loop), the
   host dirs are given back and unmounted on the worker. */
void dk_proc_free(korch_proc_t *proc)
{
    docker_proc_t *p = (docker_proc_t *)proc;
    s_unwatch(p);
    if (p->id[0])
        dk_remove_later(p->l, p->id);
    dk_cleanup_later(p);
}

/* Remove a container and its anonymous volumes, quietly: used on failed
   starts, in proc_free and for orphans. True when it is gone. */
bool dk_remove(docker_launcher_t *l, const char *id)
{
    char path[160];
    bool gone = false;
    snprintf(path, sizeof path, "/containers/%s?force=1&v=1", id);
    korch_docker_reply_t r;
    korch_err_t e = {0};
    if (korch_docker_request(l->api, "DELETE", path, NULL, &r, &e))
        korch_warn("cannot remove container %.12s: %s", id, e.msg);
    else if (r.status != 204 && r.status != 404)
        korch_warn("cannot remove container %.12s: %s", id, korch_docker_reply_message(&r));
    else
        gone = true;
    korch_docker_reply_clear(&r);
    return gone;
}

const char *dk_proc_id(korch_proc_t *p) { return ((docker_proc_t *)p)->id; }
