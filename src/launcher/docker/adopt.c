/*  The docker launcher's adopt: re-attach to a running container of this
 *  korch's instance and scope that outlived the korch that started it. */
#include "docker_int.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---------------------------------------------------------------- adopt */

/* Re-attach to the running container of kernel_id, which a korch of this
   instance started and which outlived it. The connection file in its runtime
   dir was written for the container's view (ip under the runtime mount);
   korch connects to the same sockets through the host path of that dir. */
/* Re-attach to the running container of kernel_id, which a korch of this
   instance started and which outlived it: a list by label, then an inspect,
   on the loop. The connection file in its runtime dir was written for the
   container's view (ip under the runtime mount); korch connects to the same
   sockets through the host path of that dir. */
typedef struct {
    docker_proc_t *p;
    korch_op_t *op;                 /* the launcher's */
    korch_op_t *req;
    char kernel_id[128];
    char rdir[PATH_MAX];            /* the container's korch.runtime_dir label */
    bool has_rdir;
    bool owned;                     /* labelled ours: removed when it cannot be adopted */
    char target[PATH_MAX];          /* where it really mounts rdir ("" unknown) */
} s_adopt_t;

static void s_adopt_end(s_adopt_t *a, korch_rc_t rc, const korch_err_t *err)
{
    korch_op_cancel(&a->req);
    if (rc == KORCH_OK && a->op) {
        korch_debug("re-adopted kernel %s in container %.12s (runtime dir %s)", a->kernel_id, a->p->id,
                    a->p->runtime_dir);
        dk_watch(a->p);
        korch_op_finish_proc(a->op, &a->p->base, KORCH_OK, NULL);
    } else {
        /* Ours but not adoptable (exited, no runtime dir, no usable
           connection file): nobody can reach it any more, so it goes
           rather than leak. Not on a failed or cancelled Engine API call. */
        if (a->op && a->owned && a->p->id[0] && rc != KORCH_E_DOCKER && rc != KORCH_E_INTERRUPTED) {
            korch_notice("removing container %.12s of kernel %s, which cannot be re-adopted", a->p->id,
                         a->kernel_id);
            dk_remove_later(a->p->l, a->p->id);
            if (a->target[0] && a->has_rdir && dk_rdir_in_base(a->rdir))
                dk_cleanup_runtime(a->rdir, a->target);
        }
        korch_kuid_release(&a->p->kuid);
        free(a->p);
        if (a->op)
            korch_op_finish_proc(a->op, NULL, rc, err);
    }
    free(a);
}

static void s_adopt_cancel(korch_op_t *op, void *arg)
{
    s_adopt_t *a = arg;
    a->op = NULL; /* its done is never called */
    s_adopt_end(a, KORCH_E_INTERRUPTED, NULL);
}

