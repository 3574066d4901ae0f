/*  The swarm launcher's poll: GET /nodes and GET /tasks every poll_ms,
 *  judging each proc being started or running. */
#include "swarm_int.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------ the poll */

/* This proc's newest task in the list, or NULL. */
json_t *sw_task_of(json_t *tasks, const char *service)
{
    size_t i;
    json_t *t, *best = NULL;
    json_int_t best_v = -1;
    json_array_foreach(tasks, i, t) {
        if (strcmp(sw_str(t, "ServiceID", NULL), service))
            continue;
        json_int_t v = json_integer_value(json_object_get(json_object_get(t, "Version"), "Index"));
        if (v > best_v) {
            best = t;
            best_v = v;
        }
    }
    return best;
}

/* What the poll says about one proc. */
static void s_judge(swarm_proc_t *p, json_t *tasks)
{
    swarm_launcher_t *l = p->l;
    json_t *t = sw_task_of(tasks, p->service);
    const char *state = t ? sw_str(t, "Status", "State") : "";
    const char *desired = t ? sw_str(t, "DesiredState", NULL) : "";
    const char *node = t ? sw_str(t, "NodeID", NULL) : "";
    bool gone = t && (!strcmp(state, "complete") || !strcmp(state, "failed") || !strcmp(state, "shutdown") ||
                      !strcmp(state, "rejected") || !strcmp(state, "orphaned") || !strcmp(state, "remove"));
    bool given_up = t && strcmp(desired, "running") && strcmp(desired, "ready") && strcmp(desired, "accepted") &&
                    strcmp(desired, "new") && strcmp(desired, "pending") && strcmp(desired, "assigned");
    const char *ns = *node ? sw_node_state(l, node) : "";
    bool node_down = *ns && strcmp(ns, "ready");
    char nname[160];
    if (*node)
        snprintf(p->node, sizeof p->node, "%s", node);

    if (p->st == ST_SCHEDULE) {
        char addr[64];
        if (t && !gone && !given_up && !node_down && !strcmp(state, "running") && sw_task_addr(l, t, addr, sizeof addr)) {
            snprintf(p->base.conn.ip, sizeof p->base.conn.ip, "%s", addr);
            p->st = ST_RUNNING;
            sw_node_name(l, node, nname, sizeof nname);
            korch_debug("swarm: kernel %.8s runs on node %s at %s (service %.12s)", p->kernel_id, nname, addr,
                        p->service);
            korch_op_t *op = p->start_op;
            p->start_op = NULL;
            p->given = true;
            korch_op_finish_proc(op, &p->base, KORCH_OK, NULL);
            return;
        }
        if (gone || given_up || node_down) {
            if (node_down) {
                sw_node_name(l, node, nname, sizeof nname);
                snprintf(p->why, sizeof p->why, "cannot start the kernel's service %.100s: its node %.100s is %.100s", p->name,
                         nname, ns);
                sw_start_fail(p, KORCH_E_LAUNCH); /* a down node gives no logs */
                return;
            } else {
                char d[200];
                sw_describe(p, t);
                snprintf(d, sizeof d, "%.100s", p->why);
                snprintf(p->why, sizeof p->why, "cannot start the kernel's service %.100s (image %.100s): %.100s", p->name,
                         sw_str(json_object_get(json_object_get(t, "Spec"), "ContainerSpec"), "Image", NULL), d);
            }
            sw_ended(p, KORCH_E_LAUNCH);
            return;
        }
        if (korch_now_ms() - p->sched_began > l->o.schedule_timeout_ms) {
            const char *e = t ? sw_str(t, "Status", "Err") : "";
            snprintf(p->why, sizeof p->why, "the kernel's service %s did not run within %d s (task %s%s%s)", p->name,
                     l->o.schedule_timeout_ms / 1000, t ? state : "not created", *e ? ": " : "", e);
            sw_ended(p, KORCH_E_TIMEOUT);
        }
        return;
    }
    if (p->st != ST_RUNNING)
        return;
    if (!t) {
        snprintf(p->why, sizeof p->why, "its service %s was removed outside korch", p->name);
        p->service[0] = 0;
        sw_dead(p);
    } else if (node_down) {
        sw_node_name(l, node, nname, sizeof nname);
        snprintf(p->why, sizeof p->why, "its node %s is %s", nname, ns);
        sw_dead(p);
    } else if (gone || given_up) {
        sw_describe(p, t);
        if (!gone) {
            char d[200];
            snprintf(d, sizeof d, "%.100s", p->why);
            snprintf(p->why, sizeof p->why, "the swarm gave its task up (desired state %s; %s)", desired, d);
        }
        sw_ended(p, KORCH_OK);
    }
}

