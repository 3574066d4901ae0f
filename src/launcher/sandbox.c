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
#include "korch/sandbox.h"
#include "korch/env.h"
#include "korch/cgroup.h"
#include "korch/instance.h"
#include "korch/log.h"
#include "backend.h"
#include "spawn.h"

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

#define S_GIB (1024LL * 1024 * 1024)
#define S_MIB (1024LL * 1024)
#define S_CONN_IN "/tmp/korch-kernel.json" /* in the sandbox's private /tmp */
#define S_TAIL_MAX 4096
#define S_BIND_AT "/tmp" /* where the spawn helper binds the dirs bwrap mounts (in its own namespace) */
#define S_ARGS_MAX 160

typedef struct {
    korch_launcher_t base;
    korch_sandbox_opts_t o;
    char *strs[6];              /* owned copies of the option strings */
    char bwrap[PATH_MAX];
    uid_t uid;                  /* the kernel's */
    gid_t gid;
    bool drop;                  /* korch is root and the kernel is not: give up root before bwrap */
    unsigned seq;               /* makes cgroup names unique across restarts */
    char scope[32];             /* korch_cgroup_scope of the runtime base: cgroups in korch/{scope}/{instance} */
} sandbox_launcher_t;

typedef struct {
    korch_proc_t base;
    sandbox_launcher_t *l;
    korch_child_t child;        /* the outer bwrap */
    int info_fd;                /* bwrap's --info-fd, read end, until pid 1 is known */
    bool info_polled;           /* info_fd on the loop */
    char info[1024];            /* what bwrap wrote there so far */
    size_t info_len;
    pid_t init_pid;             /* host pid of the sandbox's pid 1, 0 = not known yet */
    korch_cgroup_t *cg;
    int log_fd;
    char workdir[PATH_MAX];     /* host path of the work dir, for messages */
    int work_fd;                /* the work dir (O_PATH), opened once: the kernel can rename and replace
                                   {runtime_dir}/work, so korch never resolves that path again */
    char tail[S_TAIL_MAX + 1];
} sandbox_proc_t;

void korch_sandbox_opts_init(korch_sandbox_opts_t *o)
{
    memset(o, 0, sizeof *o);
    o->workdir_mount = "/home/korch/work";
    o->runtime_mount = "/run/korch";
    o->memory = S_GIB;
    o->nano_cpus = 1000000000LL;
    o->pids_limit = 256;
    o->tmp_size = 256 * S_MIB;
}


/* ---------------------------------------------------------------- argv */

/* A growing argv of owned strings, bounded. */
typedef struct {
    char *v[S_ARGS_MAX + 1];
    int n;
    bool full;
} s_args_t;

static void s_arg(s_args_t *a, const char *s)
{
    if (a->n >= S_ARGS_MAX || !(a->v[a->n] = strdup(s))) {
        a->full = true;
        return;
    }
    a->n++;
}

static void s_args3(s_args_t *a, const char *x, const char *y, const char *z)
{
    s_arg(a, x);
    if (y)
        s_arg(a, y);
    if (z)
        s_arg(a, z);
}

static void s_arg_fd(s_args_t *a, const char *opt, int fd, const char *dest)
{
    char n[16];
    snprintf(n, sizeof n, "%d", fd);
    s_args3(a, opt, n, dest);
}

static void s_args_clear(s_args_t *a)
{
    for (int i = 0; i < a->n; i++)
        free(a->v[i]);
    a->n = 0;
}

/* The bits of /etc a kernel needs to run (the dynamic loader's cache,
   Debian's python and matplotlib config, fonts, time zone, mime types):
   read-only, when present. Not passwd/shadow/ssh/docker/apt credentials. */
static const char *const s_etc[] = {
    "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives", "/etc/localtime",
    "/etc/timezone", "/etc/mime.types", "/etc/fonts", "/etc/matplotlibrc", "/etc/python3", "/etc/python3.11",
    "/etc/R", "/etc/debian_version", "/etc/os-release", "/etc/magic", "/etc/ssl/openssl.cnf", NULL,
};

/* The top-level links of a merged-/usr system (/bin -> usr/bin ...) are
   recreated; a real directory there is bound read-only. */
