/*  A sandbox kernel forked from a kernel template (forksrv.h) rather than
 *  started by bwrap (sandbox_int.h; docs/fastkernel.md).
 *
 *  The same confinement as bwrap's, made by the fork itself (forksrv.py):
 *  the kernel's cgroup (joined first), its own pid, mount, net, ipc, uts
 *  and cgroup namespaces, the same mounts (the system read-only, the work
 *  and runtime dirs from korch's fds, a private /tmp holding the
 *  connection file), its own uid from kuid.h with no capability, no new
 *  privileges and the seccomp program of seccomp.h. What differs: the
 *  kernel's memory starts as the template's pages (copy-on-write), so its
 *  address-space layout is the template's; docs/fastkernel.md says what
 *  that costs and what korch does about it.
 *
 *  Process tree: template -> A (host pid ns, in the cgroup; waits) -> B
 *  (pid 1: reaps; its process group is signalled, as bwrap's pid 1's) -> C
 *  (the kernel). The start op finishes once B is confined ("ok" and its
 *  pid on the status pipe); the kernel's end is the status pipe's EOF, its
 *  status the "exit" line A writes (none: killed).
 *
 *  One template per kernelspec (argv and env), made at its first kernel's
 *  start; kernels asked for while it imports wait for it. A template that
 *  dies is made again at the next start; its kernels live on.
 */
#include "sandbox_int.h"
#include "forksrv.h"
#include "korch/instance.h"
#include "korch/log.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---------------------------------------------------------------- which */

bool korch_sandbox_forkable(const sandbox_launcher_t *l, const korch_launch_t *req)
{
    char *const *a = req->spec->argv;
    if (!l->o.fork || !l->drop || l->o.network || korch_pkgs_wheelhouse(&l->base))
        return false; /* root (the template makes namespaces and uids), no network, no packages */
    if (!a || !a[0] || a[0][0] != '/' || !a[1] || !a[2] || strcmp(a[1], "-m") != 0 ||
        strcmp(a[2], "ipykernel_launcher") != 0)
        return false;
    const char *base = strrchr(a[0], '/') + 1;
    if (strncmp(base, "python3", 7) != 0)
        return false;
    /* what would change the imports themselves (and packages' bootstrap, which
       is another argv): such a kernelspec starts as before */
    const char *k;
    json_t *v;
    json_object_foreach(req->spec->env, k, v) {
        if (strncmp(k, "PYTHON", 6) == 0 || strncmp(k, "LD_", 3) == 0 || !json_is_string(v))
            return false;
    }
    return true;
}

/* ---------------------------------------------------------------- templates */

static void s_tpl_key(const korch_launch_t *req, char *buf, size_t len)
{
    char *env = json_dumps(req->spec->env, JSON_COMPACT | JSON_SORT_KEYS);
    size_t n = (size_t)snprintf(buf, len, "%s|%s", req->spec->name, env ? env : "");
    for (char *const *a = req->spec->argv; *a && n < len; a++)
        n += (size_t)snprintf(buf + n, len - n, "|%s", *a);
    free(env);
}

static void s_send_waiting(sandbox_launcher_t *l, korch_forksrv_t *srv);

static void s_on_tpl(korch_forksrv_t *srv, void *arg) { s_send_waiting(arg, srv); }

/* The template of req's kernelspec: a live one, a dead one made again, or a new one. */
static korch_forksrv_t *s_template(sandbox_launcher_t *l, const korch_launch_t *req, korch_err_t *err)
{
    char key[2048];
    s_tpl_key(req, key, sizeof key);
    int free_slot = -1;
    for (int i = 0; i < S_TEMPLATES; i++) {
        if (l->tpl[i] && strcmp(korch_forksrv_key(l->tpl[i]), key) == 0) {
            korch_forksrv_check(l->tpl[i]);
            return korch_forksrv_restart(l->tpl[i], err) == KORCH_OK ? l->tpl[i] : NULL;
        }
        if (!l->tpl[i] && free_slot < 0)
            free_slot = i;
    }
    if (free_slot < 0) {
        korch_err_set(err, KORCH_E_LAUNCH, "no room for another kernel template (%d kernelspecs have one)", S_TEMPLATES);
        return NULL;
    }
    char base[PATH_MAX], mpl[PATH_MAX + 16];
    const char *mpl_dir = NULL;
    if (korch_runtime_base(base, sizeof base, NULL) == KORCH_OK) {
        snprintf(mpl, sizeof mpl, "%s/fork-mpl", base); /* its font cache, kept across templates */
        if (mkdir(mpl, 0700) == 0 || errno == EEXIST)
            mpl_dir = mpl;
    }
    size_t n = json_object_size(req->spec->env), i = 0;
    char **env = calloc(n + 1, sizeof *env);
    const char *k;
    json_t *v;
    json_object_foreach(req->spec->env, k, v) {
        if (env && asprintf(&env[i], "%s=%s", k, json_string_value(v)) >= 0)
            i++;
    }
    korch_forksrv_opts_t o = {.python = req->spec->argv[0], .key = key, .name = req->spec->name, .mpl_dir = mpl_dir,
                              .env = (const char *const *)env};
    l->tpl[free_slot] = env ? korch_forksrv_new(l->base.loop, &o, s_on_tpl, l, err) : NULL;
    if (!env)
        korch_err_set(err, KORCH_E_NOMEM, "out of memory");
    korch_spawn_strv_free(env);
    return l->tpl[free_slot];
}

