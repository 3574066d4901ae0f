/*  The Docker launcher: one hardened container per kernel, created and
 *  watched through the Engine API (docker_api.c); no docker CLI.
 *
 *  Why these choices:
 *  - ipc over a bind mount, NetworkMode none: the kernel binds its five zmq
 *    sockets as files in runtime_dir, which korch connects to from the host.
 *    No ports to allocate, nothing listening on any network.
 *  - runtime_dir stays 0700 and is chowned to the kernel's uid (when that is
 *    not korch's own) rather than made 0777: a world-writable dir would let
 *    any local user plant or replace socket files next to the kernel's. root
 *    korch still reaches the sockets (it bypasses file permissions); the
 *    owner is given back in proc_free.
 *  - Init: docker-init (tini) is PID 1. `POST /kill?signal=SIGINT` reaches
 *    PID 1, which forwards it to its child, the kernel, whose handler turns
 *    it into KeyboardInterrupt. Without it the kernel would be PID 1, and
 *    zombies of the shell commands a notebook runs would never be reaped.
 *  - exit_fd: a second connection holds POST /containers/{id}/wait. The
 *    engine sends the status line and headers at once (API >= 1.30) and the
 *    body only when the container stops, so once the headers are consumed
 *    the socket becomes readable exactly when the kernel ends.
 *  - OOM: the engine records State.OOMKilled when the memory cgroup's OOM
 *    killer fired in the container; is_alive reports it with the limit.
 */
#include "korch/docker.h"
#include "korch/buf.h"
#include "korch/docker_api.h"
#include "korch/env.h"
#include "korch/fsutil.h"
#include "korch/instance.h"
#include "korch/log.h"
#include "korch/path.h"
#include "backend.h"
#include "spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define S_GIB (1024LL * 1024 * 1024)
#define S_MIB (1024LL * 1024)
#define S_CONN_FILE "kernel.json"
#define S_TAIL_MAX 4096

typedef struct {
    korch_launcher_t base;
    korch_docker_t *api;
    korch_docker_opts_t o;      /* strings below point into owned copies */
    char *strs[10];             /* the copies, freed with the launcher */
    int engine_sees;            /* does the engine see korch's tmpfs mounts? -1 not known yet */
    char scope[KORCH_SCOPE_LEN]; /* korch_runtime_scope: the korch.scope label of what it makes */
} docker_launcher_t;

typedef struct {
    korch_proc_t base;
    docker_launcher_t *l;
    char id[80];                    /* container id */
    char runtime_dir[PATH_MAX];
    char conn_file[PATH_MAX];       /* host path of the kernel's connection file */
    char ipc_prefix[PATH_MAX];      /* host path prefix of the ipc sockets */
    int ports[KORCH_CH__COUNT];
    bool chowned;                   /* runtime_dir given to the kernel's uid */
    bool rt_mounted;                /* runtime_dir is korch's size-bounded tmpfs */
    char work_host[PATH_MAX];       /* a given host work dir covered by korch's tmpfs, or "" */
    int work_under;                 /* fd of the dir under that tmpfs (files go back there), or -1 */
    uid_t old_uid;
    gid_t old_gid;
    korch_op_t *wait_req;           /* the held POST /wait, then the inspect that describes the end */
    korch_op_t *kill_req;           /* a SIGKILL on its way */
    korch_op_t *log_req;            /* a refresh of tail */
    int rewait_timer;               /* wait again after a wait that ended early; -1 none */
    bool dead;                      /* end seen and described in why */
    char why[256];
    int64_t memory;                 /* the limit, for the OOM message */
    uid_t uid;                      /* the kernel's user: owner of the files put_file writes */
    gid_t gid;
    char workdir[PATH_MAX];         /* the kernel's cwd inside the container */
    char tail[S_TAIL_MAX + 1];
} docker_proc_t;

void korch_docker_opts_init(korch_docker_opts_t *o)
{
    memset(o, 0, sizeof *o);
    o->workdir_mount = "/home/korch/work";
    o->runtime_mount = "/run/korch";
    o->network = "none";
    o->memory = S_GIB;
    o->nano_cpus = 1000000000LL;
    o->pids_limit = 256;
    o->nofile = 4096;
    o->tmp_size = 256 * S_MIB;
    o->workdir_size = 512 * S_MIB;
    o->runtime_size = S_MIB;
    o->readonly_rootfs = true;
    o->cap_drop_all = true;
    o->no_new_privileges = true;
    o->init = true;
    o->use_wait_fd = true;
    o->api_timeout_ms = 30000;
}



