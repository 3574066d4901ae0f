#include "agent_int.h"

#include "korch/fsutil.h"
#include "korch/log.h"
#include "korch/path.h"
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---------------------------------------------------------- snapshots */

/* Python: the user's variables, each pickled on its own (so one that cannot
   be restored does not take the others with it), within a byte budget.
   Modules are kept by name; functions and classes defined in cells (pickled
   by reference, absent from a fresh kernel) and what cannot be pickled are
   listed as skipped. Prints one JSON line. */
static const char *s_snapshot_code =
    "def _korch_snapshot(limit):\n"
    "    import pickle, base64, json, types\n"
    "    ip = get_ipython()\n"
    "    ns, hidden = ip.user_ns, ip.user_ns_hidden\n"
    "    saved, modules, skipped, total = {}, {}, [], 0\n"
    "    for k, v in list(ns.items()):\n"
    "        if k.startswith('_') or k in hidden or k in ('In', 'Out', 'exit', 'quit', 'get_ipython'):\n"
    "            continue\n"
    "        if isinstance(v, types.ModuleType):\n"
    "            modules[k] = v.__name__\n"
    "            continue\n"
    "        if getattr(v, '__module__', None) == '__main__' and isinstance(v, (type, types.FunctionType)):\n"
    "            skipped.append([k, type(v).__name__, 'defined in a cell'])\n"
    "            continue\n"
    "        if getattr(type(v), '__module__', None) == '__main__':\n"
    "            skipped.append([k, type(v).__name__, 'its class is defined in a cell'])\n"
    "            continue\n"
    "        try:\n"
    "            b = pickle.dumps(v, protocol=4)\n"
    "        except Exception as e:\n"
    "            skipped.append([k, type(v).__name__, 'cannot be pickled'])\n"
    "            continue\n"
    "        if total + len(b) > limit:\n"
    "            skipped.append([k, type(v).__name__, 'too big for the snapshot (%%d bytes)' %% len(b)])\n"
    "            continue\n"
    "        saved[k] = b\n"
    "        total += len(b)\n"
    "    data = base64.b64encode(pickle.dumps(saved, protocol=4)).decode()\n"
    "    print(json.dumps({'variables': sorted(saved), 'modules': modules, 'skipped': skipped, 'bytes': total,\n"
    "                      'data': data}))\n"
    "_korch_snapshot(%ld)\n"
    "del _korch_snapshot\n";

static const char *s_restore_code =
    "def _korch_restore(data, modules):\n"
    "    import pickle, base64, importlib, json\n"
    "    ns = get_ipython().user_ns\n"
    "    ok, failed = [], []\n"
    "    for k, m in modules.items():\n"
    "        try:\n"
    "            ns[k] = importlib.import_module(m)\n"
    "            ok.append(k)\n"
    "        except Exception as e:\n"
    "            failed.append([k, str(e)[:200]])\n"
    "    for k, b in pickle.loads(base64.b64decode(data)).items():\n"
    "        try:\n"
    "            ns[k] = pickle.loads(b)\n"
    "            ok.append(k)\n"
    "        except Exception as e:\n"
    "            failed.append([k, str(e)[:200]])\n"
    "    print(json.dumps({'restored': ok, 'failed': failed}))\n";

/* snapshots/exec-N.json: the snapshot after each step, to branch from
   (korch_agent_branch), the latest SNAP_KEEP within SNAP_KEEP_BYTES: the
   oldest go first. */
#define SNAP_KEEP 32
#define SNAP_KEEP_BYTES (64L << 20)

static int s_cmp_int(const void *x, const void *y)
{
    long a = *(const long *)x, b = *(const long *)y;
    return a < b ? -1 : a > b;
}

/* The snapshot written once, as snapshots/exec-N.json, and snapshot.json
   made the same file (a hard link put over it by rename: a resume reads
   either the previous one or this one); where that cannot be, snapshot.json
   is written as well. Both are only ever replaced, never written in place,
   so the files that share one stay as they were. */
