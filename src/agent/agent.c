/*  korch_agent: the model writes code, the kernel runs it, the model reads
 *  what happened, until it answers. See include/korch/agent.h. */
#include "korch/path.h"
#include "korch/agent.h"
#include "korch/buf.h"
#include "korch/feedback.h"
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

#define LIVE_CALLS 8            /* tool calls of one reply whose code is shown as it is written */
#define MAX_FILES_LISTED 100      /* per FILES event */
#define MAX_FILES_TOLD 20         /* per result the model reads */
#define MAX_FIGURE_FILE (20u << 20) /* an image file the code saved, copied to figures/ */
#define MAX_FIGURE_FILES 10       /* per step */

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
    korch_agent_usage_t turn_usage, session_usage;
    int step;
    volatile sig_atomic_t interrupted;
    /* live progress of the running step */
    korch_jsonfield_t live[LIVE_CALLS];     /* each tool call's "code" as it streams */
    bool live_on[LIVE_CALLS];
    const char *phase;                      /* "model", "retry", "executing" */
    int64_t phase_t0, status_last, retry_until;
    int retry_attempt;
    long retry_status;
    /* the kernel's language, from its kernel_info_reply */
    json_t *language_info;
    char lang[64];              /* language_info.name as the kernel says it ("python", "R") */
    char lang_label[160];       /* for people and prompts: "Python 3.11.2" */
    char tool_name[32];         /* run_python for Python (as before), run_code for the others */
    bool python;
    char *system_append, *system_replace;
    korch_workdir_t *wd;        /* the kernel's work dir, when it is on this host */
    char snapshot_path[PATH_MAX + 24];
    int executions;             /* execution records in the transcript */
    char *resume_note;          /* how a resume rebuilt the kernel's state: told to the model */
    bool wd_in_kernel;          /* the work dir is not on this host: listed from inside the kernel */
    char *kernel_cwd;           /* its path in the kernel (wd_in_kernel) */
};

/* ------------------------------------------------------------- events */

static void s_emit(korch_agent_t *a, korch_agent_event_type_t type, const char *text, json_t *data)
{
    if (!a->o.on_event)
        return;
    korch_agent_event_t ev = {type, a->step, text, text ? strlen(text) : 0, data, -1, false};
    a->o.on_event(&ev, a->o.arg);
}

/* What the step waits on, for the user: sent when the phase changes and
   about every second while it lasts. */
static void s_status(korch_agent_t *a)
{
    int64_t now = korch_now_ms();
    a->status_last = now;
    if (!a->o.on_event)
        return;
    json_t *d = json_pack("{s:s, s:I}", "phase", a->phase, "elapsed_ms", (json_int_t)(now - a->phase_t0));
    if (d && strcmp(a->phase, "retry") == 0) {
        json_object_set_new(d, "attempt", json_integer(a->retry_attempt));
        json_object_set_new(d, "retry_in_ms", json_integer(a->retry_until > now ? a->retry_until - now : 0));
        if (a->retry_status)
            json_object_set_new(d, "http_status", json_integer(a->retry_status));
    }
    korch_agent_event_t ev = {KORCH_AGENT_STATUS, a->step, NULL, 0, d, -1, false};
    a->o.on_event(&ev, a->o.arg);
    json_decref(d);
}

static void s_phase(korch_agent_t *a, const char *phase)
{
    a->phase = phase;
    a->phase_t0 = korch_now_ms();
    a->retry_until = 0;
    s_status(a);
}

/* --------------------------------------------------------- transcript */

/* A markdown cell of printf text, whole however long (a question is never
   cut); returns the text (new, for the record too) or NULL without memory. */
static char *s_add_md(korch_agent_t *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static char *s_add_md(korch_agent_t *a, const char *fmt, ...)
{
    korch_buf_t b = KORCH_BUF_INIT(SIZE_MAX / 2);
    va_list ap;
    va_start(ap, fmt);
    korch_rc_t rc = korch_buf_vaddf(&b, "notebook cell", NULL, fmt, ap);
    va_end(ap);
    if (rc) {
        korch_buf_free(&b);
        return NULL;
    }
    korch_notebook_add_markdown(a->nb, b.p);
    return korch_buf_release(&b, NULL);
}

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

static json_t *s_tools(korch_agent_t *a)
{
    char desc[512], pdesc[128];
    snprintf(desc, sizeof desc,
             "Run %s code in the user's persistent Jupyter kernel (%s). Variables, imports and files persist "
             "between calls. Returns stdout/stderr, the value of the last expression, errors with tracebacks, "
             "and charts.",
             a->lang, a->lang_label);
    snprintf(pdesc, sizeof pdesc, "The %s code to run", a->lang);
    return json_pack("[{s:s, s:s, s:{s:s, s:{s:{s:s, s:s}}, s:[s]}}]", "name", a->tool_name, "description", desc,
                     "parameters", "type", "object", "properties", "code", "type", "string", "description", pdesc,
                     "required", "code");
}

/* Is a fence's info string ("python", "r", "{r}") the kernel's language?
   An untagged fence counts only when untagged is true (fence mode: the model
   was asked for code blocks; elsewhere it is usually output or prose). */
static bool s_fence_lang(korch_agent_t *a, const char *tag, size_t len, bool untagged)
{
    while (len && (tag[len - 1] == ' ' || tag[len - 1] == '\r' || tag[len - 1] == '\t'))
        len--;
    if (len >= 2 && tag[0] == '{' && tag[len - 1] == '}') { /* R Markdown style ```{r} */
        tag++;
        len -= 2;
    }
    if (len == 0)
        return untagged;
    const char *names[6] = {a->lang, json_string_value(json_object_get(a->language_info, "pygments_lexer")),
                            json_string_value(json_object_get(a->language_info, "file_extension")), NULL, NULL, NULL};
    if (a->python) {
        names[3] = "py";
        names[4] = "python3";
        names[5] = "ipython";
    }
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        const char *n = names[i];
        if (n && *n == '.')
            n++;
        if (n && strlen(n) == len && strncasecmp(n, tag, len) == 0)
            return true;
    }
    return false;
}