static void s_on_tasks(korch_rc_t rc, const korch_err_t *err, korch_docker_reply_t *r, void *arg)
{
    swarm_launcher_t *l = arg;
    l->poll_call = NULL;
    if (rc != KORCH_OK || !r || r->status != 200 || !json_is_array(r->json)) {
        korch_warn("swarm: cannot read the tasks: %s", rc ? err->msg : r ? korch_docker_reply_message(r) : "?");
        return;
    }
    /* Judging may release procs (a failed start): walk a snapshot, finding
       each again. */
    json_t *tasks = json_incref(r->json);
    size_t n = 0;
    for (swarm_proc_t *p = l->procs; p; p = p->next)
        n++;
    swarm_proc_t **v = calloc(n ? n : 1, sizeof *v);
    size_t k = 0;
    for (swarm_proc_t *p = l->procs; v && p; p = p->next)
        if (p->st == ST_SCHEDULE || p->st == ST_RUNNING)
            v[k++] = p;
    for (size_t i = 0; i < k; i++) {
        bool still = false;
        for (swarm_proc_t *p = l->procs; p; p = p->next)
            still = still || p == v[i];
        if (still && !v[i]->call)
            s_judge(v[i], tasks);
    }
    free(v);
    json_decref(tasks);
}

static void s_on_nodes(korch_rc_t rc, const korch_err_t *err, korch_docker_reply_t *r, void *arg)
{
    swarm_launcher_t *l = arg;
    l->poll_call = NULL;
    if (rc != KORCH_OK || !r || r->status != 200 || !json_is_array(r->json)) {
        korch_warn("swarm: cannot read the nodes: %s", rc ? err->msg : r ? korch_docker_reply_message(r) : "?");
        return;
    }
    json_decref(l->nodes);
    l->nodes = json_incref(r->json);
    korch_err_t e = {0};
    l->poll_call = korch_docker_request_async(l->api, "GET", l->tasks_path, NULL, NULL, s_on_tasks, l, &e);
    if (!l->poll_call)
        korch_warn("swarm: cannot read the tasks: %s", e.msg);
}

void sw_poll_now(swarm_launcher_t *l)
{
    bool any = false;
    for (swarm_proc_t *p = l->procs; p; p = p->next)
        any = any || p->st == ST_SCHEDULE || p->st == ST_RUNNING;
    if (!any || l->poll_call)
        return;
    korch_err_t e = {0};
    l->poll_call = korch_docker_request_async(l->api, "GET", "/nodes", NULL, NULL, s_on_nodes, l, &e);
    if (!l->poll_call)
        korch_warn("swarm: cannot read the nodes: %s", e.msg);
}

int sw_on_poll_timer(korch_loop_t *loop, int id, void *arg)
{
    (void)loop;
    (void)id;
    sw_poll_now(arg);
    return 0;
}

void sw_proc_link(swarm_proc_t *p)
{
    p->next = p->l->procs;
    p->l->procs = p;
}

void sw_proc_unlink(swarm_proc_t *p)
{
    for (swarm_proc_t **pp = &p->l->procs; *pp; pp = &(*pp)->next)
        if (*pp == p) {
            *pp = p->next;
            break;
        }
    p->next = NULL;
}

