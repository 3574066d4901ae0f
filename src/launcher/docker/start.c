/*  The docker launcher's start: the host work on the worker, then create,
 *  (once per korch: does the engine see korch's mounts?), start, on the loop. */
#include "docker_int.h"
#include "../container.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A start on its way: create, (does the engine see korch's mounts?), start. */
typedef struct {
    docker_proc_t *p;               /* the caller's once started */
    korch_op_t *op;                 /* the launcher's op */
    korch_op_t *req;                /* the Engine API request in flight */
    char image[512], spec[128], user[64], conn_in[PATH_MAX];
    char create_path[256], name[160];
    json_t *body;                   /* the create request, kept for a retry */
    int tries;                      /* removals of the previous container awaited */
    int retry_timer;
    korch_loop_t *loop;
    korch_conn_t conn;              /* as the kernel sees it */
    uid_t uid;
    gid_t gid;
    char workdir[PATH_MAX];         /* the host work dir to bind, "" none */
    bool host_busy;                 /* its host work (s_prep_run, s_unseen_run) is on the worker */
    bool cancelled;                 /* ... and the op was cancelled meanwhile: freed when it is back */
    korch_rc_t host_rc;             /* what the host work found */
    korch_err_t host_err;
} s_start_t;

static void s_start_free(s_start_t *st, korch_rc_t rc, const korch_err_t *err)
{
    korch_op_cancel(&st->req);
    if (st->retry_timer >= 0)
        korch_loop_timer_end(st->loop, st->retry_timer);
    if (st->p) {
        if (st->p->id[0])
            dk_remove_later(st->p->l, st->p->id);
        dk_cleanup_later(st->p);
    }
    if (st->op)
        korch_op_finish_proc(st->op, NULL, rc, err);
    json_decref(st->body);
    free(st);
}

static void s_on_created(korch_rc_t rc, const korch_err_t *err, korch_docker_reply_t *r, void *arg);

static void s_create(s_start_t *st, korch_err_t *err)
{
    st->req = korch_docker_request_async(st->p->l->api, "POST", st->create_path, st->body, NULL, s_on_created, st,
                                         err);
}

/* The name is taken by this kernel's previous container, still being
   removed in the background after a restart: remove it (or wait for the
   removal under way), then create again. */
static void s_remove_old(s_start_t *st);

static int s_on_retry(korch_loop_t *loop, int timer_id, void *arg)
{
    s_start_t *st = arg;
    st->retry_timer = -1;
    s_remove_old(st);
    return 0;
}

static void s_on_old_removed(korch_rc_t rc, const korch_err_t *err, korch_docker_reply_t *r, void *arg)
{
    s_start_t *st = arg;
    st->req = NULL;
    korch_err_t e = {0};
    if (rc == KORCH_OK && r->status == 409) { /* removal in progress */
        st->retry_timer = korch_loop_timer(st->loop, 50, 1, s_on_retry, st);
        return;
    }
    s_create(st, &e);
    if (!st->req)
        s_start_free(st, e.rc, &e);
}

static void s_remove_old(s_start_t *st)
{
    char path[300];
    korch_err_t e = {0};
    snprintf(path, sizeof path, "/containers/%s?force=1&v=1", st->name);
    st->req = korch_docker_request_async(st->p->l->api, "DELETE", path, NULL, NULL, s_on_old_removed, st, &e);
    if (!st->req)
        s_start_free(st, e.rc, &e);
}

static void s_start_cancel(korch_op_t *op, void *arg)
{
    s_start_t *st = arg;
    st->op = NULL; /* its done is never called */
    if (st->host_busy) {
        /* the worker still has st: undo behind its work (the queue keeps
           the order), free st when it is back */
        st->cancelled = true;
        if (st->p)
            dk_cleanup_later(st->p);
        st->p = NULL;
        return;
    }
    s_start_free(st, KORCH_E_INTERRUPTED, NULL);
}

/* The host work of a start is back: NULL when the start goes on. */
static s_start_t *s_host_back(void *arg)
{
    s_start_t *st = arg;
    st->host_busy = false;
    if (st->cancelled) {
        s_start_free(st, KORCH_E_INTERRUPTED, NULL);
        return NULL;
    }
    if (st->host_rc) {
        s_start_free(st, st->host_rc, &st->host_err);
        return NULL;
    }
    return st;
}

