/*  A cgroup per kernel, v2 or v1; see include/korch/cgroup.h.
 *
 *  Everything here acts on cgroupfs, which only root writes and which no
 *  kernel can see (the sandbox mounts no /sys), so plain paths are safe.
 */
#include "cgfile.h"
#include "korch/cgroup.h"
#include "korch/instance.h"
#include "korch/log.h"
#include "korch/path.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define S_MOUNT "/sys/fs/cgroup"
#define S_DIRS 3 /* v1: memory, pids, cpu; v2: one */

static const char *const s_v1_ctrls[S_DIRS] = {"memory", "pids", "cpu"};

struct korch_cgroup {
    int version;
    int ndirs;
    char dirs[S_DIRS][PATH_MAX];    /* the kernel's directory in each hierarchy; [0] holds memory */
    int procs[S_DIRS + 1];          /* their cgroup.procs, open for writing, -1-terminated */
};

static bool s_exists_in(const char *dir, const char *file)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    return access(path, F_OK) == 0;
}

static bool s_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static bool s_valid_name(const char *s)
{
    if (!s || !*s || strlen(s) > 64 || s[0] == '.')
        return false;
    for (; *s; s++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-", *s))
            return false;
    return true;
}

/* A scope name: "rt-" and S_SCOPE_HEX lowercase hex digits. Anything
   else directly under korch/ is the layout before scopes. */
#define S_SCOPE_HEX 16
#define S_OLD_EMPTY_S 60 /* an empty kernel cgroup of the old layout is a leftover after this long */
static bool s_is_scope(const char *s)
{
    if (strncmp(s, "rt-", 3) != 0 || strlen(s) != 3 + S_SCOPE_HEX)
        return false;
    for (s += 3; *s; s++)
        if (!strchr("0123456789abcdef", *s))
            return false;
    return true;
}

/* One scope for cgroups and labels: the runtime base's (instance.h). */
korch_rc_t korch_cgroup_scope(const char *runtime_base, char *buf, size_t len, korch_err_t *err)
{
    if (!runtime_base)
        return korch_err_set(err, KORCH_E_INVALID, "no runtime dir for the cgroup scope");
    return korch_runtime_scope(runtime_base, buf, len, err);
}

/* A small cgroupfs file into buf (NUL-terminated); false when absent. */
static bool s_read(const char *dir, const char *file, char *buf, size_t len)
{
    return korch_cgfile_read(dir, file, buf, len) >= 0;
}

static korch_rc_t s_write(const char *dir, const char *file, const char *value, korch_err_t *err)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    ssize_t w = fd >= 0 ? write(fd, value, strlen(value)) : -1;
    int e = errno;
    if (fd >= 0)
        close(fd);
    if (w != (ssize_t)strlen(value))
        return korch_err_set(err, KORCH_E_IO, "cannot set %s to '%s' in cgroup '%s': %s", file, value, dir,
                             strerror(e));
    return KORCH_OK;
}

/* The cgroup korch is in for a v1 controller, from /proc/self/cgroup
   ("4:memory:/some/path"), "" for the root. */
static void s_own_path(const char *ctrl, char *buf, size_t len)
{
    char text[4096];
    buf[0] = 0;
    if (!s_read("/proc/self", "cgroup", text, sizeof text))
        return;
    size_t cl = strlen(ctrl);
    for (char *line = text; line && *line;) {
        char *next = strchr(line, '\n');
        if (next)
            *next++ = 0;
        char *ctrls = strchr(line, ':');
        char *path = ctrls ? strchr(ctrls + 1, ':') : NULL;
        if (path) {
            *path++ = 0;
            for (char *c = ctrls + 1; *c;) {
                size_t n = strcspn(c, ",");
                if (n == cl && strncmp(c, ctrl, cl) == 0) {
                    snprintf(buf, len, "%s", strcmp(path, "/") == 0 ? "" : path);
                    return;
                }
                c += n;
                if (*c == ',')
                    c++;
            }
        }
        line = next;
    }
}

/* korch's directory in a hierarchy: {mount}/korch (v2), else
   {mount}/{ctrl}{korch's own cgroup}/korch. */
