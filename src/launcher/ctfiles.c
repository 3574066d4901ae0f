/*  A container's files through the engine that runs it (ctfiles.h): the
 *  docker launcher's (its engine) and the swarm launcher's (the engine of
 *  the node that runs the kernel's task). They go through the archive
 *  endpoints, so they work however the work dir is mounted (a tmpfs, a
 *  volume, a host dir), with any kernel, and with a remote engine:
 *   PUT  /containers/{id}/archive?path=DIR  a tar, extracted into DIR
 *   GET  /containers/{id}/archive?path=P    a tar of P (a symlink stays one)
 *   HEAD /containers/{id}/archive?path=P    P's stat in X-Docker-Container-Path-Stat
 * dockerd resolves paths inside the container's root, never the host's.
 * Names are relative (korch_safe_relpath); each directory on the way is
 * checked to be a directory, not a symlink, so a link the kernel planted
 * (work/d -> /etc) does not lead korch out of the work dir. A kernel racing
 * that check can at most reach its own container's files. */
#include "ctfiles.h"
#include "cttar.h"
#include "backend.h"
#include "korch/docker_api.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CT_GO_MODE_DIR (1ULL << 31)      /* Go os.ModeDir, in the engine's path stat */
#define CT_GO_MODE_SYMLINK (1ULL << 27)  /* Go os.ModeSymlink */

/* "/containers/{id}/archive?path=" + escaped workdir[/rel[0..rel_len]] + extra. */
static char *s_archive_path(const korch_ctfile_at_t *p, const char *rel, size_t rel_len, const char *extra)
{
    char full[PATH_MAX + 1100];
    if (rel_len)
        snprintf(full, sizeof full, "%s/%.*s", p->workdir, (int)rel_len, rel);
    else
        snprintf(full, sizeof full, "%s", p->workdir);
    char *esc = korch_docker_escape(p->api, full);
    size_t n = esc ? strlen(esc) + strlen(p->id) + strlen(extra) + 64 : 0;
    char *path = esc ? malloc(n) : NULL;
    if (path)
        snprintf(path, n, "/containers/%s/archive?path=%s%s", p->id, esc, extra);
    free(esc);
    return path;
}

/* The engine's stat of workdir/rel[0..rel_len]: KORCH_OK with *mode (Go
   os.FileMode), KORCH_E_NOTFOUND when absent. */
static korch_rc_t s_stat(const korch_ctfile_at_t *p, const char *rel, size_t rel_len, unsigned long long *mode,
                         korch_err_t *err)
{
    char *path = s_archive_path(p, rel, rel_len, "");
    if (!path)
        return korch_err_set(err, KORCH_E_NOMEM, "out of memory");
    korch_docker_reply_t r;
    korch_rc_t rc = korch_docker_request_raw(p->api, "HEAD", path, NULL, NULL, 0, &r, err);
    free(path);
    if (rc)
        return rc;
    json_t *m = json_object_get(r.path_stat, "mode");
    if (r.status == 404)
        rc = KORCH_E_NOTFOUND;
    else if (r.status != 200 || !json_is_integer(m))
        rc = korch_err_set(err, KORCH_E_DOCKER, "cannot look at '%.*s' in kernel container %.12s: HTTP %ld",
                           (int)rel_len, rel, p->id, r.status);
    else
        *mode = (unsigned long long)json_integer_value(m);
    korch_docker_reply_clear(&r);
    return rc;
}

/* Every directory on the way to name is a directory and not a symlink. With
   missing non-NULL an absent one is fine: *missing is the length of the
   first absent prefix (SIZE_MAX when all exist); else absent = NOTFOUND. */
