/*  Checked path joins (path.h). */
#include "korch/path.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static korch_rc_t s_cut(char *out, size_t cap, korch_err_t *err)
{
    char head[64];
    snprintf(head, sizeof head, "%.60s", cap ? out : "");
    if (cap)
        out[0] = 0;
    return korch_err_set(err, KORCH_E_TOOBIG, "the path '%s...' is longer than %zu bytes", head,
                         cap ? cap - 1 : 0);
}

korch_rc_t korch_path_join(char *out, size_t cap, const char *dir, const char *name, korch_err_t *err)
{
    if (!dir || !*dir)
        return korch_path_fmt(out, cap, err, "%s", name);
    size_t dl = strlen(dir);
    return korch_path_fmt(out, cap, err, "%s%s%s", dir, dir[dl - 1] == '/' ? "" : "/", name);
}

korch_rc_t korch_path_fmt(char *out, size_t cap, korch_err_t *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = cap ? vsnprintf(out, cap, fmt, ap) : -1;
    va_end(ap);
    if (n < 0 || (size_t)n >= cap)
        return s_cut(out, cap, err);
    return KORCH_OK;
}