static void s_keep_step(korch_agent_t *a, const char *text)
{
    char dir[PATH_MAX + 16], path[PATH_MAX + 64], tmp[PATH_MAX + 32];
    snprintf(dir, sizeof dir, "%s/snapshots", a->dir);
    snprintf(path, sizeof path, "%s/exec-%d.json", dir, a->executions);
    snprintf(tmp, sizeof tmp, "%s.link", a->snapshot_path);
    korch_err_t err = {0};
    bool kept = korch_mkdirs(dir, 0755, &err) == KORCH_OK && korch_write_file(path, text, strlen(text), &err) == KORCH_OK;
    if (!kept)
        korch_debug("cannot keep the snapshot after step %d: %s", a->step, err.msg);
    unlink(tmp);
    if (!kept || link(path, tmp) != 0 || rename(tmp, a->snapshot_path) != 0) {
        unlink(tmp);
        if (korch_write_file(a->snapshot_path, text, strlen(text), &err) != KORCH_OK)
            korch_warn("cannot keep the kernel's variables: %s", err.msg);
    }
    if (!kept)
        return;
    long ids[SNAP_KEEP * 4], sizes[SNAP_KEEP * 4];
    size_t n = 0;
    long total = 0;
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d)) && n < sizeof ids / sizeof *ids) {
        int id;
        char tail[8];
        if (sscanf(de->d_name, "exec-%d.%7s", &id, tail) == 2 && strcmp(tail, "json") == 0)
            ids[n++] = id;
    }
    if (d)
        closedir(d);
    qsort(ids, n, sizeof *ids, s_cmp_int);
    for (size_t i = 0; i < n; i++) {
        struct stat st;
        snprintf(path, sizeof path, "%s/exec-%ld.json", dir, ids[i]);
        sizes[i] = lstat(path, &st) == 0 ? (long)st.st_size : 0;
        total += sizes[i];
    }
    for (size_t i = 0; i + 1 < n && (n - i > SNAP_KEEP || total > SNAP_KEEP_BYTES); i++) {
        snprintf(path, sizeof path, "%s/exec-%ld.json", dir, ids[i]);
        unlink(path);
        total -= sizes[i];
    }
}

/* After a step: keep the kernel's variables in snapshot.json (replaced
   atomically by korch, in the session dir; the same file as that step's
   snapshots/exec-N.json). A snapshot that fails leaves the previous one, and
   the cells after it are re-run on resume. */
void agent_snapshot(korch_agent_t *a)
{
    if (!a->python || a->o.snapshot_bytes < 0 || !a->k)
        return;
    size_t len = strlen(s_snapshot_code) + 32;
    char *code = malloc(len);
    if (!code)
        return;
    snprintf(code, len, s_snapshot_code, a->o.snapshot_bytes);
    char *out = agent_run_quiet(a, code);
    free(code);
    json_t *snap = out ? json_loads(out, 0, NULL) : NULL;
    free(out);
    if (!json_is_string(json_object_get(snap, "data"))) {
        korch_debug("no snapshot after step %d (the kernel did not answer with one)", a->step);
        json_decref(snap);
        return;
    }
    char date[32];
    korch_iso8601_now(date);
    json_object_set_new(snap, "version", json_integer(1));
    json_object_set_new(snap, "executions", json_integer(a->executions));
    json_object_set_new(snap, "time", json_string(date));
    char *text = json_dumps(snap, JSON_COMPACT);
    json_decref(snap);
    if (text)
        s_keep_step(a, text);
    else
        korch_warn("cannot keep the kernel's variables: out of memory");
    free(text);
}

