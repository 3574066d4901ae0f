/*  Paths built into fixed buffers, never cut silently.
 *
 *  A path cut at the buffer's end names another file (a rename then moves
 *  the wrong one): these fail with KORCH_E_TOOBIG instead, leaving out ""
 *  so a caller that ignores the result acts on no file at all. Thread-safe.
 */
#ifndef KORCH_PATH_H
#define KORCH_PATH_H

#include <stdbool.h>
#include <stddef.h>
#include "korch/error.h"

/* dir + "/" + name into out[cap] (no doubled slash when dir ends in one;
   just name when dir is "" or NULL). KORCH_E_TOOBIG when it does not fit. */
korch_rc_t korch_path_join(char *out, size_t cap, const char *dir, const char *name, korch_err_t *err);

/* printf into out[cap]; KORCH_E_TOOBIG (out "") when the text does not fit. */
korch_rc_t korch_path_fmt(char *out, size_t cap, korch_err_t *err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Paths a kernel or a client names inside a directory (a work dir). */
#define KORCH_RELPATH_MAX 1024          /* korch_safe_relpath's bound, in bytes */
#define KORCH_RELPATH_NO_HIDDEN 1u      /* also refuse a component that starts with '.' */

/* Is name a relative path that stays inside a directory: not empty, no
   leading or trailing "/", no empty, "." or ".." component (so no "a//b"),
   at most max bytes? flags: KORCH_RELPATH_NO_HIDDEN. NULL is not. */
bool korch_relpath_ok(const char *name, size_t max, unsigned flags);

/* korch_relpath_ok(name, KORCH_RELPATH_MAX, 0): what korch accepts as a
   file name in a kernel's work dir (uploads, downloads, put/get_file). */
bool korch_safe_relpath(const char *name);

/* Is name one plain file name: not empty, no "/", not "." or "..", at most
   NAME_MAX bytes? NULL is not. */
bool korch_path_is_name(const char *name);

#endif
