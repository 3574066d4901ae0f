/*  The docker launcher's parts (src/launcher/docker/): private to them.
 *
 *  One launcher (docker_launcher_t) and its procs (docker_proc_t) share one
 *  Engine API client: everything here runs on the launcher's loop thread,
 *  except the host work marked "worker" (korch_backend_host), which touches
 *  only what the loop leaves alone until it is back.
 */
#ifndef KORCH_LAUNCHER_DOCKER_INT_H
#define KORCH_LAUNCHER_DOCKER_INT_H

#include "korch/docker.h"
#include "korch/buf.h"
#include "korch/docker_api.h"
#include "korch/env.h"
#include "korch/fsutil.h"
#include "korch/fssync.h"
#include "korch/instance.h"
#include "korch/log.h"
#include "korch/path.h"
#include "../backend.h"
#include "../spawn.h"
#include "../kuid.h"

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#define DK_GIB (1024LL * 1024 * 1024)
#define DK_MIB (1024LL * 1024)
#define DK_CONN_FILE "kernel.json"
#define DK_TAIL_MAX 4096

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
    korch_fs_manifest_t *work_known; /* the files of work_under korch copied into the tmpfs: the
                                        ones whose deletion by the kernel goes home (hostdirs.c) */
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
    korch_kuid_t *kuid;             /* its claim on a uid no account has (kuid.h), released once the container is gone */
    char workdir[PATH_MAX];         /* the kernel's cwd inside the container */
    char tail[DK_TAIL_MAX + 1];
} docker_proc_t;

/* create.c: the container's description. */
bool dk_valid_name(const char *s);
/* POST /containers/create's body (new), NULL on no memory. */
json_t *dk_create_body(docker_launcher_t *l, const korch_launch_t *req, const char *image, const char *user,
                       uid_t uid, gid_t gid, const char *workdir, const char *conn_in);

/* start.c */
korch_rc_t dk_start(korch_launcher_t *self, const korch_launch_t *req, korch_op_t *op, korch_err_t *err);

/* hostdirs.c: the host side (worker). 0 or -1 with errno. */
int dk_give_dir(const char *dir, uid_t uid, gid_t gid, struct stat *before);
bool dk_is_mountpoint(const char *dir);
int dk_mount_tmpfs(const char *dir, int64_t size, uid_t uid, gid_t gid, unsigned mode, bool noexec);
void dk_warn_not_root(void);
korch_rc_t dk_bound_workdir(docker_proc_t *p, const char *dir, int64_t size, korch_err_t *err);
void dk_unbound_workdir(docker_proc_t *p);
void dk_unbound_runtime(docker_proc_t *p);
korch_rc_t dk_unbound_unseen(docker_proc_t *p, const korch_conn_t *conn, uid_t uid, gid_t gid, korch_err_t *err);
/* What korch made on the host for the kernel, given back or removed. */
void dk_local_cleanup(docker_proc_t *p);
/* dk_local_cleanup on the worker, then p is freed. */
void dk_cleanup_later(docker_proc_t *p);
/* Is dir directly inside our runtime base (what korch made for a kernel)? */
bool dk_rdir_in_base(const char *dir);
/* What a removed container of a dead korch leaves in runtime dir dir
   (mounted at target inside): its connection file, sockets, the dir. */
void dk_cleanup_runtime(const char *dir, const char *target);
/* The in-container ipc prefix "{target}/{base}": base, or NULL when the
   prefix is not directly inside target. */
const char *dk_ipc_base(const char *ip, const char *target);

/* end.c: the end, signals, removal. */
void dk_watch(docker_proc_t *p);
korch_rc_t dk_signal(korch_proc_t *proc, int sig, korch_op_t *op, korch_err_t *err);
korch_rc_t dk_kill(korch_proc_t *proc, korch_op_t *op, korch_err_t *err);
const char *dk_log_tail(korch_proc_t *proc);
void dk_proc_free(korch_proc_t *proc);
/* Remove a container and its anonymous volumes, blocking; true when gone. */
bool dk_remove(docker_launcher_t *l, const char *id);
/* The same in the background (a job of the launcher). */
void dk_remove_later(docker_launcher_t *l, const char *id);

/* list.c: containers by label (blocking: start-up only). */
const char *dk_label(json_t *labels, const char *key);
bool dk_ours(const docker_launcher_t *l, json_t *labels);
char *dk_labelled_path(docker_launcher_t *l, const char *label);
json_t *dk_find_labelled(docker_launcher_t *l, const char *label, korch_err_t *err);
const char *dk_runtime_target(json_t *c, const char *runtime_dir);
/* korch_launcher_list / korch_launcher_remove_all (launcher.h): containers
   labelled korch.instance=instance (NULL = every korch container) as
   {"id", "name", "kernel_id", "instance", "kernelspec", "state",
   "runtime_dir", "scope"}; removal with the work dir volume and the
   connection file, sockets and (then empty) runtime dir they bind-mount. */
json_t *dk_list(korch_launcher_t *self, const char *instance, korch_err_t *err);
int dk_remove_all(korch_launcher_t *self, const char *instance, korch_err_t *err);
/* The container id (korch_proc_backend_id). */
const char *dk_proc_id(korch_proc_t *p);
json_t *dk_list_mine(korch_launcher_t *self, korch_err_t *err);
korch_rc_t dk_remove_mine(korch_launcher_t *self, const char *id, korch_err_t *err);

/* adopt.c */
korch_rc_t dk_adopt(korch_launcher_t *self, const char *kernel_id, korch_op_t *op, korch_err_t *err);

/* files.c: through the engine (../ctfiles.h) */
korch_rc_t dk_put_file(korch_proc_t *proc, const char *name, const void *data, size_t len, korch_op_t *op,
                       korch_err_t *err);
korch_rc_t dk_get_file(korch_proc_t *proc, const char *name, size_t max, korch_op_t *op, korch_err_t *err);
korch_rc_t dk_put_file_now(korch_proc_t *proc, const char *name, const void *data, size_t len, korch_err_t *err);
korch_rc_t dk_get_file_now(korch_proc_t *proc, const char *name, size_t max, char **data, size_t *len,
                           korch_err_t *err);

#endif