/* snapshot.json, when there is a usable one (new reference), else NULL. */
static json_t *s_snapshot_load(korch_agent_t *a)
{
    if (!a->python)
        return NULL;
    size_t len = 0;
    char *text = korch_read_file(a->snapshot_path, (size_t)64 << 20, &len, NULL);
    json_t *snap = text ? json_loadb(text, len, 0, NULL) : NULL;
    free(text);
    json_t *execs = json_object_get(snap, "executions");
    if (!json_is_string(json_object_get(snap, "data")) || !json_is_integer(execs) ||
        json_integer_value(execs) > a->executions || json_integer_value(execs) < 0) {
        json_decref(snap);
        return NULL;
    }
    return snap;
}

/* Restore snap (borrowed) into the kernel. Returns how many executions it
   covers (the cells after them are re-run), or -1 when it failed; *how
   says what happened, for people and the model. */
static int s_restore(korch_agent_t *a, json_t *snap, char *how, size_t how_len)
{
    how[0] = 0;
    const char *data = json_string_value(json_object_get(snap, "data"));
    json_t *execs = json_object_get(snap, "executions");
    if (!data)
        return -1;
    char *mods = json_dumps(json_object_get(snap, "modules"), JSON_COMPACT | JSON_ENSURE_ASCII);
    size_t cl = strlen(s_restore_code) + strlen(data) + (mods ? strlen(mods) : 2) + 64;
    char *code = malloc(cl);
    char *out = NULL;
    if (code && mods) {
        /* the base64 alphabet and ASCII-only JSON are both valid Python literals */
        snprintf(code, cl, "%s_korch_restore('%s', %s)\ndel _korch_restore\n", s_restore_code, data, mods);
        out = agent_run_quiet(a, code);
    }
    free(code);
    free(mods);
    json_t *res = out ? json_loads(out, 0, NULL) : NULL;
    free(out);
    int covered = -1;
    if (json_is_array(json_object_get(res, "restored"))) {
        covered = (int)json_integer_value(execs);
        size_t n = 0, i;
        json_t *v;
        n += (size_t)snprintf(how + n, how_len - n, "restored %zu name(s) from the snapshot taken after execution %d",
                              json_array_size(json_object_get(res, "restored")), covered);
        json_array_foreach(json_object_get(res, "restored"), i, v) {
            if (n + 80 > how_len)
                break;
            n += (size_t)snprintf(how + n, how_len - n, "%s%s", i ? ", " : ": ", json_string_value(v));
        }
        json_t *missing = json_object_get(snap, "skipped");
        json_t *failed = json_object_get(res, "failed");
        if (json_array_size(missing))
            n += (size_t)snprintf(how + n, how_len - n, "; not in the snapshot:");
        json_array_foreach(missing, i, v) {
            if (n + 120 > how_len)
                break;
            n += (size_t)snprintf(how + n, how_len - n, " %s (%s, %s);", json_string_value(json_array_get(v, 0)),
                                  json_string_value(json_array_get(v, 1)), json_string_value(json_array_get(v, 2)));
        }
        if (json_array_size(failed))
            n += (size_t)snprintf(how + n, how_len - n, "; NOT restored (loading failed):");
        json_array_foreach(failed, i, v) {
            if (n + 120 > how_len)
                break;
            n += (size_t)snprintf(how + n, how_len - n, " %s (%s);", json_string_value(json_array_get(v, 0)),
                                  json_string_value(json_array_get(v, 1)));
        }
    }
    json_decref(res);
    return covered;
}

/* Re-run the successful cells of replay[from, to); counts them. With
   diffs, each re-run cell's text (stream, text/plain) is compared with what
   it printed first: *same counts those that match, diffs gets the others
   (the first BRANCH_DIFFS) and the cells that failed now. */
#define BRANCH_DIFFS 10
#define BRANCH_SHOW 300

