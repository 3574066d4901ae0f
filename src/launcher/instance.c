/*  korch instances: a name plus an flock that lives exactly as long as the
 *  process holding it. */
#include "korch/instance.h"
#include "korch/session.h"
#include "korch/uuid.h"

#include <openssl/rand.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

struct korch_instance {
    char name[64];
    int fd; /* holds LOCK_EX on the lock file */
};

static korch_rc_t s_private_dir(const char *path, korch_err_t *err)
{
    if (mkdir(path, 0700) != 0 && errno != EEXIST)
        return korch_err_set(err, KORCH_E_IO, "cannot create runtime dir '%s': %s", path, strerror(errno));
    struct stat st;
    if (lstat(path, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != getuid() || (st.st_mode & 077))
        return korch_err_set(err, KORCH_E_IO,
                             "runtime dir '%s' is not a private directory of ours (want mode 0700, owner uid %d)",
                             path, (int)getuid());
    return KORCH_OK;
}

korch_rc_t korch_runtime_base(char *buf, size_t len, korch_err_t *err)
{
    const char *env = getenv("KORCH_RUNTIME_DIR");
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    if (env && *env)
        snprintf(buf, len, "%s", env);
    else if (xdg && *xdg && access(xdg, W_OK) == 0)
        snprintf(buf, len, "%s/korch", xdg);
    else
        snprintf(buf, len, "/tmp/korch-%d", (int)getuid());
    return s_private_dir(buf, err);
}

#define S_SCOPE_FILE "scope"

static bool s_scope_ok(const char *s)
{
    if (strncmp(s, "rt-", 3) != 0 || strlen(s) != KORCH_SCOPE_LEN - 1)
        return false;
    for (s += 3; *s; s++)
        if (!strchr("0123456789abcdef", *s))
            return false;
    return true;
}

/* Read {dirfd}/scope: 0 and the id in buf, -1 + errno (ENOENT: none yet),
   or 1 when the file is there but not korch's. */
static int s_scope_read(int dirfd, char *buf, size_t len)
{
    int fd = openat(dirfd, S_SCOPE_FILE, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return errno == ELOOP ? 1 : -1;
    struct stat st;
    char text[64];
    ssize_t n = -1;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() && !(st.st_mode & 077) &&
        st.st_size < (off_t)sizeof text)
        n = read(fd, text, sizeof text - 1);
    close(fd);
    if (n < 0)
        return 1;
    text[n] = 0;
    text[strcspn(text, "\n")] = 0;
    if (!s_scope_ok(text) || len < KORCH_SCOPE_LEN)
        return 1;
    snprintf(buf, len, "%s", text);
    return 0;
}

korch_rc_t korch_runtime_scope(const char *base, char *buf, size_t len, korch_err_t *err)
{
    char mine[PATH_MAX], tmp[64];
    korch_rc_t rc = KORCH_OK;
    if (!buf || len < KORCH_SCOPE_LEN)
        return korch_err_set(err, KORCH_E_TOOBIG, "scope buffer too small");
    if (!base) {
        if ((rc = korch_runtime_base(mine, sizeof mine, err)))
            return rc;
        base = mine;
    }
    int dirfd = open(base, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dirfd < 0)
        return korch_err_set(err, KORCH_E_IO, "cannot open runtime dir '%s': %s", base, strerror(errno));
    int r = s_scope_read(dirfd, buf, len);
    if (r < 0 && errno == ENOENT) {
        /* First use: a new id, in place at once (link fails if another
           korch made one first: then that one counts). */
        unsigned char b[(KORCH_SCOPE_LEN - 4) / 2];
        char id[KORCH_SCOPE_LEN + 1];
        if (RAND_bytes(b, sizeof b) != 1) {
            close(dirfd);
            return korch_err_set(err, KORCH_E_IO, "cannot make a scope id (openssl RAND_bytes failed)");
        }
        memcpy(id, "rt-", 3);
        for (size_t i = 0; i < sizeof b; i++) {
            id[3 + 2 * i] = "0123456789abcdef"[b[i] >> 4];
            id[4 + 2 * i] = "0123456789abcdef"[b[i] & 15];
        }
        id[KORCH_SCOPE_LEN - 1] = '\n';
        id[KORCH_SCOPE_LEN] = 0;
        snprintf(tmp, sizeof tmp, ".scope.%d", (int)getpid());
        unlinkat(dirfd, tmp, 0);
        int fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        bool written = fd >= 0 && write(fd, id, KORCH_SCOPE_LEN) == KORCH_SCOPE_LEN && fsync(fd) == 0;
        if (fd >= 0)
            close(fd);
        if (written && linkat(dirfd, tmp, dirfd, S_SCOPE_FILE, 0) != 0 && errno != EEXIST)
            written = false;
        unlinkat(dirfd, tmp, 0);
        if (!written) {
            rc = korch_err_set(err, KORCH_E_IO, "cannot write the scope file '%s/%s': %s", base, S_SCOPE_FILE,
                               strerror(errno));
            close(dirfd);
            return rc;
        }
        r = s_scope_read(dirfd, buf, len);
    }
    close(dirfd);
    if (r < 0)
        rc = korch_err_set(err, KORCH_E_IO, "cannot read the scope file '%s/%s': %s", base, S_SCOPE_FILE,
                           strerror(errno));
    else if (r > 0)
        rc = korch_err_set(err, KORCH_E_INVALID,
                           "'%s/%s' is not korch's scope file (want a regular file of uid %u, mode 0600, holding "
                           "'rt-' and 16 hex digits): remove it if nothing else wrote it, korch makes a new one",
                           base, S_SCOPE_FILE, (unsigned)geteuid());
    return rc;
}

static bool s_valid(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n > 48 || name[0] == '.')
        return false;
    for (const char *p = name; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '-' ||
              *p == '_' || *p == '.'))
            return false;
    return true;
}