korch_rc_t korch_sandbox_warm(korch_launcher_t *self, const korch_kernelspec_t *spec, korch_err_t *err)
{
    sandbox_launcher_t *l = (sandbox_launcher_t *)self;
    korch_launch_t req = {.spec = spec};
    if (!korch_sandbox_forkable(l, &req))
        return KORCH_OK;
    return s_template(l, &req, err) ? KORCH_OK : (err ? err->rc : KORCH_E_LAUNCH);
}

void korch_sandbox_fork_free_all(sandbox_launcher_t *l)
{
    if (l->busy_timer >= 0)
        korch_loop_timer_end(l->base.loop, l->busy_timer);
    l->busy_timer = -1;
    for (int i = 0; i < S_TEMPLATES; i++)
        korch_forksrv_destroy(&l->tpl[i]);
}

/* ---------------------------------------------------------------- status */

static void s_unpoll(sandbox_proc_t *p)
{
    if (p->status_polled)
        korch_loop_poller_end(p->base.launcher->loop, p->status_fd);
    p->status_polled = false;
}

static void s_fail_start(sandbox_proc_t *p, const char *why)
{
    korch_op_t *op = p->op;
    p->op = NULL;
    korch_err_t e = {0};
    korch_sandbox_log_tail(&p->base);
    korch_err_set(&e, KORCH_E_LAUNCH, "cannot start the forked kernel '%s': %s%s%.300s", p->spec_name, why,
                  p->tail[0] ? "; its log: " : "", p->tail);
    korch_op_finish_proc(op, &p->base, e.rc, &e); /* frees p (proc_free) */
}

/* false when the line failed the start (p is freed) */
static bool s_line(sandbox_proc_t *p, char *line)
{
    if (strncmp(line, "init ", 5) == 0) {
        p->init_pid = (pid_t)strtol(line + 5, NULL, 10);
    } else if (strcmp(line, "ok") == 0) {
        p->confined = true;
    } else if (strncmp(line, "exit ", 5) == 0) {
        p->exit_status = (int)strtol(line + 5, NULL, 10);
        p->exit_seen = true;
    } else if (strncmp(line, "error ", 6) == 0 && p->op) {
        s_fail_start(p, line + 6);
        return false;
    }
    return true;
}

static void s_wait_for(sandbox_proc_t *p, korch_forksrv_t *srv);
static void s_busy(sandbox_launcher_t *l);
static void s_pending_clear(sandbox_proc_t *p);
static int s_on_status(korch_loop_t *loop, int fd, void *arg);

/* The request reached a template that died before it forked (nothing came
   back): once more, with a new status pipe, to that template made again. */
static bool s_again(sandbox_proc_t *p)
{
    korch_forksrv_t *srv = p->sent_to;
    int st[2];
    if (p->retried || !srv || !p->pending || korch_forksrv_check(srv) || pipe2(st, O_CLOEXEC) != 0)
        return false;
    p->retried = true;
    korch_err_t e = {0};
    if (korch_forksrv_restart(srv, &e) != KORCH_OK ||
        korch_loop_poller(p->base.launcher->loop, st[0], s_on_status, p) != 0) {
        close(st[0]);
        close(st[1]);
        return false;
    }
    close(p->status_fd);
    p->status_fd = st[0];
    p->status_polled = true;
    p->pending_fds[0] = st[1];
    p->slen = 0;
    s_wait_for(p, srv);
    return true;
}

