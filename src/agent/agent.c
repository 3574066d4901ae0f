/*  korch_agent: the model writes code, the kernel runs it, the model reads
 *  what happened, until it answers. See include/korch/agent.h. */
#include "agent_int.h"
#include "korch/path.h"
#include "korch/agent.h"
#include "korch/buf.h"
#include "korch/feedback.h"
#include "korch/fsutil.h"
#include "korch/jsonfield.h"
#include "korch/kernel.h"
#include "korch/kernelspec.h"
#include "korch/log.h"
#include "korch/media.h"
#include "korch/notebook.h"
#include "korch/session.h"
#include "korch/workdir.h"
#include "korch/uuid.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* -------------------------------------------------------- new / resume */

static korch_rc_t s_mkdir(const char *path, korch_err_t *err) { return korch_mkdirs(path, 0755, err); }

static int s_count_figures(const char *dir)
{
    int maxn = 0;
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        int n;
        if (sscanf(de->d_name, "fig-%d.", &n) == 1 && n > maxn)
            maxn = n;
    }
    if (d)
        closedir(d);
    return maxn;
}

korch_agent_t *korch_agent_new(const korch_agent_opts_t *opts, korch_err_t *err)
{
    if (!opts || !opts->llm || !opts->loop || !opts->session_dir) {
        korch_err_set(err, KORCH_E_INVALID, "an agent needs an llm, a loop and a session dir");
        return NULL;
    }
    korch_agent_t *a = calloc(1, sizeof *a);
    json_t *replay = json_array();
    if (!a || !replay) {
        korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        free(a);
        json_decref(replay);
        return NULL;
    }
    a->kernel_cpu_ns = a->kernel_mem_peak = -1; /* unknown until a step's cgroup says */
    a->turn_cpu_ns = a->turn_mem_peak = -1;
    a->o = *opts;
    /* a session dir this call makes goes again when the agent cannot start */
    bool made_dir = access(opts->session_dir, F_OK) != 0;
    if (a->o.max_steps <= 0)
        a->o.max_steps = 20;
    if (!a->o.max_result_chars)
        a->o.max_result_chars = 4000;
    if (a->o.exec_timeout_s <= 0)
        a->o.exec_timeout_s = 300;
    if (!a->o.context_chars)
        a->o.context_chars = 120000;
    a->kernelspec = strdup(opts->kernelspec ? opts->kernelspec : "python3");
    a->existing = opts->existing ? strdup(opts->existing) : NULL;
    a->o.kernelspec = NULL;
    a->o.existing = NULL;
    a->o.session_dir = NULL;
    a->messages = json_array();
    a->file_info = json_array();
    a->nb = korch_notebook_new(a->kernelspec, a->kernelspec, "python");
    a->receipts = korch_receipts_new();
    a->system_append = opts->system_append ? strdup(opts->system_append) : NULL;
    a->system_replace = opts->system_replace ? strdup(opts->system_replace) : NULL;
    a->o.system_append = a->o.system_replace = a->o.workdir = NULL;
    if (!a->o.snapshot_bytes)
        a->o.snapshot_bytes = 4L << 20;
    snprintf(a->tool_name, sizeof a->tool_name, "run_python");
    if (s_mkdir(opts->session_dir, err) != KORCH_OK)
        goto fail;
    if (!realpath(opts->session_dir, a->dir)) {
        korch_err_set(err, KORCH_E_IO, "cannot use session dir '%s': %s", opts->session_dir, strerror(errno));
        goto fail;
    }
    if (korch_path_join(a->files_dir, sizeof a->files_dir, a->dir, "files", err) ||
        korch_path_join(a->figures_dir, sizeof a->figures_dir, a->dir, "figures", err) ||
        korch_path_join(a->transcript_path, sizeof a->transcript_path, a->dir, "transcript.jsonl", err) ||
        korch_path_join(a->notebook_path, sizeof a->notebook_path, a->dir, "notebook.ipynb", err) ||
        korch_path_join(a->snapshot_path, sizeof a->snapshot_path, a->dir, "snapshot.json", err))
        goto fail;
    if (s_mkdir(a->files_dir, err) || s_mkdir(a->figures_dir, err))
        goto fail;
    korch_notebook_keep_on_disk(a->nb, a->notebook_path); /* its cells out of memory once written */
    a->figures = s_count_figures(a->figures_dir);
    agent_budget_load(a);
    const char *wd = opts->workdir ? opts->workdir : a->existing ? NULL : a->files_dir;
    if (wd && *wd)
        a->wd = korch_workdir_new(wd, NULL);
    a->wd_in_kernel = !a->wd && opts->workdir_in_kernel;
    bool resuming = access(a->transcript_path, F_OK) == 0;
    /* the kernel first: its language names the tool the transcript's messages use */
    if (agent_start_kernel(a, err) != KORCH_OK)
        goto fail;
    if (a->wd_in_kernel && a->python) { /* the kernel's own view of its work dir */
        a->kernel_cwd = agent_run_quiet(a, "import os as _korch_os\nprint(_korch_os.getcwd())\ndel _korch_os\n");
        if (a->kernel_cwd)
            a->kernel_cwd[strcspn(a->kernel_cwd, "\n")] = 0;
        if (a->kernel_cwd && a->kernel_cwd[0] == '/')
            a->wd = korch_workdir_new(NULL, NULL);
        json_decref(agent_wd_scan(a));
        agent_wd_save(a);
    }
    a->wd_in_kernel = a->wd_in_kernel && a->wd;
    if (resuming) {
        agent_load_transcript(a, replay);
        agent_prune_messages(a);
    }
    a->transcript = fopen(a->transcript_path, "a");
    if (!a->transcript) {
        korch_err_set(err, KORCH_E_IO, "cannot open '%s': %s", a->transcript_path, strerror(errno));
        goto fail;
    }
    if (!resuming && agent_record(a,
                              json_pack("{s:s, s:i, s:s, s:s}", "type", "session", "version", 1, "llm",
                                        korch_llm_name(a->o.llm), "kernelspec", a->kernelspec),
                              err) != KORCH_OK)
        goto fail;
    if (korch_llm_notice(a->o.llm))
        agent_emit(a, KORCH_AGENT_NOTICE, korch_llm_notice(a->o.llm), NULL);
    if (resuming && a->existing && a->o.resume_live)
        agent_resume_live(a);
    else if (a->branch)
        agent_rebuild_branch(a, replay, err);
    else if (json_array_size(replay))
        agent_rebuild(a, replay, err);
    agent_describe_files(a);
    json_decref(replay);
    return a;
fail:
    json_decref(replay);
    if (a && a->transcript) { /* nothing of it is kept: no notebook is written */
        fclose(a->transcript);
        a->transcript = NULL;
    }
    char made[PATH_MAX];
    snprintf(made, sizeof made, "%s", a && a->dir[0] ? a->dir : opts->session_dir);
    korch_agent_destroy(&a);
    if (made_dir)
        korch_fs_rm_tree(made);
    return NULL;
}