static void s_on_adopt_inspect(korch_rc_t rc0, const korch_err_t *err0, korch_docker_reply_t *r, void *arg)
{
    s_adopt_t *a = arg;
    a->req = NULL;
    docker_proc_t *p = a->p;
    docker_launcher_t *l = p->l;
    const char *kernel_id = a->kernel_id;
    const char *rdir = a->has_rdir ? a->rdir : NULL;
    korch_err_t e = {0}, *err = &e;
    korch_rc_t rc = rc0;
    korch_conn_t inside;
    struct stat st;
    korch_conn_t *conn = &p->base.conn;
    if (rc)
        return s_adopt_end(a, rc, err0);
    if (r->status != 200) {
        rc = korch_err_set(err, r->status == 404 ? KORCH_E_NOTFOUND : KORCH_E_DOCKER,
                           "cannot re-adopt kernel '%s': cannot inspect container %.12s: %s", kernel_id, p->id,
                           korch_docker_reply_message(r));
        return s_adopt_end(a, rc, err);
    }
    const char *target = dk_runtime_target(r->json, rdir);
    if (target && strlen(target) < sizeof a->target)
        snprintf(a->target, sizeof a->target, "%s", target);
    if (!target) {
        rc = korch_err_set(err, KORCH_E_INVALID,
                           "cannot re-adopt kernel '%s': container %.12s does not mount its runtime dir '%s'",
                           kernel_id, p->id, rdir ? rdir : "");
        return s_adopt_end(a, rc, err);
    }
    if (lstat(rdir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        rc = korch_err_set(err, KORCH_E_NOTFOUND, "cannot re-adopt kernel '%s': runtime dir '%s' is %s", kernel_id,
                           rdir, errno == ENOENT ? "gone" : "not a directory");
        return s_adopt_end(a, rc, err);
    }
    size_t dl = korch_dir_len(rdir);
    if (dl + 1 > sizeof p->runtime_dir) {
        rc = korch_err_set(err, KORCH_E_INVALID, "cannot re-adopt kernel '%s': runtime dir '%s' is too long",
                           kernel_id, rdir);
        return s_adopt_end(a, rc, err);
    }
    snprintf(p->runtime_dir, sizeof p->runtime_dir, "%.*s", (int)dl, rdir);
    if (korch_path_join(p->conn_file, sizeof p->conn_file, p->runtime_dir, DK_CONN_FILE, NULL) != KORCH_OK) {
        rc = korch_err_set(err, KORCH_E_TOOBIG, "cannot re-adopt kernel '%s': runtime dir '%s' is too long",
                           kernel_id, p->runtime_dir);
        return s_adopt_end(a, rc, err);
    }
    /* The kernel can write that dir: no link, no FIFO, a bounded file. */
    rc = korch_conn_load_nofollow(&inside, p->conn_file, err);
    if (rc)
        return s_adopt_end(a, rc, err);
    const char *base = strcmp(inside.transport, "ipc") == 0 ? dk_ipc_base(inside.ip, target) : NULL;
    if (!base) {
        rc = korch_err_set(err, KORCH_E_INVALID,
                           "cannot re-adopt kernel '%s': '%s' names %s endpoint '%s', not ipc under '%s'", kernel_id,
                           p->conn_file, inside.transport, inside.ip, target);
        return s_adopt_end(a, rc, err);
    }
    *conn = inside;
    if (korch_path_join(conn->ip, sizeof conn->ip, p->runtime_dir, base, NULL) != KORCH_OK ||
        korch_path_fmt(p->ipc_prefix, sizeof p->ipc_prefix, NULL, "%s", conn->ip) != KORCH_OK) {
        rc = korch_err_set(err, KORCH_E_TOOBIG, "cannot re-adopt kernel '%s': ipc path '%s/%s' is too long",
                           kernel_id, p->runtime_dir, base);
        return s_adopt_end(a, rc, err);
    }
    memcpy(p->ports, inside.port, sizeof p->ports);

    json_t *cfg = json_object_get(r->json, "Config");
    const char *user = json_string_value(json_object_get(cfg, "User"));
    const char *wd = json_string_value(json_object_get(cfg, "WorkingDir"));
    if (!user || !korch_parse_user(user, &p->uid, &p->gid)) {
        p->uid = geteuid() == 0 ? 1000 : geteuid();
        p->gid = geteuid() == 0 ? 1000 : getegid();
    }
    /* A kernel uid is claimed again (kuid.h): no kernel started from now on
       shares it while this one runs. Held by another process (another korch
       adopted it too): said, and adopted all the same. */
    if (korch_kuid_is_kernel(p->uid) && geteuid() == 0 && !p->kuid) {
        korch_err_t ke = {0};
        if (!(p->kuid = korch_kuid_claim(p->uid, &ke)))
            korch_notice("re-adopted kernel %s runs as uid %u, which korch cannot claim again: %s", kernel_id,
                         (unsigned)p->uid, ke.msg);
    }
    snprintf(p->workdir, sizeof p->workdir, "%s", wd && wd[0] == '/' ? wd : l->o.workdir_mount);
    p->memory = json_integer_value(json_object_get(json_object_get(r->json, "HostConfig"), "Memory"));
    /* The earlier korch gave runtime_dir to the kernel's uid; give it back
       to korch's when the proc is freed, as for a started one. */
    p->work_under = -1;
    if (geteuid() == 0 && dk_is_mountpoint(p->runtime_dir))
        p->rt_mounted = true; /* the earlier korch's tmpfs: unmounted with the proc */
    else if (st.st_uid != geteuid() && geteuid() == 0) {
        p->chowned = true;
        p->old_uid = geteuid();
        p->old_gid = getegid();
    }
    snprintf(p->base.runtime_dir, sizeof p->base.runtime_dir, "%s", p->runtime_dir);
    s_adopt_end(a, KORCH_OK, NULL);
}

static void s_on_adopt_list(korch_rc_t rc0, const korch_err_t *err0, korch_docker_reply_t *reply, void *arg)
{
    s_adopt_t *a = arg;
    a->req = NULL;
    docker_proc_t *p = a->p;
    docker_launcher_t *l = p->l;
    const char *mine = l->o.instance ? l->o.instance : "default";
    const char *kernel_id = a->kernel_id;
    korch_err_t e = {0}, *err = &e;
    korch_rc_t rc = rc0;
    char path[160];
    if (rc)
        return s_adopt_end(a, rc, err0);
    if (reply->status != 200 || !json_is_array(reply->json)) {
        rc = korch_err_set(err, KORCH_E_DOCKER, "cannot list korch containers: %s", korch_docker_reply_message(reply));
        return s_adopt_end(a, rc, err);
    }
    json_t *list = reply->json;
    json_t *c = NULL, *any = NULL, *item;
    size_t i;
    json_array_foreach(list, i, item) {
        const char *state = json_string_value(json_object_get(item, "State"));
        any = any ? any : item;
        if (!c && state && strcmp(state, "running") == 0)
            c = item;
    }
    if (!c) {
        const char *aid = json_string_value(json_object_get(any, "Id"));
        const char *aowner = json_string_value(json_object_get(json_object_get(any, "Labels"), "korch.instance"));
        if (aid && strlen(aid) < sizeof p->id && aowner && strcmp(aowner, mine) == 0 &&
            dk_ours(l, json_object_get(any, "Labels"))) {
            snprintf(p->id, sizeof p->id, "%s", aid);
            a->owned = true;
        }
        rc = any ? korch_err_set(err, KORCH_E_DIED, "cannot re-adopt kernel '%s': its container %.12s is %s",
                                 kernel_id, json_string_value(json_object_get(any, "Id")),
                                 json_string_value(json_object_get(any, "State")))
                 : korch_err_set(err, KORCH_E_NOTFOUND, "cannot re-adopt kernel '%s': no container has it",
                                 kernel_id);
        return s_adopt_end(a, rc, err);
    }
    json_t *labels = json_object_get(c, "Labels");
    const char *owner = json_string_value(json_object_get(labels, "korch.instance"));
    const char *rdir = json_string_value(json_object_get(labels, "korch.runtime_dir"));
    const char *cid = json_string_value(json_object_get(c, "Id"));
    /* Labels cannot change: a container of another instance would stay that
       instance's, and its sweep would remove it under us. */
    if (!owner || strcmp(owner, mine) != 0) {
        rc = korch_err_set(err, KORCH_E_STATE, "cannot re-adopt kernel '%s': it belongs to korch instance '%s', not '%s'",
                           kernel_id, owner ? owner : "", mine);
        return s_adopt_end(a, rc, err);
    }
    /* The same instance name in another lock domain (another machine's
       runtime base, an older korch without the label) is not us. */
    if (!dk_ours(l, labels)) {
        rc = korch_err_set(err, KORCH_E_STATE,
                           "cannot re-adopt kernel '%s': its container %.12s is of korch scope '%.40s', not this "
                           "runtime dir's '%s' (another machine's korch, or an older korch)",
                           kernel_id, cid ? cid : "", dk_label(labels, "korch.scope"), l->scope);
        return s_adopt_end(a, rc, err);
    }
    if (!cid || strlen(cid) >= sizeof p->id) {
        rc = korch_err_set(err, KORCH_E_DOCKER, "cannot re-adopt kernel '%s': the engine gave no container id",
                           kernel_id);
        return s_adopt_end(a, rc, err);
    }
    snprintf(p->id, sizeof p->id, "%s", cid);
    a->owned = true;
    a->has_rdir = rdir && strlen(rdir) < sizeof a->rdir;
    if (a->has_rdir)
        snprintf(a->rdir, sizeof a->rdir, "%s", rdir);

    /* Inspect for the user, the work dir, the memory limit and the mounts. */
    snprintf(path, sizeof path, "/containers/%s/json", p->id);
    a->req = korch_docker_request_async(l->api, "GET", path, NULL, NULL, s_on_adopt_inspect, a, err);
    if (!a->req)
        s_adopt_end(a, e.rc ? e.rc : KORCH_E_DOCKER, err);
}

korch_rc_t dk_adopt(korch_launcher_t *self, const char *kernel_id, korch_op_t *op, korch_err_t *err)
{
    docker_launcher_t *l = (docker_launcher_t *)self;
    if (!dk_valid_name(kernel_id) || strlen(kernel_id) >= sizeof(((s_adopt_t *)0)->kernel_id))
        return korch_err_set(err, KORCH_E_INVALID, "cannot re-adopt kernel '%s': not a valid kernel id",
                             kernel_id ? kernel_id : "");
    s_adopt_t *a = calloc(1, sizeof *a);
    docker_proc_t *p = a ? korch_backend_proc_new(self, sizeof *p, NULL) : NULL;
    char label[200];
    snprintf(label, sizeof label, "korch.kernel_id=%s", kernel_id);
    char *path = p ? dk_labelled_path(l, label) : NULL;
    if (!path) {
        free(p);
        free(a);
        return korch_err_set(err, KORCH_E_NOMEM, "out of memory");
    }
    p->rewait_timer = -1;
    p->work_under = -1;
    p->l = l;
    *a = (s_adopt_t){.p = p, .op = op};
    snprintf(a->kernel_id, sizeof a->kernel_id, "%s", kernel_id);
    a->req = korch_docker_request_async(l->api, "GET", path, NULL, NULL, s_on_adopt_list, a, err);
    free(path);
    if (!a->req) {
        free(p);
        free(a);
        return err && err->rc ? err->rc : KORCH_E_DOCKER;
    }
    korch_op_on_cancel(op, s_adopt_cancel, a);
    return KORCH_OK;
}