/* How many bytes of s, at most max, end on a UTF-8 character's boundary. */
static size_t s_cut(const char *s, size_t max)
{
    size_t n = strlen(s);
    if (n <= max)
        return n;
    while (max > 0 && ((unsigned char)s[max] & 0xC0) == 0x80)
        max--;
    return max;
}
static void s_replay_cmp(korch_agent_t *a, json_t *replay, int from, int to, int *rerun, int *failed, int *skipped,
                         int *same, json_t *diffs, korch_err_t *err)
{
    for (int i = from < 0 ? 0 : from; i < to && i < (int)json_array_size(replay); i++) {
        json_t *cell = json_array_get(replay, (size_t)i);
        const char *st = json_string_value(json_object_get(cell, "status"));
        if (!st || strcmp(st, "ok") != 0) {
            (*skipped)++;
            continue;
        }
        korch_exec_opts_t eo = {.timeout_ms = a->o.exec_timeout_s * 1000};
        korch_exec_t *ex =
            korch_kernel_execute_wait(a->k, json_string_value(json_object_get(cell, "code")), &eo, NULL, err);
        (*rerun)++;
        const korch_exec_result_t *r = ex ? korch_exec_result(ex) : NULL;
        bool ok = r && r->status == KORCH_EXEC_OK;
        if (!ok)
            (*failed)++;
        if (diffs) {
            const char *was = json_string_value(json_object_get(cell, "printed")) ?: "";
            char *now = r ? agent_outputs_text(r->outputs, AGENT_PRINTED_MAX) : NULL;
            if (ok && now && strcmp(now, was) == 0)
                (*same)++;
            else if (json_array_size(diffs) < BRANCH_DIFFS) {
                json_t *d = json_pack("{s:O, s:O, s:O, s:s%, s:s%, s:s}", "turn",
                                      json_object_get(cell, "turn") ?: json_null(), "step",
                                      json_object_get(cell, "step") ?: json_null(), "execution_count",
                                      json_object_get(cell, "execution_count") ?: json_null(), "printed", was,
                                      s_cut(was, BRANCH_SHOW), "now", now ? now : "",
                                      now ? s_cut(now, BRANCH_SHOW) : 0, "status",
                                      r ? korch_exec_status_name(r->status) : "not run");
                json_array_append_new(diffs, d);
            }
            free(now);
        }
        korch_exec_destroy(&ex);
    }
    korch_err_clear(err);
}

static void s_replay(korch_agent_t *a, json_t *replay, int from, int to, int *rerun, int *failed, int *skipped,
                     korch_err_t *err)
{
    int same = 0;
    s_replay_cmp(a, replay, from, to, rerun, failed, skipped, &same, NULL, err);
}

/* A resumed session's fresh kernel: restore the snapshot, then re-run the
   successful cells that ran after it (all of them without a snapshot). The
   user (a NOTICE), the model (the system prompt), the transcript and the
   notebook are told exactly how, and what may differ. */
