/*  The launcher interface over the backends' function table: ops whose
 *  done is called once, deferred to the loop, never after cancel; exit
 *  notification; background jobs that freed procs leave behind. Beside it:
 *  worker.c (the host-work thread), wait.c (the blocking calls), mine.c
 *  (the adoption lists' scope filter).
 */
#include "backend.h"
#include "korch/fsutil.h"
#include "korch/log.h"
#include "korch/path.h"

#include <errno.h>
#include <stdio.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef enum { OP_PROC, OP_PLAIN, OP_FILE, OP_KILL } op_kind_t;
typedef struct s_lop lop_t;

struct s_lop {
    korch_op_t base;                /* first: the handle callers hold */
    korch_launcher_t *l;
    korch_proc_t *proc;             /* the proc it acts on; NULL for start/adopt */
    op_kind_t kind;
    korch_proc_done_fn *pdone;
    korch_op_done_fn *odone;
    korch_file_done_fn *fdone;
    void *arg;
    lop_t *prev, *next;             /* l->ops_head */
    void (*cancel)(korch_op_t *op, void *arg);
    void *cancel_arg;
    bool finished;                  /* result in, done pending on the timer */
    int timer;                      /* the deferred done, -1 none */
    korch_rc_t rc;
    korch_err_t err;
    korch_proc_t *result;           /* OP_PROC: the proc, until done takes it */
    char *data;                     /* OP_FILE */
    size_t len;
};

struct korch_backend_job {
    korch_launcher_t *l;
    korch_backend_job_t *next;
    bool (*step)(void *arg);
    void (*finish)(void *arg);
    void *arg;
    int timer;
};

/* --------------------------------------------------------------- basics */

void korch_backend_launcher_init(korch_launcher_t *l, const korch_launcher_ops_t *ops, korch_loop_t *loop)
{
    l->ops = ops;
    l->loop = loop;
    l->caps = ops->caps;
    l->work_fd[0] = l->work_fd[1] = -1;
}

void *korch_backend_proc_new(korch_launcher_t *l, size_t size, const korch_launch_t *req)
{
    korch_proc_t *p = calloc(1, size);
    if (!p)
        return NULL;
    p->launcher = l;
    p->exit_timer = -1;
    if (req && req->conn)
        p->conn = *req->conn;
    if (req && req->runtime_dir)
        snprintf(p->runtime_dir, sizeof p->runtime_dir, "%s", req->runtime_dir);
    return p;
}

unsigned korch_launcher_caps(const korch_launcher_t *l) { return l ? l->caps : 0; }
const char *korch_launcher_name(const korch_launcher_t *l) { return l ? l->ops->name : "local"; }
korch_loop_t *korch_launcher_loop(const korch_launcher_t *l) { return l->loop; }
const char *korch_launcher_transport(korch_launcher_t *l) { return l->ops->transport; }
const korch_conn_t *korch_proc_conn(const korch_proc_t *p) { return &p->conn; }
const char *korch_proc_runtime_dir(const korch_proc_t *p) { return p->runtime_dir; }
korch_launcher_t *korch_proc_launcher(const korch_proc_t *p) { return p->launcher; }
bool korch_proc_exited(const korch_proc_t *p) { return p->exited; }
const char *korch_proc_exit_why(const korch_proc_t *p) { return p->exited ? p->why : ""; }
korch_loop_t *korch_op_loop(const korch_op_t *op) { return ((const lop_t *)op)->l->loop; }

const char *korch_proc_log_tail(korch_proc_t *p)
{
    const char *t = p->launcher->ops->log_tail ? p->launcher->ops->log_tail(p) : NULL;
    return t ? t : "";
}

bool korch_proc_usage_src(korch_proc_t *p, korch_usage_src_t *src)
{
    memset(src, 0, sizeof *src);
    if (p && p->launcher->ops->usage_src && p->launcher->ops->usage_src(p, src))
        return true;
    src->version = 0;
    return false;
}

bool korch_proc_usage(korch_proc_t *p, bool reset_peak, korch_proc_usage_t *u)
{
    korch_usage_src_t src;
    *u = (korch_proc_usage_t){.cpu_ns = -1, .mem_peak = -1};
    return korch_proc_usage_src(p, &src) && korch_usage_read(&src, reset_peak, u);
}

/* ------------------------------------------------------------------ ops */

static void s_op_cancel(korch_op_t *op);

