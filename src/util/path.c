/*  Checked path joins (path.h). */
#include "korch/path.h"

#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
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

bool korch_relpath_ok(const char *name, size_t max, unsigned flags)
{
    if (!name || !*name || name[0] == '/' || strnlen(name, max < SIZE_MAX ? max + 1 : max) > max)
        return false;
    const char *p = name;
    while (*p) {
        size_t n = strcspn(p, "/");
        if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.') ||
            ((flags & KORCH_RELPATH_NO_HIDDEN) && p[0] == '.'))
            return false;
        p += n;
        if (*p == '/')
            p++;
    }
    return p[-1] != '/';
}

bool korch_safe_relpath(const char *name) { return korch_relpath_ok(name, KORCH_RELPATH_MAX, 0); }

bool korch_path_is_name(const char *name)
{
    return name && *name && strcmp(name, ".") != 0 && strcmp(name, "..") != 0 && !strchr(name, '/') &&
           strnlen(name, NAME_MAX + 1) <= NAME_MAX;
}
