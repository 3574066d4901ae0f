/*  Files in directories a kernel can write, handled as if the kernel were
 *  the attacker it may be.
 *
 *  The rule (README, "Threat model"): korch never opens, creates, renames,
 *  chowns or reads by a path whose last component a kernel could have
 *  replaced. Everything below works relative to a directory fd: names are
 *  opened with O_NOFOLLOW (a symlink is refused, never followed), new files
 *  get a random temporary name created with O_CREAT|O_EXCL, ownership and
 *  mode are set on the fd (fchown, fchmod), and renameat moves the result
 *  into place within the same directory (replacing a planted symlink rather
 *  than writing through it). Reads open with O_NONBLOCK and accept only
 *  regular files up to a size bound, so a FIFO or a device named like
 *  korch's file never blocks korch.
 *
 *  The directory itself (a runtime dir, a session's files/) is opened by its
 *  path, symlinks included: its parent is korch's, so a kernel cannot swap
 *  it. Relative paths below it ("a/b/c.csv") are walked one component at a
 *  time, each opened with O_NOFOLLOW|O_DIRECTORY.
 *
 *  Thread-safe: no shared state. Blocking file I/O: not for the server loop
 *  with large files.
 */
#ifndef KORCH_FSUTIL_H
#define KORCH_FSUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>
#include "korch/error.h"

typedef struct {
    mode_t mode;        /* file mode; 0 = 0600 */
    bool chown;         /* give the file (and directories made) to uid:gid */
    uid_t uid;
    gid_t gid;
} korch_fs_opts_t;

/* Open directory path (O_DIRECTORY|O_CLOEXEC): an fd, or -1 with err. */
int korch_fs_open_dir(const char *path, korch_err_t *err);

/* Open directory rel below dirfd, one component at a time, never through a
   symlink; with create, missing directories are made (mode 0755, owned as
   o says). rel "" or NULL = dirfd itself (a new fd). -1 with err. */
int korch_fs_open_dir_at(int dirfd, const char *rel, bool create, const korch_fs_opts_t *o, korch_err_t *err);

/* Write len bytes as dirfd/name (one component) atomically and durably:
   random temp name, O_CREAT|O_EXCL|O_NOFOLLOW, fchown/fchmod and fsync on
   the fd, renameat, fsync of dirfd. After a crash name holds the old
   content or the new, never a mix or nothing. The one atomic write: every
   other (korch_write_file, korch_fs_write, _rel, copy_tree) goes here. */
korch_rc_t korch_fs_write_at(int dirfd, const char *name, const void *data, size_t len, const korch_fs_opts_t *o,
                             korch_err_t *err);

/* The same for a path: its directory by path, the last component safe. */
korch_rc_t korch_fs_write(const char *path, const void *data, size_t len, const korch_fs_opts_t *o, korch_err_t *err);

/* The same, the bytes written by fill (to fd, a temp file; KORCH_OK or an
   error with err) as they come: a big file written without its whole text
   in memory. The file is renamed into place only when fill succeeded. */
typedef korch_rc_t (*korch_fs_fill_fn)(int fd, void *arg, korch_err_t *err);
korch_rc_t korch_fs_write_fill(const char *path, korch_fs_fill_fn fill, void *arg, const korch_fs_opts_t *o,
                               korch_err_t *err);
/* All len bytes to fd (EINTR retried); for fill functions. */
korch_rc_t korch_fs_write_fd(int fd, const void *data, size_t len, korch_err_t *err);

/* root/rel, rel a relative path walked without following symlinks; with
   mkparents the directories on the way are made (owned as o says). */
korch_rc_t korch_fs_write_rel(const char *root, const char *rel, const void *data, size_t len, bool mkparents,
                              const korch_fs_opts_t *o, korch_err_t *err);

/* Read dirfd/name: O_NONBLOCK, O_NOFOLLOW when nofollow, a regular file of
   at most max bytes. New NUL-terminated buffer (length in *len), or NULL
   with err (KORCH_E_NOTFOUND, KORCH_E_INVALID for a link or a special
   file, KORCH_E_TOOBIG). */
char *korch_fs_read_at(int dirfd, const char *name, size_t max, bool nofollow, size_t *len, korch_err_t *err);

/* The same for a path (the last component not followed when nofollow). */
char *korch_fs_read(const char *path, size_t max, bool nofollow, size_t *len, korch_err_t *err);

/* root/rel with every component of rel refused when it is a symlink. */
char *korch_fs_read_rel(const char *root, const char *rel, size_t max, size_t *len, korch_err_t *err);

/* Give dir and everything below it to uid:gid without following a symlink
   (links themselves are left alone, as are files with other hard links);
   any depth, with a bounded number of fds and no recursion
   (src/util/fswalk.c). */
korch_rc_t korch_fs_chown_tree(const char *dir, uid_t uid, gid_t gid, korch_err_t *err);

/* Remove dir and everything below it, never through a symlink and never
   into another filesystem mounted below it; any depth, with at most a few
   fds and no recursion (src/util/fsrm.c). */
void korch_fs_rm_tree(const char *dir);

/* How korch_fs_copy_tree copies. */
typedef struct {
    uint64_t max_bytes;     /* in all, by apparent size (0 = no bound): a file that does not fit
                               in what is left is skipped, the others still go */
    /* Each entry below from_dir that was copied (why NULL) or skipped (why
       says why: too big, sparse beyond the bound, a link, a special file,
       a directory that cannot be entered); rel is its path below from_dir, st its lstat
       there. Directories are reported only when skipped. May be NULL. */
    void (*on_file)(const char *rel, const struct stat *st, const char *why, void *arg);
    void *arg;
} korch_fs_copy_t;

/* Copy the regular files and directories below from_dir into to_dir
   (both by fd), as c says (NULL: everything, no bound): what a kernel left
   in a work dir, brought home. Files are written with korch_fs_write_at's
   rules and o. A file that cannot be copied is skipped (c->on_file hears
   why), never the others: the result is an error only when from_dir
   cannot be listed or the disk is full. Any depth, a bounded number of fds,
   no recursion (src/util/fswalk.c). The bytes copied go in *copied. */
korch_rc_t korch_fs_copy_tree(int from_dir, int to_dir, const korch_fs_copy_t *c, const korch_fs_opts_t *o,
                              uint64_t *copied, korch_err_t *err);

/* ---- whole files by path, for korch's own directories ---- */

/* Write len bytes to path atomically and durably, mode 0644 (korch_fs_write:
   a random temp name, never through a symlink planted at path). */
korch_rc_t korch_write_file(const char *path, const void *data, size_t len, korch_err_t *err);

/* mkdir -p: path and its missing parents (mode for the ones created). An
   existing directory is fine; anything else in the way is an error naming it. */
korch_rc_t korch_mkdirs(const char *path, int mode, korch_err_t *err);

/* Read a whole file ("-": stdin), at most max bytes (KORCH_E_TOOBIG beyond):
   new NUL-terminated buffer, its length in *len (may be NULL). Follows
   symlinks: not for directories a kernel can write (korch_fs_read there). */
char *korch_read_file(const char *path, size_t max, size_t *len, korch_err_t *err);

#endif