static lop_t *s_op_new(korch_launcher_t *l, korch_proc_t *proc, op_kind_t kind, void *arg, korch_err_t *err)
{
    lop_t *op = calloc(1, sizeof *op);
    if (!op) {
        korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        return NULL;
    }
    op->base.cancel = s_op_cancel;
    op->l = l;
    op->proc = proc;
    op->kind = kind;
    op->arg = arg;
    op->timer = -1;
    op->next = l->ops_head;
    if (l->ops_head)
        l->ops_head->prev = op;
    l->ops_head = op;
    return op;
}

static void s_op_free(lop_t *op)
{
    korch_launcher_t *l = op->l;
    if (op->prev)
        op->prev->next = op->next;
    else if (l->ops_head == op)
        l->ops_head = op->next;
    if (op->next)
        op->next->prev = op->prev;
    if (op->timer >= 0)
        korch_loop_timer_end(l->loop, op->timer);
    korch_proc_destroy(&op->result);
    free(op->data);
    free(op);
}

static int s_on_op_timer(korch_loop_t *loop, int timer_id, void *arg)
{
    lop_t *op = arg;
    op->timer = -1;
    /* Unlinked first: done may cancel anything, start anything. */
    lop_t o = *op;
    op->result = NULL;
    op->data = NULL;
    s_op_free(op);
    const korch_err_t *err = o.rc ? &o.err : NULL;
    switch (o.kind) {
    case OP_PROC:
        if (o.pdone)
            o.pdone(o.result, o.rc, err, o.arg);
        else
            korch_proc_destroy(&o.result);
        break;
    case OP_FILE:
        if (o.fdone)
            o.fdone(o.rc, err, o.data, o.len, o.arg); /* data is done's now */
        else
            free(o.data);
        break;
    default:
        if (o.odone)
            o.odone(o.rc, err, o.arg);
        break;
    }
    return 0;
}

static void s_finish(lop_t *op, korch_rc_t rc, const korch_err_t *err)
{
    if (op->finished)
        return;
    op->finished = true;
    op->cancel = NULL;
    op->rc = rc;
    if (rc) {
        if (err && err->rc)
            op->err = *err;
        else
            korch_err_set(&op->err, rc, "%s", korch_strerror(rc));
    }
    op->timer = korch_loop_timer(op->l->loop, 0, 1, s_on_op_timer, op);
}

void korch_op_finish(korch_op_t *op, korch_rc_t rc, const korch_err_t *err) { s_finish((lop_t *)op, rc, err); }

void korch_op_finish_proc(korch_op_t *o, korch_proc_t *proc, korch_rc_t rc, const korch_err_t *err)
{
    lop_t *op = (lop_t *)o;
    if (op->finished) {
        korch_proc_destroy(&proc);
        return;
    }
    if (rc)
        korch_proc_destroy(&proc);
    else if (!proc)
        rc = KORCH_E_LAUNCH;
    else
        korch_pkgs_started(proc);
    op->result = proc;
    s_finish(op, rc, err);
}

void korch_op_finish_file(korch_op_t *o, char *data, size_t len, korch_rc_t rc, const korch_err_t *err)
{
    lop_t *op = (lop_t *)o;
    if (op->finished || rc) {
        free(data);
        data = NULL;
        len = 0;
    }
    if (!op->finished) {
        op->data = data;
        op->len = len;
    }
    s_finish(op, rc, err);
}

void korch_op_on_cancel(korch_op_t *o, void (*cancel)(korch_op_t *op, void *arg), void *arg)
{
    lop_t *op = (lop_t *)o;
    op->cancel = cancel;
    op->cancel_arg = arg;
}

static void s_op_cancel(korch_op_t *o)
{
    lop_t *op = (lop_t *)o;
    if (!op->finished && op->cancel)
        op->cancel(o, op->cancel_arg);
    s_op_free(op);
}

void korch_op_cancel(korch_op_t **pop)
{
    if (!pop || !*pop)
        return;
    korch_op_t *op = *pop;
    *pop = NULL;
    op->cancel(op);
}

/* An op the backend refused at once: freed, done never called. */
static korch_op_t *s_started(lop_t *op, korch_rc_t rc)
{
    if (rc == KORCH_OK)
        return &op->base;
    op->finished = true; /* a backend that finished and then failed: nothing is called */
    s_op_free(op);
    return NULL;
}

