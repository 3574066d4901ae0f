/*  The walk of a tree a kernel wrote (fswalk.h): any depth, no recursion,
 *  at most S_WALK_FDS + 1 directories open per tree.
 *
 *  Why names and not telldir: a directory closed on the way down is opened
 *  again on the way back, and a seekdir cookie of one open is not promised
 *  to mean the same in another (tmpfs counts entries). So each directory
 *  is read once, whole, when entered, and only its subdirectories' names
 *  are kept: memory grows with the directories along the path, which the
 *  filesystem (a kernel's bounded tmpfs, a user's work dir) bounds.
 *
 *  Cost: a tree D levels deep is entered with D openat calls; on the way
 *  back up every S_WALK_FDS levels the next S_WALK_FDS are opened again
 *  from the nearest open ancestor (the top at worst), so about
 *  D^2 / (2 * S_WALK_FDS) openat in all: a 5000-level tree, ~780 k calls.
 */
#include "fswalk.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define S_WALK_FDS 32 /* directories open per tree below the top, at most */

typedef struct {
    int fd, twin;           /* -1 while closed (and twin -1 without a mirror) */
    char *name;             /* its name in the parent (NULL at the top) */
    dev_t dev;
    ino_t ino;              /* what it must be when opened again */
    char **subs;            /* its subdirectories' names still to enter */
    size_t nsubs, next;
    size_t rel_len;         /* its rel's length */
} s_frame_t;

typedef struct {
    const korch_fs_walk_t *w;
    bool mirrored;
    s_frame_t *f;           /* the path, f[0] the top */
    size_t depth, cap;
    size_t open_from;       /* frames [1, open_from) are closed */
    char *rel;
    size_t rel_cap;
} s_walk_t;

static void s_close(s_frame_t *f)
{
    if (f->fd >= 0)
        close(f->fd);
    if (f->twin >= 0)
        close(f->twin);
    f->fd = f->twin = -1;
}

static void s_free_frame(s_frame_t *f)
{
    s_close(f);
    for (size_t i = f->next; i < f->nsubs; i++)
        free(f->subs[i]);
    free(f->subs);
    free(f->name);
    memset(f, 0, sizeof *f);
    f->fd = f->twin = -1;
}

static void s_skip(s_walk_t *k, const struct stat *st, const char *why)
{
    if (k->w->skipped)
        k->w->skipped(k->w->arg, k->rel, st, why);
}

/* rel = the deepest frame's rel + "/" + name (or name at the top). */
static bool s_rel(s_walk_t *k, size_t base, const char *name)
{
    size_t nl = strlen(name), need = base + 1 + nl + 1;
    if (need > k->rel_cap) {
        size_t cap = k->rel_cap ? k->rel_cap : 256;
        while (cap < need)
            cap *= 2;
        char *r = realloc(k->rel, cap);
        if (!r)
            return false;
        k->rel = r;
        k->rel_cap = cap;
    }
    size_t at = base;
    if (base)
        k->rel[at++] = '/';
    memcpy(k->rel + at, name, nl + 1);
    return true;
}

/* Read directory f (its fd) whole: entry() for what is not a directory,
   the subdirectories' names into f->subs. */