/* The status pipe: lines while it runs, EOF at its end. */
static int s_on_status(korch_loop_t *loop, int fd, void *arg)
{
    sandbox_proc_t *p = arg;
    ssize_t n = read(fd, p->sbuf + p->slen, sizeof p->sbuf - 1 - p->slen);
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
        return 0;
    if (n > 0) {
        p->slen += (size_t)n;
        p->sbuf[p->slen] = 0;
        char *nl;
        while ((nl = strchr(p->sbuf, '\n'))) {
            *nl = 0;
            if (!s_line(p, p->sbuf))
                return 0; /* the op failed: p is gone */
            size_t rest = p->slen - (size_t)(nl + 1 - p->sbuf);
            memmove(p->sbuf, nl + 1, rest + 1);
            p->slen = rest;
        }
        if (p->slen + 1 >= sizeof p->sbuf)
            p->slen = 0; /* a line that long is not ours */
        if (p->op && p->confined && p->init_pid > 0) {
            korch_op_t *op = p->op;
            p->op = NULL;
            s_pending_clear(p);
            korch_logpipe_watch(p->log, loop);
            korch_op_finish_proc(op, &p->base, KORCH_OK, NULL);
        }
        return 0;
    }
    /* EOF (or an error): A is gone, so is the kernel */
    s_unpoll(p);
    if (p->op && !p->init_pid && s_again(p))
        return 0; /* its template died with the request: asked again */
    if (p->op) {
        s_fail_start(p, "it ended before it was confined");
        return 0;
    }
    korch_cgroup_kill_now(p->cg);
    korch_logpipe_drain(p->log);
    char why[256];
    int st = p->exit_seen ? p->exit_status : (SIGKILL & 0x7f); /* no word from A: it was killed */
    int code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    int sig = WIFSIGNALED(st) ? WTERMSIG(st) : (code > 128 && code < 128 + 65 ? code - 128 : 0);
    if (sig == SIGKILL && p->l->o.memory > 0 && korch_cgroup_oom_killed(p->cg)) {
        char lim[32];
        korch_human_bytes(p->l->o.memory, lim, sizeof lim);
        snprintf(why, sizeof why, "out of memory (limit %s)", lim);
    } else if (sig) {
        snprintf(why, sizeof why, "killed by signal %d (%s)", sig, strsignal(sig));
    } else {
        korch_spawn_describe(st, why, sizeof why);
    }
    korch_backend_exited(&p->base, why);
    return 0;
}

/* ---------------------------------------------------------------- start */

static void s_pending_clear(sandbox_proc_t *p)
{
    for (int i = 0; i < p->npending; i++)
        if (p->pending_fds[i] >= 0)
            close(p->pending_fds[i]);
    p->npending = 0;
    json_decref(p->pending);
    p->pending = NULL;
}

static void s_unwait(sandbox_proc_t *p)
{
    for (sandbox_proc_t **w = &p->l->waiting; *w; w = &(*w)->next_wait)
        if (*w == p) {
            *w = p->next_wait;
            break;
        }
    p->next_wait = NULL;
    p->srv = NULL;
}

static korch_rc_t s_send(sandbox_proc_t *p, korch_forksrv_t *srv, korch_err_t *err)
{
    korch_rc_t rc = korch_forksrv_send(srv, p->pending, p->pending_fds, p->npending, err);
    if (!rc) { /* the template has its copies: the status pipe's write end is no longer ours */
        close(p->pending_fds[0]);
        p->pending_fds[0] = -1;
        p->sent_to = srv; /* the rest is kept until it is confined, to ask again if the template dies meanwhile */
    }
    return rc;
}

static void s_wait_for(sandbox_proc_t *p, korch_forksrv_t *srv)
{
    sandbox_proc_t **w = &p->l->waiting;
    while (*w)
        w = &(*w)->next_wait; /* at the end: first asked, first forked */
    p->srv = srv;
    p->next_wait = NULL;
    *w = p;
}

static int s_on_busy(korch_loop_t *loop, int timer_id, void *arg)
{
    sandbox_launcher_t *l = arg;
    l->busy_timer = -1;
    for (int i = 0; i < S_TEMPLATES; i++)
        if (l->tpl[i] && korch_forksrv_state(l->tpl[i]) == KORCH_FORKSRV_READY)
            s_send_waiting(l, l->tpl[i]);
    return 0;
}

/* A template's socket was full: try its waiting kernels again in a moment. */
static void s_busy(sandbox_launcher_t *l)
{
    if (l->busy_timer < 0)
        l->busy_timer = korch_loop_timer(l->base.loop, 5, 1, s_on_busy, l);
}