korch_op_t *korch_launcher_start(korch_launcher_t *l, const korch_launch_t *req, korch_proc_done_fn *done, void *arg,
                                 korch_err_t *err)
{
    lop_t *op = s_op_new(l, NULL, OP_PROC, arg, err);
    if (!op)
        return NULL;
    op->pdone = done;
    korch_pkgs_req_t pr; /* through the packages bootstrap when they are set (packages.c) */
    if (!korch_pkgs_request(l, req, &pr)) {
        korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        return s_started(op, KORCH_E_NOMEM);
    }
    korch_rc_t rc = l->ops->start(l, &pr.req, &op->base, err);
    korch_pkgs_request_clear(&pr);
    return s_started(op, rc);
}

korch_rc_t korch_launcher_warm(korch_launcher_t *l, const korch_kernelspec_t *spec, korch_err_t *err)
{
    if (!l || !spec || !l->ops->warm)
        return KORCH_OK;
    /* the kernelspec as its kernels will start (the %pip guard in its argv):
       the fork server's template is keyed by it */
    korch_launch_t req = {.spec = spec};
    korch_pkgs_req_t pr;
    if (!korch_pkgs_request(l, &req, &pr))
        return korch_err_set(err, KORCH_E_NOMEM, "out of memory");
    korch_rc_t rc = l->ops->warm(l, pr.req.spec, err);
    korch_pkgs_request_clear(&pr);
    return rc;
}

korch_op_t *korch_launcher_adopt(korch_launcher_t *l, const char *kernel_id, korch_proc_done_fn *done, void *arg,
                                 korch_err_t *err)
{
    if (!l->ops->adopt || !(l->caps & KORCH_LAUNCHER_ADOPTS)) {
        korch_err_set(err, KORCH_E_STATE, "the %s launcher cannot re-adopt kernels", l->ops->name);
        return NULL;
    }
    lop_t *op = s_op_new(l, NULL, OP_PROC, arg, err);
    if (!op)
        return NULL;
    op->pdone = done;
    return s_started(op, l->ops->adopt(l, kernel_id, &op->base, err));
}

json_t *korch_launcher_list_mine(korch_launcher_t *l, korch_err_t *err)
{
    if (!l->ops->list_mine || !(l->caps & KORCH_LAUNCHER_ADOPTS)) {
        korch_err_set(err, KORCH_E_STATE, "the %s launcher's kernels die with korch: none to re-adopt", l->ops->name);
        return NULL;
    }
    return l->ops->list_mine(l, err);
}

json_t *korch_launcher_list(korch_launcher_t *l, const char *instance, korch_err_t *err)
{
    if (!l->ops->list) {
        korch_err_set(err, KORCH_E_STATE, "the %s launcher's kernels die with korch: none to list", l->ops->name);
        return NULL;
    }
    return l->ops->list(l, instance, err);
}

int korch_launcher_remove_all(korch_launcher_t *l, const char *instance, korch_err_t *err)
{
    if (!l->ops->remove_all) {
        korch_err_set(err, KORCH_E_STATE, "the %s launcher leaves no kernels behind", l->ops->name);
        return -1;
    }
    return l->ops->remove_all(l, instance, err);
}

const char *korch_launcher_kind(const korch_launcher_t *l) { return l && l->ops->list ? l->ops->kind : NULL; }

const char *korch_proc_backend_id(korch_proc_t *p)
{
    return p && p->launcher->ops->proc_id ? p->launcher->ops->proc_id(p) : NULL;
}

korch_rc_t korch_launcher_remove_mine(korch_launcher_t *l, const char *id, korch_err_t *err)
{
    if (!l->ops->remove_mine || !(l->caps & KORCH_LAUNCHER_ADOPTS))
        return korch_err_set(err, KORCH_E_STATE, "the %s launcher leaves no kernels behind", l->ops->name);
    if (!id || !*id)
        return korch_err_set(err, KORCH_E_INVALID, "no id to remove");
    return l->ops->remove_mine(l, id, err);
}

korch_op_t *korch_proc_signal(korch_proc_t *p, int sig, korch_op_done_fn *done, void *arg, korch_err_t *err)
{
    if (p->exited) {
        korch_err_set(err, KORCH_E_DIED, "the kernel is gone (%s)", p->why);
        return NULL;
    }
    lop_t *op = s_op_new(p->launcher, p, OP_PLAIN, arg, err);
    if (!op)
        return NULL;
    op->odone = done;
    return s_started(op, p->launcher->ops->signal(p, sig, &op->base, err));
}

