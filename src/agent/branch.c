/*  Branching a session from one of its steps (korch_agent_branch, public in
 *  korch/agent.h; docs/trust.md says why it is built this way).
 *
 *  A branch is a new session dir made from the parent's, which is only
 *  read: its transcript cut after the chosen step (the conversation the
 *  model sees, the cells whose re-run rebuilds the kernel's state), its
 *  first record naming the branch's model, and a "branch" record last
 *  (parent, turn, step, model); the input files the parent was given up to
 *  that step (its "file" records) copied into files/, with what no longer
 *  matches the size they were given at said; the parent's figures (korch's
 *  own files, so the names the records use resolve and new ones do not
 *  collide); and the snapshot kept after that step, when there is one, as
 *  the branch's snapshot.json. Opening the branch (korch_agent_new) then
 *  rebuilds the kernel (agent_rebuild_branch in agent_resume.c). No kernel
 *  runs here: plain file work, bounded. */
#include "agent_int.h"

#include "korch/buf.h"
#include "korch/fsutil.h"
#include "korch/path.h"
#include "korch/uuid.h"
#include "korch/workdir.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define BRANCH_MAX_TRANSCRIPT (256u << 20)  /* the parent's transcript read */
#define BRANCH_MAX_INPUTS (2ull << 30)      /* input files copied, in all */
#define BRANCH_MAX_FIGURES (256ull << 20)   /* figures copied, in all */

/* The parent's transcript as an array of records (lines that are not one
   are dropped, as a resume drops them). NULL + err. */
static json_t *s_records(const char *parent, korch_err_t *err)
{
    char path[PATH_MAX + 24];
    if (korch_path_join(path, sizeof path, parent, "transcript.jsonl", err))
        return NULL;
    size_t len = 0;
    korch_err_t e = {0};
    char *text = korch_fs_read(path, BRANCH_MAX_TRANSCRIPT, true, &len, &e);
    if (!text) {
        if (e.rc == KORCH_E_NOTFOUND)
            korch_err_set(err, KORCH_E_NOTFOUND, "no session to branch from in '%s' (it has no transcript.jsonl)",
                          parent);
        else
            korch_err_set(err, e.rc, "cannot read the parent session's transcript: %s", e.msg);
        return NULL;
    }
    json_t *recs = json_array();
    for (char *line = text, *nl; line < text + len; line = nl + 1) {
        nl = memchr(line, '\n', len - (size_t)(line - text));
        if (!nl) /* a line being written is not part of any step yet */
            break;
        json_t *r = json_loadb(line, (size_t)(nl - line), 0, NULL);
        if (json_is_string(json_object_get(r, "type")))
            json_array_append_new(recs, r);
        else
            json_decref(r);
    }
    free(text);
    return recs;
}

static bool s_is(json_t *rec, const char *type)
{
    const char *t = json_string_value(json_object_get(rec, "type"));
    return t && strcmp(t, type) == 0;
}

/* The code steps of recs in order: [[turn, step, last execution index, executions so far]]. */
static json_t *s_steps(json_t *recs)
{
    json_t *steps = json_array();
    size_t i;
    json_t *r;
    int execs = 0;
    json_array_foreach(recs, i, r) {
        if (!s_is(r, "execution"))
            continue;
        execs++;
        json_int_t turn = json_integer_value(json_object_get(r, "turn"));
        json_int_t step = json_integer_value(json_object_get(r, "step"));
        json_t *last = json_array_get(steps, json_array_size(steps) - 1);
        if (last && json_integer_value(json_array_get(last, 0)) == turn &&
            json_integer_value(json_array_get(last, 1)) == step) {
            json_array_set_new(last, 2, json_integer((json_int_t)i));
            json_array_set_new(last, 3, json_integer(execs));
        } else
            json_array_append_new(steps, json_pack("[I, I, I, i]", turn, step, (json_int_t)i, execs));
    }
    return steps;
}

/* The input files given up to the cut (file records, removals applied) into
   the branch's files/; what changed since it was given goes in notes. */
