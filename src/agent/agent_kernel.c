#include "agent_int.h"

#include "korch/describe.h"
#include "korch/kernelspec.h"
#include "korch/log.h"
#include "korch/media.h"
#include "korch/neutralise.h"
#include "korch/path.h"
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---------------------------------------------------- kernel & files */

void agent_on_output(korch_exec_t *ex, korch_output_event_t ev, json_t *output, size_t index, void *arg)
{
    korch_agent_t *a = arg;
    /* what the agent's code shows never runs script where it is shown (the
       page, the JupyterLab panel's cells, the transcript): korch/neutralise.h;
       SVG stays for the figures and is shown as an image */
    if (ev == KORCH_OUTPUT_NEW || ev == KORCH_OUTPUT_UPDATE)
        korch_neutralise_bundle(json_object_get(output, "data"), AGENT_NEUT_HINT, KORCH_NEUT_KEEP_SVG);
    if (ev == KORCH_OUTPUT_NEW || ev == KORCH_OUTPUT_STREAM || ev == KORCH_OUTPUT_UPDATE)
        if (a->o.on_event) {
            korch_agent_event_t e = {KORCH_AGENT_OUTPUT, a->step, NULL, 0, output, (long)index,
                                     ev == KORCH_OUTPUT_STREAM};
            a->o.on_event(&e, a->o.arg);
        }
}

/* Run code quietly (korch's own bookkeeping); returns stdout, new string. */
char *agent_run_quiet(korch_agent_t *a, const char *code)
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

/* A Python string literal for s (JSON's escapes are Python's). New string. */
static char *s_py_str(const char *s)
{
    json_t *j = json_string(s ? s : "");
    char *lit = j ? json_dumps(j, JSON_ENCODE_ANY | JSON_ENSURE_ASCII) : NULL;
    json_decref(j);
    return lit;
}

/* Walk the work dir now (see korch_workdir_scan); NULL when it cannot be. */
json_t *agent_wd_scan(korch_agent_t *a)
{
    if (!a->wd)
        return NULL;
    if (!a->wd_in_kernel)
        return korch_workdir_scan(a->wd, NULL);
    int64_t began = korch_workdir_clock_ms(); /* the listing's stamp: what was done before this, it saw */
    char *code = korch_workdir_lister_py(a->kernel_cwd);
    char *out = code ? agent_run_quiet(a, code) : NULL;
    free(code);
    json_t *j = out ? json_loads(out, 0, NULL) : NULL;
    free(out);
    json_t *scan = json_is_array(json_object_get(j, "files"))
                       ? korch_workdir_update(a->wd, json_object_get(j, "files"),
                                              json_is_true(json_object_get(j, "truncated")))
                       : NULL;
    json_decref(j);
    if (scan)
        a->wd_scanned_ms = began;
    return scan;
}

/* A file of the work dir, at most max bytes (see korch_workdir_read); from
   inside the kernel when the work dir is not on this host. */
char *agent_wd_read(korch_agent_t *a, const char *path, size_t max, size_t *len)
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
        out = agent_run_quiet(a, code);
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
void agent_wd_save(korch_agent_t *a)
{
    if (!a->wd_in_kernel || !a->wd) /* no listing: the kernel did not say its cwd */
        return;
    /* stamped with the time its walk began (src/server/fjournal.h lays the server's later uploads over it) */
    json_t *doc = json_pack("{s:I, s:o}", "scanned_ms", (json_int_t)a->wd_scanned_ms, "files", korch_workdir_list(a->wd));
    char *text = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
    char path[PATH_MAX + 16];
    if (text && korch_path_join(path, sizeof path, a->dir, "workdir.json", NULL) == KORCH_OK)
        korch_write_file(path, text, strlen(text), NULL);
    free(text);
    json_decref(doc);
}

