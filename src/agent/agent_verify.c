/*  Verify: the clean notebook (korch_notebook_clean) re-run top to bottom in
 *  a fresh kernel of the same launcher and kernelspec, in a work dir of its
 *  own holding only the session's input files (its "file" records), and the
 *  outputs the last answer relied on (its receipts' cells) compared with
 *  what they printed the first time; the packages the session installed
 *  (metadata.korch.packages) are installed there first. The result goes into the notebook's
 *  metadata (korch.verify), the transcript (a "verify" record) and a VERIFY
 *  event. The fresh kernel and its dir are gone afterwards. */
#include "agent_int.h"

#include "korch/buf.h"
#include "korch/fsutil.h"
#include "korch/outputs.h"
#include "korch/path.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VERIFY_MAX_INPUT (1u << 30)    /* an input file copied into the fresh work dir */

/* The text a cell's outputs show (stream, text/plain), at most max bytes. New string. */
char *agent_outputs_text(json_t *outputs, size_t max)
{
    korch_buf_t b = KORCH_BUF_INIT(max);
    size_t i;
    json_t *o;
    json_array_foreach(outputs, i, o) {
        json_t *t = korch_output_plain(o);
        if (json_is_string(t))
            korch_buf_add(&b, json_string_value(t), json_string_length(t), NULL, NULL);
        size_t k;
        json_t *line;
        json_array_foreach(t, k, line) korch_buf_adds(&b, json_string_value(line) ?: "", NULL, NULL);
    }
    return korch_buf_release(&b, NULL);
}

static char *s_source(json_t *cell)
{
    json_t *src = json_object_get(cell, "source");
    if (json_is_string(src))
        return strdup(json_string_value(src));
    korch_buf_t b = KORCH_BUF_INIT(64u << 20);
    size_t i;
    json_t *line;
    json_array_foreach(src, i, line) korch_buf_adds(&b, json_string_value(line) ?: "", NULL, NULL);
    return korch_buf_release(&b, NULL);
}

/* The session's input files (its "file" records, removals applied) into dir. */
static void s_copy_inputs(korch_agent_t *a, const char *dir)
{
    FILE *f = fopen(a->transcript_path, "r");
    json_t *names = json_object();
    char *line = NULL;
    size_t cap = 0;
    while (f && getline(&line, &cap, f) > 0) {
        json_t *rec = json_loads(line, 0, NULL);
        const char *type = json_string_value(json_object_get(rec, "type"));
        const char *name = json_string_value(json_object_get(rec, "name"));
        if (type && name && strcmp(type, "file") == 0) {
            if (json_is_true(json_object_get(rec, "removed")))
                json_object_del(names, name);
            else
                json_object_set_new(names, name, json_true());
        }
        json_decref(rec);
    }
    free(line);
    if (f)
        fclose(f);
    const char *name;
    json_t *v;
    json_object_foreach(names, name, v) {
        size_t len = 0;
        char *data = korch_workdir_read(a->files_dir, name, VERIFY_MAX_INPUT, &len, NULL);
        if (data)
            korch_workdir_write(dir, name, data, len, -1, -1, NULL);
        free(data);
    }
    json_decref(names);
}

/* The clean notebook's cells run in the kernel ko says (a fresh one of the
   launcher, or the server's attached by its connection file), then the
   answer's numbers compared. A result {status, cells, compared, differences}. */