static void s_copy_inputs(json_t *recs, size_t cut, const char *from, const char *to, json_t *inputs)
{
    json_t *names = json_object(); /* name -> bytes given */
    for (size_t i = 0; i <= cut && i < json_array_size(recs); i++) {
        json_t *r = json_array_get(recs, i);
        const char *name = json_string_value(json_object_get(r, "name"));
        if (!s_is(r, "file") || !name || !korch_safe_relpath(name))
            continue;
        if (json_is_true(json_object_get(r, "removed")))
            json_object_del(names, name);
        else
            json_object_set(names, name, json_object_get(r, "bytes") ?: json_null());
    }
    uint64_t total = 0;
    const char *name;
    json_t *given;
    json_object_foreach(names, name, given) {
        size_t len = 0;
        korch_err_t e = {0};
        char *data = korch_fs_read_rel(from, name, (size_t)(BRANCH_MAX_INPUTS - total), &len, &e);
        const char *why = NULL;
        char msg[300] = "";
        if (!data)
            why = e.rc == KORCH_E_NOTFOUND ? "gone from the parent's files (the code removed it)" : e.msg;
        else if (korch_fs_write_rel(to, name, data, len, true, NULL, &e) != KORCH_OK)
            why = e.msg;
        else if (json_is_integer(given) && (json_int_t)len != json_integer_value(given)) {
            snprintf(msg, sizeof msg, "changed since it was given (%lld bytes then, %zu now): the branch has it as it is now",
                     (long long)json_integer_value(given), len);
            why = msg;
        }
        total += data ? len : 0;
        free(data);
        json_t *in = json_pack("{s:s, s:b}", "name", name, "copied", why == NULL || why == msg);
        if (why)
            json_object_set_new(in, "note", json_string(why));
        json_array_append_new(inputs, in);
    }
    json_decref(names);
}

/* The snapshot kept after execution execs (snapshots/exec-N.json) as the
   branch's snapshot.json: a hard link (snapshots are replaced, never
   written in place: the parent's stays as it is), else a copy. True when
   there was one. */
static bool s_copy_snapshot(const char *parent, int execs, const char *dir)
{
    char from[PATH_MAX + 64], to[PATH_MAX + 24];
    snprintf(from, sizeof from, "%s/snapshots/exec-%d.json", parent, execs);
    snprintf(to, sizeof to, "%s/snapshot.json", dir);
    if (link(from, to) == 0)
        return true;
    size_t len = 0;
    char *text = korch_fs_read(from, (size_t)64 << 20, true, &len, NULL);
    bool ok = text && korch_write_file(to, text, len, NULL) == KORCH_OK;
    free(text);
    return ok;
}

static void s_copy_figures(const char *parent, const char *dir)
{
    char from[PATH_MAX + 16], to[PATH_MAX + 16];
    snprintf(from, sizeof from, "%s/figures", parent);
    snprintf(to, sizeof to, "%s/figures", dir);
    int f = korch_fs_open_dir(from, NULL);
    if (f < 0)
        return;
    int t = korch_mkdirs(to, 0755, NULL) == KORCH_OK ? korch_fs_open_dir(to, NULL) : -1;
    korch_fs_copy_t c = {.max_bytes = BRANCH_MAX_FIGURES};
    uint64_t copied = 0;
    if (t >= 0)
        korch_fs_copy_tree(f, t, &c, NULL, &copied, NULL);
    close(f);
    if (t >= 0)
        close(t);
}

static const char *s_base(const char *path)
{
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/')
        n--;
    const char *b = path + n;
    while (b > path && b[-1] != '/')
        b--;
    return b;
}

