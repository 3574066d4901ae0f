/*  fork/exec for the launcher backends; see spawn.h. */
#include "spawn.h"
#include "backend.h"
#include "korch/fsutil.h"
#include "korch/log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* What the child was doing when it failed, sent with errno over the pipe. */
enum { S_CGROUP = 1, S_MOUNT, S_SESSION, S_FDS, S_CHDIR, S_IDS, S_EXEC };

typedef struct {
    int stage;
    int err;
} s_report_t;

static const char *s_stage_name(int stage)
{
    switch (stage) {
    case S_CGROUP: return "cannot join its cgroup";
    case S_MOUNT: return "cannot make its private mounts at";
    case S_SESSION: return "cannot leave korch's session";
    case S_FDS: return "cannot set up its files";
    case S_CHDIR: return "cannot enter its working directory";
    case S_IDS: return "cannot drop to its user";
    default: return "cannot execute";
    }
}

/* argv[0] as a path: itself when it has a '/', else the first executable
   of that name on korch's PATH (what posix_spawnp and execvp do). */
static bool s_resolve(const char *name, char *buf, size_t len)
{
    if (strchr(name, '/')) {
        snprintf(buf, len, "%s", name);
        return true;
    }
    const char *path = getenv("PATH");
    if (!path || !*path)
        path = "/usr/local/bin:/usr/bin:/bin";
    while (*path) {
        size_t n = strcspn(path, ":");
        int w = snprintf(buf, len, "%.*s%s%s", (int)n, path, n ? "/" : "", name);
        if (w > 0 && (size_t)w < len && access(buf, X_OK) == 0)
            return true;
        path += n;
        if (*path == ':')
            path++;
    }
    return false;
}

/* Decimal text of v into buf (at least 24 bytes); returns the length.
   snprintf is not async-signal-safe. */
static size_t s_utoa(unsigned long v, char *buf)
{
    char tmp[24];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (size_t i = 0; i < n; i++)
        buf[i] = tmp[n - 1 - i];
    return n;
}

static void s_fail(int fd, int stage)
{
    s_report_t r = {stage, errno};
    ssize_t w = write(fd, &r, sizeof r);
    (void)w;
    _exit(127);
}

/* "{at}/{i}" into buf (PATH_MAX), without snprintf. */
static void s_bind_path(const char *at, int i, char *buf)
{
    size_t n = strlen(at);
    memcpy(buf, at, n);
    buf[n++] = '/';
    n += s_utoa((unsigned long)i, buf + n);
    buf[n] = 0;
}

/* The child's own mount namespace, nothing propagated back to the host's:
   a tmpfs at bind_at and the dirs of bind_fds attached in it. The trees are
   cloned (open_tree) before the namespace is made: a mount of another
   namespace cannot be bound by path, a detached clone can be attached. */
