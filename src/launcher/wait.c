/*  The launcher's blocking calls (launcher.h): each runs the loop until
 *  its op is done. For tests, tools and a command's set-up, never a handler.
 */
#include "backend.h"

#include <stdlib.h>

typedef struct {
    bool done;
    korch_rc_t rc;
    korch_err_t err;
    korch_proc_t *proc;
    char *data;
    size_t len;
} s_wait_t;

static bool s_wait_done(void *arg) { return ((s_wait_t *)arg)->done; }

static void s_wait_proc(korch_proc_t *proc, korch_rc_t rc, const korch_err_t *err, void *arg)
{
    s_wait_t *w = arg;
    w->done = true;
    w->rc = rc;
    w->proc = proc;
    if (err)
        w->err = *err;
}

static void s_wait_plain(korch_rc_t rc, const korch_err_t *err, void *arg) { s_wait_proc(NULL, rc, err, arg); }

static void s_wait_file(korch_rc_t rc, const korch_err_t *err, char *data, size_t len, void *arg)
{
    s_wait_t *w = arg;
    s_wait_proc(NULL, rc, err, arg);
    w->data = data;
    w->len = len;
}

/* Run the loop until op is done; its result in w. */
static korch_rc_t s_wait(korch_loop_t *loop, korch_op_t *op, s_wait_t *w, korch_err_t *err)
{
    if (!op)
        return err && err->rc ? err->rc : KORCH_E_IO;
    korch_loop_run(loop, s_wait_done, w, -1);
    if (w->rc)
        korch_err_set(err, w->rc, "%s", w->err.msg);
    return w->rc;
}

korch_rc_t korch_launcher_start_wait(korch_launcher_t *l, const korch_launch_t *req, korch_proc_t **out,
                                     korch_err_t *err)
{
    s_wait_t w = {0};
    *out = NULL;
    korch_rc_t rc = s_wait(l->loop, korch_launcher_start(l, req, s_wait_proc, &w, err), &w, err);
    *out = w.proc;
    return rc;
}

korch_rc_t korch_launcher_adopt_wait(korch_launcher_t *l, const char *kernel_id, korch_proc_t **out,
                                     korch_err_t *err)
{
    s_wait_t w = {0};
    *out = NULL;
    korch_rc_t rc = s_wait(l->loop, korch_launcher_adopt(l, kernel_id, s_wait_proc, &w, err), &w, err);
    *out = w.proc;
    return rc;
}

korch_rc_t korch_proc_signal_wait(korch_proc_t *p, int sig, korch_err_t *err)
{
    s_wait_t w = {0};
    return s_wait(p->launcher->loop, korch_proc_signal(p, sig, s_wait_plain, &w, err), &w, err);
}

korch_rc_t korch_proc_kill_wait(korch_proc_t *p, korch_err_t *err)
{
    s_wait_t w = {0};
    return s_wait(p->launcher->loop, korch_proc_kill(p, s_wait_plain, &w, err), &w, err);
}

korch_rc_t korch_proc_put_file_wait(korch_proc_t *p, const char *name, const void *data, size_t len,
                                    korch_err_t *err)
{
    s_wait_t w = {0};
    return s_wait(p->launcher->loop, korch_proc_put_file(p, name, data, len, s_wait_plain, &w, err), &w, err);
}

korch_rc_t korch_proc_get_file_wait(korch_proc_t *p, const char *name, size_t max, char **data, size_t *len,
                                    korch_err_t *err)
{
    s_wait_t w = {0};
    *data = NULL;
    *len = 0;
    korch_rc_t rc = s_wait(p->launcher->loop, korch_proc_get_file(p, name, max, s_wait_file, &w, err), &w, err);
    *data = w.data;
    *len = w.len;
    return rc;
}

/* Settled: no background work left (freed procs' jobs, detached kernels,
   file ops on the worker). */
static bool s_settled(void *arg)
{
    korch_launcher_t *l = arg;
    return l->jobs == NULL && l->works == 0;
}

bool korch_launcher_settle(korch_launcher_t *l, int timeout_ms)
{
    return s_settled(l) || korch_loop_run(l->loop, s_settled, l, timeout_ms);
}

static bool s_exited(void *arg) { return ((korch_proc_t *)arg)->exited; }

bool korch_proc_wait_exit(korch_proc_t *p, int timeout_ms)
{
    return korch_loop_run(p->launcher->loop, s_exited, p, timeout_ms);
}