static void s_send_waiting(sandbox_launcher_t *l, korch_forksrv_t *srv)
{
    bool again = true;
    while (again) { /* a failed op frees its proc: walk from the head again */
        again = false;
        for (sandbox_proc_t *p = l->waiting; p; p = p->next_wait) {
            if (p->srv != srv)
                continue;
            korch_err_t e = {0};
            korch_rc_t rc = korch_forksrv_state(srv) == KORCH_FORKSRV_READY
                                ? s_send(p, srv, &e)
                                : korch_err_set(&e, KORCH_E_LAUNCH, "%s", korch_forksrv_why(srv));
            if (rc == KORCH_E_TIMEOUT) { /* its socket is full: the rest waits for the timer */
                s_busy(l);
                return;
            }
            s_unwait(p);
            if (rc) {
                s_pending_clear(p);
                s_fail_start(p, e.msg);
            }
            again = true;
            break;
        }
    }
}

static void s_hex(const unsigned char *b, size_t n, char *out)
{
    static const char d[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = d[b[i] >> 4];
        out[2 * i + 1] = d[b[i] & 15];
    }
    out[2 * n] = 0;
}

/* The request: who the kernel is and what its sandbox holds (forksrv.py's confine). */
static json_t *s_request(sandbox_launcher_t *l, sandbox_proc_t *p, const korch_launch_t *req,
                         const korch_sandbox_fork_t *f, int ncg)
{
    json_t *r = json_object(), *etc = json_array(), *env = json_array(), *argv = json_array();
    for (int i = 0; korch_sandbox_etc[i]; i++)
        json_array_append_new(etc, json_string(korch_sandbox_etc[i]));
    for (char **e = f->env; e && *e; e++)
        json_array_append_new(env, json_string(*e));
    json_array_append_new(argv, json_string("ipykernel_launcher"));
    for (char *const *a = req->spec->argv + 3; *a; a++)
        json_array_append_new(argv, json_string(strcmp(*a, "{connection_file}") == 0 ? S_CONN_IN : *a));
    /* IPython's history in memory: its file would live in the sandbox's /tmp,
       gone with the kernel anyway, and its first commit costs an fsync */
    json_array_append_new(argv, json_string("--HistoryManager.hist_file=:memory:"));
    if (l->bpf && !l->bpf_hex && (l->bpf_hex = malloc(2 * l->bpf_len + 1)))
        s_hex(l->bpf, l->bpf_len, l->bpf_hex);
    json_object_set_new(r, "uid", json_integer(p->uid));
    json_object_set_new(r, "gid", json_integer(p->gid));
    json_object_set_new(r, "scratch", json_string("/tmp"));
    json_object_set_new(r, "etc", etc);
    json_object_set_new(r, "passwd", json_string(f->passwd));
    json_object_set_new(r, "group", json_string(f->group));
    json_object_set_new(r, "hosts", json_string(f->hosts));
    json_object_set_new(r, "tmp_size", json_integer(l->o.tmp_size));
    json_object_set_new(r, "conn", json_string(f->conn));
    json_object_set_new(r, "workdir_mount", json_string(l->o.workdir_mount));
    json_object_set_new(r, "runtime_mount", json_string(l->o.runtime_mount));
    json_object_set_new(r, "env", env);
    json_object_set_new(r, "argv", argv);
    json_object_set_new(r, "seccomp", json_string(l->bpf_hex ? l->bpf_hex : ""));
    /* fds: status, log, the request (a memfd of this JSON), work, runtime, [spec], cgroup.procs... */
    int at = 3;
    json_object_set_new(r, "fd_work", json_integer(at++));
    json_object_set_new(r, "fd_runtime", json_integer(at++));
    if (f->spec_fd >= 0) {
        json_object_set_new(r, "fd_spec", json_integer(at++));
        json_object_set_new(r, "spec_dir", json_string(req->spec->dir));
    }
    json_object_set_new(r, "fd_cgroup", json_integer(at));
    json_object_set_new(r, "cgroups", json_integer(ncg));
    return r;
}

static void s_cancel(korch_op_t *op, void *arg)
{
    sandbox_proc_t *p = arg;
    p->op = NULL;
    korch_sandbox_proc_free(&p->base);
}

