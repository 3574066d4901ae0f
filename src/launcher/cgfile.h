/*  Small reads of cgroupfs (and /proc) files, for cgroup.c and cgstat.c.
 *  Names come from korch, never from a kernel. Any thread; plain blocking
 *  reads of pseudo-files, never for long. */
#ifndef KORCH_LAUNCHER_CGFILE_H
#define KORCH_LAUNCHER_CGFILE_H

#include <stddef.h>
#include <sys/types.h>

/* dir/file into buf (at most len - 1 bytes, NUL-terminated): the bytes
   read, -1 when it cannot be opened. */
ssize_t korch_cgfile_read(const char *dir, const char *file, char *buf, size_t len);

/* The number after "key " on a line of a flat-keyed file's text, or -1. */
long long korch_cgfile_keyed(const char *text, const char *key);

#endif
