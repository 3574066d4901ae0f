/*  Deletions of a bounded sync (see korch/fssync.h). */
#include "korch/fssync.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PRUNE_MAX_DEPTH 64

typedef struct {
    uint64_t dev, ino;
} s_id_t;

struct korch_fs_manifest {
    s_id_t *ids;
    size_t n, cap;
    bool sorted;
};

korch_fs_manifest_t *korch_fs_manifest_new(void) { return calloc(1, sizeof(korch_fs_manifest_t)); }

void korch_fs_manifest_destroy(korch_fs_manifest_t **pm)
{
    if (!pm || !*pm)
        return;
    free((*pm)->ids);
    free(*pm);
    *pm = NULL;
}

korch_rc_t korch_fs_manifest_add(korch_fs_manifest_t *m, const struct stat *st)
{
    if (m->n == m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 256;
        s_id_t *ids = realloc(m->ids, cap * sizeof *ids);
        if (!ids)
            return KORCH_E_NOMEM;
        m->ids = ids;
        m->cap = cap;
    }
    m->ids[m->n++] = (s_id_t){(uint64_t)st->st_dev, (uint64_t)st->st_ino};
    m->sorted = false;
    return KORCH_OK;
}

static int s_cmp(const void *a, const void *b)
{
    const s_id_t *x = a, *y = b;
    return x->dev != y->dev ? (x->dev < y->dev ? -1 : 1) : x->ino != y->ino ? (x->ino < y->ino ? -1 : 1) : 0;
}

bool korch_fs_manifest_has(korch_fs_manifest_t *m, const struct stat *st)
{
    if (!m || !m->n)
        return false;
    if (!m->sorted) {
        qsort(m->ids, m->n, sizeof *m->ids, s_cmp);
        m->sorted = true;
    }
    s_id_t key = {(uint64_t)st->st_dev, (uint64_t)st->st_ino};
    return bsearch(&key, m->ids, m->n, sizeof *m->ids, s_cmp) != NULL;
}

size_t korch_fs_manifest_size(const korch_fs_manifest_t *m) { return m ? m->n : 0; }

typedef struct {
    korch_fs_manifest_t *m;
    void (*on_removed)(const char *rel, void *arg);
    void *arg;
    size_t removed;
    char rel[4096];
} s_prune_t;

/* Prune dir to (and below); from is the same dir on the other side, or -1
   when it has none (then everything known below goes). */
static void s_prune_dir(s_prune_t *pr, int from, int to, int depth)
{
    int dup = fcntl(to, F_DUPFD_CLOEXEC, 0);
    DIR *d = dup >= 0 ? fdopendir(dup) : NULL;
    if (!d) {
        if (dup >= 0)
            close(dup);
        return;
    }
    rewinddir(d); /* a dup shares the offset: an fd listed before is at its end */
    struct stat top;
    if (fstat(to, &top) != 0) {
        closedir(d);
        return;
    }
    size_t base = strlen(pr->rel);
    struct dirent *de;
    while ((de = readdir(d))) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if (snprintf(pr->rel + base, sizeof pr->rel - base, "%s%s", base ? "/" : "", de->d_name) >=
            (int)(sizeof pr->rel - base)) {
            pr->rel[base] = 0;
            continue;
        }
        struct stat st, fst;
        bool there = from >= 0 && fstatat(from, de->d_name, &fst, AT_SYMLINK_NOFOLLOW) == 0;
        if (fstatat(to, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || st.st_dev != top.st_dev) {
        } else if (S_ISREG(st.st_mode)) {
            if (!(there && S_ISREG(fst.st_mode)) && korch_fs_manifest_has(pr->m, &st) &&
                unlinkat(to, de->d_name, 0) == 0) {
                pr->removed++;
                if (pr->on_removed)
                    pr->on_removed(pr->rel, pr->arg);
            }
        } else if (S_ISDIR(st.st_mode) && depth < PRUNE_MAX_DEPTH) {
            bool dir_there = there && S_ISDIR(fst.st_mode);
            int sub = openat(to, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            int fsub = dir_there ? openat(from, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
            size_t before = pr->removed;
            if (sub >= 0)
                s_prune_dir(pr, fsub, sub, depth + 1);
            if (sub >= 0)
                close(sub);
            if (fsub >= 0)
                close(fsub);
            /* emptied by this prune and gone on the other side: it goes too */
            if (!dir_there && pr->removed > before && unlinkat(to, de->d_name, AT_REMOVEDIR) == 0) {
                pr->removed++;
                if (pr->on_removed)
                    pr->on_removed(pr->rel, pr->arg);
            }
        }
        pr->rel[base] = 0;
    }
    closedir(d);
}

korch_rc_t korch_fs_prune_tree(int from_dir, int to_dir, korch_fs_manifest_t *m,
                               void (*on_removed)(const char *rel, void *arg), void *arg, size_t *removed,
                               korch_err_t *err)
{
    s_prune_t *pr = calloc(1, sizeof *pr);
    if (!pr)
        return korch_err_set(err, KORCH_E_NOMEM, "out of memory");
    pr->m = m;
    pr->on_removed = on_removed;
    pr->arg = arg;
    s_prune_dir(pr, from_dir, to_dir, 0);
    if (removed)
        *removed = pr->removed;
    free(pr);
    return KORCH_OK;
}
