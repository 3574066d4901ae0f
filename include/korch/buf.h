/*  A growable buffer with a bound chosen at init (curl docs/internals/DYNBUF.md).
 *
 *  Every buffer that holds something from outside (an HTTP body, a stream,
 *  a reply) has a maximum size: an add past it fails with KORCH_E_TOOBIG
 *  and leaves the buffer as it was. The text is NUL-terminated whenever p
 *  is not NULL. A plain struct the caller owns; zero-initialised it is an
 *  empty buffer with max 0 (nothing fits): set max (korch_buf_init or
 *  KORCH_BUF_INIT) before the first add. Memory grows by doubling and never
 *  past max + 1 bytes. Not thread-safe.
 */
#ifndef KORCH_BUF_H
#define KORCH_BUF_H

#include <stdarg.h>
#include <stddef.h>
#include "korch/error.h"

/* Asked before the buffer grows by more bytes of memory (a budget shared
   by many buffers): an error (set in err) fails the add, which leaves the
   buffer as it was. Bytes granted stay granted even if the allocation then
   fails: the owner gives back what it granted when it frees the buffer. */
typedef korch_rc_t korch_buf_grow_fn(void *arg, size_t more, korch_err_t *err);

typedef struct {
    char *p;            /* NUL-terminated when not NULL; owned */
    size_t len, cap;
    size_t max;         /* the bound: len never exceeds it */
    const char *limit;  /* the setting that sets max, named in the error ("max_reply_bytes"); may be NULL */
    korch_buf_grow_fn *grow;    /* may be NULL (no budget) */
    void *grow_arg;
} korch_buf_t;

#define KORCH_BUF_INIT(max_) {.max = (max_)}

/* An empty buffer bounded by max bytes; limit (static, may be NULL) names the
   setting behind max in the error message. */
void korch_buf_init(korch_buf_t *b, size_t max, const char *limit);

/* Append n bytes. KORCH_E_TOOBIG past max ("the WHAT is larger than the
   limit of N bytes (LIMIT)"), KORCH_E_NOMEM when realloc fails ("out of
   memory for a WHAT of N bytes"), or grow's error; on error the buffer is
   unchanged. */
korch_rc_t korch_buf_add(korch_buf_t *b, const void *data, size_t n, const char *what, korch_err_t *err);

/* Append a NUL-terminated string. */
korch_rc_t korch_buf_adds(korch_buf_t *b, const char *s, const char *what, korch_err_t *err);

/* Append printf-formatted text (all or nothing). */
korch_rc_t korch_buf_addf(korch_buf_t *b, const char *what, korch_err_t *err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* The same with a va_list. */
korch_rc_t korch_buf_vaddf(korch_buf_t *b, const char *what, korch_err_t *err, const char *fmt, va_list ap)
    __attribute__((format(printf, 4, 0)));

/* Room for n more bytes without another allocation (errors as for add):
   when it has less, exactly that much is allocated, so a caller that knows
   the total size allocates it once and no more. */
korch_rc_t korch_buf_reserve(korch_buf_t *b, size_t n, const char *what, korch_err_t *err);

/* Remove the first n bytes (all of them when n >= len), keeping the memory:
   what a writer has sent. */
void korch_buf_drop(korch_buf_t *b, size_t n);

/* Forget the content, keep the memory and the bound. */
void korch_buf_reset(korch_buf_t *b);

/* Free the memory; the bound stays. */
void korch_buf_free(korch_buf_t *b);

/* The text as a new string ("" when empty); NULL when out of memory. */
char *korch_buf_strdup(const korch_buf_t *b);

/* Hand the storage over (the caller frees it; "" allocated when empty, NULL
   when out of memory) and its length in *len (may be NULL); the buffer is
   empty afterwards. */
char *korch_buf_release(korch_buf_t *b, size_t *len);

#endif
