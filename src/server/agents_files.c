#include "agents_int.h"
#include "download.h"
#include "body.h"
#include "korch/agent.h"
#include "korch/launcher.h"
#include "korch/llm.h"
#include "korch/fsutil.h"
#include "korch/log.h"
#include "korch/media.h"
#include "korch/path.h"
#include "korch/session.h"
#include "korch/workdir.h"
#include "korch/uuid.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------- files */
static void s_on_put_done(korch_rc_t rc, const korch_err_t *err, void *arg);

/* The final move of an upload (spooled to an unnamed file by server.c)
   into the kernel's work dir: the spooled file goes to the launcher's
   put_file_fd (a host work dir is written from it off the loop), a body in
   memory to put_file (which copies it); answered when the op ends. */
static korch_rc_t s_place_upload(srv_agent_t *sa, korch_proc_t *proc, const char *rel, srv_req_t *req,
                                 korch_err_t *err)
{
    srv_sa_fileop_t *f = srv_sa_fileop_new(sa, req, rel);
    if (!f)
        return korch_err_set(err, KORCH_E_NOMEM, "out of memory");
    const void *data;
    size_t len;
    korch_rc_t rc = KORCH_OK;
    int fd = req->rx && !req->body ? srv_body_fd(req->rx) : -1;
    if (fd >= 0 && !(f->op = korch_proc_put_file_fd(proc, rel, fd, req->body_len, s_on_put_done, f, err)))
        rc = err->rc ? err->rc : KORCH_E_IO;
    if (fd < 0)
        rc = srv_req_upload_map(req, &data, &len, err);
    if (fd < 0 && rc == KORCH_OK && !(f->op = korch_proc_put_file(proc, rel, data, len, s_on_put_done, f, err)))
        rc = err->rc ? err->rc : KORCH_E_IO;
    srv_req_upload_unmap(req);
    if (rc != KORCH_OK) {
        free(f);
        return rc;
    }
    srv_req_wait(req);
    zlistx_add_end(sa->fileops, f);
    return KORCH_OK;
}

/* Every file in the kernel's work dir. A local kernel's is the session's
   files/, walked now without following the kernel's symlinks, bounded. A
   confined one's (a container, a sandbox) is listed by the agent from
   inside the kernel after each step, with what the server put there or
   removed since laid over it (fjournal.h). */
json_t *srv_sa_file_list(srv_agent_t *sa)
{
    char dir[PATH_MAX + 16];
    json_t *list = NULL;
    if (srv_sa_isolated(sa->srv))
        list = srv_fjournal_listing(sa->journal);
    if (!list) {
        snprintf(dir, sizeof dir, "%s/files", sa->cfg.dir);
        korch_workdir_t *w = korch_workdir_new(dir, NULL);
        json_t *scan = w ? korch_workdir_scan(w, NULL) : NULL;
        list = w ? korch_workdir_list(w) : json_array();
        korch_workdir_destroy(&w);
        json_decref(scan);
    }
    size_t i;
    json_t *f;
    json_array_foreach(list, i, f) {
        const char *path = json_string_value(json_object_get(f, "path"));
        json_object_set_new(f, "name", json_string(path));
        json_object_set_new(f, "url", srv_sa_url(sa, "files", path));
        json_object_set_new(f, "mime", json_string(korch_mime_for(path)));
        json_object_set_new(f, "uploaded", json_boolean(srv_sa_uploaded(sa, path)));
    }
    return list;
}

/* GET .../figures/{name}: a chart the agent kept (figures/fig-N.ext). */
void srv_sa_figure(srv_agent_t *sa, srv_req_t *req, const srv_params_t *p, json_t *body)
{
    const char *name = srv_param(p, "name");
    int num = 0, used = 0;
    char ext[8] = "";
    if (strlen(name) > 40 || sscanf(name, "fig-%d.%7[a-z]%n", &num, ext, &used) != 2 ||
        used != (int)strlen(name) || num <= 0) {
        srv_respond_error(req, 404, "no figure '%s' (figures are named fig-N.png, .jpg or .svg)", name);
        return;
    }
    const char *mime = korch_mime_for(name);
    if (strncmp(mime, "image/", 6) != 0) {
        srv_respond_error(req, 404, "no figure '%s'", name);
        return;
    }
    char dir[PATH_MAX + 16];
    snprintf(dir, sizeof dir, "%s/figures", sa->cfg.dir);
    size_t len = 0;
    korch_err_t err = {0};
    char *data = korch_workdir_read(dir, name, MAX_NOTEBOOK, &len, &err);
    if (!data) {
        srv_respond_error(req, korch_rc_http_status(err.rc), "%s", err.msg);
        return;
    }
    srv_respond_file(req, name, mime, data, len); /* the kernel drew it: an SVG is an attachment */
    free(data);
}

/* The path a files route names, checked; NULL when req has been answered 400. */
static const char *s_rel(srv_req_t *req, const srv_params_t *p)
{
    const char *rel = srv_param(p, "path");
    if (korch_safe_relpath(rel))
        return rel;
    srv_respond_error(req, 400, "'%s' is not a plain path inside the work dir", req->path);
    return NULL;
}

