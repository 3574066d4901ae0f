/*  Dispatch to a launcher backend's function table. */
#include "korch/launcher.h"

#include <string.h>

korch_rc_t korch_launcher_start(korch_launcher_t *l, const korch_launch_t *req, korch_proc_t **out, korch_err_t *err)
{
    *out = NULL;
    korch_rc_t rc = l->ops->start(l, req, out, err);
    if (rc == KORCH_OK && *out)
        (*out)->launcher = l;
    return rc;
}

korch_rc_t korch_launcher_adopt(korch_launcher_t *l, const char *kernel_id, korch_conn_t *conn, char *runtime_dir,
                                size_t runtime_dir_len, korch_proc_t **out, korch_err_t *err)
{
    *out = NULL;
    if (!l->ops->adopt)
        return korch_err_set(err, KORCH_E_STATE, "the %s launcher cannot re-adopt kernels", l->ops->name);
    korch_rc_t rc = l->ops->adopt(l, kernel_id, conn, runtime_dir, runtime_dir_len, out, err);
    if (rc == KORCH_OK && *out)
        (*out)->launcher = l;
    return rc;
}

void korch_launcher_destroy(korch_launcher_t **l)
{
    if (l && *l) {
        (*l)->ops->free(*l);
        *l = NULL;
    }
}

int korch_proc_exit_fd(korch_proc_t *p) { return p->launcher->ops->exit_fd(p); }

bool korch_proc_is_alive(korch_proc_t *p, char *why, size_t whylen)
{
    return p->launcher->ops->is_alive(p, why, whylen);
}

korch_rc_t korch_proc_signal(korch_proc_t *p, int sig, korch_err_t *err)
{
    return p->launcher->ops->signal(p, sig, err);
}

void korch_proc_kill(korch_proc_t *p) { p->launcher->ops->kill(p); }

const char *korch_proc_log_tail(korch_proc_t *p) { return p->launcher->ops->log_tail(p); }

void korch_proc_destroy(korch_proc_t **p)
{
    if (p && *p) {
        (*p)->launcher->ops->proc_free(*p);
        *p = NULL;
    }
}

bool korch_safe_relpath(const char *name)
{
    if (!name || !*name || name[0] == '/' || strlen(name) > 1024)
        return false;
    const char *p = name;
    while (*p) {
        size_t n = strcspn(p, "/");
        if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
            return false;
        p += n;
        if (*p == '/')
            p++;
    }
    return name[strlen(name) - 1] != '/';
}

korch_rc_t korch_proc_put_file(korch_proc_t *p, const char *name, const void *data, size_t len, korch_err_t *err)
{
    if (!korch_safe_relpath(name))
        return korch_err_set(err, KORCH_E_INVALID, "file name '%s' is not a relative path inside the work dir", name);
    if (!p->launcher->ops->put_file)
        return korch_err_set(err, KORCH_E_STATE, "the %s launcher cannot put files", p->launcher->ops->name);
    return p->launcher->ops->put_file(p, name, data, len, err);
}

korch_rc_t korch_proc_get_file(korch_proc_t *p, const char *name, size_t max, char **data, size_t *len,
                               korch_err_t *err)
{
    *data = NULL;
    if (!korch_safe_relpath(name))
        return korch_err_set(err, KORCH_E_INVALID, "file name '%s' is not a relative path inside the work dir", name);
    if (!p->launcher->ops->get_file)
        return korch_err_set(err, KORCH_E_STATE, "the %s launcher cannot get files", p->launcher->ops->name);
    return p->launcher->ops->get_file(p, name, max, data, len, err);
}
