/*  korch_agent: the model writes code, the kernel runs it, the model reads
 *  what happened, until it answers. See include/korch/agent.h. */
#include "korch/agent.h"
#include "korch/fsutil.h"
#include "korch/feedback.h"
#include "korch/kernel.h"
#include "korch/log.h"
#include "korch/media.h"
#include "korch/notebook.h"
#include "korch/session.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define TOOL_NAME "run_python"

struct korch_agent {
    korch_agent_opts_t o;
    char *kernelspec;
    char *existing;             /* attached to someone else's kernel (NULL: ours) */
    bool files_dirty;           /* describe the files again before the next turn */
    char dir[PATH_MAX], files_dir[PATH_MAX + 8], figures_dir[PATH_MAX + 8];
    char transcript_path[PATH_MAX + 24], notebook_path[PATH_MAX + 24];
    FILE *transcript;
    json_t *messages;           /* neutral, without the system message */
    json_t *tools;
    json_t *file_info;          /* what the kernel said about the user's files */
    korch_notebook_t *nb;
    korch_kernel_t *k;
    korch_exec_t *running;      /* the execution in flight, for interrupts */
    int figures;
    int fence_ids;
    int64_t tokens;
    int step;
    volatile sig_atomic_t interrupted;
};

/* ------------------------------------------------------------- events */

static void s_emit(korch_agent_t *a, korch_agent_event_type_t type, const char *text, json_t *data)
{
    if (!a->o.on_event)
        return;
    korch_agent_event_t ev = {type, a->step, text, text ? strlen(text) : 0, data, -1, false};
    a->o.on_event(&ev, a->o.arg);
}

/* --------------------------------------------------------- transcript */

/* Append one record (stolen) and flush it to disk: a crash loses nothing
   said before it. */
static korch_rc_t s_record(korch_agent_t *a, json_t *rec, korch_err_t *err)
{
    char date[32];
    korch_iso8601_now(date);
    json_object_set_new(rec, "time", json_string(date));
    char *line = json_dumps(rec, JSON_COMPACT | JSON_ENSURE_ASCII);
    json_decref(rec);
    korch_rc_t rc = KORCH_OK;
    if (!line || fprintf(a->transcript, "%s\n", line) < 0 || fflush(a->transcript) != 0 ||
        fdatasync(fileno(a->transcript)) != 0) {
        /* Most callers go on (the turn is worth finishing); the user must
           still hear that the transcript is missing a record. */
        korch_err_t e = {0};
        rc = korch_err_set(&e, KORCH_E_IO, "cannot append to '%s': %s (disk full?)", a->transcript_path,
                           strerror(errno));
        s_emit(a, KORCH_AGENT_ERROR, e.msg, NULL);
        korch_err_set(err, rc, "%s", e.msg);
    }
    free(line);
    return rc;
}

static void s_write_notebook(korch_agent_t *a)
{
    korch_err_t err = {0};
    if (korch_notebook_write(a->nb, a->notebook_path, &err) != KORCH_OK)
        s_emit(a, KORCH_AGENT_ERROR, err.msg, NULL);
}

/* ------------------------------------------------------------ prompts */

static json_t *s_tools(void)
{
    return json_pack(
        "[{s:s, s:s, s:{s:s, s:{s:{s:s, s:s}}, s:[s]}}]", "name", TOOL_NAME, "description",
        "Run Python code in the user's persistent Jupyter kernel. Variables, imports and files persist between "
        "calls. Returns stdout/stderr, the value of the last expression, errors with tracebacks, and charts.",
        "parameters", "type", "object", "properties", "code", "type", "string", "description",
        "The Python code to run", "required", "code");
}