static json_t *s_run(korch_agent_t *a, json_t *clean, const korch_kernel_opts_t *ko, korch_err_t *err)
{
    korch_kernel_t *k = korch_kernel_new(a->o.loop, ko, err);
    if (!k || korch_kernel_wait_ready(k, err) != KORCH_OK) {
        korch_kernel_destroy(&k);
        return json_pack("{s:s, s:s}", "status", "failed", "message", err && err->msg[0] ? err->msg : "no kernel");
    }
    json_t *res = json_pack("{s:s, s:i, s:i, s:[]}", "status", "reproduced", "cells", 0, "compared", 0, "differences");
    /* what the session installed, first (its %pip cells may have been dropped as failed attempts) */
    char pkmsg[1024];
    json_t *pkgs = json_object_get(json_object_get(json_object_get(clean, "metadata"), "korch"), "packages");
    int pk = agent_packages_install(a, k, pkgs, pkmsg, sizeof pkmsg);
    if (pk > 0)
        json_object_set_new(res, "packages", json_integer(pk));
    if (pk < 0) {
        json_object_set_new(res, "status", json_string("failed"));
        json_object_set_new(res, "message", json_string(pkmsg));
        korch_kernel_destroy(&k);
        return res;
    }
    json_t *rerun = json_object(); /* execution_count of the first run -> what the re-run printed */
    size_t i;
    json_t *cell;
    int cells = 0;
    json_array_foreach(json_object_get(clean, "cells"), i, cell) {
        const char *type = json_string_value(json_object_get(cell, "cell_type"));
        if (!type || strcmp(type, "code") != 0)
            continue;
        char *src = s_source(cell);
        korch_exec_opts_t eo = {.timeout_ms = a->o.exec_timeout_s * 1000};
        korch_err_t e = {0};
        korch_exec_t *ex = src ? korch_kernel_execute_wait(k, src, &eo, NULL, &e) : NULL;
        free(src);
        cells++;
        const korch_exec_result_t *r = ex ? korch_exec_result(ex) : NULL;
        if (!r || r->status != KORCH_EXEC_OK) {
            char msg[1400];
            const char *ename = r ? korch_exec_status_name(r->status) : "not run";
            snprintf(msg, sizeof msg, "code cell %d of the clean notebook did not run through (%s%s%s)", cells, ename,
                     e.msg[0] ? ": " : "", e.msg);
            json_t *out = r ? json_array_get(r->outputs, json_array_size(r->outputs) - 1) : NULL;
            if (out && json_string_value(json_object_get(out, "ename")))
                snprintf(msg, sizeof msg, "code cell %d of the clean notebook raised %s: %.300s", cells,
                         json_string_value(json_object_get(out, "ename")),
                         json_string_value(json_object_get(out, "evalue")) ?: "");
            json_object_set_new(res, "status", json_string("failed"));
            json_object_set_new(res, "message", json_string(msg));
            korch_exec_destroy(&ex);
            break;
        }
        json_t *count = json_object_get(cell, "execution_count");
        if (json_is_integer(count)) {
            char key[32];
            snprintf(key, sizeof key, "%lld", (long long)json_integer_value(count));
            char *text = agent_outputs_text(r->outputs, 1u << 20);
            json_object_set_new(rerun, key, json_string(text ? text : ""));
            free(text);
        }
        korch_exec_destroy(&ex);
    }
    json_object_set_new(res, "cells", json_integer(cells));
    korch_kernel_destroy(&k);
    /* the numbers the answer relied on: printed again by the same cell? */
    int compared = 0;
    json_t *r;
    json_array_foreach(a->last_receipts, i, r) {
        const char *form = json_string_value(json_object_get(r, "form"));
        json_t *count = json_object_get(r, "execution_count");
        if (!json_is_true(json_object_get(r, "found")) || !form || strcmp(form, "given") == 0 || !json_is_integer(count))
            continue;
        char key[32];
        snprintf(key, sizeof key, "%lld", (long long)json_integer_value(count));
        const char *now = json_string_value(json_object_get(rerun, key));
        const char *printed = json_string_value(json_object_get(r, "printed"));
        compared++;
        if (now && printed && strstr(now, printed))
            continue;
        json_array_append_new(json_object_get(res, "differences"),
                              json_pack("{s:O, s:s, s:O, s:s%}", "text", json_object_get(r, "text"), "printed",
                                        printed ? printed : "", "execution_count", count, "now", now ? now : "",
                                        now ? (strlen(now) > 300 ? (size_t)300 : strlen(now)) : (size_t)0));
    }
    json_object_set_new(res, "compared", json_integer(compared));
    if (json_array_size(json_object_get(res, "differences")) &&
        strcmp(json_string_value(json_object_get(res, "status")), "reproduced") == 0)
        json_object_set_new(res, "status", json_string("differed"));
    json_decref(rerun);
    return res;
}

/* The result recorded: the notebook's metadata (korch.verify), the
   transcript, a VERIFY event. */
static void s_record(korch_agent_t *a, json_t *res, int64_t t0)
{
    json_object_set_new(res, "seconds", json_real((double)(korch_now_ms() - t0) / 1e3));
    json_object_set_new(res, "turn_seconds", json_real((double)a->turn_ms / 1e3));
    json_object_set_new(res, "kernel", json_string(a->kernelspec));
    json_t *md = korch_notebook_meta(a->nb);
    if (json_is_object(json_object_get(md, "korch")))
        json_object_set(json_object_get(md, "korch"), "verify", res);
    agent_record(a, json_pack("{s:s, s:O}", "type", "verify", "verify", res), NULL);
    agent_emit(a, KORCH_AGENT_VERIFY, json_string_value(json_object_get(res, "status")), res);
    agent_write_notebook(a);
}

static json_t *s_clean_run(korch_agent_t *a, const korch_kernel_opts_t *ko)
{
    json_t *doc = korch_notebook_doc(a->nb); /* its written cells are on disk */
    json_t *clean = doc ? korch_notebook_clean(doc) : NULL;
    json_decref(doc);
    korch_err_t e = {0};
    json_t *res = clean ? s_run(a, clean, ko, &e) : json_pack("{s:s, s:s}", "status", "failed", "message", "out of memory");
    json_decref(clean);
    return res;
}

korch_rc_t korch_agent_verify(korch_agent_t *a, json_t **result, korch_err_t *err)
{
    if (result)
        *result = NULL;
    if (a->existing)
        return korch_err_set(err, KORCH_E_STATE,
                             "cannot verify a session attached to another kernel: its launcher is not korch's here");
    int64_t t0 = korch_now_ms();
    char dir[PATH_MAX + 16];
    korch_rc_t rc = korch_path_join(dir, sizeof dir, a->dir, "verify", err);
    if (rc)
        return rc;
    korch_fs_rm_tree(dir);
    if ((rc = korch_mkdirs(dir, 0755, err)))
        return rc;
    s_copy_inputs(a, dir);
    korch_kernel_opts_t ko = {.kernelspec = a->kernelspec, .launcher = a->o.launcher, .cwd = dir};
    json_t *res = s_clean_run(a, &ko);
    korch_fs_rm_tree(dir);
    s_record(a, res, t0);
    if (result)
        *result = res;
    else
        json_decref(res);
    return KORCH_OK;
}

korch_rc_t korch_agent_verify_in(korch_agent_t *a, const char *conn_path, int64_t started_ms, json_t **result,
                                 korch_err_t *err)
{
    if (result)
        *result = NULL;
    if (!conn_path || !*conn_path)
        return korch_err_set(err, KORCH_E_INVALID, "no connection file for the verification's kernel");
    int64_t t0 = started_ms > 0 ? started_ms : korch_now_ms();
    korch_kernel_opts_t ko = {.existing = conn_path};
    json_t *res = s_clean_run(a, &ko);
    s_record(a, res, t0);
    if (result)
        *result = res;
    else
        json_decref(res);
    return KORCH_OK;
}
