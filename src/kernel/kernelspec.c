/*  Kernelspec discovery, following jupyter_client's KernelSpecManager and
 *  jupyter_core.paths.jupyter_path(), with korch's own kernelspec/ first. */
#include "korch/path.h"
#include "korch/kernelspec.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void s_add(json_t *arr, const char *a, const char *b)
{
    char path[PATH_MAX];
    if (korch_path_fmt(path, sizeof path, NULL, "%s%s", a, b ? b : "") == KORCH_OK) /* a cut path names another dir */
        json_array_append_new(arr, json_string(path));
}

static void s_add_list(json_t *arr, const char *list, const char *suffix)
{
    if (!list || !*list)
        return;
    char *copy = strdup(list);
    if (!copy)
        return;
    char *save = NULL;
    for (char *p = strtok_r(copy, ":", &save); p; p = strtok_r(NULL, ":", &save))
        if (*p)
            s_add(arr, p, suffix);
    free(copy);
}

json_t *korch_kernelspec_path(void)
{
    json_t *arr = json_array();
    if (!arr)
        return NULL;
    s_add_list(arr, getenv("KORCH_KERNELSPEC_PATH"), NULL);
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) {
        self[n] = 0;
        char *slash = strrchr(self, '/');
        if (slash) {
            *slash = 0;
            s_add(arr, self, "/../kernelspec");
            s_add(arr, self, "/../share/korch/kernelspec");
        }
    }
    s_add(arr, KORCH_PREFIX, "/share/korch/kernelspec");
    s_add_list(arr, getenv("JUPYTER_PATH"), "/kernels");
    const char *data = getenv("JUPYTER_DATA_DIR");
    const char *home = getenv("HOME");
    const char *xdg = getenv("XDG_DATA_HOME");
    if (data && *data)
        s_add(arr, data, "/kernels");
    else if (xdg && *xdg)
        s_add(arr, xdg, "/jupyter/kernels");
    else if (home && *home)
        s_add(arr, home, "/.local/share/jupyter/kernels");
    s_add(arr, "/usr/local/share/jupyter/kernels", NULL);
    s_add(arr, "/usr/share/jupyter/kernels", NULL);
    return arr;
}

void korch_kernelspec_destroy(korch_kernelspec_t **pspec)
{
    if (!pspec || !*pspec)
        return;
    korch_kernelspec_t *s = *pspec;
    free(s->name);
    free(s->dir);
    if (s->argv)
        for (char **a = s->argv; *a; a++)
            free(*a);
    free(s->argv);
    free(s->display_name);
    free(s->language);
    json_decref(s->env);
    json_decref(s->json);
    free(s);
    *pspec = NULL;
}

korch_kernelspec_t *korch_kernelspec_load(const char *dir, const char *name, korch_err_t *err)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/kernel.json", dir);
    json_error_t jerr;
    json_t *j = json_load_file(path, 0, &jerr);
    if (!j) {
        korch_err_set(err, KORCH_E_INVALID, "cannot read kernelspec '%s': %s", path, jerr.text);
        return NULL;
    }
    korch_kernelspec_t *s = calloc(1, sizeof *s);
    json_t *argv = json_object_get(j, "argv");
    if (!s)
        goto nomem;
    s->json = j;
    if (!json_is_array(argv) || json_array_size(argv) == 0) {
        korch_err_set(err, KORCH_E_INVALID, "kernelspec '%s': 'argv' must be a non-empty list of strings", path);
        goto fail;
    }
    s->argv = calloc(json_array_size(argv) + 1, sizeof *s->argv);
    if (!s->argv)
        goto nomem;
    for (size_t i = 0; i < json_array_size(argv); i++) {
        const char *a = json_string_value(json_array_get(argv, i));
        if (!a) {
            korch_err_set(err, KORCH_E_INVALID, "kernelspec '%s': argv[%zu] is not a string", path, i);
            goto fail;
        }
        if (!(s->argv[i] = strdup(a)))
            goto nomem;
    }
    char real[PATH_MAX];
    const char *dn = json_string_value(json_object_get(j, "display_name"));
    const char *lang = json_string_value(json_object_get(j, "language"));
    const char *im = json_string_value(json_object_get(j, "interrupt_mode"));
    s->name = strdup(name);
    s->dir = strdup(realpath(dir, real) ? real : dir);
    s->display_name = strdup(dn ? dn : name);
    s->language = strdup(lang ? lang : "");
    s->interrupt_message = im && strcmp(im, "message") == 0;
    json_t *env = json_object_get(j, "env");
    s->env = json_is_object(env) ? json_incref(env) : json_object();
    if (!s->name || !s->dir || !s->display_name || !s->language || !s->env)
        goto nomem;
    return s;
nomem:
    korch_err_set(err, KORCH_E_NOMEM, "out of memory");
fail:
    if (s)
        korch_kernelspec_destroy(&s);
    else
        json_decref(j);
    return NULL;
}

static bool s_valid_name(const char *name)
{
    if (!name || !*name || strlen(name) > 100)
        return false;
    for (const char *p = name; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '-' ||
              *p == '_' || *p == '.'))
            return false;
    return name[0] != '.';
}

