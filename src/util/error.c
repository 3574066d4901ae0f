/*  korch_rc_t texts and the first-error-wins detail message. */
#include "korch/error.h"

#include <stdarg.h>
#include <stdio.h>

static const char *const s_texts[KORCH_E__COUNT] = {
    [KORCH_OK] = "success",
    [KORCH_E_NOMEM] = "out of memory",
    [KORCH_E_INVALID] = "invalid input",
    [KORCH_E_IO] = "input/output error",
    [KORCH_E_NOTFOUND] = "not found",
    [KORCH_E_PROTOCOL] = "protocol error",
    [KORCH_E_TIMEOUT] = "timed out",
    [KORCH_E_DIED] = "kernel died",
    [KORCH_E_LAUNCH] = "kernel could not be started",
    [KORCH_E_STATE] = "not possible in the current state",
    [KORCH_E_DOCKER] = "docker error",
    [KORCH_E_TOOBIG] = "too large",
    [KORCH_E_INTERRUPTED] = "interrupted",
    [KORCH_E_HTTP] = "http error",
};

const char *korch_strerror(korch_rc_t rc)
{
    if ((int)rc < 0 || rc >= KORCH_E__COUNT || !s_texts[rc])
        return "unknown error";
    return s_texts[rc];
}

korch_rc_t korch_err_set(korch_err_t *err, korch_rc_t rc, const char *fmt, ...)
{
    if (!err || err->rc != KORCH_OK)
        return rc;
    err->rc = rc;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return rc;
}

void korch_err_clear(korch_err_t *err)
{
    if (err) {
        err->rc = KORCH_OK;
        err->msg[0] = 0;
    }
}

int korch_rc_http_status(korch_rc_t rc)
{
    switch (rc) {
    case KORCH_OK: return 200;
    case KORCH_E_INVALID: return 400;
    case KORCH_E_NOTFOUND: return 404;
    case KORCH_E_STATE: return 409;
    case KORCH_E_TOOBIG: return 413;
    case KORCH_E_NOMEM: return 503;
    case KORCH_E_TIMEOUT: return 504;
    default: return 500;    /* docker, launch, io...: the server's fault as a client sees it (jupyter_server: 500) */
    }
}
