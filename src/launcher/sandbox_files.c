/*  put_file / get_file in a sandbox kernel's work dir (sandbox_int.h). */
#include "sandbox_int.h"
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

/* ---------------------------------------------------------------- files */

/* Open the directory name inside dirfd without following a link; with
   create, make it first when absent (given to uid:gid when give). */
int korch_sandbox_open_dir(int dirfd, const char *name, bool create, bool give, uid_t uid, gid_t gid)
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
        int next = korch_sandbox_open_dir(fd, comp, create, p->l->drop, p->uid, p->gid);
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

korch_rc_t korch_sandbox_put_file_now(korch_proc_t *proc, const char *name, const void *data, size_t len,
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
    if (!rc && p->l->drop && fchown(fd, p->uid, p->gid) != 0)
        korch_debug("cannot give '%s' to the kernel: %s", name, strerror(errno));
out:
    if (fd >= 0)
        close(fd);
    close(dfd);
    return rc;
}

korch_rc_t korch_sandbox_get_file_now(korch_proc_t *proc, const char *name, size_t max, char **data, size_t *len,
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
