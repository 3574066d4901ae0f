/*  A work dir brought home as a bounded sync: what korch copied into a
 *  kernel's work dir is remembered (a manifest of the host files, by device
 *  and inode), and when the kernel is done, the host files it deleted are
 *  deleted too, then what it left is copied back (korch_fs_copy_tree: a
 *  file that cannot be copied is skipped with a note, the total bounded).
 *  A host file korch never copied in (too big, a link, a special file, or
 *  put there by someone else) is never deleted.
 *
 *  Thread-safe as fsutil.h: a manifest is used by one thread at a time.
 */
#ifndef KORCH_FSSYNC_H
#define KORCH_FSSYNC_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/stat.h>
#include "korch/error.h"

typedef struct korch_fs_manifest korch_fs_manifest_t;

korch_fs_manifest_t *korch_fs_manifest_new(void);
void korch_fs_manifest_destroy(korch_fs_manifest_t **m);

/* Remember the host file st describes (its st_dev and st_ino). */
korch_rc_t korch_fs_manifest_add(korch_fs_manifest_t *m, const struct stat *st);

/* Is it one of them? */
bool korch_fs_manifest_has(korch_fs_manifest_t *m, const struct stat *st);

size_t korch_fs_manifest_size(const korch_fs_manifest_t *m);

/* Delete below to_dir the regular files the manifest holds that from_dir
   no longer has at the same path (not as a regular file), and the
   directories that leaves empty and from_dir no longer has. Never through
   a link, never into another filesystem; at most 64 levels deep (deeper
   is left as it is). on_removed (may be NULL) hears each path removed,
   below to_dir; their count (files and directories) in *removed. */
korch_rc_t korch_fs_prune_tree(int from_dir, int to_dir, korch_fs_manifest_t *m,
                               void (*on_removed)(const char *rel, void *arg), void *arg, size_t *removed,
                               korch_err_t *err);

#endif