static void s_root_links(s_args_t *a)
{
    static const char *const tops[] = {"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", NULL};
    for (int i = 0; tops[i]; i++) {
        struct stat st;
        char target[PATH_MAX];
        if (lstat(tops[i], &st) != 0)
            continue;
        if (S_ISLNK(st.st_mode)) {
            ssize_t n = readlink(tops[i], target, sizeof target - 1);
            if (n <= 0)
                continue;
            target[n] = 0;
            s_args3(a, "--symlink", target, tops[i]);
        } else if (S_ISDIR(st.st_mode)) {
            s_args3(a, "--ro-bind", tops[i], tops[i]);
        }
    }
}

/* A memfd holding text, for --file / --ro-bind-data; -1 on failure. */
static int s_memfd(const char *name, const char *text, size_t len)
{
    int fd = memfd_create(name, MFD_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t off = 0;
    while (off < len) {
        ssize_t w = write(fd, text + off, len - off);
        if (w <= 0) {
            close(fd);
            return -1;
        }
        off += (size_t)w;
    }
    if (lseek(fd, 0, SEEK_SET) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* ---------------------------------------------------------------- env */

static bool s_env_set(char **env, size_t *n, size_t cap, const char *name, const char *val)
{
    size_t nl = strlen(name);
    char *e = malloc(nl + strlen(val) + 2);
    if (!e)
        return false;
    memcpy(e, name, nl);
    e[nl] = '=';
    memcpy(e + nl + 1, val, strlen(val) + 1);
    for (size_t i = 0; i < *n; i++)
        if (strncmp(env[i], e, nl + 1) == 0) {
            free(env[i]);
            env[i] = e;
            return true;
        }
    if (*n >= cap) {
        free(e);
        return false;
    }
    env[(*n)++] = e;
    return true;
}

/* The kernel's environment: an allow-list of korch's (locale and time
   zone), fixed paths, then the kernelspec's env, then the request's; a
   later name wins. Nothing else of korch's: its environment may hold API
   keys. No JPY_PARENT_PID: the kernel's parent is the sandbox's pid 1 and
   ipykernel would take that for an orphaning; --die-with-parent does it. */
static char **s_env(const korch_launch_t *req, const sandbox_launcher_t *l)
{
    static const char *const pass[] = {"LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "LC_NUMERIC", "LC_TIME",
                                       "LC_COLLATE", "LC_MONETARY", "LC_MESSAGES", "TZ", NULL};
    size_t cap = 32 + json_object_size(req->spec->env), n = 0;
    for (const char *const *e = req->env; e && *e; e++)
        cap++;
    char **env = calloc(cap + 1, sizeof *env);
    bool ok = env != NULL;
    ok = ok && s_env_set(env, &n, cap, "PATH", "/usr/local/bin:/usr/bin:/bin");
    ok = ok && s_env_set(env, &n, cap, "HOME", "/home/korch");
    ok = ok && s_env_set(env, &n, cap, "USER", "korch") && s_env_set(env, &n, cap, "LOGNAME", "korch");
    ok = ok && s_env_set(env, &n, cap, "LANG", "C.UTF-8");
    ok = ok && s_env_set(env, &n, cap, "TMPDIR", "/tmp");
    /* Home is read-only: caches and IPython's history go to /tmp. */
    ok = ok && s_env_set(env, &n, cap, "MPLCONFIGDIR", "/tmp/.config/matplotlib");
    ok = ok && s_env_set(env, &n, cap, "XDG_CACHE_HOME", "/tmp/.cache");
    ok = ok && s_env_set(env, &n, cap, "IPYTHONDIR", "/tmp/.ipython");
    for (int i = 0; ok && pass[i]; i++) {
        const char *v = getenv(pass[i]);
        if (v && strlen(v) < 256)
            ok = s_env_set(env, &n, cap, pass[i], v);
    }
    (void)l;
    if (!ok) {
        korch_spawn_strv_free(env);
        return NULL;
    }
    /* then what the user passed (--env), the kernelspec's and the request's (env.h) */
    char **all = korch_env_build_on((const char *const *)env, req, false, NULL);
    korch_spawn_strv_free(env);
    return all;
}

/* ---------------------------------------------------------------- files */

/* Open the directory name inside dirfd without following a link; with
   create, make it first when absent (given to uid:gid when give). */
static int s_open_dir(int dirfd, const char *name, bool create, bool give, uid_t uid, gid_t gid)
{
    bool made = false;
    if (create && mkdirat(dirfd, name, 0755) == 0)
        made = true;
    else if (create && errno != EEXIST)
        return -1;
    int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0 && made && give && fchown(fd, uid, gid) != 0)
        korch_debug("cannot give '%s' to %u: %s", name, (unsigned)uid, strerror(errno));
    return fd;
}

/* Walk the parent directories of name (korch_safe_relpath-checked) from
   the work dir, never through a link; creating them for put. Returns an fd
   of the last parent and points *base at the file's own name. */
static int s_walk(sandbox_proc_t *p, const char *name, bool create, const char **base, korch_err_t *err)
{
    int fd = openat(p->work_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        korch_err_set(err, KORCH_E_IO, "cannot open the kernel's work dir '%s': %s", p->workdir, strerror(errno));
        return -1;
    }
    const char *s = name;
    for (const char *slash; (slash = strchr(s, '/')); s = slash + 1) {
        char comp[256];
        size_t n = (size_t)(slash - s);
        if (n >= sizeof comp) {
            close(fd);
            korch_err_set(err, KORCH_E_INVALID, "a directory name in '%s' is too long", name);
            return -1;
        }
        memcpy(comp, s, n);
        comp[n] = 0;
        int next = s_open_dir(fd, comp, create, p->l->drop, p->l->uid, p->l->gid);
        int e = errno;
        close(fd);
        if (next < 0) {
            if (e == ENOENT)
                korch_err_set(err, KORCH_E_NOTFOUND, "no file '%s' in the kernel's work dir", name);
            else if (e == ELOOP || e == ENOTDIR)
                korch_err_set(err, KORCH_E_INVALID,
                              "'%.*s' in the kernel's work dir is a link or not a directory: refusing to follow it",
                              (int)(slash - name), name);
            else
                korch_err_set(err, KORCH_E_IO, "cannot open '%.*s' in the kernel's work dir: %s",
                              (int)(slash - name), name, strerror(e));
            return -1;
        }
        fd = next;
    }
    *base = s;
    return fd;
}

/* An fd just opened on a name the kernel controls is a plain file with
   one link (not a fifo, device, or a hard link to something of the host's). */
static korch_rc_t s_check_plain(int fd, const char *name, korch_err_t *err)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return korch_err_set(err, KORCH_E_IO, "cannot look at '%s': %s", name, strerror(errno));
    if (!S_ISREG(st.st_mode) || st.st_nlink != 1)
        return korch_err_set(err, KORCH_E_INVALID, "'%s' in the kernel's work dir is not a plain file", name);
    return KORCH_OK;
}

static korch_rc_t s_put_file_now(korch_proc_t *proc, const char *name, const void *data, size_t len,
                                 korch_err_t *err)
{
    sandbox_proc_t *p = (sandbox_proc_t *)proc;
    const char *base;
    int dfd = s_walk(p, name, true, &base, err);
    if (dfd < 0)
        return err ? err->rc : KORCH_E_IO;
    korch_rc_t rc = KORCH_OK;
    int fd = openat(dfd, base, O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
    if (fd < 0) {
        rc = korch_err_set(err, errno == ELOOP ? KORCH_E_INVALID : KORCH_E_IO,
                           errno == ELOOP ? "'%s' in the kernel's work dir is a link: refusing to follow it"
                                          : "cannot write '%s' in the kernel's work dir: %s",
                           name, strerror(errno));
        goto out;
    }
    rc = s_check_plain(fd, name, err);
    if (!rc && ftruncate(fd, 0) != 0)
        rc = korch_err_set(err, KORCH_E_IO, "cannot write '%s': %s", name, strerror(errno));
    for (size_t off = 0; !rc && off < len;) {
        ssize_t w = write(fd, (const char *)data + off, len - off);
        if (w <= 0)
            rc = korch_err_set(err, KORCH_E_IO, "cannot write '%s': %s", name, strerror(errno));
        else
            off += (size_t)w;
    }
    if (!rc && p->l->drop && fchown(fd, p->l->uid, p->l->gid) != 0)
        korch_debug("cannot give '%s' to the kernel: %s", name, strerror(errno));
out:
    if (fd >= 0)
        close(fd);
    close(dfd);
    return rc;
}

static korch_rc_t s_get_file_now(korch_proc_t *proc, const char *name, size_t max, char **data, size_t *len,
                                 korch_err_t *err)
{
    sandbox_proc_t *p = (sandbox_proc_t *)proc;
    const char *base;
    *data = NULL;
    *len = 0;
    int dfd = s_walk(p, name, false, &base, err);
    if (dfd < 0)
        return err ? err->rc : KORCH_E_IO;
    korch_rc_t rc = KORCH_OK;
    int fd = openat(dfd, base, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (fd < 0) {
        rc = errno == ENOENT ? korch_err_set(err, KORCH_E_NOTFOUND, "no file '%s' in the kernel's work dir", name)
             : errno == ELOOP
                 ? korch_err_set(err, KORCH_E_INVALID, "'%s' in the kernel's work dir is a link: refusing to follow it",
                                 name)
                 : korch_err_set(err, KORCH_E_IO, "cannot read '%s': %s", name, strerror(errno));
        goto out;
    }
    rc = s_check_plain(fd, name, err);
    if (!rc && fstat(fd, &st) == 0 && (uint64_t)st.st_size > max)
        rc = korch_err_set(err, KORCH_E_TOOBIG, "file '%s' in the kernel's work dir is larger than %zu bytes", name,
                           max);
    if (!rc && !(*data = malloc(max + 1)))
        rc = korch_err_set(err, KORCH_E_NOMEM, "out of memory");
    while (!rc && *len <= max) {
        ssize_t r = read(fd, *data + *len, max + 1 - *len);
        if (r < 0)
            rc = korch_err_set(err, KORCH_E_IO, "cannot read '%s': %s", name, strerror(errno));
        if (r <= 0)
            break;
        *len += (size_t)r;
    }
    if (!rc && *len > max) /* it grew while we read */
        rc = korch_err_set(err, KORCH_E_TOOBIG, "file '%s' in the kernel's work dir is larger than %zu bytes", name,
                           max);
    if (rc) {
        free(*data);
        *data = NULL;
        *len = 0;
    } else {
        (*data)[*len] = 0;
    }
out:
    if (fd >= 0)
        close(fd);
    close(dfd);
    return rc;
}

/* ---------------------------------------------------------------- start */

static void s_watch_proc(korch_proc_t *proc);
static void s_proc_free(korch_proc_t *proc);

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

/* The runtime dir for the kernel's uid, and the log korch keeps open: the
   kernel may have left anything in the dir (a restart reuses it). */
static korch_rc_t s_prepare_runtime(sandbox_launcher_t *l, sandbox_proc_t *p, const char *dir, korch_err_t *err)
{
    int rfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (rfd < 0)
        return korch_err_set(err, KORCH_E_IO, "cannot use runtime dir '%s': %s", dir, strerror(errno));
    korch_rc_t rc = KORCH_OK;
    if (l->drop && fchown(rfd, l->uid, l->gid) != 0)
        rc = korch_err_set(err, KORCH_E_IO, "cannot give runtime dir '%s' to uid %u: %s", dir, (unsigned)l->uid,
                           strerror(errno));
    unlinkat(rfd, "kernel.log", 0); /* a name, never followed */
    if (!rc) {
        p->log_fd = openat(rfd, "kernel.log", O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_APPEND | O_CLOEXEC, 0600);
        if (p->log_fd < 0)
            rc = korch_err_set(err, KORCH_E_IO, "cannot create '%s/kernel.log': %s", dir, strerror(errno));
    }
    if (!rc && !p->workdir[0]) {
        int wfd = s_open_dir(rfd, "work", true, l->drop, l->uid, l->gid);
        if (wfd < 0)
            rc = korch_err_set(err, KORCH_E_IO, "cannot make the work dir '%s/work': %s", dir, strerror(errno));
        p->work_fd = wfd;
        snprintf(p->workdir, sizeof p->workdir, "%s/work", dir);
    } else if (!rc) {
        /* a host dir korch was given: its path is the user's, its contents the kernel's */
        p->work_fd = open(p->workdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (p->work_fd < 0)
            rc = korch_err_set(err, KORCH_E_IO, "cannot use the work dir '%s': %s", p->workdir, strerror(errno));
    }
    close(rfd);
    return rc;
}

static korch_rc_t s_start(korch_launcher_t *self, const korch_launch_t *req, korch_op_t *op, korch_err_t *err)
{
    sandbox_launcher_t *l = (sandbox_launcher_t *)self;
    korch_rc_t rc = KORCH_OK;
    s_args_t a = {0};
    char **argv = NULL, **env = NULL, *conn_text = NULL;
    enum { F_WORK, F_RUNTIME, F_SPEC, F_CONN, F_PASSWD, F_GROUP, F_HOSTS, F_INFO, F__COUNT };
    int fds[F__COUNT + 1], info[2] = {-1, -1}; /* fds: -1-terminated for keep_fds */
    for (int i = 0; i <= F__COUNT; i++)
        fds[i] = -1;
    char buf[64], cgname[96], what[300];
    sandbox_proc_t *p = korch_backend_proc_new(self, sizeof *p, req);
    if (!p)
        return korch_err_set(err, KORCH_E_NOMEM, "out of memory");
    p->l = l;
    korch_child_init(&p->child);
    p->info_fd = p->log_fd = p->work_fd = -1;

    const char *ipc_name = korch_launch_ipc_name(req, "sandbox", err);
    if (!ipc_name) {
        rc = err ? err->rc : KORCH_E_INVALID;
        goto out;
    }
    const char *workdir = l->o.workdir ? l->o.workdir : (l->o.workdir_from_cwd ? req->cwd : NULL);
    if (workdir)
        snprintf(p->workdir, sizeof p->workdir, "%s", workdir);
    rc = s_prepare_runtime(l, p, req->runtime_dir, err);
    if (rc)
        goto out;
    if (workdir && l->o.workdir_give && l->drop)
        korch_chown_tree(workdir, l->uid, l->gid);

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
             (unsigned)l->uid, (unsigned)l->gid);
    snprintf(group, sizeof group, "root:x:0:\nkorch:x:%u:\nnogroup:x:65534:\n", (unsigned)l->gid);
    static const char hosts[] = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n";
    if (conn_text) {
        fds[F_CONN] = s_memfd("korch-kernel.json", conn_text, strlen(conn_text));
        fds[F_PASSWD] = s_memfd("passwd", passwd, strlen(passwd));
        fds[F_GROUP] = s_memfd("group", group, strlen(group));
        fds[F_HOSTS] = s_memfd("hosts", hosts, strlen(hosts));
    }
    fds[F_WORK] = fcntl(p->work_fd, F_DUPFD_CLOEXEC, 3); /* bound by the spawn helper, never inherited */
    fds[F_RUNTIME] = open(req->runtime_dir, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (req->spec->dir && req->spec->dir[0] == '/' && strncmp(req->spec->dir, "/usr/", 5) != 0)
        fds[F_SPEC] = open(req->spec->dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fds[F_WORK] < 0 || fds[F_RUNTIME] < 0) {
        rc = korch_err_set(err, KORCH_E_IO, "cannot open the kernel's %s dir '%s': %s",
                           fds[F_WORK] < 0 ? "work" : "runtime", fds[F_WORK] < 0 ? p->workdir : req->runtime_dir,
                           strerror(errno));
        goto out;
    }
    if (!conn_text || fds[F_CONN] < 0 || fds[F_PASSWD] < 0 || fds[F_GROUP] < 0 || fds[F_HOSTS] < 0 ||
        pipe2(info, O_CLOEXEC) != 0) {
        rc = korch_err_set(err, KORCH_E_LAUNCH, "cannot prepare the sandbox: %s", strerror(errno));
        goto out;
    }

    s_arg(&a, l->bwrap);
    s_args3(&a, "--unshare-all", "--unshare-user", "--disable-userns");
    if (l->o.network)
        s_arg(&a, "--share-net");
    s_args3(&a, "--die-with-parent", "--new-session", NULL);
    if (geteuid() == 0 && !l->drop)
        s_args3(&a, "--cap-drop", "ALL", NULL); /* root stays root in there: at least without capabilities */
    s_args3(&a, "--hostname", "korch", NULL);
    s_args3(&a, "--ro-bind", "/usr", "/usr");
    s_root_links(&a);
    for (int i = 0; s_etc[i]; i++)
        s_args3(&a, "--ro-bind-try", s_etc[i], s_etc[i]);
    s_arg_fd(&a, "--ro-bind-data", fds[F_PASSWD], "/etc/passwd");
    s_arg_fd(&a, "--ro-bind-data", fds[F_GROUP], "/etc/group");
    s_arg_fd(&a, "--ro-bind-data", fds[F_HOSTS], "/etc/hosts");
    s_args3(&a, "--proc", "/proc", NULL);
    s_args3(&a, "--dev", "/dev", NULL);
    if (l->o.tmp_size > 0) {
        snprintf(buf, sizeof buf, "%lld", (long long)l->o.tmp_size);
        s_args3(&a, "--size", buf, NULL);
    }
    s_args3(&a, "--perms", "1777", NULL);
    s_args3(&a, "--tmpfs", "/tmp", NULL);
    s_args3(&a, "--perms", "0600", NULL);
    s_arg_fd(&a, "--file", fds[F_CONN], S_CONN_IN);
    /* The dirs from korch's fds, which the spawn helper binds at
       /tmp/0, /tmp/1, /tmp/2 of bwrap's view: bwrap runs as the kernel's
       uid, which may not reach them by their paths (the runtime base is
       0700), and a path the kernel could swap is never resolved again. */
    s_args3(&a, "--tmpfs", "/home", NULL);
    s_args3(&a, "--bind", S_BIND_AT "/0", l->o.workdir_mount);
    s_args3(&a, "--bind", S_BIND_AT "/1", l->o.runtime_mount);
    /* A kernelspec's own files (a wrapper script, logos), read-only. */
    if (fds[F_SPEC] >= 0)
        s_args3(&a, "--ro-bind", S_BIND_AT "/2", req->spec->dir);
    s_args3(&a, "--remount-ro", "/home", NULL);
    s_args3(&a, "--remount-ro", "/", NULL);
    s_args3(&a, "--chdir", l->o.workdir_mount, NULL);
    s_arg_fd(&a, "--info-fd", info[1], NULL);
    s_arg(&a, "--");
    a.v[a.n] = NULL;
    if (a.full) {
        rc = korch_err_set(err, KORCH_E_NOMEM, "cannot build the sandbox's command line");
        goto out;
    }
    argv = korch_spawn_argv((const char *const *)a.v, req->spec, S_CONN_IN);
    env = s_env(req, l);
    if (!argv || !env) {
        rc = korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        goto out;
    }
    fds[F_INFO] = info[1];
    info[1] = -1;
    int binds[4] = {fds[F_WORK], fds[F_RUNTIME], fds[F_SPEC], -1};
    snprintf(what, sizeof what, "kernel '%s' in a sandbox", req->spec->name);
    korch_spawn_t sp = {.what = what, .argv = argv, .envp = env, .out_fd = p->log_fd, .keep_fds = &fds[F_CONN],
                        .cgroup_fds = korch_cgroup_procs_fds(p->cg), .bind_fds = binds, .bind_at = S_BIND_AT, .new_session = true, .set_ids = l->drop,
                        .uid = l->uid, .gid = l->gid};
    p->info_fd = info[0];
    info[0] = -1;
    /* the op finishes once bwrap has exec'd (spawn.h), from the loop */
    rc = korch_spawn_start(&p->base, op, &sp, &p->child.pid, &p->child.pidfd, s_watch_proc, err);
    if (rc)
        goto out;
    korch_debug("started kernel '%s' in a sandbox: bwrap pid %d, uid %u, cgroup v%d %s", req->spec->name,
                (int)p->child.pid, (unsigned)l->uid, korch_cgroup_version(p->cg), cgname);
out:
    s_args_clear(&a);
    korch_spawn_strv_free(argv);
    korch_spawn_strv_free(env);
    free(conn_text);
    for (int i = 0; i < F__COUNT; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    for (int i = 0; i < 2; i++)
        if (info[i] >= 0)
            close(info[i]);
    if (rc && p->child.pid > 0) {
        s_proc_free(&p->base); /* kills and reaps the child in the background */
    } else if (rc) {
        if (p->info_fd >= 0)
            close(p->info_fd);
        if (p->log_fd >= 0)
            close(p->log_fd);
        if (p->work_fd >= 0)
            close(p->work_fd);
        korch_cgroup_destroy(&p->cg);
        free(p);
    }
    return rc;
}

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
    char why[256];
    s_describe(p, why, sizeof why);
    korch_backend_exited(&p->base, why);
}

static void s_watch(sandbox_proc_t *p)
{
    korch_loop_t *loop = p->base.launcher->loop;
    korch_child_watch(&p->child, loop, s_ended, p);
    if (p->info_fd >= 0 && korch_loop_poller(loop, p->info_fd, s_on_info, p) == 0)
        p->info_polled = true;
}

static void s_watch_proc(korch_proc_t *proc) { s_watch((sandbox_proc_t *)proc); }

/* The end is seen by the pidfd poller. */
static korch_rc_t s_kill(korch_proc_t *proc, korch_op_t *op, korch_err_t *err)
{
    sandbox_proc_t *p = (sandbox_proc_t *)proc;
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
    if (p->child.reaped)
        return korch_err_set(err, KORCH_E_DIED, "the sandbox of the kernel (bwrap pid %d) is gone",
                             (int)p->child.pid);
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

static korch_rc_t s_signal(korch_proc_t *proc, int sig, korch_op_t *op, korch_err_t *err)
{
    korch_rc_t rc = s_signal_now(proc, sig, err);
    if (rc == KORCH_OK)
        korch_op_finish(op, KORCH_OK, NULL);
    return rc;
}

static const char *s_log_tail(korch_proc_t *proc)
{
    sandbox_proc_t *p = (sandbox_proc_t *)proc;
    p->tail[0] = 0;
    off_t end = p->log_fd >= 0 ? lseek(p->log_fd, 0, SEEK_END) : -1;
    if (end <= 0)
        return p->tail;
    off_t start = end > S_TAIL_MAX ? end - S_TAIL_MAX : 0;
    ssize_t n = pread(p->log_fd, p->tail, S_TAIL_MAX, start);
    p->tail[n > 0 ? n : 0] = 0;
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
    free(p);
    return true;
}

/* At korch_launcher_destroy: may block. */
static void s_zombie_finish(void *arg)
{
    sandbox_proc_t *p = arg;
    s_reap(p, true);
    korch_cgroup_destroy(&p->cg);
    free(p);
}

static void s_proc_free(korch_proc_t *proc)
{
    sandbox_proc_t *p = (sandbox_proc_t *)proc;
    s_unwatch(p);
    s_kill(proc, NULL, NULL);
    korch_child_close(&p->child);
    if (p->info_fd >= 0)
        close(p->info_fd);
    if (p->log_fd >= 0)
        close(p->log_fd);
    if (p->work_fd >= 0)
        close(p->work_fd);
    p->info_fd = p->log_fd = p->work_fd = -1;
    if (!s_zombie_step(p))
        korch_backend_job(proc->launcher, 20, s_zombie_step, s_zombie_finish, p);
}

static void s_free(korch_launcher_t *self)
{
    sandbox_launcher_t *l = (sandbox_launcher_t *)self;
    for (size_t i = 0; i < sizeof l->strs / sizeof l->strs[0]; i++)
        free(l->strs[i]);
    free(l);
}

static const korch_launcher_ops_t s_ops = {
    .name = "sandbox",
    .caps = KORCH_LAUNCHER_CONFINED | KORCH_LAUNCHER_HOST_FILES,
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
    char *argv[] = {l->bwrap, "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent",
                    "--new-session", "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink",
                    "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64", "--proc", "/proc", "--dev", "/dev",
                    "--", "/usr/bin/true", NULL};
    char *envp[] = {"PATH=/usr/bin:/bin", NULL};
    korch_spawn_t sp = {.what = "bwrap", .argv = argv, .envp = envp, .out_fd = out[1], .new_session = true,
                        .set_ids = l->drop, .uid = l->uid, .gid = l->gid};
    pid_t pid;
    int pidfd, status = 0;
    korch_err_t e = {0};
    korch_rc_t rc = korch_spawn(&sp, &pid, &pidfd, &e);
    close(out[1]);
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
    if (opts)
        l->o = *opts;
    else
        korch_sandbox_opts_init(&l->o);
    korch_sandbox_opts_t d;
    korch_sandbox_opts_init(&d);
    if (!l->o.workdir_mount)
        l->o.workdir_mount = d.workdir_mount;
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
        l->uid = 1000;
        l->gid = 1000;
    } else {
        l->uid = geteuid();
        l->gid = getegid();
    }
    if (l->uid != geteuid()) {
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
    if (s_probe(l, err) != KORCH_OK)
        goto fail;
    return &l->base;
fail:
    s_free(&l->base);
    return NULL;
}

int korch_sandbox_sweep(const char *mine, bool (*alive)(const char *instance), void (*gone)(const char *instance))
{
    char scope[32];
    korch_err_t err = {0};
    if (s_scope(scope, sizeof scope, &err) != KORCH_OK) {
        korch_debug("no sandbox cgroup sweep: %s", err.msg);
        return 0;
    }
    return korch_cgroup_sweep(scope, mine, alive, gone);
}
