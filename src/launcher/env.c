/*  A kernel's environment: the allow-list and the explicit extras (env.h). */
#include "korch/env.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern char **environ;

#define S_MAX_PASSED 256

static char *s_passed[S_MAX_PASSED + 1]; /* "NAME=VALUE" */
static size_t s_npassed;

/* Exact names, then prefixes ending in '_' or '*'. None of them carries a
   secret in any convention we know of. */
static const char *const s_allowed[] = {
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TERM", "TZ", "TMPDIR", "COLUMNS", "LINES",
    "PYTHONPATH", "PYTHONHOME", "PYTHONUNBUFFERED", "PYTHONIOENCODING", "PYTHONDONTWRITEBYTECODE",
    "PYTHONHASHSEED", "VIRTUAL_ENV", "CONDA_PREFIX", "CONDA_DEFAULT_ENV", "LD_LIBRARY_PATH", "IPYTHONDIR",
    "JUPYTER_PATH", "JUPYTER_DATA_DIR", "JUPYTER_CONFIG_DIR", "JUPYTER_RUNTIME_DIR", "JUPYTER_PLATFORM_DIRS",
    "MPLBACKEND", "MPLCONFIGDIR", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "OMP_NUM_THREADS",
    "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "R_HOME", "R_LIBS", "R_LIBS_USER", "JULIA_DEPOT_PATH", "NO_COLOR",
    "FORCE_COLOR", "CLICOLOR", NULL};
static const char *const s_allowed_prefix[] = {"LC_", "KERNEL_", NULL};

static bool s_valid_name(const char *s, size_t n)
{
    if (n == 0 || n > 127 || (s[0] >= '0' && s[0] <= '9'))
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') ||
              s[i] == '_'))
            return false;
    return true;
}

bool korch_env_allowed(const char *name)
{
    for (const char *const *a = s_allowed; *a; a++)
        if (strcmp(name, *a) == 0)
            return true;
    for (const char *const *a = s_allowed_prefix; *a; a++)
        if (strncmp(name, *a, strlen(*a)) == 0)
            return true;
    return false;
}

/* "NAME=VALUE" for spec ("NAME" takes korch's value): new string, NULL
   when NAME is unset; *bad when spec is not a variable. */
static char *s_assignment(const char *spec, bool *bad)
{
    size_t n = strcspn(spec, "=");
    *bad = !s_valid_name(spec, n);
    if (*bad)
        return NULL;
    if (spec[n] == '=')
        return strdup(spec);
    const char *v = getenv(spec);
    if (!v)
        return NULL;
    size_t len = n + strlen(v) + 2;
    char *s = malloc(len);
    if (s)
        snprintf(s, len, "%s=%s", spec, v);
    return s;
}

korch_rc_t korch_env_pass(const char *spec, korch_err_t *err)
{
    bool bad = false;
    if (!spec)
        return korch_err_set(err, KORCH_E_INVALID, "--env needs NAME or NAME=VALUE");
    char *a = s_assignment(spec, &bad);
    if (bad)
        return korch_err_set(err, KORCH_E_INVALID,
                             "--env '%.60s': not NAME or NAME=VALUE (NAME: letters, digits and _)", spec);
    if (!a)
        return KORCH_OK; /* NAME unset here: nothing to pass */
    if (s_npassed >= S_MAX_PASSED) {
        free(a);
        return korch_err_set(err, KORCH_E_TOOBIG, "more than %d --env variables", S_MAX_PASSED);
    }
    s_passed[s_npassed++] = a;
    return KORCH_OK;
}

void korch_env_pass_clear(void)
{
    for (size_t i = 0; i < s_npassed; i++)
        free(s_passed[i]);
    s_npassed = 0;
}

typedef struct {
    char **v;
    size_t n, cap;
    bool oom;
} s_vec_t;

/* Add "NAME=value" (copied), replacing an earlier NAME. */
static void s_put(s_vec_t *e, const char *kv)
{
    size_t klen = strcspn(kv, "=");
    if (!kv[klen] || !s_valid_name(kv, klen))
        return;
    char *c = strdup(kv);
    if (!c) {
        e->oom = true;
        return;
    }
    for (size_t i = 0; i < e->n; i++)
        if (strncmp(e->v[i], kv, klen + 1) == 0) {
            free(e->v[i]);
            e->v[i] = c;
            return;
        }
    if (e->n + 1 >= e->cap) {
        size_t cap = e->cap ? e->cap * 2 : 64;
        char **nv = realloc(e->v, cap * sizeof *nv);
        if (!nv) {
            free(c);
            e->oom = true;
            return;
        }
        e->v = nv;
        e->cap = cap;
    }
    e->v[e->n++] = c;
    e->v[e->n] = NULL;
}

char **korch_env_build(const korch_launch_t *req, bool from_host, const char *const *extra)
{
    return korch_env_build_on(NULL, req, from_host, extra);
}

char **korch_env_build_on(const char *const *base, const korch_launch_t *req, bool from_host,
                          const char *const *extra)
{
    s_vec_t e = {0};
    char buf[8192];
    for (const char *const *p = base; p && *p; p++)
        s_put(&e, *p);
    if (from_host)
        for (char **p = environ; *p; p++) {
            size_t klen = strcspn(*p, "=");
            if (klen < sizeof buf && (*p)[klen]) {
                memcpy(buf, *p, klen);
                buf[klen] = 0;
                if (korch_env_allowed(buf))
                    s_put(&e, *p);
            }
        }
    for (size_t i = 0; i < s_npassed; i++)
        s_put(&e, s_passed[i]);
    const char *list = getenv("KORCH_KERNEL_ENV");
    while (list && *list) {
        size_t n = strcspn(list, ",");
        if (n && n < sizeof buf) {
            memcpy(buf, list, n);
            buf[n] = 0;
            bool bad = false;
            char *a = s_assignment(buf, &bad);
            if (a)
                s_put(&e, a);
            free(a);
        }
        list += n + (list[n] == ',');
    }
    const char *key;
    json_t *val;
    if (req && req->spec)
        json_object_foreach(req->spec->env, key, val) {
            if (!json_is_string(val))
                continue;
            int n = snprintf(buf, sizeof buf, "%s=%s", key, json_string_value(val));
            if (n > 0 && (size_t)n < sizeof buf)
                s_put(&e, buf);
        }
    for (const char *const *p = req ? req->env : NULL; p && *p; p++)
        s_put(&e, *p);
    for (const char *const *p = extra; p && *p; p++)
        s_put(&e, *p);
    if (!e.v && !e.oom) {
        e.v = calloc(1, sizeof *e.v);
        e.oom = !e.v;
    }
    if (e.oom) {
        korch_env_free(e.v);
        return NULL;
    }
    return e.v;
}

void korch_env_free(char **env)
{
    if (env)
        for (char **p = env; *p; p++)
            free(*p);
    free(env);
}