static void s_on_container_started(korch_rc_t rc, const korch_err_t *err, korch_docker_reply_t *r, void *arg)
{
    s_start_t *st = arg;
    st->req = NULL;
    korch_err_t e = {0};
    if (rc)
        return s_start_free(st, rc, err);
    if (r->status != 204 && r->status != 304) {
        korch_err_set(&e, KORCH_E_LAUNCH, "cannot start the container of kernel '%s' (image '%s'): %s", st->spec,
                      st->image, korch_docker_reply_message(r));
        return s_start_free(st, e.rc, &e);
    }
    docker_proc_t *p = st->p;
    korch_debug("started kernel '%s' in container %.12s (image %s, user %s)", st->spec, p->id, st->image, st->user);
    st->p = NULL;
    dk_watch(p);
    korch_op_finish_proc(st->op, &p->base, KORCH_OK, NULL);
    st->op = NULL;
    s_start_free(st, KORCH_OK, NULL);
}

static void s_start_container(s_start_t *st)
{
    char path[160];
    korch_err_t e = {0};
    snprintf(path, sizeof path, "/containers/%s/start", st->p->id);
    st->req = korch_docker_request_async(st->p->l->api, "POST", path, NULL, NULL, s_on_container_started, st, &e);
    if (!st->req)
        s_start_free(st, e.rc, &e);
}

static void s_unseen_run(void *arg)
{
    s_start_t *st = arg;
    st->host_rc = dk_unbound_unseen(st->p, &st->conn, st->uid, st->gid, &st->host_err);
}

static void s_unseen_done(void *arg)
{
    s_start_t *st = s_host_back(arg);
    if (st)
        s_start_container(st);
}

/* Use the dirs underneath (dk_unbound_unseen), on the worker, then start. */
static void s_unseen_later(s_start_t *st)
{
    st->host_busy = true;
    korch_backend_host(&st->p->l->base, s_unseen_run, s_unseen_done, st);
}

static void s_on_seen(korch_rc_t rc, const korch_err_t *err, korch_docker_reply_t *r, void *arg)
{
    s_start_t *st = arg;
    st->req = NULL;
    docker_launcher_t *l = st->p->l;
    /* when unsure, as before: korch's mounts are used */
    l->engine_sees = rc == KORCH_OK && r->status == 404 ? 0 : 1;
    if (!l->engine_sees)
        return s_unseen_later(st);
    s_start_container(st);
}

static void s_on_created(korch_rc_t rc, const korch_err_t *err, korch_docker_reply_t *r, void *arg)
{
    s_start_t *st = arg;
    st->req = NULL;
    korch_err_t e = {0};
    if (rc)
        return s_start_free(st, rc, err);
    json_t *id = json_object_get(r->json, "Id");
    if (r->status == 404) {
        korch_err_set(&e, KORCH_E_NOTFOUND, "image '%s' not found (build it with: make image)", st->image);
        return s_start_free(st, e.rc, &e);
    }
    if (r->status == 409 && st->name[0] && st->tries++ < 100)
        return s_remove_old(st);
    if (r->status != 201 || !json_is_string(id)) {
        korch_err_set(&e, KORCH_E_DOCKER, "cannot create a container for kernel '%s' from image '%s': %s", st->spec,
                      st->image, korch_docker_reply_message(r));
        return s_start_free(st, e.rc, &e);
    }
    docker_proc_t *p = st->p;
    snprintf(p->id, sizeof p->id, "%s", json_string_value(id));
    size_t i;
    json_t *w;
    json_array_foreach(json_object_get(r->json, "Warnings"), i, w)
        korch_info("docker: container %.12s: %s", p->id, json_string_value(w));
    if (p->rt_mounted && p->l->engine_sees < 0) {
        /* Once per korch: HEAD on the archive endpoint mounts the container's
           volumes; 404 means korch's mounts are not in the engine's namespace. */
        char *esc = korch_docker_escape(p->l->api, st->conn_in);
        char url[PATH_MAX * 3 + 128];
        if (esc) {
            snprintf(url, sizeof url, "/containers/%s/archive?path=%s", p->id, esc);
            st->req = korch_docker_request_raw_async(p->l->api, "HEAD", url, NULL, NULL, 0, NULL, s_on_seen, st, &e);
        }
        free(esc);
        if (st->req)
            return;
        korch_err_clear(&e);
    }
    if (p->rt_mounted && p->l->engine_sees == 0)
        return s_unseen_later(st);
    s_start_container(st);
}

