/*  bwrap's command line and the kernel's environment (sandbox_int.h). */
#include "sandbox_int.h"
#include "korch/env.h"

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

/* ---------------------------------------------------------------- argv */

void korch_sandbox_arg(korch_sandbox_args_t *a, const char *s)
{
    if (a->n >= S_ARGS_MAX || !(a->v[a->n] = strdup(s))) {
        a->full = true;
        return;
    }
    a->n++;
}

void korch_sandbox_args3(korch_sandbox_args_t *a, const char *x, const char *y, const char *z)
{
    korch_sandbox_arg(a, x);
    if (y)
        korch_sandbox_arg(a, y);
    if (z)
        korch_sandbox_arg(a, z);
}

void korch_sandbox_arg_fd(korch_sandbox_args_t *a, const char *opt, int fd, const char *dest)
{
    char n[16];
    snprintf(n, sizeof n, "%d", fd);
    korch_sandbox_args3(a, opt, n, dest);
}

void korch_sandbox_args_clear(korch_sandbox_args_t *a)
{
    for (int i = 0; i < a->n; i++)
        free(a->v[i]);
    a->n = 0;
}

/* The bits of /etc a kernel needs to run (the dynamic loader's cache,
   Debian's python and matplotlib config, fonts, time zone, mime types):
   read-only, when present. Not passwd/shadow/ssh/docker/apt credentials. */
const char *const korch_sandbox_etc[] = {
    "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives", "/etc/localtime",
    "/etc/timezone", "/etc/mime.types", "/etc/fonts", "/etc/matplotlibrc", "/etc/python3", "/etc/python3.11",
    "/etc/R", "/etc/debian_version", "/etc/os-release", "/etc/magic", "/etc/ssl/openssl.cnf", NULL,
};

/* The top-level links of a merged-/usr system (/bin -> usr/bin ...) are
   recreated; a real directory there is bound read-only. */
void korch_sandbox_root_links(korch_sandbox_args_t *a)
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
            korch_sandbox_args3(a, "--symlink", target, tops[i]);
        } else if (S_ISDIR(st.st_mode)) {
            korch_sandbox_args3(a, "--ro-bind", tops[i], tops[i]);
        }
    }
}

/* A memfd holding text, for --file / --ro-bind-data; -1 on failure. */
int korch_sandbox_memfd(const char *name, const char *text, size_t len)
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
char **korch_sandbox_env(const korch_launch_t *req, const sandbox_launcher_t *l)
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
