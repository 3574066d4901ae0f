/*  Kernel templates (forksrv.h): spawning src/launcher/forksrv.py, its
 *  ready message, fork requests with their fds, its end. */
#include "forksrv.h"
#include "logpipe.h"
#include "spawn.h"
#include "korch/log.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

/* forksrv.py, embedded by forksrv_py.S (NUL-terminated, the NUL not counted). */
extern const char korch_forksrv_py[], korch_forksrv_py_end[];

#define S_FDS_MAX 16
#define S_ROTATE_FORKS 100 /* a template is made again after this many forks (KORCH_FORK_ROTATE; 0 never) */
#define S_ROTATE_S 3600    /* or this many seconds after it was ready (KORCH_FORK_ROTATE_S; 0 never) */
#define S_DEFAULT_IMPORTS "numpy,pandas,matplotlib,matplotlib.pyplot,ipykernel.kernelapp,ipykernel.ipkernel," \
                          "ipykernel.zmqshell"
/* The interpreter reads its program from fd argv[5] (a memfd), so ps shows "korch-template NAME". */
#define S_BOOT "import os,sys;exec(compile(os.pread(int(sys.argv[5]),1<<20,0),'forksrv.py','exec'))"

/* One template process: its pid, its end of the control socket, its log. */
typedef struct {
    korch_child_t child;        /* pid -1: none */
    int ctrl;
    bool polled;                /* ctrl on the loop */
    korch_logpipe_t *log;
} s_proc_t;

struct korch_forksrv {
    korch_loop_t *loop;
    korch_forksrv_state_t state;
    korch_forksrv_fn *fn;
    void *arg;
    char *key;
    char name[128];
    char *python, *imports, *mpl_dir;
    char **env;                 /* the opts' env, copied */
    s_proc_t cur;               /* the template that serves (or imports, STARTING) */
    s_proc_t next;              /* its successor while that one imports (a rotation) */
    s_proc_t old;               /* the one it replaced, forking what it was sent before it ends */
    int life[2];                /* the lifeline: its ends, made once (what a template forked keeps the read
                                   end across its template's restarts and rotations: it dies with korch, or destroy) */
    unsigned forks, gen_forks;  /* forked in all; by the current process */
    int64_t born_ms;            /* when the current process was ready */
    unsigned rotate_forks, rotate_s, rotations;
    char why[512];
};

korch_forksrv_state_t korch_forksrv_state(const korch_forksrv_t *s) { return s->state; }
const char *korch_forksrv_why(const korch_forksrv_t *s) { return s->why; }
const char *korch_forksrv_key(const korch_forksrv_t *s) { return s->key; }
pid_t korch_forksrv_pid(const korch_forksrv_t *s) { return s->cur.child.pid; }
unsigned korch_forksrv_forks(const korch_forksrv_t *s) { return s->forks; }
unsigned korch_forksrv_rotations(const korch_forksrv_t *s) { return s->rotations; }

static void s_proc_init(s_proc_t *p)
{
    korch_child_init(&p->child);
    p->ctrl = -1;
    p->polled = false;
    p->log = NULL;
}

static void s_unpoll(korch_forksrv_t *s, s_proc_t *p)
{
    if (p->polled)
        korch_loop_poller_end(s->loop, p->ctrl);
    p->polled = false;
}

static void s_stop_polling(korch_forksrv_t *s) { s_unpoll(s, &s->cur); }

/* What a template process leaves: reaped (it is dead or killed now), closed. */
static void s_proc_release(korch_forksrv_t *s, s_proc_t *p)
{
    s_unpoll(s, p);
    korch_child_unwatch(&p->child);
    if (p->ctrl >= 0)
        close(p->ctrl);
    p->ctrl = -1;
    if (p->child.pid > 0 && !p->child.reaped) {
        kill(p->child.pid, SIGKILL);
        korch_child_reap(&p->child, true); /* killed: ends at once */
    }
    korch_child_close(&p->child);
    korch_logpipe_destroy(&p->log);
    s_proc_init(p);
}

/* Dead (once): say why, with the last words of its log. */
static void s_dead(korch_forksrv_t *s, const char *why)
{
    if (s->state == KORCH_FORKSRV_DEAD)
        return;
    s->state = KORCH_FORKSRV_DEAD;
    s_stop_polling(s);
    char tail[256] = "";
    korch_logpipe_drain(s->cur.log);
    korch_logpipe_tail(s->cur.log, tail, sizeof tail);
    for (char *c = tail; *c; c++)
        if (*c == '\n')
            *c = ' ';
    snprintf(s->why, sizeof s->why, "the kernel template of '%s' %s%s%.200s", s->name, why, tail[0] ? ": " : "",
             tail);
    korch_debug("%s", s->why);
    if (s->fn)
        s->fn(s, s->arg);
}

