/*  Safe file operations in directories a kernel can write (fsutil.h). */
#include "korch/fsutil.h"
#include "korch/path.h"
#include "korch/buf.h"
#include "korch/log.h"
#include "fswalk.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>


static const korch_fs_opts_t s_default_opts = {.mode = 0600};

int korch_fs_open_dir(const char *path, korch_err_t *err)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        korch_err_set(err, errno == ENOENT ? KORCH_E_NOTFOUND : KORCH_E_IO, "cannot open directory '%s': %s", path,
                      strerror(errno));
    return fd;
}

/* One component below dirfd, never through a symlink; made when missing
   and create. */
static int s_sub_dir(int dirfd, const char *name, bool create, const korch_fs_opts_t *o, korch_err_t *err)
{
    int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT && create) {
        if (mkdirat(dirfd, name, 0700) != 0 && errno != EEXIST) {
            korch_err_set(err, KORCH_E_IO, "cannot create directory '%s': %s", name, strerror(errno));
            return -1;
        }
        fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd >= 0 && ((o->chown && fchown(fd, o->uid, o->gid) != 0) || fchmod(fd, 0755) != 0)) {
            korch_err_set(err, KORCH_E_IO, "cannot set up directory '%s': %s", name, strerror(errno));
            close(fd);
            return -1;
        }
    }
    if (fd < 0) {
        int e = errno;
        struct stat st;
        if (e == ELOOP || e == ENOTDIR)
            korch_err_set(err, KORCH_E_INVALID, "'%s' is %s: refusing to follow it", name,
                          fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode)
                              ? "a symbolic link"
                              : "not a directory");
        else
            korch_err_set(err, e == ENOENT ? KORCH_E_NOTFOUND : KORCH_E_IO, "cannot open directory '%s': %s", name,
                          strerror(e));
    }
    return fd;
}

int korch_fs_open_dir_at(int dirfd, const char *rel, bool create, const korch_fs_opts_t *o, korch_err_t *err)
{
    if (!o)
        o = &s_default_opts;
    int fd = fcntl(dirfd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) {
        korch_err_set(err, KORCH_E_IO, "cannot open a directory: %s", strerror(errno));
        return -1;
    }
    if (!rel)
        return fd;
    char part[NAME_MAX + 1];
    const char *p = rel;
    while (*p) {
        size_t n = strcspn(p, "/");
        if (n == 0) {
            p++;
            continue;
        }
        if (n > NAME_MAX) {
            close(fd);
            korch_err_set(err, KORCH_E_INVALID, "'%s': a name is longer than %d bytes", rel, NAME_MAX);
            return -1;
        }
        memcpy(part, p, n);
        part[n] = 0;
        if (strcmp(part, "..") == 0) {
            close(fd);
            korch_err_set(err, KORCH_E_INVALID, "'%s' leaves its directory", rel);
            return -1;
        }
        p += n;
        if (strcmp(part, ".") == 0)
            continue;
        int sub = s_sub_dir(fd, part, create, o, err);
        close(fd);
        if (sub < 0)
            return -1;
        fd = sub;
    }
    return fd;
}

static korch_rc_t s_write_all(int fd, const void *data, size_t len)
{
    const char *p = data;
    while (len) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return KORCH_E_IO;
        p += n;
        len -= (size_t)n;
    }
    return KORCH_OK;
}

/* A new file under a fresh random name in dirfd: its fd, the name in tmp.
   One the kernel planted (it can see the directory) is never opened:
   O_EXCL refuses it. -1 with err. */