static char *s_system_prompt(korch_agent_t *a)
{
    size_t cap = 16384 + (a->system_replace ? strlen(a->system_replace) : 0) +
                 (a->system_append ? strlen(a->system_append) : 0) + (a->resume_note ? strlen(a->resume_note) : 0);
    char *p = malloc(cap);
    if (!p)
        return NULL;
    size_t n = 0;
    bool fence = korch_llm_fence_mode(a->o.llm);
    bool vision = korch_llm_vision(a->o.llm);
    if (a->system_replace) {
        n += (size_t)snprintf(p + n, cap - n, "%s", a->system_replace);
        goto resume_note;
    }
    if (a->python)
        n += (size_t)snprintf(p + n, cap - n,
                              "You are a careful data analyst working in a persistent Jupyter kernel (%s with "
                              "pandas, numpy and matplotlib). ",
                              a->lang_label);
    else
        n += (size_t)snprintf(p + n, cap - n,
                              "You are a careful data analyst working in a persistent Jupyter kernel running %s "
                              "(%s). Write %s code only. ",
                              a->lang, a->lang_label, a->lang);
    if (fence)
        n += (size_t)snprintf(p + n, cap - n,
                              "To run code, reply with exactly one ```%s fenced code block; the next message "
                              "will show you its output. ",
                              a->python ? "python" : a->lang);
    else
        n += (size_t)snprintf(p + n, cap - n, "Run code with the %s tool. ", a->tool_name);
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
    if (a->python)
        n += (size_t)snprintf(p + n, cap - n,
                              "Charts made with matplotlib are captured automatically when you call plt.show() (no "
                              "savefig needed); ");
    else
        n += (size_t)snprintf(p + n, cap - n, "Plots the kernel displays are captured automatically; ");
    n += (size_t)snprintf(p + n, cap - n,
                          "%s Files your code writes in the working directory are listed after each run (images "
                          "saved as .png, .jpg or .svg count as charts). "
                          "Print concise results: long outputs are cut to about %zu characters. Work in small steps "
                          "and check intermediate results; if code fails, read the error and fix it. "
                          "When you have the answer, reply to the user in plain text without %s.",
                          vision ? "you will see each chart as an image." : "you will be told each chart's file name.",
                          a->o.max_result_chars, fence ? "a code block" : "calling the tool");
    if (a->system_append && n + 64 < cap)
        n += (size_t)snprintf(p + n, cap - n, "\n\n%s", a->system_append);
resume_note:
    if (a->resume_note && n + 64 < cap)
        n += (size_t)snprintf(p + n, cap - n, "\n\n%s", a->resume_note);
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

/* Python: the work dir listed from inside the kernel (for a container's
   volume korch cannot walk), bounded like korch_workdir's walk, symlinks
   not followed, hidden names left out. The kernel may lie: the lines are
   only data, checked by korch_workdir_update. */
static const char *s_list_code =
    "def _korch_ls(top, maxn, maxd):\n"
    "    import os, json, stat\n"
    "    out, cut = [], [False]\n"
    "    def walk(d, rel, depth):\n"
    "        try:\n"
    "            it = sorted(os.scandir(d), key=lambda e: e.name)\n"
    "        except OSError:\n"
    "            return\n"
    "        for e in it:\n"
    "            if e.name.startswith('.'):\n"
    "                continue\n"
    "            if len(out) >= maxn:\n"
    "                cut[0] = True\n"
    "                return\n"
    "            try:\n"
    "                st = e.stat(follow_symlinks=False)\n"
    "            except OSError:\n"
    "                continue\n"
    "            if stat.S_ISREG(st.st_mode):\n"
    "                out.append([rel + e.name, st.st_size, st.st_mtime_ns, st.st_ino])\n"
    "            elif stat.S_ISDIR(st.st_mode):\n"
    "                if depth + 1 > maxd:\n"
    "                    cut[0] = True\n"
    "                else:\n"
    "                    walk(os.path.join(d, e.name), rel + e.name + '/', depth + 1)\n"
    "    walk(top, '', 0)\n"
    "    print(json.dumps({'files': out, 'truncated': cut[0]}))\n"
    "_korch_ls(%s, 5000, 8)\n"
    "del _korch_ls\n";

/* A Python string literal for s (JSON's escapes are Python's). New string. */
static char *s_py_str(const char *s)
{
    json_t *j = json_string(s ? s : "");
    char *lit = j ? json_dumps(j, JSON_ENCODE_ANY | JSON_ENSURE_ASCII) : NULL;
    json_decref(j);
    return lit;
}

/* Walk the work dir now (see korch_workdir_scan); NULL when it cannot be. */
static json_t *s_wd_scan(korch_agent_t *a)
{
    if (!a->wd)
        return NULL;
    if (!a->wd_in_kernel)
        return korch_workdir_scan(a->wd, NULL);
    char *top = s_py_str(a->kernel_cwd);
    size_t len = strlen(s_list_code) + (top ? strlen(top) : 0) + 16;
    char *code = top ? malloc(len) : NULL;
    char *out = NULL;
    if (code) {
        snprintf(code, len, s_list_code, top);
        out = s_run_quiet(a, code);
    }
    free(code);
    free(top);
    json_t *j = out ? json_loads(out, 0, NULL) : NULL;
    free(out);
    json_t *scan = json_is_array(json_object_get(j, "files"))
                       ? korch_workdir_update(a->wd, json_object_get(j, "files"),
                                              json_is_true(json_object_get(j, "truncated")))
                       : NULL;
    json_decref(j);
    return scan;
}

/* A file of the work dir, at most max bytes (see korch_workdir_read); from
   inside the kernel when the work dir is not on this host. */
static char *s_wd_read(korch_agent_t *a, const char *path, size_t max, size_t *len)
{
    if (!a->wd_in_kernel)
        return korch_workdir_read(korch_workdir_root(a->wd), path, max, len, NULL);
    char *top = s_py_str(a->kernel_cwd), *rel = s_py_str(path);
    size_t cl = (top ? strlen(top) : 0) + (rel ? strlen(rel) : 0) + 400;
    char *code = top && rel ? malloc(cl) : NULL;
    char *out = NULL;
    if (code) {
        snprintf(code, cl,
                 "def _korch_get(top, rel, maxb):\n"
                 "    import os, base64\n"
                 "    p = os.path.join(top, rel)\n"
                 "    if os.path.islink(p) or not os.path.isfile(p) or os.path.getsize(p) > maxb:\n"
                 "        return\n"
                 "    print(base64.b64encode(open(p, 'rb').read(maxb + 1)).decode())\n"
                 "_korch_get(%s, %s, %zu)\n"
                 "del _korch_get\n",
                 top, rel, max);
        out = s_run_quiet(a, code);
    }
    free(code);
    free(top);
    free(rel);
    unsigned char *data = out && *out ? korch_b64_decode(out, strlen(out), len) : NULL;
    free(out);
    if (data && *len > max) {
        free(data);
        data = NULL;
    }
    return (char *)data;
}

/* The latest listing, for korch serve's GET .../files when it cannot walk
   the work dir itself: workdir.json in the session dir (korch's, not the kernel's). */
static void s_wd_save(korch_agent_t *a)
{
    if (!a->wd_in_kernel || !a->wd) /* no listing: the kernel did not say its cwd */
        return;
    json_t *list = korch_workdir_list(a->wd);
    char *text = json_dumps(list, JSON_COMPACT);
    char path[PATH_MAX + 16];
    if (text && korch_path_join(path, sizeof path, a->dir, "workdir.json", NULL) == KORCH_OK)
        korch_write_file(path, text, strlen(text), NULL);
    free(text);
    json_decref(list);
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
    json_t *info = NULL;
    if (a->python) {
        char *out = s_run_quiet(a, s_describe_code);
        info = out ? json_loads(out, 0, NULL) : NULL;
        free(out);
    } else if (a->wd) { /* other languages: names and sizes, from the host's view of the work dir */
        json_decref(s_wd_scan(a));
        json_t *list = korch_workdir_list(a->wd);
        info = json_array();
        size_t i;
        json_t *f;
        json_array_foreach(list, i, f) {
            const char *path = json_string_value(json_object_get(f, "path"));
            if (!strchr(path, '/') && json_array_size(info) < 200)
                json_array_append_new(info, json_pack("{s:s, s:O}", "name", path, "bytes", json_object_get(f, "size")));
        }
        json_decref(list);
    }
    if (json_is_array(info)) {
        json_decref(a->file_info);
        a->file_info = info;
    } else
        json_decref(info);
}

/* The kernel's language from its kernel_info_reply (once, at the first start). */
static void s_learn_language(korch_agent_t *a)
{
    if (a->language_info)
        return;
    json_t *info = korch_kernel_info(a->k);
    json_t *li = json_object_get(info, "language_info");
    a->language_info = json_is_object(li) ? json_deep_copy(li) : json_pack("{s:s}", "name", "python");
    const char *name = json_string_value(json_object_get(a->language_info, "name"));
    const char *version = json_string_value(json_object_get(a->language_info, "version"));
    snprintf(a->lang, sizeof a->lang, "%s", name && *name ? name : "python");
    a->python = strcasecmp(a->lang, "python") == 0;
    snprintf(a->tool_name, sizeof a->tool_name, "%s", a->python ? "run_python" : "run_code");
    const char *impl = json_string_value(json_object_get(info, "implementation"));
    if (a->python)
        snprintf(a->lang_label, sizeof a->lang_label, "Python %s", version ? version : "3");
    else
        snprintf(a->lang_label, sizeof a->lang_label, "%s %s, kernel %s", a->lang, version ? version : "",
                 impl ? impl : a->kernelspec);
    korch_kernelspec_t *spec = korch_kernelspec_find(a->kernelspec, NULL);
    korch_notebook_set_language(a->nb, a->language_info, spec ? spec->display_name : a->lang_label);
    korch_kernelspec_destroy(&spec);
    json_decref(a->tools);
    a->tools = s_tools(a);
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
    else
        s_learn_language(a);
    return rc;
}

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

/* After a step: keep the kernel's variables in snapshot.json (written
   atomically by korch, in the session dir). A snapshot that fails leaves the
   previous one, and the cells after it are re-run on resume. */
static void s_snapshot(korch_agent_t *a)
{
    if (!a->python || a->o.snapshot_bytes < 0 || !a->k)
        return;
    size_t len = strlen(s_snapshot_code) + 32;
    char *code = malloc(len);
    if (!code)
        return;
    snprintf(code, len, s_snapshot_code, a->o.snapshot_bytes);
    char *out = s_run_quiet(a, code);
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
    korch_err_t err = {0};
    if (!text || korch_write_file(a->snapshot_path, text, strlen(text), &err) != KORCH_OK)
        korch_warn("cannot keep the kernel's variables: %s", text ? err.msg : "out of memory");
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
        out = s_run_quiet(a, code);
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

/* Re-run the successful cells of replay[from, to); counts them. */
static void s_replay(korch_agent_t *a, json_t *replay, int from, int to, int *rerun, int *failed, int *skipped,
                     korch_err_t *err)
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
        if (!ex || korch_exec_result(ex)->status != KORCH_EXEC_OK)
            (*failed)++;
        korch_exec_destroy(&ex);
    }
    korch_err_clear(err);
}

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