static korch_rc_t s_check_parents(const korch_ctfile_at_t *p, const char *name, size_t *missing, korch_err_t *err)
{
    if (missing)
        *missing = SIZE_MAX;
    for (const char *s = strchr(name, '/'); s; s = strchr(s + 1, '/')) {
        size_t n = (size_t)(s - name);
        unsigned long long mode = 0;
        korch_rc_t rc = s_stat(p, name, n, &mode, err);
        if (rc == KORCH_E_NOTFOUND && missing) {
            *missing = n;
            return KORCH_OK;
        }
        if (rc == KORCH_E_NOTFOUND)
            return korch_err_set(err, KORCH_E_NOTFOUND, "no file '%s' in the kernel's work dir", name);
        if (rc)
            return rc;
        if (mode & CT_GO_MODE_SYMLINK)
            return korch_err_set(err, KORCH_E_INVALID,
                                 "'%.*s' in the kernel's work dir is a symbolic link: refusing to follow it", (int)n,
                                 name);
        if (!(mode & CT_GO_MODE_DIR))
            return korch_err_set(err, KORCH_E_INVALID, "'%.*s' in the kernel's work dir is not a directory", (int)n,
                                 name);
    }
    return KORCH_OK;
}

korch_rc_t korch_ctfile_put_now(const korch_ctfile_at_t *p, const char *name, const void *data, size_t len,
                                korch_err_t *err)
{
    korch_buf_t b = {0};
    char *path = NULL;
    korch_docker_reply_t r = {0};
    size_t missing = SIZE_MAX;
    korch_rc_t rc = KORCH_OK;
    if (len > KORCH_TAR_SIZE_MAX)
        return korch_err_set(err, KORCH_E_TOOBIG, "cannot put '%s' into the kernel: larger than %llu bytes", name,
                             KORCH_TAR_SIZE_MAX);
    rc = s_check_parents(p, name, &missing, err);
    if (rc)
        return rc;
    bool ok = korch_tar_archive(&b, p->uid, p->gid, name, missing, data, len);
    path = ok ? s_archive_path(p, NULL, 0, "&noOverwriteDirNonDir=1") : NULL;
    if (!path) {
        rc = korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        goto out;
    }
    rc = korch_docker_request_raw(p->api, "PUT", path, "application/x-tar", b.p, b.len, &r, err);
    if (rc)
        goto out;
    if (r.status != 200)
        rc = korch_err_set(err, r.status == 404 ? KORCH_E_DIED : KORCH_E_DOCKER,
                           "cannot put '%s' into kernel container %.12s: %s", name, p->id,
                           korch_docker_reply_message(&r));
out:
    korch_docker_reply_clear(&r);
    free(path);
    korch_buf_free(&b);
    return rc;
}

korch_rc_t korch_ctfile_get_now(const korch_ctfile_at_t *p, const char *name, size_t max, char **data, size_t *len,
                                korch_err_t *err)
{
    korch_docker_reply_t r = {0};
    korch_err_t e = {0};
    *data = NULL;
    *len = 0;
    korch_rc_t rc = s_check_parents(p, name, NULL, err);
    if (rc)
        return rc;
    char *path = s_archive_path(p, name, strlen(name), "");
    if (!path)
        return korch_err_set(err, KORCH_E_NOMEM, "out of memory");
    /* Room for the headers (a pax one for a long name), padding and the end. */
    size_t slack = 8 * KORCH_TAR_BLOCK;
    korch_docker_set_max_reply(p->api, max < SIZE_MAX - slack ? max + slack : SIZE_MAX - 1);
    rc = korch_docker_request(p->api, "GET", path, NULL, &r, &e);
    korch_docker_set_max_reply(p->api, 0);
    free(path);
    if (rc == KORCH_E_TOOBIG)
        rc = korch_err_set(err, rc, "file '%s' in the kernel's work dir is larger than %zu bytes", name, max);
    else if (rc)
        rc = korch_err_set(err, rc, "%s", e.msg);
    else if (r.status == 404)
        rc = korch_err_set(err, KORCH_E_NOTFOUND, "no file '%s' in the kernel's work dir", name);
    else if (r.status != 200)
        rc = korch_err_set(err, KORCH_E_DOCKER, "cannot read '%s' from kernel container %.12s: %s", name, p->id,
                           korch_docker_reply_message(&r));
    else
        rc = korch_tar_first_file(name, (const unsigned char *)r.body, r.body_len, max, data, len, err);
    korch_docker_reply_clear(&r);
    return rc;
}