/* The session's kernel process, when it has one running (NULL else). */
static korch_proc_t *s_proc(srv_agent_t *sa)
{
    srv_kernel_t *mk = sa->kernel_id[0] ? srv_kmgr_find(srv_sa_kmgr(sa->srv), sa->kernel_id) : NULL;
    return mk && sa->state != A_STARTING ? korch_kernel_proc(mk->k) : NULL;
}

/* A session without a kernel (stopped) takes the upload into files/: a
   local kernel's work dir, a confined one's copies, which its resume puts
   into the new kernel. The spooled upload is linked into place (no copy;
   linkat + renameat, nothing followed). */
static void s_put_stopped(srv_agent_t *sa, srv_req_t *req, const char *rel)
{
    char dir[PATH_MAX + 8];
    snprintf(dir, sizeof dir, "%s/files", sa->cfg.dir);
    korch_err_t err = {0};
    int fd = req->rx && !req->body ? srv_body_fd(req->rx) : -1;
    korch_rc_t rc = fd >= 0 ? korch_workdir_place_fd(dir, rel, fd, &err) : KORCH_E_STATE;
    if (fd < 0 || rc == KORCH_E_STATE) { /* a body in memory, or a spool file that cannot be linked: written */
        const void *data;
        size_t len;
        korch_fs_opts_t o = {.mode = 0644};
        korch_err_clear(&err);
        rc = srv_req_upload_map(req, &data, &len, &err);
        if (rc == KORCH_OK)
            rc = korch_fs_write_rel(dir, rel, data, len, true, &o, &err);
        srv_req_upload_unmap(req);
    }
    if (rc != KORCH_OK) {
        srv_respond_error(req, rc == KORCH_E_INVALID ? 400 : 500, "cannot write '%s': %s", rel, err.msg);
        return;
    }
    bool replaced = srv_sa_uploaded(sa, rel);
    srv_sa_file_added(sa, rel, (int64_t)req->body_len);
    srv_respond(req, replaced ? 200 : 201,
                json_pack("{s:s, s:I, s:b, s:o}", "name", rel, "size", (json_int_t)req->body_len, "replaced", replaced,
                          "url", srv_sa_url(sa, "files", rel)));
}

void srv_sa_file_put(srv_agent_t *sa, srv_req_t *req, const srv_params_t *p, json_t *body)
{
    const char *rel = s_rel(req, p);
    if (!rel)
        return;
    korch_proc_t *proc = s_proc(sa);
    korch_err_t err = {0};
    if (!proc && sa->state == A_STOPPED) {
        s_put_stopped(sa, req, rel);
        return;
    }
    if (!proc) {
        srv_respond_error(req, 409, "the session is %s: send the file again once it is idle",
                          srv_sa_state_names[sa->state]);
        return;
    }
    if (s_place_upload(sa, proc, rel, req, &err) != KORCH_OK)
        srv_respond_error(req, err.rc == KORCH_E_INVALID ? 400 : 500, "cannot write '%s': %s", rel, err.msg);
}

static void s_on_put_done(korch_rc_t rc, const korch_err_t *err, void *arg)
{
    srv_sa_fileop_t *f = arg;
    f->op = NULL;
    srv_agent_t *sa = f->sa;
    char rel[PATH_MAX];
    snprintf(rel, sizeof rel, "%s", f->rel);
    srv_req_t *req = srv_sa_fileop_end(f);
    if (rc != KORCH_OK) {
        srv_respond_error(req, rc == KORCH_E_INVALID ? 400 : 500, "cannot write '%s': %s", rel,
                          err ? err->msg : "unknown error");
        return;
    }
    /* a container's work dir is its own: the copy for a resumed session */
    const void *data;
    size_t len;
    korch_err_t merr = {0};
    if (srv_sa_isolated(sa->srv) && srv_req_upload_map(req, &data, &len, &merr) == KORCH_OK)
        srv_sa_keep_copy(sa, rel, data, len);
    srv_req_upload_unmap(req);
    bool replaced = srv_sa_uploaded(sa, rel);
    srv_sa_file_added(sa, rel, (int64_t)req->body_len);
    if (sa->actor)
        zstr_send(sa->actor, "FILES");
    /* PUT replaces by definition; the answer says when it did */
    srv_respond(req, replaced ? 200 : 201,
                json_pack("{s:s, s:I, s:b, s:o}", "name", rel, "size", (json_int_t)req->body_len, "replaced", replaced,
                          "url", srv_sa_url(sa, "files", rel)));
}

static void s_file_respond(srv_req_t *req, const char *rel, korch_rc_t rc, const char *msg, char *data, size_t len)
{
    if (rc != KORCH_OK)
        /* not there, or too big, is the client's to hear; anything else (a link
           the kernel planted, INVALID) is the server's */
        srv_respond_error(req, rc == KORCH_E_NOTFOUND || rc == KORCH_E_TOOBIG ? korch_rc_http_status(rc) : 500, "%s",
                          msg);
    else
        srv_respond_file(req, rel, korch_mime_for(rel), data, len); /* the kernel's or the user's: never a document */
}