/* A resumed session's fresh kernel: restore the snapshot, then re-run the
   successful cells that ran after it (all of them without a snapshot). The
   user (a NOTICE), the model (the system prompt), the transcript and the
   notebook are told exactly how, and what may differ. */
static void s_rebuild(korch_agent_t *a, json_t *replay, korch_err_t *err)
{
    size_t how_len = 8192;
    char *how = malloc(how_len);
    char *note = malloc(how_len + 2048);
    if (!how || !note) {
        free(how);
        free(note);
        return;
    }
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
        s_emit(a, KORCH_AGENT_NOTICE, line, NULL);
        free(line);
    }
    s_record(a, json_pack("{s:s, s:s, s:i, s:i, s:i}", "type", "notice", "content", note, "restored_executions",
                          covered, "rerun", rerun + before, "rerun_failed", rerun_failed + before_failed),
             NULL);
    char *md = s_add_md(a, "*korch: %s*", note);
    if (md) {
        s_record(a, json_pack("{s:s, s:s, s:s}", "type", "kernel", "event", "resumed", "content", md), NULL);
        free(md);
    }
    free(how);
    free(note);
}

/* A resumed session in the kernel it ran in before (opts.resume_live): its
   variables are live, nothing is rebuilt; the user (a NOTICE), the model
   (the system prompt), the transcript and the notebook are told. */