korch_op_t *korch_proc_kill(korch_proc_t *p, korch_op_done_fn *done, void *arg, korch_err_t *err)
{
    lop_t *op = s_op_new(p->launcher, p, OP_KILL, arg, err);
    if (!op)
        return NULL;
    op->odone = done;
    if (p->exited) {
        s_finish(op, KORCH_OK, NULL);
        return &op->base;
    }
    korch_op_t *o = s_started(op, p->launcher->ops->kill(p, &op->base, err));
    /* the end may have been seen at once; kill ops finish in korch_backend_exited */
    if (o && p->exited)
        s_finish(op, KORCH_OK, NULL);
    return o;
}

/* A host directory's file op (put_file_now / get_file_now) as work on the
   launcher's worker (worker.c): the disk may be slow, the file large. A
   cancelled op only forgets its work; a proc destroyed meanwhile is freed
   once its last work is back. */
typedef struct {
    lop_t *op;                      /* NULL once cancelled */
    korch_proc_t *proc;
    bool put;
    char *name;
    char *data;                     /* put: a copy (or NULL with fd); get: the result */
    int fd;                         /* put from a file (korch_proc_put_file_fd): our dup, else -1 */
    size_t len, max;
    korch_rc_t rc;
    korch_err_t err;
} s_fwork_t;

/* On the worker. */
static void s_fwork_run(void *arg)
{
    s_fwork_t *w = arg;
    const korch_launcher_ops_t *ops = w->proc->launcher->ops;
    if (w->put && w->fd >= 0) {
        void *map = w->len ? mmap(NULL, w->len, PROT_READ, MAP_PRIVATE, w->fd, 0) : NULL;
        if (map == MAP_FAILED)
            w->rc = korch_err_set(&w->err, KORCH_E_IO, "cannot map '%s' to put it: %s", w->name, strerror(errno));
        else
            w->rc = ops->put_file_now(w->proc, w->name, map ? map : "", w->len, &w->err);
        if (map && map != MAP_FAILED)
            munmap(map, w->len);
    } else if (w->put) {
        w->rc = ops->put_file_now(w->proc, w->name, w->data, w->len, &w->err);
    } else {
        w->rc = ops->get_file_now(w->proc, w->name, w->max, &w->data, &w->len, &w->err);
        return;
    }
    free(w->data);
    w->data = NULL;
    w->len = 0;
}

/* Back on the loop: finish its op, release its proc. */
static void s_fwork_done(void *arg)
{
    s_fwork_t *w = arg;
    if (w->op && w->put)
        s_finish(w->op, w->rc, &w->err);
    else if (w->op)
        korch_op_finish_file(&w->op->base, w->data, w->len, w->rc, &w->err);
    else
        free(w->data);
    if (w->fd >= 0)
        close(w->fd);
    korch_proc_t *p = w->proc;
    if (--p->busy == 0 && p->doomed)
        p->launcher->ops->proc_free(p);
    free(w->name);
    free(w);
}

static void s_fwork_cancel(korch_op_t *op, void *arg) { ((s_fwork_t *)arg)->op = NULL; }

static void s_fwork_free(s_fwork_t *w)
{
    if (!w)
        return;
    free(w->name);
    free(w->data);
    if (w->fd >= 0)
        close(w->fd);
    free(w);
}

/* Queue a host directory's file op on the worker. put: data (copied) or
   fd (dup'd, read from offset 0). */
static korch_rc_t s_work_start(lop_t *op, bool put, const char *name, const void *data, int fd, size_t len,
                               size_t max, korch_err_t *err)
{
    s_fwork_t *w = calloc(1, sizeof *w);
    if (w) {
        *w = (s_fwork_t){.op = op, .proc = op->proc, .put = put, .fd = -1, .len = len, .max = max};
        w->name = strdup(name);
        if (put && fd >= 0)
            w->fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
        else if (put)
            w->data = malloc(len ? len : 1);
    }
    if (!w || !w->name || (put && fd < 0 && !w->data) || (put && fd >= 0 && w->fd < 0)) {
        s_fwork_free(w);
        return korch_err_set(err, KORCH_E_NOMEM, "cannot queue the file op: %s", strerror(errno));
    }
    if (w->data && len)
        memcpy(w->data, data, len);
    korch_rc_t rc = korch_backend_host_queue(op->l, s_fwork_run, s_fwork_done, w, err);
    if (rc) {
        s_fwork_free(w);
        return rc;
    }
    op->proc->busy++;
    korch_op_on_cancel(&op->base, s_fwork_cancel, w);
    return KORCH_OK;
}

