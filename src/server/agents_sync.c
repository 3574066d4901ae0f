/*  A confined session's copies: what the code wrote in its kernel's work
 *  dir (a container's, a sandbox's), brought back into the session's files/
 *  after each step, so the session resumed in a new kernel (after a server
 *  restart, or once its kernel was culled) finds its files as the listing
 *  showed them. A local kernel works in files/ itself: nothing to copy.
 *
 *  Each "files" event of a step names what changed (at most the 100 the
 *  agent lists per step): a created or modified file is read through the
 *  launcher (korch_proc_get_file: the Engine API's archive, or the host
 *  dir on the launcher's worker; never blocking the loop) and written into
 *  files/ without following any link; a deleted one's copy goes; a file
 *  larger than the upload limit keeps no copy (a warning says so). Below
 *  agents_session.c in agents_int.h's order: it calls nothing above it.
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
    srv_agent_t *sa;
    korch_op_t *op;
    char rel[PATH_MAX];
} s_sync_t;

static void s_files_dir(srv_agent_t *sa, char *dir, size_t len) { snprintf(dir, len, "%s/files", sa->cfg.dir); }

static void s_end(s_sync_t *y)
{
    void *h = zlistx_find(y->sa->syncs, y);
    if (h)
        zlistx_delete(y->sa->syncs, h);
    free(y);
}

static void s_on_got(korch_rc_t rc, const korch_err_t *err, char *data, size_t len, void *arg)
{
    s_sync_t *y = arg;
    y->op = NULL;
    srv_agent_t *sa = y->sa;
    char dir[PATH_MAX + 8];
    s_files_dir(sa, dir, sizeof dir);
    korch_err_t e = {0};
    korch_fs_opts_t o = {.mode = 0644};
    if (rc == KORCH_OK)
        rc = korch_fs_write_rel(dir, y->rel, data, len, true, &o, &e);
    else if (rc == KORCH_E_TOOBIG || rc == KORCH_E_NOTFOUND) /* no copy rather than a stale one */
        korch_workdir_remove(dir, y->rel, NULL);
    if (rc != KORCH_OK && rc != KORCH_E_NOTFOUND)
        korch_warn("agent session %s: '%s' is not kept for a resume: %s", sa->id, y->rel,
                   e.msg[0] ? e.msg : err ? err->msg : korch_strerror(rc));
    free(data);
    s_end(y);
}

void srv_sa_sync_step(srv_agent_t *sa, json_t *changes)
{
    srv_kernel_t *mk = sa->kernel_id[0] ? srv_kmgr_find(srv_sa_kmgr(sa->srv), sa->kernel_id) : NULL;
    korch_proc_t *proc = mk ? korch_kernel_proc(mk->k) : NULL;
    if (!proc || !sa->syncs)
        return;
    char dir[PATH_MAX + 8];
    s_files_dir(sa, dir, sizeof dir);
    size_t i;
    json_t *c;
    json_array_foreach(changes, i, c) {
        const char *rel = json_string_value(json_object_get(c, "path"));
        const char *change = json_string_value(json_object_get(c, "change"));
        if (!rel || !change || !korch_safe_relpath(rel))
            continue;
        if (strcmp(change, "deleted") == 0) {
            korch_workdir_remove(dir, rel, NULL);
            continue;
        }
        s_sync_t *y = calloc(1, sizeof *y);
        if (!y)
            return;
        y->sa = sa;
        snprintf(y->rel, sizeof y->rel, "%s", rel);
        korch_err_t err = {0};
        y->op = korch_proc_get_file(proc, rel, srv_sa_opts(sa->srv)->max_upload, s_on_got, y, &err);
        if (!y->op) {
            korch_warn("agent session %s: '%s' is not kept for a resume: %s", sa->id, rel, err.msg);
            free(y);
            continue;
        }
        zlistx_add_end(sa->syncs, y);
    }
}

void srv_sa_sync_cancel(srv_agent_t *sa)
{
    s_sync_t *y;
    while (sa->syncs && (y = zlistx_first(sa->syncs))) {
        korch_op_cancel(&y->op);
        s_end(y);
    }
}
