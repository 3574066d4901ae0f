/*  Removing a tree a kernel wrote (korch_fs_rm_tree, fsutil.h): any depth,
 *  no recursion, a bounded number of fds, never through a symlink and never
 *  into another filesystem.
 *
 *  The walk keeps an open directory stream per level down to S_FD_LEVELS;
 *  a directory found deeper than that is renamed into the top directory
 *  under a fresh name (same filesystem: renameat of one entry between two
 *  fds we hold, nothing resolved by path) and removed from there later, so
 *  a 5000-level tree costs at most S_FD_LEVELS fds and no stack. The top is
 *  re-read until a pass moves nothing in. Every directory is entered with
 *  openat(O_NOFOLLOW | O_DIRECTORY) from its parent's fd and left by
 *  closing it: the walk never goes back up through "..", so a kernel that
 *  renames directories while korch removes them can only move entries
 *  around inside the tree being removed.
 */
#include "korch/fsutil.h"
#include "korch/log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define S_FD_LEVELS 16 /* open directories at once, at most */

typedef struct {
    DIR *d;                 /* the directory's stream (owns its fd) */
    int fd;                 /* dirfd(d) */
    char name[256];         /* its name in the level above ("" at the top) */
} s_level_t;

typedef struct {
    s_level_t lv[S_FD_LEVELS];
    int depth;              /* levels in use */
    dev_t dev;              /* the top's filesystem: never leave it */
    unsigned long moved;    /* renames into the top in this pass */
    unsigned long seq;      /* for fresh names */
} s_walk_t;

static bool s_push(s_walk_t *w, int fd, const char *name)
{
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return false;
    }
    s_level_t *l = &w->lv[w->depth++];
    l->d = d;
    l->fd = fd;
    snprintf(l->name, sizeof l->name, "%s", name);
    return true;
}

/* Close the deepest level and remove it from its parent (empty now, or
   holding what could not be removed: then it stays). */
static void s_pop(s_walk_t *w)
{
    s_level_t *l = &w->lv[--w->depth];
    closedir(l->d);
    if (w->depth > 0 && unlinkat(w->lv[w->depth - 1].fd, l->name, AT_REMOVEDIR) != 0 && errno != ENOENT)
        korch_debug("cannot remove directory '%s': %s", l->name, strerror(errno));
}

/* Move dir name of the deepest level into the top under a fresh name. */
static void s_move_up(s_walk_t *w, const char *name)
{
    char fresh[64];
    int top = w->lv[0].fd, here = w->lv[w->depth - 1].fd;
    for (int tries = 0; tries < 64; tries++) {
        snprintf(fresh, sizeof fresh, ".korch-rm-%lu-%d", ++w->seq, (int)getpid());
        if (renameat2(here, name, top, fresh, RENAME_NOREPLACE) == 0) {
            w->moved++;
            return;
        }
        if (errno != EEXIST)
            break;
    }
    korch_debug("cannot move '%s' up to remove it: %s", name, strerror(errno));
}

/* One entry of the deepest level. */
static void s_entry(s_walk_t *w, const char *name)
{
    int here = w->lv[w->depth - 1].fd;
    struct stat st;
    if (fstatat(here, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return;
    if (!S_ISDIR(st.st_mode)) {
        if (unlinkat(here, name, 0) != 0 && errno != ENOENT)
            korch_debug("cannot remove '%s': %s", name, strerror(errno));
        return;
    }
    if (st.st_dev != w->dev)
        return; /* a mount below: not ours to empty */
    if (unlinkat(here, name, AT_REMOVEDIR) == 0 || errno == ENOENT)
        return; /* it was empty */
    if (w->depth == S_FD_LEVELS) {
        s_move_up(w, name);
        return;
    }
    int fd = openat(here, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct stat sub;
    if (fd < 0)
        return;
    if (fstat(fd, &sub) != 0 || sub.st_dev != w->dev) {
        close(fd);
        return;
    }
    s_push(w, fd, name);
}

/* Empty the directory fd (taken over, closed at the end). */
static void s_empty(int fd)
{
    s_walk_t w = {.depth = 0};
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return;
    }
    w.dev = st.st_dev;
    if (!s_push(&w, fd, ""))
        return;
    for (;;) {
        s_level_t *l = &w.lv[w.depth - 1];
        struct dirent *de = readdir(l->d);
        if (de) {
            if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
                s_entry(&w, de->d_name);
            continue;
        }
        if (w.depth > 1) {
            s_pop(&w);
            continue;
        }
        if (!w.moved)
            break;
        w.moved = 0; /* what was moved up may not have been listed: once more */
        rewinddir(l->d);
    }
    while (w.depth > 0)
        s_pop(&w);
}

void korch_fs_rm_tree(const char *dir)
{
    struct stat st;
    if (lstat(dir, &st) != 0)
        return;
    if (!S_ISDIR(st.st_mode)) {
        unlink(dir);
        return;
    }
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return;
    s_empty(fd);
    if (rmdir(dir) != 0 && errno != ENOENT)
        korch_debug("cannot remove '%s': %s", dir, strerror(errno));
}