static int s_create_temp(int dirfd, const char *name, char tmp[NAME_MAX + 1], korch_err_t *err)
{
    for (int tries = 0; tries < 8; tries++) {
        unsigned char r[8];
        if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) {
            korch_err_set(err, KORCH_E_IO, "cannot write '%s': no random bytes: %s", name, strerror(errno));
            return -1;
        }
        snprintf(tmp, NAME_MAX + 1, ".%.200s.korch-%02x%02x%02x%02x%02x%02x%02x%02x", name, r[0], r[1], r[2], r[3],
                 r[4], r[5], r[6], r[7]);
        int fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd >= 0)
            return fd;
        if (errno != EEXIST) {
            korch_err_set(err, errno == ENOSPC || errno == EDQUOT ? KORCH_E_TOOBIG : KORCH_E_IO,
                          "cannot write '%s': %s", name, strerror(errno));
            return -1;
        }
    }
    korch_err_set(err, KORCH_E_IO, "cannot write '%s': no free temporary name", name);
    return -1;
}

static int s_sync_dir(int dirfd)
{
    if (dirfd != AT_FDCWD)
        return fsync(dirfd);
    int fd = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int r = fd >= 0 ? fsync(fd) : -1;
    if (fd >= 0)
        close(fd);
    return r;
}

/* Owner and mode on the fd, then renameat into place (replacing, never
   following, whatever is at name). Closes fd; removes tmp on failure. */
static korch_rc_t s_commit(int dirfd, int fd, const char *tmp, const char *name, const korch_fs_opts_t *o,
                           bool written, korch_err_t *err)
{
    korch_rc_t rc = written ? KORCH_OK : KORCH_E_IO;
    const char *what = "write";
    int e = errno;
    if (rc == KORCH_OK && o->chown && fchown(fd, o->uid, o->gid) != 0)
        rc = KORCH_E_IO, e = errno, what = "give away";
    else if (rc == KORCH_OK && fchmod(fd, o->mode ? o->mode : 0600) != 0)
        rc = KORCH_E_IO, e = errno, what = "set the mode of";
    else if (rc == KORCH_OK && fsync(fd) != 0) /* the data on disk before the name points at it */
        rc = KORCH_E_IO, e = errno;
    if (close(fd) != 0 && rc == KORCH_OK)
        rc = KORCH_E_IO, e = errno;
    if (rc == KORCH_OK && renameat(dirfd, tmp, dirfd, name) != 0)
        rc = KORCH_E_IO, e = errno, what = "rename into place";
    /* the rename itself durable: the directory's entry. EINVAL/EROFS: a
       directory that cannot be synced (some filesystems), nothing to lose */
    if (rc == KORCH_OK && s_sync_dir(dirfd) != 0 && errno != EINVAL && errno != EROFS)
        return korch_err_set(err, KORCH_E_IO, "cannot sync the directory of '%s': %s", name, strerror(errno));
    if (rc) {
        unlinkat(dirfd, tmp, 0);
        return korch_err_set(err, e == ENOSPC || e == EDQUOT ? KORCH_E_TOOBIG : rc, "cannot %s '%s': %s", what, name,
                             strerror(e));
    }
    return KORCH_OK;
}

korch_rc_t korch_fs_write_at(int dirfd, const char *name, const void *data, size_t len, const korch_fs_opts_t *o,
                             korch_err_t *err)
{
    if (!o)
        o = &s_default_opts;
    if (!korch_path_is_name(name))
        return korch_err_set(err, KORCH_E_INVALID, "cannot write '%s': not a plain file name", name ? name : "");
    char tmp[NAME_MAX + 1];
    int fd = s_create_temp(dirfd, name, tmp, err);
    if (fd < 0)
        return err ? err->rc : KORCH_E_IO;
    return s_commit(dirfd, fd, tmp, name, o, s_write_all(fd, data, len) == KORCH_OK, err);
}

/* Split path into a directory fd and its last component (into base). */
static int s_parent(const char *path, char *base, size_t baselen, korch_err_t *err)
{
    const char *slash = strrchr(path, '/');
    char dir[PATH_MAX];
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == path)
        snprintf(dir, sizeof dir, "/");
    else
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    const char *b = slash ? slash + 1 : path;
    if (strlen(b) >= baselen || !korch_path_is_name(b)) {
        korch_err_set(err, KORCH_E_INVALID, "'%s' does not name a file", path);
        return -1;
    }
    snprintf(base, baselen, "%s", b);
    return korch_fs_open_dir(dir, err);
}

