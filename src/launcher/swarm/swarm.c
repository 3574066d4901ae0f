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
 *    non-root uid (a kernel uid of kuid.h, one per kernel, claimed on
 *    korch's host: no account there has it, and the nodes of a swarm
 *    korch launches into are machines of korch's operator, whose accounts
 *    the range must avoid too), memory/CPU/pids/nofile limits, docker-init as PID 1,
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
 *    into a container on another node. The launcher says so
 *    (KORCH_LAUNCHER_NO_SIGINT) and the kernel layer interrupts with an
 *    interrupt_request on the control channel it already has (kernel.c;
 *    ipykernel handles it whatever the kernelspec's interrupt_mode says).
 *    SIGTERM and SIGKILL remove the service (the node stops the container:
 *    SIGTERM, then SIGKILL after stop_grace_ms). Other signals, SIGINT
 *    included: refused, saying why.
 *  - Files in and out go through the kernel (an execute_request with
 *    user_expressions on the shell channel, silent, not in the history):
 *    there is no host bind mount, and the archive endpoints only reach
 *    containers of the engine asked, not of other nodes. Python kernels
 *    only (the code is Python); others are refused with a message.
 *  - korch's own copy of the connection file stays in the kernel's runtime
 *    dir on korch's side (0700, nothing mounts it): a secret cannot be read
 *    back through the API, and re-adoption needs the key.
 *
 *  This file: the options, the ops table, the constructor and what goes
 *  with the launcher; its parts by concern beside it (start.c, poll.c,
 *  end.c, proc.c, kernelio.c, list.c, helpers.c).
 */
#include "swarm_int.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
    o->user = NULL; /* a kernel uid per kernel (kuid.h) */
    o->memory = SW_GIB;
    o->nano_cpus = 1000000000LL;
    o->pids_limit = 256;
    o->nofile = 4096;
    o->tmp_size = 256 * SW_MIB;
    o->workdir_size = 512 * SW_MIB;
    o->workdir_mount = "/tmp/work";
    o->poll_ms = 500;
    o->schedule_timeout_ms = 120000;
    o->stop_grace_ms = 2000;
    o->api_timeout_ms = 30000;
}

/* -------------------------------------------------------- the launcher */

/* The service id (korch_proc_backend_id). */
static const char *s_proc_id(korch_proc_t *proc) { return ((swarm_proc_t *)proc)->service; }

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
            sw_delete_sync(l, "services", p->service);
        if (p->secret[0])
            sw_delete_sync(l, "secrets", p->secret);
        if (p->conn_file[0] && !p->adopting)
            unlink(p->conn_file);
        sw_proc_release(p);
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
        const char *driver = sw_str(n, "Driver", NULL);
        const char *scope = sw_str(n, "Scope", NULL);
        if (strcmp(driver, "overlay") || strcmp(scope, "swarm")) {
            rc = korch_err_set(err, KORCH_E_DOCKER, "network '%s' is a %s network of scope %s, not a swarm overlay",
                               l->o.network, driver, scope);
        } else {
            snprintf(l->network_id, sizeof l->network_id, "%s", sw_str(n, "Id", NULL));
            if (json_is_true(json_object_get(n, "Internal")))
                l->base.caps |= KORCH_LAUNCHER_OFFLINE; /* no package source reaches its kernels (packages.c) */
            else
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
    if (r.status != 201 || !*sw_str(r.json, "Id", NULL))
        rc = korch_err_set(err, KORCH_E_DOCKER, "cannot create the kernels' network '%s': %s", l->o.network,
                           korch_docker_reply_message(&r));
    else {
        snprintf(l->network_id, sizeof l->network_id, "%s", sw_str(r.json, "Id", NULL));
        l->base.caps |= KORCH_LAUNCHER_OFFLINE;
        korch_info("swarm: made the kernels' network '%s' (overlay, internal, attachable%s)", l->o.network,
                   l->o.encrypted ? ", encrypted" : "");
    }
    korch_docker_reply_clear(&r);
    return rc;
}

static const korch_launcher_ops_t s_ops = {
    .name = "swarm",
    .caps = KORCH_LAUNCHER_CONFINED | KORCH_LAUNCHER_ADOPTS | KORCH_LAUNCHER_NO_SIGINT,
    .transport = "tcp",
    .start = sw_start,
    .adopt = sw_adopt,
    .list_mine = sw_list_mine,
    .remove_mine = sw_remove_mine,
    .list = sw_list,
    .remove_all = sw_remove_all,
    .kind = "swarm service(s)",
    .proc_id = s_proc_id,
    .signal = sw_signal,
    .kill = sw_kill,
    .put_file = sw_put_file,
    .get_file = sw_get_file,
    .log_tail = sw_log_tail,
    .proc_free = sw_proc_free,
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
    if (!l->o.workdir_mount)
        l->o.workdir_mount = "/tmp/work";
    if (!l->o.network)
        l->o.network = "korch-kernels";
    if (l->o.poll_ms <= 0)
        l->o.poll_ms = 500;
    if (l->o.user && !korch_parse_user(l->o.user, &l->uid, &l->gid)) {
        korch_err_set(err, KORCH_E_INVALID, "swarm user '%s' is not numeric uid:gid", l->o.user);
        goto fail;
    } else if (!l->o.user && geteuid() != 0) {
        l->uid = geteuid(); /* a kernel uid needs root's claim (kuid.h): korch's own, as docker does */
        l->gid = getegid();
    } else if (!l->o.user) {
        uid_t first, last;
        if (!korch_kuid_range(&first, &last, err))
            goto fail;
        l->dynamic = true;
    }
    if (korch_runtime_scope(NULL, l->scope, sizeof l->scope, err) != KORCH_OK)
        goto fail;
    l->api = korch_docker_new(loop, l->o.host, err);
    if (!l->api)
        goto fail;
    if (l->o.api_timeout_ms > 0)
        korch_docker_set_timeout_ms(l->api, l->o.api_timeout_ms);
    json_t *info = sw_get_sync(l, "/info", err);
    if (!info)
        goto fail;
    json_t *sw = json_object_get(info, "Swarm");
    bool manager = json_is_true(json_object_get(sw, "ControlAvailable"));
    char state[40];
    snprintf(state, sizeof state, "%s", sw_str(sw, "LocalNodeState", NULL));
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
    if (!sw_filter_path(l, "tasks", "label", label, l->tasks_path, sizeof l->tasks_path)) {
        korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        goto fail;
    }
    l->timer = korch_loop_timer(loop, l->o.poll_ms, 0, sw_on_poll_timer, l);
    return &l->base;
fail:
    s_free(&l->base);
    return NULL;
}
