/*  Host directories a kernel writes, bounded: a size-limited tmpfs on
 *  them, found again by its source name (private to src/launcher).
 *
 *  A tmpfs of size bytes on a kernel's dir turns "fill the host's disk"
 *  into ENOSPC inside the kernel. Its source names who made it
 *  ("korch-sandbox:INSTANCE"), so the start-up sweep can find the mounts of
 *  a korch that died (kill -9 leaves them mounted) in /proc/self/mountinfo,
 *  which a kernel cannot forge. Root only: without it nothing is mounted
 *  and the caller says so. Blocking (mount, umount): off the loop, or at a
 *  start where the loop already waits on the kernel.
 */
#ifndef KORCH_LAUNCHER_HOSTDIR_H
#define KORCH_LAUNCHER_HOSTDIR_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* Mount a tmpfs of size bytes (and size / 4096 + 64 inodes) on dir, its
   root owned by uid:gid with mode; nosuid, nodev (and noexec). source may
   be NULL ("tmpfs"). 0, or -1 with errno. */
int korch_hostdir_mount(const char *dir, const char *source, int64_t size, uid_t uid, gid_t gid, unsigned mode,
                        bool noexec);

/* Is dir a mount point (its device differs from its parent's; a link is not)? */
bool korch_hostdir_is_mount(const char *dir);

/* Detach the mount on dir when there is one (never following a link
   there). 0 when nothing is mounted there any more. */
int korch_hostdir_unmount(const char *dir);

/* For each tmpfs whose source starts with prefix and whose mount point is
   directly below base, fn(mount point, the rest of the source, arg).
   Returns the number of such mounts. */
int korch_hostdir_each(const char *base, const char *prefix, void (*fn)(const char *dir, const char *rest, void *arg),
                       void *arg);

#endif