/* The host side of a start (dk_start queues it on the worker): each step
   may block on the kernel (mount) or the disk (the work dir's copy). The
   runtime dir is the kernel's: korch_conn_save_as never writes through a
   link planted there (kernel.json.tmp -> /etc/...) and gives the file away
   on its fd, not by name; dk_give_dir chowns through an O_NOFOLLOW fd. */
static korch_rc_t s_prep(docker_proc_t *p, s_start_t *st, korch_err_t *err)
{
    docker_launcher_t *l = p->l;
    /* A small tmpfs of the kernel's uid on runtime_dir: room for its sockets
       and connection file, not for filling the host's disk. */
    if (l->o.runtime_size > 0 && geteuid() == 0) {
        if (dk_mount_tmpfs(p->runtime_dir, l->o.runtime_size, st->uid, st->gid, 0700, true) == 0)
            p->rt_mounted = true;
        else
            korch_warn("runtime dir '%s' is not size-bounded: cannot mount a tmpfs on it: %s", p->runtime_dir,
                       strerror(errno));
    }
    /* Else give runtime_dir to the kernel's uid so it can create its sockets. */
    if (st->uid != geteuid() && !p->rt_mounted) {
        struct stat sb;
        if (dk_give_dir(p->runtime_dir, st->uid, st->gid, &sb) != 0)
            return korch_err_set(err, KORCH_E_IO, "cannot give runtime dir '%s' to %s: %s", p->runtime_dir,
                                 st->user, strerror(errno));
        p->chowned = true;
        p->old_uid = sb.st_uid;
        p->old_gid = sb.st_gid;
    }
    korch_rc_t rc = korch_conn_save_as(&st->conn, p->conn_file, st->uid != geteuid(), st->uid, st->gid, err);
    if (rc)
        return rc;
    /* A host work dir korch made for the kernel (an agent session's files/)
       is handed to the kernel's uid, with what is in it, so code can write
       there; a user's own directory is left as it is. */
    const char *workdir = st->workdir[0] ? st->workdir : NULL;
    if (workdir && l->o.workdir_give && l->o.workdir_size > 0 && geteuid() == 0) {
        rc = dk_bound_workdir(p, workdir, l->o.workdir_size, err);
        if (rc)
            return rc;
    }
    if (workdir && l->o.workdir_give && st->uid != geteuid() && !p->work_host[0])
        korch_fs_chown_tree(workdir, st->uid, st->gid, NULL);
    return KORCH_OK;
}

static void s_prep_run(void *arg)
{
    s_start_t *st = arg;
    st->host_rc = s_prep(st->p, st, &st->host_err);
}

static void s_prep_done(void *arg)
{
    s_start_t *st = s_host_back(arg);
    korch_err_t e = {0};
    if (!st)
        return;
    s_create(st, &e);
    if (!st->req)
        s_start_free(st, e.rc ? e.rc : KORCH_E_DOCKER, &e);
}

