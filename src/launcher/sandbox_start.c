/*  A sandbox kernel's start (sandbox_int.h, and sandbox.c for the process tree). */
#include "sandbox_int.h"
#include "korch/log.h"
#include "hostdir.h"
#include "logpipe.h"

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

/* ---------------------------------------------------------------- start */

/* A cgroup name from the kernel id: its safe characters and a sequence. */
static void s_cgroup_name(sandbox_launcher_t *l, const char *kernel_id, char *buf, size_t len)
{
    char id[40];
    size_t n = 0;
    for (const char *s = kernel_id ? kernel_id : ""; *s && n < sizeof id - 1; s++)
        if (strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_", *s))
            id[n++] = *s;
    id[n] = 0;
    snprintf(buf, len, "%s-%u-%u", n ? id : "kernel", (unsigned)getpid(), ++l->seq);
}

/* The runtime dir is a tmpfs of runtime_size bytes, plus workdir_size
   when the work dir is in it ({runtime_dir}/work): made at the kernel's
   first start and kept across its restarts (work/ holds its files, which
   korch reads back after it ends); korch_launcher_remove_dir unmounts it.
   Its source names the instance, for the sweep after a korch that died. */
static void s_bound_runtime(sandbox_launcher_t *l, const sandbox_proc_t *p, const char *dir)
{
    bool work_in = !p->workdir[0];
    if (l->o.runtime_size <= 0 || (work_in && l->o.workdir_size <= 0) || korch_hostdir_is_mount(dir))
        return;
    if (geteuid() != 0) {
        static bool said;
        if (!said)
            korch_warn("sandbox kernels' runtime and work dirs are not size-bounded: korch is not root, so it "
                       "cannot mount their tmpfs (a kernel can fill the disk under '%s')", dir);
        said = true;
        return;
    }
    char src[96];
    snprintf(src, sizeof src, "%s%s", KORCH_SANDBOX_MOUNT_SRC, l->o.instance ? l->o.instance : "default");
    int64_t size = l->o.runtime_size + (work_in ? l->o.workdir_size : 0);
    if (korch_hostdir_mount(dir, src, size, p->uid, p->gid, 0700, false) != 0)
        korch_warn("runtime dir '%s' is not size-bounded: cannot mount a tmpfs on it: %s", dir, strerror(errno));
}

/* The kernel's uid: with l->dynamic one no account has, claimed for it
   alone (kuid.h); a restart keeps the one that owns its runtime dir (its
   files there and in work/ are that uid's). */
static korch_rc_t s_claim_uid(sandbox_launcher_t *l, sandbox_proc_t *p, const char *dir, korch_err_t *err)
{
    p->uid = l->uid;
    p->gid = l->gid;
    if (!l->dynamic)
        return KORCH_OK;
    struct stat st;
    uid_t want = lstat(dir, &st) == 0 && S_ISDIR(st.st_mode) && korch_kuid_is_kernel(st.st_uid) ? st.st_uid : 0;
    if (!(p->kuid = korch_kuid_claim(want, err)))
        return err ? err->rc : KORCH_E_LAUNCH;
    p->uid = korch_kuid_uid(p->kuid);
    p->gid = (gid_t)p->uid;
    return KORCH_OK;
}

/* The runtime dir for the kernel's uid: the kernel may have left anything
   in the dir (a restart reuses it). */
static korch_rc_t s_prepare_runtime(sandbox_launcher_t *l, sandbox_proc_t *p, const char *dir, korch_err_t *err)
{
    s_bound_runtime(l, p, dir);
    int rfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (rfd < 0)
        return korch_err_set(err, KORCH_E_IO, "cannot use runtime dir '%s': %s", dir, strerror(errno));
    korch_rc_t rc = KORCH_OK;
    if (l->drop && fchown(rfd, p->uid, p->gid) != 0)
        rc = korch_err_set(err, KORCH_E_IO, "cannot give runtime dir '%s' to uid %u: %s", dir, (unsigned)p->uid,
                           strerror(errno));
    if (!rc && !p->workdir[0]) {
        int wfd = korch_sandbox_open_dir(rfd, "work", true, l->drop, p->uid, p->gid);
        if (wfd < 0)
            rc = korch_err_set(err, KORCH_E_IO, "cannot make the work dir '%s/work': %s", dir, strerror(errno));
        p->work_fd = wfd;
        snprintf(p->workdir, sizeof p->workdir, "%s/work", dir);
    } else if (!rc) {
        /* a host dir korch was given: its path is the user's, its contents the kernel's */
        p->host_work = true;
        p->work_fd = open(p->workdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (p->work_fd < 0)
            rc = korch_err_set(err, KORCH_E_IO, "cannot use the work dir '%s': %s", p->workdir, strerror(errno));
    }
    close(rfd);
    return rc;
}

korch_rc_t korch_sandbox_start(korch_launcher_t *self, const korch_launch_t *req, korch_op_t *op, korch_err_t *err)
{
    sandbox_launcher_t *l = (sandbox_launcher_t *)self;
    korch_rc_t rc = KORCH_OK;
    korch_sandbox_args_t a = {0};
    char **argv = NULL, **env = NULL, *conn_text = NULL;
    enum { F_WORK, F_RUNTIME, F_SPEC, F_WHEELS, F_CONN, F_PASSWD, F_GROUP, F_HOSTS, F_INFO, F_SECCOMP, F__COUNT };
    int fds[F__COUNT + 1], info[2] = {-1, -1}; /* fds: -1-terminated for keep_fds (F_SECCOMP last: it may be -1) */
    for (int i = 0; i <= F__COUNT; i++)
        fds[i] = -1;
    char buf[64], cgname[96], what[300];
    sandbox_proc_t *p = korch_backend_proc_new(self, sizeof *p, req);
    if (!p)
        return korch_err_set(err, KORCH_E_NOMEM, "out of memory");
    p->l = l;
    korch_child_init(&p->child);
    p->info_fd = p->work_fd = p->status_fd = -1;
    int log_w = -1;

    const char *ipc_name = korch_launch_ipc_name(req, "sandbox", err);
    if (!ipc_name) {
        rc = err ? err->rc : KORCH_E_INVALID;
        goto out;
    }
    const char *workdir = l->o.workdir ? l->o.workdir : (l->o.workdir_from_cwd ? req->cwd : NULL);
    if (workdir)
        snprintf(p->workdir, sizeof p->workdir, "%s", workdir);
    rc = s_claim_uid(l, p, req->runtime_dir, err);
    if (rc)
        goto out;
    rc = s_prepare_runtime(l, p, req->runtime_dir, err);
    if (rc)
        goto out;
    if (workdir && l->o.workdir_give && l->drop) {
        korch_chown_tree(workdir, p->uid, p->gid);
        p->given = true;
    }

    s_cgroup_name(l, req->kernel_id, cgname, sizeof cgname);
    korch_cgroup_limits_t lim = {.memory = l->o.memory, .nano_cpus = l->o.nano_cpus, .pids = l->o.pids_limit};
    p->cg = korch_cgroup_new(l->scope, l->o.instance ? l->o.instance : "default", cgname, &lim, err);
    if (!p->cg) {
        rc = err ? err->rc : KORCH_E_LAUNCH;
        goto out;
    }

    /* The connection file as the kernel sees it, handed over in memory. */
    korch_conn_t conn = *req->conn;
    snprintf(conn.ip, sizeof conn.ip, "%s/%s", l->o.runtime_mount, ipc_name);
    json_t *cj = korch_conn_json(&conn);
    conn_text = cj ? json_dumps(cj, JSON_INDENT(1) | JSON_SORT_KEYS) : NULL;
    json_decref(cj);
    char passwd[256], group[160];
    snprintf(passwd, sizeof passwd,
             "root:x:0:0:root:/root:/usr/sbin/nologin\nkorch:x:%u:%u:korch:/home/korch:/bin/sh\n"
             "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
             (unsigned)p->uid, (unsigned)p->gid);
    snprintf(group, sizeof group, "root:x:0:\nkorch:x:%u:\nnogroup:x:65534:\n", (unsigned)p->gid);
    static const char hosts[] = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n";
    if (conn_text) {
        fds[F_CONN] = korch_sandbox_memfd("korch-kernel.json", conn_text, strlen(conn_text));
        fds[F_PASSWD] = korch_sandbox_memfd("passwd", passwd, strlen(passwd));
        fds[F_GROUP] = korch_sandbox_memfd("group", group, strlen(group));
        fds[F_HOSTS] = korch_sandbox_memfd("hosts", hosts, strlen(hosts));
        if (l->bpf) /* bwrap reads it to its end: a new fd per start */
            fds[F_SECCOMP] = korch_sandbox_memfd("seccomp", (const char *)l->bpf, l->bpf_len);
    }
    fds[F_WORK] = fcntl(p->work_fd, F_DUPFD_CLOEXEC, 3); /* bound by the spawn helper, never inherited */
    fds[F_RUNTIME] = open(req->runtime_dir, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (req->spec->dir && req->spec->dir[0] == '/' && strncmp(req->spec->dir, "/usr/", 5) != 0)
        fds[F_SPEC] = open(req->spec->dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    const char *wheels = korch_pkgs_wheelhouse(self);
    if (wheels && (fds[F_WHEELS] = open(wheels, O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0) {
        rc = korch_err_set(err, KORCH_E_IO, "cannot open the wheelhouse '%s': %s", wheels, strerror(errno));
        goto out;
    }
    /* what the spawn helper binds at S_BIND_AT/N: -1-terminated, so the optional ones packed */
    int binds[5] = {fds[F_WORK], fds[F_RUNTIME], -1, -1, -1}, nbind = 2;
    char spec_at[32] = "", wheels_at[32] = "";
    if (fds[F_SPEC] >= 0) {
        snprintf(spec_at, sizeof spec_at, "%s/%d", S_BIND_AT, nbind);
        binds[nbind++] = fds[F_SPEC];
    }
    if (fds[F_WHEELS] >= 0) {
        snprintf(wheels_at, sizeof wheels_at, "%s/%d", S_BIND_AT, nbind);
        binds[nbind++] = fds[F_WHEELS];
    }
    if (fds[F_WORK] < 0 || fds[F_RUNTIME] < 0) {
        rc = korch_err_set(err, KORCH_E_IO, "cannot open the kernel's %s dir '%s': %s",
                           fds[F_WORK] < 0 ? "work" : "runtime", fds[F_WORK] < 0 ? p->workdir : req->runtime_dir,
                           strerror(errno));
        goto out;
    }
    if (!conn_text || fds[F_CONN] < 0 || fds[F_PASSWD] < 0 || fds[F_GROUP] < 0 || fds[F_HOSTS] < 0 ||
        (l->bpf && fds[F_SECCOMP] < 0) || pipe2(info, O_CLOEXEC) != 0) {
        rc = korch_err_set(err, KORCH_E_LAUNCH, "cannot prepare the sandbox: %s", strerror(errno));
        goto out;
    }

    if (korch_sandbox_forkable(l, req)) { /* from the kernelspec's template (sandbox_fork.c) */
        if (!(env = korch_sandbox_env(req, l))) {
            rc = korch_err_set(err, KORCH_E_NOMEM, "out of memory");
            goto out;
        }
        korch_sandbox_fork_t f = {.conn = conn_text, .passwd = passwd, .group = group, .hosts = hosts, .env = env,
                                  .work_fd = fds[F_WORK], .runtime_fd = fds[F_RUNTIME], .spec_fd = fds[F_SPEC]};
        rc = korch_sandbox_fork_start(l, p, req, &f, op, err);
        goto out;
    }
    korch_sandbox_arg(&a, l->bwrap);
    korch_sandbox_args3(&a, "--unshare-all", "--unshare-user", "--disable-userns");
    if (l->o.network)
        korch_sandbox_arg(&a, "--share-net");
    korch_sandbox_args3(&a, "--die-with-parent", "--new-session", NULL);
    if (geteuid() == 0 && !l->drop)
        korch_sandbox_args3(&a, "--cap-drop", "ALL", NULL); /* root stays root in there: at least without capabilities */
    korch_sandbox_args3(&a, "--hostname", "korch", NULL);
    korch_sandbox_args3(&a, "--ro-bind", "/usr", "/usr");
    korch_sandbox_root_links(&a);
    for (int i = 0; korch_sandbox_etc[i]; i++)
        korch_sandbox_args3(&a, "--ro-bind-try", korch_sandbox_etc[i], korch_sandbox_etc[i]);
    korch_sandbox_arg_fd(&a, "--ro-bind-data", fds[F_PASSWD], "/etc/passwd");
    korch_sandbox_arg_fd(&a, "--ro-bind-data", fds[F_GROUP], "/etc/group");
    korch_sandbox_arg_fd(&a, "--ro-bind-data", fds[F_HOSTS], "/etc/hosts");
    korch_sandbox_args3(&a, "--proc", "/proc", NULL);
    korch_sandbox_args3(&a, "--dev", "/dev", NULL);
    if (l->o.tmp_size > 0) {
        snprintf(buf, sizeof buf, "%lld", (long long)l->o.tmp_size);
        korch_sandbox_args3(&a, "--size", buf, NULL);
    }
    korch_sandbox_args3(&a, "--perms", "1777", NULL);
    korch_sandbox_args3(&a, "--tmpfs", "/tmp", NULL);
    korch_sandbox_args3(&a, "--perms", "0600", NULL);
    korch_sandbox_arg_fd(&a, "--file", fds[F_CONN], S_CONN_IN);
    /* The dirs from korch's fds, which the spawn helper binds at
       /tmp/0, /tmp/1, /tmp/2 of bwrap's view: bwrap runs as the kernel's
       uid, which may not reach them by their paths (the runtime base is
       0700), and a path the kernel could swap is never resolved again. */
    korch_sandbox_args3(&a, "--tmpfs", "/home", NULL);
    korch_sandbox_args3(&a, "--bind", S_BIND_AT "/0", l->o.workdir_mount);
    korch_sandbox_args3(&a, "--bind", S_BIND_AT "/1", l->o.runtime_mount);
    /* A kernelspec's own files (a wrapper script, logos), read-only. */
    if (fds[F_SPEC] >= 0)
        korch_sandbox_args3(&a, "--ro-bind", spec_at, req->spec->dir);
    /* The operator's wheelhouse, read-only (korch/packages.h). */
    if (fds[F_WHEELS] >= 0)
        korch_sandbox_args3(&a, "--ro-bind", wheels_at, KORCH_PACKAGES_WHEELHOUSE);
    korch_sandbox_args3(&a, "--remount-ro", "/home", NULL);
    korch_sandbox_args3(&a, "--remount-ro", "/", NULL);
    korch_sandbox_args3(&a, "--chdir", l->o.workdir_mount, NULL);
    korch_sandbox_arg_fd(&a, "--info-fd", info[1], NULL);
    if (fds[F_SECCOMP] >= 0) /* loaded by bwrap just before it execs the kernel */
        korch_sandbox_arg_fd(&a, "--seccomp", fds[F_SECCOMP], NULL);
    korch_sandbox_arg(&a, "--");
    a.v[a.n] = NULL;
    if (a.full) {
        rc = korch_err_set(err, KORCH_E_NOMEM, "cannot build the sandbox's command line");
        goto out;
    }
    argv = korch_spawn_argv((const char *const *)a.v, req->spec, S_CONN_IN);
    env = korch_sandbox_env(req, l);
    if (!argv || !env) {
        rc = korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        goto out;
    }
    fds[F_INFO] = info[1];
    info[1] = -1;
    snprintf(what, sizeof what, "kernel '%s' in a sandbox", req->spec->name);
    /* its stdout and stderr into korch's bounded ring, never a file on the host */
    if (!(p->log = korch_logpipe_new((size_t)l->o.log_max, &log_w, err))) {
        rc = err ? err->rc : KORCH_E_NOMEM;
        goto out;
    }
    korch_spawn_t sp = {.what = what, .argv = argv, .envp = env, .out_fd = log_w, .keep_fds = &fds[F_CONN],
                        .cgroup_fds = korch_cgroup_procs_fds(p->cg), .bind_fds = binds, .bind_at = S_BIND_AT, .new_session = true, .set_ids = l->drop,
                        .uid = p->uid, .gid = p->gid};
    p->info_fd = info[0];
    info[0] = -1;
    /* the op finishes once bwrap has exec'd (spawn.h), from the loop */
    rc = korch_spawn_start(&p->base, op, &sp, &p->child.pid, &p->child.pidfd, korch_sandbox_watch_proc, err);
    if (rc)
        goto out;
    korch_debug("started kernel '%s' in a sandbox: bwrap pid %d, uid %u, cgroup v%d %s", req->spec->name,
                (int)p->child.pid, (unsigned)p->uid, korch_cgroup_version(p->cg), cgname);
out:
    korch_sandbox_args_clear(&a);
    korch_spawn_strv_free(argv);
    korch_spawn_strv_free(env);
    free(conn_text);
    for (int i = 0; i < F__COUNT; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    for (int i = 0; i < 2; i++)
        if (info[i] >= 0)
            close(info[i]);
    if (log_w >= 0)
        close(log_w); /* the kernel has its copy */
    if (rc && p->child.pid > 0) {
        korch_sandbox_proc_free(&p->base); /* kills and reaps the child in the background */
    } else if (rc) {
        if (p->info_fd >= 0)
            close(p->info_fd);
        korch_logpipe_destroy(&p->log);
        korch_kuid_release(&p->kuid);
        if (p->work_fd >= 0)
            close(p->work_fd);
        korch_cgroup_destroy(&p->cg);
        free(p);
    }
    return rc;
}
