/*  The local launcher: the kernelspec's argv as a child process in its own
 *  process group (so SIGINT reaches the kernel and only the kernel), its
 *  stdout/stderr in runtime_dir/kernel.log, and a pidfd that becomes
 *  readable when it exits.
 */
#include "korch/launcher.h"
#include "korch/log.h"
#include "korch/env.h"
#include "korch/fsutil.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct {
    korch_proc_t base;
    pid_t pid;
    int pidfd;              /* -1 when the kernel has no pidfd support */
    bool reaped;
    int status;             /* waitpid status once reaped */
    char log_path[PATH_MAX];
    char workdir[PATH_MAX];     /* the kernel's cwd: where put_file/get_file work */
    char tail[4096];
} local_proc_t;

/* ipc in the private runtime dir: no port can be raced for (ipykernel would
   silently bind another port and rewrite the file) and no other local user
   can reach the sockets. */
static const char *s_transport(korch_launcher_t *self) { return "ipc"; }

/* argv with {connection_file} and {resource_dir} replaced; new strings. */
static char **s_expand_argv(const korch_kernelspec_t *spec, const char *conn_file)
{
    size_t n = 0;
    while (spec->argv[n])
        n++;
    char **argv = calloc(n + 1, sizeof *argv);
    if (!argv)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        const char *a = spec->argv[i];
        if (strcmp(a, "{connection_file}") == 0)
            a = conn_file;
        else if (strcmp(a, "{resource_dir}") == 0)
            a = spec->dir;
        argv[i] = strdup(a);
        if (!argv[i]) {
            for (size_t j = 0; j < i; j++)
                free(argv[j]);
            free(argv);
            return NULL;
        }
    }
    return argv;
}

static void s_free_strv(char **v)
{
    if (v)
        for (char **p = v; *p; p++)
            free(*p);
    free(v);
}

/* The allow-listed part of korch's environment, never its secrets (env.h). */
static char **s_build_env(const korch_launch_t *req)
{
    /* ipykernel exits when this process goes away (ParentPollerUnix). */
    char ppid[64];
    snprintf(ppid, sizeof ppid, "JPY_PARENT_PID=%d", (int)getpid());
    const char *const extra[] = {ppid, NULL};
    return korch_env_build(req, true, extra);
}

static korch_rc_t s_start(korch_launcher_t *self, const korch_launch_t *req, korch_proc_t **out, korch_err_t *err)
{
    korch_rc_t rc = KORCH_OK;
    char conn_file[PATH_MAX];
    snprintf(conn_file, sizeof conn_file, "%s/kernel.json", req->runtime_dir);
    char **argv = NULL, **env = NULL;
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    bool fa_ok = false, attr_ok = false;
    local_proc_t *p = calloc(1, sizeof *p);
    if (!p)
        return korch_err_set(err, KORCH_E_NOMEM, "out of memory");
    p->pidfd = -1;
    rc = korch_conn_save(req->conn, conn_file, err);
    if (rc)
        goto out;
    argv = s_expand_argv(req->spec, conn_file);
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
    fa_ok = posix_spawn_file_actions_init(&fa) == 0;
    attr_ok = posix_spawnattr_init(&attr) == 0;
    if (!fa_ok || !attr_ok) {
        rc = korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        goto out;
    }
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    /* O_NONBLOCK: a FIFO planted there fails the start instead of hanging it */
    posix_spawn_file_actions_addopen(&fa, 1, p->log_path, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_NONBLOCK,
                                     0600);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    if (req->cwd)
        posix_spawn_file_actions_addchdir_np(&fa, req->cwd);
    sigset_t none, defaults;
    sigemptyset(&none);
    sigemptyset(&defaults);
    sigaddset(&defaults, SIGINT);
    sigaddset(&defaults, SIGTERM);
    sigaddset(&defaults, SIGPIPE);
    sigaddset(&defaults, SIGCHLD);
    sigaddset(&defaults, SIGHUP);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    posix_spawnattr_setpgroup(&attr, 0);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
                                        POSIX_SPAWN_USEVFORK);
    int e = posix_spawnp(&p->pid, argv[0], &fa, &attr, argv, env);
    if (e == ENXIO || e == ELOOP) /* the log's open failed, not the exec */
        rc = korch_err_set(err, KORCH_E_LAUNCH, "cannot start kernel '%s': its log '%s' is not a regular file (%s)",
                           req->spec->name, p->log_path, strerror(e));
    else if (e != 0)
        rc = korch_err_set(err, KORCH_E_LAUNCH, "cannot start kernel '%s': '%s': %s%s", req->spec->name, argv[0],
                           strerror(e),
                           e == ENOENT ? " (is the kernel installed? check the kernelspec's argv)" : "");
    if (e != 0) {
        goto out;
    }
    p->pidfd = (int)syscall(SYS_pidfd_open, p->pid, 0);
    if (p->pidfd < 0)
        korch_debug("pidfd_open: %s; polling the kernel's liveness instead", strerror(errno));
    korch_debug("started kernel '%s' pid %d", req->spec->name, (int)p->pid);