korch_rc_t dk_start(korch_launcher_t *self, const korch_launch_t *req, korch_op_t *op, korch_err_t *err)
{
    docker_launcher_t *l = (docker_launcher_t *)self;
    korch_rc_t rc = KORCH_OK;
    json_t *body = NULL;
    korch_docker_reply_t r = {0};
    char image[512], user[64], path[256], conn_in[PATH_MAX];
    korch_conn_t conn;
    uid_t uid;
    gid_t gid;
    docker_proc_t *p = korch_backend_proc_new(self, sizeof *p, req);
    if (!p)
        return korch_err_set(err, KORCH_E_NOMEM, "out of memory");
    p->rewait_timer = -1;
    p->work_under = -1;
    p->l = l;
    p->memory = l->o.memory;
    snprintf(p->runtime_dir, sizeof p->runtime_dir, "%s", req->runtime_dir ? req->runtime_dir : "");

    /* The kernel's ipc prefix must lie in runtime_dir, the directory mounted. */
    const char *ipc_name = korch_launch_ipc_name(req, "docker", err);
    if (!ipc_name) {
        rc = err ? err->rc : KORCH_E_INVALID;
        goto out;
    }
    size_t dl = korch_dir_len(req->runtime_dir);
    snprintf(p->ipc_prefix, sizeof p->ipc_prefix, "%s", req->conn->ip);
    memcpy(p->ports, req->conn->port, sizeof p->ports);

    if (l->o.user) {
        if (!korch_parse_user(l->o.user, &uid, &gid)) {
            rc = korch_err_set(err, KORCH_E_INVALID, "docker user '%s' is not numeric uid:gid", l->o.user);
            goto out;
        }
    } else if (geteuid() == 0) {
        /* a uid no account of this host has, this kernel's alone (kuid.h):
           the container's User, set at create time */
        if (!(p->kuid = korch_kuid_claim(0, err))) {
            rc = err ? err->rc : KORCH_E_LAUNCH;
            goto out;
        }
        uid = korch_kuid_uid(p->kuid);
        gid = (gid_t)uid;
    } else {
        uid = geteuid();
        gid = getegid();
    }
    snprintf(user, sizeof user, "%u:%u", (unsigned)uid, (unsigned)gid);
    p->uid = uid;
    p->gid = gid;
    snprintf(p->workdir, sizeof p->workdir, "%s", l->o.workdir_mount);

    /* Not root: the runtime dir can be neither bounded nor given away. */
    if (l->o.runtime_size > 0 && geteuid() != 0)
        dk_warn_not_root();
    if (uid != geteuid() && geteuid() != 0) {
        rc = korch_err_set(err, KORCH_E_LAUNCH,
                           "cannot give runtime dir '%s' to the kernel's user %s: korch runs as uid %u, not root "
                           "(leave the docker user unset to run the kernel as uid %u)",
                           req->runtime_dir, user, (unsigned)geteuid(), (unsigned)geteuid());
        goto out;
    }

    /* The connection file as the kernel sees it: same key and ports, the ipc
       prefix under the container's mount point. */
    conn = *req->conn;
    snprintf(conn.ip, sizeof conn.ip, "%s/%s", l->o.runtime_mount, ipc_name);
    snprintf(conn_in, sizeof conn_in, "%s/%s", l->o.runtime_mount, DK_CONN_FILE);
    snprintf(p->conn_file, sizeof p->conn_file, "%.*s/%s", (int)dl, req->runtime_dir, DK_CONN_FILE);

    const char *workdir = l->o.workdir ? l->o.workdir : (l->o.workdir_from_cwd ? req->cwd : NULL);
    if (workdir && l->o.workdir_give && l->o.workdir_size > 0 && geteuid() != 0)
        dk_warn_not_root();
    korch_container_image(l->o.image, req->spec, image, sizeof image);
    body = dk_create_body(l, req, image, user, uid, gid, workdir, conn_in);
    if (!body) {
        rc = korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        goto out;
    }
    if (dk_valid_name(req->kernel_id))
        snprintf(path, sizeof path, "/containers/create?name=korch-%s", req->kernel_id);
    else
        snprintf(path, sizeof path, "/containers/create");
    s_start_t *st = calloc(1, sizeof *st);
    if (!st) {
        rc = korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        goto out;
    }
    *st = (s_start_t){.p = p, .op = op, .conn = conn, .uid = uid, .gid = gid, .body = body, .retry_timer = -1,
                      .loop = self->loop};
    body = NULL;
    snprintf(st->create_path, sizeof st->create_path, "%s", path);
    if (dk_valid_name(req->kernel_id))
        snprintf(st->name, sizeof st->name, "korch-%s", req->kernel_id);
    snprintf(st->image, sizeof st->image, "%s", image);
    snprintf(st->spec, sizeof st->spec, "%s", req->spec->name);
    snprintf(st->user, sizeof st->user, "%s", user);
    snprintf(st->conn_in, sizeof st->conn_in, "%s", conn_in);
    if (workdir && korch_path_fmt(st->workdir, sizeof st->workdir, err, "%s", workdir) != KORCH_OK) {
        st->p = NULL;
        st->op = NULL;
        s_start_free(st, KORCH_OK, NULL);
        rc = err && err->rc ? err->rc : KORCH_E_INVALID;
        goto out;
    }
    /* The host side (mounts, chown, the connection file, the work dir's
       copy) on the launcher's worker: in order behind the unmount of this
       runtime dir that a restart's freed proc queued. */
    korch_op_on_cancel(op, s_start_cancel, st);
    st->host_busy = true;
    korch_backend_host(self, s_prep_run, s_prep_done, st);
    return KORCH_OK;
out:
    korch_docker_reply_clear(&r);
    json_decref(body);
    korch_kuid_release(&p->kuid);
    free(p); /* nothing of it on the host yet */
    return rc;
}
