/*  The sandbox launcher: bwrap in front of the kernelspec's argv, in a
 *  cgroup of its own; see include/korch/sandbox.h for what the kernel gets.
 *
 *  Process tree, and why signals go where they go:
 *
 *    korch --spawn--> bwrap (korch's child, its own session; the pidfd)
 *                       '--> bwrap as pid 1 of the sandbox (reaps zombies;
 *                              setsid: --new-session)
 *                                '--> the kernel, in pid 1's process group
 *
 *  The spawn helper writes the child's pid into the cgroup, drops to the
 *  kernel's uid and only then execs bwrap, so bwrap runs unprivileged
 *  (user namespace, no_new_privs) and everything it forks is counted.
 *  SIGINT must reach the kernel but not the outer bwrap (which would die of
 *  it and take the sandbox along): it goes to pid 1's process group, whose
 *  host pid bwrap reports on --info-fd; pid 1 itself ignores it (a pid
 *  namespace's init gets no default-action signals). The kernel's status
 *  comes back as bwrap's exit code, 128 + signal for a signal, as docker's.
 *
 *  Files korch (root) touches in dirs the kernel can write (runtime_dir,
 *  the work dir) are opened with openat and O_NOFOLLOW from a directory fd,
 *  one component at a time; the log is created O_EXCL and read through the
 *  fd korch keeps, never by name again.
 */
#include "sandbox_int.h"
#include "seccomp.h"
#include "hostdir.h"
#include "korch/fsutil.h"
#include "korch/instance.h"
#include "korch/log.h"

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

void korch_sandbox_opts_init(korch_sandbox_opts_t *o)
{
    memset(o, 0, sizeof *o);
    o->workdir_mount = "/home/korch/work";
    o->runtime_mount = "/run/korch";
    o->memory = S_GIB;
    o->nano_cpus = 1000000000LL;
    o->pids_limit = 256;
    o->tmp_size = 256 * S_MIB;
    o->runtime_size = S_MIB;
    o->workdir_size = 512 * S_MIB;
    o->log_max = 64 * 1024;
    const char *f = getenv("KORCH_FORK");
    o->fork = f && strcmp(f, "1") == 0;
}


static void s_free(korch_launcher_t *self)
{
    sandbox_launcher_t *l = (sandbox_launcher_t *)self;
    korch_sandbox_fork_free_all(l);
    for (size_t i = 0; i < sizeof l->strs / sizeof l->strs[0]; i++)
        free(l->strs[i]);
    free(l->bpf);
    free(l->bpf_hex);
    free(l);
}

static const korch_launcher_ops_t s_ops = {
    .name = "sandbox",
    .caps = KORCH_LAUNCHER_CONFINED | KORCH_LAUNCHER_HOST_FILES | KORCH_LAUNCHER_PACKAGES,
    .transport = "ipc",
    .start = korch_sandbox_start,
    .signal = korch_sandbox_signal,
    .kill = korch_sandbox_kill,
    .log_tail = korch_sandbox_log_tail,
    .usage_src = korch_sandbox_usage_src,
    .proc_free = korch_sandbox_proc_free,
    .free = s_free,
    .put_file_now = korch_sandbox_put_file_now,
    .get_file_now = korch_sandbox_get_file_now,
    .warm = korch_sandbox_warm,
};

/* ---------------------------------------------------------------- new */



/* The cgroup scope of this korch's runtime base (cgroup.h): instances of
   another runtime base are never judged by our locks. */
static korch_rc_t s_scope(char *buf, size_t len, korch_err_t *err)
{
    char base[PATH_MAX];
    korch_rc_t rc = korch_runtime_base(base, sizeof base, err);
    return rc ? rc : korch_cgroup_scope(base, buf, len, err);
}

/* Start a trivial sandbox the way kernels will be started: user namespaces
   may be off, bwrap may lack something. The reason is bwrap's own words. */
