/*  The Docker Swarm launcher (include/korch/swarm.h): one service per
 *  kernel, through the manager's Engine API only, never blocking the loop.
 *
 *  Why these choices (each tried on the 3-node swarm of scripts/swarm-up.sh):
 *  - Start: POST /secrets/create (the connection file, key included), then
 *    POST /services/create; the proc is ready when the service's task is
 *    running and has an address on the network (GET /tasks). The task's
 *    address is what korch connects to: the network is made with endpoint
 *    mode dnsrr in mind, since a virtual IP needs IPVS in every node's
 *    kernel, which is not always there (it is not here). The connection
 *    file says ip 0.0.0.0 and fixed ports: each task has an address of its
 *    own, and binding every address is kernel-agnostic (no --ip option).
 *    ipykernel rewrites the file it is given and a secret is read-only, so
 *    the command copies it to /tmp first (a tmpfs), then execs the
 *    kernelspec's argv through the image's entrypoint.
 *  - Hardened as the docker launcher: read-only root, no capabilities, a
 *    non-root uid, memory/CPU/pids/nofile limits, docker-init as PID 1,
 *    tmpfs /tmp and work dir. Engine 20.10 (API 1.41) has no
 *    no-new-privileges for services (`docker service create` has no
 *    switch): the image must carry no setuid binaries.
 *  - One replica, restart condition none: korch decides. A dead kernel's
 *    service is removed and a restart creates a new service, which the
 *    scheduler places on a live node (never on one it marked down).
 *  - Death: one timer reads GET /nodes and GET /tasks (all of this
 *    instance's tasks in one call: the task label filter matches the
 *    service's labels) every poll_ms. A kernel is dead when its task's
 *    state is past running, when its desired state is no longer running
 *    (the manager gave it up), or when its node is down: a node whose
 *    engine stopped keeps its task's last reported state, "running", for
 *    good; the manager marks the node down and the task's desired state
 *    shutdown about three heartbeats later. Swarm events (GET /events)
 *    report services and nodes but not task state, hence the poll.
 *  - Exit reasons from the task: "exited N", "killed by signal N". The
 *    manager does not learn whether the node's kernel OOM-killed the
 *    container (that is in the node engine's container state, which only
 *    that node answers), so a SIGKILL says that it may have been the
 *    memory limit.
 *  - Interrupt: no swarm call signals a task, and the manager cannot exec
 *    into a container on another node. SIGINT is therefore sent as an
 *    interrupt_request on the kernel's control channel, signed with its
 *    key, from a socket of the launcher's own (ipykernel handles it
 *    whatever the kernelspec's interrupt_mode says, by signalling itself).
 *    SIGTERM and SIGKILL remove the service (the node stops the container:
 *    SIGTERM, then SIGKILL after stop_grace_ms). Other signals: refused.
 *  - Files in and out go through the kernel (an execute_request with
 *    user_expressions on the shell channel, silent, not in the history):
 *    there is no host bind mount, and the archive endpoints only reach
 *    containers of the engine asked, not of other nodes. Python kernels
 *    only (the code is Python); others are refused with a message.
 *  - korch's own copy of the connection file stays in the kernel's runtime
 *    dir on korch's side (0700, nothing mounts it): a secret cannot be read
 *    back through the API, and re-adoption needs the key.
 */
#include "korch/swarm.h"
#include "korch/docker_api.h"
#include "korch/env.h"
#include "korch/instance.h"
#include "korch/log.h"
#include "korch/loop.h"
#include "korch/media.h"
#include "korch/msg.h"
#include "korch/session.h"
#include "backend.h"
#include "spawn.h"

#include <czmq.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define S_GIB (1024LL * 1024 * 1024)
#define S_MIB (1024LL * 1024)
#define S_CONN_FILE "kernel.json"
#define S_CONN_IN "/tmp/kernel.json"
#define S_SECRET_AT "/run/secrets/kernel.json"
#define S_TAIL_MAX 4096
#define S_PORT0 50001             /* the kernel's five ports: each task has its own address */
#define S_FILE_MAX (16u << 20)    /* files through the kernel: base64 in one message */

/* ------------------------------------------------------------------ types */

typedef enum {
    ST_SECRET,      /* POST /secrets/create in flight */
    ST_SERVICE,     /* POST /services/create (or the adopt's GET) in flight */
    ST_SCHEDULE,    /* waiting for the task to run with an address */
    ST_RUNNING,
    ST_ENDING,      /* the end seen: its log lines on the way */
    ST_DEAD,
} s_state_t;

typedef struct swarm_launcher swarm_launcher_t;
typedef struct swarm_proc swarm_proc_t;
typedef struct s_fileq s_fileq_t;

struct swarm_launcher {
    korch_launcher_t base;
    korch_docker_t *api;
    korch_swarm_opts_t o;
    char *strs[8];
    char network_id[80];
    uid_t uid;
    gid_t gid;
    swarm_proc_t *procs;        /* procs being started or running, for the poll */
    int timer;                  /* the poll */
    korch_op_t *poll_call;      /* GET /nodes or GET /tasks in flight */
    json_t *nodes;              /* the last GET /nodes */
    char tasks_path[512];
    char scope[KORCH_SCOPE_LEN]; /* korch_runtime_scope: the korch.scope label of what it makes */
};

struct swarm_proc {
    korch_proc_t base;          /* conn (as korch connects: the task's address), runtime_dir */
    swarm_launcher_t *l;
    swarm_proc_t *next;         /* in l->procs */
    s_state_t st;
    bool linked;
    bool adopting;
    bool given;                 /* the caller has it (its start finished) */
    char kernel_id[80];
    char name[80];              /* service and secret name */
    char service[80];           /* ids */
    char secret[80];
    char node[80];              /* the task's node id */
    char conn_file[PATH_MAX];   /* korch's copy of the connection file */
    bool python;                /* files can go through the kernel */
    int64_t sched_began;
    korch_rc_t fail_rc;         /* why a start ends (ST_ENDING before running) */
    korch_op_t *call;           /* the proc's own Engine API call in flight */
    korch_op_t *start_op;       /* the start or adopt */
    json_t *spec;               /* the service's, while its secret is made */
    char why[512]; /* room for every message below at its %.Ns bounds */
    /* the launcher's own sockets to the kernel (interrupt, files) */
    korch_session_t *session;
    zsock_t *control;
    zsock_t *shell;
    korch_op_t *file_op;        /* one file operation at a time in the kernel */
    s_fileq_t *fileq;           /* the ones waiting for it, oldest first */
    bool file_get;
    size_t file_max;
    char file_msg_id[64];
    int file_timer;
    char tail[S_TAIL_MAX + 1];
};

/* What a gone kernel leaves on the manager, removed in the background. */
typedef struct {
    swarm_launcher_t *l;
    char service[80];
    char secret[80];
    int tries;
    bool waiting;
    korch_op_t *call;
} s_reap_t;

static void s_poll_now(swarm_launcher_t *l);
static void s_proc_unlink(swarm_proc_t *p);
static void s_reap(swarm_launcher_t *l, const char *service, const char *secret);
static void s_proc_release(swarm_proc_t *p);

/* --------------------------------------------------------------- options */

void korch_swarm_opts_init(korch_swarm_opts_t *o)
{
    memset(o, 0, sizeof *o);
    const char *net = getenv("KORCH_SWARM_NETWORK");
    const char *enc = getenv("KORCH_SWARM_ENCRYPTED");
    const char *con = getenv("KORCH_SWARM_CONSTRAINTS");
    o->network = net && *net ? net : "korch-kernels";
    o->encrypted = !(enc && (!strcmp(enc, "0") || !strcmp(enc, "false") || !strcmp(enc, "no")));
    o->constraints = con && *con ? con : NULL;
    o->user = "1000:1000";
    o->memory = S_GIB;
    o->nano_cpus = 1000000000LL;
    o->pids_limit = 256;
    o->nofile = 4096;
    o->tmp_size = 256 * S_MIB;
    o->workdir_size = 512 * S_MIB;
    o->workdir_mount = "/tmp/work";
    o->poll_ms = 500;
    o->schedule_timeout_ms = 120000;
    o->stop_grace_ms = 2000;
    o->api_timeout_ms = 30000;
}

/* ---------------------------------------------------------------- helpers */