void korch_agent_destroy(korch_agent_t **pa)
{
    if (!pa || !*pa)
        return;
    korch_agent_t *a = *pa;
    if (a->nb && a->transcript)
        agent_write_notebook(a);
    korch_kernel_destroy(&a->k);
    if (a->transcript)
        fclose(a->transcript);
    korch_notebook_destroy(&a->nb);
    korch_receipts_destroy(&a->receipts);
    json_decref(a->last_receipts);
    json_decref(a->messages);
    json_decref(a->tools);
    json_decref(a->file_info);
    json_decref(a->language_info);
    korch_workdir_destroy(&a->wd);
    free(a->kernel_cwd);
    free(a->system_append);
    free(a->system_replace);
    free(a->resume_note);
    json_decref(a->branch);
    free(a->kernelspec);
    free(a->existing);
    free(a);
    *pa = NULL;
}

/* Is files/name there? 1 with the same bytes, 0 absent, -1 another file
   (or something that is not a plain file: never overwritten). Read without
   following symlinks: files/ is the kernel's. */
static int s_same_file(korch_agent_t *a, const char *name, const char *data, size_t len)
{
    size_t have = 0;
    korch_err_t e = {0};
    char *old = korch_workdir_read(a->files_dir, name, len, &have, &e);
    if (!old)
        return e.rc == KORCH_E_NOTFOUND ? 0 : -1;
    int same = have == len && memcmp(old, data, len) == 0 ? 1 : -1;
    free(old);
    return same;
}