korch_kernelspec_t *korch_kernelspec_find(const char *name, korch_err_t *err)
{
    if (!s_valid_name(name)) {
        korch_err_set(err, KORCH_E_INVALID, "kernelspec name '%s' is not valid (letters, digits, - _ .)",
                      name ? name : "");
        return NULL;
    }
    json_t *dirs = korch_kernelspec_path();
    korch_kernelspec_t *spec = NULL;
    size_t i;
    json_t *d;
    json_array_foreach(dirs, i, d) {
        char dir[PATH_MAX], file[PATH_MAX + 16];
        snprintf(dir, sizeof dir, "%s/%s", json_string_value(d), name);
        snprintf(file, sizeof file, "%s/kernel.json", dir);
        if (access(file, R_OK) == 0) {
            spec = korch_kernelspec_load(dir, name, err);
            break;
        }
    }
    if (!spec && (!err || err->rc == KORCH_OK))
        korch_err_set(err, KORCH_E_NOTFOUND,
                      "no kernelspec named '%s' (searched KORCH_KERNELSPEC_PATH, korch's kernelspec/, JUPYTER_PATH and "
                      "the Jupyter data dirs; `jupyter kernelspec list` shows what is installed)",
                      name);
    json_decref(dirs);
    return spec;
}

json_t *korch_kernelspec_list(void)
{
    json_t *out = json_object();
    json_t *dirs = korch_kernelspec_path();
    size_t i;
    json_t *d;
    json_array_foreach(dirs, i, d) {
        DIR *dh = opendir(json_string_value(d));
        if (!dh)
            continue;
        struct dirent *de;
        while ((de = readdir(dh))) {
            if (!s_valid_name(de->d_name) || json_object_get(out, de->d_name))
                continue;
            char dir[PATH_MAX];
            snprintf(dir, sizeof dir, "%s/%s", json_string_value(d), de->d_name);
            korch_kernelspec_t *spec = korch_kernelspec_load(dir, de->d_name, NULL);
            if (!spec)
                continue;
            json_object_set_new(out, de->d_name,
                                json_pack("{s:s, s:O, s:o}", "name", de->d_name, "spec", spec->json, "resources",
                                          korch_kernelspec_resources(spec)));
            korch_kernelspec_destroy(&spec);
        }
        closedir(dh);
    }
    json_decref(dirs);
    return out;
}

/* jupyter_server's kernelspec_model: kernel.js, kernel.css and logo-* of
   the spec's directory, served as /kernelspecs/NAME/FILE. */
bool korch_kernelspec_resource_name_ok(const char *file)
{
    if (!s_valid_name(file))
        return false;
    return strcmp(file, "kernel.js") == 0 || strcmp(file, "kernel.css") == 0 || strncmp(file, "logo-", 5) == 0;
}

json_t *korch_kernelspec_resources(const korch_kernelspec_t *spec)
{
    json_t *out = json_object();
    DIR *dh = spec && spec->dir ? opendir(spec->dir) : NULL;
    struct dirent *de;
    while (out && dh && (de = readdir(dh))) {
        if (!korch_kernelspec_resource_name_ok(de->d_name))
            continue;
        char key[128], url[512];
        if (korch_path_fmt(key, sizeof key, NULL, "%s", de->d_name) ||
            korch_path_fmt(url, sizeof url, NULL, "/kernelspecs/%s/%s", spec->name, de->d_name))
            continue; /* a cut name would serve another file */
        char *dot = strncmp(key, "logo-", 5) == 0 ? strrchr(key, '.') : NULL;
        if (dot) /* "logo-32x32": the name without its extension */
            *dot = 0;
        json_object_set_new(out, key, json_string(url));
    }
    if (dh)
        closedir(dh);
    return out;
}

korch_rc_t korch_kernelspec_resource_read(const korch_kernelspec_t *spec, const char *file, size_t max, char **data,
                                          size_t *len, korch_err_t *err)
{
    *data = NULL;
    *len = 0;
    if (!korch_kernelspec_resource_name_ok(file))
        return korch_err_set(err, KORCH_E_NOTFOUND, "kernelspec '%s' has no resource '%.80s'", spec->name, file);
    korch_rc_t rc = KORCH_OK;
    char *buf = NULL;
    int dfd = open(spec->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int fd = dfd >= 0 ? openat(dfd, file, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC) : -1;
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        rc = korch_err_set(err, KORCH_E_NOTFOUND, "kernelspec '%s' has no resource '%.80s'", spec->name, file);
        goto out;
    }
    if ((size_t)st.st_size > max) {
        rc = korch_err_set(err, KORCH_E_INVALID, "resource '%.80s' of kernelspec '%s' is over %zu bytes", file,
                           spec->name, max);
        goto out;
    }
    size_t n = (size_t)st.st_size, got = 0;
    if (!(buf = malloc(n + 1))) {
        rc = korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        goto out;
    }
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r <= 0) {
            rc = korch_err_set(err, KORCH_E_IO, "cannot read '%s/%s': %s", spec->dir, file,
                               r < 0 ? strerror(errno) : "it got shorter");
            goto out;
        }
        got += (size_t)r;
    }
    *data = buf;
    *len = n;
    buf = NULL;
out:
    free(buf);
    if (fd >= 0)
        close(fd);
    if (dfd >= 0)
        close(dfd);
    return rc;
}