static char *s_system_prompt(korch_agent_t *a)
{
    size_t cap = 16384;
    char *p = malloc(cap);
    if (!p)
        return NULL;
    size_t n = 0;
    bool fence = korch_llm_fence_mode(a->o.llm);
    bool vision = korch_llm_vision(a->o.llm);
    n += (size_t)snprintf(p + n, cap - n,
                          "You are a careful data analyst working in a persistent Jupyter kernel (Python 3 with "
                          "pandas, numpy and matplotlib). ");
    if (fence)
        n += (size_t)snprintf(p + n, cap - n,
                              "To run code, reply with exactly one ```python fenced code block; the next message "
                              "will show you its output. ");
    else
        n += (size_t)snprintf(p + n, cap - n, "Run code with the %s tool. ", TOOL_NAME);
    n += (size_t)snprintf(p + n, cap - n,
                          "The kernel keeps its state: variables, imports and loaded data persist between code runs "
                          "and across the user's questions.\n");
    if (json_array_size(a->file_info)) {
        n += (size_t)snprintf(p + n, cap - n,
                              "The user's files are in the kernel's working directory (the current directory), under "
                              "these names:\n");
        size_t i;
        json_t *f;
        json_array_foreach(a->file_info, i, f) {
            if (n + 600 > cap)
                break;
            n += (size_t)snprintf(p + n, cap - n, "- %s (%lld bytes)", json_string_value(json_object_get(f, "name")),
                                  (long long)json_integer_value(json_object_get(f, "bytes")));
            json_t *rows = json_object_get(f, "rows");
            if (json_is_integer(rows))
                n += (size_t)snprintf(p + n, cap - n, ", %lld rows", (long long)json_integer_value(rows));
            json_t *cols = json_object_get(f, "columns");
            if (json_object_size(cols)) {
                n += (size_t)snprintf(p + n, cap - n, "; columns:");
                const char *c;
                json_t *t;
                json_object_foreach(cols, c, t) {
                    if (n + 200 > cap)
                        break;
                    n += (size_t)snprintf(p + n, cap - n, " %s (%s),", c, json_string_value(t));
                }
                p[n - 1] = ' ';
            }
            n += (size_t)snprintf(p + n, cap - n, "\n");
        }
    }
    n += (size_t)snprintf(p + n, cap - n,
                          "Charts made with matplotlib are captured automatically when you call plt.show() (no "
                          "savefig needed); %s "
                          "Print concise results: long outputs are cut to about %zu characters. Work in small steps "
                          "and check intermediate results; if code fails, read the error and fix it. "
                          "When you have the answer, reply to the user in plain text without %s.",
                          vision ? "you will see each chart as an image." : "you will be told each chart's file name.",
                          a->o.max_result_chars, fence ? "a code block" : "calling the tool");
    return p;
}

/* ---------------------------------------------------- kernel & files */

static void s_on_output(korch_exec_t *ex, korch_output_event_t ev, json_t *output, size_t index, void *arg)
{
    korch_agent_t *a = arg;
    if (ev == KORCH_OUTPUT_NEW || ev == KORCH_OUTPUT_STREAM || ev == KORCH_OUTPUT_UPDATE)
        if (a->o.on_event) {
            korch_agent_event_t e = {KORCH_AGENT_OUTPUT, a->step, NULL, 0, output, (long)index,
                                     ev == KORCH_OUTPUT_STREAM};
            a->o.on_event(&e, a->o.arg);
        }
}

/* Run code quietly (korch's own bookkeeping); returns stdout, new string. */
static char *s_run_quiet(korch_agent_t *a, const char *code)
{
    korch_err_t err = {0};
    korch_exec_opts_t eo = {.no_store_history = true, .timeout_ms = 60000};
    korch_exec_t *ex = korch_kernel_execute_wait(a->k, code, &eo, NULL, &err);
    if (!ex)
        return NULL;
    const korch_exec_result_t *r = korch_exec_result(ex);
    char *out = NULL;
    size_t i;
    json_t *o;
    json_array_foreach(r->outputs, i, o) {
        const char *name = json_string_value(json_object_get(o, "name"));
        if (name && strcmp(name, "stdout") == 0) {
            out = strdup(json_string_value(json_object_get(o, "text")));
            break;
        }
    }
    korch_exec_destroy(&ex);
    return out;
}

static const char *s_describe_code =
    "def _korch_describe():\n"
    "    import os, json\n"
    "    out = []\n"
    "    for name in sorted(os.listdir('.')):\n"
    "        if not os.path.isfile(name) or name.startswith('.'):\n"
    "            continue\n"
    "        d = {'name': name, 'bytes': os.path.getsize(name)}\n"
    "        low = name.lower()\n"
    "        try:\n"
    "            import pandas as pd\n"
    "            df = None\n"
    "            if low.endswith(('.csv', '.tsv')):\n"
    "                sep = '\\t' if low.endswith('.tsv') else ','\n"
    "                df = pd.read_csv(name, sep=sep, nrows=2000)\n"
    "                with open(name, 'rb') as f:\n"
    "                    d['rows'] = max(0, sum(1 for _ in f) - 1)\n"
    "            elif low.endswith(('.xlsx', '.xls')):\n"
    "                df = pd.read_excel(name, nrows=2000)\n"
    "            elif low.endswith('.parquet'):\n"
    "                df = pd.read_parquet(name)\n"
    "                d['rows'] = len(df)\n"
    "            if df is not None:\n"
    "                d['columns'] = {str(c): str(t) for c, t in df.dtypes.items()}\n"
    "        except Exception as e:\n"
    "            d['note'] = 'could not be read as a table: ' + str(e)[:160]\n"
    "        out.append(d)\n"
    "    print(json.dumps(out))\n"
    "_korch_describe()\n"
    "del _korch_describe\n";

static void s_describe_files(korch_agent_t *a)
{
    char *out = s_run_quiet(a, s_describe_code);
    json_t *info = out ? json_loads(out, 0, NULL) : NULL;
    free(out);
    if (json_is_array(info)) {
        json_decref(a->file_info);
        a->file_info = info;
    } else
        json_decref(info);
}