korch_rc_t korch_agent_add_file(korch_agent_t *a, const char *path, char **stored, korch_err_t *err)
{
    if (stored)
        *stored = NULL;
    size_t len = 0;
    char *data = korch_read_file(path, (size_t)1 << 31, &len, err);
    if (!data)
        return err ? err->rc : KORCH_E_IO;
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    if (!*base || base[0] == '.') {
        free(data);
        return korch_err_set(err, KORCH_E_INVALID, "'%s': give a file with a plain name (not hidden)", path);
    }
    /* another file by that name is kept: this one gets name-2.ext, name-3.ext, ... */
    char name[NAME_MAX + 1];
    snprintf(name, sizeof name, "%s", base);
    int same = s_same_file(a, name, data, len);
    for (int k = 2; same < 0 && k < 1000; k++) {
        const char *dot = strrchr(base, '.');
        int stem = dot && dot != base ? (int)(dot - base) : (int)strlen(base);
        snprintf(name, sizeof name, "%.*s-%d%s", stem > 200 ? 200 : stem, base, k, dot && dot != base ? dot : "");
        same = s_same_file(a, name, data, len);
    }
    if (same < 0) {
        free(data);
        return korch_err_set(err, KORCH_E_INVALID, "too many files named like '%s' in the session", base);
    }
    if (same == 1) { /* already there, byte for byte */
        free(data);
        if (stored)
            *stored = strdup(name);
        return KORCH_OK;
    }
    if (strcmp(name, base) != 0) {
        char note[NAME_MAX * 3];
        snprintf(note, sizeof note,
                 "a different file named '%s' is already in the session: '%s' is kept as '%s' (both are there)", base,
                 path, name);
        agent_emit(a, KORCH_AGENT_NOTICE, note, NULL);
    }
    base = name;
    /* files/ is the kernel's (maybe its container uid's): written without
       following a symlink it planted, and given to its owner */
    struct stat st;
    bool give = stat(a->files_dir, &st) == 0 && st.st_uid != geteuid();
    korch_rc_t rc = korch_workdir_write(a->files_dir, name, data, len, give ? (long)st.st_uid : -1,
                                        give ? (long)st.st_gid : -1, err);
    free(data);
    if (rc == KORCH_OK) {
        agent_record(a, json_pack("{s:s, s:s, s:I}", "type", "file", "name", base, "bytes", (json_int_t)len), NULL);
        if (a->k)
            agent_describe_files(a);
        if (stored)
            *stored = strdup(base);
    }
    return rc;
}

json_t *korch_agent_files(korch_agent_t *a)
{
    if (!a->wd)
        return json_array();
    json_decref(agent_wd_scan(a));
    return korch_workdir_list(a->wd);
}

korch_rc_t korch_agent_remove_file(korch_agent_t *a, const char *rel, korch_err_t *err)
{
    korch_err_t e = {0};
    korch_rc_t rc = agent_wd_remove(a, rel, &e);
    if (rc != KORCH_OK && rc != KORCH_E_NOTFOUND)
        return korch_err_set(err, rc, "%s", e.msg);
    bool had = rc == KORCH_OK;
    /* korch's copy for a resumed container (a local kernel's work dir is files/ itself: gone above) */
    if (a->wd_in_kernel || !a->wd || strcmp(korch_workdir_root(a->wd), a->files_dir) != 0) {
        korch_err_t ce = {0};
        korch_rc_t crc = korch_workdir_remove(a->files_dir, rel, &ce);
        if (crc != KORCH_OK && crc != KORCH_E_NOTFOUND)
            return korch_err_set(err, crc, "%s", ce.msg);
        had = had || crc == KORCH_OK;
    }
    if (!had)
        return korch_err_set(err, KORCH_E_NOTFOUND, "no file '%s' in the work dir", rel);
    agent_record(a, json_pack("{s:s, s:s, s:b}", "type", "file", "name", rel, "removed", 1), NULL);
    json_decref(agent_wd_scan(a));
    agent_wd_save(a);
    a->files_dirty = true;
    return KORCH_OK;
}

const char *korch_agent_language(const korch_agent_t *a) { return a->lang; }

const char *korch_agent_session_dir(const korch_agent_t *a) { return a->dir; }
int64_t korch_agent_tokens(const korch_agent_t *a) { return a->tokens; }
const char *korch_agent_llm_name(const korch_agent_t *a) { return korch_llm_name(a->o.llm); }

void korch_agent_usage(const korch_agent_t *a, korch_agent_usage_t *turn, korch_agent_usage_t *session)
{
    if (turn)
        *turn = a->turn_usage;
    if (session)
        *session = a->session_usage;
}

void korch_agent_cost(const korch_agent_t *a, korch_cost_t *turn, korch_cost_t *session)
{
    if (turn)
        *turn = a->turn_cost;
    if (session)
        *session = a->session_cost;
}

