/*  korch error codes.
 *
 *  One enum for the whole program, plus a detail message a user can act on.
 *  Functions that can fail return korch_rc_t (KORCH_OK is 0) and, when the
 *  caller passes a korch_err_t, fill it in.  The first error set wins: a
 *  cleanup path that fails after the real failure does not overwrite it.
 */
#ifndef KORCH_ERROR_H
#define KORCH_ERROR_H

#include <stddef.h>

typedef enum {
    KORCH_OK = 0,
    KORCH_E_NOMEM,          /* out of memory */
    KORCH_E_INVALID,        /* bad argument or malformed input */
    KORCH_E_IO,             /* a system call failed */
    KORCH_E_NOTFOUND,       /* file, kernelspec, kernel or image not found */
    KORCH_E_PROTOCOL,       /* peer broke the Jupyter protocol */
    KORCH_E_TIMEOUT,        /* waited too long */
    KORCH_E_DIED,           /* the kernel process died */
    KORCH_E_LAUNCH,         /* the kernel could not be started */
    KORCH_E_STATE,          /* call not valid in the current state */
    KORCH_E_DOCKER,         /* the Docker engine refused or is unreachable */
    KORCH_E_TOOBIG,         /* input larger than the configured limit */
    KORCH_E_INTERRUPTED,    /* stopped by the user (Ctrl-C) */
    KORCH_E_HTTP,           /* an HTTP peer failed */
    KORCH_E__COUNT
} korch_rc_t;

#define KORCH_ERR_MSG_MAX 1024

typedef struct {
    korch_rc_t rc;                  /* KORCH_OK until something failed */
    char msg[KORCH_ERR_MSG_MAX];    /* lowercase, no full stop, quotes the subject */
} korch_err_t;

/* Short generic text for a code ("out of memory"). Never NULL. */
const char *korch_strerror(korch_rc_t rc);

/* Record an error in *err unless one is recorded already (first wins).
   err may be NULL. Returns rc, so `return korch_err_set(err, ...)` works. */
korch_rc_t korch_err_set(korch_err_t *err, korch_rc_t rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The HTTP status a server answers a failed call with: 400 INVALID, 404
   NOTFOUND, 409 STATE, 413 TOOBIG, 503 NOMEM (try again later), 504
   TIMEOUT, 500 the rest (OK: 200), as jupyter_server answers a kernel that
   cannot start.
   The one map for the server's handlers (issue 13: three were written). */
int korch_rc_http_status(korch_rc_t rc);

/* Forget a recorded error. */
void korch_err_clear(korch_err_t *err);

#endif