korch_rc_t korch_agent_branch(const korch_agent_branch_opts_t *o, json_t **info, korch_err_t *err)
{
    if (info)
        *info = NULL;
    if (!o || !o->parent_dir || !o->dir)
        return korch_err_set(err, KORCH_E_INVALID, "a branch needs the parent session's dir and a dir of its own");
    if (o->step < 1)
        return korch_err_set(err, KORCH_E_INVALID, "step %d: steps are counted from 1", o->step);
    if (access(o->dir, F_OK) == 0)
        return korch_err_set(err, KORCH_E_INVALID, "'%s' exists already: a branch starts in a new session dir", o->dir);
    json_t *recs = s_records(o->parent_dir, err);
    if (!recs)
        return err ? err->rc : KORCH_E_NOTFOUND;
    json_t *first = json_array_get(recs, 0);
    json_t *steps = s_steps(recs);
    json_t *at = NULL;
    size_t i;
    json_t *s;
    int turn_steps = 0;
    json_array_foreach(steps, i, s) {
        if (o->turn > 0 && json_integer_value(json_array_get(s, 0)) != o->turn)
            continue;
        turn_steps++;
        bool hit = o->turn > 0 ? json_integer_value(json_array_get(s, 1)) == o->step : (int)i + 1 == o->step;
        if (hit && !at)
            at = s;
    }
    korch_rc_t rc = KORCH_OK;
    if (!s_is(first, "session"))
        rc = korch_err_set(err, KORCH_E_INVALID, "'%s' is not a korch session (its transcript does not begin with one)",
                           o->parent_dir);
    else if (!at && o->turn > 0)
        rc = korch_err_set(err, KORCH_E_INVALID,
                           "turn %d has no step %d that ran code (it has %d such step%s); the session has %zu in all",
                           o->turn, o->step, turn_steps, turn_steps == 1 ? "" : "s", json_array_size(steps));
    else if (!at) {
        char range[64] = "";
        if (json_array_size(steps) > 1)
            snprintf(range, sizeof range, " (1 to %zu)", json_array_size(steps));
        rc = korch_err_set(err, KORCH_E_INVALID, "step %d is out of range: the session has %zu step%s that ran code%s",
                           o->step, json_array_size(steps), json_array_size(steps) == 1 ? "" : "s", range);
    }
    if (rc != KORCH_OK) {
        json_decref(steps);
        json_decref(recs);
        return rc;
    }
    /* the cut: the step's last execution, then the tool results and kernel
       notes of that reply, up to what begins the next step */
    size_t cut = (size_t)json_integer_value(json_array_get(at, 2));
    while (cut + 1 < json_array_size(recs) &&
           (s_is(json_array_get(recs, cut + 1), "tool") || s_is(json_array_get(recs, cut + 1), "kernel")))
        cut++;
    int turn = (int)json_integer_value(json_array_get(at, 0)), step = (int)json_integer_value(json_array_get(at, 1));
    int execs = (int)json_integer_value(json_array_get(at, 3));
    const char *parent_llm = json_string_value(json_object_get(first, "llm"));
    const char *llm = o->llm && *o->llm ? o->llm : parent_llm ? parent_llm : "";
    const char *parent_id = o->parent_id ? o->parent_id : s_base(o->parent_dir);
    const char *id = o->id ? o->id : s_base(o->dir);
    char files_dir[PATH_MAX + 8], from_files[PATH_MAX + 8], tpath[PATH_MAX + 24];
    json_t *inputs = json_array();
    korch_buf_t b = KORCH_BUF_INIT(BRANCH_MAX_TRANSCRIPT + (1u << 20));
    char date[32];
    korch_iso8601_now(date);
    if (korch_mkdirs(o->dir, 0700, err) != KORCH_OK)
        goto fail;
    snprintf(files_dir, sizeof files_dir, "%s/files", o->dir);
    snprintf(from_files, sizeof from_files, "%s/files", o->parent_dir);
    if (korch_mkdirs(files_dir, 0755, err) != KORCH_OK)
        goto fail;
    s_copy_inputs(recs, cut, from_files, files_dir, inputs);
    s_copy_figures(o->parent_dir, o->dir);
    bool snap = s_copy_snapshot(o->parent_dir, execs, o->dir);
    json_t *parent = json_pack("{s:s, s:i, s:i, s:i, s:i, s:s?}", "session", parent_id, "turn", turn, "step", step,
                               "index", o->turn > 0 ? 0 : o->step, "executions", execs, "llm", parent_llm);
    if (o->turn > 0) /* the N-th step of the session, whichever way it was asked for */
        json_array_foreach(steps, i, s) if (s == at) json_object_set_new(parent, "index", json_integer((json_int_t)i + 1));
    for (i = 0; i <= cut; i++) {
        json_t *r = json_array_get(recs, i);
        json_t *copy = i == 0 ? json_deep_copy(r) : NULL;
        if (copy) /* the branch's model, read back by a resume and korch run */
            json_object_set_new(copy, "llm", json_string(llm));
        char *line = json_dumps(copy ? copy : r, JSON_COMPACT);
        json_decref(copy);
        if (!line || korch_buf_adds(&b, line, NULL, NULL) || korch_buf_adds(&b, "\n", NULL, NULL)) {
            free(line);
            korch_err_set(err, KORCH_E_TOOBIG, "the parent's transcript up to that step is too big to branch from");
            json_decref(parent);
            goto fail;
        }
        free(line);
    }
    json_t *brec = json_pack("{s:s, s:s, s:s, s:o, s:s, s:O, s:b}", "type", "branch", "time", date, "session", id,
                             "parent", parent, "llm", llm, "inputs", inputs, "snapshot", snap);
    char *line = json_dumps(brec, JSON_COMPACT);
    if (!line || korch_buf_adds(&b, line, NULL, NULL) || korch_buf_adds(&b, "\n", NULL, NULL)) {
        free(line);
        json_decref(brec);
        korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        goto fail;
    }
    free(line);
    snprintf(tpath, sizeof tpath, "%s/transcript.jsonl", o->dir);
    if (korch_write_file(tpath, b.p ? b.p : "", b.len, err) != KORCH_OK) {
        json_decref(brec);
        goto fail;
    }
    json_object_set_new(brec, "steps", json_integer((json_int_t)json_array_size(steps)));
    if (info)
        *info = brec;
    else
        json_decref(brec);
    korch_buf_free(&b);
    json_decref(inputs);
    json_decref(steps);
    json_decref(recs);
    return KORCH_OK;
fail:
    korch_buf_free(&b);
    json_decref(inputs);
    json_decref(steps);
    json_decref(recs);
    korch_fs_rm_tree(o->dir);
    return err ? err->rc : KORCH_E_IO;
}