static int s_bind(const korch_spawn_t *s)
{
    char path[PATH_MAX];
    int trees[8], n = 0;
    if (strlen(s->bind_at) > PATH_MAX - 32)
        return -1;
    for (; s->bind_fds[n] >= 0; n++)
        if (n >= 8 || (trees[n] = (int)syscall(SYS_open_tree, s->bind_fds[n], "",
                                                OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH | AT_RECURSIVE)) < 0)
            return -1;
    if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
        mount("tmpfs", s->bind_at, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0755,size=64k") != 0)
        return -1;
    for (int i = 0; i < n; i++) {
        s_bind_path(s->bind_at, i, path);
        if (mkdir(path, 0755) != 0 ||
            syscall(SYS_move_mount, trees[i], "", AT_FDCWD, path, MOVE_MOUNT_F_EMPTY_PATH) != 0)
            return -1;
        close(trees[i]);
    }
    return 0;
}

/* Between fork and exec: async-signal-safe calls only. */
static void s_child(const korch_spawn_t *s, const char *path, int devnull, int report)
{
    char pid[24];
    size_t plen = s_utoa((unsigned long)getpid(), pid);
    for (const int *fd = s->cgroup_fds; fd && *fd >= 0; fd++)
        if (write(*fd, pid, plen) != (ssize_t)plen)
            s_fail(report, S_CGROUP);
    if (s->bind_fds && s->bind_fds[0] >= 0 && s_bind(s) != 0)
        s_fail(report, S_MOUNT);
    if ((s->new_session ? setsid() : setpgid(0, 0)) < 0)
        s_fail(report, S_SESSION);
    if (dup2(devnull, 0) < 0 || dup2(s->out_fd, 1) < 0 || dup2(s->out_fd, 2) < 0)
        s_fail(report, S_FDS);
    for (const int *fd = s->keep_fds; fd && *fd >= 0; fd++)
        if (fcntl(*fd, F_SETFD, 0) < 0)
            s_fail(report, S_FDS);
    if (s->cwd && chdir(s->cwd) != 0)
        s_fail(report, S_CHDIR);
    /* Raw syscalls: glibc's wrappers would signal korch's other threads,
       which do not exist in this child. Groups first, the uid last. */
    if (s->set_ids && (syscall(SYS_setgroups, 0, NULL) != 0 || syscall(SYS_setresgid, s->gid, s->gid, s->gid) != 0 ||
                       syscall(SYS_setresuid, s->uid, s->uid, s->uid) != 0))
        s_fail(report, S_IDS);
    /* Handlers go with exec, ignored signals would stay: default them all. */
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; sig++)
        if (sig != SIGKILL && sig != SIGSTOP)
            sigaction(sig, &dfl, NULL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    execve(path, s->argv, s->envp);
    s_fail(report, S_EXEC);
}

/* The words for a child's report: what it was doing, on what, and why. */
static korch_rc_t s_report_err(const s_report_t *r, const char *what, const char *path, const char *cwd,
                               const char *bind_at, korch_err_t *err)
{
    return korch_err_set(err, KORCH_E_LAUNCH, "cannot start %s: %s '%s': %s%s", what, s_stage_name(r->stage),
                         r->stage == S_CHDIR ? cwd : r->stage == S_MOUNT ? bind_at : path, strerror(r->err),
                         r->stage == S_EXEC && r->err == ENOENT ? " (is it installed? check the kernelspec's argv)" : "");
}

/* Fork the child; *report is the read end of the pipe its failure comes
   on (EOF alone: it exec'd). path is argv[0] resolved (PATH_MAX). */
static korch_rc_t s_fork(const korch_spawn_t *s, char *path, pid_t *out_pid, int *out_pidfd, int *report,
                         korch_err_t *err)
{
    int pipefd[2] = {-1, -1}, devnull = -1;
    korch_rc_t rc = KORCH_OK;
    *out_pid = -1;
    *out_pidfd = -1;
    *report = -1;
    if (!s_resolve(s->argv[0], path, PATH_MAX))
        return korch_err_set(err, KORCH_E_LAUNCH, "cannot start %s: '%s' is not on the PATH", s->what, s->argv[0]);
    /* a program that is not there fails now rather than in the child (its
       words as the child's report would give them) */
    if (access(path, X_OK) != 0) {
        s_report_t r = {S_EXEC, errno};
        return s_report_err(&r, s->what, path, s->cwd, s->bind_at, err);
    }
    devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (devnull < 0 || pipe2(pipefd, O_CLOEXEC) != 0) {
        rc = korch_err_set(err, KORCH_E_LAUNCH, "cannot start %s: %s", s->what, strerror(errno));
        goto out;
    }
    /* No handler of korch's may run in the child before it defaults them. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pid_t pid = fork();
    if (pid == 0) {
        close(pipefd[0]);
        s_child(s, path, devnull, pipefd[1]);
    }
    int fork_errno = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (pid < 0) {
        rc = korch_err_set(err, KORCH_E_LAUNCH, "cannot start %s: fork: %s", s->what, strerror(fork_errno));
        goto out;
    }
    *out_pid = pid;
    *out_pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (*out_pidfd < 0)
        korch_debug("pidfd_open: %s; polling the kernel's liveness instead", strerror(errno));
    *report = pipefd[0];
    pipefd[0] = -1;
out:
    if (devnull >= 0)
        close(devnull);
    if (pipefd[0] >= 0)
        close(pipefd[0]);
    if (pipefd[1] >= 0)
        close(pipefd[1]);
    return rc;
}

korch_rc_t korch_spawn(const korch_spawn_t *s, pid_t *out_pid, int *out_pidfd, korch_err_t *err)
{
    char path[PATH_MAX];
    int report;
    korch_rc_t rc = s_fork(s, path, out_pid, out_pidfd, &report, err);
    if (rc)
        return rc;
    s_report_t r;
    ssize_t n;
    while ((n = read(report, &r, sizeof r)) < 0 && errno == EINTR)
        ;
    close(report);
    if (n == (ssize_t)sizeof r) {
        while (waitpid(*out_pid, NULL, 0) < 0 && errno == EINTR)
            ;
        if (*out_pidfd >= 0)
            close(*out_pidfd);
        *out_pid = -1;
        *out_pidfd = -1;
        return s_report_err(&r, s->what, path, s->cwd, s->bind_at, err);
    }
    return KORCH_OK;
}

/* ------------------------------------------------------------ async */

typedef struct {
    korch_proc_t *proc;
    korch_op_t *op;
    void (*watch)(korch_proc_t *proc);
    int fd;                     /* the report pipe, on the loop */
    s_report_t r;
    size_t got;
    char what[300];
    char path[PATH_MAX];
    char cwd[PATH_MAX];
    char bind_at[64];
} s_pending_t;

static void s_pending_end(s_pending_t *w)
{
    korch_loop_poller_end(w->proc->launcher->loop, w->fd);
    close(w->fd);
    free(w);
}

static int s_on_report(korch_loop_t *loop, int fd, void *arg)
{
    s_pending_t *w = arg;
    ssize_t n = read(fd, (char *)&w->r + w->got, sizeof w->r - w->got);
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
        return 0;
    if (n > 0) {
        w->got += (size_t)n;
        if (w->got < sizeof w->r)
            return 0;
    }
    korch_proc_t *proc = w->proc;
    korch_op_t *op = w->op;
    if (w->got == 0) { /* EOF alone: the exec happened */
        void (*watch)(korch_proc_t *) = w->watch;
        s_pending_end(w);
        if (watch)
            watch(proc);
        korch_op_finish_proc(op, proc, KORCH_OK, NULL);
        return 0;
    }
    korch_err_t e = {0};
    if (w->got == sizeof w->r)
        s_report_err(&w->r, w->what, w->path, w->cwd, w->bind_at, &e);
    else
        korch_err_set(&e, KORCH_E_LAUNCH, "cannot start %s: %s", w->what,
                      n < 0 ? strerror(errno) : "it ended before it could say why");
    s_pending_end(w);
    proc->launcher->ops->proc_free(proc); /* reaps the child in the background */
    korch_op_finish_proc(op, NULL, e.rc, &e);
    return 0;
}

static void s_pending_cancel(korch_op_t *op, void *arg)
{
    s_pending_t *w = arg;
    korch_proc_t *proc = w->proc;
    s_pending_end(w);
    proc->launcher->ops->proc_free(proc);
}

korch_rc_t korch_spawn_start(korch_proc_t *proc, korch_op_t *op, const korch_spawn_t *s, pid_t *pid, int *pidfd,
                             void (*watch)(korch_proc_t *proc), korch_err_t *err)
{
    s_pending_t *w = calloc(1, sizeof *w);
    if (!w)
        return korch_err_set(err, KORCH_E_NOMEM, "out of memory");
    *w = (s_pending_t){.proc = proc, .op = op, .watch = watch, .fd = -1};
    snprintf(w->what, sizeof w->what, "%s", s->what);
    snprintf(w->cwd, sizeof w->cwd, "%s", s->cwd ? s->cwd : "");
    snprintf(w->bind_at, sizeof w->bind_at, "%s", s->bind_at ? s->bind_at : "");
    korch_rc_t rc = s_fork(s, w->path, pid, pidfd, &w->fd, err);
    if (!rc && korch_loop_poller(proc->launcher->loop, w->fd, s_on_report, w) != 0) {
        /* cannot wait on the loop: wait here, as korch_spawn does */
        s_report_t r;
        ssize_t n;
        while ((n = read(w->fd, &r, sizeof r)) < 0 && errno == EINTR)
            ;
        close(w->fd);
        if (n == (ssize_t)sizeof r)
            rc = s_report_err(&r, w->what, w->path, w->cwd, w->bind_at, err);
        free(w);
        if (!rc) {
            if (watch)
                watch(proc);
            korch_op_finish_proc(op, proc, KORCH_OK, NULL);
        }
        return rc; /* on failure the caller frees proc, whose proc_free reaps the child */
    }
    if (rc) {
        free(w);
        return rc;
    }
    korch_op_on_cancel(op, s_pending_cancel, w);
    return KORCH_OK;
}

/* ------------------------------------------------------------ children */

void korch_child_init(korch_child_t *c) { *c = (korch_child_t){.pid = -1, .pidfd = -1, .poll_timer = -1}; }

bool korch_child_reap(korch_child_t *c, bool block)
{
    if (c->reaped || c->pid <= 0)
        return true; /* (no child: nothing to wait for) */
    pid_t r;
    while ((r = waitpid(c->pid, &c->status, block ? 0 : WNOHANG)) < 0 && errno == EINTR)
        ;
    if (r == 0)
        return false;
    c->reaped = true;
    if (r < 0)
        c->status = 0;
    return true;
}

static void s_child_check(korch_child_t *c)
{
    if (!korch_child_reap(c, false))
        return;
    korch_child_unwatch(c);
    if (c->ended)
        c->ended(c->arg);
}

static int s_on_pidfd(korch_loop_t *loop, int fd, void *arg)
{
    s_child_check(arg);
    return 0;
}

static int s_on_poll(korch_loop_t *loop, int timer_id, void *arg)
{
    s_child_check(arg);
    return 0;
}

void korch_child_watch(korch_child_t *c, korch_loop_t *loop, void (*ended)(void *arg), void *arg)
{
    korch_child_unwatch(c);
    c->loop = loop;
    c->ended = ended;
    c->arg = arg;
    if (c->pidfd >= 0 && korch_loop_poller(loop, c->pidfd, s_on_pidfd, c) == 0)
        c->polled = true;
    else
        c->poll_timer = korch_loop_timer(loop, 100, 0, s_on_poll, c);
}

void korch_child_unwatch(korch_child_t *c)
{
    if (c->polled)
        korch_loop_poller_end(c->loop, c->pidfd);
    c->polled = false;
    if (c->poll_timer >= 0)
        korch_loop_timer_end(c->loop, c->poll_timer);
    c->poll_timer = -1;
}

void korch_child_close(korch_child_t *c)
{
    korch_child_unwatch(c);
    if (c->pidfd >= 0)
        close(c->pidfd);
    c->pidfd = -1;
}

char **korch_spawn_argv(const char *const *prefix, const korch_kernelspec_t *spec, const char *conn_file)
{
    size_t np = 0, n = 0;
    while (prefix && prefix[np])
        np++;
    while (spec->argv[n])
        n++;
    char **argv = calloc(np + n + 1, sizeof *argv);
    if (!argv)
        return NULL;
    for (size_t i = 0; i < np + n; i++) {
        const char *a = i < np ? prefix[i] : spec->argv[i - np];
        if (i >= np && strcmp(a, "{connection_file}") == 0)
            a = conn_file;
        else if (i >= np && strcmp(a, "{resource_dir}") == 0)
            a = spec->dir;
        argv[i] = strdup(a);
        if (!argv[i]) {
            korch_spawn_strv_free(argv);
            return NULL;
        }
    }
    return argv;
}

void korch_spawn_strv_free(char **v)
{
    if (v)
        for (char **p = v; *p; p++)
            free(*p);
    free(v);
}

void korch_spawn_describe(int status, char *why, size_t whylen)
{
    if (WIFEXITED(status))
        snprintf(why, whylen, "exited %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(why, whylen, "killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
    else
        snprintf(why, whylen, "ended (status %d)", status);
}

void korch_chown_tree(const char *dir, uid_t uid, gid_t gid)
{
    korch_fs_chown_tree(dir, uid, gid, NULL); /* fd-based, never through a link (fsutil.h) */
}

bool korch_parse_user(const char *s, uid_t *uid, gid_t *gid)
{
    char *end;
    errno = 0;
    long u = strtol(s, &end, 10);
    if (errno || end == s || u < 0 || u > 0x7fffffffL)
        return false;
    long g = u;
    if (*end == ':') {
        const char *gs = end + 1;
        g = strtol(gs, &end, 10);
        if (errno || end == gs || g < 0 || g > 0x7fffffffL)
            return false;
    }
    if (*end)
        return false;
    *uid = (uid_t)u;
    *gid = (gid_t)g;
    return true;
}

void korch_human_bytes(int64_t n, char *buf, size_t len)
{
    const int64_t gib = 1024LL * 1024 * 1024, mib = 1024LL * 1024;
    if (n > 0 && n % gib == 0)
        snprintf(buf, len, "%lld GiB", (long long)(n / gib));
    else if (n > 0 && n % mib == 0)
        snprintf(buf, len, "%lld MiB", (long long)(n / mib));
    else
        snprintf(buf, len, "%lld bytes", (long long)n);
}

bool korch_own_str(char **slot, const char **field)
{
    if (!*field)
        return true;
    *slot = strdup(*field);
    *field = *slot;
    return *field != NULL;
}

size_t korch_dir_len(const char *s)
{
    size_t n = strlen(s);
    while (n > 1 && s[n - 1] == '/')
        n--;
    return n;
}

const char *korch_launch_ipc_name(const korch_launch_t *req, const char *who, korch_err_t *err)
{
    if (!req->spec || !req->spec->argv || !req->spec->argv[0] || !req->conn || !req->runtime_dir) {
        korch_err_set(err, KORCH_E_INVALID, "%s launcher: incomplete launch request", who);
        return NULL;
    }
    const char *slash = strrchr(req->conn->ip, '/');
    size_t dl = korch_dir_len(req->runtime_dir);
    if (strcmp(req->conn->transport, "ipc") != 0 || !slash || (size_t)(slash - req->conn->ip) != dl ||
        strncmp(req->conn->ip, req->runtime_dir, dl) != 0 || !slash[1]) {
        korch_err_set(err, KORCH_E_INVALID, "%s kernels need ipc endpoints directly in runtime dir '%s', not %s '%s'",
                      who, req->runtime_dir, req->conn->transport, req->conn->ip);
        return NULL;
    }
    return slash + 1;
}