static void s_on_get_done(korch_rc_t rc, const korch_err_t *err, char *data, size_t len, void *arg)
{
    srv_sa_fileop_t *f = arg;
    f->op = NULL;
    char rel[PATH_MAX];
    snprintf(rel, sizeof rel, "%s", f->rel);
    srv_req_t *req = srv_sa_fileop_end(f);
    s_file_respond(req, rel, rc, err ? err->msg : "unknown error", data, len);
    free(data);
}

void srv_sa_file_get(srv_agent_t *sa, srv_req_t *req, const srv_params_t *p, json_t *body)
{
    const char *rel = s_rel(req, p);
    if (!rel)
        return;
    korch_proc_t *proc = s_proc(sa);
    korch_err_t err = {0};
    size_t max = srv_sa_opts(sa->srv)->max_upload;
    if (proc) { /* from the kernel (a container's archive download never blocks the loop) */
        srv_sa_fileop_t *f = srv_sa_fileop_new(sa, req, rel);
        if (f && (f->op = korch_proc_get_file(proc, rel, max, s_on_get_done, f, &err))) {
            srv_req_wait(req);
            zlistx_add_end(sa->fileops, f);
            return;
        }
        free(f);
        s_file_respond(req, rel, f ? err.rc : KORCH_E_NOMEM, f ? err.msg : "out of memory", NULL, 0);
        return;
    }
    /* stopped: what is left on the host, read without following the kernel's symlinks */
    char dir[PATH_MAX + 8];
    size_t len = 0;
    snprintf(dir, sizeof dir, "%s/files", sa->cfg.dir);
    char *data = korch_workdir_read(dir, rel, max, &len, &err);
    s_file_respond(req, rel, data ? KORCH_OK : err.rc, err.msg, data, len);
    free(data);
}

/* DELETE .../files/{path*}. A local kernel's work dir is files/: removed
   there at once. A confined kernel's is removed from inside it by the
   session's agent between turns (REMOVE to its actor, answered when it
   says "removed"), with korch's copy; a stopped session's copy at once. */
void srv_sa_file_delete(srv_agent_t *sa, srv_req_t *req, const srv_params_t *p, json_t *body)
{
    const char *rel = s_rel(req, p);
    if (!rel)
        return;
    char dir[PATH_MAX + 8];
    snprintf(dir, sizeof dir, "%s/files", sa->cfg.dir);
    korch_err_t err = {0};
    bool confined = srv_sa_isolated(sa->srv) && sa->owns_kernel;
    if (confined && sa->actor && sa->state == A_IDLE) {
        srv_sa_fileop_t *f = srv_sa_fileop_new(sa, req, rel);
        if (!f) {
            srv_respond_error(req, 500, "out of memory");
            return;
        }
        f->remove = true;
        zlistx_add_end(sa->fileops, f);
        srv_req_wait(req);
        zstr_sendx(sa->actor, "REMOVE", rel, NULL);
        return;
    }
    if (confined && sa->state != A_STOPPED) {
        srv_respond_error(req, 409, "the session is %s: delete '%s' once it is idle", srv_sa_state_names[sa->state],
                          rel);
        return;
    }
    /* files/ itself: a local kernel's work dir, or a stopped confined session's copies */
    korch_rc_t rc = korch_workdir_remove(dir, rel, &err);
    if (rc == KORCH_E_NOTFOUND && confined) { /* only in the listing (written by code in the old kernel) */
        json_t *list = srv_fjournal_listing(sa->journal);
        size_t i;
        json_t *e;
        json_array_foreach(list, i, e) if (strcmp(json_string_value(json_object_get(e, "path")), rel) == 0) rc = KORCH_OK;
        json_decref(list);
    }
    if (rc != KORCH_OK) {
        srv_respond_error(req, rc == KORCH_E_NOTFOUND ? 404 : rc == KORCH_E_INVALID ? 400 : 500, "%s", err.msg);
        return;
    }
    srv_sa_file_gone(sa, rel);
    if (sa->actor)
        zstr_send(sa->actor, "FILES");
    srv_respond(req, 204, NULL);
}

bool srv_agent_upload_ok(korch_server_t *s, srv_req_t *req)
{
    const char *id = srv_param(&req->params, "session_id");
    srv_agent_t *sa = zhashx_lookup(srv_sa_all(s), id);
    if (!sa || !srv_user_may(&req->user, sa->owner)) { /* another user's is not there (ident.h) */
        srv_respond_error(req, 404, "no agent session '%s'", id);
        return false;
    }
    srv_kernel_t *mk = sa->kernel_id[0] ? srv_kmgr_find(srv_sa_kmgr(s), sa->kernel_id) : NULL;
    if (sa->state == A_STOPPED) /* taken into files/ (s_put_stopped) */
        return true;
    if (!mk || sa->state == A_STARTING) {
        srv_respond_error(req, 409, "the session is %s: send the file again once it is idle",
                          srv_sa_state_names[sa->state]);
        return false;
    }
    return true;
}