static korch_rc_t s_start_kernel(korch_agent_t *a, korch_err_t *err)
{
    korch_kernel_opts_t ko = {.kernelspec = a->kernelspec, .launcher = a->o.launcher, .cwd = a->files_dir};
    if (a->existing)
        ko = (korch_kernel_opts_t){.existing = a->existing};
    a->k = korch_kernel_new(a->o.loop, &ko, err);
    if (!a->k)
        return err ? err->rc : KORCH_E_LAUNCH;
    korch_rc_t rc = korch_kernel_wait_ready(a->k, err);
    if (rc)
        korch_kernel_destroy(&a->k);
    return rc;
}

/* -------------------------------------------------------- new / resume */

static korch_rc_t s_mkdir(const char *path, korch_err_t *err)
{
    if (mkdir(path, 0755) != 0 && errno != EEXIST)
        return korch_err_set(err, KORCH_E_IO, "cannot create '%s': %s", path, strerror(errno));
    return KORCH_OK;
}

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

/* Reload messages and the notebook from the transcript; collect the code
   that ran successfully (to rebuild the kernel's state). */
static korch_rc_t s_load_transcript(korch_agent_t *a, json_t *replay, korch_err_t *err)
{
    FILE *f = fopen(a->transcript_path, "r");
    if (!f)
        return KORCH_OK;
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
        if (strcmp(type, "user") == 0) {
            json_array_append_new(a->messages, json_pack("{s:s, s:s}", "role", "user", "content", content ? content : ""));
            char md[65536];
            snprintf(md, sizeof md, "**User:** %s", content ? content : "");
            korch_notebook_add_markdown(a->nb, md);
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
                                            json_string_value(json_object_get(rec, "tool_call_id")), "name", TOOL_NAME,
                                            "content", content ? content : "", "is_error",
                                            json_is_true(json_object_get(rec, "is_error"))));
        } else if (strcmp(type, "execution") == 0) {
            const char *code = json_string_value(json_object_get(rec, "code"));
            json_t *count = json_object_get(rec, "execution_count");
            korch_notebook_add_code(a->nb, code, json_is_integer(count) ? (int)json_integer_value(count) : -1,
                                    json_object_get(rec, "outputs"));
            const char *st = json_string_value(json_object_get(rec, "status"));
            if (code && st && strcmp(st, "ok") == 0)
                json_array_append_new(replay, json_string(code));
        } else if (strcmp(type, "usage") == 0) {
            a->tokens += json_integer_value(json_object_get(rec, "tokens"));
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
                                        json_string_value(json_object_get(c, "id")), "name", TOOL_NAME, "content",
                                        "[not run: the session stopped before this code ran]", "is_error", 1));
    }
    return KORCH_OK;
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
    a->o = *opts;
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
    a->tools = s_tools();
    a->file_info = json_array();
    a->nb = korch_notebook_new(a->kernelspec, "Python 3", "python");
    if (s_mkdir(opts->session_dir, err) != KORCH_OK)
        goto fail;
    if (!realpath(opts->session_dir, a->dir)) {
        korch_err_set(err, KORCH_E_IO, "cannot use session dir '%s': %s", opts->session_dir, strerror(errno));
        goto fail;
    }
    snprintf(a->files_dir, sizeof a->files_dir, "%s/files", a->dir);
    snprintf(a->figures_dir, sizeof a->figures_dir, "%s/figures", a->dir);
    snprintf(a->transcript_path, sizeof a->transcript_path, "%s/transcript.jsonl", a->dir);
    snprintf(a->notebook_path, sizeof a->notebook_path, "%s/notebook.ipynb", a->dir);
    if (s_mkdir(a->files_dir, err) || s_mkdir(a->figures_dir, err))
        goto fail;
    a->figures = s_count_figures(a->figures_dir);
    bool resuming = access(a->transcript_path, F_OK) == 0;
    if (resuming && s_load_transcript(a, replay, err) != KORCH_OK)
        goto fail;
    a->transcript = fopen(a->transcript_path, "a");
    if (!a->transcript) {
        korch_err_set(err, KORCH_E_IO, "cannot open '%s': %s", a->transcript_path, strerror(errno));
        goto fail;
    }
    if (!resuming && s_record(a,
                              json_pack("{s:s, s:i, s:s, s:s}", "type", "session", "version", 1, "llm",
                                        korch_llm_name(a->o.llm), "kernelspec", a->kernelspec),
                              err) != KORCH_OK)
        goto fail;
    if (korch_llm_notice(a->o.llm))
        s_emit(a, KORCH_AGENT_NOTICE, korch_llm_notice(a->o.llm), NULL);
    if (s_start_kernel(a, err) != KORCH_OK)
        goto fail;
    if (json_array_size(replay)) {
        char note[256];
        snprintf(note, sizeof note,
                 "resumed session %s: re-running its %zu successful code cell(s) to rebuild the kernel's state", a->dir,
                 json_array_size(replay));
        s_emit(a, KORCH_AGENT_NOTICE, note, NULL);
        size_t i;
        json_t *code;
        int failed = 0;
        json_array_foreach(replay, i, code) {
            korch_exec_opts_t eo = {.timeout_ms = a->o.exec_timeout_s * 1000};
            korch_exec_t *ex = korch_kernel_execute_wait(a->k, json_string_value(code), &eo, NULL, err);
            if (!ex || korch_exec_result(ex)->status != KORCH_EXEC_OK)
                failed++;
            korch_exec_destroy(&ex);
        }
        korch_err_clear(err);
        if (failed) {
            snprintf(note, sizeof note, "%d cell(s) failed when re-run; some state may be missing", failed);
            s_emit(a, KORCH_AGENT_NOTICE, note, NULL);
        }
        s_record(a, json_pack("{s:s, s:s}", "type", "notice", "content", note), NULL);
    }
    s_describe_files(a);
    json_decref(replay);
    return a;
