/*  The swarm launcher's proc ops (signal, kill, files, free) and adopt. */
#include "swarm_int.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---------------------------------------------------------- proc ops */

const char *sw_log_tail(korch_proc_t *proc) { return ((swarm_proc_t *)proc)->tail; }

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
    sw_dead(p);
}

/* Remove the service now: the node sends the container SIGTERM, then
   SIGKILL after stop_grace_ms. The end is reported once the manager has
   removed it (launcher.c then finishes the kill op). */
korch_rc_t sw_kill(korch_proc_t *proc, korch_op_t *op, korch_err_t *err)
{
    (void)op;
    swarm_proc_t *p = (swarm_proc_t *)proc;
    if (p->st == ST_DEAD || p->base.exited)
        return KORCH_OK;
    if (p->call)
        korch_op_cancel(&p->call); /* the logs of an end: the kill says it */
    if (!p->service[0]) {
        snprintf(p->why, sizeof p->why, "killed by korch");
        sw_dead(p);
        return KORCH_OK;
    }
    char path[160];
    snprintf(path, sizeof path, "/services/%s", p->service);
    p->st = ST_ENDING;
    p->call = korch_docker_request_async(p->l->api, "DELETE", path, NULL, NULL, s_on_killed, p, err);
    return p->call ? KORCH_OK : (err && err->rc ? err->rc : KORCH_E_DOCKER);
}

korch_rc_t sw_signal(korch_proc_t *proc, int sig, korch_op_t *op, korch_err_t *err)
{
    swarm_proc_t *p = (swarm_proc_t *)proc;
    if (p->st != ST_RUNNING)
        return korch_err_set(err, KORCH_E_DIED, "kernel %.8s is not running%s%s", p->kernel_id,
                             p->why[0] ? ": " : "", p->why);
    korch_rc_t rc;
    if (sig == SIGTERM || sig == SIGKILL)
        rc = sw_kill(proc, NULL, err);
    else
        rc = korch_err_set(err, KORCH_E_STATE,
                           "the swarm launcher cannot send signal %d to a task: no Engine API call signals a task on "
                           "another node (korch interrupts a swarm kernel with interrupt_request, korch_kernel_interrupt; "
                           "SIGTERM and SIGKILL remove the service)",
                           sig);
    if (rc == KORCH_OK)
        korch_op_finish(op, KORCH_OK, NULL);
    return rc;
}

korch_rc_t sw_put_file(korch_proc_t *proc, const char *name, const void *data, size_t len, korch_op_t *op,
                             korch_err_t *err)
{
    return sw_file_op((swarm_proc_t *)proc, name, false, data, len, 0, op, err);
}

korch_rc_t sw_get_file(korch_proc_t *proc, const char *name, size_t max, korch_op_t *op, korch_err_t *err)
{
    return sw_file_op((swarm_proc_t *)proc, name, true, NULL, 0, max, op, err);
}

/* The memory and sockets; p is off the poll list and has no call in flight. */
void sw_proc_release(swarm_proc_t *p)
{
    sw_kernelio_release(p);
    korch_kuid_release(&p->kuid);
    json_decref(p->spec);
    explicit_bzero(p->base.conn.key, sizeof p->base.conn.key);
    free(p);
}

/* Never blocks: what is left on the manager goes to a background job. */
void sw_proc_free(korch_proc_t *proc)
{
    swarm_proc_t *p = (swarm_proc_t *)proc;
    if (p->call)
        korch_op_cancel(&p->call);
    sw_proc_unlink(p);
    sw_reap(p->l, p->service, p->secret);
    if (p->conn_file[0])
        unlink(p->conn_file);
    sw_proc_release(p);
}

/* ------------------------------------------------------------ adopt */

/* The adopted kernel's uid (its service's "uid:gid"): a kernel uid is
   claimed again, so no kernel started from now on gets it while this one
   runs. Held by another korch (two adopting the same kernel): said, and
   the kernel adopted all the same (it runs as that uid whatever korch
   claims). */
void sw_adopt_uid(swarm_proc_t *p, const char *user)
{
    uid_t uid;
    gid_t gid;
    if (!user || !korch_parse_user(user, &uid, &gid))
        return;
    p->uid = uid;
    p->gid = gid;
    if (!korch_kuid_is_kernel(uid) || geteuid() != 0 || p->kuid)
        return;
    korch_err_t e = {0};
    if (!(p->kuid = korch_kuid_claim(uid, &e)))
        korch_notice("re-adopted kernel %.40s runs as uid %u, which korch cannot claim again: %s", p->kernel_id,
                     (unsigned)uid, e.msg);
}

