/*  A confined session's copies: what the code wrote in its kernel's work
 *  dir (a container's, a sandbox's), brought back into the session's files/
 *  after each step, so the session resumed in a new kernel (after a server
 *  restart, or once its kernel was culled) finds its files as the listing
 *  showed them. A local kernel works in files/ itself: nothing to copy.
 *
 *  Each "files" event of a step names what changed (at most the 100 the
 *  agent lists per step): a created or modified file is read through the
 *  launcher (korch_proc_get_file: the Engine API's archive, or the host
 *  dir on the launcher's worker) and written into files/ without following
 *  any link; a deleted one's copy goes; a file larger than the upload
 *  limit keeps no copy (a warning says so). The writes and removals in
 *  files/ are disk work: they run on the launcher's worker
 *  (korch_launcher_host_work), never on the server's loop, in the order
 *  they were asked for. Below agents_session.c in agents_int.h's order: it
 *  calls nothing above it.
 */
#include "agents_int.h"
#include "korch/fsutil.h"
#include "korch/launcher.h"
#include "korch/log.h"
#include "korch/workdir.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    srv_agent_t *sa;                /* NULL once the session let go of it (srv_sa_sync_cancel) */
    korch_op_t *op;                 /* the read from the kernel, until it is back */
    korch_launcher_t *launcher;     /* whose worker writes it */
    bool queued;                    /* on that worker: freed by s_done */
    /* the worker's: copies only */
    char dir[PATH_MAX + 8];         /* the session's files/ */
    char rel[PATH_MAX];
    char id[64];                    /* the session's, for messages */
    bool remove;                    /* the copy goes (deleted, too big, gone) */
    char *data;
    size_t len;
    korch_rc_t rc;
    char why[300];                  /* what went wrong, "" none */
} s_sync_t;

static void s_files_dir(srv_agent_t *sa, char *dir, size_t len) { snprintf(dir, len, "%s/files", sa->cfg.dir); }

static void s_unlist(s_sync_t *y)
{
    void *h = y->sa && y->sa->syncs ? zlistx_find(y->sa->syncs, y) : NULL;
    if (h)
        zlistx_delete(y->sa->syncs, h);
}

/* On the worker: the copy written or removed, never through a link. */
static void s_run(void *arg)
{
    s_sync_t *y = arg;
    korch_err_t e = {0};
    korch_fs_opts_t o = {.mode = 0644};
    if (y->remove)
        korch_workdir_remove(y->dir, y->rel, NULL);
    else if (korch_fs_write_rel(y->dir, y->rel, y->data, y->len, true, &o, &e) != KORCH_OK)
        snprintf(y->why, sizeof y->why, "%.280s", e.msg);
    free(y->data);
    y->data = NULL;
    if (y->why[0])
        korch_warn("agent session %s: '%s' is not kept for a resume: %s", y->id, y->rel, y->why);
}

/* Back on the loop. */
static void s_done(void *arg)
{
    s_sync_t *y = arg;
    s_unlist(y);
    free(y->data);
    free(y);
}

/* To the worker; on the loop at once when it cannot take it (no thread). */
static void s_queue(s_sync_t *y)
{
    korch_err_t err = {0};
    if (korch_launcher_host_work(y->launcher, s_run, s_done, y, &err) == KORCH_OK) {
        y->queued = true;
        return;
    }
    korch_warn("agent session %s: '%s' is copied on the loop: %s", y->id, y->rel, err.msg);
    s_run(y);
    s_done(y);
}

static void s_on_got(korch_rc_t rc, const korch_err_t *err, char *data, size_t len, void *arg)
{
    s_sync_t *y = arg;
    y->op = NULL;
    y->data = data;
    y->len = len;
    if (rc == KORCH_E_TOOBIG || rc == KORCH_E_NOTFOUND) /* no copy rather than a stale one */
        y->remove = true;
    if (rc != KORCH_OK && rc != KORCH_E_NOTFOUND)
        snprintf(y->why, sizeof y->why, "%.280s", err ? err->msg : korch_strerror(rc));
    if (rc != KORCH_OK && !y->remove) {
        korch_warn("agent session %s: '%s' is not kept for a resume: %s", y->id, y->rel, y->why);
        s_done(y);
        return;
    }
    s_queue(y);
}

static s_sync_t *s_sync_new(srv_agent_t *sa, korch_proc_t *proc, const char *rel)
{
    s_sync_t *y = calloc(1, sizeof *y);
    if (!y)
        return NULL;
    y->sa = sa;
    y->launcher = korch_proc_launcher(proc);
    s_files_dir(sa, y->dir, sizeof y->dir);
    snprintf(y->rel, sizeof y->rel, "%s", rel);
    snprintf(y->id, sizeof y->id, "%s", sa->id);
    return y;
}

void srv_sa_sync_step(srv_agent_t *sa, json_t *changes)
{
    srv_kernel_t *mk = sa->kernel_id[0] ? srv_kmgr_find(srv_sa_kmgr(sa->srv), sa->kernel_id) : NULL;
    korch_proc_t *proc = mk ? korch_kernel_proc(mk->k) : NULL;
    if (!proc || !sa->syncs)
        return;
    size_t i;
    json_t *c;
    json_array_foreach(changes, i, c) {
        const char *rel = json_string_value(json_object_get(c, "path"));
        const char *change = json_string_value(json_object_get(c, "change"));
        if (!rel || !change || !korch_safe_relpath(rel))
            continue;
        s_sync_t *y = s_sync_new(sa, proc, rel);
        if (!y)
            return;
        zlistx_add_end(sa->syncs, y);
        if (strcmp(change, "deleted") == 0) {
            y->remove = true;
            s_queue(y);
            continue;
        }
        korch_err_t err = {0};
        y->op = korch_proc_get_file(proc, rel, srv_sa_opts(sa->srv)->max_upload, s_on_got, y, &err);
        if (!y->op) {
            korch_warn("agent session %s: '%s' is not kept for a resume: %s", sa->id, rel, err.msg);
            s_done(y);
        }
    }
}

/* The session goes: reads still pending are cancelled; what the worker
   holds is let go (it finishes, then frees it). */
void srv_sa_sync_cancel(srv_agent_t *sa)
{
    s_sync_t *y;
    while (sa->syncs && (y = zlistx_first(sa->syncs))) {
        s_unlist(y);
        y->sa = NULL;
        if (y->op) {
            korch_op_cancel(&y->op);
            free(y->data);
            free(y);
        }
        /* else queued on the worker: s_done frees it */
    }
}