static int s_lock_path(const char *name, char *path, size_t len, korch_err_t *err)
{
    char base[PATH_MAX];
    if (korch_runtime_base(base, sizeof base, err) != KORCH_OK)
        return -1;
    char dir[PATH_MAX + 16];
    snprintf(dir, sizeof dir, "%s/instances", base);
    if (s_private_dir(dir, err) != KORCH_OK)
        return -1;
    snprintf(path, len, "%s/%s.lock", dir, name);
    return 0;
}

korch_instance_t *korch_instance_new(const char *name, korch_err_t *err)
{
    char gen[64];
    if (!name) {
        char uuid[37];
        korch_uuid(uuid);
        snprintf(gen, sizeof gen, "k-%.8s", uuid);
        name = gen;
    }
    if (!s_valid(name)) {
        korch_err_set(err, KORCH_E_INVALID, "instance name '%s' is not valid (up to 48 letters, digits, - _ .)", name);
        return NULL;
    }
    char path[PATH_MAX + 64];
    if (s_lock_path(name, path, sizeof path, err) != 0)
        return NULL;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        korch_err_set(err, KORCH_E_IO, "cannot open '%s': %s", path, strerror(errno));
        return NULL;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        char pid[32] = "";
        ssize_t n = pread(fd, pid, sizeof pid - 1, 0);
        pid[n > 0 ? n : 0] = 0;
        pid[strcspn(pid, "\n")] = 0;
        close(fd);
        korch_err_set(err, KORCH_E_STATE, "instance '%s' is in use by another korch (pid %s)", name,
                      pid[0] ? pid : "?");
        return NULL;
    }
    char pid[32];
    int n = snprintf(pid, sizeof pid, "%d\n", (int)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)n, 0) != n) {
        /* informational only; the lock is what counts */
    }
    korch_instance_t *self = calloc(1, sizeof *self);
    if (!self) {
        close(fd);
        korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        return NULL;
    }
    snprintf(self->name, sizeof self->name, "%s", name);
    self->fd = fd;
    return self;
}

void korch_instance_destroy(korch_instance_t **pself)
{
    if (!pself || !*pself)
        return;
    korch_instance_t *self = *pself;
    char path[PATH_MAX + 64];
    if (s_lock_path(self->name, path, sizeof path, NULL) == 0)
        unlink(path);
    close(self->fd);
    free(self);
    *pself = NULL;
}

const char *korch_instance_name(const korch_instance_t *self) { return self->name; }

bool korch_instance_alive(const char *name)
{
    char path[PATH_MAX + 64];
    if (!s_valid(name) || s_lock_path(name, path, sizeof path, NULL) != 0)
        return false;
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return false;
    bool alive = flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
    close(fd); /* drops our lock if we got it */
    return alive;
}

void korch_instance_forget(const char *name)
{
    char path[PATH_MAX + 64];
    if (!s_valid(name) || s_lock_path(name, path, sizeof path, NULL) != 0)
        return;
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return;
    /* Holding the lock while unlinking: nobody can be using it. */
    if (flock(fd, LOCK_EX | LOCK_NB) == 0)
        unlink(path);
    close(fd);
}