korch_rc_t korch_agent_save_clean_notebook(korch_agent_t *a, const char *path, korch_err_t *err)
{
    json_t *doc = korch_notebook_doc(a->nb);
    korch_notebook_t *nb = korch_notebook_from_json(doc ? korch_notebook_clean(doc) : NULL);
    json_decref(doc);
    if (!nb)
        return korch_err_set(err, KORCH_E_NOMEM, "out of memory");
    korch_rc_t rc = korch_notebook_write(nb, path, err);
    korch_notebook_destroy(&nb);
    return rc;
}

korch_rc_t korch_agent_save_notebook(korch_agent_t *a, const char *path, korch_err_t *err)
{
    return korch_notebook_write(a->nb, path, err);
}

void korch_agent_files_changed(korch_agent_t *a) { a->files_dirty = true; }

void korch_agent_kernel_gone(korch_agent_t *a, bool restarted, int64_t died_ms, const char *why)
{
    if (a->existing && a->k)
        korch_kernel_gone(a->k, restarted, died_ms, why);
}

void korch_agent_interrupt(korch_agent_t *a)
{
    a->interrupted = 1;
    if (a->running && a->k)
        korch_kernel_interrupt(a->k, NULL);
}

/* ---------------------------------------------------------- the turn */

/* "Numbers: 8,451.00 (step 3) · 42 not computed by the kernel": the
   receipts as a line of markdown under the answer. New string. */
static char *s_receipts_md(json_t *receipts)
{
    korch_buf_t b = KORCH_BUF_INIT(64 * 1024);
    korch_buf_adds(&b, "\n\n---\n*korch receipts:* ", NULL, NULL);
    size_t i;
    json_t *r;
    json_array_foreach(receipts, i, r) {
        const char *text = json_string_value(json_object_get(r, "text"));
        const char *form = json_string_value(json_object_get(r, "form"));
        json_t *step = json_object_get(r, "step"), *turn = json_object_get(r, "turn");
        if (i)
            korch_buf_adds(&b, " · ", NULL, NULL);
        if (!json_is_true(json_object_get(r, "found")))
            korch_buf_addf(&b, NULL, NULL, "**%s: not computed by the kernel**", text);
        else if (form && strcmp(form, "given") == 0)
            korch_buf_addf(&b, NULL, NULL, "%s (from the question)", text);
        else
            korch_buf_addf(&b, NULL, NULL, "%s (%s of `%s`, turn %d step %d)", text, form,
                           json_string_value(json_object_get(r, "printed")), (int)json_integer_value(turn),
                           (int)json_integer_value(step));
    }
    return korch_buf_release(&b, NULL);
}

/* The answer: its numbers matched against what the kernel printed,
   recorded (a record that cannot be written is an error event, not a failed
   turn), put in the notebook with its receipts, told and handed over. */
static void s_finish(korch_agent_t *a, korch_llm_reply_t *reply, char **answer)
{
    const char *text = reply->text ? reply->text : "";
    json_t *receipts = korch_receipts_match(a->receipts, text);
    size_t numbers = 0, unbacked = 0;
    korch_receipts_count(receipts, &numbers, &unbacked);
    agent_record(a, json_pack("{s:s, s:s, s:O}", "type", "final", "content", text, "receipts", receipts), NULL);
    char *md = numbers ? s_receipts_md(receipts) : NULL;
    size_t tl = strlen(text), ml = md ? strlen(md) : 0;
    char *cell = malloc(tl + ml + 1);
    if (cell) {
        memcpy(cell, text, tl);
        memcpy(cell + tl, md ? md : "", ml + 1);
        if (*cell)
            korch_notebook_add_markdown(a->nb, cell);
        json_t *meta = *cell ? korch_notebook_last_meta(a->nb) : NULL;
        if (meta)
            json_object_set_new(meta, "korch", json_pack("{s:s, s:i, s:O}", "answer", "final", "turn", a->turn,
                                                         "receipts", receipts));
    }
    free(cell);
    free(md);
    json_decref(a->last_receipts);
    a->last_receipts = json_incref(receipts);
    json_t *data = json_pack("{s:O}", "receipts", receipts);
    agent_emit(a, KORCH_AGENT_FINAL, text, data);
    json_decref(data);
    json_decref(receipts);
    if (answer)
        *answer = strdup(text);
}

/* A budget that cannot be applied is said once per turn. */
static void s_budget_unknown(korch_agent_t *a, const char *what)
{
    if (a->budget_told)
        return;
    a->budget_told = true;
    char note[256];
    snprintf(note, sizeof note, "the %s budget cannot be applied: %s", what,
             strcmp(what, "token") == 0 ? "the model's API does not report its token usage"
                                        : "the cost is unknown (no price for this model, or tokens unreported)");
    agent_emit(a, KORCH_AGENT_NOTICE, note, NULL);
}