/* Python: unlink top/rel, no link followed on the way (each parent an lstat'ed directory). */
static const char *s_remove_code =
    "def _korch_rm(top, rel):\n"
    "    import os, stat\n"
    "    cur = top\n"
    "    for part in rel.split('/')[:-1]:\n"
    "        cur = os.path.join(cur, part)\n"
    "        try:\n"
    "            if not stat.S_ISDIR(os.lstat(cur).st_mode):\n"
    "                return print('NOTFOUND')\n"
    "        except OSError:\n"
    "            return print('NOTFOUND')\n"
    "    p = os.path.join(top, rel)\n"
    "    try:\n"
    "        if stat.S_ISDIR(os.lstat(p).st_mode):\n"
    "            return print('ISDIR')\n"
    "        os.unlink(p)\n"
    "        print('OK')\n"
    "    except FileNotFoundError:\n"
    "        print('NOTFOUND')\n"
    "    except OSError as e:\n"
    "        print('ERROR ' + str(e)[:200])\n"
    "_korch_rm(%s, %s)\n"
    "del _korch_rm\n";

korch_rc_t agent_wd_remove(korch_agent_t *a, const char *rel, korch_err_t *err)
{
    if (!korch_relpath_ok(rel, PATH_MAX - 1, 0))
        return korch_err_set(err, KORCH_E_INVALID, "'%s' is not a plain path inside the work dir", rel ? rel : "");
    if (!a->wd_in_kernel)
        return a->wd ? korch_workdir_remove(korch_workdir_root(a->wd), rel, err)
                     : korch_err_set(err, KORCH_E_NOTFOUND, "no file '%s' in the work dir", rel);
    if (!a->python)
        return korch_err_set(err, KORCH_E_STATE, "cannot remove files inside a %s kernel's container", a->lang);
    char *top = s_py_str(a->kernel_cwd), *lit = s_py_str(rel);
    size_t cl = strlen(s_remove_code) + (top ? strlen(top) : 0) + (lit ? strlen(lit) : 0) + 8;
    char *code = top && lit ? malloc(cl) : NULL;
    char *out = NULL;
    if (code) {
        snprintf(code, cl, s_remove_code, top, lit);
        out = agent_run_quiet(a, code);
    }
    free(code);
    free(top);
    free(lit);
    korch_rc_t rc;
    if (!out)
        rc = korch_err_set(err, KORCH_E_IO, "cannot remove '%s': the kernel did not answer", rel);
    else if (strncmp(out, "OK", 2) == 0)
        rc = KORCH_OK;
    else if (strncmp(out, "NOTFOUND", 8) == 0)
        rc = korch_err_set(err, KORCH_E_NOTFOUND, "no file '%s' in the work dir", rel);
    else if (strncmp(out, "ISDIR", 5) == 0)
        rc = korch_err_set(err, KORCH_E_INVALID, "'%s' is a directory: remove the files in it", rel);
    else
        rc = korch_err_set(err, KORCH_E_IO, "cannot remove '%s': %.200s", rel, strncmp(out, "ERROR ", 6) == 0 ? out + 6 : "the kernel said something else");
    free(out);
    return rc;
}

void agent_describe_files(korch_agent_t *a)
{
    json_t *info = NULL;
    const char *code = korch_describe_code(a->lang);
    if (code) { /* the kernel's own reading of the tables (describe.h: its answer checked) */
        char *out = agent_run_quiet(a, code);
        info = out ? korch_describe_parse(out) : NULL;
        free(out);
    }
    if (!info && a->wd) { /* other languages: names and sizes, from the host's view of the work dir */
        json_decref(agent_wd_scan(a));
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
    a->tools = agent_tools(a);
}

korch_rc_t agent_start_kernel(korch_agent_t *a, korch_err_t *err)
{
    korch_kernel_opts_t ko = {.kernelspec = a->kernelspec, .launcher = a->o.launcher, .cwd = a->files_dir};
    if (a->existing)
        ko = (korch_kernel_opts_t){.existing = a->existing, .owner_notifies = true, .owner_ended = a->o.ended,
                                   .owner_arg = a->o.arg};
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
