/*  Kernel uids no account has (kuid.h). */
#include "kuid.h"
#include "korch/log.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <pthread.h>
#include <pwd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#define S_FIRST 2000000000u
#define S_LAST 2000999999u
#define S_LOCK_DIR "/run/korch-uids"
#define S_TRIES 256

/* The uids this process holds, each with its flock once: a restart's
   start asks again for the uid its freed predecessor still holds (until
   its cgroup is empty) and shares it. */
typedef struct s_held {
    struct s_held *next;
    uid_t uid;
    int fd;                 /* the flock on S_LOCK_DIR/uid */
    int refs;
} s_held_t;

static pthread_mutex_t s_mu = PTHREAD_MUTEX_INITIALIZER;
static s_held_t *s_held;

struct korch_kuid {
    s_held_t *h;
};

bool korch_kuid_range(uid_t *first, uid_t *last, korch_err_t *err)
{
    const char *s = getenv("KORCH_KERNEL_UIDS");
    *first = S_FIRST;
    *last = S_LAST;
    if (!s || !*s)
        return true;
    char *end = NULL;
    errno = 0;
    unsigned long a = strtoul(s, &end, 10), b = 0;
    bool ok = errno == 0 && end != s && *end == '-';
    if (ok) {
        const char *t = end + 1;
        b = strtoul(t, &end, 10);
        ok = errno == 0 && end != t && !*end && a > 0 && a <= b && b < 0x80000000UL;
    }
    if (!ok) {
        korch_err_set(err, KORCH_E_INVALID,
                      "KORCH_KERNEL_UIDS '%s' is not a uid range FIRST-LAST below 2^31 (e.g. 2000000000-2000999999)",
                      s);
        return false;
    }
    *first = (uid_t)a;
    *last = (uid_t)b;
    return true;
}

bool korch_kuid_is_kernel(uid_t uid)
{
    uid_t a, b;
    return korch_kuid_range(&a, &b, NULL) && uid >= a && uid <= b;
}

/* Lock uid's file: its fd, or -1 (taken, or errno). */
static int s_lock(int dirfd, uid_t uid)
{
    char name[16];
    snprintf(name, sizeof name, "%u", (unsigned)uid);
    int fd = openat(dirfd, name, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return -1;
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

/* Does an account or group of the host have uid? */
static bool s_known(uid_t uid)
{
    return getpwuid(uid) != NULL || getgrgid((gid_t)uid) != NULL;
}

korch_kuid_t *korch_kuid_claim(uid_t want, korch_err_t *err)
{
    uid_t first, last;
    if (!korch_kuid_range(&first, &last, err))
        return NULL;
    if (mkdir(S_LOCK_DIR, 0700) != 0 && errno != EEXIST) {
        korch_err_set(err, KORCH_E_LAUNCH, "cannot make '%s' for the kernels' uids: %s", S_LOCK_DIR, strerror(errno));
        return NULL;
    }
    int dirfd = open(S_LOCK_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (dirfd < 0 || fstat(dirfd, &st) != 0 || st.st_uid != 0 || (st.st_mode & 022)) {
        korch_err_set(err, KORCH_E_LAUNCH, "'%s' is not a directory of root's that only root writes: %s", S_LOCK_DIR,
                      dirfd < 0 ? strerror(errno) : "refusing to use it for the kernels' uids");
        if (dirfd >= 0)
            close(dirfd);
        return NULL;
    }
    korch_kuid_t *k = calloc(1, sizeof *k);
    if (!k) {
        close(dirfd);
        korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        return NULL;
    }
    pthread_mutex_lock(&s_mu);
    for (s_held_t *h = s_held; h && want; h = h->next)
        if (h->uid == want) { /* ours already: a restart of the same kernel */
            h->refs++;
            k->h = h;
            pthread_mutex_unlock(&s_mu);
            close(dirfd);
            return k;
        }
    uint64_t count = (uint64_t)last - first + 1, r = 0;
    if (getrandom(&r, sizeof r, 0) != (ssize_t)sizeof r)
        r = (uint64_t)getpid() * 2654435761u;
    int fd = -1;
    uid_t uid = 0;
    if (want >= first && want <= last) {
        uid = want;
        if (s_known(uid)) {
            korch_err_set(err, KORCH_E_LAUNCH, "kernel uid %u belongs to an account of this host ('%s'): choose "
                          "another KORCH_KERNEL_UIDS range", (unsigned)uid, getpwuid(uid) ? getpwuid(uid)->pw_name : "a group");
            goto out;
        }
        if ((fd = s_lock(dirfd, uid)) < 0) {
            korch_err_set(err, KORCH_E_LAUNCH, "kernel uid %u is in use by another kernel", (unsigned)uid);
            goto out;
        }
    } else {
        for (int i = 0; fd < 0 && i < S_TRIES && (uint64_t)i < count; i++) {
            uid = (uid_t)(first + (r + (uint64_t)i) % count);
            if (!s_known(uid))
                fd = s_lock(dirfd, uid);
        }
        if (fd < 0) {
            korch_err_set(err, KORCH_E_LAUNCH, "no free kernel uid in %u-%u (KORCH_KERNEL_UIDS): all taken or "
                          "accounts of this host", (unsigned)first, (unsigned)last);
            goto out;
        }
    }
    if (!(k->h = malloc(sizeof *k->h))) {
        close(fd);
        korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        goto out;
    }
    *k->h = (s_held_t){.next = s_held, .uid = uid, .fd = fd, .refs = 1};
    s_held = k->h;
out:
    pthread_mutex_unlock(&s_mu);
    close(dirfd);
    if (!k->h) {
        free(k);
        k = NULL;
    }
    return k;
}

uid_t korch_kuid_uid(const korch_kuid_t *k) { return k->h->uid; }

void korch_kuid_release(korch_kuid_t **pk)
{
    if (!pk || !*pk)
        return;
    s_held_t *h = (*pk)->h;
    pthread_mutex_lock(&s_mu);
    if (--h->refs == 0) {
        for (s_held_t **pp = &s_held; *pp; pp = &(*pp)->next)
            if (*pp == h) {
                *pp = h->next;
                break;
            }
        close(h->fd); /* the lock goes with it; the file stays (removing it would race a claim) */
        free(h);
    }
    pthread_mutex_unlock(&s_mu);
    free(*pk);
    *pk = NULL;
}

void korch_kuid_owner(const char *dir, uid_t *uid, gid_t *gid)
{
    struct stat st;
    *uid = geteuid();
    *gid = getegid();
    if (dir && stat(dir, &st) == 0 && !korch_kuid_is_kernel(st.st_uid)) {
        *uid = st.st_uid;
        *gid = st.st_gid;
    }
    const char *su = getenv("SUDO_UID"), *sg = getenv("SUDO_GID");
    if (*uid == 0 && su && *su) {
        char *end;
        unsigned long u = strtoul(su, &end, 10), g = sg ? strtoul(sg, NULL, 10) : u;
        if (!*end && u > 0 && u < 0x80000000UL) {
            *uid = (uid_t)u;
            *gid = (gid_t)g;
        }
    }
}
