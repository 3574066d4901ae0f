/*  The bounded growable buffer (buf.h). */
#include "korch/buf.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void korch_buf_init(korch_buf_t *b, size_t max, const char *limit)
{
    *b = (korch_buf_t){.max = max, .limit = limit};
}

/* Room for n more bytes and the NUL: exactly that (exact), or doubling. */
static korch_rc_t s_reserve(korch_buf_t *b, size_t n, bool exact, const char *what, korch_err_t *err)
{
    if (n > b->max || b->len > b->max - n) {
        if (b->limit)
            return korch_err_set(err, KORCH_E_TOOBIG, "the %s is larger than the limit of %zu bytes (%s)",
                                 what ? what : "data", b->max, b->limit);
        return korch_err_set(err, KORCH_E_TOOBIG, "the %s is larger than the limit of %zu bytes",
                             what ? what : "data", b->max);
    }
    if (b->len + n + 1 <= b->cap)
        return KORCH_OK;
    size_t need = b->len + n + 1, cap = exact ? need : b->cap ? b->cap : 256;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    if (b->max < SIZE_MAX && cap > b->max + 1) /* need <= max + 1 (checked above) */
        cap = b->max + 1;
    if (b->grow) {
        korch_rc_t rc = b->grow(b->grow_arg, cap - b->cap, err);
        if (rc)
            return rc;
    }
    char *p = realloc(b->p, cap);
    if (!p)
        return korch_err_set(err, KORCH_E_NOMEM, "out of memory for a %s of %zu bytes", what ? what : "buffer",
                             cap);
    b->p = p;
    b->p[b->len] = 0; /* NUL-terminated whenever p is set, a first reserve too */
    b->cap = cap;
    return KORCH_OK;
}

korch_rc_t korch_buf_reserve(korch_buf_t *b, size_t n, const char *what, korch_err_t *err)
{
    return s_reserve(b, n, true, what, err);
}

korch_rc_t korch_buf_add(korch_buf_t *b, const void *data, size_t n, const char *what, korch_err_t *err)
{
    korch_rc_t rc = s_reserve(b, n, false, what, err);
    if (rc)
        return rc;
    if (n)
        memcpy(b->p + b->len, data, n);
    b->len += n;
    b->p[b->len] = 0;
    return KORCH_OK;
}

korch_rc_t korch_buf_adds(korch_buf_t *b, const char *s, const char *what, korch_err_t *err)
{
    return korch_buf_add(b, s, strlen(s), what, err);
}

korch_rc_t korch_buf_vaddf(korch_buf_t *b, const char *what, korch_err_t *err, const char *fmt, va_list ap)
{
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0)
        return korch_err_set(err, KORCH_E_INVALID, "cannot format the %s", what ? what : "data");
    korch_rc_t rc = s_reserve(b, (size_t)n, false, what, err);
    if (rc)
        return rc;
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    b->len += (size_t)n;
    return KORCH_OK;
}

korch_rc_t korch_buf_addf(korch_buf_t *b, const char *what, korch_err_t *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    korch_rc_t rc = korch_buf_vaddf(b, what, err, fmt, ap);
    va_end(ap);
    return rc;
}

void korch_buf_drop(korch_buf_t *b, size_t n)
{
    if (n >= b->len) {
        korch_buf_reset(b);
        return;
    }
    memmove(b->p, b->p + n, b->len - n + 1); /* with the NUL */
    b->len -= n;
}

void korch_buf_reset(korch_buf_t *b)
{
    b->len = 0;
    if (b->p)
        b->p[0] = 0;
}

void korch_buf_free(korch_buf_t *b)
{
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

char *korch_buf_strdup(const korch_buf_t *b)
{
    return strndup(b->p ? b->p : "", b->len);
}

char *korch_buf_release(korch_buf_t *b, size_t *len)
{
    char *p = b->p ? b->p : strdup("");
    if (len)
        *len = p ? b->len : 0;
    b->p = NULL;
    b->len = b->cap = 0;
    return p;
}