/* put_file and get_file on the loop: a HEAD per directory on the way (as
   s_check_parents does), then the archive itself, streamed by libcurl. */
typedef struct {
    korch_ctfile_at_t at;           /* its id and workdir point into the copies below */
    char id[128];
    char workdir[PATH_MAX];
    korch_ctfile_at_t *p;           /* &at */
    korch_op_t *op;                 /* the launcher's */
    korch_op_t *req;
    bool put;
    char *name;
    size_t pos;                     /* where the next '/' is looked for */
    size_t missing;                 /* put: the first absent prefix, SIZE_MAX none */
    void *data;                     /* put: a copy of the file */
    size_t len, max;
} s_fop_t;

static void s_fop_free(s_fop_t *f)
{
    korch_op_cancel(&f->req);
    free(f->name);
    free(f->data);
    free(f);
}

static void s_fop_cancel(korch_op_t *op, void *arg) { s_fop_free(arg); }

static void s_fop_fail(s_fop_t *f, korch_rc_t rc, const korch_err_t *err)
{
    if (f->put)
        korch_op_finish(f->op, rc, err);
    else
        korch_op_finish_file(f->op, NULL, 0, rc, err);
    s_fop_free(f);
}

static void s_on_put(korch_rc_t rc, const korch_err_t *err, korch_docker_reply_t *r, void *arg)
{
    s_fop_t *f = arg;
    f->req = NULL;
    korch_err_t e = {0};
    if (rc)
        return s_fop_fail(f, rc, err);
    if (r->status != 200)
        korch_err_set(&e, r->status == 404 ? KORCH_E_DIED : KORCH_E_DOCKER,
                      "cannot put '%s' into kernel container %.12s: %s", f->name, f->p->id,
                      korch_docker_reply_message(r));
    korch_op_finish(f->op, e.rc, &e);
    s_fop_free(f);
}

static void s_on_got(korch_rc_t rc, const korch_err_t *err, korch_docker_reply_t *r, void *arg)
{
    s_fop_t *f = arg;
    f->req = NULL;
    korch_err_t e = {0};
    char *data = NULL;
    size_t len = 0;
    if (rc == KORCH_E_TOOBIG)
        korch_err_set(&e, rc, "file '%s' in the kernel's work dir is larger than %zu bytes", f->name, f->max);
    else if (rc)
        korch_err_set(&e, rc, "%s", err ? err->msg : korch_strerror(rc));
    else if (r->status == 404)
        korch_err_set(&e, KORCH_E_NOTFOUND, "no file '%s' in the kernel's work dir", f->name);
    else if (r->status != 200)
        korch_err_set(&e, KORCH_E_DOCKER, "cannot read '%s' from kernel container %.12s: %s", f->name, f->p->id,
                      korch_docker_reply_message(r));
    else
        korch_tar_first_file(f->name, (const unsigned char *)r->body, r->body_len, f->max, &data, &len, &e);
    korch_op_finish_file(f->op, data, len, e.rc, &e);
    s_fop_free(f);
}