void agent_rebuild(korch_agent_t *a, json_t *replay, korch_err_t *err)
{
    size_t how_len = 8192;
    char *how = malloc(how_len);
    char *note = malloc(how_len + 2048);
    if (!how || !note) {
        free(how);
        free(note);
        return;
    }
    /* the packages it had installed first: the snapshot's modules and the
       cells may import them */
    char pkmsg[1024];
    int pk = agent_packages_install(a, a->k, json_object_get(json_object_get(korch_notebook_meta(a->nb), "korch"),
                                                             "packages"),
                                    pkmsg, sizeof pkmsg);
    json_t *snap = s_snapshot_load(a);
    int upto = snap ? (int)json_integer_value(json_object_get(snap, "executions")) : 0;
    /* names the snapshot could not keep (a function defined in a cell, a
       DataFrame over the budget) are rebuilt by re-running the cells before
       it first; the snapshot then goes over them, so its values are exact */
    int before = 0, before_failed = 0, before_skipped = 0;
    bool gaps = snap && json_array_size(json_object_get(snap, "skipped")) > 0;
    if (gaps)
        s_replay(a, replay, 0, upto, &before, &before_failed, &before_skipped, err);
    int covered = snap ? s_restore(a, snap, how, how_len) : -1;
    json_decref(snap);
    int rerun = 0, rerun_failed = 0, skipped_failed = 0;
    s_replay(a, replay, covered, (int)json_array_size(replay), &rerun, &rerun_failed, &skipped_failed, err);
    skipped_failed += before_skipped;
    size_t n = 0, cap = how_len + 2048;
    if (covered >= 0 && before)
        n += (size_t)snprintf(note + n, cap - n,
                              "The session was resumed in a fresh kernel. The snapshot could not keep every name, so "
                              "the %d successful code cell(s) before it were re-run first to rebuild them (%d failed; "
                              "their side effects happened again: files rewritten, appends repeated); then it %s. "
                              "The snapshot's values are exactly as they were (random numbers included). ",
                              before, before_failed, how);
    else if (covered >= 0)
        n += (size_t)snprintf(note + n, cap - n,
                              "The session was resumed in a fresh kernel: %s. Those values are exactly as they were "
                              "(random numbers included); no cell before the snapshot was re-run, so side effects "
                              "did not repeat. ",
                              how);
    else
        n += (size_t)snprintf(note + n, cap - n,
                              "The session was resumed in a fresh kernel without a snapshot of its variables%s. ",
                              a->python ? "" : " (snapshots are taken for Python kernels only)");
    if (pk > 0)
        n += (size_t)snprintf(note + n, cap - n, "The %d package(s) it had installed were installed again first. ", pk);
    else if (pk < 0)
        n += (size_t)snprintf(note + n, cap - n, "NOT restored: %s. ", pkmsg);
    if (rerun)
        n += (size_t)snprintf(note + n, cap - n,
                              "%d earlier successful code cell(s) %swere re-run to rebuild the rest (%d failed): their "
                              "side effects happened again (files rewritten, appends repeated) and random or "
                              "time-dependent values differ from the first run. ",
                              rerun, covered >= 0 ? "after the snapshot " : "", rerun_failed);
    if (skipped_failed)
        n += (size_t)snprintf(note + n, cap - n,
                              "%d cell(s) that failed%s were not re-run: what they set before failing is missing. ",
                              skipped_failed, covered >= 0 ? " after the snapshot" : "");
    snprintf(note + n, cap - n, "Check that what you need exists before relying on it.");
    free(a->resume_note);
    a->resume_note = strdup(note);
    /* no host path here: through korch serve this reaches API clients */
    char *line = malloc(strlen(note) + 64);
    if (line) {
        snprintf(line, strlen(note) + 64, "resumed session: %s", note);
        agent_emit(a, KORCH_AGENT_NOTICE, line, NULL);
        free(line);
    }
    agent_record(a, json_pack("{s:s, s:s, s:i, s:i, s:i}", "type", "notice", "content", note, "restored_executions",
                          covered, "rerun", rerun + before, "rerun_failed", rerun_failed + before_failed),
             NULL);
    char *md = agent_add_md(a, "*korch: %s*", note);
    if (md) {
        agent_record(a, json_pack("{s:s, s:s, s:s}", "type", "kernel", "event", "resumed", "content", md), NULL);
        free(md);
    }
    free(how);
    free(note);
}

/* A branch's fresh kernel (korch_agent_branch made its dir): every
   successful cell up to the step re-run, each one's output compared with
   what it printed in the parent, then the snapshot kept after that step
   (when the parent had one) restored over them, so the variables it holds
   are exactly the parent's. The user (a BRANCH event), the model (the
   system prompt), the transcript (a "branch" record with its state) and
   the notebook are told how it went and what differed. */