/* Which budget, if any, ends the turn now: a->stopped_by and the reason. */
static const char *s_budget_spent(korch_agent_t *a, int64_t t0)
{
    if (a->o.max_tokens > 0) {
        int64_t used = korch_usage_total(&a->turn_usage);
        if (used < 0 && a->turn_usage.input + a->turn_usage.output < a->o.max_tokens)
            s_budget_unknown(a, "token");
        else if (used < 0 || used >= a->o.max_tokens) { /* what was reported is over already */
            snprintf(a->stopped_by, sizeof a->stopped_by, "tokens");
            return "the token budget for this question is used up";
        }
    }
    if (a->o.max_cost > 0) {
        if (!korch_prices_currency(a->o.prices) || a->turn_cost.unknown)
            s_budget_unknown(a, "cost");
        else if (a->turn_cost.amount >= a->o.max_cost) {
            snprintf(a->stopped_by, sizeof a->stopped_by, "cost");
            return "the cost budget for this question is used up";
        }
    }
    if (a->o.max_seconds > 0 && korch_now_ms() - t0 >= (int64_t)a->o.max_seconds * 1000) {
        snprintf(a->stopped_by, sizeof a->stopped_by, "seconds");
        return "the time budget for this question is used up";
    }
    return NULL;
}

static korch_rc_t s_turn(korch_agent_t *a, const char *question, char **answer, korch_err_t *err);

korch_rc_t korch_agent_ask(korch_agent_t *a, const char *question, char **answer, korch_err_t *err)
{
    a->turn++;
    a->turn_t0 = korch_now_ms();
    a->turn_usage = (korch_usage_t){0};
    a->turn_cost = (korch_cost_t){0};
    a->turn_cpu_ns = a->turn_mem_peak = -1;
    a->stopped_by[0] = 0;
    a->budget_told = a->fence_told = false;
    a->step = 0;
    korch_receipts_given_clear(a->receipts);
    korch_receipts_given(a->receipts, question);
    korch_rc_t rc = s_turn(a, question, answer, err);
    a->turn_steps = a->step;
    a->turn_ms = korch_now_ms() - a->turn_t0;
    return rc;
}

