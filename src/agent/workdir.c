/*  korch_workdir: a bounded, symlink-proof walk of a kernel's work dir and
 *  the difference between two walks. See include/korch/workdir.h. */
#include "korch/workdir.h"
#include "korch/fsutil.h"
#include "korch/path.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct korch_workdir {
    char *root;
    korch_workdir_limits_t lim;
    json_t *last;               /* path -> [size, mtime_s, mtime_ns, ino] */
};

typedef struct {
    korch_workdir_t *w;
    json_t *now;
    size_t dirs;
    bool truncated;
} s_walk_t;

korch_workdir_t *korch_workdir_new(const char *dir, const korch_workdir_limits_t *limits)
{
    korch_workdir_t *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    w->root = strdup(dir ? dir : "");
    w->last = json_object();
    if (limits)
        w->lim = *limits;
    if (!w->lim.max_entries)
        w->lim.max_entries = 5000;
    if (w->lim.max_depth <= 0)
        w->lim.max_depth = 8;
    if (!w->lim.max_dirs)
        w->lim.max_dirs = 1000;
    if (!w->root || !w->last) {
        korch_workdir_destroy(&w);
        return NULL;
    }
    return w;
}

void korch_workdir_destroy(korch_workdir_t **pw)
{
    if (!pw || !*pw)
        return;
    free((*pw)->root);
    json_decref((*pw)->last);
    free(*pw);
    *pw = NULL;
}

/* Walk the directory open as fd (taken: closed here), prefix its path. */
static void s_walk(s_walk_t *wk, int fd, const char *prefix, int depth)
{
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return;
    }
    wk->dirs++;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue; /* ".", "..", and hidden names */
        if (json_object_size(wk->now) >= wk->w->lim.max_entries) {
            wk->truncated = true;
            break;
        }
        char path[PATH_MAX];
        int n = snprintf(path, sizeof path, "%s%s%s", prefix, *prefix ? "/" : "", de->d_name);
        if (n < 0 || (size_t)n >= sizeof path)
            continue;
        struct stat st;
        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
            continue;
        if (S_ISREG(st.st_mode)) {
            json_object_set_new(wk->now, path,
                                json_pack("[I, I, I, I]", (json_int_t)st.st_size, (json_int_t)st.st_mtim.tv_sec,
                                          (json_int_t)st.st_mtim.tv_nsec, (json_int_t)st.st_ino));
        } else if (S_ISDIR(st.st_mode)) {
            if (depth + 1 > wk->w->lim.max_depth || wk->dirs >= wk->w->lim.max_dirs) {
                wk->truncated = true;
                continue;
            }
            /* O_NOFOLLOW: the entry may have been swapped for a symlink since the stat */
            int sub = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (sub >= 0)
                s_walk(wk, sub, path, depth + 1);
        }
        /* symlinks, fifos, sockets, devices: not listed, never opened */
    }
    closedir(d);
}

static json_t *s_entry(const char *path, json_t *v, const char *change)
{
    json_t *e = json_pack("{s:s, s:I}", "path", path, "size", json_integer_value(json_array_get(v, 0)));
    if (change)
        json_object_set_new(e, "change", json_string(change));
    return e;
}

static int s_cmp_path(const void *a, const void *b)
{
    return strcmp(json_string_value(json_object_get(*(json_t *const *)a, "path")),
                  json_string_value(json_object_get(*(json_t *const *)b, "path")));
}

void korch_workdir_sort(json_t *arr)
{
    size_t n = json_array_size(arr);
    if (n < 2)
        return;
    json_t **v = malloc(n * sizeof *v);
    if (!v)
        return;
    for (size_t i = 0; i < n; i++)
        v[i] = json_incref(json_array_get(arr, i));
    qsort(v, n, sizeof *v, s_cmp_path);
    json_array_clear(arr);
    for (size_t i = 0; i < n; i++)
        json_array_append_new(arr, v[i]);
    free(v);
}

