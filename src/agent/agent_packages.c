/*  What a session's Python kernel installed into its own environment
 *  (korch/packages.h: .korch-env), kept in the notebook's metadata as
 *  metadata.korch.packages: [{name, version}], and in the step's
 *  transcript record ("packages"), so whoever re-runs the notebook knows
 *  the set: a resumed session's new kernel and verify's fresh one install it
 *  again before anything runs (agent_packages_install). */
#include "agent_int.h"

#include "korch/buf.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PKG_MAX 500

/* The distributions of the kernel's own environment (none outside one):
   importlib.metadata over its site-packages only, not Debian's. */
static const char s_code[] =
    "def _korch_pkgs():\n"
    "    import sys, json, sysconfig\n"
    "    out = []\n"
    "    if sys.prefix != sys.base_prefix:\n"
    "        import importlib.metadata as m\n"
    "        for d in m.distributions(path=[sysconfig.get_paths()['purelib']]):\n"
    "            n = d.metadata['Name']\n"
    "            if n:\n"
    "                out.append({'name': n, 'version': d.version})\n"
    "    print(json.dumps(sorted(out, key=lambda p: p['name'].lower())[:" "500" "]))\n"
    "_korch_pkgs()\n"
    "del _korch_pkgs\n";

/* A name or version as the kernel gave it is data: plain characters only. */
static bool s_token_ok(const char *s, size_t max, const char *extra)
{
    if (!s || !*s || strlen(s) > max)
        return false;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && !strchr(extra, *s))
            return false;
    return true;
}

/* Does the code install anything with pip? (a cheap look: the kernel is asked only then) */
static bool s_installs(const char *code)
{
    const char *p = code ? strstr(code, "pip") : NULL;
    return p && strstr(p, "install");
}

json_t *agent_note_packages(korch_agent_t *a, const char *code)
{
    if (!a->python || !a->k || !s_installs(code))
        return NULL;
    char *out = agent_run_quiet(a, s_code);
    json_t *got = out ? json_loads(out, JSON_REJECT_DUPLICATES, NULL) : NULL;
    free(out);
    if (!json_is_array(got)) {
        json_decref(got);
        return NULL;
    }
    json_t *list = json_array();
    size_t i;
    json_t *p;
    json_array_foreach(got, i, p) {
        const char *name = json_string_value(json_object_get(p, "name"));
        const char *version = json_string_value(json_object_get(p, "version"));
        if (i >= PKG_MAX || !s_token_ok(name, 100, "._-") || !s_token_ok(version, 64, ".+!_-"))
            continue;
        json_array_append_new(list, json_pack("{s:s, s:s}", "name", name, "version", version));
    }
    json_decref(got);
    agent_packages_set(a, list);
    return list;
}

void agent_packages_set(korch_agent_t *a, json_t *list)
{
    json_t *md = korch_notebook_meta(a->nb);
    json_t *k = json_object_get(md, "korch");
    if (json_is_object(md) && !json_is_object(k)) {
        k = json_object();
        json_object_set_new(md, "korch", k);
    }
    if (json_is_object(k) && json_is_array(list))
        json_object_set(k, "packages", list);
}

int agent_packages_install(korch_agent_t *a, korch_kernel_t *k, json_t *list, char *msg, size_t len)
{
    msg[0] = 0;
    if (!a->python || !k || !json_array_size(list))
        return 0;
    /* every name and version checked again: the notebook is a file anyone could have edited */
    korch_buf_t b = KORCH_BUF_INIT(64u << 10);
    korch_buf_adds(&b, "get_ipython().run_line_magic('pip', 'install --no-deps --quiet", NULL, NULL);
    size_t i, n = 0;
    json_t *p;
    json_array_foreach(list, i, p) {
        const char *name = json_string_value(json_object_get(p, "name"));
        const char *version = json_string_value(json_object_get(p, "version"));
        if (i >= PKG_MAX || !s_token_ok(name, 100, "._-") || !s_token_ok(version, 64, ".+!_-"))
            continue;
        char one[200];
        snprintf(one, sizeof one, " %s==%s", name, version);
        korch_buf_adds(&b, one, NULL, NULL);
        n++;
    }
    korch_buf_adds(&b, "')\n", NULL, NULL);
    char *code = korch_buf_release(&b, NULL);
    if (!code || !n) {
        free(code);
        return 0;
    }
    korch_exec_opts_t eo = {.no_store_history = true, .timeout_ms = 600000};
    korch_err_t err = {0};
    korch_exec_t *ex = korch_kernel_execute_wait(k, code, &eo, NULL, &err);
    free(code);
    const korch_exec_result_t *r = ex ? korch_exec_result(ex) : NULL;
    int rc = (int)n;
    if (!r || r->status != KORCH_EXEC_OK) {
        json_t *out = r ? json_array_get(r->outputs, json_array_size(r->outputs) - 1) : NULL;
        const char *why = json_string_value(json_object_get(out, "evalue"));
        snprintf(msg, len, "the %zu package(s) the session installed (metadata.korch.packages) could not be "
                 "installed again: %.600s", n, why ? why : err.msg[0] ? err.msg : r ? korch_exec_status_name(r->status)
                                                                               : "not run");
        rc = -1;
    }
    korch_exec_destroy(&ex);
    return rc;
}
