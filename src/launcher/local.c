/*  The local launcher: the kernelspec's argv as a child process in its own
 *  process group (so SIGINT reaches the kernel and only the kernel), its
 *  stdout/stderr in runtime_dir/kernel.log, and a pidfd that becomes
 *  readable when it exits.
 */
#include "backend.h"
#include "korch/log.h"
#include "korch/env.h"
#include "korch/fsutil.h"
#include "spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct {
    korch_proc_t base;
    korch_child_t child;    /* the kernel process */
    char log_path[PATH_MAX];
    char workdir[PATH_MAX];     /* the kernel's cwd: where put_file/get_file work */
    char tail[4096];
} local_proc_t;

/* ipc in the private runtime dir: no port can be raced for (ipykernel would
   silently bind another port and rewrite the file) and no other local user
   can reach the sockets. */
/* The allow-listed part of korch's environment, never its secrets (env.h). */
static char **s_build_env(const korch_launch_t *req)
{
    /* ipykernel exits when this process goes away (ParentPollerUnix). */
    char ppid[64];
    snprintf(ppid, sizeof ppid, "JPY_PARENT_PID=%d", (int)getpid());
    const char *const extra[] = {ppid, NULL};
    return korch_env_build(req, true, extra);
}

/* The kernel process has been reaped (korch_child_t). */
static void s_ended(void *arg)
{
    local_proc_t *p = arg;
    char why[256];
    korch_spawn_describe(p->child.status, why, sizeof why);
    korch_backend_exited(&p->base, why);
}

static void s_watch(korch_proc_t *proc)
{
    local_proc_t *p = (local_proc_t *)proc;
    korch_child_watch(&p->child, proc->launcher->loop, s_ended, p);
}

static void s_proc_free(korch_proc_t *proc);

static korch_rc_t s_start(korch_launcher_t *self, const korch_launch_t *req, korch_op_t *op, korch_err_t *err)
{
    korch_rc_t rc = KORCH_OK;
    char conn_file[PATH_MAX], what[300];
    snprintf(conn_file, sizeof conn_file, "%s/kernel.json", req->runtime_dir);
    char **argv = NULL, **env = NULL;
    int log_fd = -1;
    local_proc_t *p = korch_backend_proc_new(self, sizeof *p, req);
    if (!p)
        return korch_err_set(err, KORCH_E_NOMEM, "out of memory");
    korch_child_init(&p->child);
    rc = korch_conn_save(req->conn, conn_file, err);
    if (rc)
        goto out;
    argv = korch_spawn_argv(NULL, req->spec, conn_file);
    env = s_build_env(req);
    if (!argv || !env) {
        rc = korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        goto out;
    }
    snprintf(p->log_path, sizeof p->log_path, "%s/kernel.log", req->runtime_dir);
    if (req->cwd)
        snprintf(p->workdir, sizeof p->workdir, "%s", req->cwd);
    else if (!getcwd(p->workdir, sizeof p->workdir))
        p->workdir[0] = 0;
    /* The kernel can write the runtime dir: never a link, never block on a
       FIFO planted as its log, only a regular file. */
    log_fd = open(p->log_path, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);
    struct stat lst;
    if (log_fd >= 0 && (fstat(log_fd, &lst) != 0 || !S_ISREG(lst.st_mode))) {
        close(log_fd);
        log_fd = -1;
        errno = EINVAL;
    }
    if (log_fd < 0) {
        rc = korch_err_set(err, KORCH_E_LAUNCH, "cannot start kernel '%s': its log '%s' is not a regular file (%s)",
                           req->spec->name, p->log_path, strerror(errno));
        goto out;
    }
    snprintf(what, sizeof what, "kernel '%s'", req->spec->name);
    korch_spawn_t sp = {.what = what, .argv = argv, .envp = env, .cwd = req->cwd, .out_fd = log_fd};
    /* the op finishes once the child has exec'd (spawn.h), from the loop */
    rc = korch_spawn_start(&p->base, op, &sp, &p->child.pid, &p->child.pidfd, s_watch, err);
    if (!rc)
        korch_debug("started kernel '%s' pid %d", req->spec->name, (int)p->child.pid);
out:
    if (log_fd >= 0)
        close(log_fd);
    korch_spawn_strv_free(argv);
    korch_env_free(env);
    if (rc && p->child.pid > 0)
        s_proc_free(&p->base);
    else if (rc)
        free(p);
    return rc;
}