static void s_ended(void *arg)
{
    korch_forksrv_t *s = arg;
    char st[64];
    korch_spawn_describe(s->cur.child.status, st, sizeof st);
    s_dead(s, st);
}

static int64_t s_env_num(const char *name, int64_t dflt)
{
    const char *v = getenv(name);
    char *end = NULL;
    long long n = v && *v ? strtoll(v, &end, 10) : -1;
    return n >= 0 && end && !*end ? n : dflt;
}

/* The successor could not be made: the current one serves on (another try after a period). */
static void s_next_failed(korch_forksrv_t *s, const char *why)
{
    char tail[256] = "";
    korch_logpipe_drain(s->next.log);
    korch_logpipe_tail(s->next.log, tail, sizeof tail);
    for (char *c = tail; *c; c++)
        if (*c == '\n')
            *c = ' ';
    korch_notice("the next kernel template of '%s' %s%s%.200s; the current one serves on", s->name, why,
                 tail[0] ? ": " : "", tail);
    s_proc_release(s, &s->next);
    s->born_ms = korch_now_ms();
    s->gen_forks = 0;
}

static void s_next_ended(void *arg)
{
    korch_forksrv_t *s = arg;
    char st[64];
    korch_spawn_describe(s->next.child.status, st, sizeof st);
    s_next_failed(s, st);
}

/* The one replaced has forked all it was sent and ended. */
static void s_old_ended(void *arg)
{
    korch_forksrv_t *s = arg;
    korch_debug("the retired kernel template of '%s' (pid %d) has ended", s->name, (int)s->old.child.pid);
    s_proc_release(s, &s->old);
}

static void s_ended(void *arg);

/* The successor is ready: it serves from now on; the current one is sent
   nothing more (its socket closed: it forks what it holds, then ends). */
static void s_swap(korch_forksrv_t *s)
{
    if (s->old.child.pid > 0)
        s_proc_release(s, &s->old); /* one retired before still running: killed (its kernels live on) */
    pid_t was = s->cur.child.pid;
    if (s->cur.child.reaped) { /* it died meanwhile (DEAD): nothing to drain */
        s_proc_release(s, &s->cur);
    } else {
        s_unpoll(s, &s->cur);
        korch_child_unwatch(&s->cur.child);
        if (s->cur.ctrl >= 0)
            close(s->cur.ctrl);
        s->cur.ctrl = -1;
        s->old = s->cur;
        korch_child_watch(&s->old.child, s->loop, s_old_ended, s);
    }
    korch_child_unwatch(&s->next.child);
    s->cur = s->next;
    korch_child_watch(&s->cur.child, s->loop, s_ended, s);
    s_proc_init(&s->next);
    korch_notice("the kernel template of '%s' was made again after %u forks (pid %d, was %d): a new address-space "
                 "layout and hash seed for the kernels forked from now on", s->name, s->gen_forks,
                 (int)s->cur.child.pid, (int)was);
    s->rotations++;
    s->gen_forks = 0;
    s->born_ms = korch_now_ms();
    s->state = KORCH_FORKSRV_READY;
    if (s->fn)
        s->fn(s, s->arg);
}