korch_rc_t korch_sandbox_fork_start(sandbox_launcher_t *l, sandbox_proc_t *p, const korch_launch_t *req,
                                    const korch_sandbox_fork_t *f, korch_op_t *op, korch_err_t *err)
{
    int st[2] = {-1, -1}, log_w = -1;
    korch_rc_t rc = KORCH_OK;
    korch_forksrv_t *srv = s_template(l, req, err);
    if (!srv)
        return err ? err->rc : KORCH_E_LAUNCH;
    snprintf(p->spec_name, sizeof p->spec_name, "%s", req->spec->name);
    if (pipe2(st, O_CLOEXEC) != 0)
        return korch_err_set(err, KORCH_E_LAUNCH, "cannot prepare the forked kernel: %s", strerror(errno));
    if (!(p->log = korch_logpipe_new((size_t)l->o.log_max, &log_w, err))) {
        rc = err ? err->rc : KORCH_E_NOMEM;
        goto out;
    }
    const int *cg = korch_cgroup_procs_fds(p->cg);
    int ncg = 0;
    while (cg && cg[ncg] >= 0)
        ncg++;
    /* the request travels in a memfd the template never reads (forksrv.py):
       a kernel's key and environment never enter the memory its later forks inherit */
    json_t *rj = s_request(l, p, req, f, ncg);
    char *text = rj ? json_dumps(rj, JSON_COMPACT) : NULL;
    json_decref(rj);
    int req_fd = text ? korch_sandbox_memfd("korch-fork-request", text, strlen(text)) : -1;
    if (text) {
        explicit_bzero(text, strlen(text));
        free(text);
    }
    if (req_fd < 0) {
        rc = korch_err_set(err, KORCH_E_LAUNCH, "cannot prepare the forked kernel's request: %s", strerror(errno));
        goto out;
    }
    int src[S_PENDING_FDS], n = 0;
    src[n++] = st[1];
    src[n++] = log_w;
    src[n++] = req_fd;
    src[n++] = f->work_fd;
    src[n++] = f->runtime_fd;
    if (f->spec_fd >= 0)
        src[n++] = f->spec_fd;
    for (int i = 0; i < ncg && n < S_PENDING_FDS; i++)
        src[n++] = cg[i];
    for (int i = 0; i < n; i++) {
        if ((p->pending_fds[i] = fcntl(src[i], F_DUPFD_CLOEXEC, 3)) < 0) {
            close(req_fd);
            rc = korch_err_set(err, KORCH_E_LAUNCH, "cannot prepare the forked kernel: %s", strerror(errno));
            goto out;
        }
        p->npending = i + 1;
    }
    close(req_fd);
    if (!(p->pending = json_pack("{s:s}", "fork", "1"))) {
        rc = korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        goto out;
    }
    p->forked = true;
    p->status_fd = st[0];
    st[0] = -1;
    if (korch_loop_poller(l->base.loop, p->status_fd, s_on_status, p) != 0) {
        rc = korch_err_set(err, KORCH_E_LAUNCH, "cannot watch the forked kernel");
        goto out;
    }
    p->status_polled = true;
    bool queued = false;
    for (sandbox_proc_t *w = l->waiting; w; w = w->next_wait)
        queued = queued || w->srv == srv; /* others wait for it: behind them */
    if (korch_forksrv_state(srv) == KORCH_FORKSRV_READY && !queued) {
        rc = s_send(p, srv, err);
        if (rc && korch_forksrv_state(srv) == KORCH_FORKSRV_DEAD) /* killed, not seen yet: made again */
            rc = korch_forksrv_restart(srv, err);
        if (rc == KORCH_E_TIMEOUT) { /* busy: in a moment */
            rc = KORCH_OK;
            queued = true;
            s_busy(l);
        }
    }
    if (!rc && (queued || korch_forksrv_state(srv) != KORCH_FORKSRV_READY)) /* importing, or busy: after that */
        s_wait_for(p, srv);
    if (rc)
        goto out;
    p->op = op;
    korch_op_on_cancel(op, s_cancel, p);
    korch_debug("forking kernel '%s' from its template (pid %d): uid %u, cgroup v%d", req->spec->name,
                (int)korch_forksrv_pid(srv), (unsigned)p->uid, korch_cgroup_version(p->cg));
out:
    if (rc) {
        korch_sandbox_fork_release(p);
        p->forked = false;
    }
    for (int i = 0; i < 2; i++)
        if (st[i] >= 0)
            close(st[i]);
    if (log_w >= 0)
        close(log_w);
    return rc;
}

/* ---------------------------------------------------------------- life */

void korch_sandbox_fork_release(sandbox_proc_t *p)
{
    s_unwait(p);
    s_unpoll(p);
    s_pending_clear(p);
    if (p->status_fd >= 0)
        close(p->status_fd);
    p->status_fd = -1;
}

void korch_sandbox_fork_kill(sandbox_proc_t *p)
{
    if (p->init_pid > 0) {
        kill(-p->init_pid, SIGKILL);
        kill(p->init_pid, SIGKILL);
    }
    korch_cgroup_kill_now(p->cg);
}
