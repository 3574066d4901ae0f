/*  A walk of a tree a kernel wrote, for korch_fs_chown_tree and
 *  korch_fs_copy_tree (fsutil.c): any depth, no recursion, a bounded number
 *  of fds, never through a symlink (private to src/util).
 *
 *  Depth first. A directory is listed once, when entered: what is not a
 *  directory goes to entry() at once, its subdirectories' names are kept
 *  and entered one by one. Open are the top and the deepest S_WALK_FDS
 *  directories of the path; one closed on the way down is opened again on
 *  the way back up by name from the nearest open ancestor (openat with
 *  O_NOFOLLOW per level), and must be the same directory (device, inode)
 *  or its rest is left. Optionally a mirror tree (a copy's destination) is
 *  walked alongside: mirror() opens or makes each subdirectory's twin.
 *  Not thread-safe per walk; the callbacks run on the caller's thread.
 */
#ifndef KORCH_UTIL_FSWALK_H
#define KORCH_UTIL_FSWALK_H

#include "korch/error.h"

#include <sys/stat.h>

typedef struct {
    /* A directory entered, the top included: fd is it, mirror its twin (-1
       without a mirror tree), rel its path below the top ("" the top). */
    void (*dir)(void *arg, int fd, int mirror, const char *rel, const struct stat *st);
    /* An entry that is not a directory, in dirfd (and mirror). */
    void (*entry)(void *arg, int dirfd, int mirror, const char *name, const char *rel, const struct stat *st);
    /* With a mirror tree: the twin of subdirectory name, opened or made in
       mirror; -1 leaves the subdirectory out (the callback says why). */
    int (*twin)(void *arg, int mirror, const char *name, const char *rel, const struct stat *st);
    /* A subdirectory that cannot be entered or listed (may be NULL). */
    void (*skipped)(void *arg, const char *rel, const struct stat *st, const char *why);
    void *arg;
} korch_fs_walk_t;

/* Walk the tree below top (and mirror, or -1), both by fd (not taken).
   KORCH_OK, or an error with err when top itself cannot be listed or
   memory runs out; a subdirectory that cannot be is skipped(). */
korch_rc_t korch_fs_walk(int top, int mirror, const korch_fs_walk_t *w, korch_err_t *err);

#endif
