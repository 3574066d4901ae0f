/*  Dispatch to a launcher backend's function table. */
#include "korch/launcher.h"

korch_rc_t korch_launcher_start(korch_launcher_t *l, const korch_launch_t *req, korch_proc_t **out, korch_err_t *err)
{
    *out = NULL;
    korch_rc_t rc = l->ops->start(l, req, out, err);
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