static void s_base(int version, int i, char *buf, size_t len)
{
    if (version == 2) {
        snprintf(buf, len, "%s/korch", S_MOUNT);
        return;
    }
    char own[PATH_MAX];
    s_own_path(s_v1_ctrls[i], own, sizeof own);
    snprintf(buf, len, "%s/%s%s/korch", S_MOUNT, s_v1_ctrls[i], own);
}

static int s_version(void)
{
    char ctrls[512];
    if (s_read(S_MOUNT, "cgroup.controllers", ctrls, sizeof ctrls))
        return strstr(ctrls, "memory") && strstr(ctrls, "pids") ? 2 : 0;
    if (s_exists(S_MOUNT "/memory/cgroup.procs") && s_exists(S_MOUNT "/pids/cgroup.procs"))
        return 1;
    return 0;
}

int korch_cgroup_available(char *why, size_t whylen)
{
    int v = s_version();
    if (v == 0) {
        snprintf(why, whylen, "no cgroup with the memory and pids controllers at %s", S_MOUNT);
        return 0;
    }
    if (geteuid() != 0) {
        snprintf(why, whylen, "creating cgroups needs root (korch runs as uid %u)", (unsigned)geteuid());
        return 0;
    }
    return v;
}

static int s_ndirs(int version) { return version == 2 ? 1 : S_DIRS; }

/* v2: controllers reach a child only when every ancestor enables them. */
static void s_enable(const char *dir)
{
    s_write(dir, "cgroup.subtree_control", "+memory +pids", NULL);
    s_write(dir, "cgroup.subtree_control", "+cpu", NULL);
}

static korch_rc_t s_limits(korch_cgroup_t *cg, const korch_cgroup_limits_t *lim, korch_err_t *err)
{
    char v[64];
    korch_rc_t rc = KORCH_OK;
    const char *mem = cg->dirs[0], *pids = cg->dirs[cg->version == 2 ? 0 : 1], *cpu = cg->dirs[cg->version == 2 ? 0 : 2];
    if (lim->memory > 0) {
        snprintf(v, sizeof v, "%lld", (long long)lim->memory);
        if (cg->version == 2) {
            rc = s_write(mem, "memory.max", v, err);
            if (!rc)
                s_write(mem, "memory.swap.max", "0", NULL); /* absent without swap accounting */
        } else {
            rc = s_write(mem, "memory.limit_in_bytes", v, err);
            if (!rc)
                s_write(mem, "memory.memsw.limit_in_bytes", v, NULL);
        }
    }
    if (!rc && lim->pids > 0) {
        snprintf(v, sizeof v, "%lld", (long long)lim->pids);
        rc = s_write(pids, "pids.max", v, err);
    }
    if (!rc && lim->nano_cpus > 0) {
        /* quota per 100 ms period: 1e9 nano-CPUs = 100000 us */
        long long quota = (long long)(lim->nano_cpus / 10000);
        if (quota < 1000)
            quota = 1000;
        if (cg->version == 2) {
            snprintf(v, sizeof v, "%lld 100000", quota);
            rc = s_write(cpu, "cpu.max", v, err);
        } else {
            s_write(cpu, "cpu.cfs_period_us", "100000", NULL);
            snprintf(v, sizeof v, "%lld", quota);
            rc = s_write(cpu, "cpu.cfs_quota_us", v, err);
        }
    }
    return rc;
}

/* mkdir base/scope/instance/name, enabling the controllers on the way
   (v2). A sweep of another korch of the same scope may rmdir an empty
   scope or instance dir between two of our mkdirs: start over then. */
static korch_rc_t s_make(int version, const char *base, const char *scope, const char *instance, const char *name,
                         char *leaf, size_t leaflen, korch_err_t *err)
{
    char sdir[PATH_MAX + 32], idir[PATH_MAX + 100];
    if (korch_path_join(sdir, sizeof sdir, base, scope, NULL) != KORCH_OK ||
        korch_path_join(idir, sizeof idir, sdir, instance, NULL) != KORCH_OK ||
        korch_path_join(leaf, leaflen, idir, name, NULL) != KORCH_OK)
        return korch_err_set(err, KORCH_E_TOOBIG, "cgroup path '%s/%s/%s/%s' is too long", base, scope, instance,
                             name);
    const char *chain[4] = {base, sdir, idir, leaf};
    for (int attempt = 0; attempt < 5; attempt++) {
        int i = 0;
        if (version == 2)
            s_enable(S_MOUNT);
        for (; i < 4; i++) {
            if (mkdir(chain[i], 0755) != 0 && (errno != EEXIST || i == 3))
                break;
            if (version == 2 && i < 3)
                s_enable(chain[i]);
        }
        if (i == 4)
            return KORCH_OK;
        if (errno != ENOENT)
            break;
    }
    return korch_err_set(err, KORCH_E_IO, "cannot create cgroup '%s': %s", leaf, strerror(errno));
}

