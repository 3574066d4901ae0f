/*  A running sandbox: its pid 1, signals, its end and its reaping (sandbox_int.h). */
#include "sandbox_int.h"
#include "korch/log.h"
#include "korch/fsutil.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---------------------------------------------------------------- life */

/* The sandbox's pid 1, from bwrap's info ("child-pid": N), read on the
   loop as bwrap writes it (before the kernel even starts). */
static void s_info_done(sandbox_proc_t *p)
{
    if (p->info_polled)
        korch_loop_poller_end(p->base.launcher->loop, p->info_fd);
    p->info_polled = false;
    if (p->info_fd >= 0)
        close(p->info_fd);
    p->info_fd = -1;
    p->info[p->info_len] = 0;
    const char *at = strstr(p->info, "\"child-pid\"");
    const char *colon = at ? strchr(at, ':') : NULL;
    p->init_pid = colon ? (pid_t)strtol(colon + 1, NULL, 10) : 0;
    if (!p->init_pid)
        korch_debug("bwrap gave no child pid: '%s'", p->info);
}

static int s_on_info(korch_loop_t *loop, int fd, void *arg)
{
    sandbox_proc_t *p = arg;
    ssize_t got = read(fd, p->info + p->info_len, sizeof p->info - 1 - p->info_len);
    if (got > 0)
        p->info_len += (size_t)got;
    else if (got < 0 && (errno == EINTR || errno == EAGAIN))
        return 0;
    p->info[p->info_len] = 0;
    /* bwrap writes one JSON object and keeps the fd: done at its end */
    if (got <= 0 || p->info_len + 1 >= sizeof p->info || strchr(p->info, '}'))
        s_info_done(p);
    return 0;
}

/* 0 while not known yet (never waits). */
static pid_t s_init_pid(sandbox_proc_t *p) { return p->init_pid; }

/* waitpid bwrap (block: at korch_launcher_destroy only); true once reaped. */
static bool s_reap(sandbox_proc_t *p, bool block)
{
    if (p->forked)
        return true; /* not our child: its template (or init) reaps A; the cgroup says when all is gone */
    bool was = p->child.reaped;
    if (!korch_child_reap(&p->child, block))
        return false;
    /* pid 1 gone means its namespace is gone, but bwrap may have been killed
       first: make sure nothing of the kernel's outlives it (without waiting
       on the loop: the zombie job waits for the cgroup to empty). */
    if (!was)
        korch_cgroup_kill_now(p->cg);
    return true;
}

/* Why the sandbox ended, once reaped. */
static void s_describe(sandbox_proc_t *p, char *why, size_t whylen)
{
    int st = p->child.status, code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    int sig = WIFSIGNALED(st) ? WTERMSIG(st) : (code > 128 && code < 128 + 65 ? code - 128 : 0);
    if (sig == SIGKILL && p->l->o.memory > 0 && korch_cgroup_oom_killed(p->cg)) {
        char lim[32];
        korch_human_bytes(p->l->o.memory, lim, sizeof lim);
        snprintf(why, whylen, "out of memory (limit %s)", lim);
    } else if (sig) {
        /* bwrap passes a signal on as 128 + signal, as a shell does */
        snprintf(why, whylen, "killed by signal %d (%s)", sig, strsignal(sig));
    } else {
        korch_spawn_describe(st, why, whylen);
    }
}

static void s_unwatch(sandbox_proc_t *p)
{
    if (p->info_polled)
        korch_loop_poller_end(p->base.launcher->loop, p->info_fd);
    p->info_polled = false;
    korch_child_unwatch(&p->child);
}

/* bwrap has been reaped (korch_child_t). */
static void s_ended(void *arg)
{
    sandbox_proc_t *p = arg;
    korch_cgroup_kill_now(p->cg);
    s_unwatch(p);
    korch_logpipe_drain(p->log); /* its last words, for the log's tail */
    char why[256];
    s_describe(p, why, sizeof why);
    korch_backend_exited(&p->base, why);
}

static void s_watch(sandbox_proc_t *p)
{
    korch_loop_t *loop = p->base.launcher->loop;
    korch_child_watch(&p->child, loop, s_ended, p);
    korch_logpipe_watch(p->log, loop);
    if (p->info_fd >= 0 && korch_loop_poller(loop, p->info_fd, s_on_info, p) == 0)
        p->info_polled = true;
}

void korch_sandbox_watch_proc(korch_proc_t *proc) { s_watch((sandbox_proc_t *)proc); }

/* The end is seen by the pidfd poller. */
korch_rc_t korch_sandbox_kill(korch_proc_t *proc, korch_op_t *op, korch_err_t *err)
{
    sandbox_proc_t *p = (sandbox_proc_t *)proc;
    if (p->forked) {
        korch_sandbox_fork_kill(p);
        return KORCH_OK;
    }
    if (p->child.reaped)
        return KORCH_OK;
    kill(-p->child.pid, SIGKILL);
    kill(p->child.pid, SIGKILL);
    korch_cgroup_kill_now(p->cg);
    return KORCH_OK;
}