static korch_rc_t s_signal(korch_proc_t *proc, int sig, korch_op_t *op, korch_err_t *err)
{
    local_proc_t *p = (local_proc_t *)proc;
    pid_t pid = p->child.pid;
    if (p->child.reaped)
        return korch_err_set(err, KORCH_E_DIED, "kernel process %d is gone", (int)pid);
    /* The whole group: the kernel and whatever it started, as jupyter_client does. */
    if (kill(-pid, sig) != 0 && kill(pid, sig) != 0)
        return korch_err_set(err, KORCH_E_IO, "cannot signal kernel process %d: %s", (int)pid, strerror(errno));
    korch_op_finish(op, KORCH_OK, NULL);
    return KORCH_OK;
}

/* The end is seen by the pidfd poller (or the poll timer). */
static korch_rc_t s_kill(korch_proc_t *proc, korch_op_t *op, korch_err_t *err)
{
    local_proc_t *p = (local_proc_t *)proc;
    if (!p->child.reaped) {
        kill(-p->child.pid, SIGKILL);
        kill(p->child.pid, SIGKILL);
    }
    return KORCH_OK;
}

static const char *s_log_tail(korch_proc_t *proc)
{
    local_proc_t *p = (local_proc_t *)proc;
    p->tail[0] = 0;
    /* The kernel could have put anything there: never block, never follow. */
    int fd = open(p->log_path, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (fd < 0)
        return p->tail;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return p->tail;
    }
    off_t end = lseek(fd, 0, SEEK_END);
    off_t start = end > (off_t)sizeof p->tail - 1 ? end - (off_t)sizeof p->tail + 1 : 0;
    ssize_t n = pread(fd, p->tail, sizeof p->tail - 1, start);
    close(fd);
    p->tail[n > 0 ? n : 0] = 0;
    return p->tail;
}

/* A killed kernel's zombie, reaped in the background. */
static bool s_zombie_step(void *arg)
{
    local_proc_t *p = arg;
    if (!korch_child_reap(&p->child, false))
        return false;
    free(p);
    return true;
}

static void s_zombie_finish(void *arg)
{
    local_proc_t *p = arg;
    korch_child_reap(&p->child, true);
    free(p);
}

static void s_proc_free(korch_proc_t *proc)
{
    local_proc_t *p = (local_proc_t *)proc;
    korch_child_close(&p->child);
    s_kill(proc, NULL, NULL);
    if (!s_zombie_step(p))
        korch_backend_job(proc->launcher, 20, s_zombie_step, s_zombie_finish, p);
}

static void s_free(korch_launcher_t *self) { free(self); }

/* The work dir is the kernel's: every component of name is opened without
   following a symlink (fsutil.h). */
static korch_rc_t s_put_file_now(korch_proc_t *proc, const char *name, const void *data, size_t len,
                                 korch_err_t *err)
{
    local_proc_t *p = (local_proc_t *)proc;
    korch_fs_opts_t o = {.mode = 0644};
    return korch_fs_write_rel(p->workdir[0] ? p->workdir : ".", name, data, len, true, &o, err);
}

static korch_rc_t s_get_file_now(korch_proc_t *proc, const char *name, size_t max, char **data, size_t *len,
                                 korch_err_t *err)
{
    local_proc_t *p = (local_proc_t *)proc;
    *data = korch_fs_read_rel(p->workdir[0] ? p->workdir : ".", name, max, len, err);
    return *data ? KORCH_OK : err && err->rc ? err->rc : KORCH_E_IO;
}

static const korch_launcher_ops_t s_ops = {
    .name = "local",
    .caps = KORCH_LAUNCHER_HOST_FILES | KORCH_LAUNCHER_PACKAGES,
    .transport = "ipc",
    .start = s_start,
    .signal = s_signal,
    .kill = s_kill,
    .log_tail = s_log_tail,
    .proc_free = s_proc_free,
    .free = s_free,
    .put_file_now = s_put_file_now,
    .get_file_now = s_get_file_now,
};

korch_launcher_t *korch_launcher_local_new(korch_loop_t *loop, korch_err_t *err)
{
    korch_launcher_t *self = calloc(1, sizeof *self);
    if (!self) {
        korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        return NULL;
    }
    korch_backend_launcher_init(self, &s_ops, loop);
    return self;
}