fail:
    json_decref(replay);
    korch_agent_destroy(&a);
    return NULL;
}

void korch_agent_destroy(korch_agent_t **pa)
{
    if (!pa || !*pa)
        return;
    korch_agent_t *a = *pa;
    if (a->nb && a->transcript)
        s_write_notebook(a);
    korch_kernel_destroy(&a->k);
    if (a->transcript)
        fclose(a->transcript);
    korch_notebook_destroy(&a->nb);
    json_decref(a->messages);
    json_decref(a->tools);
    json_decref(a->file_info);
    free(a->kernelspec);
    free(a->existing);
    free(a);
    *pa = NULL;
}

/* files/ may belong to the kernel's user (a container's uid), and code in
   the kernel may be racing us there: write through the directory's fd, a
   random temp name, O_EXCL|O_NOFOLLOW, fchown on the fd (fsutil.h). */
static korch_rc_t s_put_upload(const char *dir, const char *name, const void *data, size_t len, korch_err_t *err)
{
    struct stat st;
    int dfd = korch_fs_open_dir(dir, err);
    if (dfd < 0)
        return err ? err->rc : KORCH_E_IO;
    korch_fs_opts_t o = {.mode = 0644};
    if (fstat(dfd, &st) == 0 && st.st_uid != geteuid())
        o = (korch_fs_opts_t){.mode = 0644, .chown = true, .uid = st.st_uid, .gid = st.st_gid};
    korch_rc_t rc = korch_fs_write_at(dfd, name, data, len, &o, err);
    close(dfd);
    return rc;
}

korch_rc_t korch_agent_add_file(korch_agent_t *a, const char *path, korch_err_t *err)
{
    size_t len = 0;
    char *data = korch_read_file(path, (size_t)1 << 31, &len, err);
    if (!data)
        return err ? err->rc : KORCH_E_IO;
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    korch_rc_t rc = s_put_upload(a->files_dir, base, data, len, err);
    free(data);
    if (rc == KORCH_OK) {
        s_record(a, json_pack("{s:s, s:s, s:I}", "type", "file", "name", base, "bytes", (json_int_t)len), NULL);
        if (a->k)
            s_describe_files(a);
    }
    return rc;
}

json_t *korch_agent_files(korch_agent_t *a)
{
    json_t *out = json_array();
    DIR *d = opendir(a->files_dir);
    struct dirent *de;
    while (d && (de = readdir(d)))
        if (de->d_name[0] != '.')
            json_array_append_new(out, json_string(de->d_name));
    if (d)
        closedir(d);
    return out;
}

const char *korch_agent_session_dir(const korch_agent_t *a) { return a->dir; }
int64_t korch_agent_tokens(const korch_agent_t *a) { return a->tokens; }

void korch_agent_files_changed(korch_agent_t *a) { a->files_dirty = true; }

void korch_agent_interrupt(korch_agent_t *a)
{
    a->interrupted = 1;
    if (a->running && a->k)
        korch_kernel_interrupt(a->k, NULL);
}

/* ------------------------------------------------------- the requests */

static size_t s_msg_chars(json_t *m)
{
    size_t n = json_string_length(json_object_get(m, "content")) + 32;
    json_t *calls = json_object_get(m, "tool_calls");
    size_t i;
    json_t *c;
    json_array_foreach(calls, i, c) {
        char *s = json_dumps(json_object_get(c, "arguments"), JSON_COMPACT);
        n += s ? strlen(s) : 0;
        free(s);
    }
    n += json_array_size(json_object_get(m, "images")) * 1500; /* roughly what an image costs */
    return n;
}

/* The messages to send: system prompt first; when over the budget, older
   tool outputs and images are elided first, then the oldest turns go. In
   fence mode tool calls and results become plain text turns. */