static void s_resume_live(korch_agent_t *a)
{
    const char *note = "The session was resumed in the kernel it ran in before, which kept running while korch "
                       "restarted: every variable is as it was and nothing was re-run.";
    free(a->resume_note);
    a->resume_note = strdup(note);
    char line[256];
    snprintf(line, sizeof line, "resumed session: %s", note);
    s_emit(a, KORCH_AGENT_NOTICE, line, NULL);
    s_record(a, json_pack("{s:s, s:s, s:b}", "type", "notice", "content", note, "live", 1), NULL);
    char *md = s_add_md(a, "*korch: %s*", note);
    if (md) {
        s_record(a, json_pack("{s:s, s:s, s:s}", "type", "kernel", "event", "resumed", "content", md), NULL);
        free(md);
    }
}

/* Reload messages and the notebook from the transcript; collect every
   execution's code and status, in order (to rebuild the kernel's state). */
static void s_load_transcript(korch_agent_t *a, json_t *replay)
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
        if (strcmp(type, "user") == 0) {
            json_array_append_new(a->messages, json_pack("{s:s, s:s}", "role", "user", "content", content ? content : ""));
            free(s_add_md(a, "**User:** %s", content ? content : ""));
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
            korch_notebook_add_code_meta(a->nb, code, json_is_integer(count) ? (int)json_integer_value(count) : -1,
                                         json_object_get(rec, "outputs"),
                                         note ? json_pack("{s:{s:O, s:O}}", "korch", "status",
                                                          json_object_get(rec, "status"), "note", note)
                                              : NULL);
            const char *st = json_string_value(json_object_get(rec, "status"));
            a->executions++;
            json_array_append_new(replay, json_pack("{s:s, s:s}", "code", code ? code : "", "status", st ? st : ""));
        } else if (strcmp(type, "kernel") == 0) {
            if (content)
                korch_notebook_add_markdown(a->nb, content);
        } else if (strcmp(type, "usage") == 0) {
            a->tokens += json_integer_value(json_object_get(rec, "tokens"));
            json_int_t in = json_integer_value(json_object_get(rec, "input_tokens"));
            json_int_t out = json_integer_value(json_object_get(rec, "output_tokens"));
            a->session_usage.input += in > 0 ? in : 0;
            a->session_usage.output += out > 0 ? out : 0;
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
    a->file_info = json_array();
    a->nb = korch_notebook_new(a->kernelspec, a->kernelspec, "python");
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
    a->figures = s_count_figures(a->figures_dir);
    const char *wd = opts->workdir ? opts->workdir : a->existing ? NULL : a->files_dir;
    if (wd && *wd)
        a->wd = korch_workdir_new(wd, NULL);
    a->wd_in_kernel = !a->wd && opts->workdir_in_kernel;
    bool resuming = access(a->transcript_path, F_OK) == 0;
    /* the kernel first: its language names the tool the transcript's messages use */
    if (s_start_kernel(a, err) != KORCH_OK)
        goto fail;
    if (a->wd_in_kernel && a->python) { /* the kernel's own view of its work dir */
        a->kernel_cwd = s_run_quiet(a, "import os as _korch_os\nprint(_korch_os.getcwd())\ndel _korch_os\n");
        if (a->kernel_cwd)
            a->kernel_cwd[strcspn(a->kernel_cwd, "\n")] = 0;
        if (a->kernel_cwd && a->kernel_cwd[0] == '/')
            a->wd = korch_workdir_new(NULL, NULL);
        json_decref(s_wd_scan(a));
        s_wd_save(a);
    }
    a->wd_in_kernel = a->wd_in_kernel && a->wd;
    if (resuming)
        s_load_transcript(a, replay);
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
    if (resuming && a->existing && a->o.resume_live)
        s_resume_live(a);
    else if (json_array_size(replay))
        s_rebuild(a, replay, err);
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
    json_decref(a->language_info);
    korch_workdir_destroy(&a->wd);
    free(a->kernel_cwd);
    free(a->system_append);
    free(a->system_replace);
    free(a->resume_note);
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
        s_emit(a, KORCH_AGENT_NOTICE, note, NULL);
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
        s_record(a, json_pack("{s:s, s:s, s:I}", "type", "file", "name", base, "bytes", (json_int_t)len), NULL);
        if (a->k)
            s_describe_files(a);
        if (stored)
            *stored = strdup(base);
    }
    return rc;
}