/* put_file from data, or from fd when data is NULL. */
static korch_op_t *s_put(korch_proc_t *p, const char *name, const void *data, int fd, size_t len,
                         korch_op_done_fn *done, void *arg, korch_err_t *err)
{
    if (!korch_safe_relpath(name)) {
        korch_err_set(err, KORCH_E_INVALID, "file name '%s' is not a relative path inside the work dir", name);
        return NULL;
    }
    const korch_launcher_ops_t *ops = p->launcher->ops;
    if (!ops->put_file && !ops->put_file_now) {
        korch_err_set(err, KORCH_E_STATE, "the %s launcher cannot put files", ops->name);
        return NULL;
    }
    lop_t *op = s_op_new(p->launcher, p, OP_PLAIN, arg, err);
    if (!op)
        return NULL;
    op->odone = done;
    if (!ops->put_file) /* a host directory: on the file worker (the disk may be slow, the file large) */
        return s_started(op, s_work_start(op, true, name, data, data ? -1 : fd, len, 0, err));
    if (data)
        return s_started(op, ops->put_file(p, name, data, len, &op->base, err));
    /* the backend copies what it sends: map the file for the call */
    void *map = len ? mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
    if (map == MAP_FAILED) {
        korch_err_set(err, KORCH_E_IO, "cannot map '%s' to put it: %s", name, strerror(errno));
        return s_started(op, KORCH_E_IO);
    }
    korch_rc_t rc = ops->put_file(p, name, map ? map : "", len, &op->base, err);
    if (map)
        munmap(map, len);
    return s_started(op, rc);
}

korch_op_t *korch_proc_put_file(korch_proc_t *p, const char *name, const void *data, size_t len,
                                korch_op_done_fn *done, void *arg, korch_err_t *err)
{
    return s_put(p, name, data ? data : "", -1, len, done, arg, err);
}

korch_op_t *korch_proc_put_file_fd(korch_proc_t *p, const char *name, int fd, size_t len, korch_op_done_fn *done,
                                   void *arg, korch_err_t *err)
{
    if (fd < 0) {
        korch_err_set(err, KORCH_E_INVALID, "no file to put as '%s'", name ? name : "");
        return NULL;
    }
    return s_put(p, name, NULL, fd, len, done, arg, err);
}

korch_op_t *korch_proc_get_file(korch_proc_t *p, const char *name, size_t max, korch_file_done_fn *done, void *arg,
                                korch_err_t *err)
{
    if (!korch_safe_relpath(name)) {
        korch_err_set(err, KORCH_E_INVALID, "file name '%s' is not a relative path inside the work dir", name);
        return NULL;
    }
    const korch_launcher_ops_t *ops = p->launcher->ops;
    if (!ops->get_file && !ops->get_file_now) {
        korch_err_set(err, KORCH_E_STATE, "the %s launcher cannot get files", ops->name);
        return NULL;
    }
    lop_t *op = s_op_new(p->launcher, p, OP_FILE, arg, err);
    if (!op)
        return NULL;
    op->fdone = done;
    if (ops->get_file)
        return s_started(op, ops->get_file(p, name, max, &op->base, err));
    return s_started(op, s_work_start(op, false, name, NULL, -1, 0, max, err));
}

/* ------------------------------------------------------------- the end */

static int s_on_exit_timer(korch_loop_t *loop, int timer_id, void *arg)
{
    korch_proc_t *p = arg;
    p->exit_timer = -1;
    korch_exit_fn *fn = p->on_exit;
    p->on_exit = NULL;
    if (fn)
        fn(p, p->why, p->exit_arg);
    return 0;
}

static void s_schedule_exit(korch_proc_t *p)
{
    if (p->exit_timer < 0 && p->on_exit)
        p->exit_timer = korch_loop_timer(p->launcher->loop, 0, 1, s_on_exit_timer, p);
}