static void s_on_adopt_service(korch_rc_t rc, const korch_err_t *err, korch_docker_reply_t *r, void *arg)
{
    swarm_proc_t *p = arg;
    swarm_launcher_t *l = p->l;
    const char *mine = l->o.instance ? l->o.instance : "default";
    p->call = NULL;
    if (rc != KORCH_OK || r->status != 200 || !json_is_array(r->json)) {
        snprintf(p->why, sizeof p->why, "cannot re-adopt kernel '%.100s': %.100s", p->kernel_id,
                 rc ? err->msg : korch_docker_reply_message(r));
        sw_start_fail(p, rc ? rc : KORCH_E_DOCKER);
        return;
    }
    json_t *svc = json_array_get(r->json, 0);
    json_t *labels = json_object_get(json_object_get(svc, "Spec"), "Labels");
    const char *owner = sw_str(labels, "korch.instance", NULL);
    const char *rdir = sw_str(labels, "korch.runtime_dir", NULL);
    if (!svc) {
        snprintf(p->why, sizeof p->why, "cannot re-adopt kernel '%s': no swarm service has it", p->kernel_id);
        sw_start_fail(p, KORCH_E_NOTFOUND);
        return;
    }
    snprintf(p->service, sizeof p->service, "%s", sw_str(svc, "ID", NULL));
    snprintf(p->name, sizeof p->name, "%s", sw_str(json_object_get(svc, "Spec"), "Name", NULL));
    if (strcmp(owner, mine)) {
        /* Labels cannot change: another instance's sweep would remove it. */
        snprintf(p->why, sizeof p->why, "cannot re-adopt kernel '%s': it belongs to korch instance '%s', not '%s'",
                 p->kernel_id, owner, mine);
        p->service[0] = 0; /* not ours to remove */
        sw_start_fail(p, KORCH_E_STATE);
        return;
    }
    if (strcmp(sw_str(labels, "korch.scope", NULL), l->scope)) {
        /* The same instance name in another lock domain (another machine's
           runtime dir, an older korch without the label) is not us. */
        snprintf(p->why, sizeof p->why,
                 "cannot re-adopt kernel '%.40s': its service is of korch scope '%.20s', not this runtime dir's "
                 "'%s' (another machine's korch, or an older korch)",
                 p->kernel_id, sw_str(labels, "korch.scope", NULL), l->scope);
        p->service[0] = 0; /* not ours to remove */
        sw_start_fail(p, KORCH_E_STATE);
        return;
    }
    snprintf(p->secret, sizeof p->secret, "%s", sw_str(labels, "korch.secret", NULL));
    sw_adopt_uid(p, sw_str(json_object_get(json_object_get(json_object_get(svc, "Spec"), "TaskTemplate"),
                                           "ContainerSpec"),
                           "User", NULL));
    snprintf(p->base.runtime_dir, sizeof p->base.runtime_dir, "%s", rdir);
    snprintf(p->conn_file, sizeof p->conn_file, "%.*s/%s", (int)korch_dir_len(rdir), rdir, SW_CONN_FILE);
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
        sw_start_fail(p, KORCH_E_NOTFOUND);
        return;
    }
    p->python = true; /* the kernelspec is korch.kernelspec: files are tried, the kernel says */
    p->st = ST_SCHEDULE;
    p->sched_began = korch_now_ms();
    sw_poll_now(l);
}

/* Re-attach to the running service of kernel_id that an earlier korch of
   this instance started: the connection from korch's copy, the address
   from its task (which must still be running, on a live node). */
korch_rc_t sw_adopt(korch_launcher_t *self, const char *kernel_id, korch_op_t *op, korch_err_t *err)
{
    swarm_launcher_t *l = (swarm_launcher_t *)self;
    char path[400], label[160];
    if (!sw_valid_name(kernel_id))
        return korch_err_set(err, KORCH_E_INVALID, "cannot re-adopt kernel '%s': not a valid kernel id",
                             kernel_id ? kernel_id : "");
    snprintf(label, sizeof label, "korch.kernel_id=%s", kernel_id);
    if (!sw_filter_path(l, "services", "label", label, path, sizeof path))
        return korch_err_set(err, KORCH_E_NOMEM, "out of memory");
    swarm_proc_t *p = sw_proc_new(l, NULL, op);
    if (!p)
        return korch_err_set(err, KORCH_E_NOMEM, "out of memory");
    p->adopting = true;
    snprintf(p->kernel_id, sizeof p->kernel_id, "%s", kernel_id);
    p->call = korch_docker_request_async(l->api, "GET", path, NULL, NULL, s_on_adopt_service, p, err);
    if (!p->call) {
        korch_op_on_cancel(op, NULL, NULL);
        sw_proc_release(p);
        return err && err->rc ? err->rc : KORCH_E_DOCKER;
    }
    p->st = ST_SERVICE;
    sw_proc_link(p);
    return KORCH_OK;
}

