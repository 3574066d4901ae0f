/*  Request bodies (body.c): bounded, chunked decoded, uploads spooled to
 *  an unnamed file. Loop thread only. */
#ifndef KORCH_SERVER_BODY_H
#define KORCH_SERVER_BODY_H

#include "http.h"

/* body.c: what bodies may hold at once (memory, or the disk of spooled
   uploads); used and max in bytes, max 0 = no bound. */
typedef struct {
    size_t used, max;
    const char *what;           /* the option that sets max, for the error message */
} srv_budget_t;

/* A body of at most limit decoded bytes: Content-Length expect, or chunked
   (RFC 9112 7.1). spool_dirfd >= 0: to an unnamed file in that directory
   (which must be korch's alone); else to memory that grows as bytes come.
   Either way charged to budget. NULL + err when the file cannot be made. */
srv_body_t *srv_body_new(size_t limit, size_t expect, bool chunked, srv_budget_t *budget, int spool_dirfd,
                         korch_err_t *err);
/* Bytes as they arrive. KORCH_E_TOOBIG: over limit (413); KORCH_E_NOMEM:
   the budget is spent (503); KORCH_E_INVALID: bad chunked framing (400);
   KORCH_E_IO: the spool file (500). Bytes after a complete body are ignored. */
korch_rc_t srv_body_feed(srv_body_t *b, const void *data, size_t len, korch_err_t *err);
bool srv_body_complete(const srv_body_t *b);
bool srv_body_chunked(const srv_body_t *b);
size_t srv_body_len(const srv_body_t *b);
/* In memory: the bytes, NUL-terminated (borrowed); NULL when spooled. */
char *srv_body_data(srv_body_t *b);
/* Spooled: the file (borrowed; written up to srv_body_len), else -1. */
int srv_body_fd(const srv_body_t *b);
/* Frees it and gives its bytes back to the budget. */
void srv_body_destroy(srv_body_t **b);

#endif