static korch_rc_t s_probe(sandbox_launcher_t *l, korch_err_t *err)
{
    int out[2];
    if (pipe2(out, O_CLOEXEC) != 0)
        return korch_err_set(err, KORCH_E_LAUNCH, "sandbox unavailable: %s", strerror(errno));
    /* with the kernels' seccomp filter, when there is one: bwrap must take it */
    int keep[2] = {l->bpf ? korch_sandbox_memfd("seccomp", (const char *)l->bpf, l->bpf_len) : -1, -1};
    char sfd[16];
    snprintf(sfd, sizeof sfd, "%d", keep[0]);
    char *argv[] = {l->bwrap, "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent",
                    "--new-session", "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink",
                    "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64", "--proc", "/proc", "--dev", "/dev",
                    keep[0] >= 0 ? "--seccomp" : "--", keep[0] >= 0 ? sfd : "/usr/bin/true",
                    keep[0] >= 0 ? "--" : NULL, "/usr/bin/true", NULL};
    char *envp[] = {"PATH=/usr/bin:/bin", NULL};
    korch_spawn_t sp = {.what = "bwrap", .argv = argv, .envp = envp, .out_fd = out[1], .keep_fds = keep,
                        .new_session = true, .set_ids = l->drop, .uid = l->uid, .gid = l->gid};
    pid_t pid;
    int pidfd, status = 0;
    korch_err_t e = {0};
    korch_rc_t rc = l->bpf && keep[0] < 0 ? korch_err_set(&e, KORCH_E_LAUNCH, "cannot pass the seccomp filter: %s",
                                                          strerror(errno))
                                         : korch_spawn(&sp, &pid, &pidfd, &e);
    close(out[1]);
    if (keep[0] >= 0)
        close(keep[0]);
    if (rc) {
        close(out[0]);
        if (strstr(e.msg, "is not on the PATH") || strstr(e.msg, "No such file"))
            return korch_err_set(err, rc, "sandbox unavailable: '%s' is not installed (apt-get install bubblewrap)",
                                 l->bwrap);
        return korch_err_set(err, rc, "sandbox unavailable: %s", e.msg);
    }
    char text[512];
    size_t n = 0;
    ssize_t r;
    struct pollfd pfd = {out[0], POLLIN, 0};
    while (n + 1 < sizeof text && poll(&pfd, 1, 10000) > 0 && (r = read(out[0], text + n, sizeof text - 1 - n)) > 0)
        n += (size_t)r;
    text[n] = 0;
    close(out[0]);
    kill(pid, SIGKILL); /* if it hung; a no-op when it ended */
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (pidfd >= 0)
        close(pidfd);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return KORCH_OK;
    text[strcspn(text, "\n")] = 0;
    return korch_err_set(err, KORCH_E_LAUNCH, "sandbox unavailable: %s%s", n ? text : "bwrap failed",
                         strstr(text, "namespace") ? " (are unprivileged user namespaces turned off? see "
                                                     "/proc/sys/user/max_user_namespaces)"
                                                   : "");
}

/* Blocking (the probe waits for a trivial sandbox): made at a command's
   set-up, before its loop runs, never from a handler (refused). */