out:
    if (fa_ok)
        posix_spawn_file_actions_destroy(&fa);
    if (attr_ok)
        posix_spawnattr_destroy(&attr);
    s_free_strv(argv);
    korch_env_free(env);
    if (rc) {
        free(p);
        return rc;
    }
    *out = &p->base;
    return KORCH_OK;
}

static int s_exit_fd(korch_proc_t *proc) { return ((local_proc_t *)proc)->pidfd; }

static void s_describe(int status, char *why, size_t whylen)
{
    if (WIFEXITED(status))
        snprintf(why, whylen, "exited %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(why, whylen, "killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
    else
        snprintf(why, whylen, "ended (status %d)", status);
}

static bool s_is_alive(korch_proc_t *proc, char *why, size_t whylen)
{
    local_proc_t *p = (local_proc_t *)proc;
    if (!p->reaped) {
        pid_t r = waitpid(p->pid, &p->status, WNOHANG);
        if (r == 0)
            return true;
        p->reaped = true;
        if (r < 0)
            p->status = 0;
    }
    if (why)
        s_describe(p->status, why, whylen);
    return false;
}

static korch_rc_t s_signal(korch_proc_t *proc, int sig, korch_err_t *err)
{
    local_proc_t *p = (local_proc_t *)proc;
    if (p->reaped)
        return korch_err_set(err, KORCH_E_DIED, "kernel process %d is gone", (int)p->pid);
    /* The whole group: the kernel and whatever it started, as jupyter_client does. */
    if (kill(-p->pid, sig) != 0 && kill(p->pid, sig) != 0)
        return korch_err_set(err, KORCH_E_IO, "cannot signal kernel process %d: %s", (int)p->pid, strerror(errno));
    return KORCH_OK;
}

static void s_kill(korch_proc_t *proc)
{
    local_proc_t *p = (local_proc_t *)proc;
    if (p->reaped)
        return;
    kill(-p->pid, SIGKILL);
    kill(p->pid, SIGKILL);
    while (waitpid(p->pid, &p->status, 0) < 0 && errno == EINTR)
        ;
    p->reaped = true;
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

static void s_proc_free(korch_proc_t *proc)
{
    local_proc_t *p = (local_proc_t *)proc;
    s_kill(proc);
    if (p->pidfd >= 0)
        close(p->pidfd);
    free(p);
}

static void s_free(korch_launcher_t *self) { free(self); }

/* The work dir is the kernel's: every component of name is opened without
   following a symlink (fsutil.h). */
static korch_rc_t s_put_file(korch_proc_t *proc, const char *name, const void *data, size_t len, korch_err_t *err)
{
    local_proc_t *p = (local_proc_t *)proc;
    korch_fs_opts_t o = {.mode = 0644};
    return korch_fs_write_rel(p->workdir[0] ? p->workdir : ".", name, data, len, true, &o, err);
}

static korch_rc_t s_get_file(korch_proc_t *proc, const char *name, size_t max, char **data, size_t *len,
                             korch_err_t *err)
{
    local_proc_t *p = (local_proc_t *)proc;
    *data = korch_fs_read_rel(p->workdir[0] ? p->workdir : ".", name, max, len, err);
    return *data ? KORCH_OK : err ? err->rc : KORCH_E_IO;
}

static const korch_launcher_ops_t s_ops = {
    .name = "local",
    .transport = s_transport,
    .start = s_start,
    .exit_fd = s_exit_fd,
    .is_alive = s_is_alive,
    .signal = s_signal,
    .kill = s_kill,
    .log_tail = s_log_tail,
    .proc_free = s_proc_free,
    .free = s_free,
    .put_file = s_put_file,
    .get_file = s_get_file,
};

korch_launcher_t *korch_launcher_local_new(void)
{
    korch_launcher_t *self = calloc(1, sizeof *self);
    if (self)
        self->ops = &s_ops;
    return self;
}