void agent_rebuild_branch(korch_agent_t *a, json_t *replay, korch_err_t *err)
{
    int64_t t0 = korch_now_ms();
    json_t *parent = json_object_get(a->branch, "parent");
    int rerun = 0, failed = 0, skipped = 0, same = 0;
    json_t *diffs = json_array();
    s_replay_cmp(a, replay, 0, (int)json_array_size(replay), &rerun, &failed, &skipped, &same, diffs, err);
    char how[8192] = "";
    json_t *snap = s_snapshot_load(a);
    int covered = snap ? s_restore(a, snap, how, sizeof how) : -1;
    json_decref(snap);
    const char *status = failed ? "failed" : json_array_size(diffs) ? "differed" : "reproduced";
    double seconds = (double)(korch_now_ms() - t0) / 1000.0;
    json_t *state = json_pack("{s:s, s:i, s:i, s:i, s:i, s:o, s:b, s:f}", "status", status, "rerun", rerun,
                              "same", same, "failed", failed, "skipped", skipped, "differences", diffs, "restored",
                              covered >= 0, "seconds", seconds);
    char note[12288];
    size_t n = 0, cap = sizeof note;
    n += (size_t)snprintf(note + n, cap - n,
                          "This session is a branch of session %s from its step %d (turn %d, step %d), with the model "
                          "%s. Its kernel is a fresh one: the %d successful code cell(s) up to that step were re-run ",
                          json_string_value(json_object_get(parent, "session")) ?: "?",
                          (int)json_integer_value(json_object_get(parent, "index")),
                          (int)json_integer_value(json_object_get(parent, "turn")),
                          (int)json_integer_value(json_object_get(parent, "step")),
                          json_string_value(json_object_get(a->branch, "llm")) ?: "?", rerun);
    if (!failed && !json_array_size(diffs))
        n += (size_t)snprintf(note + n, cap - n, "and each printed what it printed in the parent. ");
    else
        n += (size_t)snprintf(note + n, cap - n,
                              "and %d printed the same; %zu did not (%d failed now): random or time-dependent values, "
                              "or files that changed. ",
                              same, json_array_size(diffs), failed);
    size_t i;
    json_t *d;
    json_array_foreach(diffs, i, d) {
        if (i >= 3 || n + 900 > cap)
            break;
        n += (size_t)snprintf(note + n, cap - n, "Turn %d step %d printed '%.200s' then, '%.200s' now (%s). ",
                              (int)json_integer_value(json_object_get(d, "turn")),
                              (int)json_integer_value(json_object_get(d, "step")),
                              json_string_value(json_object_get(d, "printed")),
                              json_string_value(json_object_get(d, "now")),
                              json_string_value(json_object_get(d, "status")));
    }
    if (skipped)
        n += (size_t)snprintf(note + n, cap - n,
                              "%d cell(s) that failed in the parent were not re-run: what they set before failing is "
                              "missing unless the snapshot has it. ",
                              skipped);
    if (covered >= 0)
        n += (size_t)snprintf(note + n, cap - n,
                              "Then the snapshot kept after that step was restored over them (%.*s): those values are "
                              "exactly the parent's, random numbers included. ",
                              (int)(cap - n > 1200 ? 1000 : 100), how);
    else
        n += (size_t)snprintf(note + n, cap - n,
                              "No snapshot of that step was kept%s: the values are the re-run's. ",
                              a->python ? " (the latest 32 steps' are kept, within 64 MiB)" : " (snapshots are taken for Python kernels only)");
    json_t *inputs = json_object_get(a->branch, "inputs");
    json_array_foreach(inputs, i, d) {
        if (n + 600 > cap)
            break;
        if (json_string_value(json_object_get(d, "note")))
            n += (size_t)snprintf(note + n, cap - n, "Input file %.200s: %.300s. ",
                                  json_string_value(json_object_get(d, "name")),
                                  json_string_value(json_object_get(d, "note")));
    }
    snprintf(note + n, cap - n, "The parent session is unchanged. Check that what you need exists before relying on it.");
    json_object_set_new(state, "message", json_string(note));
    free(a->resume_note);
    a->resume_note = strdup(note);
    json_t *data = json_pack("{s:O, s:O, s:O, s:O}", "session", json_object_get(a->branch, "session") ?: json_null(),
                             "parent", parent ?: json_null(), "llm", json_object_get(a->branch, "llm") ?: json_null(),
                             "state", state);
    agent_emit(a, KORCH_AGENT_BRANCH, note, data);
    char date[32];
    korch_iso8601_now(date);
    json_t *rec = json_deep_copy(data);
    json_object_set_new(rec, "type", json_string("branch"));
    json_object_set_new(rec, "time", json_string(date));
    agent_record(a, rec, NULL);
    json_decref(data);
    json_decref(state);
    char *md = agent_add_md(a, "*korch: %s*", note);
    if (md) {
        agent_record(a, json_pack("{s:s, s:s, s:s}", "type", "kernel", "event", "resumed", "content", md), NULL);
        free(md);
    }
    json_decref(a->branch);
    a->branch = NULL;
}