korch_launcher_t *korch_launcher_sandbox_new(korch_loop_t *loop, const korch_sandbox_opts_t *opts, korch_err_t *err)
{
    char why[256];
    if (loop && korch_loop_running(loop)) {
        korch_err_set(err, KORCH_E_STATE, "the sandbox launcher is made before the loop runs (its probe blocks), "
                                          "not from a handler");
        return NULL;
    }
    sandbox_launcher_t *l = calloc(1, sizeof *l);
    if (!l) {
        korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        return NULL;
    }
    korch_backend_launcher_init(&l->base, &s_ops, loop);
    l->busy_timer = -1;
    if (opts)
        l->o = *opts;
    else
        korch_sandbox_opts_init(&l->o);
    if (!l->o.network)
        l->base.caps |= KORCH_LAUNCHER_OFFLINE;
    korch_sandbox_opts_t d;
    korch_sandbox_opts_init(&d);
    if (!l->o.workdir_mount)
        l->o.workdir_mount = d.workdir_mount;
    if (l->o.log_max < 4096)
        l->o.log_max = 4096; /* the tail a death is told with */
    if (!l->o.runtime_mount)
        l->o.runtime_mount = d.runtime_mount;
    const char **fields[] = {&l->o.bwrap,   &l->o.instance,      &l->o.user,
                             &l->o.workdir, &l->o.workdir_mount, &l->o.runtime_mount};
    bool ok = true;
    for (size_t i = 0; ok && i < sizeof fields / sizeof fields[0]; i++)
        ok = korch_own_str(&l->strs[i], fields[i]);
    if (!ok) {
        korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        goto fail;
    }
    if (l->o.runtime_mount[0] != '/' || l->o.workdir_mount[0] != '/' || strncmp(l->o.workdir_mount, "/home/", 6) != 0) {
        korch_err_set(err, KORCH_E_INVALID, "sandbox mount points must be absolute, the work dir under /home ('%s', '%s')",
                      l->o.runtime_mount, l->o.workdir_mount);
        goto fail;
    }
    if (l->o.user) {
        if (!korch_parse_user(l->o.user, &l->uid, &l->gid)) {
            korch_err_set(err, KORCH_E_INVALID, "sandbox user '%s' is not numeric uid:gid", l->o.user);
            goto fail;
        }
    } else if (geteuid() == 0) {
        l->dynamic = true; /* each kernel a uid of its own that no account has (kuid.h) */
        l->drop = true;
        uid_t first, last;
        if (!korch_kuid_range(&first, &last, err))
            goto fail;
    } else {
        l->uid = geteuid();
        l->gid = getegid();
    }
    if (!l->dynamic && l->uid != geteuid()) {
        if (geteuid() != 0) {
            korch_err_set(err, KORCH_E_INVALID, "sandbox user '%s' needs korch to run as root (it runs as uid %u)",
                          l->o.user ? l->o.user : "", (unsigned)geteuid());
            goto fail;
        }
        l->drop = true;
    }
    const char *bw = l->o.bwrap ? l->o.bwrap : getenv("KORCH_BWRAP");
    if (!bw || !*bw)
        bw = "bwrap";
    snprintf(l->bwrap, sizeof l->bwrap, "%s", bw);
    if (strchr(bw, '/') && access(bw, X_OK) != 0) {
        korch_err_set(err, KORCH_E_LAUNCH, "sandbox unavailable: cannot run '%s': %s (apt-get install bubblewrap)",
                      bw, strerror(errno));
        goto fail;
    }
    if (!korch_cgroup_available(why, sizeof why)) {
        korch_err_set(err, KORCH_E_LAUNCH, "sandbox unavailable: %s (the limits need a cgroup)", why);
        goto fail;
    }
    if (s_scope(l->scope, sizeof l->scope, err) != KORCH_OK)
        goto fail;
    if (!l->o.no_seccomp && korch_seccomp_program(&l->bpf, &l->bpf_len, err) != KORCH_OK)
        goto fail;
    korch_kuid_t *probe_uid = l->dynamic ? korch_kuid_claim(0, err) : NULL;
    if (l->dynamic && !probe_uid)
        goto fail;
    if (probe_uid)
        l->uid = korch_kuid_uid(probe_uid), l->gid = (gid_t)l->uid;
    korch_rc_t prc = s_probe(l, err);
    korch_kuid_release(&probe_uid);
    if (prc != KORCH_OK)
        goto fail;
    return &l->base;
fail:
    s_free(&l->base);
    return NULL;
}

typedef struct {
    const char *mine;
    bool (*alive)(const char *instance);
    int removed;
} s_sweep_t;

/* A runtime dir's tmpfs (hostdir.h) of an instance that is gone: its
   kernels died with it, so the dir and what they left in it go. */
static void s_sweep_dir(const char *dir, const char *instance, void *arg)
{
    s_sweep_t *s = arg;
    if (strcmp(instance, s->mine) == 0 || strcmp(instance, "default") == 0 || s->alive(instance))
        return;
    if (korch_hostdir_unmount(dir) != 0) {
        korch_warn("cannot unmount the tmpfs on runtime dir '%s' of korch instance '%s', which is gone: %s", dir,
                   instance, strerror(errno));
        return;
    }
    korch_fs_rm_tree(dir);
    s->removed++;
}

int korch_sandbox_sweep(const char *mine, bool (*alive)(const char *instance), void (*gone)(const char *instance))
{
    char scope[32], base[PATH_MAX];
    korch_err_t err = {0};
    s_sweep_t s = {.mine = mine, .alive = alive};
    if (geteuid() == 0 && korch_runtime_base(base, sizeof base, &err) == KORCH_OK)
        korch_hostdir_each(base, KORCH_SANDBOX_MOUNT_SRC, s_sweep_dir, &s);
    if (s.removed > 0)
        korch_notice("removed %d sandbox runtime dir(s) left by korch instances that are gone", s.removed);
    if (s_scope(scope, sizeof scope, &err) != KORCH_OK) {
        korch_debug("no sandbox cgroup sweep: %s", err.msg);
        return 0;
    }
    return korch_cgroup_sweep(scope, mine, alive, gone);
}