json_t *korch_agent_files(korch_agent_t *a)
{
    if (!a->wd)
        return json_array();
    json_decref(s_wd_scan(a));
    return korch_workdir_list(a->wd);
}

const char *korch_agent_language(const korch_agent_t *a) { return a->lang; }

const char *korch_agent_session_dir(const korch_agent_t *a) { return a->dir; }
int64_t korch_agent_tokens(const korch_agent_t *a) { return a->tokens; }

void korch_agent_usage(const korch_agent_t *a, korch_agent_usage_t *turn, korch_agent_usage_t *session)
{
    if (turn)
        *turn = a->turn_usage;
    if (session)
        *session = a->session_usage;
}

korch_rc_t korch_agent_save_notebook(korch_agent_t *a, const char *path, korch_err_t *err)
{
    return korch_notebook_write(a->nb, path, err);
}

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

/* Fenced blocks in the kernel's language (```python, ```r) as neutral tool
   calls: a fence-mode reply's, or a tool-mode reply's that made no call. */
static json_t *s_fence_calls(korch_agent_t *a, const char *text, bool untagged)
{
    json_t *calls = json_array();
    const char *p = text;
    while ((p = strstr(p, "```"))) {
        const char *lang = p + 3;
        const char *nl = strchr(lang, '\n');
        if (!nl)
            break;
        bool ours = s_fence_lang(a, lang, (size_t)(nl - lang), untagged);
        const char *end = strstr(nl + 1, "```");
        if (!end)
            break;
        if (ours) {
            char id[32];
            snprintf(id, sizeof id, "fence_%d", ++a->fence_ids);
            json_t *code = json_stringn(nl + 1, (size_t)(end - nl - 1));
            json_array_append_new(calls, json_pack("{s:s, s:s, s:{s:o}}", "id", id, "name", a->tool_name, "arguments",
                                                   "code", code ? code : json_string("")));
        }
        p = end + 3;
    }
    return calls;
}

/* The tool's name, or the other one (run_code / run_python): a model that
   guessed the generic name meant this tool. */