static json_t *s_request_messages(korch_agent_t *a)
{
    json_t *msgs = json_deep_copy(a->messages);
    size_t n = json_array_size(msgs);
    /* images: only the two most recent messages that have some keep them */
    int kept = 0;
    for (size_t i = n; i-- > 0;) {
        json_t *m = json_array_get(msgs, i);
        if (json_array_size(json_object_get(m, "images")) && kept++ >= 2)
            json_object_del(m, "images");
    }
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += s_msg_chars(json_array_get(msgs, i));
    for (size_t i = 0; total > a->o.context_chars && i + 6 < n; i++) {
        json_t *m = json_array_get(msgs, i);
        const char *role = json_string_value(json_object_get(m, "role"));
        json_t *c = json_object_get(m, "content");
        if (role && strcmp(role, "tool") == 0 && json_string_length(c) > 600) {
            size_t before = s_msg_chars(m);
            char *cut = korch_truncate_middle(json_string_value(c), json_string_length(c), 600);
            json_object_set_new(m, "content", json_string(cut ? cut : ""));
            free(cut);
            json_object_del(m, "images");
            total -= before - s_msg_chars(m);
        }
    }
    /* still too much: drop whole turns (from a user message to the next) */
    while (total > a->o.context_chars) {
        size_t next = 0;
        for (size_t i = 1; i < json_array_size(msgs); i++) {
            const char *role = json_string_value(json_object_get(json_array_get(msgs, i), "role"));
            if (role && strcmp(role, "user") == 0) {
                next = i;
                break;
            }
        }
        if (next == 0)
            break;
        for (size_t i = 0; i < next; i++) {
            total -= s_msg_chars(json_array_get(msgs, 0));
            json_array_remove(msgs, 0);
        }
    }
    if (korch_llm_fence_mode(a->o.llm)) {
        json_t *plain = json_array();
        size_t i;
        json_t *m;
        json_array_foreach(msgs, i, m) {
            const char *role = json_string_value(json_object_get(m, "role"));
            if (role && strcmp(role, "tool") == 0) {
                size_t len = json_string_length(json_object_get(m, "content")) + 64;
                char *text = malloc(len);
                snprintf(text, len, "Output of your code:\n%s", json_string_value(json_object_get(m, "content")));
                json_t *u = json_pack("{s:s, s:s}", "role", "user", "content", text);
                free(text);
                if (json_object_get(m, "images"))
                    json_object_set(u, "images", json_object_get(m, "images"));
                json_array_append_new(plain, u);
            } else {
                json_t *c = json_deep_copy(m);
                json_object_del(c, "tool_calls");
                json_array_append_new(plain, c);
            }
        }
        json_decref(msgs);
        msgs = plain;
    }
    char *system = s_system_prompt(a);
    json_array_insert_new(msgs, 0, json_pack("{s:s, s:s}", "role", "system", "content", system ? system : ""));
    free(system);
    return msgs;
}

/* ```python ... ``` blocks of a fence-mode reply as neutral tool calls. */
static json_t *s_fence_calls(korch_agent_t *a, const char *text)
{
    json_t *calls = json_array();
    const char *p = text;
    while ((p = strstr(p, "```"))) {
        const char *lang = p + 3;
        const char *nl = strchr(lang, '\n');
        if (!nl)
            break;
        bool python = strncmp(lang, "python", 6) == 0 || strncmp(lang, "py\n", 3) == 0 || lang == nl;
        const char *end = strstr(nl + 1, "```");
        if (!end)
            break;
        if (python) {
            char id[32];
            snprintf(id, sizeof id, "fence_%d", ++a->fence_ids);
            json_t *code = json_stringn(nl + 1, (size_t)(end - nl - 1));
            json_array_append_new(calls, json_pack("{s:s, s:s, s:{s:o}}", "id", id, "name", TOOL_NAME, "arguments",
                                                   "code", code ? code : json_string("")));
        }
        p = end + 3;
    }
    return calls;
}

/* Some models print the tool call instead of making it: a reply that is
   only {"name": "run_python", "arguments": {"code": ...}} (or {"code": ...}),
   maybe in a ```json fence, is taken as the call it meant to be. */