static korch_rc_t s_turn(korch_agent_t *a, const char *question, char **answer, korch_err_t *err)
{
    if (answer)
        *answer = NULL;
    a->interrupted = 0;
    if (a->files_dirty) {
        a->files_dirty = false;
        agent_describe_files(a);
    }
    korch_rc_t rc = KORCH_OK;
    int64_t t0 = a->turn_t0;
    json_array_append_new(a->messages, json_pack("{s:s, s:s}", "role", "user", "content", question));
    rc = agent_record(a, json_pack("{s:s, s:s}", "type", "user", "content", question), err);
    if (rc)
        return rc;
    free(agent_add_md(a, "**User:** %s", question)); /* whole, however long */
    agent_write_notebook(a);
    const char *stop_reason = NULL;
    char spent[300];
    for (a->step = 1; a->step <= a->o.max_steps; a->step++) {
        /* spent (in an earlier step, turn or run of this session): no more code */
        if (agent_budget_spent(a)) {
            stop_reason = agent_budget_note(a, spent, sizeof spent);
            break;
        }
        agent_emit(a, KORCH_AGENT_STEP, NULL, NULL);
        korch_llm_reply_t reply = {0};
        rc = agent_call_model(a, true, &reply, err);
        if (rc) {
            agent_record(a, json_pack("{s:s, s:s}", "type", "error", "message", err ? err->msg : korch_strerror(rc)), NULL);
            agent_write_notebook(a);
            return rc;
        }
        json_t *calls = korch_llm_fence_mode(a->o.llm) ? agent_fence_calls(a, reply.text ? reply.text : "", true)
                                                       : json_incref(reply.tool_calls);
        if (!json_array_size(calls) && reply.text && !korch_llm_fence_mode(a->o.llm)) {
            json_t *printed = agent_text_tool_call(a, reply.text);
            /* code interpreter behaviour: fenced code in the kernel's language is run */
            if (!printed && !a->o.no_fence_run)
                printed = agent_fence_calls(a, reply.text, false);
            if (json_array_size(printed)) {
                json_decref(calls);
                calls = printed;
            } else
                json_decref(printed);
        }
        json_t *am = json_pack("{s:s, s:s}", "role", "assistant", "content", reply.text ? reply.text : "");
        if (json_array_size(calls))
            json_object_set(am, "tool_calls", calls);
        json_array_append_new(a->messages, am);
        agent_record(a,
                 json_pack("{s:s, s:s, s:O, s:s}", "type", "assistant", "content", reply.text ? reply.text : "",
                           "tool_calls", calls ? calls : json_null(), "finish", reply.finish),
                 NULL);
        if (reply.text && *reply.text && json_array_size(calls))
            korch_notebook_add_markdown(a->nb, reply.text);
        char other[32];
        if (!json_array_size(calls) && !a->fence_told && !a->o.no_fence_run && reply.text &&
            agent_foreign_fence(a, reply.text, other, sizeof other)) {
            /* code in another language is not an answer, and is not run: ask once for the kernel's */
            a->fence_told = true;
            char note[512], told[256];
            snprintf(note, sizeof note,
                     "[korch: your ```%s block was not run: this kernel runs %s only. To compute something, call %s "
                     "with %s code; otherwise answer the user in plain text.]",
                     other, a->lang, a->tool_name, a->lang);
            snprintf(told, sizeof told, "the model wrote %s code, which this %s kernel cannot run: asked for %s", other,
                     a->lang, a->lang);
            agent_emit(a, KORCH_AGENT_NOTICE, told, NULL);
            json_array_append_new(a->messages, json_pack("{s:s, s:s}", "role", "user", "content", note));
            agent_record(a, json_pack("{s:s, s:s, s:b}", "type", "user", "content", note, "korch", 1), NULL);
            json_decref(calls);
            korch_llm_reply_clear(&reply);
            continue;
        }
        if (!json_array_size(calls)) {
            json_decref(calls);
            s_finish(a, &reply, answer);
            korch_llm_reply_clear(&reply);
            agent_write_notebook(a);
            return KORCH_OK;
        }
        korch_llm_reply_clear(&reply);
        for (size_t i = 0; i < json_array_size(calls); i++) {
            if (!agent_run_call(a, json_array_get(calls, i), err)) {
                agent_answer_unrun(a, calls, i + 1);
                json_decref(calls);
                agent_write_notebook(a);
                agent_record(a, json_pack("{s:s, s:s}", "type", "notice", "content", "interrupted by the user"), NULL);
                return korch_err_set(err, KORCH_E_INTERRUPTED, "interrupted; the session and its kernel are kept");
            }
        }
        json_decref(calls);
        agent_write_notebook(a);
        if ((stop_reason = s_budget_spent(a, t0)))
            break;
    }
    if (!stop_reason) {
        stop_reason = "the step limit is reached";
        snprintf(a->stopped_by, sizeof a->stopped_by, "steps");
    }
    /* One last request, without tools, for the answer: the step after the
       last one run (the loop leaves step one past the limit when it ran out). */
    int last = a->step > a->o.max_steps ? a->o.max_steps : a->step;
    char note[512], told[512];
    snprintf(note, sizeof note, "[korch: %s. Answer the question now with what you have found; do not run more code.]",
             stop_reason);
    snprintf(told, sizeof told, "%s after %d step%s: asking the model for its answer without more code", stop_reason,
             last, last == 1 ? "" : "s");
    agent_emit(a, KORCH_AGENT_NOTICE, told, NULL);
    json_array_append_new(a->messages, json_pack("{s:s, s:s}", "role", "user", "content", note));
    agent_record(a, json_pack("{s:s, s:s, s:b}", "type", "user", "content", note, "korch", 1), NULL);
    korch_llm_reply_t reply = {0};
    a->step = last + 1;
    agent_emit(a, KORCH_AGENT_STEP, NULL, NULL);
    rc = agent_call_model(a, false, &reply, err);
    if (rc == KORCH_OK) {
        json_array_append_new(a->messages,
                              json_pack("{s:s, s:s}", "role", "assistant", "content", reply.text ? reply.text : ""));
        agent_record(a, json_pack("{s:s, s:s, s:s}", "type", "assistant", "content", reply.text ? reply.text : "", "finish",
                              reply.finish),
                 NULL);
        s_finish(a, &reply, answer);
    } else
        agent_record(a, json_pack("{s:s, s:s}", "type", "error", "message", err ? err->msg : korch_strerror(rc)), NULL);
    korch_llm_reply_clear(&reply);
    agent_write_notebook(a);
    return rc;
}