static bool s_tool_name_ok(korch_agent_t *a, const char *name)
{
    return strcmp(name, a->tool_name) == 0 || strcmp(name, "run_code") == 0 ||
           (a->python && strcmp(name, "run_python") == 0);
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
    if (code && (!name || s_tool_name_ok(a, name))) {
        char id[32];
        snprintf(id, sizeof id, "text_%d", ++a->fence_ids);
        calls = json_pack("[{s:s, s:s, s:{s:s}}]", "id", id, "name", a->tool_name, "arguments", "code", code);
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

/* A fragment of a tool call's arguments: the "code" in it, decoded as it
   comes, is shown as it is written. */
static void s_on_llm_tool_delta(int index, const char *name, const char *json, size_t len, void *arg)
{
    korch_agent_t *a = arg;
    if (index < 0 || index >= LIVE_CALLS || (name && *name && strcmp(name, a->tool_name) != 0) || !a->o.on_event)
        return;
    if (!a->live_on[index]) {
        korch_jsonfield_init(&a->live[index], "code");
        a->live_on[index] = true;
    }
    char *out = malloc(len + KORCH_JSONFIELD_SLACK);
    size_t n = out ? korch_jsonfield_feed(&a->live[index], json, len, out) : 0;
    if (n) {
        korch_agent_event_t ev = {KORCH_AGENT_CODE_DELTA, a->step, out, n, NULL, index, true};
        a->o.on_event(&ev, a->o.arg);
    }
    free(out);
}

/* A back-off begins; elapsed_ms still counts from the model call's start. */
static void s_on_llm_retry(const korch_llm_retry_t *r, void *arg)
{
    korch_agent_t *a = arg;
    a->phase = "retry";
    a->retry_attempt = r->attempt;
    a->retry_status = r->http_status;
    a->retry_until = korch_now_ms() + r->wait_ms;
    s_status(a);
}

/* Often during a model call: the back-off is over (the next attempt is
   made), or another second has passed. */
static void s_on_llm_tick(void *arg)
{
    korch_agent_t *a = arg;
    int64_t now = korch_now_ms();
    if (a->retry_until && now >= a->retry_until) {
        a->retry_until = 0;
        a->phase = "model";
        s_status(a);
    } else if (now - a->status_last >= 1000)
        s_status(a);
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
    korch_llm_cb_t cb = {.on_text = s_on_llm_text,
                         .on_tool_delta = s_on_llm_tool_delta,
                         .on_retry = s_on_llm_retry,
                         .on_tick = s_on_llm_tick,
                         .cancelled = s_llm_cancelled,
                         .arg = a};
    memset(a->live_on, 0, sizeof a->live_on);
    s_phase(a, "model");
    korch_rc_t rc = korch_llm_chat(a->o.llm, &req, &cb, reply, err);
    json_decref(msgs);
    if (rc == KORCH_OK) {
        int64_t in = reply->input_tokens > 0 ? reply->input_tokens : 0;
        int64_t out = reply->output_tokens > 0 ? reply->output_tokens : 0;
        int64_t used = in + out;
        a->tokens += used;
        a->turn_usage.input += in;
        a->turn_usage.output += out;
        a->session_usage.input += in;
        a->session_usage.output += out;
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

static int s_exec_tick(korch_loop_t *loop, int timer_id, void *arg)
{
    s_status(arg);
    return 0;
}

/* The kernel restarted (died, or was replaced): a markdown cell in the
   notebook, recorded so a resumed notebook shows it too. */
static void s_mark_restart(korch_agent_t *a, const char *why)
{
    char *md = s_add_md(a, "*korch: the kernel restarted here (%s); the variables defined above are gone.*",
                        why && *why ? why : "it died");
    if (md)
        s_record(a, json_pack("{s:s, s:s, s:s}", "type", "kernel", "event", "restarted", "content", md), NULL);
    free(md);
}

static void s_human_size(char *buf, size_t len, json_int_t n)
{
    if (n < 10000)
        snprintf(buf, len, "%lld bytes", (long long)n);
    else if (n < 10000000)
        snprintf(buf, len, "%.1f kB", (double)n / 1e3);
    else
        snprintf(buf, len, "%.1f MB", (double)n / 1e6);
}

/* After a step: what the code did to the work dir. Returns NULL when
   nothing changed, else a new {files: [{path, size, change, mime}], total,
   truncated, line}: at most MAX_FILES_LISTED entries; images it saved are
   copied to figures/ (their names appended to figures) and, for a vision
   model, PNG and JPEG ones attached (images); *text (what the model reads)
   gets a bounded list of the changes with sizes. */
static json_t *s_files_step(korch_agent_t *a, json_t *figures, json_t *images, char **text)
{
    if (!a->wd)
        return NULL;
    json_t *scan = s_wd_scan(a);
    json_t *ch = json_object_get(scan, "changes");
    if (!json_array_size(ch)) {
        json_decref(scan);
        return NULL;
    }
    json_t *files = json_array();
    size_t total = json_array_size(ch), i, copied = 0;
    size_t cap = 256 + MAX_FILES_TOLD * 320;
    char *list = malloc(cap);
    size_t n = 0;
    if (list)
        list[0] = 0;
    json_t *c;
    json_array_foreach(ch, i, c) {
        const char *path = json_string_value(json_object_get(c, "path"));
        const char *change = json_string_value(json_object_get(c, "change"));
        json_int_t size = json_integer_value(json_object_get(c, "size"));
        const char *mime = korch_mime_for(path);
        bool gone = strcmp(change, "deleted") == 0;
        json_t *e = json_deep_copy(c);
        json_object_set_new(e, "mime", json_string(mime));
        /* an image the code saved is a figure like a displayed one */
        const char *ext = strncmp(mime, "image/", 6) == 0 ? korch_image_ext(mime) : NULL;
        if (ext && !gone && copied < MAX_FIGURE_FILES) {
            size_t len = 0;
            char *data = s_wd_read(a, path, a->wd_in_kernel ? MAX_FIGURE_FILE / 4 : MAX_FIGURE_FILE, &len);
            char name[64], dst[PATH_MAX + 80];
            snprintf(name, sizeof name, "fig-%d.%s", a->figures + 1, ext);
            if (data && korch_path_join(dst, sizeof dst, a->figures_dir, name, NULL) == KORCH_OK &&
                korch_write_file(dst, data, len, NULL) == KORCH_OK) {
                a->figures++;
                copied++;
                json_array_append_new(figures, json_pack("{s:s, s:s}", "name", name, "source", path));
                json_object_set_new(e, "figure", json_string(name));
                if (korch_llm_vision(a->o.llm) && images && strcmp(ext, "svg") != 0 && len <= (5u << 20)) {
                    char *b64 = korch_b64_encode((const unsigned char *)data, len);
                    if (b64)
                        json_array_append_new(images, json_pack("{s:s, s:s, s:s}", "mime", mime, "data", b64, "name",
                                                                name));
                    free(b64);
                }
            }
            free(data);
        }
        if (i < MAX_FILES_LISTED)
            json_array_append(files, e);
        char hs[32];
        s_human_size(hs, sizeof hs, size);
        if (list && i < MAX_FILES_TOLD)
            n += (size_t)snprintf(list + n, cap - n, "%s%s %.200s%s%s%s%s%s", i ? "; " : "", change, path,
                                  gone ? "" : " (", gone ? "" : hs, gone ? "" : ")",
                                  json_object_get(e, "figure") ? ", kept as figure " : "",
                                  json_object_get(e, "figure") ? json_string_value(json_object_get(e, "figure")) : "");
        json_decref(e);
    }
    if (list && total > MAX_FILES_TOLD)
        n += (size_t)snprintf(list + n, cap - n, "; and %zu more", total - MAX_FILES_TOLD);
    if (list && json_is_true(json_object_get(scan, "truncated")))
        n += (size_t)snprintf(list + n, cap - n, " (the directory is too large to watch entirely)");
    if (list) {
        const char *head = "\n[files in the working directory changed by this code: ";
        size_t tl = *text ? strlen(*text) : 0;
        char *nt = realloc(*text, tl + strlen(head) + n + 2);
        if (nt) {
            snprintf(nt + tl, strlen(head) + n + 2, "%s%s]", head, list);
            *text = nt;
        }
    }
    json_t *out = json_pack("{s:o, s:I, s:O, s:s}", "files", files, "total", (json_int_t)total, "truncated",
                            json_object_get(scan, "truncated"), "line", list ? list : "");
    free(list);
    json_decref(scan);
    s_wd_save(a);
    return out;
}

/* Run one tool call; append the tool message. Returns false if the user
   interrupted (the rest of the turn is abandoned). */
static bool s_run_call(korch_agent_t *a, json_t *call, korch_err_t *err)
{
    const char *id = json_string_value(json_object_get(call, "id"));
    const char *name = json_string_value(json_object_get(call, "name"));
    const char *code = json_string_value(json_object_get(json_object_get(call, "arguments"), "code"));
    const char *aerr = json_string_value(json_object_get(call, "arguments_error"));
    char text_buf[1024];
    if (!name || !s_tool_name_ok(a, name) || aerr || !code) {
        if (name && !s_tool_name_ok(a, name))
            snprintf(text_buf, sizeof text_buf, "error: there is no tool named '%s'; use %s with {\"code\": \"...\"}",
                     name, a->tool_name);
        else if (aerr)
            snprintf(text_buf, sizeof text_buf,
                     "error: your tool call's arguments are not valid JSON (%s); call %s again with a JSON object "
                     "{\"code\": \"...\"}",
                     aerr, a->tool_name);
        else
            snprintf(text_buf, sizeof text_buf, "error: the %s call has no \"code\" string", a->tool_name);
        json_array_append_new(a->messages, json_pack("{s:s, s:s, s:s, s:s, s:b}", "role", "tool", "tool_call_id",
                                                     id ? id : "", "name", a->tool_name, "content", text_buf, "is_error", 1));
        s_record(a,
                 json_pack("{s:s, s:s, s:s, s:b}", "type", "tool", "tool_call_id", id ? id : "", "content", text_buf,
                           "is_error", 1),
                 NULL);
        s_emit(a, KORCH_AGENT_ERROR, text_buf, NULL);
        return true;
    }
    json_t *lang = json_pack("{s:s}", "language", a->lang);
    s_emit(a, KORCH_AGENT_CODE, code, lang);
    json_decref(lang);
    if (a->wd) /* the baseline: what was there before this code ran (uploads included) */
        json_decref(s_wd_scan(a));
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
        s_mark_restart(a, msg);
        json_array_append_new(a->messages, json_pack("{s:s, s:s, s:s, s:s, s:b}", "role", "tool", "tool_call_id", id,
                                                     "name", a->tool_name, "content", msg, "is_error", 1));
        s_record(a, json_pack("{s:s, s:s, s:s, s:b}", "type", "tool", "tool_call_id", id, "content", msg, "is_error", 1),
                 NULL);
        return true;
    }
    a->running = ex;
    s_phase(a, "executing");
    int tick = korch_loop_timer(a->o.loop, 1000, 0, s_exec_tick, a);
    korch_loop_run(a->o.loop, s_exec_done, ex, -1);
    korch_loop_timer_end(a->o.loop, tick);
    a->running = NULL;
    const korch_exec_result_t *r = korch_exec_result(ex);
    char *text = NULL;
    json_t *images = NULL, *saved = NULL;
    korch_feedback_opts_t fo = {.max_chars = a->o.max_result_chars,
                                .vision = korch_llm_vision(a->o.llm),
                                .figures_dir = a->figures_dir,
                                .figure_counter = &a->figures};
    korch_feedback_build(r, &fo, &text, &images, &saved);
    json_t *figures = json_array();
    size_t fi;
    json_t *fp;
    json_array_foreach(saved, fi, fp) {
        const char *slash = strrchr(json_string_value(fp), '/');
        json_array_append_new(figures, json_pack("{s:s}", "name", slash ? slash + 1 : json_string_value(fp)));
    }
    json_t *changes = s_files_step(a, figures, images, &text);
    bool is_error = r->status != KORCH_EXEC_OK;
    json_t *tool = json_pack("{s:s, s:s, s:s, s:s, s:b}", "role", "tool", "tool_call_id", id, "name", a->tool_name,
                             "content", text ? text : "", "is_error", is_error);
    if (json_array_size(images))
        json_object_set(tool, "images", images);
    json_array_append_new(a->messages, tool);
    json_t *info = json_pack("{s:s, s:o, s:I, s:O, s:O}", "status", korch_exec_status_name(r->status),
                             "execution_count", r->execution_count >= 0 ? json_integer(r->execution_count) : json_null(),
                             "elapsed_ms", (json_int_t)r->elapsed_ms, "saved", saved, "figures", figures);
    s_emit(a, KORCH_AGENT_RESULT, text, info);
    if (changes)
        s_emit(a, KORCH_AGENT_FILES, json_string_value(json_object_get(changes, "line")), changes);
    bool died = r->status == KORCH_EXEC_DIED || r->restarted;
    char note[700] = "";
    if (died)
        snprintf(note, sizeof note, "%s", r->detail[0] ? r->detail : "the kernel died while this cell ran");
    json_t *rec = json_pack("{s:s, s:s, s:s, s:s, s:O, s:O, s:I, s:O}", "type", "execution", "tool_call_id", id,
                            "code", code, "status", korch_exec_status_name(r->status), "execution_count",
                            json_object_get(info, "execution_count"), "outputs", r->outputs, "elapsed_ms",
                            (json_int_t)r->elapsed_ms, "figures", figures);
    if (died)
        json_object_set_new(rec, "note", json_string(note));
    if (changes)
        json_object_set(rec, "files", json_object_get(changes, "files"));
    s_record(a, rec, NULL);
    a->executions++;
    s_record(a,
             json_pack("{s:s, s:s, s:s, s:b, s:i}", "type", "tool", "tool_call_id", id, "content", text ? text : "",
                       "is_error", is_error, "images", (int)json_array_size(images)),
             NULL);
    korch_notebook_add_code_meta(a->nb, code, r->execution_count, r->outputs,
                                 died ? json_pack("{s:{s:s, s:s}}", "korch", "status",
                                                  korch_exec_status_name(r->status), "note", note)
                                      : NULL);
    if (died) {
        char told[800];
        snprintf(told, sizeof told, "%s%s", r->detail,
                 r->status == KORCH_EXEC_DIED && r->restarted ? "; the kernel was restarted: its variables are lost" : "");
        s_emit(a, KORCH_AGENT_NOTICE, told, NULL);
        s_mark_restart(a, note);
    } else
        s_snapshot(a);
    json_decref(info);
    json_decref(figures);
    json_decref(changes);
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
                                                     id ? id : "", "name", a->tool_name, "content", msg, "is_error", 1));
        s_record(a, json_pack("{s:s, s:s, s:s, s:b}", "type", "tool", "tool_call_id", id ? id : "", "content", msg,
                              "is_error", 1),
                 NULL);
    }
}