/* The differences between w->last and now (stolen: it becomes w->last). */
static json_t *s_diff(korch_workdir_t *w, json_t *now, bool truncated)
{
    s_walk_t wk = {.w = w, .now = now, .truncated = truncated};
    json_t *changes = json_array();
    json_int_t bytes = 0;
    const char *path;
    json_t *v;
    json_object_foreach(wk.now, path, v) {
        bytes += json_integer_value(json_array_get(v, 0));
        json_t *old = json_object_get(w->last, path);
        if (!old)
            json_array_append_new(changes, s_entry(path, v, "created"));
        else if (!json_equal(old, v))
            json_array_append_new(changes, s_entry(path, v, "modified"));
    }
    json_object_foreach(w->last, path, v) {
        /* a cut walk did not see everything: what it missed is not "deleted" */
        if (!json_object_get(wk.now, path) && !wk.truncated)
            json_array_append_new(changes, s_entry(path, v, "deleted"));
    }
    korch_workdir_sort(changes);
    json_decref(w->last);
    w->last = wk.now;
    return json_pack("{s:o, s:b, s:I, s:I}", "changes", changes, "truncated", wk.truncated, "files",
                     (json_int_t)json_object_size(w->last), "bytes", bytes);
}

json_t *korch_workdir_scan(korch_workdir_t *w, korch_err_t *err)
{
    int fd = *w->root ? open(w->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
    if (fd < 0) {
        korch_err_set(err, errno == ENOENT ? KORCH_E_NOTFOUND : KORCH_E_IO, "cannot read the work dir '%s': %s",
                      w->root, *w->root ? strerror(errno) : "it is not on this host");
        return NULL;
    }
    s_walk_t wk = {.w = w, .now = json_object()};
    s_walk(&wk, fd, "", 0);
    return s_diff(w, wk.now, wk.truncated);
}

/* A listed path as a walk would give it: relative, no empty, ".", ".." or hidden component. */
static bool s_plain_rel(const char *p) { return korch_relpath_ok(p, PATH_MAX - 1, KORCH_RELPATH_NO_HIDDEN); }

json_t *korch_workdir_update(korch_workdir_t *w, json_t *entries, bool truncated)
{
    json_t *now = json_object();
    size_t i;
    json_t *e;
    json_array_foreach(entries, i, e) {
        const char *path = json_string_value(json_array_get(e, 0));
        json_t *size = json_array_get(e, 1), *mtime = json_array_get(e, 2), *ino = json_array_get(e, 3);
        if (json_object_size(now) >= w->lim.max_entries) {
            truncated = true;
            break;
        }
        if (!s_plain_rel(path) || !json_is_integer(size) || json_integer_value(size) < 0 || !json_is_integer(mtime))
            continue; /* whoever listed it, it is not a file of this tree */
        json_object_set_new(now, path,
                            json_pack("[I, I, I, I]", json_integer_value(size), (json_int_t)0, json_integer_value(mtime),
                                      json_is_integer(ino) ? json_integer_value(ino) : (json_int_t)0));
    }
    return s_diff(w, now, truncated);
}

const char *korch_workdir_root(const korch_workdir_t *w) { return w->root; }

json_t *korch_workdir_list(korch_workdir_t *w)
{
    json_t *out = json_array();
    const char *path;
    json_t *v;
    json_object_foreach(w->last, path, v) json_array_append_new(out, s_entry(path, v, NULL));
    korch_workdir_sort(out);
    return out;
}

char *korch_workdir_read(const char *root, const char *rel, size_t max, size_t *len, korch_err_t *err)
{
    if (!rel || !*rel || rel[0] == '/' || strnlen(rel, PATH_MAX) >= PATH_MAX) {
        korch_err_set(err, KORCH_E_INVALID, "'%s' is not a path inside the work dir", rel ? rel : "");
        return NULL;
    }
    if (!korch_relpath_ok(rel, PATH_MAX - 1, 0)) {
        korch_err_set(err, KORCH_E_INVALID, "'%s' is not a plain path inside the work dir", rel);
        return NULL;
    }
    /* one component at a time, none of them followed if it is a symlink */
    korch_err_t e = {0};
    char *data = korch_fs_read_rel(root, rel, max, len, &e);
    if (data)
        return data;
    if (e.rc == KORCH_E_NOTFOUND)
        korch_err_set(err, e.rc, "no file '%s' in the work dir", rel);
    else if (e.rc == KORCH_E_TOOBIG)
        korch_err_set(err, e.rc, "'%s' is larger than %zu bytes", rel, max);
    else
        korch_err_set(err, e.rc, "%s", e.msg);
    return NULL;
}

korch_rc_t korch_workdir_write(const char *root, const char *name, const void *data, size_t len, long uid, long gid,
                               korch_err_t *err)
{
    if (!korch_path_is_name(name))
        return korch_err_set(err, KORCH_E_INVALID, "'%s' is not a plain file name", name ? name : "");
    /* fsutil.h: a random temp name (O_CREAT|O_EXCL|O_NOFOLLOW), fchown on the fd, renameat */
    int dfd = korch_fs_open_dir(root, err);
    if (dfd < 0)
        return err ? err->rc : KORCH_E_IO;
    korch_fs_opts_t o = {.mode = 0644, .chown = uid >= 0, .uid = (uid_t)uid, .gid = (gid_t)gid};
    korch_rc_t rc = korch_fs_write_at(dfd, name, data, len, &o, err);
    close(dfd);
    return rc;
}

/* The dir of rel's parent below root into *dfd, opened one component at a
   time and none of them a link (made when create); the work dir itself in
   *top and rel's last name in *base. An absent parent: KORCH_E_NOTFOUND. The
   caller closes *dfd when it is not *top, and *top when it is >= 0. */
static korch_rc_t s_parent_at(const char *root, const char *rel, bool create, int *top, int *dfd, const char **base,
                              korch_err_t *err)
{
    *top = *dfd = -1;
    if (!rel || !korch_relpath_ok(rel, PATH_MAX - 1, 0))
        return korch_err_set(err, KORCH_E_INVALID, "'%s' is not a plain path inside the work dir", rel ? rel : "");
    const char *slash = strrchr(rel, '/');
    *base = slash ? slash + 1 : rel;
    korch_err_t e = {0};
    *top = korch_fs_open_dir(root, &e);
    if (*top < 0)
        return korch_err_set(err, e.rc ? e.rc : KORCH_E_IO, "%s", e.msg);
    if (!slash) {
        *dfd = *top;
        return KORCH_OK;
    }
    char parent[PATH_MAX];
    snprintf(parent, sizeof parent, "%.*s", (int)(slash - rel), rel);
    korch_fs_opts_t o = {.mode = 0755};
    *dfd = korch_fs_open_dir_at(*top, parent, create, create ? &o : NULL, &e);
    if (*dfd < 0)
        return korch_err_set(err, e.rc ? e.rc : KORCH_E_IO,
                             e.rc == KORCH_E_NOTFOUND ? "no file '%s' in the work dir" : "cannot reach '%s': %s", rel,
                             e.msg);
    return KORCH_OK;
}

korch_rc_t korch_workdir_remove(const char *root, const char *rel, korch_err_t *err)
{
    const char *base = NULL;
    int top, dfd;
    korch_rc_t rc = s_parent_at(root, rel, false, &top, &dfd, &base, err);
    struct stat st;
    if (rc == KORCH_OK && fstatat(dfd, base, &st, AT_SYMLINK_NOFOLLOW) != 0)
        rc = errno == ENOENT ? korch_err_set(err, KORCH_E_NOTFOUND, "no file '%s' in the work dir", rel)
                             : korch_err_set(err, KORCH_E_IO, "cannot remove '%s': %s", rel, strerror(errno));
    else if (rc == KORCH_OK && S_ISDIR(st.st_mode))
        rc = korch_err_set(err, KORCH_E_INVALID, "'%s' is a directory: remove the files in it", rel);
    else if (rc == KORCH_OK && unlinkat(dfd, base, 0) != 0)
        rc = korch_err_set(err, errno == ENOENT ? KORCH_E_NOTFOUND : KORCH_E_IO, "cannot remove '%s': %s", rel,
                           strerror(errno));
    if (dfd >= 0 && dfd != top)
        close(dfd);
    if (top >= 0)
        close(top);
    return rc;
}

korch_rc_t korch_workdir_place_fd(const char *root, const char *rel, int fd, korch_err_t *err)
{
    const char *base = NULL;
    int top, dfd;
    korch_rc_t rc = s_parent_at(root, rel, true, &top, &dfd, &base, err);
    char tmp[64] = "";
    if (rc == KORCH_OK && fchmod(fd, 0644) != 0)
        rc = korch_err_set(err, KORCH_E_IO, "cannot place '%s': %s", rel, strerror(errno));
    if (rc == KORCH_OK) {
        /* an O_TMPFILE gets its first name through /proc (linkat AT_EMPTY_PATH needs a capability) */
        char proc[64];
        snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
        int tries = 0;
        for (; tries < 8; tries++) {
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            snprintf(tmp, sizeof tmp, ".korch-place-%d-%ld%d", (int)getpid(), (long)ts.tv_nsec, tries);
            if (linkat(AT_FDCWD, proc, dfd, tmp, AT_SYMLINK_FOLLOW) == 0)
                break;
            if (errno != EEXIST) {
                rc = errno == ENOENT || errno == EXDEV ? korch_err_set(err, KORCH_E_STATE, "the upload cannot be linked")
                                     : korch_err_set(err, KORCH_E_IO, "cannot place '%s': %s", rel, strerror(errno));
                tmp[0] = 0;
                break;
            }
        }
        if (rc == KORCH_OK && tries == 8)
            rc = korch_err_set(err, KORCH_E_IO, "cannot place '%s': no free temporary name", rel);
    }
    if (rc == KORCH_OK && renameat(dfd, tmp, dfd, base) != 0) {
        rc = korch_err_set(err, errno == EISDIR ? KORCH_E_INVALID : KORCH_E_IO, "cannot place '%s': %s", rel,
                           strerror(errno));
        unlinkat(dfd, tmp, 0);
    }
    if (dfd >= 0 && dfd != top)
        close(dfd);
    if (top >= 0)
        close(top);
    return rc;
}

int64_t korch_workdir_clock_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

const char *korch_mime_for(const char *name)
{
    static const char *map[][2] = {
        {".png", "image/png"},       {".jpg", "image/jpeg"},     {".jpeg", "image/jpeg"},
        {".svg", "image/svg+xml"},   {".gif", "image/gif"},      {".csv", "text/csv"},
        {".tsv", "text/tab-separated-values"},                   {".txt", "text/plain"},
        {".md", "text/markdown"},    {".json", "application/json"}, {".html", "text/html"},
        {".pdf", "application/pdf"}, {".parquet", "application/vnd.apache.parquet"},
        {".xlsx", "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"},
        {".ipynb", "application/x-ipynb+json"},
    };
    const char *dot = name ? strrchr(name, '.') : NULL;
    for (size_t i = 0; dot && i < sizeof map / sizeof *map; i++)
        if (strcasecmp(dot, map[i][0]) == 0)
            return map[i][1];
    return "application/octet-stream";
}

/* Python: the work dir listed from inside the kernel (for a container's
   volume korch cannot walk), bounded like korch_workdir's walk, symlinks
   not followed, hidden names left out. The kernel may lie: the lines are
   only data, checked by korch_workdir_update. */
static const char *s_list_code =
    "def _korch_ls(top, maxn, maxd):\n"
    "    import os, json, stat\n"
    "    out, cut = [], [False]\n"
    "    def walk(d, rel, depth):\n"
    "        try:\n"
    "            it = sorted(os.scandir(d), key=lambda e: e.name)\n"
    "        except OSError:\n"
    "            return\n"
    "        for e in it:\n"
    "            if e.name.startswith('.'):\n"
    "                continue\n"
    "            if len(out) >= maxn:\n"
    "                cut[0] = True\n"
    "                return\n"
    "            try:\n"
    "                st = e.stat(follow_symlinks=False)\n"
    "            except OSError:\n"
    "                continue\n"
    "            if stat.S_ISREG(st.st_mode):\n"
    "                out.append([rel + e.name, st.st_size, st.st_mtime_ns, st.st_ino])\n"
    "            elif stat.S_ISDIR(st.st_mode):\n"
    "                if depth + 1 > maxd:\n"
    "                    cut[0] = True\n"
    "                else:\n"
    "                    walk(os.path.join(d, e.name), rel + e.name + '/', depth + 1)\n"
    "    walk(top, '', 0)\n"
    "    print(json.dumps({'files': out, 'truncated': cut[0]}))\n"
    "_korch_ls(%s, 5000, 8)\n"
    "del _korch_ls\n";

char *korch_workdir_lister_py(const char *top)
{
    /* a Python string literal (JSON's escapes are Python's), or os.getcwd() */
    json_t *j = top ? json_string(top) : NULL;
    char *lit = j ? json_dumps(j, JSON_ENCODE_ANY | JSON_ENSURE_ASCII) : NULL;
    json_decref(j);
    if (top && !lit)
        return NULL;
    const char *arg = lit ? lit : "__import__('os').getcwd()";
    size_t len = strlen(s_list_code) + strlen(arg) + 16;
    char *code = malloc(len);
    if (code)
        snprintf(code, len, s_list_code, arg);
    free(lit);
    return code;
}