/* korch_fs_write_at into dfd (closed; -1: opening it failed, err says why). */
static korch_rc_t s_write_in(int dfd, const char *base, const void *data, size_t len, const korch_fs_opts_t *o,
                             korch_err_t *err)
{
    if (dfd < 0)
        return err ? err->rc : KORCH_E_IO;
    korch_rc_t rc = korch_fs_write_at(dfd, base, data, len, o, err);
    close(dfd);
    return rc;
}

korch_rc_t korch_fs_write(const char *path, const void *data, size_t len, const korch_fs_opts_t *o, korch_err_t *err)
{
    char base[NAME_MAX + 1];
    return s_write_in(s_parent(path, base, sizeof base, err), base, data, len, o, err);
}

korch_rc_t korch_fs_write_fill(const char *path, korch_fs_fill_fn fill, void *arg, const korch_fs_opts_t *o,
                               korch_err_t *err)
{
    if (!o)
        o = &s_default_opts;
    char base[NAME_MAX + 1], tmp[NAME_MAX + 1];
    int dfd = s_parent(path, base, sizeof base, err);
    if (dfd < 0)
        return err ? err->rc : KORCH_E_IO;
    int fd = s_create_temp(dfd, base, tmp, err);
    if (fd < 0) {
        close(dfd);
        return err ? err->rc : KORCH_E_IO;
    }
    korch_err_t fe = {0};
    korch_rc_t frc = fill(fd, arg, &fe);
    if (frc != KORCH_OK) {
        close(fd);
        unlinkat(dfd, tmp, 0);
        close(dfd);
        return korch_err_set(err, frc, "cannot write '%s': %s", path, fe.msg[0] ? fe.msg : korch_strerror(frc));
    }
    korch_rc_t rc = s_commit(dfd, fd, tmp, base, o, true, err);
    close(dfd);
    return rc;
}

korch_rc_t korch_fs_write_fd(int fd, const void *data, size_t len, korch_err_t *err)
{
    if (s_write_all(fd, data, len) == KORCH_OK)
        return KORCH_OK;
    return korch_err_set(err, errno == ENOSPC || errno == EDQUOT ? KORCH_E_TOOBIG : KORCH_E_IO, "%s", strerror(errno));
}

/* The directory part of rel, opened below root, and its last component. */
static int s_rel_parent(const char *root, const char *rel, bool create, const korch_fs_opts_t *o, const char **base,
                        korch_err_t *err)
{
    const char *slash = strrchr(rel, '/');
    *base = slash ? slash + 1 : rel;
    int rfd = korch_fs_open_dir(root, err);
    if (rfd < 0)
        return -1;
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - rel) : 0, rel);
    int dfd = korch_fs_open_dir_at(rfd, dir, create, o, err);
    close(rfd);
    return dfd;
}

korch_rc_t korch_fs_write_rel(const char *root, const char *rel, const void *data, size_t len, bool mkparents,
                              const korch_fs_opts_t *o, korch_err_t *err)
{
    const char *base;
    int dfd = s_rel_parent(root, rel, mkparents, o, &base, err);
    return s_write_in(dfd, base, data, len, o, err);
}

/* All of fd, at most max bytes (it may grow while it is read), NUL-terminated;
   hint: its size, allocated at once. label names it in messages. */
