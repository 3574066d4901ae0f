/*  Paths built into fixed buffers, never cut silently.
 *
 *  A path cut at the buffer's end names another file (a rename then moves
 *  the wrong one): these fail with KORCH_E_TOOBIG instead, leaving out ""
 *  so a caller that ignores the result acts on no file at all. Thread-safe.
 */
#ifndef KORCH_PATH_H
#define KORCH_PATH_H

#include <stddef.h>
#include "korch/error.h"

/* dir + "/" + name into out[cap] (no doubled slash when dir ends in one;
   just name when dir is "" or NULL). KORCH_E_TOOBIG when it does not fit. */
korch_rc_t korch_path_join(char *out, size_t cap, const char *dir, const char *name, korch_err_t *err);

/* printf into out[cap]; KORCH_E_TOOBIG (out "") when the text does not fit. */
korch_rc_t korch_path_fmt(char *out, size_t cap, korch_err_t *err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