/* ---------------------------------------------------------- the turn */

/* The answer: recorded (a record that cannot be written is an error event,
   not a failed turn), told and handed over. */
static void s_finish(korch_agent_t *a, korch_llm_reply_t *reply, char **answer)
{
    const char *text = reply->text ? reply->text : "";
    s_record(a, json_pack("{s:s, s:s}", "type", "final", "content", text), NULL);
    s_emit(a, KORCH_AGENT_FINAL, text, NULL);
    if (answer)
        *answer = strdup(text);
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
    a->turn_usage = (korch_agent_usage_t){0, 0};
    json_array_append_new(a->messages, json_pack("{s:s, s:s}", "role", "user", "content", question));
    rc = s_record(a, json_pack("{s:s, s:s}", "type", "user", "content", question), err);
    if (rc)
        return rc;
    free(s_add_md(a, "**User:** %s", question)); /* whole, however long */
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
        json_t *calls = korch_llm_fence_mode(a->o.llm) ? s_fence_calls(a, reply.text ? reply.text : "", true)
                                                       : json_incref(reply.tool_calls);
        if (!json_array_size(calls) && reply.text && !korch_llm_fence_mode(a->o.llm)) {
            json_t *printed = s_text_tool_call(a, reply.text);
            /* code interpreter behaviour: fenced code in the kernel's language is run */
            if (!printed && !a->o.no_fence_run)
                printed = s_fence_calls(a, reply.text, false);
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
            s_finish(a, &reply, answer);
            korch_llm_reply_clear(&reply);
            s_write_notebook(a);
            return KORCH_OK;
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
    /* One last request, without tools, for the answer: the step after the
       last one run (the loop leaves step one past the limit when it ran out). */
    int last = a->step > a->o.max_steps ? a->o.max_steps : a->step;
    char note[256], told[256];
    snprintf(note, sizeof note, "[korch: %s. Answer the question now with what you have found; do not run more code.]",
             stop_reason);
    snprintf(told, sizeof told, "%s after %d step%s: asking the model for its answer without more code", stop_reason,
             last, last == 1 ? "" : "s");
    s_emit(a, KORCH_AGENT_NOTICE, told, NULL);
    json_array_append_new(a->messages, json_pack("{s:s, s:s}", "role", "user", "content", note));
    s_record(a, json_pack("{s:s, s:s, s:b}", "type", "user", "content", note, "korch", 1), NULL);
    korch_llm_reply_t reply = {0};
    a->step = last + 1;
    s_emit(a, KORCH_AGENT_STEP, NULL, NULL);
    rc = s_call_model(a, false, &reply, err);
    if (rc == KORCH_OK) {
        json_array_append_new(a->messages,
                              json_pack("{s:s, s:s}", "role", "assistant", "content", reply.text ? reply.text : ""));
        s_record(a, json_pack("{s:s, s:s, s:s}", "type", "assistant", "content", reply.text ? reply.text : "", "finish",
                              reply.finish),
                 NULL);
        korch_notebook_add_markdown(a->nb, reply.text ? reply.text : "");
        s_finish(a, &reply, answer);
    } else
        s_record(a, json_pack("{s:s, s:s}", "type", "error", "message", err ? err->msg : korch_strerror(rc)), NULL);
    korch_llm_reply_clear(&reply);
    s_write_notebook(a);
    return rc;
}