/* Copy of s with every "{name}" replaced by val (new string). */
static char *s_replace(const char *s, const char *name, const char *val)
{
    size_t nl = strlen(name), vl = strlen(val), count = 0;
    for (const char *p = strstr(s, name); p; p = strstr(p + nl, name))
        count++;
    size_t len = strlen(s) + count * vl + 1;
    char *out = malloc(len), *w = out;
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

/* The kernelspec argv as the container's Cmd: argv[0] by basename (the host's
   interpreter path means nothing in the image), {connection_file} inside. */
static json_t *s_cmd(const korch_kernelspec_t *spec, const char *conn_in)
{
    json_t *cmd = json_array();
    for (size_t i = 0; cmd && spec->argv[i]; i++) {
        const char *a = spec->argv[i];
        if (i == 0 && strchr(a, '/'))
            a = strrchr(a, '/') + 1;
        char *x = s_replace(a, "{connection_file}", conn_in);
        if (!x || json_array_append_new(cmd, json_string(x))) {
            free(x);
            json_decref(cmd);
            return NULL;
        }
        free(x);
    }
    return cmd;
}

/* Env: what the user passed explicitly, the kernelspec's, the request's
   (env.h). The host's environ is not passed: the container is its own
   world, and korch's secrets stay out of it. */
static json_t *s_env(const korch_launch_t *req)
{
    char **v = korch_env_build(req, false, NULL);
    json_t *env = v ? json_array() : NULL;
    for (char **p = v; env && p && *p; p++)
        if (json_array_append_new(env, json_string(*p))) {
            json_decref(env);
            env = NULL;
        }
    korch_env_free(v);
    return env;
}

static bool s_valid_name(const char *s)
{
    if (!s || !*s || strlen(s) > 100)
        return false;
    for (const char *p = s; *p; p++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-", *p))
            return false;
    return true;
}

/* The image: the option, the kernelspec's metadata.korch.image, or the
   convention korch-kernel-<name>:latest. */
static void s_image(const docker_launcher_t *l, const korch_kernelspec_t *spec, char *buf, size_t len)
{
    json_t *meta = spec->json ? json_object_get(spec->json, "metadata") : NULL;
    json_t *img = json_object_get(json_object_get(meta, "korch"), "image");
    if (l->o.image)
        snprintf(buf, len, "%s", l->o.image);
    else if (json_is_string(img))
        snprintf(buf, len, "%s", json_string_value(img));
    else
        snprintf(buf, len, "korch-kernel-%s:latest", spec->name ? spec->name : "python3");
}

/* POST /containers/create's body. */
static json_t *s_create_body(docker_launcher_t *l, const korch_launch_t *req, const char *image, const char *user,
                             uid_t uid, gid_t gid, const char *workdir, const char *conn_in)
{
    const korch_docker_opts_t *o = &l->o;
    char opt[256];
    json_t *cmd = s_cmd(req->spec, conn_in);
    json_t *env = s_env(req);
    json_t *tmpfs = json_object();
    json_t *mounts = json_array();
    json_t *labels = json_object();
    json_t *host = json_object();
    json_t *body = json_object();
    if (!cmd || !env || !tmpfs || !mounts || !labels || !host || !body) {
        json_decref(cmd);
        json_decref(env);
        json_decref(tmpfs);
        json_decref(mounts);
        json_decref(labels);
        json_decref(host);
        json_decref(body);
        return NULL;
    }
    json_object_set_new(labels, "korch.kernel_id", json_string(req->kernel_id ? req->kernel_id : ""));
    json_object_set_new(labels, "korch.instance", json_string(o->instance ? o->instance : "default"));
    json_object_set_new(labels, "korch.kernelspec", json_string(req->spec->name ? req->spec->name : ""));
    json_object_set_new(labels, "korch.runtime_dir", json_string(req->runtime_dir));
    json_object_set_new(labels, "korch.scope", json_string(l->scope));

    snprintf(opt, sizeof opt, "rw,nosuid,nodev,mode=1777%s", "");
    if (o->tmp_size > 0)
        snprintf(opt, sizeof opt, "rw,nosuid,nodev,mode=1777,size=%lld", (long long)o->tmp_size);
    json_object_set_new(tmpfs, "/tmp", json_string(opt));
    json_array_append_new(mounts, json_pack("{s:s, s:s, s:s, s:b}", "Type", "bind", "Source", req->runtime_dir,
                                            "Target", o->runtime_mount, "ReadOnly", 0));
    if (workdir) {
        json_array_append_new(mounts, json_pack("{s:s, s:s, s:s, s:b}", "Type", "bind", "Source", workdir, "Target",
                                                o->workdir_mount, "ReadOnly", 0));
    } else {
        /* A tmpfs, but as an anonymous volume of the local driver rather than
           HostConfig.Tmpfs: dockerd mounts it in its own namespace too, so the
           archive endpoints (put_file, get_file) see its files, and a
           read-only root filesystem does not stop them. Removing the
           container with v=1 removes the volume. */
        int n = snprintf(opt, sizeof opt, "nosuid,nodev,mode=0755,uid=%u,gid=%u", (unsigned)uid, (unsigned)gid);
        if (o->workdir_size > 0 && n > 0 && (size_t)n < sizeof opt)
            snprintf(opt + n, sizeof opt - (size_t)n, ",size=%lld", (long long)o->workdir_size);
        json_array_append_new(mounts, json_pack("{s:s, s:s, s:b, s:{s:b, s:{s:s, s:{s:s, s:s, s:s}}}}", "Type",
                                                "volume", "Target", o->workdir_mount, "ReadOnly", 0,
                                                "VolumeOptions", "NoCopy", 1, "DriverConfig", "Name", "local",
                                                "Options", "type", "tmpfs", "device", "tmpfs", "o", opt));
    }

    json_object_set_new(host, "NetworkMode", json_string(o->network ? o->network : "none"));
    json_object_set_new(host, "ReadonlyRootfs", json_boolean(o->readonly_rootfs));
    json_object_set_new(host, "Tmpfs", tmpfs);
    json_object_set_new(host, "Mounts", mounts);
    if (o->memory > 0) {
        json_object_set_new(host, "Memory", json_integer(o->memory));
        json_object_set_new(host, "MemorySwap", json_integer(o->memory)); /* = Memory: no swap */
    }
    if (o->nano_cpus > 0)
        json_object_set_new(host, "NanoCpus", json_integer(o->nano_cpus));
    if (o->pids_limit > 0)
        json_object_set_new(host, "PidsLimit", json_integer(o->pids_limit));
    if (o->cap_drop_all)
        json_object_set_new(host, "CapDrop", json_pack("[s]", "ALL"));
    if (o->no_new_privileges)
        json_object_set_new(host, "SecurityOpt", json_pack("[s]", "no-new-privileges"));
    if (o->nofile > 0)
        json_object_set_new(host, "Ulimits", json_pack("[{s:s, s:I, s:I}]", "Name", "nofile", "Soft",
                                                       (json_int_t)o->nofile, "Hard", (json_int_t)o->nofile));
    json_object_set_new(host, "Init", json_boolean(o->init));
    if (o->runtime)
        json_object_set_new(host, "Runtime", json_string(o->runtime));
    json_object_set_new(host, "IpcMode", json_string("private"));
    json_object_set_new(host, "RestartPolicy", json_pack("{s:s}", "Name", "no"));
    /* A bounded log on disk, and one the logs endpoint can always read. */
    json_object_set_new(host, "LogConfig", json_pack("{s:s, s:{s:s, s:s}}", "Type", "json-file", "Config",
                                                     "max-size", "1m", "max-file", "1"));

    json_object_set_new(body, "Image", json_string(image));
    json_object_set_new(body, "Cmd", cmd);
    json_object_set_new(body, "Env", env);
    json_object_set_new(body, "User", json_string(user));
    json_object_set_new(body, "WorkingDir", json_string(o->workdir_mount));
    json_object_set_new(body, "Labels", labels);
    json_object_set_new(body, "AttachStdin", json_false());
    json_object_set_new(body, "AttachStdout", json_false());
    json_object_set_new(body, "AttachStderr", json_false());
    json_object_set_new(body, "Tty", json_false());
    json_object_set_new(body, "OpenStdin", json_false());
    json_object_set_new(body, "HostConfig", host);
    return body;
}

/* Remove a container and its anonymous volumes, quietly: used on failed
   starts, in proc_free and for orphans. True when it is gone. */
static bool s_remove(docker_launcher_t *l, const char *id)
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

/* chown a directory korch made through its fd (never a link by that name);
   its owner before in *before. 0, or -1 with errno. */
static int s_give_dir(const char *dir, uid_t uid, gid_t gid, struct stat *before)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (fd < 0)
        return -1;
    int r = fstat(fd, &st) == 0 && fchown(fd, uid, gid) == 0 ? 0 : -1;
    int e = errno;
    close(fd);
    if (r == 0 && before)
        *before = st;
    errno = e;
    return r;
}

/* ------------------------------------------------- bounded host dirs */

/* Is dir a mount point (its device differs from its parent's)? */
static bool s_is_mountpoint(const char *dir)
{
    char parent[PATH_MAX + 4];
    struct stat a, b;
    snprintf(parent, sizeof parent, "%s/..", dir);
    return lstat(dir, &a) == 0 && S_ISDIR(a.st_mode) && stat(parent, &b) == 0 && a.st_dev != b.st_dev;
}

/* A tmpfs of size bytes on dir, owned by uid:gid: the kernel sees ENOSPC
   when it is full, the host's disk never fills. Root only. */
static int s_mount_tmpfs(const char *dir, int64_t size, uid_t uid, gid_t gid, unsigned mode, bool noexec)
{
    char opt[200];
    snprintf(opt, sizeof opt, "size=%lld,mode=%04o,uid=%u,gid=%u,nr_inodes=%lld", (long long)size, mode,
             (unsigned)uid, (unsigned)gid, (long long)(size / 4096 + 64));
    return mount("tmpfs", dir, "tmpfs", MS_NOSUID | MS_NODEV | (noexec ? MS_NOEXEC : 0), opt);
}

static void s_warn_not_root(void)
{
    static bool said;
    if (!said)
        korch_warn("kernel dirs on the host are not size-bounded: korch is not root, so it cannot mount their "
                   "tmpfs (a kernel can fill the disk under its runtime and work dirs)");
    said = true;
}

/* Cover a host work dir korch made (a session's files/) with a tmpfs of
   workdir_size holding a copy of it, for the life of the container. */
static korch_rc_t s_bound_workdir(docker_proc_t *p, const char *dir, int64_t size, korch_err_t *err)
{
    korch_rc_t rc = KORCH_OK;
    int top = -1;
    p->work_under = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (p->work_under < 0)
        return korch_err_set(err, KORCH_E_IO, "cannot use work dir '%s': %s", dir, strerror(errno));
    if (s_mount_tmpfs(dir, size, p->uid, p->gid, 0755, false) != 0) {
        korch_warn("work dir '%s' is not size-bounded: cannot mount a tmpfs on it: %s", dir, strerror(errno));
        close(p->work_under);
        p->work_under = -1;
        return KORCH_OK;
    }
    snprintf(p->work_host, sizeof p->work_host, "%s", dir);
    top = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    korch_fs_opts_t o = {.mode = 0644, .chown = true, .uid = p->uid, .gid = p->gid};
    korch_err_t e = {0};
    if (top < 0 || korch_fs_copy_tree(p->work_under, top, (uint64_t)size, &o, NULL, &e) != KORCH_OK)
        rc = korch_err_set(err, e.rc ? e.rc : KORCH_E_IO, "cannot copy work dir '%s' into its %lld MiB tmpfs: %s",
                           dir, (long long)(size / S_MIB), e.rc ? e.msg : strerror(errno));
    if (top >= 0)
        close(top);
    return rc;
}

/* The container is gone: bring what the kernel left in the tmpfs home to
   the dir underneath (bounded, no links), then unmount. */
static void s_unbound_workdir(docker_proc_t *p)
{
    if (!p->work_host[0])
        return;
    int top = open(p->work_host, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    korch_fs_opts_t o = {.mode = 0644, .chown = p->uid != geteuid(), .uid = p->uid, .gid = p->gid};
    korch_err_t e = {0};
    uint64_t copied = 0;
    if (top < 0 || korch_fs_copy_tree(top, p->work_under, (uint64_t)p->l->o.workdir_size, &o, &copied, &e))
        korch_warn("work dir '%s': not everything the kernel left was kept: %s", p->work_host,
                   top < 0 ? strerror(errno) : e.msg);
    if (top >= 0)
        close(top);
    if (umount2(p->work_host, MNT_DETACH) != 0)
        korch_warn("cannot unmount the tmpfs on work dir '%s': %s", p->work_host, strerror(errno));
    p->work_host[0] = 0;
    close(p->work_under);
    p->work_under = -1;
}

static void s_unbound_runtime(docker_proc_t *p)
{
    if (p->rt_mounted && umount2(p->runtime_dir, MNT_DETACH) != 0)
        korch_warn("cannot unmount the tmpfs on runtime dir '%s': %s", p->runtime_dir, strerror(errno));
    p->rt_mounted = false;
}

/* The engine does not see korch's tmpfs mounts (korch runs in a mount
   namespace of its own, e.g. a privileged container without shared
   propagation): use the dirs underneath, unbounded, as without root. */
static korch_rc_t s_unbound_unseen(docker_proc_t *p, const korch_conn_t *conn, uid_t uid, gid_t gid,
                                   korch_err_t *err)
{
    korch_warn("the docker engine does not see the tmpfs korch mounted on '%s' (korch is in another mount "
               "namespace): the kernel's runtime and work dirs are not size-bounded",
               p->runtime_dir);
    if (p->work_host[0]) { /* nothing ran yet: the dir underneath is as it was */
        if (umount2(p->work_host, MNT_DETACH) != 0)
            korch_warn("cannot unmount the tmpfs on work dir '%s': %s", p->work_host, strerror(errno));
        if (uid != geteuid())
            korch_fs_chown_tree(p->work_host, uid, gid, NULL);
        p->work_host[0] = 0;
        close(p->work_under);
        p->work_under = -1;
    }
    s_unbound_runtime(p);
    struct stat st;
    if (uid != geteuid()) {
        if (s_give_dir(p->runtime_dir, uid, gid, &st) != 0)
            return korch_err_set(err, KORCH_E_IO, "cannot give runtime dir '%s' to the kernel: %s", p->runtime_dir,
                                 strerror(errno));
        p->chowned = true;
        p->old_uid = st.st_uid;
        p->old_gid = st.st_gid;
    }
    return korch_conn_save_as(conn, p->conn_file, uid != geteuid(), uid, gid, err);
}

static void s_watch(docker_proc_t *p);
static void s_remove_later(docker_launcher_t *l, const char *id);
static void s_cleanup_later(docker_proc_t *p);

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
            s_remove_later(st->p->l, st->p->id);
        s_cleanup_later(st->p);
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
            s_cleanup_later(st->p);
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
    s_watch(p);
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
    st->host_rc = s_unbound_unseen(st->p, &st->conn, st->uid, st->gid, &st->host_err);
}

static void s_unseen_done(void *arg)
{
    s_start_t *st = s_host_back(arg);
    if (st)
        s_start_container(st);
}

/* Use the dirs underneath (s_unbound_unseen), on the worker, then start. */
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

/* The host side of a start (s_start queues it on the worker): each step
   may block on the kernel (mount) or the disk (the work dir's copy). The
   runtime dir is the kernel's: korch_conn_save_as never writes through a
   link planted there (kernel.json.tmp -> /etc/...) and gives the file away
   on its fd, not by name; s_give_dir chowns through an O_NOFOLLOW fd. */
static korch_rc_t s_prep(docker_proc_t *p, s_start_t *st, korch_err_t *err)
{
    docker_launcher_t *l = p->l;
    /* A small tmpfs of the kernel's uid on runtime_dir: room for its sockets
       and connection file, not for filling the host's disk. */
    if (l->o.runtime_size > 0 && geteuid() == 0) {
        if (s_mount_tmpfs(p->runtime_dir, l->o.runtime_size, st->uid, st->gid, 0700, true) == 0)
            p->rt_mounted = true;
        else
            korch_warn("runtime dir '%s' is not size-bounded: cannot mount a tmpfs on it: %s", p->runtime_dir,
                       strerror(errno));
    }
    /* Else give runtime_dir to the kernel's uid so it can create its sockets. */
    if (st->uid != geteuid() && !p->rt_mounted) {
        struct stat sb;
        if (s_give_dir(p->runtime_dir, st->uid, st->gid, &sb) != 0)
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
        rc = s_bound_workdir(p, workdir, l->o.workdir_size, err);
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

static korch_rc_t s_start(korch_launcher_t *self, const korch_launch_t *req, korch_op_t *op, korch_err_t *err)
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
        uid = 1000;
        gid = 1000;
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
        s_warn_not_root();
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
    snprintf(conn_in, sizeof conn_in, "%s/%s", l->o.runtime_mount, S_CONN_FILE);
    snprintf(p->conn_file, sizeof p->conn_file, "%.*s/%s", (int)dl, req->runtime_dir, S_CONN_FILE);

    const char *workdir = l->o.workdir ? l->o.workdir : (l->o.workdir_from_cwd ? req->cwd : NULL);
    if (workdir && l->o.workdir_give && l->o.workdir_size > 0 && geteuid() != 0)
        s_warn_not_root();
    s_image(l, req->spec, image, sizeof image);
    body = s_create_body(l, req, image, user, uid, gid, workdir, conn_in);
    if (!body) {
        rc = korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        goto out;
    }
    if (s_valid_name(req->kernel_id))
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
    if (s_valid_name(req->kernel_id))
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
    free(p); /* nothing of it on the host yet */
    return rc;
}

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
static size_t s_demux(const unsigned char *in, size_t len, char *out, size_t cap);

static void s_fetch_logs(docker_proc_t *p, korch_docker_done_fn *done)
{
    char path[160];
    snprintf(path, sizeof path, "/containers/%s/logs?stdout=1&stderr=1&tail=50", p->id);
    p->log_req = korch_docker_request_async(p->l->api, "GET", path, NULL, NULL, done, p, NULL);
}

static void s_keep_logs(docker_proc_t *p, korch_rc_t rc, korch_docker_reply_t *r)
{
    if (rc == KORCH_OK && r->status == 200) {
        size_t n = s_demux((const unsigned char *)r->body, r->body_len, p->tail, S_TAIL_MAX);
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

static void s_watch(docker_proc_t *p) { s_wait(p); }

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

typedef struct {
    docker_proc_t *p;
    korch_op_t *op;                 /* the launcher's */
    korch_op_t *req;
    int sig;
} s_signal_t;

static void s_signal_cancel(korch_op_t *op, void *arg)
{
    s_signal_t *sg = arg;
    korch_op_cancel(&sg->req);
    free(sg);
}

static void s_on_signalled(korch_rc_t rc, const korch_err_t *err, korch_docker_reply_t *r, void *arg)
{
    s_signal_t *sg = arg;
    korch_err_t e = {0};
    if (rc == KORCH_OK && (r->status == 409 || r->status == 404))
        rc = korch_err_set(&e, KORCH_E_DIED, "kernel container %.12s is not running", sg->p->id);
    else if (rc == KORCH_OK && r->status != 204)
        rc = korch_err_set(&e, KORCH_E_DOCKER, "cannot signal kernel container %.12s: %s", sg->p->id,
                           korch_docker_reply_message(r));
    else if (rc)
        e = *err;
    korch_op_finish(sg->op, rc, &e);
    free(sg);
}

static korch_rc_t s_signal(korch_proc_t *proc, int sig, korch_op_t *op, korch_err_t *err)
{
    docker_proc_t *p = (docker_proc_t *)proc;
    if (p->dead)
        return korch_err_set(err, KORCH_E_DIED, "kernel container %.12s is gone (%s)", p->id, p->why);
    s_signal_t *sg = calloc(1, sizeof *sg);
    if (!sg)
        return korch_err_set(err, KORCH_E_NOMEM, "out of memory");
    *sg = (s_signal_t){.p = p, .op = op, .sig = sig};
    char path[160];
    snprintf(path, sizeof path, "/containers/%s/kill?signal=%d", p->id, sig);
    sg->req = korch_docker_request_async(p->l->api, "POST", path, NULL, NULL, s_on_signalled, sg, err);
    if (!sg->req) {
        free(sg);
        return err && err->rc ? err->rc : KORCH_E_DOCKER;
    }
    korch_op_on_cancel(op, s_signal_cancel, sg);
    return KORCH_OK;
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
static korch_rc_t s_kill(korch_proc_t *proc, korch_op_t *op, korch_err_t *err)
{
    docker_proc_t *p = (docker_proc_t *)proc;
    if (p->dead || p->kill_req)
        return KORCH_OK;
    char path[160];
    snprintf(path, sizeof path, "/containers/%s/kill?signal=%d", p->id, SIGKILL);
    p->kill_req = korch_docker_request_async(p->l->api, "POST", path, NULL, NULL, s_on_killed, p, err);
    return p->kill_req ? KORCH_OK : err && err->rc ? err->rc : KORCH_E_DOCKER;
}

/* Docker multiplexes a non-tty container's output: frames of an 8-byte
   header {stream, 0, 0, 0, size as big-endian uint32} then size bytes. */
static size_t s_demux(const unsigned char *in, size_t len, char *out, size_t cap)
{
    size_t w = 0;
    bool framed = len >= 8 && in[0] <= 2 && !in[1] && !in[2] && !in[3];
    size_t pos = 0;
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
        } else {
            pos = len;
        }
        /* Keep the last cap bytes. */
        if (n >= cap) {
            memcpy(out, chunk + n - cap, cap);
            w = cap;
        } else {
            if (w + n > cap) {
                memmove(out, out + (w + n - cap), cap - n);
                w = cap - n;
            }
            memcpy(out + w, chunk, n);
            w += n;
        }
    }
    return w;
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
static const char *s_log_tail(korch_proc_t *proc)
{
    docker_proc_t *p = (docker_proc_t *)proc;
    if (!p->dead && !p->log_req && p->id[0])
        s_fetch_logs(p, s_on_logs);
    return p->tail;
}

/* What korch made on the host for the kernel, given back or removed. */
static void s_local_cleanup(docker_proc_t *p)
{
    if (p->conn_file[0])
        unlink(p->conn_file);
    /* The kernel removes its sockets when it exits cleanly; not when killed. */
    for (int i = 0; p->ipc_prefix[0] && i < KORCH_CH__COUNT; i++) {
        char sock[PATH_MAX + 16];
        snprintf(sock, sizeof sock, "%s-%d", p->ipc_prefix, p->ports[i]);
        unlink(sock);
    }
    if (p->chowned && s_give_dir(p->runtime_dir, p->old_uid, p->old_gid, NULL) != 0)
        korch_warn("cannot give runtime dir '%s' back: %s", p->runtime_dir, strerror(errno));
    p->chowned = false;
    s_unbound_workdir(p);
    s_unbound_runtime(p);
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
        s_remove(rm->l, rm->id);
    }
    free(rm);
}

static void s_remove_later(docker_launcher_t *l, const char *id)
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
        s_remove(l, id);
        free(rm);
        return;
    }
    korch_backend_job(&l->base, 50, s_rm_step, s_rm_finish, rm);
}

static void s_cleanup_run(void *arg) { s_local_cleanup(arg); }

/* s_local_cleanup on the launcher's worker (umount2 waits on the kernel's
   namespace lock: 20 ms seen), then p is freed: nothing on the loop
   touches p meanwhile. */
static void s_cleanup_later(docker_proc_t *p) { korch_backend_host(&p->l->base, s_cleanup_run, free, p); }

/* Never blocks: the container goes in the background (the loop), the
   host dirs are given back and unmounted on the worker. */
static void s_proc_free(korch_proc_t *proc)
{
    docker_proc_t *p = (docker_proc_t *)proc;
    s_unwatch(p);
    if (p->id[0])
        s_remove_later(p->l, p->id);
    s_cleanup_later(p);
}

/* ---------------------------------------------------------------- listing */

/* A label's value, "" when missing. */
static const char *s_label(json_t *labels, const char *key)
{
    const char *v = json_string_value(json_object_get(labels, key));
    return v ? v : "";
}

/* Does a container's korch.scope label name this korch's lock domain? */
static bool s_ours(const docker_launcher_t *l, json_t *labels)
{
    return strcmp(s_label(labels, "korch.scope"), l->scope) == 0;
}

/* GET /containers/json?all=1 filtered by one label ("k" or "k=v"): the
   engine's array, new reference; NULL + err on failure. */
/* "/containers/json?all=1&filters=..." for one label ("k" or "k=v"); new, NULL on ENOMEM. */
static char *s_labelled_path(docker_launcher_t *l, const char *label)
{
    json_t *filters = json_pack("{s:[s]}", "label", label);
    char *fjson = filters ? json_dumps(filters, JSON_COMPACT) : NULL;
    char *fesc = fjson ? korch_docker_escape(l->api, fjson) : NULL;
    size_t plen = fesc ? strlen(fesc) + 64 : 0;
    char *path = fesc ? malloc(plen) : NULL;
    if (path)
        snprintf(path, plen, "/containers/json?all=1&filters=%s", fesc);
    json_decref(filters);
    free(fjson);
    free(fesc);
    return path;
}

/* GET /containers/json?all=1 filtered by one label: the engine's array, new
   reference; NULL + err on failure. Blocking (listing and cleanup). */
static json_t *s_find_labelled(docker_launcher_t *l, const char *label, korch_err_t *err)
{
    char *path = s_labelled_path(l, label);
    json_t *list = NULL;
    korch_docker_reply_t r = {0};
    if (!path) {
        korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        return NULL;
    }
    if (korch_docker_request(l->api, "GET", path, NULL, &r, err) == KORCH_OK) {
        if (r.status != 200 || !json_is_array(r.json))
            korch_err_set(err, KORCH_E_DOCKER, "cannot list korch containers: %s", korch_docker_reply_message(&r));
        else
            list = json_incref(r.json);
    }
    korch_docker_reply_clear(&r);
    free(path);
    return list;
}

/* Where a container has runtime_dir bind-mounted (its Destination), or NULL
   when it has not: a korch.runtime_dir label alone is not trusted, since
   adopt connects to what is in that dir and cleanup deletes from it. Works
   on GET /containers/json entries and on inspect replies alike. */
static const char *s_runtime_target(json_t *c, const char *runtime_dir)
{
    size_t i;
    json_t *m;
    if (!runtime_dir || runtime_dir[0] != '/')
        return NULL;
    json_array_foreach(json_object_get(c, "Mounts"), i, m) {
        const char *type = json_string_value(json_object_get(m, "Type"));
        const char *src = json_string_value(json_object_get(m, "Source"));
        const char *dst = json_string_value(json_object_get(m, "Destination"));
        if (type && src && dst && strcmp(type, "bind") == 0 && strcmp(src, runtime_dir) == 0 && dst[0] == '/')
            return dst;
    }
    return NULL;
}

/* The in-container ipc prefix "{target}/{base}": base, or NULL when the
   prefix is not directly inside target. */
static const char *s_ipc_base(const char *ip, const char *target)
{
    size_t tl = korch_dir_len(target);
    if (strncmp(ip, target, tl) != 0 || ip[tl] != '/' || !ip[tl + 1] || strchr(ip + tl + 1, '/'))
        return NULL;
    return ip + tl + 1;
}

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

static void s_cleanup_runtime(const char *dir, const char *target);

/* Is dir directly inside our runtime base (what korch made for a kernel)? */
static bool s_rdir_in_base(const char *dir)
{
    char base[PATH_MAX];
    size_t bl;
    return dir && korch_runtime_base(base, sizeof base, NULL) == KORCH_OK &&
           strncmp(dir, base, (bl = strlen(base))) == 0 && dir[bl] == '/' && dir[bl + 1] &&
           !strchr(dir + bl + 1, '/');
}

static void s_adopt_end(s_adopt_t *a, korch_rc_t rc, const korch_err_t *err)
{
    korch_op_cancel(&a->req);
    if (rc == KORCH_OK && a->op) {
        korch_debug("re-adopted kernel %s in container %.12s (runtime dir %s)", a->kernel_id, a->p->id,
                    a->p->runtime_dir);
        s_watch(a->p);
        korch_op_finish_proc(a->op, &a->p->base, KORCH_OK, NULL);
    } else {
        /* Ours but not adoptable (exited, no runtime dir, no usable
           connection file): nobody can reach it any more, so it goes
           rather than leak. Not on a failed or cancelled Engine API call. */
        if (a->op && a->owned && a->p->id[0] && rc != KORCH_E_DOCKER && rc != KORCH_E_INTERRUPTED) {
            korch_notice("removing container %.12s of kernel %s, which cannot be re-adopted", a->p->id,
                         a->kernel_id);
            s_remove_later(a->p->l, a->p->id);
            if (a->target[0] && a->has_rdir && s_rdir_in_base(a->rdir))
                s_cleanup_runtime(a->rdir, a->target);
        }
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
    const char *target = s_runtime_target(r->json, rdir);
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
    if (korch_path_join(p->conn_file, sizeof p->conn_file, p->runtime_dir, S_CONN_FILE, NULL) != KORCH_OK) {
        rc = korch_err_set(err, KORCH_E_TOOBIG, "cannot re-adopt kernel '%s': runtime dir '%s' is too long",
                           kernel_id, p->runtime_dir);
        return s_adopt_end(a, rc, err);
    }
    /* The kernel can write that dir: no link, no FIFO, a bounded file. */
    rc = korch_conn_load_nofollow(&inside, p->conn_file, err);
    if (rc)
        return s_adopt_end(a, rc, err);
    const char *base = strcmp(inside.transport, "ipc") == 0 ? s_ipc_base(inside.ip, target) : NULL;
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
    snprintf(p->workdir, sizeof p->workdir, "%s", wd && wd[0] == '/' ? wd : l->o.workdir_mount);
    p->memory = json_integer_value(json_object_get(json_object_get(r->json, "HostConfig"), "Memory"));
    /* The earlier korch gave runtime_dir to the kernel's uid; give it back
       to korch's when the proc is freed, as for a started one. */
    p->work_under = -1;
    if (geteuid() == 0 && s_is_mountpoint(p->runtime_dir))
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
            s_ours(l, json_object_get(any, "Labels"))) {
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
    if (!s_ours(l, labels)) {
        rc = korch_err_set(err, KORCH_E_STATE,
                           "cannot re-adopt kernel '%s': its container %.12s is of korch scope '%.40s', not this "
                           "runtime dir's '%s' (another machine's korch, or an older korch)",
                           kernel_id, cid ? cid : "", s_label(labels, "korch.scope"), l->scope);
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

static korch_rc_t s_adopt(korch_launcher_t *self, const char *kernel_id, korch_op_t *op, korch_err_t *err)
{
    docker_launcher_t *l = (docker_launcher_t *)self;
    if (!s_valid_name(kernel_id) || strlen(kernel_id) >= sizeof(((s_adopt_t *)0)->kernel_id))
        return korch_err_set(err, KORCH_E_INVALID, "cannot re-adopt kernel '%s': not a valid kernel id",
                             kernel_id ? kernel_id : "");
    s_adopt_t *a = calloc(1, sizeof *a);
    docker_proc_t *p = a ? korch_backend_proc_new(self, sizeof *p, NULL) : NULL;
    char label[200];
    snprintf(label, sizeof label, "korch.kernel_id=%s", kernel_id);
    char *path = p ? s_labelled_path(l, label) : NULL;
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

/* ---------------------------------------------------------------- files */

/* Files go through the archive endpoints, so they work however the work dir
 * is mounted (the tmpfs volume, a host dir) and with a remote engine:
 *   PUT  /containers/{id}/archive?path=DIR  a tar, extracted into DIR
 *   GET  /containers/{id}/archive?path=P    a tar of P (a symlink stays one)
 *   HEAD /containers/{id}/archive?path=P    P's stat in X-Docker-Container-Path-Stat
 * dockerd resolves paths inside the container's root, never the host's.
 * Names are relative (korch_safe_relpath); each directory on the way is
 * checked to be a directory, not a symlink, so a link the kernel planted
 * (work/d -> /etc) does not lead korch out of the work dir. A kernel racing
 * that check can at most reach its own container's files. */

#define S_TAR_BLOCK 512
#define S_GO_MODE_DIR (1ULL << 31)      /* Go os.ModeDir */
#define S_GO_MODE_SYMLINK (1ULL << 27)  /* Go os.ModeSymlink */
#define S_TAR_SIZE_MAX 077777777777ULL  /* 11 octal digits */

static const unsigned char s_tar_zeros[2 * S_TAR_BLOCK]; /* padding; two of them end an archive */

/* "/containers/{id}/archive?path=" + escaped workdir[/rel[0..rel_len]] + extra. */
static char *s_archive_path(docker_proc_t *p, const char *rel, size_t rel_len, const char *extra)
{
    char full[PATH_MAX + 1100];
    if (rel_len)
        snprintf(full, sizeof full, "%s/%.*s", p->workdir, (int)rel_len, rel);
    else
        snprintf(full, sizeof full, "%s", p->workdir);
    char *esc = korch_docker_escape(p->l->api, full);
    size_t n = esc ? strlen(esc) + strlen(p->id) + strlen(extra) + 64 : 0;
    char *path = esc ? malloc(n) : NULL;
    if (path)
        snprintf(path, n, "/containers/%s/archive?path=%s%s", p->id, esc, extra);
    free(esc);
    return path;
}

/* The engine's stat of workdir/rel[0..rel_len]: KORCH_OK with *mode (Go
   os.FileMode), KORCH_E_NOTFOUND when absent. */
static korch_rc_t s_stat(docker_proc_t *p, const char *rel, size_t rel_len, unsigned long long *mode,
                         korch_err_t *err)
{
    char *path = s_archive_path(p, rel, rel_len, "");
    if (!path)
        return korch_err_set(err, KORCH_E_NOMEM, "out of memory");
    korch_docker_reply_t r;
    korch_rc_t rc = korch_docker_request_raw(p->l->api, "HEAD", path, NULL, NULL, 0, &r, err);
    free(path);
    if (rc)
        return rc;
    json_t *m = json_object_get(r.path_stat, "mode");
    if (r.status == 404)
        rc = KORCH_E_NOTFOUND;
    else if (r.status != 200 || !json_is_integer(m))
        rc = korch_err_set(err, KORCH_E_DOCKER, "cannot look at '%.*s' in kernel container %.12s: HTTP %ld",
                           (int)rel_len, rel, p->id, r.status);
    else
        *mode = (unsigned long long)json_integer_value(m);
    korch_docker_reply_clear(&r);
    return rc;
}

/* Every directory on the way to name is a directory and not a symlink. With
   missing non-NULL an absent one is fine: *missing is the length of the
   first absent prefix (SIZE_MAX when all exist); else absent = NOTFOUND. */
static korch_rc_t s_check_parents(docker_proc_t *p, const char *name, size_t *missing, korch_err_t *err)
{
    if (missing)
        *missing = SIZE_MAX;
    for (const char *s = strchr(name, '/'); s; s = strchr(s + 1, '/')) {
        size_t n = (size_t)(s - name);
        unsigned long long mode = 0;
        korch_rc_t rc = s_stat(p, name, n, &mode, err);
        if (rc == KORCH_E_NOTFOUND && missing) {
            *missing = n;
            return KORCH_OK;
        }
        if (rc == KORCH_E_NOTFOUND)
            return korch_err_set(err, KORCH_E_NOTFOUND, "no file '%s' in the kernel's work dir", name);
        if (rc)
            return rc;
        if (mode & S_GO_MODE_SYMLINK)
            return korch_err_set(err, KORCH_E_INVALID,
                                 "'%.*s' in the kernel's work dir is a symbolic link: refusing to follow it", (int)n,
                                 name);
        if (!(mode & S_GO_MODE_DIR))
            return korch_err_set(err, KORCH_E_INVALID, "'%.*s' in the kernel's work dir is not a directory", (int)n,
                                 name);
    }
    return KORCH_OK;
}

/* Append data padded with zeros to a whole number of blocks. */
static bool s_tar_data(korch_buf_t *b, const void *data, size_t len)
{
    size_t pad = (S_TAR_BLOCK - len % S_TAR_BLOCK) % S_TAR_BLOCK;
    return korch_buf_add(b, data, len, "archive", NULL) == KORCH_OK &&
           korch_buf_add(b, s_tar_zeros, pad, "archive", NULL) == KORCH_OK;
}

/* One ustar header (POSIX.1-1988: name[100] mode[8] uid[8] gid[8] size[12]
   mtime[12] chksum[8] typeflag[1] linkname[100] magic "ustar\0" version "00"
   uname[32] gname[32] devmajor[8] devminor[8] prefix[155]). Numbers are
   octal, NUL-terminated; the checksum is the sum of the header's bytes with
   the checksum field taken as eight spaces. */
static bool s_tar_header(korch_buf_t *b, const char *name, size_t name_len, char type, unsigned mode,
                         unsigned uid, unsigned gid, unsigned long long size)
{
    unsigned char h[S_TAR_BLOCK];
    memset(h, 0, sizeof h);
    memcpy(h, name, name_len < 100 ? name_len : 99);
    snprintf((char *)h + 100, 8, "%07o", mode & 07777);
    snprintf((char *)h + 108, 8, "%07o", uid & 07777777);
    snprintf((char *)h + 116, 8, "%07o", gid & 07777777);
    snprintf((char *)h + 124, 12, "%011llo", size);
    snprintf((char *)h + 136, 12, "%011llo", (unsigned long long)time(NULL) & 077777777777ULL);
    h[156] = (unsigned char)type;
    memcpy(h + 257, "ustar", 6);
    memcpy(h + 263, "00", 2);
    memcpy(h + 265, "korch", 5);
    memcpy(h + 297, "korch", 5);
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (size_t i = 0; i < sizeof h; i++)
        sum += h[i];
    snprintf((char *)h + 148, 8, "%06o", sum);
    h[155] = ' ';
    return s_tar_data(b, h, sizeof h);
}

/* An entry; names longer than the 99 bytes of ustar's name field go first
   into a pax extended header (POSIX.1-2001): records "LEN path=NAME\n",
   LEN counting the whole record, its own digits included. */
static bool s_tar_entry(korch_buf_t *b, const char *name, size_t name_len, char type, unsigned mode, unsigned uid,
                        unsigned gid, const void *data, size_t len)
{
    if (name_len > 99) {
        char rec[1200];
        size_t body = strlen(" path=") + name_len + 1, total = body + 1;
        while (total != body + (size_t)snprintf(NULL, 0, "%zu", total))
            total = body + (size_t)snprintf(NULL, 0, "%zu", total);
        int n = snprintf(rec, sizeof rec, "%zu path=%.*s\n", total, (int)name_len, name);
        if (n < 0 || (size_t)n != total || !s_tar_header(b, "PaxHeaders/korch", 16, 'x', 0644, 0, 0, total) ||
            !s_tar_data(b, rec, total))
            return false;
    }
    return s_tar_header(b, name, name_len, type, mode, uid, gid, len) && s_tar_data(b, data, len);
}

/* The archive PUT /archive extracts into the work dir: entries for the
   directories of name from byte missing on (those that do not exist yet),
   the file, and the two zero blocks that end an archive. Into b (empty),
   allocated once: each entry takes at most five blocks besides its data (a
   pax header and its record of up to 1200 bytes, its own header), the
   file's data one more of padding. */
static bool s_tar_archive(korch_buf_t *b, const docker_proc_t *p, const char *name, size_t missing,
                          const void *data, size_t len)
{
    size_t entries = 1;
    for (const char *s = strchr(name, '/'); s; s = strchr(s + 1, '/'))
        entries++;
    korch_buf_init(b, SIZE_MAX - 1, NULL);
    bool ok = len < SIZE_MAX / 2 &&
              korch_buf_reserve(b, len + (5 * entries + 3) * S_TAR_BLOCK, "archive", NULL) == KORCH_OK;
    for (const char *s = strchr(name, '/'); ok && s; s = strchr(s + 1, '/'))
        if ((size_t)(s - name) >= missing)
            ok = s_tar_entry(b, name, (size_t)(s - name) + 1, '5', 0755, p->uid, p->gid, NULL, 0);
    return ok && s_tar_entry(b, name, strlen(name), '0', 0644, p->uid, p->gid, data, len) &&
           korch_buf_add(b, s_tar_zeros, 2 * S_TAR_BLOCK, "archive", NULL) == KORCH_OK;
}

/* A tar number: octal text, or base-256 when the high bit of the first byte
   is set (GNU, also written by Go for large values). */
static bool s_tar_num(const unsigned char *f, size_t w, unsigned long long *v)
{
    *v = 0;
    if (f[0] & 0x80) {
        for (size_t i = 0; i < w; i++) {
            if (*v >> 56)
                return false;
            *v = *v << 8 | (i == 0 ? (f[0] & 0x7f) : f[i]);
        }
        return true;
    }
    size_t i = 0;
    while (i < w && f[i] == ' ')
        i++;
    for (; i < w && f[i] >= '0' && f[i] <= '7'; i++) {
        if (*v >> 60)
            return false;
        *v = *v << 3 | (unsigned)(f[i] - '0');
    }
    return i == w || f[i] == 0 || f[i] == ' ';
}

/* The one regular file of a tar from GET /archive, at most max bytes. */
static korch_rc_t s_tar_first_file(const char *name, const unsigned char *t, size_t len, size_t max, char **data,
                                   size_t *out_len, korch_err_t *err)
{
    static const unsigned char zero[S_TAR_BLOCK];
    size_t pos = 0;
    while (len >= S_TAR_BLOCK && pos <= len - S_TAR_BLOCK) {
        const unsigned char *h = t + pos;
        if (memcmp(h, zero, S_TAR_BLOCK) == 0)
            break;
        unsigned long long sum = 0, want = 0, size = 0;
        for (size_t i = 0; i < S_TAR_BLOCK; i++)
            sum += (i >= 148 && i < 156) ? ' ' : h[i];
        if (memcmp(h + 257, "ustar", 5) != 0 || !s_tar_num(h + 148, 8, &want) || sum != want ||
            !s_tar_num(h + 124, 12, &size))
            return korch_err_set(err, KORCH_E_PROTOCOL, "docker sent a malformed archive for '%s'", name);
        size_t at = pos + S_TAR_BLOCK;
        if (size > len - at)
            return korch_err_set(err, KORCH_E_PROTOCOL, "docker sent a truncated archive for '%s'", name);
        char type = (char)h[156];
        if (type == 'x' || type == 'g' || type == 'L' || type == 'K') {
            pos = at + (size_t)((size + S_TAR_BLOCK - 1) / S_TAR_BLOCK * S_TAR_BLOCK);
            continue;
        }
        if (type == '2' || type == '1')
            return korch_err_set(err, KORCH_E_INVALID, "'%s' in the kernel's work dir is a link: refusing to follow it",
                                 name);
        if (type != '0' && type != '\0' && type != '7')
            return korch_err_set(err, KORCH_E_INVALID, "'%s' in the kernel's work dir is not a regular file", name);
        if (size > max)
            return korch_err_set(err, KORCH_E_TOOBIG, "file '%s' in the kernel's work dir is larger than %zu bytes",
                                 name, max);
        *data = malloc((size_t)size + 1);
        if (!*data)
            return korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        memcpy(*data, t + at, (size_t)size);
        (*data)[size] = 0;
        *out_len = (size_t)size;
        return KORCH_OK;
    }
    return korch_err_set(err, KORCH_E_PROTOCOL, "docker sent an empty archive for '%s'", name);
}

static korch_rc_t s_put_file_now(korch_proc_t *proc, const char *name, const void *data, size_t len,
                                 korch_err_t *err)
{
    docker_proc_t *p = (docker_proc_t *)proc;
    korch_buf_t b = {0};
    char *path = NULL;
    korch_docker_reply_t r = {0};
    size_t missing = SIZE_MAX;
    korch_rc_t rc = KORCH_OK;
    if (len > S_TAR_SIZE_MAX)
        return korch_err_set(err, KORCH_E_TOOBIG, "cannot put '%s' into the kernel: larger than %llu bytes", name,
                             S_TAR_SIZE_MAX);
    rc = s_check_parents(p, name, &missing, err);
    if (rc)
        return rc;
    bool ok = s_tar_archive(&b, p, name, missing, data, len);
    path = ok ? s_archive_path(p, NULL, 0, "&noOverwriteDirNonDir=1") : NULL;
    if (!path) {
        rc = korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        goto out;
    }
    rc = korch_docker_request_raw(p->l->api, "PUT", path, "application/x-tar", b.p, b.len, &r, err);
    if (rc)
        goto out;
    if (r.status != 200)
        rc = korch_err_set(err, r.status == 404 ? KORCH_E_DIED : KORCH_E_DOCKER,
                           "cannot put '%s' into kernel container %.12s: %s", name, p->id,
                           korch_docker_reply_message(&r));
out:
    korch_docker_reply_clear(&r);
    free(path);
    korch_buf_free(&b);
    return rc;
}

static korch_rc_t s_get_file_now(korch_proc_t *proc, const char *name, size_t max, char **data, size_t *len,
                                 korch_err_t *err)
{
    docker_proc_t *p = (docker_proc_t *)proc;
    korch_docker_reply_t r = {0};
    korch_err_t e = {0};
    *data = NULL;
    *len = 0;
    korch_rc_t rc = s_check_parents(p, name, NULL, err);
    if (rc)
        return rc;
    char *path = s_archive_path(p, name, strlen(name), "");
    if (!path)
        return korch_err_set(err, KORCH_E_NOMEM, "out of memory");
    /* Room for the headers (a pax one for a long name), padding and the end. */
    size_t slack = 8 * S_TAR_BLOCK;
    korch_docker_set_max_reply(p->l->api, max < SIZE_MAX - slack ? max + slack : SIZE_MAX - 1);
    rc = korch_docker_request(p->l->api, "GET", path, NULL, &r, &e);
    korch_docker_set_max_reply(p->l->api, 0);
    free(path);
    if (rc == KORCH_E_TOOBIG)
        rc = korch_err_set(err, rc, "file '%s' in the kernel's work dir is larger than %zu bytes", name, max);
    else if (rc)
        rc = korch_err_set(err, rc, "%s", e.msg);
    else if (r.status == 404)
        rc = korch_err_set(err, KORCH_E_NOTFOUND, "no file '%s' in the kernel's work dir", name);
    else if (r.status != 200)
        rc = korch_err_set(err, KORCH_E_DOCKER, "cannot read '%s' from kernel container %.12s: %s", name, p->id,
                           korch_docker_reply_message(&r));
    else
        rc = s_tar_first_file(name, (const unsigned char *)r.body, r.body_len, max, data, len, err);
    korch_docker_reply_clear(&r);
    return rc;
}

/* put_file and get_file on the loop: a HEAD per directory on the way (as
   s_check_parents does), then the archive itself, streamed by libcurl. */
typedef struct {
    docker_proc_t *p;
    korch_op_t *op;                 /* the launcher's */
    korch_op_t *req;
    bool put;
    char *name;
    size_t pos;                     /* where the next '/' is looked for */
    size_t missing;                 /* put: the first absent prefix, SIZE_MAX none */
    void *data;                     /* put: a copy of the file */
    size_t len, max;
} s_fop_t;

static void s_fop_free(s_fop_t *f)
{
    korch_op_cancel(&f->req);
    free(f->name);
    free(f->data);
    free(f);
}

static void s_fop_cancel(korch_op_t *op, void *arg) { s_fop_free(arg); }

static void s_fop_fail(s_fop_t *f, korch_rc_t rc, const korch_err_t *err)
{
    if (f->put)
        korch_op_finish(f->op, rc, err);
    else
        korch_op_finish_file(f->op, NULL, 0, rc, err);
    s_fop_free(f);
}

static void s_on_put(korch_rc_t rc, const korch_err_t *err, korch_docker_reply_t *r, void *arg)
{
    s_fop_t *f = arg;
    f->req = NULL;
    korch_err_t e = {0};
    if (rc)
        return s_fop_fail(f, rc, err);
    if (r->status != 200)
        korch_err_set(&e, r->status == 404 ? KORCH_E_DIED : KORCH_E_DOCKER,
                      "cannot put '%s' into kernel container %.12s: %s", f->name, f->p->id,
                      korch_docker_reply_message(r));
    korch_op_finish(f->op, e.rc, &e);
    s_fop_free(f);
}

static void s_on_got(korch_rc_t rc, const korch_err_t *err, korch_docker_reply_t *r, void *arg)
{
    s_fop_t *f = arg;
    f->req = NULL;
    korch_err_t e = {0};
    char *data = NULL;
    size_t len = 0;
    if (rc == KORCH_E_TOOBIG)
        korch_err_set(&e, rc, "file '%s' in the kernel's work dir is larger than %zu bytes", f->name, f->max);
    else if (rc)
        korch_err_set(&e, rc, "%s", err ? err->msg : korch_strerror(rc));
    else if (r->status == 404)
        korch_err_set(&e, KORCH_E_NOTFOUND, "no file '%s' in the kernel's work dir", f->name);
    else if (r->status != 200)
        korch_err_set(&e, KORCH_E_DOCKER, "cannot read '%s' from kernel container %.12s: %s", f->name, f->p->id,
                      korch_docker_reply_message(r));
    else
        s_tar_first_file(f->name, (const unsigned char *)r->body, r->body_len, f->max, &data, &len, &e);
    korch_op_finish_file(f->op, data, len, e.rc, &e);
    s_fop_free(f);
}

/* The parents are checked: the transfer. */
static void s_fop_transfer(s_fop_t *f)
{
    docker_proc_t *p = f->p;
    korch_err_t e = {0};
    if (f->put) {
        korch_buf_t b;
        bool ok = s_tar_archive(&b, p, f->name, f->missing, f->data, f->len);
        free(f->data);
        f->data = NULL;
        char *path = ok ? s_archive_path(p, NULL, 0, "&noOverwriteDirNonDir=1") : NULL;
        if (!path) {
            korch_buf_free(&b);
            korch_err_set(&e, KORCH_E_NOMEM, "out of memory");
            return s_fop_fail(f, e.rc, &e);
        }
        korch_docker_async_opts_t o = {.timeout_ms = -1, .take = true}; /* the tar is the request's */
        f->req = korch_docker_request_raw_async(p->l->api, "PUT", path, "application/x-tar", b.p, b.len, &o,
                                                s_on_put, f, &e);
        free(path);
    } else {
        char *path = s_archive_path(p, f->name, strlen(f->name), "");
        /* Room for the headers (a pax one for a long name), padding and the end. */
        size_t slack = 8 * S_TAR_BLOCK;
        korch_docker_async_opts_t o = {.timeout_ms = -1, .max_reply = f->max < SIZE_MAX - slack ? f->max + slack
                                                                                                  : SIZE_MAX - 1};
        if (path)
            f->req = korch_docker_request_async(p->l->api, "GET", path, NULL, &o, s_on_got, f, &e);
        else
            korch_err_set(&e, KORCH_E_NOMEM, "out of memory");
        free(path);
    }
    if (!f->req)
        s_fop_fail(f, e.rc ? e.rc : KORCH_E_DOCKER, &e);
}

static void s_fop_next(s_fop_t *f);

static void s_on_parent(korch_rc_t rc, const korch_err_t *err, korch_docker_reply_t *r, void *arg)
{
    s_fop_t *f = arg;
    f->req = NULL;
    korch_err_t e = {0};
    const char *name = f->name;
    size_t n = f->pos;
    if (rc)
        return s_fop_fail(f, rc, err);
    json_t *m = json_object_get(r->path_stat, "mode");
    if (r->status == 404) {
        if (f->put) {
            f->missing = n;
            return s_fop_transfer(f);
        }
        korch_err_set(&e, KORCH_E_NOTFOUND, "no file '%s' in the kernel's work dir", name);
        return s_fop_fail(f, e.rc, &e);
    }
    if (r->status != 200 || !json_is_integer(m)) {
        korch_err_set(&e, KORCH_E_DOCKER, "cannot look at '%.*s' in kernel container %.12s: HTTP %ld", (int)n, name,
                      f->p->id, r->status);
        return s_fop_fail(f, e.rc, &e);
    }
    unsigned long long mode = (unsigned long long)json_integer_value(m);
    if (mode & S_GO_MODE_SYMLINK)
        korch_err_set(&e, KORCH_E_INVALID, "'%.*s' in the kernel's work dir is a symbolic link: refusing to follow it",
                      (int)n, name);
    else if (!(mode & S_GO_MODE_DIR))
        korch_err_set(&e, KORCH_E_INVALID, "'%.*s' in the kernel's work dir is not a directory", (int)n, name);
    if (e.rc)
        return s_fop_fail(f, e.rc, &e);
    f->pos = n + 1;
    s_fop_next(f);
}

static void s_fop_next(s_fop_t *f)
{
    const char *s = strchr(f->name + f->pos, '/');
    if (!s)
        return s_fop_transfer(f);
    f->pos = (size_t)(s - f->name);
    korch_err_t e = {0};
    char *path = s_archive_path(f->p, f->name, f->pos, "");
    if (path)
        f->req = korch_docker_request_raw_async(f->p->l->api, "HEAD", path, NULL, NULL, 0, NULL, s_on_parent, f, &e);
    else
        korch_err_set(&e, KORCH_E_NOMEM, "out of memory");
    free(path);
    if (!f->req)
        s_fop_fail(f, e.rc ? e.rc : KORCH_E_DOCKER, &e);
}

static korch_rc_t s_fop_start(docker_proc_t *p, bool put, const char *name, const void *data, size_t len,
                              size_t max, korch_op_t *op, korch_err_t *err)
{
    if (put && len > S_TAR_SIZE_MAX)
        return korch_err_set(err, KORCH_E_TOOBIG, "cannot put '%s' into the kernel: larger than %llu bytes", name,
                             S_TAR_SIZE_MAX);
    s_fop_t *f = calloc(1, sizeof *f);
    if (!f)
        return korch_err_set(err, KORCH_E_NOMEM, "out of memory");
    *f = (s_fop_t){.p = p, .op = op, .put = put, .missing = SIZE_MAX, .len = len, .max = max};
    f->name = strdup(name);
    if (put) {
        f->data = malloc(len ? len : 1);
        if (f->data && len)
            memcpy(f->data, data, len);
    }
    if (!f->name || (put && !f->data)) {
        s_fop_free(f);
        return korch_err_set(err, KORCH_E_NOMEM, "out of memory");
    }
    korch_op_on_cancel(op, s_fop_cancel, f);
    s_fop_next(f); /* may fail at once: then the op is finished (done deferred) */
    return KORCH_OK;
}

static korch_rc_t s_put_file(korch_proc_t *proc, const char *name, const void *data, size_t len, korch_op_t *op,
                             korch_err_t *err)
{
    return s_fop_start((docker_proc_t *)proc, true, name, data, len, 0, op, err);
}

static korch_rc_t s_get_file(korch_proc_t *proc, const char *name, size_t max, korch_op_t *op, korch_err_t *err)
{
    return s_fop_start((docker_proc_t *)proc, false, name, NULL, 0, max, op, err);
}

static void s_free(korch_launcher_t *self)
{
    docker_launcher_t *l = (docker_launcher_t *)self;
    korch_docker_destroy(&l->api);
    for (size_t i = 0; i < sizeof l->strs / sizeof l->strs[0]; i++)
        free(l->strs[i]);
    free(l);
}

/* ------------------------------------------------------- adoption lists */

static json_t *s_list_mine(korch_launcher_t *self, korch_err_t *err)
{
    docker_launcher_t *l = (docker_launcher_t *)self;
    const char *mine = l->o.instance ? l->o.instance : "default";
    json_t *all = korch_docker_list(self, mine, err);
    json_t *out = korch_backend_mine(all, "container(s)", mine, l->scope, err);
    json_decref(all);
    return out;
}

/* One container of ours, by id: inspected first (its labels must name this
   instance; a runtime dir is cleaned only where the container really
   bind-mounts it), then removed with its volume. */
static korch_rc_t s_remove_mine(korch_launcher_t *self, const char *id, korch_err_t *err)
{
    docker_launcher_t *l = (docker_launcher_t *)self;
    const char *mine = l->o.instance ? l->o.instance : "default";
    char path[200];
    korch_docker_reply_t r = {0};
    korch_rc_t rc;
    for (const char *c = id; *c; c++)
        if (!strchr("0123456789abcdef", *c) || c - id > 64)
            return korch_err_set(err, KORCH_E_INVALID, "'%.80s' is not a container id", id);
    snprintf(path, sizeof path, "/containers/%s/json", id);
    if ((rc = korch_docker_request(l->api, "GET", path, NULL, &r, err)))
        return rc;
    if (r.status == 404) {
        korch_docker_reply_clear(&r);
        return KORCH_OK; /* gone already */
    }
    json_t *labels = json_object_get(json_object_get(r.json, "Config"), "Labels");
    const char *owner = json_string_value(json_object_get(labels, "korch.instance"));
    const char *rdir = json_string_value(json_object_get(labels, "korch.runtime_dir"));
    if (r.status != 200)
        rc = korch_err_set(err, KORCH_E_DOCKER, "cannot inspect container %.12s: %s", id,
                           korch_docker_reply_message(&r));
    else if (!owner || strcmp(owner, mine) != 0)
        rc = korch_err_set(err, KORCH_E_STATE, "container %.12s belongs to korch instance '%.60s', not '%s'", id,
                           owner ? owner : "", mine);
    else if (!s_ours(l, labels))
        rc = korch_err_set(err, KORCH_E_STATE, "container %.12s is of korch scope '%.40s', not this runtime dir's '%s'",
                           id, s_label(labels, "korch.scope"), l->scope);
    else if (!s_remove(l, id))
        rc = korch_err_set(err, KORCH_E_DOCKER, "cannot remove container %.12s", id);
    else {
        const char *target = s_runtime_target(r.json, rdir);
        /* only a dir directly in our runtime base, which the container mounted */
        if (target && s_rdir_in_base(rdir))
            s_cleanup_runtime(rdir, target);
    }
    korch_docker_reply_clear(&r);
    return rc;
}

static const korch_launcher_ops_t s_ops = {
    .name = "docker",
    .caps = KORCH_LAUNCHER_CONFINED | KORCH_LAUNCHER_ADOPTS,
    .transport = "ipc",
    .start = s_start,
    .signal = s_signal,
    .kill = s_kill,
    .log_tail = s_log_tail,
    .proc_free = s_proc_free,
    .free = s_free,
    .adopt = s_adopt,
    .list_mine = s_list_mine,
    .remove_mine = s_remove_mine,
    .put_file = s_put_file,
    .get_file = s_get_file,
    .put_file_now = s_put_file_now,
    .get_file_now = s_get_file_now,
};


/* Blocking: the engine's /_ping (and korch_launcher_choose's image
   inspect after it). Every caller is a command's set-up, before its loop
   runs (korch_launcher_choose from src/cli); the server never makes a
   launcher while it serves. A handler that tried would hold the loop for
   up to the API timeout: refused. */
korch_launcher_t *korch_launcher_docker_new(korch_loop_t *loop, const korch_docker_opts_t *opts, korch_err_t *err)
{
    if (loop && korch_loop_running(loop)) {
        korch_err_set(err, KORCH_E_STATE, "the docker launcher is made before the loop runs (its constructor "
                                          "blocks on the engine), not from a handler");
        return NULL;
    }
    docker_launcher_t *l = calloc(1, sizeof *l);
    if (!l) {
        korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        return NULL;
    }
    korch_backend_launcher_init(&l->base, &s_ops, loop);
    l->engine_sees = -1;
    if (opts)
        l->o = *opts;
    else
        korch_docker_opts_init(&l->o);
    korch_docker_opts_t d;
    korch_docker_opts_init(&d);
    if (!l->o.workdir_mount)
        l->o.workdir_mount = d.workdir_mount;
    if (!l->o.runtime_mount)
        l->o.runtime_mount = d.runtime_mount;
    const char **fields[] = {&l->o.host,          &l->o.image,         &l->o.instance,
                             &l->o.user,          &l->o.workdir,       &l->o.workdir_mount,
                             &l->o.runtime_mount, &l->o.network,       &l->o.runtime};
    bool ok = true;
    for (size_t i = 0; ok && i < sizeof fields / sizeof fields[0]; i++)
        ok = korch_own_str(&l->strs[i], fields[i]);
    if (!ok) {
        korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        goto fail;
    }
    if (l->o.runtime_mount[0] != '/' || l->o.workdir_mount[0] != '/') {
        korch_err_set(err, KORCH_E_INVALID, "docker mount points must be absolute ('%s', '%s')", l->o.runtime_mount,
                      l->o.workdir_mount);
        goto fail;
    }
    if (l->o.workdir || l->o.workdir_from_cwd)
        l->base.caps |= KORCH_LAUNCHER_HOST_FILES;
    if (korch_runtime_scope(NULL, l->scope, sizeof l->scope, err) != KORCH_OK)
        goto fail;
    l->api = korch_docker_new(loop, l->o.host, err);
    if (!l->api)
        goto fail;
    korch_docker_set_timeout_ms(l->api, l->o.api_timeout_ms);
    if (korch_docker_ping(l->api, err))
        goto fail;
    return &l->base;
fail:
    s_free(&l->base);
    return NULL;
}

bool korch_launcher_is_docker(const korch_launcher_t *l) { return l && l->ops == &s_ops; }

const char *korch_docker_proc_container(korch_proc_t *p)
{
    return p && p->launcher && p->launcher->ops == &s_ops ? ((docker_proc_t *)p)->id : NULL;
}

json_t *korch_docker_list(korch_launcher_t *self, const char *instance, korch_err_t *err)
{
    docker_launcher_t *l = (docker_launcher_t *)self;
    if (!self || self->ops != &s_ops) {
        korch_err_set(err, KORCH_E_INVALID, "not a docker launcher");
        return NULL;
    }
    char label[300];
    snprintf(label, sizeof label, instance ? "korch.instance=%s" : "korch.instance%s", instance ? instance : "");
    json_t *found = s_find_labelled(l, label, err);
    if (!found)
        return NULL;
    json_t *list = json_array();
    size_t i;
    json_t *c;
    json_array_foreach(found, i, c) {
        json_t *labels = json_object_get(c, "Labels");
        json_t *names = json_object_get(c, "Names");
        const char *name = json_string_value(json_array_get(names, 0));
        json_t *item = json_pack("{s:s?, s:s?, s:s?, s:s?, s:s?, s:s?, s:s?, s:s?}", "id",
                                 json_string_value(json_object_get(c, "Id")), "name",
                                 name && name[0] == '/' ? name + 1 : name, "kernel_id",
                                 json_string_value(json_object_get(labels, "korch.kernel_id")), "instance",
                                 json_string_value(json_object_get(labels, "korch.instance")), "kernelspec",
                                 json_string_value(json_object_get(labels, "korch.kernelspec")), "state",
                                 json_string_value(json_object_get(c, "State")), "runtime_dir",
                                 json_string_value(json_object_get(labels, "korch.runtime_dir")), "scope",
                                 json_string_value(json_object_get(labels, "korch.scope")));
        if (!list || json_array_append_new(list, item)) {
            json_decref(list);
            list = NULL;
            korch_err_set(err, KORCH_E_NOMEM, "out of memory");
            break;
        }
    }
    json_decref(found);
    return list;
}

/* What a removed container of a dead korch leaves on the host: its
   connection file, the sockets that file names, and the runtime dir once
   empty. Only names korch made are unlinked; rmdir does the rest or nothing. */
static void s_cleanup_runtime(const char *dir, const char *target)
{
    char cf[PATH_MAX + 16], sock[PATH_MAX + 32];
    korch_conn_t conn;
    korch_err_t e = {0};
    snprintf(cf, sizeof cf, "%s/%s", dir, S_CONN_FILE);
    if (korch_conn_load_nofollow(&conn, cf, &e) == KORCH_OK && strcmp(conn.transport, "ipc") == 0) {
        const char *base = s_ipc_base(conn.ip, target);
        for (int i = 0; base && i < KORCH_CH__COUNT; i++) {
            snprintf(sock, sizeof sock, "%s/%s-%d", dir, base, conn.port[i]);
            unlink(sock);
        }
    }
    unlink(cf);
    if (geteuid() == 0 && s_is_mountpoint(dir) && umount2(dir, MNT_DETACH) != 0)
        korch_debug("cannot unmount runtime dir '%s': %s", dir, strerror(errno));
    if (rmdir(dir) != 0 && errno != ENOENT)
        korch_debug("runtime dir '%s' kept: %s", dir, strerror(errno));
}

int korch_docker_remove_all(korch_launcher_t *self, const char *instance, korch_err_t *err)
{
    docker_launcher_t *l = (docker_launcher_t *)self;
    if (!self || self->ops != &s_ops) {
        korch_err_set(err, KORCH_E_INVALID, "not a docker launcher");
        return -1;
    }
    char label[300];
    snprintf(label, sizeof label, instance ? "korch.instance=%s" : "korch.instance%s", instance ? instance : "");
    json_t *list = s_find_labelled(l, label, err);
    if (!list)
        return -1;
    int n = 0;
    size_t i;
    json_t *c;
    json_array_foreach(list, i, c) {
        const char *id = json_string_value(json_object_get(c, "Id"));
        const char *rdir = json_string_value(json_object_get(json_object_get(c, "Labels"), "korch.runtime_dir"));
        const char *target = s_runtime_target(c, rdir);
        if (!id || !s_ours(l, json_object_get(c, "Labels")))
            continue; /* another lock domain's, or an older korch's: never removed from here */
        if (!s_remove(l, id))
            continue;
        n++;
        if (target)
            s_cleanup_runtime(rdir, target);
    }
    json_decref(list);
    return n;
}