/* The parents are checked: the transfer. */
static void s_fop_transfer(s_fop_t *f)
{
    const korch_ctfile_at_t *p = f->p;
    korch_err_t e = {0};
    if (f->put) {
        korch_buf_t b;
        bool ok = korch_tar_archive(&b, p->uid, p->gid, f->name, f->missing, f->data, f->len);
        free(f->data);
        f->data = NULL;
        char *path = ok ? s_archive_path(p, NULL, 0, "&noOverwriteDirNonDir=1") : NULL;
        if (!path) {
            korch_buf_free(&b);
            korch_err_set(&e, KORCH_E_NOMEM, "out of memory");
            return s_fop_fail(f, e.rc, &e);
        }
        korch_docker_async_opts_t o = {.timeout_ms = -1, .take = true}; /* the tar is the request's */
        f->req = korch_docker_request_raw_async(p->api, "PUT", path, "application/x-tar", b.p, b.len, &o,
                                                s_on_put, f, &e);
        free(path);
    } else {
        char *path = s_archive_path(p, f->name, strlen(f->name), "");
        /* Room for the headers (a pax one for a long name), padding and the end. */
        size_t slack = 8 * KORCH_TAR_BLOCK;
        korch_docker_async_opts_t o = {.timeout_ms = -1, .max_reply = f->max < SIZE_MAX - slack ? f->max + slack
                                                                                                  : SIZE_MAX - 1};
        if (path)
            f->req = korch_docker_request_async(p->api, "GET", path, NULL, &o, s_on_got, f, &e);
        else
            korch_err_set(&e, KORCH_E_NOMEM, "out of memory");
        free(path);
    }
    if (!f->req)
        s_fop_fail(f, e.rc ? e.rc : KORCH_E_DOCKER, &e);
}

static void s_fop_next(s_fop_t *f);

static void s_on_parent(korch_rc_t rc, const korch_err_t *err, korch_docker_reply_t *r, void *arg)
{
    s_fop_t *f = arg;
    f->req = NULL;
    korch_err_t e = {0};
    const char *name = f->name;
    size_t n = f->pos;
    if (rc)
        return s_fop_fail(f, rc, err);
    json_t *m = json_object_get(r->path_stat, "mode");
    if (r->status == 404) {
        if (f->put) {
            f->missing = n;
            return s_fop_transfer(f);
        }
        korch_err_set(&e, KORCH_E_NOTFOUND, "no file '%s' in the kernel's work dir", name);
        return s_fop_fail(f, e.rc, &e);
    }
    if (r->status != 200 || !json_is_integer(m)) {
        korch_err_set(&e, KORCH_E_DOCKER, "cannot look at '%.*s' in kernel container %.12s: HTTP %ld", (int)n, name,
                      f->p->id, r->status);
        return s_fop_fail(f, e.rc, &e);
    }
    unsigned long long mode = (unsigned long long)json_integer_value(m);
    if (mode & CT_GO_MODE_SYMLINK)
        korch_err_set(&e, KORCH_E_INVALID, "'%.*s' in the kernel's work dir is a symbolic link: refusing to follow it",
                      (int)n, name);
    else if (!(mode & CT_GO_MODE_DIR))
        korch_err_set(&e, KORCH_E_INVALID, "'%.*s' in the kernel's work dir is not a directory", (int)n, name);
    if (e.rc)
        return s_fop_fail(f, e.rc, &e);
    f->pos = n + 1;
    s_fop_next(f);
}

static void s_fop_next(s_fop_t *f)
{
    const char *s = strchr(f->name + f->pos, '/');
    if (!s)
        return s_fop_transfer(f);
    f->pos = (size_t)(s - f->name);
    korch_err_t e = {0};
    char *path = s_archive_path(f->p, f->name, f->pos, "");
    if (path)
        f->req = korch_docker_request_raw_async(f->p->api, "HEAD", path, NULL, NULL, 0, NULL, s_on_parent, f, &e);
    else
        korch_err_set(&e, KORCH_E_NOMEM, "out of memory");
    free(path);
    if (!f->req)
        s_fop_fail(f, e.rc ? e.rc : KORCH_E_DOCKER, &e);
}