static char *s_read_fd(int fd, size_t max, size_t hint, const char *label, size_t *plen, korch_err_t *err)
{
    korch_buf_t b = KORCH_BUF_INIT(max);
    korch_rc_t rc = korch_buf_reserve(&b, hint < max ? hint : max, "file", NULL);
    char chunk[65536];
    while (rc == KORCH_OK) {
        ssize_t n = read(fd, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            rc = korch_err_set(err, KORCH_E_IO, "cannot read '%s': %s", label, strerror(errno));
        if (n <= 0)
            break;
        rc = korch_buf_add(&b, chunk, (size_t)n, "file", NULL);
    }
    if (rc == KORCH_E_TOOBIG)
        korch_err_set(err, rc, "'%s' is larger than %zu bytes", label, max);
    else if (rc == KORCH_E_NOMEM)
        korch_err_set(err, rc, "out of memory reading '%s'", label);
    char *out = rc ? NULL : korch_buf_release(&b, plen);
    if (!rc && !out)
        korch_err_set(err, KORCH_E_NOMEM, "out of memory reading '%s'", label);
    korch_buf_free(&b);
    return out;
}

/* label names the file in messages (the path the caller knows). */
static char *s_read_at(int dirfd, const char *name, const char *label, size_t max, bool nofollow, size_t *plen,
                       korch_err_t *err)
{
    int fd = openat(dirfd, name, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC | (nofollow ? O_NOFOLLOW : 0));
    struct stat st;
    char *buf = NULL;
    if (fd < 0) {
        int e = errno;
        if (e == ELOOP)
            korch_err_set(err, KORCH_E_INVALID, "'%s' is a symbolic link: refusing to follow it", label);
        else
            korch_err_set(err, e == ENOENT ? KORCH_E_NOTFOUND : KORCH_E_IO, "cannot read '%s': %s", label, strerror(e));
        return NULL;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        korch_err_set(err, KORCH_E_INVALID, "'%s' is not a regular file: not reading it", label);
        goto out;
    }
    if ((uint64_t)st.st_size > max) {
        korch_err_set(err, KORCH_E_TOOBIG, "'%s' is larger than %zu bytes", label, max);
        goto out;
    }
    buf = s_read_fd(fd, max, (size_t)st.st_size, label, plen, err);
out:
    close(fd);
    return buf;
}

char *korch_fs_read_at(int dirfd, const char *name, size_t max, bool nofollow, size_t *len, korch_err_t *err)
{
    return s_read_at(dirfd, name, name, max, nofollow, len, err);
}

char *korch_fs_read(const char *path, size_t max, bool nofollow, size_t *len, korch_err_t *err)
{
    char base[NAME_MAX + 1];
    int dfd = s_parent(path, base, sizeof base, err);
    if (dfd < 0)
        return NULL;
    char *buf = s_read_at(dfd, base, path, max, nofollow, len, err);
    close(dfd);
    return buf;
}

char *korch_fs_read_rel(const char *root, const char *rel, size_t max, size_t *len, korch_err_t *err)
{
    const char *base;
    int dfd = s_rel_parent(root, rel, false, NULL, &base, err);
    if (dfd < 0)
        return NULL;
    char *buf = korch_fs_read_at(dfd, base, max, true, len, err);
    close(dfd);
    return buf;
}

/* ---------------------------------------------------------------- trees */

static void s_chown_dir(void *arg, int fd, int mirror, const char *rel, const struct stat *st)
{
    (void)mirror, (void)rel, (void)st;
    const uid_t *ids = arg;
    if (fchown(fd, ids[0], (gid_t)ids[1]) != 0)
        korch_debug("cannot chown a directory: %s", strerror(errno));
}

static void s_chown_entry(void *arg, int dirfd, int mirror, const char *name, const char *rel, const struct stat *st)
{
    (void)mirror, (void)rel;
    const uid_t *ids = arg;
    /* By name, but the name never followed; a file with other links may be
       a host file linked in: left alone, as are links themselves. */
    if (S_ISREG(st->st_mode) && st->st_nlink == 1 &&
        fchownat(dirfd, name, ids[0], (gid_t)ids[1], AT_SYMLINK_NOFOLLOW) != 0)
        korch_debug("cannot chown '%s': %s", name, strerror(errno));
}

korch_rc_t korch_fs_chown_tree(const char *dir, uid_t uid, gid_t gid, korch_err_t *err)
{
    int fd = korch_fs_open_dir(dir, err);
    if (fd < 0)
        return err ? err->rc : KORCH_E_IO;
    uid_t ids[2] = {uid, (uid_t)gid};
    korch_fs_walk_t w = {.dir = s_chown_dir, .entry = s_chown_entry, .arg = ids};
    korch_rc_t rc = korch_fs_walk(fd, -1, &w, err);
    close(fd);
    return rc;
}

/* from/name into to/name, streamed: never more than max - *done bytes in
   all (KORCH_E_TOOBIG beyond), never a link or a special file. */
/* What a copy shares down its tree: the bound, the caller's note, the path. */
typedef struct {
    const korch_fs_copy_t *c;
    const korch_fs_opts_t *o;
    uint64_t done;
    const char *rel;            /* the entry's path below from_dir (the walk's) */
    korch_err_t err;            /* the disk filled up */
} s_copy_t;

static void s_note(s_copy_t *cp, const struct stat *st, const char *why)
{
    if (cp->c && cp->c->on_file)
        cp->c->on_file(cp->rel, st, why, cp->c->arg);
}

/* One regular file: copied, or skipped with a note (never an error that
   stops the rest: a file that cannot be copied takes no other with it). */
static void s_copy_file(s_copy_t *cp, int from, const char *name, int to, korch_err_t *err)
{
    uint64_t max = cp->c ? cp->c->max_bytes : 0;
    int in = openat(from, name, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
    struct stat st;
    if (in < 0)
        return; /* gone, or not a regular file any more */
    if (fstat(in, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(in);
        return;
    }
    /* by its apparent size: a sparse file would be written out in full */
    if (max && (uint64_t)st.st_size > max - cp->done) {
        close(in);
        s_note(cp, &st,
               (uint64_t)st.st_blocks * 512 < (uint64_t)st.st_size / 2 ? "sparse, larger than what is left to copy"
                                                                       : "larger than what is left to copy");
        return;
    }
    char tmp[NAME_MAX + 1];
    korch_err_t e = {0};
    int out = s_create_temp(to, name, tmp, &e);
    if (out < 0) {
        close(in);
        s_note(cp, &st, e.msg);
        return;
    }
    static __thread char buf[1 << 16];
    bool ok = true, toobig = false;
    uint64_t n_file = 0;
    for (;;) {
        ssize_t n = read(in, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            ok = n == 0;
            break;
        }
        if (max && cp->done + n_file + (uint64_t)n > max) { /* it grew while we copied */
            toobig = true;
            ok = false;
            break;
        }
        if (s_write_all(out, buf, (size_t)n) != KORCH_OK) {
            ok = false;
            break;
        }
        n_file += (uint64_t)n;
    }
    close(in);
    if (toobig) {
        close(out);
        unlinkat(to, tmp, 0);
        s_note(cp, &st, "larger than what is left to copy");
        return;
    }
    if (s_commit(to, out, tmp, name, cp->o, ok, &e) != KORCH_OK) {
        s_note(cp, &st, e.msg[0] ? e.msg : "cannot write it");
        if (e.rc == KORCH_E_TOOBIG) /* the disk is full: the rest is noted too, and the caller told */
            korch_err_set(err, KORCH_E_TOOBIG, "no space left while copying '%s'", cp->rel);
        return;
    }
    cp->done += n_file;
    s_note(cp, &st, NULL);
}

static bool s_ours(const char *name) { return name[0] == '.' && strstr(name, ".korch-"); /* a temp file of ours */ }

static void s_copy_entry(void *arg, int dirfd, int mirror, const char *name, const char *rel, const struct stat *st)
{
    s_copy_t *cp = arg;
    if (s_ours(name))
        return;
    cp->rel = rel;
    if (S_ISREG(st->st_mode))
        s_copy_file(cp, dirfd, name, mirror, &cp->err);
    else
        s_note(cp, st, S_ISLNK(st->st_mode) ? "a symbolic link" : "a special file (fifo, socket or device)");
}

static int s_copy_twin(void *arg, int mirror, const char *name, const char *rel, const struct stat *st)
{
    s_copy_t *cp = arg;
    if (s_ours(name))
        return -1;
    int fd = s_sub_dir(mirror, name, true, cp->o, NULL);
    if (fd < 0) {
        cp->rel = rel;
        s_note(cp, st, "cannot open or make the directory");
    }
    return fd;
}

static void s_copy_skipped(void *arg, const char *rel, const struct stat *st, const char *why)
{
    s_copy_t *cp = arg;
    struct stat none = {.st_mode = S_IFDIR};
    cp->rel = rel;
    s_note(cp, st ? st : &none, why);
}

korch_rc_t korch_fs_copy_tree(int from_dir, int to_dir, const korch_fs_copy_t *c, const korch_fs_opts_t *o,
                              uint64_t *copied, korch_err_t *err)
{
    s_copy_t *cp = calloc(1, sizeof *cp);
    if (!cp)
        return korch_err_set(err, KORCH_E_NOMEM, "out of memory");
    cp->c = c;
    cp->o = o ? o : &s_default_opts;
    korch_fs_walk_t w = {.entry = s_copy_entry, .twin = s_copy_twin, .skipped = s_copy_skipped, .arg = cp};
    korch_err_t e = {0};
    korch_rc_t rc = korch_fs_walk(from_dir, to_dir, &w, &e);
    if (rc == KORCH_OK && cp->err.rc)
        rc = korch_err_set(err, cp->err.rc, "%s", cp->err.msg);
    else if (rc)
        korch_err_set(err, rc, "%s", e.msg);
    if (copied)
        *copied = cp->done;
    free(cp);
    return rc;
}

korch_rc_t korch_write_file(const char *path, const void *data, size_t len, korch_err_t *err)
{
    korch_fs_opts_t o = {.mode = 0644};
    return korch_fs_write(path, data, len, &o, err);
}

korch_rc_t korch_mkdirs(const char *path, int mode, korch_err_t *err)
{
    char tmp[4096];
    if (!path || !*path || snprintf(tmp, sizeof tmp, "%s", path) >= (int)sizeof tmp)
        return korch_err_set(err, KORCH_E_INVALID, "cannot create '%s': the path is empty or too long",
                             path ? path : "");
    for (char *p = tmp + 1;; p++) {
        if (*p != '/' && *p)
            continue;
        char c = *p;
        *p = 0;
        struct stat st;
        if (mkdir(tmp, (mode_t)mode) != 0 && errno != EEXIST)
            return korch_err_set(err, KORCH_E_IO, "cannot create '%s': %s", tmp, strerror(errno));
        if (stat(tmp, &st) != 0)
            return korch_err_set(err, KORCH_E_IO, "cannot create '%s': %s", tmp, strerror(errno));
        if (!S_ISDIR(st.st_mode))
            return korch_err_set(err, KORCH_E_IO, "cannot create '%s': it exists and is not a directory", tmp);
        *p = c;
        if (!c)
            break;
        while (p[1] == '/')
            p++;
    }
    return KORCH_OK;
}

char *korch_read_file(const char *path, size_t max, size_t *plen, korch_err_t *err)
{
    bool in = strcmp(path, "-") == 0;
    int fd = in ? STDIN_FILENO : open(path, O_RDONLY | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) {
        korch_err_set(err, errno == ENOENT ? KORCH_E_NOTFOUND : KORCH_E_IO, "cannot read '%s': %s", path,
                      strerror(errno));
        return NULL;
    }
    char *out = s_read_fd(fd, max, 0, path, plen, err);
    if (!in)
        close(fd);
    return out;
}
