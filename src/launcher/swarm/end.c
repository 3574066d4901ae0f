/*  The swarm launcher: a kernel's end (why, its last log lines) and what a
 *  gone kernel leaves on the manager (its service and secret), removed in
 *  the background. */
#include "swarm_int.h"
#include "../container.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* -------------------------------------------------------------- the end */

/* Why a task ended, from its status. */
void sw_describe(swarm_proc_t *p, json_t *t)
{
    json_t *status = json_object_get(t, "Status");
    const char *state = sw_str(status, "State", NULL);
    const char *err = sw_str(status, "Err", NULL);
    json_t *cs = json_object_get(status, "ContainerStatus");
    json_int_t code = json_integer_value(json_object_get(cs, "ExitCode"));
    char lim[32];
    if (code == 128 + SIGKILL) {
        korch_human_bytes(p->l->o.memory, lim, sizeof lim);
        snprintf(p->why, sizeof p->why,
                 "killed by signal 9 (SIGKILL: killed, or out of memory: its limit is %s; the manager cannot tell "
                 "which)",
                 lim);
    } else if (code > 128 && code < 128 + 65)
        snprintf(p->why, sizeof p->why, "killed by signal %d (%s)", (int)(code - 128), strsignal((int)(code - 128)));
    else if (!strcmp(state, "complete") || (!strcmp(state, "failed") && code))
        snprintf(p->why, sizeof p->why, "exited %lld", (long long)code);
    else if (*err)
        snprintf(p->why, sizeof p->why, "task %s: %s", state, err);
    else
        snprintf(p->why, sizeof p->why, "task %s", state);
}

/* Demultiplex docker's log frames ({stream, 0, 0, 0, size BE32} + data),
   keeping the last SW_TAIL_MAX bytes in p->tail. */
static void s_keep_tail(swarm_proc_t *p, const unsigned char *in, size_t len)
{
    p->tail[korch_container_demux(in, len, p->tail, SW_TAIL_MAX)] = 0;
}

/* The last non-empty line of the tail into buf ("" when none). */
static void s_last_line(const char *tail, char *buf, size_t len)
{
    const char *end = tail + strlen(tail);
    while (end > tail && (end[-1] == '\n' || end[-1] == '\r' || end[-1] == ' '))
        end--;
    const char *start = end;
    while (start > tail && start[-1] != '\n')
        start--;
    snprintf(buf, len, "%.*s", (int)(end - start), start);
}

/* The start failed (why in p->why, code rc): the caller gets no proc, and
   what was made for it goes. */
void sw_start_fail(swarm_proc_t *p, korch_rc_t rc)
{
    korch_err_t err = {0};
    char last[512];
    s_last_line(p->tail, last, sizeof last);
    korch_err_set(&err, rc, "%s%s%s", p->why, last[0] ? ": " : "", last);
    korch_op_t *op = p->start_op;
    p->start_op = NULL;
    sw_proc_unlink(p);
    sw_reap(p->l, p->service, p->secret);
    /* an adopted service of ours that goes takes korch's copy along */
    if (p->conn_file[0] && (!p->adopting || p->service[0]))
        unlink(p->conn_file);
    if (p->adopting && p->service[0] && p->base.runtime_dir[0] && rmdir(p->base.runtime_dir) != 0 && errno != ENOENT)
        korch_debug("runtime dir '%s' kept: %s", p->base.runtime_dir, strerror(errno));
    sw_proc_release(p);
    korch_op_finish_proc(op, NULL, rc, &err);
}

/* The kernel ended (why in p->why): the caller hears, its service goes. */
void sw_dead(swarm_proc_t *p)
{
    p->st = ST_DEAD;
    sw_proc_unlink(p);
    sw_reap(p->l, p->service, p->secret);
    p->service[0] = p->secret[0] = 0;
    korch_backend_exited(&p->base, p->why);
}

static void s_on_logs(korch_rc_t rc, const korch_err_t *err, korch_docker_reply_t *r, void *arg)
{
    swarm_proc_t *p = arg;
    (void)err; /* no logs: the end is told without them */
    p->call = NULL;
    if (rc == KORCH_OK && r && r->status == 200)
        s_keep_tail(p, (const unsigned char *)r->body, r->body_len);
    if (!p->given)
        sw_start_fail(p, p->fail_rc ? p->fail_rc : KORCH_E_LAUNCH);
    else
        sw_dead(p);
}