static korch_rc_t s_signal_now(korch_proc_t *proc, int sig, korch_err_t *err)
{
    sandbox_proc_t *p = (sandbox_proc_t *)proc;
    if (p->forked ? p->base.exited : p->child.reaped)
        return korch_err_set(err, KORCH_E_DIED, "the sandbox of the kernel (pid %d) is gone",
                             (int)(p->forked ? p->init_pid : p->child.pid));
    if (sig == SIGKILL && p->forked) {
        korch_sandbox_fork_kill(p);
        return KORCH_OK;
    }
    if (sig == SIGKILL) {
        kill(-p->child.pid, SIGKILL);
        korch_cgroup_kill_now(p->cg);
        return KORCH_OK;
    }
    pid_t init = s_init_pid(p);
    if (!init)
        return korch_err_set(err, KORCH_E_STATE, "cannot signal the kernel: its sandbox is not set up yet");
    /* The kernel's process group: pid 1's session (--new-session). */
    if (kill(-init, sig) != 0)
        return korch_err_set(err, KORCH_E_IO, "cannot signal the kernel's sandbox (pid %d): %s", (int)init,
                             strerror(errno));
    return KORCH_OK;
}

korch_rc_t korch_sandbox_signal(korch_proc_t *proc, int sig, korch_op_t *op, korch_err_t *err)
{
    korch_rc_t rc = s_signal_now(proc, sig, err);
    if (rc == KORCH_OK)
        korch_op_finish(op, KORCH_OK, NULL);
    return rc;
}

/* From its cgroup (the kernel cannot write cgroupfs: no /sys in its view). */
bool korch_sandbox_usage_src(korch_proc_t *proc, korch_usage_src_t *src)
{
    sandbox_proc_t *p = (sandbox_proc_t *)proc;
    return p->cg && korch_cgroup_usage_src(p->cg, src);
}

const char *korch_sandbox_log_tail(korch_proc_t *proc)
{
    sandbox_proc_t *p = (sandbox_proc_t *)proc;
    korch_logpipe_drain(p->log);
    korch_logpipe_tail(p->log, p->tail, sizeof p->tail);
    return p->tail;
}

/* A killed sandbox, reaped (and its cgroup removed once empty) in the
   background. */
static bool s_zombie_step(void *arg)
{
    sandbox_proc_t *p = arg;
    if (!s_reap(p, false) || !korch_cgroup_kill_now(p->cg))
        return false;
    korch_cgroup_destroy(&p->cg);
    korch_kuid_release(&p->kuid); /* nothing of that uid runs any more */
    free(p);
    return true;
}

/* At korch_launcher_destroy: may block. */
static void s_zombie_finish(void *arg)
{
    sandbox_proc_t *p = arg;
    s_reap(p, true);
    korch_cgroup_destroy(&p->cg);
    korch_kuid_release(&p->kuid); /* nothing of that uid runs any more */
    free(p);
}

/* What the kernel leaves in a host work dir goes back to the user who
   asked (kuid.h: the owner of the dir it lies in, or SUDO_UID), never stays
   the kernel's uid. On the launcher's worker, after the kernel is killed. */
typedef struct {
    char dir[PATH_MAX];
} s_give_back_t;

static void s_give_back_run(void *arg)
{
    s_give_back_t *g = arg;
    char parent[PATH_MAX + 4];
    uid_t uid;
    gid_t gid;
    snprintf(parent, sizeof parent, "%s/..", g->dir);
    korch_kuid_owner(parent, &uid, &gid);
    korch_fs_chown_tree(g->dir, uid, gid, NULL);
}

void korch_sandbox_proc_free(korch_proc_t *proc)
{
    sandbox_proc_t *p = (sandbox_proc_t *)proc;
    s_give_back_t *g = p->given && p->host_work ? malloc(sizeof *g) : NULL;
    if (g) {
        snprintf(g->dir, sizeof g->dir, "%s", p->workdir);
        korch_backend_host(proc->launcher, s_give_back_run, free, g);
    }
    s_unwatch(p);
    korch_sandbox_fork_release(p);
    korch_sandbox_kill(proc, NULL, NULL);
    korch_child_close(&p->child);
    if (p->info_fd >= 0)
        close(p->info_fd);
    korch_logpipe_destroy(&p->log);
    if (p->work_fd >= 0)
        close(p->work_fd);
    p->info_fd = p->work_fd = -1;
    if (!s_zombie_step(p))
        korch_backend_job(proc->launcher, 20, s_zombie_step, s_zombie_finish, p);
}