korch_cgroup_t *korch_cgroup_new(const char *scope, const char *instance, const char *name,
                                 const korch_cgroup_limits_t *lim, korch_err_t *err)
{
    char why[256];
    korch_cgroup_limits_t none = {0};
    if (!scope || !s_is_scope(scope) || !s_valid_name(instance) || !s_valid_name(name)) {
        korch_err_set(err, KORCH_E_INVALID,
                      "cgroup names must be letters, digits, - _ . and the scope korch_cgroup_scope's ('%s', '%s', "
                      "'%s')",
                      scope ? scope : "", instance ? instance : "", name ? name : "");
        return NULL;
    }
    int version = korch_cgroup_available(why, sizeof why);
    if (!version) {
        korch_err_set(err, KORCH_E_LAUNCH, "cannot make a cgroup for the kernel: %s", why);
        return NULL;
    }
    korch_cgroup_t *cg = calloc(1, sizeof *cg);
    if (!cg) {
        korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        return NULL;
    }
    cg->version = version;
    cg->ndirs = s_ndirs(version);
    for (int i = 0; i <= S_DIRS; i++)
        cg->procs[i] = -1;
    korch_rc_t rc = KORCH_OK;
    for (int i = 0; i < cg->ndirs && !rc; i++) {
        char base[PATH_MAX];
        s_base(version, i, base, sizeof base);
        rc = s_make(version, base, scope, instance, name, cg->dirs[i], sizeof cg->dirs[i], err);
        if (rc)
            cg->dirs[i][0] = 0;
    }
    if (!rc)
        rc = s_limits(cg, lim ? lim : &none, err);
    for (int i = 0; i < cg->ndirs && !rc; i++) {
        char path[PATH_MAX + 32];
        snprintf(path, sizeof path, "%s/cgroup.procs", cg->dirs[i]);
        cg->procs[i] = open(path, O_WRONLY | O_CLOEXEC);
        if (cg->procs[i] < 0)
            rc = korch_err_set(err, KORCH_E_IO, "cannot open '%s': %s", path, strerror(errno));
    }
    if (rc)
        korch_cgroup_destroy(&cg);
    return cg;
}

const int *korch_cgroup_procs_fds(const korch_cgroup_t *cg) { return cg->procs; }

int korch_cgroup_version(const korch_cgroup_t *cg) { return cg->version; }

bool korch_cgroup_oom_killed(const korch_cgroup_t *cg)
{
    char text[2048];
    if (cg->version == 2)
        return s_read(cg->dirs[0], "memory.events", text, sizeof text) && korch_cgfile_keyed(text, "oom_kill") > 0;
    if (s_read(cg->dirs[0], "memory.oom_control", text, sizeof text) && korch_cgfile_keyed(text, "oom_kill") >= 0)
        return korch_cgfile_keyed(text, "oom_kill") > 0;
    return s_read(cg->dirs[0], "memory.failcnt", text, sizeof text) && strtoll(text, NULL, 10) > 0;
}

bool korch_cgroup_usage_src(const korch_cgroup_t *cg, korch_usage_src_t *src)
{
    memset(src, 0, sizeof *src);
    if (!cg || !cg->dirs[0][0])
        return false;
    src->version = cg->version;
    snprintf(src->mem, sizeof src->mem, "%s", cg->dirs[0]);
    /* v1: cpuacct.usage where cpuacct shares the cpu hierarchy, else the processes' own times */
    if (cg->version == 1 && cg->ndirs > 2 && s_exists_in(cg->dirs[2], "cpuacct.usage"))
        snprintf(src->cpu, sizeof src->cpu, "%s", cg->dirs[2]);
    return true;
}