/* Its one message: {"ready": [modules], "pid": N} or {"error": "..."}. */
static int s_on_ctrl(korch_loop_t *loop, int fd, void *arg)
{
    korch_forksrv_t *s = arg;
    bool next = fd == s->next.ctrl;
    char buf[4096];
    ssize_t n = recv(fd, buf, sizeof buf - 1, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return 0;
    if (n <= 0) {
        if (next)
            s_next_failed(s, "closed its socket");
        else
            s_dead(s, "closed its socket");
        return 0;
    }
    buf[n] = 0;
    json_t *m = json_loads(buf, 0, NULL);
    const char *err = json_string_value(json_object_get(m, "error"));
    if (next) {
        bool ready = json_is_array(json_object_get(m, "ready"));
        char why[300];
        snprintf(why, sizeof why, "failed: %.250s", err ? err : "sent what korch did not ask for");
        json_decref(m);
        if (ready)
            s_swap(s);
        else
            s_next_failed(s, why);
        return 0;
    }
    if (s->state == KORCH_FORKSRV_STARTING && json_is_array(json_object_get(m, "ready"))) {
        s->state = KORCH_FORKSRV_READY;
        s->born_ms = korch_now_ms();
        s->gen_forks = 0;
        char *mods = json_dumps(json_object_get(m, "ready"), JSON_COMPACT);
        korch_debug("kernel template of '%s' ready (pid %d): %s", s->name, (int)s->cur.child.pid, mods ? mods : "");
        free(mods);
        json_decref(m);
        if (s->fn)
            s->fn(s, s->arg);
        return 0;
    }
    char why[300];
    snprintf(why, sizeof why, "failed: %.250s", err ? err : "it sent what korch did not ask for");
    json_decref(m);
    if (s->cur.child.pid > 0)
        kill(s->cur.child.pid, SIGKILL);
    s_dead(s, why);
    return 0;
}

static int s_memfd(const char *text, size_t len)
{
    int fd = memfd_create("korch-forksrv.py", MFD_CLOEXEC);
    if (fd < 0)
        return -1;
    for (size_t off = 0; off < len;) {
        ssize_t w = write(fd, text + off, len - off);
        if (w <= 0) {
            close(fd);
            return -1;
        }
        off += (size_t)w;
    }
    return fd;
}

static char *s_dup(const char *v) { return v ? strdup(v) : NULL; }

/* Spawn the template process (s is not running one). */
/* Spawn a template process into p (the current one, or the next of a rotation). */
static korch_rc_t s_spawn_proc(korch_forksrv_t *s, s_proc_t *p, korch_err_t *err)
{
    int sv[2] = {-1, -1}, src = -1, log_w = -1;
    char **env = NULL;
    korch_rc_t rc = KORCH_OK;
    s_proc_init(p);
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0 ||
        (src = s_memfd(korch_forksrv_py, (size_t)(korch_forksrv_py_end - korch_forksrv_py))) < 0) {
        rc = korch_err_set(err, KORCH_E_LAUNCH, "cannot make the kernel template's channels: %s", strerror(errno));
        goto out;
    }
    if (!(p->log = korch_logpipe_new(16384, &log_w, err))) {
        rc = err ? err->rc : KORCH_E_NOMEM;
        goto out;
    }
    /* Its environment: no korch secret, one BLAS thread (a thread would not
       survive the fork), the inline backend matplotlib reads at import. */
    size_t ne = 0, cap = 16;
    for (char **e = s->env; e && *e; e++)
        cap++;
    env = calloc(cap + 1, sizeof *env);
    const char *fixed[] = {"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8", "HOME=/nonexistent",
                           "OPENBLAS_NUM_THREADS=1", "OMP_NUM_THREADS=1", "MKL_NUM_THREADS=1",
                           "NUMEXPR_NUM_THREADS=1", "MPLBACKEND=module://matplotlib_inline.backend_inline",
                           "PYDEVD_DISABLE_FILE_VALIDATION=1", NULL};
    bool ok = env != NULL;
    for (int i = 0; ok && fixed[i]; i++)
        ok = (env[ne++] = strdup(fixed[i])) != NULL;
    if (ok && s->mpl_dir && asprintf(&env[ne++], "MPLCONFIGDIR=%s", s->mpl_dir) < 0)
        ok = false, env[--ne] = NULL;
    for (char **e = s->env; ok && e && *e && ne < cap; e++)
        ok = (env[ne++] = strdup(*e)) != NULL;
    if (!ok) {
        rc = korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        goto out;
    }
    char fd_ctrl[16], fd_life[16], fd_src[16];
    snprintf(fd_ctrl, sizeof fd_ctrl, "%d", sv[1]);
    snprintf(fd_life, sizeof fd_life, "%d", s->life[0]);
    snprintf(fd_src, sizeof fd_src, "%d", src);
    char *argv[] = {s->python, "-I", "-c", S_BOOT, "korch-template", s->name, fd_ctrl, fd_life, fd_src, NULL};
    int keep[] = {sv[1], s->life[0], src, -1};
    char what[200];
    snprintf(what, sizeof what, "the kernel template of '%s'", s->name);
    korch_spawn_t sp = {.what = what, .argv = argv, .envp = env, .out_fd = log_w, .keep_fds = keep,
                        .new_session = true};
    int pidfd = -1;
    rc = korch_spawn(&sp, &p->child.pid, &pidfd, err);
    if (rc)
        goto out;
    p->child.pidfd = pidfd;
    p->ctrl = sv[0];
    sv[0] = -1;
    int sndbuf = 1 << 20; /* a burst's requests queue here while it forks (capped by wmem_max) */
    setsockopt(p->ctrl, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
    /* what to import: the first message */
    const char *imports = s->imports ? s->imports : getenv("KORCH_FORK_IMPORTS");
    json_t *first = json_object();
    json_t *mods = json_array();
    char *list = strdup(imports && *imports ? imports : S_DEFAULT_IMPORTS);
    for (char *save = NULL, *m = list ? strtok_r(list, ",", &save) : NULL; m; m = strtok_r(NULL, ",", &save))
        json_array_append_new(mods, json_string(m));
    free(list);
    json_object_set_new(first, "imports", mods);
    const char *reh = getenv("KORCH_FORK_REHEARSE"); /* 0: no rehearsal of a kernel's start (to measure it) */
    json_object_set_new(first, "rehearse", json_boolean(!reh || strcmp(reh, "0") != 0));
    const char *kshell = getenv("KORCH_FORK_KEEP_SHELL"); /* 0: each fork makes its own IPython shell (to measure) */
    json_object_set_new(first, "keep_shell", json_boolean(!kshell || strcmp(kshell, "0") != 0));
    char *text = json_dumps(first, JSON_COMPACT);
    json_decref(first);
    ssize_t w = text ? send(p->ctrl, text, strlen(text), MSG_DONTWAIT | MSG_NOSIGNAL) : -1;
    free(text);
    if (w <= 0) {
        rc = korch_err_set(err, KORCH_E_LAUNCH, "cannot talk to the kernel template: %s", strerror(errno));
        goto out;
    }
    korch_logpipe_watch(p->log, s->loop);
    korch_child_watch(&p->child, s->loop, p == &s->next ? s_next_ended : s_ended, s);
    if (korch_loop_poller(s->loop, p->ctrl, s_on_ctrl, s) == 0)
        p->polled = true;
    korch_debug("started the kernel template of '%s' (pid %d)", s->name, (int)p->child.pid);
out:
    korch_spawn_strv_free(env);
    for (int i = 0; i < 2; i++)
        if (sv[i] >= 0)
            close(sv[i]);
    if (src >= 0)
        close(src);
    if (log_w >= 0)
        close(log_w);
    if (rc)
        s_proc_release(s, p);
    return rc;
}

static korch_rc_t s_spawn(korch_forksrv_t *s, korch_err_t *err)
{
    s->state = KORCH_FORKSRV_STARTING;
    s->why[0] = 0;
    korch_rc_t rc = s_spawn_proc(s, &s->cur, err);
    if (rc) {
        s->state = KORCH_FORKSRV_DEAD;
        snprintf(s->why, sizeof s->why, "%.400s", err ? err->msg : "cannot start the kernel template");
    }
    return rc;
}

/* Every process of it released: reaped (killed when alive), closed. */
static void s_release(korch_forksrv_t *s)
{
    s_proc_release(s, &s->next);
    s_proc_release(s, &s->old);
    s_proc_release(s, &s->cur);
}

korch_forksrv_t *korch_forksrv_new(korch_loop_t *loop, const korch_forksrv_opts_t *o, korch_forksrv_fn *fn, void *arg,
                                   korch_err_t *err)
{
    korch_forksrv_t *s = calloc(1, sizeof *s);
    if (!s) {
        korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        return NULL;
    }
    *s = (korch_forksrv_t){.loop = loop, .fn = fn, .arg = arg, .life = {-1, -1}};
    s_proc_init(&s->cur);
    s_proc_init(&s->next);
    s_proc_init(&s->old);
    s->rotate_forks = o->rotate_forks ? o->rotate_forks : (unsigned)s_env_num("KORCH_FORK_ROTATE", S_ROTATE_FORKS);
    s->rotate_s = o->rotate_s ? o->rotate_s : (unsigned)s_env_num("KORCH_FORK_ROTATE_S", S_ROTATE_S);
    snprintf(s->name, sizeof s->name, "%s", o->name ? o->name : "kernel");
    size_t n = 0;
    while (o->env && o->env[n])
        n++;
    s->env = calloc(n + 1, sizeof *s->env);
    bool ok = s->env && (s->key = strdup(o->key ? o->key : "")) && (s->python = strdup(o->python)) &&
              (!o->imports || (s->imports = strdup(o->imports))) && (!o->mpl_dir || (s->mpl_dir = s_dup(o->mpl_dir)));
    for (size_t i = 0; ok && i < n; i++)
        ok = (s->env[i] = strdup(o->env[i])) != NULL;
    if (ok && pipe2(s->life, O_CLOEXEC) != 0) {
        korch_err_set(err, KORCH_E_LAUNCH, "cannot make the kernel template's lifeline: %s", strerror(errno));
        korch_forksrv_destroy(&s);
        return NULL;
    }
    if (!ok) {
        korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        korch_forksrv_destroy(&s);
        return NULL;
    }
    if (s_spawn(s, err) != KORCH_OK)
        korch_forksrv_destroy(&s);
    return s;
}

bool korch_forksrv_check(korch_forksrv_t *s)
{
    if (s->state != KORCH_FORKSRV_DEAD && s->cur.child.pid > 0 && korch_child_reap(&s->cur.child, false)) {
        s->state = KORCH_FORKSRV_DEAD;
        s_stop_polling(s);
        snprintf(s->why, sizeof s->why, "the kernel template of '%s' is gone", s->name);
    }
    return s->state != KORCH_FORKSRV_DEAD;
}

korch_rc_t korch_forksrv_restart(korch_forksrv_t *s, korch_err_t *err)
{
    if (s->state != KORCH_FORKSRV_DEAD)
        return KORCH_OK;
    s_proc_release(s, &s->next); /* a retired one (old) goes on forking what it holds */
    s_proc_release(s, &s->cur);
    korch_notice("%s: making it again", s->why);
    return s_spawn(s, err);
}

/* Due (N forks, or T seconds since it was ready): a successor imports
   while this one serves on; s_swap when it is ready. */
static void s_rotate_if_due(korch_forksrv_t *s)
{
    if (s->next.child.pid > 0 || s->state != KORCH_FORKSRV_READY)
        return;
    bool by_forks = s->rotate_forks && s->gen_forks >= s->rotate_forks;
    bool by_age = s->rotate_s && korch_now_ms() - s->born_ms >= (int64_t)s->rotate_s * 1000;
    if (!by_forks && !by_age)
        return;
    korch_err_t e = {0};
    if (s_spawn_proc(s, &s->next, &e) != KORCH_OK)
        s_next_failed(s, e.msg);
    else
        korch_debug("making the kernel template of '%s' again (%s)", s->name, by_forks ? "forks" : "age");
}

korch_rc_t korch_forksrv_send(korch_forksrv_t *s, json_t *req, const int *fds, int nfds, korch_err_t *err)
{
    if (s->state != KORCH_FORKSRV_READY)
        return korch_err_set(err, KORCH_E_STATE, "%s", s->why[0] ? s->why : "the kernel template is not ready");
    if (nfds < 1 || nfds > S_FDS_MAX)
        return korch_err_set(err, KORCH_E_INVALID, "a fork request takes 1 to %d fds, not %d", S_FDS_MAX, nfds);
    char *text = json_dumps(req, JSON_COMPACT);
    if (!text)
        return korch_err_set(err, KORCH_E_NOMEM, "out of memory");
    struct iovec iov = {.iov_base = text, .iov_len = strlen(text)};
    union {
        char buf[CMSG_SPACE(sizeof(int) * S_FDS_MAX)];
        struct cmsghdr align;
    } u;
    memset(&u, 0, sizeof u);
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                        .msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds)};
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
    memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
    ssize_t w = sendmsg(s->cur.ctrl, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
    int e = errno;
    free(text);
    if (w < 0 && (e == EPIPE || e == ECONNRESET || e == ENOTCONN || e == ECONNREFUSED)) {
        /* gone before its end was seen: dead now (the watcher hears it from its pidfd, not from here) */
        s->state = KORCH_FORKSRV_DEAD;
        s_stop_polling(s);
        snprintf(s->why, sizeof s->why, "the kernel template of '%s' is gone", s->name);
    }
    if (w < 0 && (e == EAGAIN || e == EWOULDBLOCK || e == ENOBUFS))
        return korch_err_set(err, KORCH_E_TIMEOUT, "the kernel template of '%s' is busy", s->name);
    if (w < 0)
        return korch_err_set(err, KORCH_E_LAUNCH, "cannot send the fork request to the kernel template of '%s': %s",
                             s->name, strerror(e));
    s->forks++;
    s->gen_forks++;
    s_rotate_if_due(s);
    return KORCH_OK;
}

void korch_forksrv_destroy(korch_forksrv_t **ps)
{
    if (!ps || !*ps)
        return;
    korch_forksrv_t *s = *ps;
    *ps = NULL;
    s_release(s);
    for (int i = 0; i < 2; i++)
        if (s->life[i] >= 0)
            close(s->life[i]); /* what it forked sees EOF: those kernels go */
    korch_spawn_strv_free(s->env);
    free(s->key);
    free(s->python);
    free(s->imports);
    free(s->mpl_dir);
    free(s);
}