static bool s_valid_name(const char *s)
{
    if (!s || !*s || strlen(s) > 64)
        return false;
    for (const char *p = s; *p; p++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-", *p))
            return false;
    return true;
}

/* Copy of s with every "{name}" replaced by val (new string). */
static char *s_replace(const char *s, const char *name, const char *val)
{
    size_t nl = strlen(name), vl = strlen(val), count = 0;
    for (const char *p = strstr(s, name); p; p = strstr(p + nl, name))
        count++;
    char *out = malloc(strlen(s) + count * vl + 1), *w = out;
    if (!out)
        return NULL;
    const char *p = s, *hit;
    while ((hit = strstr(p, name))) {
        memcpy(w, p, (size_t)(hit - p));
        w += hit - p;
        memcpy(w, val, vl);
        w += vl;
        p = hit + nl;
    }
    memcpy(w, p, strlen(p) + 1);
    return out;
}

/* A "GET path?filters={key:[value]}" path into buf; false when too long. */
static bool s_filter_path(swarm_launcher_t *l, const char *what, const char *key, const char *value, char *buf,
                          size_t len)
{
    json_t *f = json_pack("{s:[s]}", key, value);
    char *fs = f ? json_dumps(f, JSON_COMPACT) : NULL;
    char *esc = fs ? korch_docker_escape(l->api, fs) : NULL;
    int n = esc ? snprintf(buf, len, "/%s?filters=%s", what, esc) : -1;
    free(esc);
    free(fs);
    json_decref(f);
    return n > 0 && (size_t)n < len;
}

static const char *s_str(json_t *j, const char *a, const char *b)
{
    json_t *v = json_object_get(j, a);
    if (b)
        v = json_object_get(v, b);
    return json_is_string(v) ? json_string_value(v) : "";
}

/* The task's address on our network ("10.234.1.5", no prefix length). */
static bool s_task_addr(swarm_launcher_t *l, json_t *t, char *buf, size_t len)
{
    size_t i;
    json_t *a;
    json_array_foreach(json_object_get(t, "NetworksAttachments"), i, a) {
        const char *id = s_str(json_object_get(a, "Network"), "ID", NULL);
        const char *ad = json_string_value(json_array_get(json_object_get(a, "Addresses"), 0));
        if (ad && !strcmp(id, l->network_id)) {
            snprintf(buf, len, "%s", ad);
            buf[strcspn(buf, "/")] = 0;
            return buf[0] != 0;
        }
    }
    return false;
}

/* "node2 (10.231.0.12)" for messages: its korch.node label or hostname. */
static void s_node_name(swarm_launcher_t *l, const char *id, char *buf, size_t len)
{
    size_t i;
    json_t *n;
    snprintf(buf, len, "%.12s", id);
    json_array_foreach(l->nodes, i, n) {
        if (strcmp(s_str(n, "ID", NULL), id))
            continue;
        const char *label = s_str(json_object_get(n, "Spec"), "Labels", NULL);
        json_t *labels = json_object_get(json_object_get(n, "Spec"), "Labels");
        label = json_is_string(json_object_get(labels, "korch.node"))
                    ? json_string_value(json_object_get(labels, "korch.node"))
                    : s_str(n, "Description", "Hostname");
        snprintf(buf, len, "%s (%s)", *label ? label : id, s_str(n, "Status", "Addr"));
    }
}

/* The node's state ("ready", "down", "unknown", "disconnected"), "" unknown. */
static const char *s_node_state(swarm_launcher_t *l, const char *id)
{
    size_t i;
    json_t *n;
    json_array_foreach(l->nodes, i, n) if (!strcmp(s_str(n, "ID", NULL), id)) return s_str(n, "Status", "State");
    return "";
}

/* -------------------------------------------------------------- the end */

/* Why a task ended, from its status. */
static void s_describe(swarm_proc_t *p, json_t *t)
{
    json_t *status = json_object_get(t, "Status");
    const char *state = s_str(status, "State", NULL);
    const char *err = s_str(status, "Err", NULL);
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
   keeping the last S_TAIL_MAX bytes in p->tail. */
static void s_keep_tail(swarm_proc_t *p, const unsigned char *in, size_t len)
{
    size_t w = 0, pos = 0;
    bool framed = len >= 8 && in[0] <= 2 && !in[1] && !in[2] && !in[3];
    while (pos < len) {
        const unsigned char *chunk = in + pos;
        size_t n = len - pos;
        if (framed) {
            if (n < 8)
                break;
            size_t sz = (size_t)in[pos + 4] << 24 | (size_t)in[pos + 5] << 16 | (size_t)in[pos + 6] << 8 | in[pos + 7];
            chunk = in + pos + 8;
            n = sz <= len - pos - 8 ? sz : len - pos - 8;
            pos += 8 + n;
        } else
            pos = len;
        if (n >= S_TAIL_MAX) {
            memcpy(p->tail, chunk + n - S_TAIL_MAX, S_TAIL_MAX);
            w = S_TAIL_MAX;
        } else {
            if (w + n > S_TAIL_MAX) {
                memmove(p->tail, p->tail + (w + n - S_TAIL_MAX), S_TAIL_MAX - n);
                w = S_TAIL_MAX - n;
            }
            memcpy(p->tail + w, chunk, n);
            w += n;
        }
    }
    p->tail[w] = 0;
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
static void s_start_fail(swarm_proc_t *p, korch_rc_t rc)
{
    korch_err_t err = {0};
    char last[512];
    s_last_line(p->tail, last, sizeof last);
    korch_err_set(&err, rc, "%s%s%s", p->why, last[0] ? ": " : "", last);
    korch_op_t *op = p->start_op;
    p->start_op = NULL;
    s_proc_unlink(p);
    s_reap(p->l, p->service, p->secret);
    /* an adopted service of ours that goes takes korch's copy along */
    if (p->conn_file[0] && (!p->adopting || p->service[0]))
        unlink(p->conn_file);
    if (p->adopting && p->service[0] && p->base.runtime_dir[0] && rmdir(p->base.runtime_dir) != 0 && errno != ENOENT)
        korch_debug("runtime dir '%s' kept: %s", p->base.runtime_dir, strerror(errno));
    s_proc_release(p);
    korch_op_finish_proc(op, NULL, rc, &err);
}

/* The kernel ended (why in p->why): the caller hears, its service goes. */
static void s_dead(swarm_proc_t *p)
{
    p->st = ST_DEAD;
    s_proc_unlink(p);
    s_reap(p->l, p->service, p->secret);
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
        s_start_fail(p, p->fail_rc ? p->fail_rc : KORCH_E_LAUNCH);
    else
        s_dead(p);
}

/* The end seen (why set): read the service's last log lines, then report. */
static void s_ended(swarm_proc_t *p, korch_rc_t rc)
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

/* ------------------------------------------------------------ the poll */

/* This proc's newest task in the list, or NULL. */
static json_t *s_task_of(json_t *tasks, const char *service)
{
    size_t i;
    json_t *t, *best = NULL;
    json_int_t best_v = -1;
    json_array_foreach(tasks, i, t) {
        if (strcmp(s_str(t, "ServiceID", NULL), service))
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
    json_t *t = s_task_of(tasks, p->service);
    const char *state = t ? s_str(t, "Status", "State") : "";
    const char *desired = t ? s_str(t, "DesiredState", NULL) : "";
    const char *node = t ? s_str(t, "NodeID", NULL) : "";
    bool gone = t && (!strcmp(state, "complete") || !strcmp(state, "failed") || !strcmp(state, "shutdown") ||
                      !strcmp(state, "rejected") || !strcmp(state, "orphaned") || !strcmp(state, "remove"));
    bool given_up = t && strcmp(desired, "running") && strcmp(desired, "ready") && strcmp(desired, "accepted") &&
                    strcmp(desired, "new") && strcmp(desired, "pending") && strcmp(desired, "assigned");
    const char *ns = *node ? s_node_state(l, node) : "";
    bool node_down = *ns && strcmp(ns, "ready");
    char nname[160];
    if (*node)
        snprintf(p->node, sizeof p->node, "%s", node);

    if (p->st == ST_SCHEDULE) {
        char addr[64];
        if (t && !gone && !given_up && !node_down && !strcmp(state, "running") && s_task_addr(l, t, addr, sizeof addr)) {
            snprintf(p->base.conn.ip, sizeof p->base.conn.ip, "%s", addr);
            p->st = ST_RUNNING;
            s_node_name(l, node, nname, sizeof nname);
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
                s_node_name(l, node, nname, sizeof nname);
                snprintf(p->why, sizeof p->why, "cannot start the kernel's service %.100s: its node %.100s is %.100s", p->name,
                         nname, ns);
                s_start_fail(p, KORCH_E_LAUNCH); /* a down node gives no logs */
                return;
            } else {
                char d[200];
                s_describe(p, t);
                snprintf(d, sizeof d, "%.100s", p->why);
                snprintf(p->why, sizeof p->why, "cannot start the kernel's service %.100s (image %.100s): %.100s", p->name,
                         s_str(json_object_get(json_object_get(t, "Spec"), "ContainerSpec"), "Image", NULL), d);
            }
            s_ended(p, KORCH_E_LAUNCH);
            return;
        }
        if (korch_now_ms() - p->sched_began > l->o.schedule_timeout_ms) {
            const char *e = t ? s_str(t, "Status", "Err") : "";
            snprintf(p->why, sizeof p->why, "the kernel's service %s did not run within %d s (task %s%s%s)", p->name,
                     l->o.schedule_timeout_ms / 1000, t ? state : "not created", *e ? ": " : "", e);
            s_ended(p, KORCH_E_TIMEOUT);
        }
        return;
    }
    if (p->st != ST_RUNNING)
        return;
    if (!t) {
        snprintf(p->why, sizeof p->why, "its service %s was removed outside korch", p->name);
        p->service[0] = 0;
        s_dead(p);
    } else if (node_down) {
        s_node_name(l, node, nname, sizeof nname);
        snprintf(p->why, sizeof p->why, "its node %s is %s", nname, ns);
        s_dead(p);
    } else if (gone || given_up) {
        s_describe(p, t);
        if (!gone) {
            char d[200];
            snprintf(d, sizeof d, "%.100s", p->why);
            snprintf(p->why, sizeof p->why, "the swarm gave its task up (desired state %s; %s)", desired, d);
        }
        s_ended(p, KORCH_OK);
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

static void s_poll_now(swarm_launcher_t *l)
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

static int s_on_poll_timer(korch_loop_t *loop, int id, void *arg)
{
    (void)loop;
    (void)id;
    s_poll_now(arg);
    return 0;
}

static void s_proc_link(swarm_proc_t *p)
{
    p->next = p->l->procs;
    p->l->procs = p;
}

static void s_proc_unlink(swarm_proc_t *p)
{
    for (swarm_proc_t **pp = &p->l->procs; *pp; pp = &(*pp)->next)
        if (*pp == p) {
            *pp = p->next;
            break;
        }
    p->next = NULL;
}

/* ---------------------------------------------------------- background */

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

static bool s_delete_sync(swarm_launcher_t *l, const char *what, const char *id);

/* At launcher_destroy: what is left, blocking. */
static void s_reap_finish(void *arg)
{
    s_reap_t *r = arg;
    if (r->call)
        korch_op_cancel(&r->call);
    if (r->service[0])
        s_delete_sync(r->l, "services", r->service);
    if (r->secret[0])
        s_delete_sync(r->l, "secrets", r->secret);
    free(r);
}

static void s_reap(swarm_launcher_t *l, const char *service, const char *secret)
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
static bool s_delete_sync(swarm_launcher_t *l, const char *what, const char *id)
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

/* ------------------------------------------------------------- start */

/* The kernel's command: the kernelspec's argv (argv[0] by basename, the
   connection file in /tmp), run after copying the secret there. Given as
   Args, so the image's entrypoint still runs first. */
static json_t *s_args(const korch_kernelspec_t *spec, const char *workdir)
{
    /* "$0" is the work dir, made in /tmp's tmpfs (see s_service_spec). */
    json_t *a = json_pack("[s, s, s, s]", "/bin/sh", "-c",
                          "cp " S_SECRET_AT " " S_CONN_IN " && mkdir -p \"$0\" && cd \"$0\" && exec \"$@\"", workdir);
    for (size_t i = 0; a && spec->argv[i]; i++) {
        const char *s = spec->argv[i];
        if (i == 0 && strchr(s, '/'))
            s = strrchr(s, '/') + 1;
        char *x = s_replace(s, "{connection_file}", S_CONN_IN);
        if (!x || json_array_append_new(a, json_string(x))) {
            free(x);
            json_decref(a);
            return NULL;
        }
        free(x);
    }
    return a;
}

/* Append comma-separated constraints from s to arr. */
static void s_add_constraints(json_t *arr, const char *s)
{
    while (s && *s) {
        size_t n = strcspn(s, ",");
        size_t b = 0;
        while (b < n && s[b] == ' ')
            b++;
        size_t e = n;
        while (e > b && s[e - 1] == ' ')
            e--;
        if (e > b)
            json_array_append_new(arr, json_stringn(s + b, e - b));
        s += n;
        if (*s == ',')
            s++;
    }
}

/* The request's KERNEL_PLACEMENT, or NULL. */
static const char *s_req_placement(const korch_launch_t *req)
{
    for (const char *const *e = req->env; e && *e; e++)
        if (!strncmp(*e, "KERNEL_PLACEMENT=", 17))
            return *e + 17;
    return NULL;
}

static json_t *s_service_spec(swarm_proc_t *p, const korch_launch_t *req, const char *image)
{
    swarm_launcher_t *l = p->l;
    const korch_swarm_opts_t *o = &l->o;
    char uid[16], gid[16];
    snprintf(uid, sizeof uid, "%u", (unsigned)l->uid);
    snprintf(gid, sizeof gid, "%u", (unsigned)l->gid);
    char **ev = korch_env_build(req, false, NULL);
    json_t *env = json_array();
    for (char **e = ev; env && e && *e; e++)
        json_array_append_new(env, json_string(*e));
    korch_env_free(ev);
    json_t *args = s_args(req->spec, o->workdir_mount);
    json_t *cons = json_array();
    s_add_constraints(cons, o->constraints);
    json_t *meta = json_object_get(json_object_get(req->spec->json, "metadata"), "korch");
    if (json_is_string(json_object_get(meta, "constraints")))
        s_add_constraints(cons, json_string_value(json_object_get(meta, "constraints")));
    s_add_constraints(cons, s_req_placement(req));
    json_t *labels = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "korch.kernel_id", req->kernel_id, "korch.instance",
                               o->instance ? o->instance : "default", "korch.kernelspec",
                               req->spec->name ? req->spec->name : "", "korch.runtime_dir", req->runtime_dir,
                               "korch.secret", p->secret, "korch.scope", p->l->scope);
    /* One tmpfs, /tmp, holding the work dir too: Engine 20.10's swarm
       executor ignores TmpfsOptions.Mode (and `--mount tmpfs-mode`), so a
       tmpfs gets root as owner and the mode of the image's directory under
       it; only /tmp (1777 in any image) is writable by the kernel's uid. */
    int64_t tmp_bytes = (o->tmp_size > 0 ? o->tmp_size : 0) + (o->workdir_size > 0 ? o->workdir_size : 0);
    json_t *tmp = json_pack("{s:s, s:s, s:{s:I}}", "Type", "tmpfs", "Target", "/tmp", "TmpfsOptions", "SizeBytes",
                            (json_int_t)tmp_bytes);
    json_t *secret = json_pack("{s:{s:s, s:s, s:s, s:i}, s:s, s:s}", "File", "Name", "kernel.json", "UID", uid, "GID",
                               gid, "Mode", 0400, "SecretID", p->secret, "SecretName", p->name);
    json_t *limits = json_object();
    if (o->memory > 0)
        json_object_set_new(limits, "MemoryBytes", json_integer(o->memory));
    if (o->nano_cpus > 0)
        json_object_set_new(limits, "NanoCPUs", json_integer(o->nano_cpus));
    if (o->pids_limit > 0)
        json_object_set_new(limits, "Pids", json_integer(o->pids_limit));
    json_t *cs = json_pack("{s:s, s:o, s:o, s:s, s:s, s:b, s:b, s:[s], s:[o], s:[o], s:I, s:o}", "Image", image,
                           "Args", args, "Env", env, "User", o->user, "Dir", "/tmp", "ReadOnly", 1, "Init",
                           1, "CapabilityDrop", "ALL", "Mounts", tmp, "Secrets", secret, "StopGracePeriod",
                           (json_int_t)o->stop_grace_ms * 1000000, "Labels",
                           json_pack("{s:s, s:s}", "korch.kernel_id", req->kernel_id, "korch.scope", p->l->scope));
    if (cs && o->nofile > 0)
        json_object_set_new(cs, "Ulimits", json_pack("[{s:s, s:I, s:I}]", "Name", "nofile", "Soft",
                                                     (json_int_t)o->nofile, "Hard", (json_int_t)o->nofile));
    json_t *spec = json_pack("{s:s, s:o, s:{s:o, s:{s:o}, s:{s:s}, s:{s:o}, s:[{s:s}]}, s:{s:{s:i}}, s:{s:s}}",
                             "Name", p->name, "Labels", labels, "TaskTemplate", "ContainerSpec", cs, "Resources",
                             "Limits", limits, "RestartPolicy", "Condition", "none", "Placement", "Constraints", cons,
                             "Networks", "Target", l->network_id, "Mode", "Replicated", "Replicas", 1,
                             "EndpointSpec", "Mode", "dnsrr");
    return spec;
}

/* The image: the option, the kernelspec's metadata.korch.image, or the
   convention korch-kernel-<name>:latest. */
static void s_image(const swarm_launcher_t *l, const korch_kernelspec_t *spec, char *buf, size_t len)
{
    json_t *img = json_object_get(json_object_get(json_object_get(spec->json, "metadata"), "korch"), "image");
    if (l->o.image)
        snprintf(buf, len, "%s", l->o.image);
    else if (json_is_string(img))
        snprintf(buf, len, "%s", json_string_value(img));
    else
        snprintf(buf, len, "korch-kernel-%s:latest", spec->name ? spec->name : "python3");
}

static void s_on_service(korch_rc_t rc, const korch_err_t *err, korch_docker_reply_t *r, void *arg)
{
    swarm_proc_t *p = arg;
    p->call = NULL;
    const char *id = r ? s_str(r->json, "ID", NULL) : "";
    if (rc != KORCH_OK) {
        snprintf(p->why, sizeof p->why, "cannot create the kernel's service: %.100s", err->msg);
        s_start_fail(p, rc);
        return;
    }
    if (r->status != 201 || !*id) {
        snprintf(p->why, sizeof p->why, "cannot create the kernel's service %s: %s", p->name,
                 korch_docker_reply_message(r));
        s_start_fail(p, KORCH_E_DOCKER);
        return;
    }
    snprintf(p->service, sizeof p->service, "%s", id);
    json_t *w;
    size_t i;
    json_array_foreach(json_object_get(r->json, "Warnings"), i, w)
        korch_info("swarm: service %s: %s", p->name, json_string_value(w));
    p->st = ST_SCHEDULE;
    p->sched_began = korch_now_ms();
    s_poll_now(p->l);
}

static void s_on_secret(korch_rc_t rc, const korch_err_t *err, korch_docker_reply_t *r, void *arg)
{
    swarm_proc_t *p = arg;
    json_t *spec = p->spec;
    p->spec = NULL;
    p->call = NULL;
    const char *id = r ? s_str(r->json, "ID", NULL) : "";
    if (rc != KORCH_OK || r->status != 201 || !*id) {
        snprintf(p->why, sizeof p->why, "cannot create the kernel's secret %.100s: %.100s", p->name,
                 rc ? err->msg : korch_docker_reply_message(r));
        json_decref(spec);
        s_start_fail(p, rc ? rc : KORCH_E_DOCKER);
        return;
    }
    snprintf(p->secret, sizeof p->secret, "%s", id);
    /* The spec names the secret by id and label. */
    json_t *ref = json_array_get(json_object_get(json_object_get(json_object_get(spec, "TaskTemplate"),
                                                                 "ContainerSpec"), "Secrets"), 0);
    json_object_set_new(ref, "SecretID", json_string(id));
    json_object_set_new(json_object_get(spec, "Labels"), "korch.secret", json_string(id));
    p->st = ST_SERVICE;
    korch_err_t e = {0};
    p->call = korch_docker_request_async(p->l->api, "POST", "/services/create", spec, NULL, s_on_service, p, &e);
    json_decref(spec);
    if (!p->call) {
        snprintf(p->why, sizeof p->why, "cannot create the kernel's service: %.100s", e.msg);
        s_start_fail(p, e.rc ? e.rc : KORCH_E_DOCKER);
    }
}

/* The caller gave the start (or adopt) up: what was made goes. */
static void s_start_cancel(korch_op_t *op, void *arg)
{
    (void)op;
    swarm_proc_t *p = arg;
    p->start_op = NULL;
    if (p->call)
        korch_op_cancel(&p->call);
    s_proc_unlink(p);
    s_reap(p->l, p->service, p->secret);
    if (p->conn_file[0] && !p->adopting)
        unlink(p->conn_file);
    s_proc_release(p);
}

static swarm_proc_t *s_proc_new(swarm_launcher_t *l, const korch_launch_t *req, korch_op_t *op)
{
    swarm_proc_t *p = korch_backend_proc_new(&l->base, sizeof *p, req);
    if (!p)
        return NULL;
    p->l = l;
    p->file_timer = -1;
    p->start_op = op;
    korch_op_on_cancel(op, s_start_cancel, p);
    return p;
}

/* The launcher's part of a start: secret, service, task (see the top). */
static korch_rc_t s_start(korch_launcher_t *self, const korch_launch_t *req, korch_op_t *op, korch_err_t *err)
{
    swarm_launcher_t *l = (swarm_launcher_t *)self;
    char image[512], rnd[8];
    if (!req || !req->spec || !req->conn || !req->kernel_id || !s_valid_name(req->kernel_id) || !req->runtime_dir)
        return korch_err_set(err, KORCH_E_INVALID, "the swarm launcher needs a kernelspec, a connection, a runtime "
                                                   "dir and a kernel id made of [A-Za-z0-9_.-]");
    swarm_proc_t *p = s_proc_new(l, req, op);
    if (!p)
        return korch_err_set(err, KORCH_E_NOMEM, "out of memory");
    /* A name per start: the service of a kernel's previous run may still be
       on its way out when its restart begins. */
    unsigned char r[3];
    FILE *f = fopen("/dev/urandom", "rb");
    if (!f || fread(r, 1, sizeof r, f) != sizeof r)
        memset(r, 0, sizeof r);
    if (f)
        fclose(f);
    snprintf(rnd, sizeof rnd, "%02x%02x%02x", r[0], r[1], r[2]);
    snprintf(p->kernel_id, sizeof p->kernel_id, "%s", req->kernel_id);
    snprintf(p->name, sizeof p->name, "korch-%.36s-%s", req->kernel_id, rnd);
    snprintf(p->conn_file, sizeof p->conn_file, "%.*s/%s", (int)korch_dir_len(req->runtime_dir), req->runtime_dir,
             S_CONN_FILE);
    p->python = req->spec->language && !strcmp(req->spec->language, "python");

    /* The kernel's file: tcp on every address of its task, fixed ports. */
    korch_conn_t *kc = &p->base.conn; /* korch's: the same, ip set once the task has its address */
    snprintf(kc->transport, sizeof kc->transport, "tcp");
    snprintf(kc->ip, sizeof kc->ip, "0.0.0.0");
    for (int i = 0; i < KORCH_CH__COUNT; i++)
        kc->port[i] = S_PORT0 + i;
    snprintf(kc->kernel_name, sizeof kc->kernel_name, "%s", req->spec->name ? req->spec->name : "");
    json_t *cj = korch_conn_json(kc);
    char *ctext = cj ? json_dumps(cj, JSON_COMPACT) : NULL;
    char *b64 = ctext ? korch_b64_encode((const unsigned char *)ctext, strlen(ctext)) : NULL;
    json_decref(cj);
    if (ctext)
        explicit_bzero(ctext, strlen(ctext)); /* the key */
    free(ctext);
    /* korch's copy, for re-adoption (the secret cannot be read back). */
    korch_err_t e = {0};
    if (!b64 || korch_conn_save(kc, p->conn_file, &e) != KORCH_OK) {
        korch_err_set(err, e.rc ? e.rc : KORCH_E_NOMEM, "%s", e.rc ? e.msg : "out of memory");
        free(b64);
        p->conn_file[0] = 0;
        goto fail;
    }
    s_image(l, req->spec, image, sizeof image);
    p->spec = s_service_spec(p, req, image);
    json_t *body = json_pack("{s:s, s:s, s:{s:s, s:s, s:s}}", "Name", p->name, "Data", b64, "Labels", "korch.instance",
                             l->o.instance ? l->o.instance : "default", "korch.kernel_id", req->kernel_id,
                             "korch.scope", l->scope);
    explicit_bzero(b64, strlen(b64));
    free(b64);
    if (!p->spec || !body) {
        json_decref(body);
        korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        goto fail;
    }
    p->call = korch_docker_request_async(l->api, "POST", "/secrets/create", body, NULL, s_on_secret, p, err);
    json_decref(body);
    if (!p->call)
        goto fail;
    p->st = ST_SECRET;
    s_proc_link(p);
    return KORCH_OK;
fail:
    if (p->conn_file[0])
        unlink(p->conn_file);
    korch_op_on_cancel(op, NULL, NULL);
    s_proc_release(p);
    return err && err->rc ? err->rc : KORCH_E_NOMEM;
}

/* ------------------------------------------------- the kernel's channels */

/* The launcher's own session with the kernel (its key), made on first use. */
static korch_session_t *s_session(swarm_proc_t *p)
{
    if (!p->session)
        p->session = korch_session_new(p->base.conn.key, strlen(p->base.conn.key), "korch", NULL, NULL);
    return p->session;
}

/* A DEALER of the launcher's own to one of the kernel's ROUTERs. */
static zsock_t *s_dealer(swarm_proc_t *p, korch_channel_t ch)
{
    char ep[PATH_MAX + 32];
    korch_conn_endpoint(&p->base.conn, ch, ep, sizeof ep);
    zsock_t *s = zsock_new(ZMQ_DEALER);
    if (!s)
        return NULL;
    zsock_set_linger(s, 0);
    if (zsock_connect(s, "%s", ep) != 0) {
        zsock_destroy(&s);
        return NULL;
    }
    return s;
}

/* Replies on the control channel: read and dropped (interrupt_reply). */
static int s_on_control(korch_loop_t *loop, zsock_t *sock, void *arg)
{
    (void)loop;
    (void)arg;
    zmsg_t *m = zmsg_recv(sock);
    zmsg_destroy(&m);
    return 0;
}

/* SIGINT as interrupt_request on control (see the top). */
static korch_rc_t s_interrupt(swarm_proc_t *p, korch_err_t *err)
{
    if (!s_session(p))
        return korch_err_set(err, KORCH_E_NOMEM, "cannot create a session (openssl)");
    if (!p->control) {
        p->control = s_dealer(p, KORCH_CH_CONTROL);
        if (!p->control)
            return korch_err_set(err, KORCH_E_IO, "cannot connect to the kernel's control channel at %s",
                                 p->base.conn.ip);
        korch_loop_reader(p->l->base.loop, p->control, s_on_control, p);
    }
    korch_msg_t *m = korch_msg_new("interrupt_request", NULL);
    return korch_session_send(p->session, p->control, &m, err);
}

/* -------------------------------------------------------------- files */

/* A file operation that waits for the one under way (p->file_op): the
   kernel runs them one after another anyway, on its shell channel. */
struct s_fileq {
    s_fileq_t *next;
    swarm_proc_t *p;
    korch_op_t *op;
    bool get;
    char *name;
    char *data; /* a put's bytes (a copy), NULL for a get */
    size_t len, max;
};

static void s_fileq_free(s_fileq_t *q)
{
    free(q->name);
    free(q->data);
    free(q);
}

static void s_file_next(swarm_proc_t *p);

static void s_file_end(swarm_proc_t *p, korch_rc_t rc, const korch_err_t *err, char *data, size_t len)
{
    korch_op_t *op = p->file_op;
    if (p->file_timer >= 0)
        korch_loop_timer_end(p->l->base.loop, p->file_timer);
    p->file_timer = -1;
    p->file_op = NULL;
    if (!op) {
        free(data);
        return;
    }
    korch_op_on_cancel(op, NULL, NULL);
    if (p->file_get)
        korch_op_finish_file(op, data, len, rc, err);
    else {
        free(data);
        korch_op_finish(op, rc, err);
    }
    s_file_next(p); /* its callback runs a round later: nothing re-enters here */
}

static void s_file_cancel(korch_op_t *op, void *arg)
{
    (void)op;
    swarm_proc_t *p = arg;
    if (p->file_timer >= 0)
        korch_loop_timer_end(p->l->base.loop, p->file_timer);
    p->file_timer = -1;
    p->file_op = NULL; /* a late reply finds no op and is dropped */
    s_file_next(p);
}

/* A waiting operation cancelled: it leaves the queue. */
static void s_fileq_cancel(korch_op_t *op, void *arg)
{
    (void)op;
    s_fileq_t *q = arg;
    for (s_fileq_t **pq = &q->p->fileq; *pq; pq = &(*pq)->next)
        if (*pq == q) {
            *pq = q->next;
            break;
        }
    s_fileq_free(q);
}

/* The execute_reply of a file operation on our shell DEALER. */
static int s_on_shell(korch_loop_t *loop, zsock_t *sock, void *arg)
{
    (void)loop;
    swarm_proc_t *p = arg;
    zmsg_t *frames = zmsg_recv(sock);
    korch_msg_t *m = NULL;
    korch_err_t err = {0};
    korch_reject_t why;
    if (!frames || korch_session_deserialize(p->session, &frames, &m, &why, &err) != KORCH_OK) {
        zmsg_destroy(&frames);
        return 0;
    }
    if (!p->file_op || strcmp(korch_msg_parent_id(m), p->file_msg_id) || strcmp(korch_msg_type(m), "execute_reply")) {
        korch_msg_destroy(&m);
        return 0;
    }
    json_t *c = m->content;
    json_t *ue = json_object_get(json_object_get(c, "user_expressions"), "r");
    const char *text = s_str(json_object_get(ue, "data"), "text/plain", NULL);
    korch_rc_t rc = KORCH_OK;
    char *data = NULL;
    size_t len = 0;
    if (strcmp(s_str(c, "status", NULL), "ok") || strcmp(s_str(ue, "status", NULL), "ok")) {
        const char *ev = s_str(ue, "evalue", NULL);
        rc = korch_err_set(&err, KORCH_E_IO, "the kernel could not %s the file: %s", p->file_get ? "read" : "write",
                           *ev ? ev : s_str(c, "evalue", NULL));
    } else if (p->file_get) {
        /* repr of a str: 'base64' or "E:NOTFOUND" / "E:TOOBIG" */
        size_t tl = strlen(text);
        if (tl >= 2 && (text[0] == '\'' || text[0] == '"'))
            text++, tl -= 2;
        if (tl >= 2 && !strncmp(text, "E:", 2)) {
            rc = !strncmp(text, "E:NOTFOUND", 10)
                     ? korch_err_set(&err, KORCH_E_NOTFOUND, "no file in the kernel's work dir by that name")
                 : !strncmp(text, "E:TOOBIG", 8)
                     ? korch_err_set(&err, KORCH_E_TOOBIG, "the file is larger than %zu bytes%s", p->file_max,
                                     p->file_max == S_FILE_MAX ? " (files through a swarm kernel are at most 16 MiB)" : "")
                     : korch_err_set(&err, KORCH_E_IO, "the kernel could not read the file: %.*s", (int)tl, text);
        } else {
            unsigned char *raw = korch_b64_decode(text, tl, &len);
            if (!raw)
                rc = korch_err_set(&err, KORCH_E_PROTOCOL, "the kernel's answer is not base64");
            else if (len > p->file_max)
                rc = korch_err_set(&err, KORCH_E_TOOBIG, "the file is larger than %zu bytes%s", p->file_max,
                                   p->file_max == S_FILE_MAX ? " (files through a swarm kernel are at most 16 MiB)" : "");
            if (raw && !rc) {
                data = malloc(len + 1);
                if (data) {
                    memcpy(data, raw, len);
                    data[len] = 0;
                } else
                    rc = korch_err_set(&err, KORCH_E_NOMEM, "out of memory");
            }
            free(raw);
        }
    }
    korch_msg_destroy(&m);
    s_file_end(p, rc, rc ? &err : NULL, rc ? (free(data), NULL) : data, rc ? 0 : len);
    return 0;
}

static int s_on_file_timer(korch_loop_t *loop, int id, void *arg)
{
    (void)loop;
    (void)id;
    swarm_proc_t *p = arg;
    p->file_timer = -1;
    korch_err_t err = {0};
    korch_err_set(&err, KORCH_E_TIMEOUT, "the kernel did not answer the file request within 30 s (is it busy?)");
    s_file_end(p, KORCH_E_TIMEOUT, &err, NULL, 0);
    return 0;
}

/* The Python a file operation runs in the kernel, in a namespace of its
   own (n: the name, already checked relative; w: the work dir; m: the
   bound; x: the data in base64). Every directory on the way and the file
   itself are opened O_NOFOLLOW relative to the one before: what the
   kernel's code planted is its own business, but is never followed. */
static const char S_PY_WALK[] = "import os, base64\n"
                                "def _walk(make):\n"
                                "    d = os.open(w, os.O_RDONLY | os.O_DIRECTORY)\n"
                                "    for q in n.split('/')[:-1]:\n"
                                "        if make:\n"
                                "            try:\n"
                                "                os.mkdir(q, 0o755, dir_fd=d)\n"
                                "            except FileExistsError:\n"
                                "                pass\n"
                                "        try:\n"
                                "            e = os.open(q, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=d)\n"
                                "        finally:\n"
                                "            os.close(d)\n"
                                "        d = e\n"
                                "    return d\n";
static const char S_PY_GET[] = "try:\n"
                               "    d = _walk(False)\n"
                               "    try:\n"
                               "        f = os.open(n.split('/')[-1], os.O_RDONLY | os.O_NOFOLLOW, dir_fd=d)\n"
                               "    finally:\n"
                               "        os.close(d)\n"
                               "    try:\n"
                               "        s = b''\n"
                               "        while len(s) <= m:\n"
                               "            c = os.read(f, 1 << 20)\n"
                               "            if not c:\n"
                               "                break\n"
                               "            s += c\n"
                               "    finally:\n"
                               "        os.close(f)\n"
                               "    r = 'E:TOOBIG' if len(s) > m else base64.b64encode(s).decode()\n"
                               "except FileNotFoundError:\n"
                               "    r = 'E:NOTFOUND'\n";
static const char S_PY_PUT[] = "d = _walk(True)\n"
                               "try:\n"
                               "    f = os.open(n.split('/')[-1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW,"
                               " 0o644, dir_fd=d)\n"
                               "finally:\n"
                               "    os.close(d)\n"
                               "try:\n"
                               "    x = base64.b64decode(x)\n"
                               "    v = memoryview(x)\n"
                               "    while v:\n"
                               "        v = v[os.write(f, v):]\n"
                               "finally:\n"
                               "    os.close(f)\n"
                               "r = len(x)\n";

/* What refuses a file operation whether it runs now or waits. */
static korch_rc_t s_file_check(swarm_proc_t *p, bool get, size_t len, korch_err_t *err)
{
    if (p->st != ST_RUNNING) {
        return korch_err_set(err, KORCH_E_DIED, "the kernel is not running (%s)", p->why[0] ? p->why : "not started");
    }
    if (!p->python) {
        return korch_err_set(err, KORCH_E_STATE, "the swarm launcher moves files through the kernel, and only a Python "
                                          "kernel's (this one's language is not python)");
    }
    if (!get && len > S_FILE_MAX) {
        return korch_err_set(err, KORCH_E_TOOBIG, "files through a swarm kernel are at most %u MiB", S_FILE_MAX >> 20);
    }
    return KORCH_OK;
}

/* Send the operation to the kernel; it becomes p->file_op. */
static korch_rc_t s_file_send(swarm_proc_t *p, const char *name, bool get, const void *data, size_t len, size_t max,
                              korch_op_t *op, korch_err_t *err)
{
    /* A get's max is the caller's bound (the agent API passes its upload
       limit, 64 MiB): read up to ours, and say ours if the file is larger. */
    if (get && max > S_FILE_MAX)
        max = S_FILE_MAX;
    if (!s_session(p)) {
        return korch_err_set(err, KORCH_E_NOMEM, "cannot create a session (openssl)");
    }
    if (!p->shell) {
        p->shell = s_dealer(p, KORCH_CH_SHELL);
        if (!p->shell) {
            return korch_err_set(err, KORCH_E_IO, "cannot connect to the kernel's shell channel at %s", p->base.conn.ip);
        }
        korch_loop_reader(p->l->base.loop, p->shell, s_on_shell, p);
    }
    char *b64 = get ? NULL : korch_b64_encode(data, len);
    char src[sizeof S_PY_WALK + sizeof S_PY_GET + sizeof S_PY_PUT];
    snprintf(src, sizeof src, "%s%s", S_PY_WALK, get ? S_PY_GET : S_PY_PUT);
    json_t *vals = json_pack("[s, s, s, s]", src, name, p->l->o.workdir_mount, b64 ? b64 : "");
    free(b64);
    char *vs = vals ? json_dumps(vals, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    json_decref(vals);
    /* A JSON array of strings is a Python list literal (jansson escapes
       nothing Python reads otherwise). */
    size_t need = vs ? strlen(vs) + 256 : 0;
    char *expr = vs ? malloc(need) : NULL;
    if (!expr) {
        free(vs);
        return korch_err_set(err, KORCH_E_NOMEM, "out of memory");
    }
    snprintf(expr, need,
             "(lambda a: (lambda g: (exec(a[0], g), g['r'])[1])({'n': a[1], 'w': a[2], 'x': a[3], 'm': %zu}))(%s)",
             max, vs);
    free(vs);
    json_t *content = json_pack("{s:s, s:b, s:b, s:{s:s}, s:b, s:b}", "code", "", "silent", 1, "store_history", 0,
                                "user_expressions", "r", expr, "allow_stdin", 0, "stop_on_error", 0);
    free(expr);
    korch_msg_t *m = korch_msg_new("execute_request", content);
    const char *mid = m ? korch_session_stamp(p->session, m) : NULL;
    if (!mid) {
        korch_msg_destroy(&m);
        return korch_err_set(err, KORCH_E_NOMEM, "out of memory");
    }
    snprintf(p->file_msg_id, sizeof p->file_msg_id, "%s", mid);
    korch_rc_t rc = korch_session_send(p->session, p->shell, &m, err);
    if (rc)
        return rc;
    p->file_get = get;
    p->file_max = max;
    p->file_op = op;
    korch_op_on_cancel(op, s_file_cancel, p);
    p->file_timer = korch_loop_timer(p->l->base.loop, 30000, 1, s_on_file_timer, p);
    return KORCH_OK;
}

/* Start the oldest waiting operation once none is under way; one that
   cannot start (the kernel died meanwhile) ends with why. */
static void s_file_next(swarm_proc_t *p)
{
    while (!p->file_op && p->fileq) {
        s_fileq_t *q = p->fileq;
        p->fileq = q->next;
        korch_op_on_cancel(q->op, NULL, NULL);
        korch_err_t e = {0};
        korch_rc_t rc = s_file_check(p, q->get, q->len, &e);
        if (rc == KORCH_OK)
            rc = s_file_send(p, q->name, q->get, q->data, q->len, q->max, q->op, &e);
        if (rc != KORCH_OK) {
            if (q->get)
                korch_op_finish_file(q->op, NULL, 0, rc, &e);
            else
                korch_op_finish(q->op, rc, &e);
        }
        s_fileq_free(q);
    }
}

static korch_rc_t s_file_op(swarm_proc_t *p, const char *name, bool get, const void *data, size_t len, size_t max,
                            korch_op_t *op, korch_err_t *err)
{
    korch_rc_t rc = s_file_check(p, get, len, err);
    if (rc != KORCH_OK)
        return rc;
    if (!p->file_op)
        return s_file_send(p, name, get, data, len, max, op, err);
    s_fileq_t *q = calloc(1, sizeof *q);
    if (q) {
        q->name = strdup(name);
        q->data = get ? NULL : malloc(len ? len : 1);
    }
    if (!q || !q->name || (!get && !q->data)) {
        if (q)
            s_fileq_free(q);
        return korch_err_set(err, KORCH_E_NOMEM, "out of memory");
    }
    if (!get)
        memcpy(q->data, data, len);
    q->p = p;
    q->op = op;
    q->get = get;
    q->len = len;
    q->max = max;
    s_fileq_t **pq = &p->fileq;
    while (*pq)
        pq = &(*pq)->next;
    *pq = q;
    korch_op_on_cancel(op, s_fileq_cancel, q);
    return KORCH_OK;
}

/* ---------------------------------------------------------- proc ops */

static const char *s_log_tail(korch_proc_t *proc) { return ((swarm_proc_t *)proc)->tail; }

static void s_on_killed(korch_rc_t rc, const korch_err_t *err, korch_docker_reply_t *r, void *arg)
{
    swarm_proc_t *p = arg;
    p->call = NULL;
    long st = rc == KORCH_OK && r ? r->status : 0;
    if (st != 200 && st != 204 && st != 404) /* the reap job tries again */
        korch_warn("swarm: cannot remove the service of kernel %.8s: %s", p->kernel_id,
                   rc ? err->msg : korch_docker_reply_message(r));
    else
        p->service[0] = 0;
    snprintf(p->why, sizeof p->why, "killed by korch (its service removed)");
    s_dead(p);
}

/* Remove the service now: the node sends the container SIGTERM, then
   SIGKILL after stop_grace_ms. The end is reported once the manager has
   removed it (launcher.c then finishes the kill op). */
static korch_rc_t s_kill(korch_proc_t *proc, korch_op_t *op, korch_err_t *err)
{
    (void)op;
    swarm_proc_t *p = (swarm_proc_t *)proc;
    if (p->st == ST_DEAD || p->base.exited)
        return KORCH_OK;
    if (p->call)
        korch_op_cancel(&p->call); /* the logs of an end: the kill says it */
    if (!p->service[0]) {
        snprintf(p->why, sizeof p->why, "killed by korch");
        s_dead(p);
        return KORCH_OK;
    }
    char path[160];
    snprintf(path, sizeof path, "/services/%s", p->service);
    p->st = ST_ENDING;
    p->call = korch_docker_request_async(p->l->api, "DELETE", path, NULL, NULL, s_on_killed, p, err);
    return p->call ? KORCH_OK : (err && err->rc ? err->rc : KORCH_E_DOCKER);
}

static korch_rc_t s_signal(korch_proc_t *proc, int sig, korch_op_t *op, korch_err_t *err)
{
    swarm_proc_t *p = (swarm_proc_t *)proc;
    if (p->st != ST_RUNNING)
        return korch_err_set(err, KORCH_E_DIED, "kernel %.8s is not running%s%s", p->kernel_id,
                             p->why[0] ? ": " : "", p->why);
    korch_rc_t rc;
    if (sig == SIGTERM || sig == SIGKILL)
        rc = s_kill(proc, NULL, err);
    else if (sig == SIGINT)
        rc = s_interrupt(p, err);
    else
        rc = korch_err_set(err, KORCH_E_STATE,
                           "the swarm launcher cannot send signal %d to a task: no Engine API call signals a task on "
                           "another node (SIGINT goes as interrupt_request, SIGTERM and SIGKILL remove the service)",
                           sig);
    if (rc == KORCH_OK)
        korch_op_finish(op, KORCH_OK, NULL);
    return rc;
}

static korch_rc_t s_put_file(korch_proc_t *proc, const char *name, const void *data, size_t len, korch_op_t *op,
                             korch_err_t *err)
{
    return s_file_op((swarm_proc_t *)proc, name, false, data, len, 0, op, err);
}

static korch_rc_t s_get_file(korch_proc_t *proc, const char *name, size_t max, korch_op_t *op, korch_err_t *err)
{
    return s_file_op((swarm_proc_t *)proc, name, true, NULL, 0, max, op, err);
}

/* The memory and sockets; p is off the poll list and has no call in flight. */
static void s_proc_release(swarm_proc_t *p)
{
    if (p->control) {
        korch_loop_reader_end(p->l->base.loop, p->control);
        zsock_destroy(&p->control);
    }
    if (p->shell) {
        korch_loop_reader_end(p->l->base.loop, p->shell);
        zsock_destroy(&p->shell);
    }
    if (p->file_timer >= 0)
        korch_loop_timer_end(p->l->base.loop, p->file_timer);
    while (p->fileq) { /* their ops were cancelled with the proc */
        s_fileq_t *q = p->fileq;
        p->fileq = q->next;
        s_fileq_free(q);
    }
    json_decref(p->spec);
    korch_session_destroy(&p->session);
    explicit_bzero(p->base.conn.key, sizeof p->base.conn.key);
    free(p);
}

/* Never blocks: what is left on the manager goes to a background job. */
static void s_proc_free(korch_proc_t *proc)
{
    swarm_proc_t *p = (swarm_proc_t *)proc;
    if (p->call)
        korch_op_cancel(&p->call);
    s_proc_unlink(p);
    s_reap(p->l, p->service, p->secret);
    if (p->conn_file[0])
        unlink(p->conn_file);
    s_proc_release(p);
}

/* ------------------------------------------------------------ adopt */

static void s_on_adopt_service(korch_rc_t rc, const korch_err_t *err, korch_docker_reply_t *r, void *arg)
{
    swarm_proc_t *p = arg;
    swarm_launcher_t *l = p->l;
    const char *mine = l->o.instance ? l->o.instance : "default";
    p->call = NULL;
    if (rc != KORCH_OK || r->status != 200 || !json_is_array(r->json)) {
        snprintf(p->why, sizeof p->why, "cannot re-adopt kernel '%.100s': %.100s", p->kernel_id,
                 rc ? err->msg : korch_docker_reply_message(r));
        s_start_fail(p, rc ? rc : KORCH_E_DOCKER);
        return;
    }
    json_t *svc = json_array_get(r->json, 0);
    json_t *labels = json_object_get(json_object_get(svc, "Spec"), "Labels");
    const char *owner = s_str(labels, "korch.instance", NULL);
    const char *rdir = s_str(labels, "korch.runtime_dir", NULL);
    if (!svc) {
        snprintf(p->why, sizeof p->why, "cannot re-adopt kernel '%s': no swarm service has it", p->kernel_id);
        s_start_fail(p, KORCH_E_NOTFOUND);
        return;
    }
    snprintf(p->service, sizeof p->service, "%s", s_str(svc, "ID", NULL));
    snprintf(p->name, sizeof p->name, "%s", s_str(json_object_get(svc, "Spec"), "Name", NULL));
    if (strcmp(owner, mine)) {
        /* Labels cannot change: another instance's sweep would remove it. */
        snprintf(p->why, sizeof p->why, "cannot re-adopt kernel '%s': it belongs to korch instance '%s', not '%s'",
                 p->kernel_id, owner, mine);
        p->service[0] = 0; /* not ours to remove */
        s_start_fail(p, KORCH_E_STATE);
        return;
    }
    if (strcmp(s_str(labels, "korch.scope", NULL), l->scope)) {
        /* The same instance name in another lock domain (another machine's
           runtime dir, an older korch without the label) is not us. */
        snprintf(p->why, sizeof p->why,
                 "cannot re-adopt kernel '%.40s': its service is of korch scope '%.20s', not this runtime dir's "
                 "'%s' (another machine's korch, or an older korch)",
                 p->kernel_id, s_str(labels, "korch.scope", NULL), l->scope);
        p->service[0] = 0; /* not ours to remove */
        s_start_fail(p, KORCH_E_STATE);
        return;
    }
    snprintf(p->secret, sizeof p->secret, "%s", s_str(labels, "korch.secret", NULL));
    snprintf(p->base.runtime_dir, sizeof p->base.runtime_dir, "%s", rdir);
    snprintf(p->conn_file, sizeof p->conn_file, "%.*s/%s", (int)korch_dir_len(rdir), rdir, S_CONN_FILE);
    korch_err_t e = {0};
    char base[PATH_MAX];
    size_t bl;
    /* korch's own copy, in a dir of this runtime base (nothing else is
       trusted: adopt connects with what it finds there). */
    if (rdir[0] != '/' || korch_runtime_base(base, sizeof base, &e) != KORCH_OK ||
        strncmp(rdir, base, (bl = strlen(base))) || rdir[bl] != '/' || strchr(rdir + bl + 1, '/') ||
        korch_conn_load_nofollow(&p->base.conn, p->conn_file, &e) != KORCH_OK) {
        snprintf(p->why, sizeof p->why, "cannot re-adopt kernel '%.40s': korch's copy of its connection file in '%.60s' "
                 "cannot be used (%.80s)", p->kernel_id, rdir, e.rc ? e.msg : "not in korch's runtime dir");
        p->conn_file[0] = 0;
        s_start_fail(p, KORCH_E_NOTFOUND);
        return;
    }
    p->python = true; /* the kernelspec is korch.kernelspec: files are tried, the kernel says */
    p->st = ST_SCHEDULE;
    p->sched_began = korch_now_ms();
    s_poll_now(l);
}

/* Re-attach to the running service of kernel_id that an earlier korch of
   this instance started: the connection from korch's copy, the address
   from its task (which must still be running, on a live node). */
static korch_rc_t s_adopt(korch_launcher_t *self, const char *kernel_id, korch_op_t *op, korch_err_t *err)
{
    swarm_launcher_t *l = (swarm_launcher_t *)self;
    char path[400], label[160];
    if (!s_valid_name(kernel_id))
        return korch_err_set(err, KORCH_E_INVALID, "cannot re-adopt kernel '%s': not a valid kernel id",
                             kernel_id ? kernel_id : "");
    snprintf(label, sizeof label, "korch.kernel_id=%s", kernel_id);
    if (!s_filter_path(l, "services", "label", label, path, sizeof path))
        return korch_err_set(err, KORCH_E_NOMEM, "out of memory");
    swarm_proc_t *p = s_proc_new(l, NULL, op);
    if (!p)
        return korch_err_set(err, KORCH_E_NOMEM, "out of memory");
    p->adopting = true;
    snprintf(p->kernel_id, sizeof p->kernel_id, "%s", kernel_id);
    p->call = korch_docker_request_async(l->api, "GET", path, NULL, NULL, s_on_adopt_service, p, err);
    if (!p->call) {
        korch_op_on_cancel(op, NULL, NULL);
        s_proc_release(p);
        return err && err->rc ? err->rc : KORCH_E_DOCKER;
    }
    p->st = ST_SERVICE;
    s_proc_link(p);
    return KORCH_OK;
}

/* -------------------------------------------------------- the launcher */

const char *korch_swarm_proc_service(korch_proc_t *proc)
{
    if (!proc || !proc->launcher || strcmp(korch_launcher_name(proc->launcher), "swarm"))
        return NULL;
    return ((swarm_proc_t *)proc)->service;
}

static json_t *s_get_sync(swarm_launcher_t *l, const char *path, korch_err_t *err)
{
    korch_docker_reply_t r = {0};
    json_t *j = NULL;
    if (korch_docker_request(l->api, "GET", path, NULL, &r, err) != KORCH_OK)
        return NULL;
    if (r.status == 200 && r.json)
        j = json_incref(r.json);
    else
        korch_err_set(err, KORCH_E_DOCKER, "GET %s: %s", path, korch_docker_reply_message(&r));
    korch_docker_reply_clear(&r);
    return j;
}

json_t *korch_swarm_list(korch_launcher_t *self, const char *instance, korch_err_t *err)
{
    swarm_launcher_t *l = (swarm_launcher_t *)self;
    char label[200], path[600];
    if (instance)
        snprintf(label, sizeof label, "korch.instance=%s", instance);
    else
        snprintf(label, sizeof label, "korch.instance");
    if (!s_filter_path(l, "services", "label", label, path, sizeof path)) {
        korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        return NULL;
    }
    json_t *svcs = s_get_sync(l, path, err);
    s_filter_path(l, "tasks", "label", label, path, sizeof path);
    json_t *tasks = svcs ? s_get_sync(l, path, err) : NULL;
    json_t *out = tasks ? json_array() : NULL;
    size_t i;
    json_t *s;
    json_array_foreach(svcs, i, s) {
        if (!out)
            break;
        json_t *lb = json_object_get(json_object_get(s, "Spec"), "Labels");
        json_t *t = s_task_of(tasks, s_str(s, "ID", NULL));
        json_array_append_new(out, json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:s}", "id",
                                             s_str(s, "ID", NULL), "name", s_str(json_object_get(s, "Spec"), "Name", NULL),
                                             "kernel_id", s_str(lb, "korch.kernel_id", NULL), "instance",
                                             s_str(lb, "korch.instance", NULL), "kernelspec",
                                             s_str(lb, "korch.kernelspec", NULL), "runtime_dir",
                                             s_str(lb, "korch.runtime_dir", NULL), "secret",
                                             s_str(lb, "korch.secret", NULL), "scope",
                                             s_str(lb, "korch.scope", NULL), "state",
                                             t ? s_str(t, "Status", "State") : "", "node",
                                             t ? s_str(t, "NodeID", NULL) : ""));
    }
    json_decref(svcs);
    json_decref(tasks);
    return out;
}

int korch_swarm_remove_all(korch_launcher_t *self, const char *instance, korch_err_t *err)
{
    swarm_launcher_t *l = (swarm_launcher_t *)self;
    json_t *all = korch_swarm_list(self, instance, err);
    if (!all)
        return -1;
    int n = 0;
    size_t i;
    json_t *s;
    json_array_foreach(all, i, s) {
        if (strcmp(s_str(s, "scope", NULL), l->scope))
            continue; /* another lock domain's, or an older korch's: never removed from here */
        if (s_delete_sync(l, "services", s_str(s, "id", NULL)))
            n++;
        if (*s_str(s, "secret", NULL))
            s_delete_sync(l, "secrets", s_str(s, "secret", NULL));
    }
    json_decref(all);
    /* Secrets of the instance that no service uses any more (a korch that
       died between the secret and the service). */
    char label[200], path[600];
    snprintf(label, sizeof label, instance ? "korch.instance=%s" : "korch.instance", instance);
    json_t *secrets = s_filter_path(l, "secrets", "label", label, path, sizeof path) ? s_get_sync(l, path, NULL) : NULL;
    json_array_foreach(secrets, i, s) {
        korch_docker_reply_t r = {0};
        if (strcmp(s_str(json_object_get(json_object_get(s, "Spec"), "Labels"), "korch.scope", NULL), l->scope))
            continue; /* another lock domain's, or an older korch's */
        snprintf(path, sizeof path, "/secrets/%s", s_str(s, "ID", NULL));
        if (korch_docker_request(l->api, "DELETE", path, NULL, &r, NULL) == KORCH_OK && r.status != 204 &&
            r.status != 404)
            korch_debug("swarm: secret %s kept: %s", s_str(json_object_get(s, "Spec"), "Name", NULL),
                        korch_docker_reply_message(&r));
        korch_docker_reply_clear(&r);
    }
    json_decref(secrets);
    return n;
}

/* The launcher goes (its jobs are finished): a proc still being started
   is removed now, blocking (at exit only). */
static void s_free(korch_launcher_t *self)
{
    swarm_launcher_t *l = (swarm_launcher_t *)self;
    if (l->poll_call)
        korch_op_cancel(&l->poll_call);
    while (l->procs) {
        swarm_proc_t *p = l->procs;
        l->procs = p->next;
        if (p->call)
            korch_op_cancel(&p->call);
        if (p->service[0])
            s_delete_sync(l, "services", p->service);
        if (p->secret[0])
            s_delete_sync(l, "secrets", p->secret);
        if (p->conn_file[0] && !p->adopting)
            unlink(p->conn_file);
        s_proc_release(p);
    }
    if (l->timer > 0)
        korch_loop_timer_end(l->base.loop, l->timer);
    json_decref(l->nodes);
    korch_docker_destroy(&l->api);
    for (size_t i = 0; i < sizeof l->strs / sizeof *l->strs; i++)
        free(l->strs[i]);
    free(l);
}

/* The kernels' network: found by name, or made internal and attachable
   (and encrypted unless told not to). Its id into l->network_id. */
static korch_rc_t s_network(swarm_launcher_t *l, korch_err_t *err)
{
    char path[300];
    korch_docker_reply_t r = {0};
    char *esc = korch_docker_escape(l->api, l->o.network);
    snprintf(path, sizeof path, "/networks/%s", esc ? esc : "");
    free(esc);
    korch_rc_t rc = korch_docker_request(l->api, "GET", path, NULL, &r, err);
    if (rc)
        return rc;
    if (r.status == 200) {
        json_t *n = r.json;
        const char *driver = s_str(n, "Driver", NULL);
        const char *scope = s_str(n, "Scope", NULL);
        if (strcmp(driver, "overlay") || strcmp(scope, "swarm")) {
            rc = korch_err_set(err, KORCH_E_DOCKER, "network '%s' is a %s network of scope %s, not a swarm overlay",
                               l->o.network, driver, scope);
        } else {
            snprintf(l->network_id, sizeof l->network_id, "%s", s_str(n, "Id", NULL));
            if (!json_is_true(json_object_get(n, "Internal")))
                korch_warn("swarm: network '%s' is not internal: kernels on it can reach the outside", l->o.network);
            if (!json_is_true(json_object_get(n, "Attachable")))
                korch_info("swarm: network '%s' is not attachable: only services reach the kernels", l->o.network);
            if (!json_object_get(json_object_get(n, "Options"), "encrypted"))
                korch_info("swarm: network '%s' is not encrypted: kernel traffic between nodes is in the clear",
                           l->o.network);
        }
        korch_docker_reply_clear(&r);
        return rc;
    }
    korch_docker_reply_clear(&r);
    json_t *body = json_pack("{s:s, s:s, s:b, s:b, s:b, s:{s:s}, s:o}", "Name", l->o.network, "Driver", "overlay",
                             "Internal", 1, "Attachable", 1, "CheckDuplicate", 1, "Labels", "korch.component",
                             "kernels", "Options", l->o.encrypted ? json_pack("{s:s}", "encrypted", "") : json_object());
    rc = korch_docker_request(l->api, "POST", "/networks/create", body, &r, err);
    json_decref(body);
    if (rc)
        return rc;
    if (r.status != 201 || !*s_str(r.json, "Id", NULL))
        rc = korch_err_set(err, KORCH_E_DOCKER, "cannot create the kernels' network '%s': %s", l->o.network,
                           korch_docker_reply_message(&r));
    else {
        snprintf(l->network_id, sizeof l->network_id, "%s", s_str(r.json, "Id", NULL));
        korch_info("swarm: made the kernels' network '%s' (overlay, internal, attachable%s)", l->o.network,
                   l->o.encrypted ? ", encrypted" : "");
    }
    korch_docker_reply_clear(&r);
    return rc;
}

/* ------------------------------------------------------- adoption lists */

static json_t *s_list_mine(korch_launcher_t *self, korch_err_t *err)
{
    swarm_launcher_t *l = (swarm_launcher_t *)self;
    const char *mine = l->o.instance ? l->o.instance : "default";
    json_t *all = korch_swarm_list(self, mine, err);
    json_t *out = korch_backend_mine(all, "swarm service(s)", mine, l->scope, err);
    json_decref(all);
    return out;
}

/* Is dir directly inside our runtime base (what korch made for a kernel)? */
static bool s_rdir_in_base(const char *dir)
{
    char base[PATH_MAX];
    size_t bl;
    return dir[0] == '/' && korch_runtime_base(base, sizeof base, NULL) == KORCH_OK &&
           strncmp(dir, base, (bl = strlen(base))) == 0 && dir[bl] == '/' && dir[bl + 1] &&
           !strchr(dir + bl + 1, '/');
}

/* One service of ours by id, its secret and korch's copy of its
   connection file (in a dir of our runtime base only, never through a
   link: unlink removes a link itself). */
static korch_rc_t s_remove_mine(korch_launcher_t *self, const char *id, korch_err_t *err)
{
    swarm_launcher_t *l = (swarm_launcher_t *)self;
    const char *mine = l->o.instance ? l->o.instance : "default";
    char path[200];
    if (!s_valid_name(id) || strlen(id) > 80)
        return korch_err_set(err, KORCH_E_INVALID, "'%.80s' is not a service id", id);
    snprintf(path, sizeof path, "/services/%s", id);
    korch_docker_reply_t r = {0};
    korch_rc_t rc = korch_docker_request(l->api, "GET", path, NULL, &r, err);
    if (rc)
        return rc;
    json_t *labels = json_object_get(json_object_get(r.json, "Spec"), "Labels");
    if (r.status == 404)
        rc = KORCH_OK; /* gone already */
    else if (r.status != 200)
        rc = korch_err_set(err, KORCH_E_DOCKER, "GET %s: %s", path, korch_docker_reply_message(&r));
    else if (strcmp(s_str(labels, "korch.instance", NULL), mine) != 0)
        rc = korch_err_set(err, KORCH_E_STATE, "service %.25s belongs to korch instance '%.60s', not '%s'", id,
                           s_str(labels, "korch.instance", NULL), mine);
    else if (strcmp(s_str(labels, "korch.scope", NULL), l->scope) != 0)
        rc = korch_err_set(err, KORCH_E_STATE, "service %.25s is of korch scope '%.20s', not this runtime dir's '%s'",
                           id, s_str(labels, "korch.scope", NULL), l->scope);
    else if (!s_delete_sync(l, "services", id))
        rc = korch_err_set(err, KORCH_E_DOCKER, "cannot remove service %.25s", id);
    else {
        const char *secret = s_str(labels, "korch.secret", NULL);
        const char *rdir = s_str(labels, "korch.runtime_dir", NULL);
        char cf[PATH_MAX + 16];
        /* the label is anyone's: the secret must be this instance's too */
        char sp[200];
        json_t *sec = NULL;
        if (*secret && s_valid_name(secret) && strlen(secret) < 100) {
            snprintf(sp, sizeof sp, "/secrets/%s", secret);
            sec = s_get_sync(l, sp, NULL);
        }
        json_t *slb = json_object_get(json_object_get(sec, "Spec"), "Labels");
        if (sec && !strcmp(s_str(slb, "korch.instance", NULL), mine) && !strcmp(s_str(slb, "korch.scope", NULL), l->scope))
            s_delete_sync(l, "secrets", secret);
        json_decref(sec);
        if (s_rdir_in_base(rdir) && snprintf(cf, sizeof cf, "%s/%s", rdir, S_CONN_FILE) < (int)sizeof cf) {
            unlink(cf);
            if (rmdir(rdir) != 0 && errno != ENOENT)
                korch_debug("runtime dir '%s' kept: %s", rdir, strerror(errno));
        }
    }
    korch_docker_reply_clear(&r);
    return rc;
}

static const korch_launcher_ops_t s_ops = {
    .name = "swarm",
    .caps = KORCH_LAUNCHER_CONFINED | KORCH_LAUNCHER_ADOPTS,
    .transport = "tcp",
    .start = s_start,
    .adopt = s_adopt,
    .list_mine = s_list_mine,
    .remove_mine = s_remove_mine,
    .signal = s_signal,
    .kill = s_kill,
    .put_file = s_put_file,
    .get_file = s_get_file,
    .log_tail = s_log_tail,
    .proc_free = s_proc_free,
    .free = s_free,
};

korch_launcher_t *korch_launcher_swarm_new(korch_loop_t *loop, const korch_swarm_opts_t *opts, korch_err_t *err)
{
    swarm_launcher_t *l = calloc(1, sizeof *l);
    if (!l) {
        korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        return NULL;
    }
    korch_backend_launcher_init(&l->base, &s_ops, loop);
    l->timer = -1;
    if (opts)
        l->o = *opts;
    else
        korch_swarm_opts_init(&l->o);
    const char **fields[] = {&l->o.host, &l->o.image, &l->o.instance, &l->o.network,
                             &l->o.constraints, &l->o.user, &l->o.workdir_mount};
    for (size_t i = 0; i < sizeof fields / sizeof *fields; i++)
        if (!korch_own_str(&l->strs[i], fields[i])) {
            korch_err_set(err, KORCH_E_NOMEM, "out of memory");
            goto fail;
        }
    if (!l->o.user)
        l->o.user = "1000:1000";
    if (!l->o.workdir_mount)
        l->o.workdir_mount = "/tmp/work";
    if (!l->o.network)
        l->o.network = "korch-kernels";
    if (l->o.poll_ms <= 0)
        l->o.poll_ms = 500;
    if (!korch_parse_user(l->o.user, &l->uid, &l->gid)) {
        korch_err_set(err, KORCH_E_INVALID, "swarm user '%s' is not numeric uid:gid", l->o.user);
        goto fail;
    }
    if (korch_runtime_scope(NULL, l->scope, sizeof l->scope, err) != KORCH_OK)
        goto fail;
    l->api = korch_docker_new(loop, l->o.host, err);
    if (!l->api)
        goto fail;
    if (l->o.api_timeout_ms > 0)
        korch_docker_set_timeout_ms(l->api, l->o.api_timeout_ms);
    json_t *info = s_get_sync(l, "/info", err);
    if (!info)
        goto fail;
    json_t *sw = json_object_get(info, "Swarm");
    bool manager = json_is_true(json_object_get(sw, "ControlAvailable"));
    char state[40];
    snprintf(state, sizeof state, "%s", s_str(sw, "LocalNodeState", NULL));
    json_decref(info);
    if (!manager) {
        korch_err_set(err, KORCH_E_DOCKER,
                      "the docker engine at '%s' is not a swarm manager (swarm state '%s'): point DOCKER_HOST at a "
                      "manager of the cluster (docker swarm init makes one)",
                      korch_docker_where(l->api), state);
        goto fail;
    }
    if (s_network(l, err) != KORCH_OK)
        goto fail;
    char label[200];
    snprintf(label, sizeof label, "korch.instance=%s", l->o.instance ? l->o.instance : "default");
    if (!s_filter_path(l, "tasks", "label", label, l->tasks_path, sizeof l->tasks_path)) {
        korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        goto fail;
    }
    l->timer = korch_loop_timer(loop, l->o.poll_ms, 0, s_on_poll_timer, l);
    return &l->base;
fail:
    s_free(&l->base);
    return NULL;
}