static korch_rc_t s_fop_start(const korch_ctfile_at_t *at, bool put, const char *name, const void *data,
                              size_t len, size_t max, korch_op_t *op, korch_err_t *err)
{
    if (put && len > KORCH_TAR_SIZE_MAX)
        return korch_err_set(err, KORCH_E_TOOBIG, "cannot put '%s' into the kernel: larger than %llu bytes", name,
                             KORCH_TAR_SIZE_MAX);
    s_fop_t *f = calloc(1, sizeof *f);
    if (!f)
        return korch_err_set(err, KORCH_E_NOMEM, "out of memory");
    *f = (s_fop_t){.at = *at, .op = op, .put = put, .missing = SIZE_MAX, .len = len, .max = max};
    snprintf(f->id, sizeof f->id, "%s", at->id);
    snprintf(f->workdir, sizeof f->workdir, "%s", at->workdir);
    f->at.id = f->id;
    f->at.workdir = f->workdir;
    f->p = &f->at;
    f->name = strdup(name);
    if (put) {
        f->data = malloc(len ? len : 1);
        if (f->data && len)
            memcpy(f->data, data, len);
    }
    if (!f->name || (put && !f->data)) {
        s_fop_free(f);
        return korch_err_set(err, KORCH_E_NOMEM, "out of memory");
    }
    korch_op_on_cancel(op, s_fop_cancel, f);
    s_fop_next(f); /* may fail at once: then the op is finished (done deferred) */
    return KORCH_OK;
}

korch_rc_t korch_ctfile_put(const korch_ctfile_at_t *at, const char *name, const void *data, size_t len,
                            korch_op_t *op, korch_err_t *err)
{
    return s_fop_start(at, true, name, data, len, 0, op, err);
}

korch_rc_t korch_ctfile_get(const korch_ctfile_at_t *at, const char *name, size_t max, korch_op_t *op,
                            korch_err_t *err)
{
    return s_fop_start(at, false, name, NULL, 0, max, op, err);
}

/* ---------------------------------------------------------------- signals */

typedef struct {
    korch_op_t *op;                 /* the launcher's */
    korch_op_t *req;
    char id[128];
} s_signal_t;

static void s_signal_cancel(korch_op_t *op, void *arg)
{
    (void)op;
    s_signal_t *sg = arg;
    korch_op_cancel(&sg->req);
    free(sg);
}

static void s_on_signalled(korch_rc_t rc, const korch_err_t *err, korch_docker_reply_t *r, void *arg)
{
    s_signal_t *sg = arg;
    korch_err_t e = {0};
    sg->req = NULL;
    if (rc == KORCH_OK && (r->status == 409 || r->status == 404))
        rc = korch_err_set(&e, KORCH_E_DIED, "kernel container %.12s is not running", sg->id);
    else if (rc == KORCH_OK && r->status != 204)
        rc = korch_err_set(&e, KORCH_E_DOCKER, "cannot signal kernel container %.12s: %s", sg->id,
                           korch_docker_reply_message(r));
    else if (rc)
        e = *err;
    korch_op_on_cancel(sg->op, NULL, NULL);
    korch_op_finish(sg->op, rc, &e);
    free(sg);
}

korch_rc_t korch_ct_signal(korch_docker_t *api, const char *id, int sig, korch_op_t *op, korch_err_t *err)
{
    s_signal_t *sg = calloc(1, sizeof *sg);
    if (!sg)
        return korch_err_set(err, KORCH_E_NOMEM, "out of memory");
    sg->op = op;
    snprintf(sg->id, sizeof sg->id, "%s", id);
    char path[200];
    snprintf(path, sizeof path, "/containers/%s/kill?signal=%d", sg->id, sig);
    sg->req = korch_docker_request_async(api, "POST", path, NULL, NULL, s_on_signalled, sg, err);
    if (!sg->req) {
        free(sg);
        return err && err->rc ? err->rc : KORCH_E_DOCKER;
    }
    korch_op_on_cancel(op, s_signal_cancel, sg);
    return KORCH_OK;
}