void korch_cgroup_usage(const korch_cgroup_t *cg, int64_t *cpu_ns, int64_t *mem_peak)
{
    korch_usage_src_t src;
    korch_proc_usage_t u = {.cpu_ns = -1, .mem_peak = -1};
    if (korch_cgroup_usage_src(cg, &src))
        korch_usage_read(&src, false, &u);
    *cpu_ns = u.cpu_ns;
    *mem_peak = u.mem_peak;
}

bool korch_cgroup_peak_reset(korch_cgroup_t *cg)
{
    korch_usage_src_t src;
    korch_proc_usage_t u = {.cpu_ns = -1, .mem_peak = -1};
    return korch_cgroup_usage_src(cg, &src) && korch_usage_read(&src, true, &u) && u.peak_reset;
}

/* The pids in dir/cgroup.procs into pids (at most max); count, or -1. */
static int s_pids(const char *dir, pid_t *pids, int max)
{
    char text[16384];
    if (!s_read(dir, "cgroup.procs", text, sizeof text))
        return -1;
    int n = 0;
    for (char *p = text; *p && n < max;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p)
            break;
        if (v > 0)
            pids[n++] = (pid_t)v;
        p = end;
        while (*p == '\n')
            p++;
    }
    return n;
}

int korch_cgroup_count(const korch_cgroup_t *cg)
{
    pid_t pids[1024];
    return cg->dirs[0][0] ? s_pids(cg->dirs[0], pids, 1024) : -1;
}

/* SIGKILL what is in dir, once (rounds > 1: until it is empty, 5 ms
   apart); true when it is empty. */
static bool s_kill_dir_rounds(const char *dir, int rounds)
{
    pid_t pids[1024];
    char kill_file[PATH_MAX + 16];
    snprintf(kill_file, sizeof kill_file, "%s/cgroup.kill", dir);
    if (s_exists(kill_file)) /* v2 since Linux 5.14: the kernel kills them all at once */
        s_write(dir, "cgroup.kill", "1", NULL);
    for (int round = 0; round < rounds; round++) {
        int n = s_pids(dir, pids, 1024);
        if (n <= 0)
            return n == 0 || !s_exists(dir);
        for (int i = 0; i < n; i++)
            kill(pids[i], SIGKILL);
        if (round + 1 < rounds)
            nanosleep(&(struct timespec){0, 5 * 1000 * 1000}, NULL);
    }
    return rounds == 1 && s_pids(dir, pids, 1) == 0;
}

static bool s_kill_dir(const char *dir) { return s_kill_dir_rounds(dir, 400); }

static bool s_kill_all(korch_cgroup_t *cg, int rounds)
{
    bool empty = true;
    for (int i = 0; i < cg->ndirs; i++)
        if (cg->dirs[i][0])
            empty = s_kill_dir_rounds(cg->dirs[i], rounds) && empty;
    return empty;
}

bool korch_cgroup_kill(korch_cgroup_t *cg) { return s_kill_all(cg, 400); }

bool korch_cgroup_kill_now(korch_cgroup_t *cg) { return !cg || s_kill_all(cg, 1); }

/* rmdir dir, then its parent (the instance's) and grandparent (the
   scope's) when they are empty now. */
static void s_remove(const char *dir)
{
    if (rmdir(dir) != 0 && errno != ENOENT) {
        korch_warn("cannot remove cgroup '%s': %s", dir, strerror(errno));
        return;
    }
    char parent[PATH_MAX];
    snprintf(parent, sizeof parent, "%s", dir);
    for (int up = 0; up < 2; up++) {
        char *slash = strrchr(parent, '/');
        if (!slash)
            break;
        *slash = 0;
        if (rmdir(parent) != 0) /* fails while other kernels of the instance (scope) live: fine */
            break;
    }
}

void korch_cgroup_destroy(korch_cgroup_t **pcg)
{
    if (!pcg || !*pcg)
        return;
    korch_cgroup_t *cg = *pcg;
    for (int i = 0; i < S_DIRS; i++)
        if (cg->procs[i] >= 0)
            close(cg->procs[i]);
    korch_cgroup_kill(cg);
    for (int i = 0; i < cg->ndirs; i++)
        if (cg->dirs[i][0])
            s_remove(cg->dirs[i]);
    free(cg);
    *pcg = NULL;
}