void korch_backend_exited(korch_proc_t *p, const char *why)
{
    if (p->exited)
        return;
    p->exited = true;
    snprintf(p->why, sizeof p->why, "%s", why && *why ? why : "exited");
    korch_debug("kernel process ended: %s", p->why);
    s_schedule_exit(p);
    for (lop_t *op = p->launcher->ops_head; op; op = op->next)
        if (op->proc == p && op->kind == OP_KILL)
            s_finish(op, KORCH_OK, NULL);
}

void korch_proc_on_exit(korch_proc_t *p, korch_exit_fn *fn, void *arg)
{
    p->on_exit = fn;
    p->exit_arg = arg;
    if (!fn && p->exit_timer >= 0) {
        korch_loop_timer_end(p->launcher->loop, p->exit_timer);
        p->exit_timer = -1;
    }
    if (p->exited)
        s_schedule_exit(p);
}

void korch_proc_destroy(korch_proc_t **pp)
{
    if (!pp || !*pp)
        return;
    korch_proc_t *p = *pp;
    *pp = NULL;
    korch_launcher_t *l = p->launcher;
    /* from the head each time: a backend's cancel hook may end other ops */
    for (lop_t *op = l->ops_head; op;) {
        if (op->proc == p) {
            s_op_cancel(&op->base);
            op = l->ops_head;
        } else
            op = op->next;
    }
    if (p->exit_timer >= 0)
        korch_loop_timer_end(l->loop, p->exit_timer);
    p->exit_timer = -1;
    korch_pkgs_proc_end(p);
    if (p->busy) {
        /* a worker still reads or writes its files: kill it now, free it
           when the worker is back (s_fwork_done) */
        p->on_exit = NULL;
        p->doomed = true;
        if (!p->exited && l->ops->kill)
            l->ops->kill(p, NULL, NULL);
        return;
    }
    l->ops->proc_free(p);
}

/* ------------------------------------------------------------------ jobs */

static void s_job_unlink(korch_backend_job_t *j)
{
    korch_launcher_t *l = j->l;
    for (korch_backend_job_t **pj = &l->jobs; *pj; pj = &(*pj)->next)
        if (*pj == j) {
            *pj = j->next;
            break;
        }
    if (j->timer >= 0)
        korch_loop_timer_end(l->loop, j->timer);
    free(j);
}

static int s_on_job_timer(korch_loop_t *loop, int timer_id, void *arg)
{
    korch_backend_job_t *j = arg;
    if (j->step(j->arg))
        s_job_unlink(j);
    return 0;
}

void korch_backend_job(korch_launcher_t *l, int period_ms, bool (*step)(void *arg), void (*finish)(void *arg),
                       void *arg)
{
    korch_backend_job_t *j = calloc(1, sizeof *j);
    if (!j) { /* no memory to wait in the background: finish now */
        finish(arg);
        return;
    }
    *j = (korch_backend_job_t){.l = l, .next = l->jobs, .step = step, .finish = finish, .arg = arg, .timer = -1};
    l->jobs = j;
    if (step)
        j->timer = korch_loop_timer(l->loop, period_ms, 0, s_on_job_timer, j);
}

void *korch_launcher_defer(korch_launcher_t *l, void (*finish)(void *arg), void *arg)
{
    korch_backend_job_t *j = calloc(1, sizeof *j);
    if (!j)
        return NULL;
    *j = (korch_backend_job_t){.l = l, .next = l->jobs, .finish = finish, .arg = arg, .timer = -1};
    l->jobs = j;
    return j;
}

void korch_launcher_undefer(korch_launcher_t *l, void *handle)
{
    for (korch_backend_job_t *j = l->jobs; j; j = j->next)
        if (j == handle) {
            s_job_unlink(j);
            return;
        }
}

static void s_finish_jobs(korch_launcher_t *l)
{
    while (l->jobs) {
        korch_backend_job_t *j = l->jobs;
        void (*finish)(void *) = j->finish;
        void *arg = j->arg;
        s_job_unlink(j);
        finish(arg);
    }
}

void korch_launcher_destroy(korch_launcher_t **pl)
{
    if (!pl || !*pl)
        return;
    korch_launcher_t *l = *pl;
    *pl = NULL;
    /* What callers deferred (kernels tearing down) may still need ops. */
    korch_backend_host_finish(l);
    s_finish_jobs(l);
    while (l->ops_head)
        s_op_cancel(&l->ops_head->base);
    korch_backend_host_finish(l);
    s_finish_jobs(l);
    korch_backend_host_finish(l); /* what those last jobs queued */
    korch_pkgs_free(l);
    l->ops->free(l);
}