/* The end seen (why set): read the service's last log lines, then report. */
void sw_ended(swarm_proc_t *p, korch_rc_t rc)
{
    char path[200];
    korch_err_t e = {0};
    if (p->st == ST_ENDING || p->st == ST_DEAD)
        return;
    p->st = ST_ENDING;
    p->fail_rc = rc;
    if (p->call)
        korch_op_cancel(&p->call);
    snprintf(path, sizeof path, "/services/%s/logs?stdout=1&stderr=1&tail=50", p->service);
    /* bounded: a node that is going may never answer through the manager */
    korch_docker_async_opts_t ao = {.timeout_ms = 5000};
    p->call = p->service[0] ? korch_docker_request_async(p->l->api, "GET", path, NULL, &ao, s_on_logs, p, &e) : NULL;
    if (!p->call)
        s_on_logs(KORCH_E_DOCKER, &e, NULL, p);
}

/* ---------------------------------------------------------- background */

/* What a gone kernel leaves on the manager, removed in the background. */
typedef struct {
    swarm_launcher_t *l;
    char service[80];
    char secret[80];
    int tries;
    bool waiting;
    korch_op_t *call;
} s_reap_t;

static void s_on_reaped(korch_rc_t rc, const korch_err_t *err, korch_docker_reply_t *rep, void *arg)
{
    s_reap_t *r = arg;
    r->call = NULL;
    r->waiting = false;
    long st = rc == KORCH_OK && rep ? rep->status : 0;
    char *id = r->service[0] ? r->service : r->secret;
    if (st == 200 || st == 204 || st == 404)
        id[0] = 0;
    else if (++r->tries > 50) { /* a secret stays in use while its service's task goes */
        korch_warn("swarm: cannot remove %s %.25s: %s", r->service[0] ? "service" : "secret", id,
                   rc ? err->msg : rep ? korch_docker_reply_message(rep) : "?");
        id[0] = 0;
    }
}

/* One step on the loop: the service first, then its secret. */
static bool s_reap_step(void *arg)
{
    s_reap_t *r = arg;
    if (r->waiting)
        return false;
    if (!r->service[0] && !r->secret[0]) {
        free(r);
        return true;
    }
    char path[160];
    korch_err_t e = {0};
    snprintf(path, sizeof path, r->service[0] ? "/services/%s" : "/secrets/%s", r->service[0] ? r->service : r->secret);
    r->call = korch_docker_request_async(r->l->api, "DELETE", path, NULL, NULL, s_on_reaped, r, &e);
    r->waiting = r->call != NULL;
    if (!r->call && ++r->tries > 50) {
        korch_warn("swarm: cannot remove %s: %s", path, e.msg);
        free(r);
        return true;
    }
    return false;
}

/* At launcher_destroy: what is left, blocking. */
static void s_reap_finish(void *arg)
{
    s_reap_t *r = arg;
    if (r->call)
        korch_op_cancel(&r->call);
    if (r->service[0])
        sw_delete_sync(r->l, "services", r->service);
    if (r->secret[0])
        sw_delete_sync(r->l, "secrets", r->secret);
    free(r);
}

void sw_reap(swarm_launcher_t *l, const char *service, const char *secret)
{
    if ((!service || !*service) && (!secret || !*secret))
        return;
    s_reap_t *r = calloc(1, sizeof *r);
    if (!r) {
        korch_warn("swarm: out of memory: service %s is left on the manager", service ? service : "");
        return;
    }
    r->l = l;
    snprintf(r->service, sizeof r->service, "%s", service ? service : "");
    snprintf(r->secret, sizeof r->secret, "%s", secret ? secret : "");
    korch_backend_job(&l->base, 100, s_reap_step, s_reap_finish, r);
}

/* Blocking removal, for launcher_destroy and remove_all. */
bool sw_delete_sync(swarm_launcher_t *l, const char *what, const char *id)
{
    char path[160];
    snprintf(path, sizeof path, "/%s/%s", what, id);
    for (int i = 0; i < 50; i++) {
        korch_docker_reply_t r = {0};
        korch_err_t e = {0};
        long st = 0;
        if (korch_docker_request(l->api, "DELETE", path, NULL, &r, &e) == KORCH_OK)
            st = r.status;
        korch_docker_reply_clear(&r);
        if (st == 200 || st == 204 || st == 404)
            return true;
        if (st == 0) {
            korch_warn("swarm: cannot remove %s: %s", path, e.msg);
            return false;
        }
        usleep(100 * 1000); /* a secret stays in use while its service's task goes */
    }
    korch_warn("swarm: cannot remove %s: still in use", path);
    return false;
}

