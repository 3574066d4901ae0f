/*  What the code did to a kernel's working directory: a bounded snapshot of
 *  the tree (path, size, mtime) taken after each step, compared with the one
 *  before it.
 *
 *  The kernel writes that directory and may be hostile: the walk opens every
 *  directory with openat(O_NOFOLLOW | O_DIRECTORY) relative to its parent's
 *  descriptor and stats entries without following them, so a symlink the
 *  kernel planted (to /etc, to a fifo, a loop) is never entered or read;
 *  symlinks and special files are not listed. Hidden names (".x") are left
 *  out (checkpoints, korch's own bookkeeping). The walk stops at max_entries
 *  files, max_depth levels and max_dirs directories and says it was cut.
 *
 *  Not thread-safe; one owner.
 */
#ifndef KORCH_WORKDIR_H
#define KORCH_WORKDIR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>
#include "korch/error.h"

typedef struct korch_workdir korch_workdir_t;

typedef struct {
    size_t max_entries;     /* files looked at per scan (default 5000) */
    int max_depth;          /* directory levels below the root (default 8) */
    size_t max_dirs;        /* directories opened per scan (default 1000) */
} korch_workdir_limits_t;

/* A watcher of dir (copied; need not exist yet; NULL: a tree korch cannot
   walk itself, fed with korch_workdir_update). limits may be NULL. The
   first scan is the baseline: call korch_workdir_scan once before the code runs.
   NULL only when out of memory. */
korch_workdir_t *korch_workdir_new(const char *dir, const korch_workdir_limits_t *limits);
void korch_workdir_destroy(korch_workdir_t **w);

/* Walk the tree now. Returns a new object
     {changes: [{path, size, change: created|modified|deleted}], truncated: bool,
      files: N, bytes: N}
   with the changes since the previous scan (sorted by path; files/bytes are
   the tree's totals). NULL + err when the root cannot be opened. */
json_t *korch_workdir_scan(korch_workdir_t *w, korch_err_t *err);

/* The same for a tree that is not on this host (a container's volume),
   listed by someone else: entries [[path, size, mtime_ns, ino?], ...]
   (borrowed; entries that are not plain relative paths with sizes are
   dropped, at most max_entries kept), truncated = the lister was cut. */
json_t *korch_workdir_update(korch_workdir_t *w, json_t *entries, bool truncated);

/* The directory watched (borrowed; "" when it is not on this host). */
const char *korch_workdir_root(const korch_workdir_t *w);

/* The tree as of the last scan: a new array [{path, size}] sorted by path. */
json_t *korch_workdir_list(korch_workdir_t *w);

/* Read root/rel (rel as listed: no "..", no leading '/') without following
   any symlink on the way, at most max bytes: a new buffer and *len, or NULL
   + err (KORCH_E_NOTFOUND, KORCH_E_TOOBIG, KORCH_E_INVALID for a path that
   is not a plain file). */
char *korch_workdir_read(const char *root, const char *rel, size_t max, size_t *len, korch_err_t *err);

/* Write root/name (one path component) atomically without following any
   symlink: a temp file created with O_EXCL | O_NOFOLLOW in root, given to
   uid:gid with fchown when uid is not -1, then renamed over name (a symlink
   planted at name is replaced, never written through). */
korch_rc_t korch_workdir_write(const char *root, const char *name, const void *data, size_t len, long uid, long gid,
                               korch_err_t *err);

/* Remove root/rel (a plain file, as listed) without following any symlink
   on the way: its parent directories are opened one component at a time
   with O_NOFOLLOW, then unlinkat. A symlink at rel itself is removed, never
   followed. KORCH_E_NOTFOUND when there is no such file, KORCH_E_INVALID
   for a path that is not plain or names a directory. */
korch_rc_t korch_workdir_remove(const char *root, const char *rel, korch_err_t *err);

/* Give root/rel the file open as fd (an unnamed O_TMPFILE, an upload
   spooled to disk: borrowed) without copying it: mode 0644, linked under a
   random name in rel's parent (made if missing, no link followed on the
   way), then renamed over rel (a symlink planted at rel is replaced, never
   written through). KORCH_E_STATE when fd cannot be linked (not an
   O_TMPFILE): write its bytes instead. Not fsync'ed. */
korch_rc_t korch_workdir_place_fd(const char *root, const char *rel, int fd, korch_err_t *err);

/* Python code that lists top (NULL: the kernel's current directory) from
   inside a Python kernel, bounded as the walk is (5000 files, 8 levels),
   symlinks not followed, hidden names left out: one line of JSON on stdout,
   {"files": [[path, size, mtime_ns, ino], ...], "truncated": bool}, which
   korch_workdir_update checks (the kernel may lie). New string; NULL when
   out of memory. */
char *korch_workdir_lister_py(const char *top);

/* Sort an array of {path, ...} objects by path, in place. */
void korch_workdir_sort(json_t *entries);

/* The wall clock (ms since the epoch) both sides of a listing stamp with:
   the agent its walks of a work dir it lists from inside the kernel, the
   server what it put there or removed (src/server/fjournal.h). */
int64_t korch_workdir_clock_ms(void);

/* A mime type for a file name's extension ("application/octet-stream" when unknown). */
const char *korch_mime_for(const char *name);

#endif