/* What the sweep does to each kernel cgroup of an instance dir. */
typedef enum { S_SWEEP_KILL, S_SWEEP_OLD } s_sweep_how_t;

/* Kill: kill what is in each kernel cgroup of inst (a dead instance of our
   scope) and remove them. Old: korch/{instance}/{kernel} from a korch
   before scopes, whose runtime dir, hence whose lock, is unknown: nothing
   is killed; kernel cgroups empty for a minute (a sandbox dies with its
   korch; an older korch still running fills a new one within ms) are
   removed, one still holding processes is left, and said (once: *said).
   Then inst itself, once empty. Returns how many were removed. */
static int s_sweep_instance(const char *inst, s_sweep_how_t how, bool *said)
{
    int removed = 0;
    pid_t pids[8];
    struct stat st;
    DIR *k = opendir(inst);
    struct dirent *ke;
    while (k && (ke = readdir(k))) {
        char leaf[PATH_MAX + 160];
        if (ke->d_type != DT_DIR || !s_valid_name(ke->d_name) ||
            korch_path_join(leaf, sizeof leaf, inst, ke->d_name, NULL) != KORCH_OK)
            continue; /* never act on a cut path: it names another directory */
        int n = how == S_SWEEP_OLD ? s_pids(leaf, pids, 8) : 0;
        if (how == S_SWEEP_OLD && n == 0 && (stat(leaf, &st) != 0 || st.st_mtime > time(NULL) - S_OLD_EMPTY_S))
            continue; /* maybe an older korch's, just made */
        if (how == S_SWEEP_KILL)
            s_kill_dir(leaf);
        if (n == 0 && rmdir(leaf) == 0) {
            removed++;
            continue;
        }
        if (how == S_SWEEP_OLD && !*said)
            korch_notice("cgroup '%s' is from an older korch and still holds processes: left alone (korch cannot "
                         "tell whether its korch is alive; remove it by hand when it is not)",
                         leaf);
        *said = how == S_SWEEP_OLD || *said;
    }
    if (k)
        closedir(k);
    rmdir(inst);
    return removed;
}

int korch_cgroup_sweep(const char *scope, const char *mine, bool (*alive)(const char *instance),
                       void (*gone)(const char *instance))
{
    char why[256];
    int version = korch_cgroup_available(why, sizeof why), removed = 0;
    bool said = false;
    if (!scope || !s_is_scope(scope))
        return 0;
    for (int i = 0; version && i < s_ndirs(version); i++) {
        char base[PATH_MAX], sdir[PATH_MAX + 32];
        s_base(version, i, base, sizeof base);
        /* the layout before scopes: korch/{instance} */
        DIR *d = opendir(base);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            char inst[PATH_MAX + 80];
            if (e->d_type == DT_DIR && s_valid_name(e->d_name) && !s_is_scope(e->d_name) &&
                korch_path_join(inst, sizeof inst, base, e->d_name, NULL) == KORCH_OK)
                s_sweep_instance(inst, S_SWEEP_OLD, &said);
        }
        if (d)
            closedir(d);
        /* ours: korch/{scope}/{instance}, judged by the locks of our runtime base */
        if (korch_path_join(sdir, sizeof sdir, base, scope, NULL) != KORCH_OK)
            continue;
        d = opendir(sdir);
        while (d && (e = readdir(d))) {
            if (e->d_type != DT_DIR || !s_valid_name(e->d_name) || (mine && strcmp(e->d_name, mine) == 0) ||
                strcmp(e->d_name, "default") == 0 || alive(e->d_name))
                continue;
            char inst[PATH_MAX + 100];
            if (korch_path_join(inst, sizeof inst, sdir, e->d_name, NULL) != KORCH_OK)
                continue;
            int n = s_sweep_instance(inst, S_SWEEP_KILL, &said);
            if (i == 0)
                removed += n;
            if (gone && i == s_ndirs(version) - 1 && access(inst, F_OK) != 0)
                gone(e->d_name);
        }
        if (d)
            closedir(d);
        rmdir(sdir); /* empty now? */
    }
    return removed;
}