static bool s_list(s_walk_t *k, s_frame_t *f)
{
    int dup = fcntl(f->fd, F_DUPFD_CLOEXEC, 0);
    DIR *d = dup >= 0 ? fdopendir(dup) : NULL;
    if (!d) {
        if (dup >= 0)
            close(dup);
        return false;
    }
    rewinddir(d); /* a dup shares the offset */
    size_t cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        struct stat st;
        if (fstatat(f->fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
            continue;
        if (!S_ISDIR(st.st_mode)) {
            if (k->w->entry && s_rel(k, f->rel_len, de->d_name))
                k->w->entry(k->w->arg, f->fd, f->twin, de->d_name, k->rel, &st);
            continue;
        }
        if (f->nsubs == cap) {
            size_t nc = cap ? cap * 2 : 8;
            char **s = realloc(f->subs, nc * sizeof *s);
            if (!s)
                break;
            f->subs = s;
            cap = nc;
        }
        if (!(f->subs[f->nsubs] = strdup(de->d_name)))
            break;
        f->nsubs++;
    }
    closedir(d);
    k->rel[f->rel_len] = 0;
    return true;
}

/* Open subdirectory name of parent (fds pfd, ptwin) as frame c; false when
   it cannot be (or, again, is not the directory it was). */
static bool s_open(s_walk_t *k, int pfd, int ptwin, const char *name, s_frame_t *c, bool again, const char **why)
{
    struct stat st;
    c->fd = openat(pfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    c->twin = -1;
    if (c->fd < 0 || fstat(c->fd, &st) != 0) {
        *why = "cannot open the directory";
        s_close(c);
        return false;
    }
    if (again && (st.st_dev != c->dev || st.st_ino != c->ino)) {
        *why = "the directory was replaced while korch walked it";
        s_close(c);
        return false;
    }
    c->dev = st.st_dev;
    c->ino = st.st_ino;
    if (k->mirrored && (c->twin = k->w->twin(k->w->arg, ptwin, name, k->rel, &st)) < 0) {
        *why = NULL; /* twin() said why */
        s_close(c);
        return false;
    }
    return true;
}

/* Frames [1, open_from) are closed: keep at most S_WALK_FDS open below
   the top by closing the shallowest of them. */
static void s_bound(s_walk_t *k)
{
    while (k->depth - k->open_from > S_WALK_FDS) {
        if (k->open_from > 0)
            s_close(&k->f[k->open_from]);
        k->open_from++;
    }
}

/* The deepest frame is closed, and so are all below the top (open are
   frame 0 and [open_from, depth), and open_from == depth): open it again,
   with up to S_WALK_FDS - 1 above it, by name from the top. k->rel holds
   its rel. */
static bool s_reopen(s_walk_t *k)
{
    size_t last = k->depth - 1, from = last + 1 > S_WALK_FDS ? last + 1 - S_WALK_FDS : 1;
    for (size_t i = 1; i <= last; i++) {
        s_frame_t *p = &k->f[i - 1], *c = &k->f[i];
        const char *why = NULL;
        char save = k->rel[c->rel_len];
        k->rel[c->rel_len] = 0; /* c's rel, for twin() and the note */
        bool ok = s_open(k, p->fd, p->twin, c->name, c, true, &why);
        if (i - 1 >= 1 && i - 1 < from)
            s_close(p); /* passed through, above what is kept */
        if (!ok) {
            if (why)
                s_skip(k, NULL, why);
            k->rel[c->rel_len] = save;
            for (size_t x = 1; x <= last; x++)
                s_close(&k->f[x]);
            k->open_from = last + 1;
            return false; /* the rest below c is left; the frames above it are fine */
        }
        k->rel[c->rel_len] = save;
    }
    k->open_from = from;
    return true;
}

korch_rc_t korch_fs_walk(int top, int mirror, const korch_fs_walk_t *w, korch_err_t *err)
{
    s_walk_t k = {.w = w, .mirrored = mirror >= 0 && w->twin};
    korch_rc_t rc = KORCH_OK;
    struct stat st;
    if (!(k.f = calloc(k.cap = 16, sizeof *k.f)) || !s_rel(&k, 0, "")) {
        rc = korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        goto out;
    }
    k.f[0].fd = fcntl(top, F_DUPFD_CLOEXEC, 0);
    k.f[0].twin = k.mirrored ? fcntl(mirror, F_DUPFD_CLOEXEC, 0) : -1;
    k.depth = 1;
    k.open_from = 1;
    if (k.f[0].fd < 0 || fstat(k.f[0].fd, &st) != 0 || (k.mirrored && k.f[0].twin < 0)) {
        rc = korch_err_set(err, KORCH_E_IO, "cannot open a directory to walk: %s", strerror(errno));
        goto out;
    }
    if (w->dir)
        w->dir(w->arg, k.f[0].fd, k.f[0].twin, "", &st);
    if (!s_list(&k, &k.f[0])) {
        rc = korch_err_set(err, KORCH_E_IO, "cannot list '.': %s", strerror(errno));
        goto out;
    }
    while (k.depth > 0) {
        s_frame_t *f = &k.f[k.depth - 1];
        if (f->next >= f->nsubs) {
            s_free_frame(f);
            k.depth--;
            if (k.open_from > k.depth)
                k.open_from = k.depth > 0 ? k.depth : 1;
            if (k.depth > 0)
                k.rel[k.f[k.depth - 1].rel_len] = 0;
            continue;
        }
        if (f->fd < 0 && !s_reopen(&k)) {
            while (f->next < f->nsubs)
                free(f->subs[f->next++]);
            continue;
        }
        char *name = f->subs[f->next++];
        if (k.depth == k.cap) {
            s_frame_t *nf = realloc(k.f, 2 * k.cap * sizeof *nf);
            if (!nf) {
                free(name);
                rc = korch_err_set(err, KORCH_E_NOMEM, "out of memory");
                goto out;
            }
            memset(nf + k.cap, 0, k.cap * sizeof *nf);
            k.f = nf;
            k.cap *= 2;
            f = &k.f[k.depth - 1];
        }
        s_frame_t *c = &k.f[k.depth];
        memset(c, 0, sizeof *c);
        c->name = name;
        if (!s_rel(&k, f->rel_len, name)) {
            rc = korch_err_set(err, KORCH_E_NOMEM, "out of memory");
            goto out;
        }
        c->rel_len = strlen(k.rel);
        const char *why = NULL;
        if (!s_open(&k, f->fd, f->twin, name, c, false, &why)) {
            if (why)
                s_skip(&k, NULL, why);
            free(c->name);
            c->name = NULL;
            k.rel[f->rel_len] = 0;
            continue;
        }
        k.depth++;
        s_bound(&k);
        if (fstat(c->fd, &st) == 0 && w->dir)
            w->dir(w->arg, c->fd, c->twin, k.rel, &st);
        if (!s_list(&k, c))
            s_skip(&k, NULL, "cannot list the directory");
    }
out:
    while (k.depth > 0)
        s_free_frame(&k.f[--k.depth]);
    free(k.f);
    free(k.rel);
    return rc;
}
