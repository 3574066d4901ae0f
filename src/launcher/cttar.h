/*  The tar archives of the Engine API's archive endpoints (cttar.c): what
 *  PUT /containers/{id}/archive extracts and what GET returns. Private to
 *  src/launcher; no state, any thread.
 */
#ifndef KORCH_LAUNCHER_CTTAR_H
#define KORCH_LAUNCHER_CTTAR_H

#include <stdbool.h>
#include <stddef.h>
#include "korch/buf.h"

#define KORCH_TAR_BLOCK 512
#define KORCH_TAR_SIZE_MAX 077777777777ULL  /* 11 octal digits: the largest file an archive holds */

/* The archive PUT /archive extracts into a work dir (into b, which it
   initialises): entries for the directories of name (relative) from byte
   missing on (those that do not exist yet), the file, owned uid:gid, and
   the two zero blocks that end an archive. false on no memory. */
bool korch_tar_archive(korch_buf_t *b, unsigned uid, unsigned gid, const char *name, size_t missing,
                       const void *data, size_t len);

/* The one regular file of a tar from GET /archive (t, len), at most max
   bytes: *data (malloc'd, NUL-terminated) and *out_len. A link, a
   directory, a larger file or a malformed archive: an error naming name. */
korch_rc_t korch_tar_first_file(const char *name, const unsigned char *t, size_t len, size_t max, char **data,
                                size_t *out_len, korch_err_t *err);

#endif