static json_t *s_text_tool_call(korch_agent_t *a, const char *text)
{
    const char *p = text;
    while (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')
        p++;
    size_t len = strlen(p);
    while (len && (p[len - 1] == ' ' || p[len - 1] == '\n' || p[len - 1] == '\r' || p[len - 1] == '\t'))
        len--;
    if (len > 7 && strncmp(p, "```", 3) == 0 && strncmp(p + len - 3, "```", 3) == 0) {
        const char *nl = memchr(p, '\n', len);
        if (!nl)
            return NULL;
        len = (size_t)(p + len - 3 - (nl + 1));
        p = nl + 1;
    }
    if (!len || *p != '{')
        return NULL;
    json_t *j = json_loadb(p, len, 0, NULL);
    json_t *args = json_object_get(j, "arguments");
    if (!args)
        args = json_object_get(j, "parameters");
    if (json_is_string(args)) { /* arguments as a JSON string, OpenAI style */
        json_t *parsed = json_loads(json_string_value(args), 0, NULL);
        json_object_set_new(j, "arguments", parsed ? parsed : json_object());
        args = json_object_get(j, "arguments");
    }
    const char *name = json_string_value(json_object_get(j, "name"));
    const char *code = json_string_value(json_object_get(args ? args : j, "code"));
    json_t *calls = NULL;
    if (code && (!name || strcmp(name, TOOL_NAME) == 0)) {
        char id[32];
        snprintf(id, sizeof id, "text_%d", ++a->fence_ids);
        calls = json_pack("[{s:s, s:s, s:{s:s}}]", "id", id, "name", TOOL_NAME, "arguments", "code", code);
    }
    json_decref(j);
    return calls;
}

static void s_on_llm_text(const char *delta, size_t len, void *arg)
{
    korch_agent_t *a = arg;
    if (!a->o.on_event)
        return;
    korch_agent_event_t ev = {KORCH_AGENT_TEXT, a->step, delta, len, NULL, -1, false};
    a->o.on_event(&ev, a->o.arg);
}

static bool s_llm_cancelled(void *arg)
{
    korch_agent_t *a = arg;
    if (!a->interrupted && a->o.cancelled && a->o.cancelled(a->o.arg))
        a->interrupted = 1;
    return a->interrupted != 0;
}

static korch_rc_t s_call_model(korch_agent_t *a, bool with_tools, korch_llm_reply_t *reply, korch_err_t *err)
{
    json_t *msgs = s_request_messages(a);
    korch_llm_request_t req = {.messages = msgs,
                               .tools = with_tools && !korch_llm_fence_mode(a->o.llm) ? a->tools : NULL,
                               .temperature = -1};
    korch_llm_cb_t cb = {.on_text = s_on_llm_text, .cancelled = s_llm_cancelled, .arg = a};
    korch_rc_t rc = korch_llm_chat(a->o.llm, &req, &cb, reply, err);
    json_decref(msgs);
    if (rc == KORCH_OK) {
        int64_t used = (reply->input_tokens > 0 ? reply->input_tokens : 0) +
                       (reply->output_tokens > 0 ? reply->output_tokens : 0);
        a->tokens += used;
        s_record(a,
                 json_pack("{s:s, s:i, s:I, s:I, s:I, s:i}", "type", "usage", "step", a->step, "input_tokens",
                           (json_int_t)reply->input_tokens, "output_tokens", (json_int_t)reply->output_tokens, "tokens",
                           (json_int_t)used, "attempts", reply->attempts),
                 NULL);
    }
    return rc;
}

/* ------------------------------------------------------ running code */

static bool s_exec_done(void *arg) { return korch_exec_done(arg); }

/* Run one tool call; append the tool message. Returns false if the user
   interrupted (the rest of the turn is abandoned). */
static bool s_run_call(korch_agent_t *a, json_t *call, korch_err_t *err)
{
    const char *id = json_string_value(json_object_get(call, "id"));
    const char *name = json_string_value(json_object_get(call, "name"));
    const char *code = json_string_value(json_object_get(json_object_get(call, "arguments"), "code"));
    const char *aerr = json_string_value(json_object_get(call, "arguments_error"));
    char text_buf[1024];
    if (!name || strcmp(name, TOOL_NAME) != 0 || aerr || !code) {
        if (name && strcmp(name, TOOL_NAME) != 0)
            snprintf(text_buf, sizeof text_buf, "error: there is no tool named '%s'; use %s with {\"code\": \"...\"}",
                     name, TOOL_NAME);
        else if (aerr)
            snprintf(text_buf, sizeof text_buf,
                     "error: your tool call's arguments are not valid JSON (%s); call %s again with a JSON object "
                     "{\"code\": \"...\"}",
                     aerr, TOOL_NAME);
        else
            snprintf(text_buf, sizeof text_buf, "error: the %s call has no \"code\" string", TOOL_NAME);
        json_array_append_new(a->messages, json_pack("{s:s, s:s, s:s, s:s, s:b}", "role", "tool", "tool_call_id",
                                                     id ? id : "", "name", TOOL_NAME, "content", text_buf, "is_error", 1));
        s_record(a,
                 json_pack("{s:s, s:s, s:s, s:b}", "type", "tool", "tool_call_id", id ? id : "", "content", text_buf,
                           "is_error", 1),
                 NULL);
        s_emit(a, KORCH_AGENT_ERROR, text_buf, NULL);
        return true;
    }
    s_emit(a, KORCH_AGENT_CODE, code, NULL);
    korch_exec_opts_t eo = {.timeout_ms = a->o.exec_timeout_s * 1000};
    korch_exec_cb_t cb = {.on_output = s_on_output, .arg = a};
    korch_exec_t *ex = korch_kernel_execute(a->k, code, &eo, &cb, err);
    if (!ex) {
        /* the kernel is gone for good: say so and start a fresh one */
        char msg[1200];
        snprintf(msg, sizeof msg, a->existing ? "[%s; reconnecting to the kernel: its variables may be lost]"
                                              : "[%s; starting a fresh kernel: variables are lost]",
                 err ? err->msg : "kernel error");
        korch_kernel_destroy(&a->k);
        korch_err_clear(err);
        if (s_start_kernel(a, err) != KORCH_OK)
            return false;
        json_array_append_new(a->messages, json_pack("{s:s, s:s, s:s, s:s, s:b}", "role", "tool", "tool_call_id", id,
                                                     "name", TOOL_NAME, "content", msg, "is_error", 1));
        s_record(a, json_pack("{s:s, s:s, s:s, s:b}", "type", "tool", "tool_call_id", id, "content", msg, "is_error", 1),
                 NULL);
        return true;
    }
    a->running = ex;
    korch_loop_run(a->o.loop, s_exec_done, ex, -1);
    a->running = NULL;
    const korch_exec_result_t *r = korch_exec_result(ex);
    char *text = NULL;
    json_t *images = NULL, *saved = NULL;
    korch_feedback_opts_t fo = {.max_chars = a->o.max_result_chars,
                                .vision = korch_llm_vision(a->o.llm),
                                .figures_dir = a->figures_dir,
                                .figure_counter = &a->figures};
    korch_feedback_build(r, &fo, &text, &images, &saved, NULL);
    bool is_error = r->status != KORCH_EXEC_OK;
    json_t *tool = json_pack("{s:s, s:s, s:s, s:s, s:b}", "role", "tool", "tool_call_id", id, "name", TOOL_NAME,
                             "content", text ? text : "", "is_error", is_error);
    if (json_array_size(images))
        json_object_set(tool, "images", images);
    json_array_append_new(a->messages, tool);
    json_t *info = json_pack("{s:s, s:o, s:I, s:O}", "status", korch_exec_status_name(r->status), "execution_count",
                             r->execution_count >= 0 ? json_integer(r->execution_count) : json_null(), "elapsed_ms",
                             (json_int_t)r->elapsed_ms, "saved", saved);
    s_emit(a, KORCH_AGENT_RESULT, text, info);
    s_record(a,
             json_pack("{s:s, s:s, s:s, s:s, s:O, s:O, s:I, s:O}", "type", "execution", "tool_call_id", id, "code", code,
                       "status", korch_exec_status_name(r->status), "execution_count",
                       json_object_get(info, "execution_count"), "outputs", r->outputs, "elapsed_ms",
                       (json_int_t)r->elapsed_ms, "saved", saved),
             NULL);
    s_record(a,
             json_pack("{s:s, s:s, s:s, s:b, s:i}", "type", "tool", "tool_call_id", id, "content", text ? text : "",
                       "is_error", is_error, "images", (int)json_array_size(images)),
             NULL);
    korch_notebook_add_code(a->nb, code, r->execution_count, r->outputs);
    if (r->status == KORCH_EXEC_DIED || (r->status == KORCH_EXEC_TIMEOUT && r->restarted))
        s_emit(a, KORCH_AGENT_NOTICE, r->detail, NULL);
    json_decref(info);
    json_decref(images);
    json_decref(saved);
    free(text);
    korch_exec_destroy(&ex);
    return !a->interrupted;
}

/* Answer the calls the user's interrupt left unrun: every API wants each answered. */
static void s_answer_unrun(korch_agent_t *a, json_t *calls, size_t from)
{
    for (size_t i = from; i < json_array_size(calls); i++) {
        const char *id = json_string_value(json_object_get(json_array_get(calls, i), "id"));
        const char *msg = "[not run: the user interrupted]";
        json_array_append_new(a->messages, json_pack("{s:s, s:s, s:s, s:s, s:b}", "role", "tool", "tool_call_id",
                                                     id ? id : "", "name", TOOL_NAME, "content", msg, "is_error", 1));
        s_record(a, json_pack("{s:s, s:s, s:s, s:b}", "type", "tool", "tool_call_id", id ? id : "", "content", msg,
                              "is_error", 1),
                 NULL);
    }
}

/* ---------------------------------------------------------- the turn */

static korch_rc_t s_finish(korch_agent_t *a, korch_llm_reply_t *reply, char **answer, korch_err_t *err)
{
    const char *text = reply->text ? reply->text : "";
    s_record(a, json_pack("{s:s, s:s}", "type", "final", "content", text), err);
    s_emit(a, KORCH_AGENT_FINAL, text, NULL);
    if (answer)
        *answer = strdup(text);
    return KORCH_OK;
}

korch_rc_t korch_agent_ask(korch_agent_t *a, const char *question, char **answer, korch_err_t *err)
{
    if (answer)
        *answer = NULL;
    a->interrupted = 0;
    if (a->files_dirty) {
        a->files_dirty = false;
        s_describe_files(a);
    }
    korch_rc_t rc = KORCH_OK;
    int64_t t0 = korch_now_ms(), tokens0 = a->tokens;
    json_array_append_new(a->messages, json_pack("{s:s, s:s}", "role", "user", "content", question));
    rc = s_record(a, json_pack("{s:s, s:s}", "type", "user", "content", question), err);
    if (rc)
        return rc;
    char md[65536];
    snprintf(md, sizeof md, "**User:** %s", question);
    korch_notebook_add_markdown(a->nb, md);
    s_write_notebook(a);
    const char *stop_reason = NULL;
    for (a->step = 1; a->step <= a->o.max_steps; a->step++) {
        s_emit(a, KORCH_AGENT_STEP, NULL, NULL);
        korch_llm_reply_t reply = {0};
        rc = s_call_model(a, true, &reply, err);
        if (rc) {
            s_record(a, json_pack("{s:s, s:s}", "type", "error", "message", err ? err->msg : korch_strerror(rc)), NULL);
            s_write_notebook(a);
            return rc;
        }
        json_t *calls = korch_llm_fence_mode(a->o.llm) ? s_fence_calls(a, reply.text ? reply.text : "")
                                                       : json_incref(reply.tool_calls);
        if (!json_array_size(calls) && reply.text && !korch_llm_fence_mode(a->o.llm)) {
            json_t *printed = s_text_tool_call(a, reply.text);
            if (printed) {
                json_decref(calls);
                calls = printed;
            }
        }
        json_t *am = json_pack("{s:s, s:s}", "role", "assistant", "content", reply.text ? reply.text : "");
        if (json_array_size(calls))
            json_object_set(am, "tool_calls", calls);
        json_array_append_new(a->messages, am);
        s_record(a,
                 json_pack("{s:s, s:s, s:O, s:s}", "type", "assistant", "content", reply.text ? reply.text : "",
                           "tool_calls", calls ? calls : json_null(), "finish", reply.finish),
                 NULL);
        if (reply.text && *reply.text && json_array_size(calls))
            korch_notebook_add_markdown(a->nb, reply.text);
        if (!json_array_size(calls)) {
            if (reply.text && *reply.text)
                korch_notebook_add_markdown(a->nb, reply.text);
            json_decref(calls);
            rc = s_finish(a, &reply, answer, err);
            korch_llm_reply_clear(&reply);
            s_write_notebook(a);
            return rc;
        }
        korch_llm_reply_clear(&reply);
        for (size_t i = 0; i < json_array_size(calls); i++) {
            if (!s_run_call(a, json_array_get(calls, i), err)) {
                s_answer_unrun(a, calls, i + 1);
                json_decref(calls);
                s_write_notebook(a);
                s_record(a, json_pack("{s:s, s:s}", "type", "notice", "content", "interrupted by the user"), NULL);
                return korch_err_set(err, KORCH_E_INTERRUPTED, "interrupted; the session and its kernel are kept");
            }
        }
        json_decref(calls);
        s_write_notebook(a);
        if (a->o.max_tokens > 0 && a->tokens - tokens0 >= a->o.max_tokens)
            stop_reason = "the token budget for this question is used up";
        else if (a->o.max_seconds > 0 && korch_now_ms() - t0 >= (int64_t)a->o.max_seconds * 1000)
            stop_reason = "the time budget for this question is used up";
        if (stop_reason)
            break;
    }
    if (!stop_reason)
        stop_reason = "the step limit is reached";
    /* One last request, without tools, for the answer. */
    char note[256];
    snprintf(note, sizeof note, "[korch: %s. Answer the question now with what you have found; do not run more code.]",
             stop_reason);
    s_emit(a, KORCH_AGENT_NOTICE, note + 1, NULL);
    json_array_append_new(a->messages, json_pack("{s:s, s:s}", "role", "user", "content", note));
    s_record(a, json_pack("{s:s, s:s, s:b}", "type", "user", "content", note, "korch", 1), NULL);
    korch_llm_reply_t reply = {0};
    a->step++;
    s_emit(a, KORCH_AGENT_STEP, NULL, NULL);
    rc = s_call_model(a, false, &reply, err);
    if (rc == KORCH_OK) {
        json_array_append_new(a->messages,
                              json_pack("{s:s, s:s}", "role", "assistant", "content", reply.text ? reply.text : ""));
        s_record(a, json_pack("{s:s, s:s, s:s}", "type", "assistant", "content", reply.text ? reply.text : "", "finish",
                              reply.finish),
                 NULL);
        korch_notebook_add_markdown(a->nb, reply.text ? reply.text : "");
        rc = s_finish(a, &reply, answer, err);
    } else
        s_record(a, json_pack("{s:s, s:s}", "type", "error", "message", err ? err->msg : korch_strerror(rc)), NULL);
    korch_llm_reply_clear(&reply);
    s_write_notebook(a);
    return rc;
}