/* A resumed session in the kernel it ran in before (opts.resume_live): its
   variables are live, nothing is rebuilt; the user (a NOTICE), the model
   (the system prompt), the transcript and the notebook are told. */
void agent_resume_live(korch_agent_t *a)
{
    const char *note = "The session was resumed in the kernel it ran in before, which kept running while korch "
                       "restarted: every variable is as it was and nothing was re-run.";
    free(a->resume_note);
    a->resume_note = strdup(note);
    char line[256];
    snprintf(line, sizeof line, "resumed session: %s", note);
    agent_emit(a, KORCH_AGENT_NOTICE, line, NULL);
    agent_record(a, json_pack("{s:s, s:s, s:b}", "type", "notice", "content", note, "live", 1), NULL);
    char *md = agent_add_md(a, "*korch: %s*", note);
    if (md) {
        agent_record(a, json_pack("{s:s, s:s, s:s}", "type", "kernel", "event", "resumed", "content", md), NULL);
        free(md);
    }
}

/* Reload messages and the notebook from the transcript; collect every
   execution's code and status, in order (to rebuild the kernel's state). */
void agent_load_transcript(korch_agent_t *a, json_t *replay)
{
    FILE *f = fopen(a->transcript_path, "r");
    if (!f)
        return;
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int lineno = 0;
    while ((n = getline(&line, &cap, f)) > 0) {
        lineno++;
        json_t *rec = json_loadb(line, (size_t)n, 0, NULL);
        const char *type = json_string_value(json_object_get(rec, "type"));
        if (!type) {
            /* a torn last line after a crash: everything before it counts */
            korch_warn("%s:%d: not a transcript record; ignored", a->transcript_path, lineno);
            json_decref(rec);
            continue;
        }
        const char *content = json_string_value(json_object_get(rec, "content"));
        /* a branch not yet rebuilt: its record (without a state) is the last */
        json_decref(a->branch);
        a->branch = strcmp(type, "branch") == 0 && !json_object_get(rec, "state") ? json_incref(rec) : NULL;
        if (strcmp(type, "user") == 0) {
            if (!json_is_true(json_object_get(rec, "korch")))
                a->turn++;
            json_array_append_new(a->messages, json_pack("{s:s, s:s}", "role", "user", "content", content ? content : ""));
            free(agent_add_md(a, "**User:** %s", content ? content : ""));
        } else if (strcmp(type, "assistant") == 0) {
            json_t *m = json_pack("{s:s, s:s}", "role", "assistant", "content", content ? content : "");
            json_t *calls = json_object_get(rec, "tool_calls");
            if (json_array_size(calls))
                json_object_set(m, "tool_calls", calls);
            json_array_append_new(a->messages, m);
            if (content && *content)
                korch_notebook_add_markdown(a->nb, content);
        } else if (strcmp(type, "tool") == 0) {
            json_array_append_new(a->messages,
                                  json_pack("{s:s, s:s, s:s, s:s, s:b}", "role", "tool", "tool_call_id",
                                            json_string_value(json_object_get(rec, "tool_call_id")), "name", a->tool_name,
                                            "content", content ? content : "", "is_error",
                                            json_is_true(json_object_get(rec, "is_error"))));
        } else if (strcmp(type, "execution") == 0) {
            const char *code = json_string_value(json_object_get(rec, "code"));
            json_t *count = json_object_get(rec, "execution_count");
            json_t *note = json_object_get(rec, "note");
            const char *st = json_string_value(json_object_get(rec, "status"));
            int turn = (int)json_integer_value(json_object_get(rec, "turn")), step = (int)json_integer_value(json_object_get(rec, "step"));
            korch_notebook_add_code_meta(a->nb, code, json_is_integer(count) ? (int)json_integer_value(count) : -1,
                                         json_object_get(rec, "outputs"),
                                         korch_notebook_cell_meta(st, json_string_value(note), turn, step));
            json_t *where = json_pack("{s:O}", "execution_count", count ? count : json_null());
            if (turn > 0)
                json_object_set_new(where, "turn", json_integer(turn));
            if (step > 0)
                json_object_set_new(where, "step", json_integer(step));
            korch_receipts_add_outputs(a->receipts, json_object_get(rec, "outputs"), where);
            if (json_is_array(json_object_get(rec, "packages")))
                agent_packages_set(a, json_object_get(rec, "packages")); /* the latest holds */
            a->executions++;
            char *printed = agent_outputs_text(json_object_get(rec, "outputs"), AGENT_PRINTED_MAX);
            json_array_append_new(replay, json_pack("{s:s, s:s, s:i, s:i, s:O, s:s}", "code", code ? code : "",
                                                    "status", st ? st : "", "turn", turn, "step", step,
                                                    "execution_count", count ? count : json_null(), "printed",
                                                    printed ? printed : ""));
            free(printed);
        } else if (strcmp(type, "kernel") == 0) {
            if (content)
                korch_notebook_add_markdown(a->nb, content);
        } else if (strcmp(type, "usage") == 0) {
            /* {tokens: {input, output}} (null: unreported); before: input_tokens, output_tokens (-1) */
            json_t *t = json_object_get(rec, "tokens");
            json_t *in = json_is_object(t) ? json_object_get(t, "input") : json_object_get(rec, "input_tokens");
            json_t *out = json_is_object(t) ? json_object_get(t, "output") : json_object_get(rec, "output_tokens");
            int64_t ni = json_is_integer(in) ? json_integer_value(in) : -1;
            int64_t no = json_is_integer(out) ? json_integer_value(out) : -1;
            korch_usage_add(&a->session_usage, ni, no);
            a->tokens += (ni > 0 ? ni : 0) + (no > 0 ? no : 0);
            /* priced again with today's table: the model the call was made with */
            korch_usage_t call = {0};
            korch_usage_add(&call, ni, no);
            const char *llm = json_string_value(json_object_get(rec, "llm"));
            korch_cost_add(&a->session_cost, korch_prices_cost(a->o.prices, llm ? llm : korch_llm_name(a->o.llm), &call));
        }
        json_decref(rec);
    }
    free(line);
    fclose(f);
    /* A turn cut short (crash mid-step) may leave tool calls unanswered;
       every API wants each one answered. */
    json_t *last = json_array_get(a->messages, json_array_size(a->messages) - 1);
    json_t *calls = json_object_get(last, "tool_calls");
    size_t i;
    json_t *c;
    json_array_foreach(calls, i, c) {
        json_array_append_new(a->messages,
                              json_pack("{s:s, s:s, s:s, s:s, s:b}", "role", "tool", "tool_call_id",
                                        json_string_value(json_object_get(c, "id")), "name", a->tool_name, "content",
                                        "[not run: the session stopped before this code ran]", "is_error", 1));
    }
}
