/*  The MCP tools on the session's kernel (mcp_int.h).
 *
 *  The session has one kernel, started by the first tool that needs it
 *  (from the warm pool when there is one) and kept until the session ends:
 *  its variables persist between calls. Executions (run_code, list_files'
 *  listing) run one at a time in the order asked; the others wait in a
 *  bounded queue. Files go through the launcher's ops (put_file,
 *  get_file), so every launcher works alike. A kernel that went (deleted,
 *  culled) is replaced by a fresh one at the next call, and the model is
 *  told its variables are gone.
 *
 *  Everything the kernel says is the kernel's: what a tool gives back is
 *  the agent's view of it (korch_feedback_build: cut to max_chars, head
 *  and tail, charts as images) passed through korch_termsafe_str (no
 *  terminal escapes, no bidi controls), then JSON-escaped as ASCII.
 */
#include "mcp_int.h"
#include "korch/feedback.h"
#include "korch/kernelspec.h"
#include "korch/log.h"
#include "korch/media.h"
#include "korch/path.h"
#include "korch/termsafe.h"
#include "korch/workdir.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct srv_mcp_kstate {
    char kernel_id[40];         /* "" none yet */
    char spec[128];             /* its kernelspec ("" = the default) */
    bool had_kernel;            /* one went: the next is "a fresh kernel" */
    srv_kwait_t *ready;         /* waiting for it */
    zlistx_t *waiting;          /* srv_mcp_call_t* waiting for it (borrowed) */
    zlistx_t *runq;             /* executions waiting for the running one (borrowed) */
    srv_mcp_call_t *running;    /* the execution under way */
    srv_kmgr_t *kmgr;
};

typedef void(s_go_fn)(srv_mcp_call_t *c, srv_kernel_t *mk);

static const char *const T_RUN = "run_code", *const T_LIST = "list_files", *const T_UP = "upload_file",
                         *const T_FETCH = "fetch_file", *const T_INT = "interrupt", *const T_RESTART = "restart",
                         *const T_SPECS = "list_kernelspecs";

/* ------------------------------------------------------------ listing */

const char *srv_mcp_tool_name(const char *name)
{
    static const char *const *all[] = {&T_RUN, &T_LIST, &T_UP, &T_FETCH, &T_INT, &T_RESTART, &T_SPECS};
    for (size_t i = 0; name && i < sizeof all / sizeof all[0]; i++)
        if (strcmp(name, *all[i]) == 0)
            return *all[i];
    return NULL;
}

json_t *srv_mcp_tools_list(void)
{
    json_t *none = json_pack("{s:s, s:{}}", "type", "object", "properties");
    json_t *tools = json_pack(
        "[{s:s, s:s, s:s, s:{s:s, s:{s:{s:s, s:s}, s:{s:s, s:s, s:i}}, s:[s]}},"
        " {s:s, s:s, s:s, s:O},"
        " {s:s, s:s, s:s, s:{s:s, s:{s:{s:s, s:s}, s:{s:s, s:s}, s:{s:s, s:s}}, s:[s]}},"
        " {s:s, s:s, s:s, s:{s:s, s:{s:{s:s, s:s}}, s:[s]}},"
        " {s:s, s:s, s:s, s:O},"
        " {s:s, s:s, s:s, s:{s:s, s:{s:{s:s, s:s}}}},"
        " {s:s, s:s, s:s, s:o}]",
        /* run_code */
        "name", T_RUN, "title", "Run code", "description",
        "Run code in this session's persistent Jupyter kernel (Python unless restart chose another kernelspec). "
        "Variables, imports and files persist between calls. Returns what a notebook shows: stdout and stderr, the "
        "last expression's value, errors with their traceback, and charts (matplotlib and the like) as images. Long "
        "output is cut in the middle.",
        "inputSchema", "type", "object", "properties", "code", "type", "string", "description",
        "the code to run (a notebook cell)", "timeout", "type", "integer", "description",
        "seconds before korch interrupts it (default: none)", "minimum", 1, "required", "code",
        /* list_files */
        "name", T_LIST, "title", "List files", "description",
        "List the files in the kernel's working directory (name and size), what upload_file put there and what "
        "the code wrote.",
        "inputSchema", none,
        /* upload_file */
        "name", T_UP, "title", "Upload a file", "description",
        "Put a file into the kernel's working directory, where the code reads it by its relative path. Give its "
        "text as content, or its bytes as content_base64.",
        "inputSchema", "type", "object", "properties", "path", "type", "string", "description",
        "a relative path such as data.csv or input/a.txt", "content", "type", "string", "description",
        "the file's text (UTF-8)", "content_base64", "type", "string", "description", "the file's bytes, base64",
        "required", "path",
        /* fetch_file */
        "name", T_FETCH, "title", "Fetch a file", "description",
        "Read a file of the kernel's working directory: an image comes back as an image, text as text (long text "
        "cut in the middle), anything else as an embedded resource.",
        "inputSchema", "type", "object", "properties", "path", "type", "string", "description",
        "its relative path, as list_files shows it", "required", "path",
        /* interrupt */
        "name", T_INT, "title", "Interrupt", "description",
        "Interrupt the code running in the kernel (KeyboardInterrupt in Python); the variables stay.", "inputSchema",
        none,
        /* restart */
        "name", T_RESTART, "title", "Restart the kernel", "description",
        "Restart the session's kernel: every variable is gone, files stay. With kernel, start that kernelspec "
        "instead (list_kernelspecs names them).",
        "inputSchema", "type", "object", "properties", "kernel", "type", "string", "description",
        "a kernelspec name such as python3 or ir",
        /* list_kernelspecs */
        "name", T_SPECS, "title", "List kernelspecs", "description",
        "The kernels (languages) korch can start here, and which one this session runs.", "inputSchema",
        json_deep_copy(none));
    json_decref(none); /* O'd twice: the list holds it */
    return tools;
}

/* ------------------------------------------------------------ state */

srv_mcp_kstate_t *srv_mcp_kstate_new(void)
{
    srv_mcp_kstate_t *k = calloc(1, sizeof *k);
    if (!k)
        return NULL;
    k->waiting = zlistx_new();
    k->runq = zlistx_new();
    if (!k->waiting || !k->runq) {
        zlistx_destroy(&k->waiting);
        zlistx_destroy(&k->runq);
        free(k);
        return NULL;
    }
    return k;
}

void srv_mcp_kstate_destroy(srv_mcp_kstate_t **pk, srv_kmgr_t *kmgr)
{
    srv_mcp_kstate_t *k = *pk;
    if (!k)
        return;
    *pk = NULL;
    srv_kwait_cancel(&k->ready);
    srv_kernel_t *mk = *k->kernel_id && kmgr ? srv_kmgr_find(kmgr, k->kernel_id) : NULL;
    if (mk)
        srv_kmgr_delete(mk); /* the session's own: it goes with the session */
    zlistx_destroy(&k->waiting);
    zlistx_destroy(&k->runq);
    free(k);
}

const char *srv_mcp_kstate_kernel_id(const srv_mcp_kstate_t *k) { return k->kernel_id; }

static void s_unlist(zlistx_t *l, void *item)
{
    void *h = zlistx_find(l, item);
    if (h)
        zlistx_detach(l, h);
}

void srv_mcp_tool_forget(srv_mcp_call_t *c)
{
    srv_mcp_kstate_t *k = c->m ? srv_mcp_kstate(c->m) : NULL;
    if (k) {
        s_unlist(k->waiting, c);
        s_unlist(k->runq, c);
        if (k->running == c)
            k->running = NULL;
    }
    korch_exec_destroy(&c->ex); /* detached: the kernel finishes it on its own */
    korch_op_cancel(&c->op);
}

/* ------------------------------------------------------------ the kernel */

static void s_go(srv_mcp_call_t *c, srv_kernel_t *mk);

static void s_on_ready(srv_kernel_t *mk, const char *error, void *arg)
{
    srv_mcp_kstate_t *k = arg;
    k->ready = NULL;
    srv_mcp_call_t *c;
    if (!error && mk) {
        srv_mcp_call_t *first = zlistx_first(k->waiting);
        const srv_mcp_opts_t *o = first ? srv_mcp_opts(first->m) : NULL;
        if (o && o->on_kernel)
            o->on_kernel(mk, srv_mcp_id(first->m), o->on_kernel_arg);
    }
    while ((c = zlistx_detach(k->waiting, NULL))) {
        if (error)
            srv_mcp_tool_text(c, true, "[the kernel could not start: %.900s]", error);
        else
            s_go(c, mk);
    }
    if (error) {
        k->kernel_id[0] = 0; /* the server cleans a failed kernel up itself */
        k->had_kernel = false;
    }
}

/* Wait for mk to be ready with c (and whoever waits already). */
static void s_wait(srv_mcp_call_t *c, srv_kernel_t *mk)
{
    srv_mcp_kstate_t *k = srv_mcp_kstate(c->m);
    zlistx_add_end(k->waiting, c);
    if (!k->ready)
        k->ready = srv_kernel_when_ready(mk, s_on_ready, k);
    if (!k->ready) {
        s_unlist(k->waiting, c);
        srv_mcp_tool_text(c, true, "[the kernel is shutting down: call again to start a fresh one]");
    }
}

/* Start the session's kernel (spec, "" = the default) and wait for it with c. */
static void s_start(srv_mcp_call_t *c, const char *spec)
{
    srv_mcp_kstate_t *k = srv_mcp_kstate(c->m);
    const srv_mcp_opts_t *o = srv_mcp_opts(c->m);
    const char *name = spec && *spec ? spec : o->kernel && *o->kernel ? o->kernel : "python3";
    if (o->max_kernels > 0 && srv_kmgr_count(o->kmgr) >= (size_t)o->max_kernels) {
        srv_mcp_tool_text(c, true, "[cannot start a kernel: korch runs its limit of %d kernels already]",
                          o->max_kernels);
        return;
    }
    korch_err_t err = {0};
    srv_kernel_t *mk = srv_pool_take(o->pool, name);
    if (!mk)
        mk = srv_kmgr_start(o->kmgr, &(srv_kstart_t){.name = name, .cwd = o->cwd}, &err);
    if (!mk) {
        char shown[KORCH_ERR_MSG_MAX];
        korch_log_escape(shown, sizeof shown, err.msg, strlen(err.msg), 0);
        srv_mcp_tool_text(c, true, "[cannot start kernel '%s': %s]", name, shown);
        return;
    }
    snprintf(mk->owner, sizeof mk->owner, "%s", o->owner ? o->owner : ""); /* the session's user's kernel */
    snprintf(k->kernel_id, sizeof k->kernel_id, "%s", mk->id);
    snprintf(k->spec, sizeof k->spec, "%s", name);
    korch_info("mcp %.8s: kernel %.8s (%s) started for the session", srv_mcp_id(c->m), mk->id, name);
    s_wait(c, mk);
}

/* Go on with c once the session's kernel is ready (starting one if needed). */
static void s_with_kernel(srv_mcp_call_t *c)
{
    srv_mcp_kstate_t *k = srv_mcp_kstate(c->m);
    srv_kernel_t *mk = *k->kernel_id ? srv_kmgr_find(srv_mcp_opts(c->m)->kmgr, k->kernel_id) : NULL;
    if (!mk && *k->kernel_id) { /* deleted or culled meanwhile */
        k->kernel_id[0] = 0;
        k->had_kernel = true;
    }
    if (!mk) {
        s_start(c, k->spec);
        return;
    }
    if (srv_kernel_ready(mk) && !k->ready)
        s_go(c, mk);
    else
        s_wait(c, mk);
}

/* ------------------------------------------------------------ executions */

static void s_exec_next(srv_mcp_kstate_t *k);

/* The text a tool gives the model (new): the kernel's, made terminal-safe. */
static char *s_safe(const char *text) { return korch_termsafe_str(text ? text : "", 0); }

static void s_on_exec_done(korch_exec_t *ex, const korch_exec_result_t *r, void *arg)
{
    srv_mcp_call_t *c = arg;
    srv_mcp_kstate_t *k = srv_mcp_kstate(c->m);
    k->running = NULL;
    c->ex = NULL;
    if (c->tool == T_RUN) {
        char *text = NULL;
        json_t *images = NULL, *saved = NULL;
        const srv_mcp_opts_t *o = srv_mcp_opts(c->m);
        korch_feedback_opts_t fo = {.max_chars = o->max_chars, .vision = true};
        korch_feedback_build(r, &fo, &text, &images, &saved); /* the agent's view of it */
        char *safe = s_safe(text);
        json_t *content = json_array();
        if (c->phase == 2)
            json_array_append_new(content, json_pack("{s:s, s:s}", "type", "text", "text",
                                                     "[the session's kernel had gone (shut down or culled): this ran "
                                                     "in a fresh kernel; earlier variables are lost]"));
        json_array_append_new(content, json_pack("{s:s, s:s}", "type", "text", "text", safe ? safe : ""));
        size_t i;
        json_t *img;
        json_array_foreach(images, i, img) json_array_append_new(
            content, json_pack("{s:s, s:O, s:O}", "type", "image", "data", json_object_get(img, "data"), "mimeType",
                               json_object_get(img, "mime")));
        srv_mcp_result(c, json_pack("{s:o, s:b}", "content", content, "isError", r->status != KORCH_EXEC_OK));
        free(safe);
        free(text);
        json_decref(images);
        json_decref(saved);
    } else { /* list_files: the listing's one line of JSON, which the kernel may have forged */
        const char *out = NULL;
        size_t i;
        json_t *o;
        json_array_foreach(r->outputs, i, o) {
            const char *name = json_string_value(json_object_get(o, "name"));
            if (name && strcmp(name, "stdout") == 0)
                out = json_string_value(json_object_get(o, "text"));
        }
        json_t *j = out ? json_loads(out, JSON_DISABLE_EOF_CHECK, NULL) : NULL;
        korch_workdir_t *w = korch_workdir_new(NULL, NULL);
        json_t *scan = w && json_is_array(json_object_get(j, "files"))
                           ? korch_workdir_update(w, json_object_get(j, "files"),
                                                  json_is_true(json_object_get(j, "truncated")))
                           : NULL;
        json_t *list = scan ? korch_workdir_list(w) : NULL;
        if (!list)
            srv_mcp_tool_text(c, true, "[cannot list the files: the kernel did not answer with its listing (%s)]",
                              r->status == KORCH_EXEC_OK ? "no listing in its output" : korch_exec_status_name(r->status));
        else {
            korch_buf_t b = KORCH_BUF_INIT(1u << 20);
            json_t *f;
            korch_buf_addf(&b, "files", NULL, "%zu file(s) in the kernel's working directory%s:\n",
                           json_array_size(list), json_is_true(json_object_get(scan, "truncated")) ? " (cut)" : "");
            json_array_foreach(list, i, f) korch_buf_addf(&b, "files", NULL, "%s\t%lld bytes\n",
                                                          json_string_value(json_object_get(f, "path")),
                                                          (long long)json_integer_value(json_object_get(f, "size")));
            char *cut = korch_truncate_middle(b.p ? b.p : "", b.len, srv_mcp_opts(c->m)->max_chars ? srv_mcp_opts(c->m)->max_chars : 4000);
            char *safe = s_safe(cut);
            srv_mcp_result(c, json_pack("{s:[{s:s, s:s}], s:b}", "content", "type", "text", "text", safe ? safe : "",
                                        "isError", 0));
            free(safe);
            free(cut);
            korch_buf_free(&b);
        }
        json_decref(list);
        json_decref(scan);
        korch_workdir_destroy(&w);
        json_decref(j);
    }
    korch_exec_destroy(&ex);
    s_exec_next(k);
}

/* Send c's code to mk now. */
static void s_exec_start(srv_mcp_call_t *c, srv_kernel_t *mk)
{
    srv_mcp_kstate_t *k = srv_mcp_kstate(c->m);
    char *lister = NULL;
    const char *code;
    korch_exec_opts_t eo = {0};
    if (c->tool == T_RUN) {
        code = json_string_value(json_object_get(c->args, "code"));
        json_int_t t = json_integer_value(json_object_get(c->args, "timeout"));
        eo.timeout_ms = t > 0 && t < 86400 ? (int)(t * 1000) : 0;
    } else {
        code = lister = korch_workdir_lister_py(NULL);
        eo.no_store_history = true;
        eo.timeout_ms = 60000;
    }
    korch_exec_cb_t cb = {.on_done = s_on_exec_done, .arg = c};
    korch_err_t err = {0};
    k->running = c;
    c->ex = code ? korch_kernel_execute(mk->k, code, &eo, &cb, &err) : NULL;
    free(lister);
    if (!c->ex) {
        k->running = NULL;
        srv_mcp_tool_text(c, true, "[cannot run it: %.900s]", err.msg[0] ? err.msg : "out of memory");
        s_exec_next(k);
    }
}

/* The next queued execution, once the kernel is free. */
static void s_exec_next(srv_mcp_kstate_t *k)
{
    srv_mcp_call_t *c;
    while (!k->running && (c = zlistx_detach(k->runq, NULL))) {
        srv_kernel_t *mk = *k->kernel_id ? srv_kmgr_find(k->kmgr, k->kernel_id) : NULL;
        if (!mk || !srv_kernel_ready(mk)) {
            s_with_kernel(c); /* it went meanwhile: wait for the next one */
            continue;
        }
        s_exec_start(c, mk);
    }
}

static void s_exec(srv_mcp_call_t *c, srv_kernel_t *mk)
{
    srv_mcp_kstate_t *k = srv_mcp_kstate(c->m);
    k->kmgr = srv_mcp_opts(c->m)->kmgr;
    if (!k->running) {
        s_exec_start(c, mk);
        return;
    }
    if (zlistx_size(k->runq) >= MCP_MAX_QUEUED) {
        srv_mcp_tool_text(c, true, "[the kernel is busy with %zu calls queued: wait, or interrupt]",
                          zlistx_size(k->runq));
        return;
    }
    zlistx_add_end(k->runq, c);
}

void srv_mcp_tool_interrupt(srv_mcp_call_t *c)
{
    srv_mcp_kstate_t *k = srv_mcp_kstate(c->m);
    if (c->ex) { /* running: the kernel stops it, and its answer goes nowhere */
        srv_kernel_t *mk = *k->kernel_id ? srv_kmgr_find(srv_mcp_opts(c->m)->kmgr, k->kernel_id) : NULL;
        korch_err_t err = {0};
        if (mk && korch_kernel_interrupt(mk->k, &err) != KORCH_OK)
            korch_warn("mcp %.8s: cannot interrupt the kernel: %s", srv_mcp_id(c->m), err.msg);
        return;
    }
    srv_mcp_result(c, NULL); /* cancelled: nothing is sent, c goes */
}

/* ------------------------------------------------------------ files */

static bool s_path_ok(srv_mcp_call_t *c, const char **out)
{
    const char *path = json_string_value(json_object_get(c->args, "path"));
    if (!path || !korch_safe_relpath(path)) {
        char shown[300];
        korch_log_escape(shown, sizeof shown, path ? path : "", path ? strlen(path) : 0, 0);
        srv_mcp_tool_text(c, true, "[path '%s' is not a plain relative path inside the working directory (no "
                          "leading '/', no '..'): give one such as data.csv]", shown);
        return false;
    }
    *out = path;
    return true;
}

static korch_proc_t *s_proc(srv_mcp_call_t *c, srv_kernel_t *mk)
{
    korch_proc_t *proc = korch_kernel_proc(mk->k);
    if (!proc)
        srv_mcp_tool_text(c, true, "[the kernel has no process korch started (attached): no files]");
    return proc;
}

static void s_on_put(korch_rc_t rc, const korch_err_t *err, void *arg)
{
    srv_mcp_call_t *c = arg;
    c->op = NULL;
    const char *path = json_string_value(json_object_get(c->args, "path"));
    char *safe = s_safe(path);
    if (rc != KORCH_OK)
        srv_mcp_tool_text(c, true, "[cannot put '%s' into the working directory: %.900s]", safe ? safe : "",
                          err ? err->msg : korch_strerror(rc));
    else
        srv_mcp_tool_text(c, false, "uploaded '%s' (%lld bytes) into the kernel's working directory", safe ? safe : "",
                          (long long)json_integer_value(json_object_get(c->args, "_len")));
    free(safe);
}

static void s_upload(srv_mcp_call_t *c, srv_kernel_t *mk)
{
    const char *path;
    korch_proc_t *proc;
    if (!s_path_ok(c, &path) || !(proc = s_proc(c, mk)))
        return;
    json_t *text = json_object_get(c->args, "content"), *b64 = json_object_get(c->args, "content_base64");
    if (!json_is_string(text) == !json_is_string(b64)) {
        srv_mcp_tool_text(c, true, "[give the file as content (text) or as content_base64 (bytes), one of the two]");
        return;
    }
    size_t len = 0;
    unsigned char *bytes = NULL;
    const void *data;
    if (json_is_string(text)) {
        data = json_string_value(text);
        len = json_string_length(text);
    } else {
        bytes = korch_b64_decode(json_string_value(b64), json_string_length(b64), &len);
        if (!bytes) {
            srv_mcp_tool_text(c, true, "[content_base64 is not valid base64]");
            return;
        }
        data = bytes;
    }
    const srv_mcp_opts_t *o = srv_mcp_opts(c->m);
    korch_err_t err = {0};
    if (o->max_upload && len > o->max_upload)
        srv_mcp_tool_text(c, true, "[the file is %zu bytes, over korch's limit of %zu for one upload]", len,
                          o->max_upload);
    else {
        json_object_set_new(c->args, "_len", json_integer((json_int_t)len));
        c->op = korch_proc_put_file(proc, path, data, len, s_on_put, c, &err); /* data copied */
        if (!c->op)
            srv_mcp_tool_text(c, true, "[cannot put '%s' into the working directory: %.900s]", path, err.msg);
    }
    free(bytes);
}

/* An image MCP clients show as one. */
static bool s_image_mime(const char *mime)
{
    return strcmp(mime, "image/png") == 0 || strcmp(mime, "image/jpeg") == 0 || strcmp(mime, "image/gif") == 0 ||
           strcmp(mime, "image/webp") == 0;
}

/* "korch://files/" + path, percent-encoded (RFC 3986 unreserved and '/' kept). New string. */
static char *s_file_uri(const char *path)
{
    korch_buf_t b = KORCH_BUF_INIT(8192);
    korch_buf_adds(&b, "korch://files/", "uri", NULL);
    for (const unsigned char *p = (const unsigned char *)path; *p; p++) {
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || strchr("-._~/", *p))
            korch_buf_add(&b, p, 1, "uri", NULL);
        else
            korch_buf_addf(&b, "uri", NULL, "%%%02X", *p);
    }
    return korch_buf_strdup(&b);
}

static void s_on_get(korch_rc_t rc, const korch_err_t *err, char *data, size_t len, void *arg)
{
    srv_mcp_call_t *c = arg;
    c->op = NULL;
    const char *path = json_string_value(json_object_get(c->args, "path"));
    const char *mime = korch_mime_for(path);
    char *safe = s_safe(path);
    if (rc != KORCH_OK) {
        srv_mcp_tool_text(c, true, "[cannot read '%s': %.900s]", safe ? safe : "",
                          rc == KORCH_E_TOOBIG ? "it is over korch's limit of 16 MiB for one fetch"
                                               : err ? err->msg : korch_strerror(rc));
    } else if (s_image_mime(mime)) {
        char *b64 = korch_b64_encode((const unsigned char *)data, len);
        srv_mcp_result(c, json_pack("{s:[{s:s, s:s}, {s:s, s:s, s:s}], s:b}", "content", "type", "text", "text",
                                    safe ? safe : "", "type", "image", "data", b64 ? b64 : "", "mimeType", mime,
                                    "isError", 0));
        free(b64);
    } else if (!memchr(data, 0, len)) { /* text: cut as the model's view is, terminal-safe */
        size_t max = srv_mcp_opts(c->m)->max_chars ? srv_mcp_opts(c->m)->max_chars : 4000;
        char *cut = korch_truncate_middle(data, len, max);
        char *text = s_safe(cut);
        srv_mcp_result(c, json_pack("{s:[{s:s, s:s}], s:b}", "content", "type", "text", "text", text ? text : "",
                                    "isError", 0));
        free(text);
        free(cut);
    } else { /* bytes: an embedded resource */
        char *b64 = korch_b64_encode((const unsigned char *)data, len), *uri = s_file_uri(path);
        srv_mcp_result(c, json_pack("{s:[{s:s, s:{s:s, s:s, s:s}}], s:b}", "content", "type", "resource", "resource",
                                    "uri", uri ? uri : "korch://files/", "mimeType", mime, "blob", b64 ? b64 : "",
                                    "isError", 0));
        free(b64);
        free(uri);
    }
    free(safe);
    free(data);
}

static void s_fetch(srv_mcp_call_t *c, srv_kernel_t *mk)
{
    const char *path;
    korch_proc_t *proc;
    if (!s_path_ok(c, &path) || !(proc = s_proc(c, mk)))
        return;
    korch_err_t err = {0};
    c->op = korch_proc_get_file(proc, path, MCP_MAX_FILE, s_on_get, c, &err);
    if (!c->op)
        srv_mcp_tool_text(c, true, "[cannot read '%s': %.900s]", path, err.msg);
}

/* ------------------------------------------------------------ the rest */

static const char *s_language(srv_kernel_t *mk)
{
    json_t *info = korch_kernel_info(mk->k);
    const char *lang = json_string_value(json_object_get(json_object_get(info, "language_info"), "name"));
    return lang ? lang : "";
}

static void s_list(srv_mcp_call_t *c, srv_kernel_t *mk)
{
    if (strcmp(s_language(mk), "python") != 0) {
        char *lang = s_safe(s_language(mk));
        srv_mcp_tool_text(c, true, "[list_files lists from inside a Python kernel; this one runs %s: use run_code "
                          "to list the directory in its language]", lang && *lang ? lang : "another language");
        free(lang);
        return;
    }
    s_exec(c, mk);
}

static void s_interrupt(srv_mcp_call_t *c, srv_kernel_t *mk)
{
    korch_err_t err = {0};
    if (korch_kernel_interrupt(mk->k, &err) != KORCH_OK)
        srv_mcp_tool_text(c, true, "[cannot interrupt the kernel: %.900s]", err.msg);
    else
        srv_mcp_tool_text(c, false, "interrupted: code that was running stops (KeyboardInterrupt in Python); the "
                          "variables stay");
}

static void s_restart(srv_mcp_call_t *c, srv_kernel_t *mk)
{
    srv_mcp_kstate_t *k = srv_mcp_kstate(c->m);
    if (c->phase) {
        srv_mcp_tool_text(c, false, "the kernel (%s) is running afresh: every variable is gone, the files stay",
                          k->spec);
        return;
    }
    c->phase = 1;
    korch_err_t err = {0};
    if (srv_kmgr_restart(mk, &err) != KORCH_OK)
        srv_mcp_tool_text(c, true, "[cannot restart the kernel: %.900s]", err.msg);
    else
        s_wait(c, mk);
}

static void s_specs(srv_mcp_call_t *c)
{
    json_t *list = korch_kernelspec_list();
    srv_mcp_kstate_t *k = srv_mcp_kstate(c->m);
    const srv_mcp_opts_t *o = srv_mcp_opts(c->m);
    const char *def = o->kernel && *o->kernel ? o->kernel : "python3";
    const char *mine = *k->kernel_id ? k->spec : "";
    korch_buf_t b = KORCH_BUF_INIT(1u << 20);
    const char *name;
    json_t *v;
    json_object_foreach(list, name, v) {
        json_t *spec = json_object_get(v, "spec");
        korch_buf_addf(&b, "specs", NULL, "%s: %s (language %s)%s%s\n", name,
                       json_is_string(json_object_get(spec, "display_name"))
                           ? json_string_value(json_object_get(spec, "display_name"))
                           : name,
                       json_is_string(json_object_get(spec, "language"))
                           ? json_string_value(json_object_get(spec, "language"))
                           : "unknown",
                       strcmp(name, def) == 0 ? ", the default" : "",
                       strcmp(name, mine) == 0 ? ", this session's kernel" : "");
    }
    if (!b.len)
        korch_buf_adds(&b, "no kernelspecs found", "specs", NULL);
    char *safe = s_safe(b.p);
    srv_mcp_result(c, json_pack("{s:[{s:s, s:s}], s:b}", "content", "type", "text", "text", safe ? safe : "",
                                "isError", 0));
    free(safe);
    korch_buf_free(&b);
    json_decref(list);
}

static void s_go(srv_mcp_call_t *c, srv_kernel_t *mk)
{
    srv_mcp_kstate_t *k = srv_mcp_kstate(c->m);
    if (k->had_kernel && c->tool == T_RUN) { /* a fresh kernel replaced one that went: the model must know */
        k->had_kernel = false;
        c->phase = 2;
        korch_notice("mcp %.8s: the session's kernel went; a fresh one runs", srv_mcp_id(c->m));
    }
    if (c->tool == T_RUN || c->tool == T_LIST)
        c->tool == T_RUN ? s_exec(c, mk) : s_list(c, mk);
    else if (c->tool == T_UP)
        s_upload(c, mk);
    else if (c->tool == T_FETCH)
        s_fetch(c, mk);
    else if (c->tool == T_INT)
        s_interrupt(c, mk);
    else if (c->tool == T_RESTART)
        s_restart(c, mk);
    else
        srv_mcp_tool_text(c, true, "[internal error: tool %s has no kernel step]", c->tool);
}

bool srv_mcp_tool_call(srv_mcp_call_t *c)
{
    srv_mcp_kstate_t *k = srv_mcp_kstate(c->m);
    k->kmgr = srv_mcp_opts(c->m)->kmgr;
    if (!c->tool)
        return false;
    if (c->tool == T_SPECS) {
        s_specs(c);
        return true;
    }
    if (c->tool == T_RUN && !json_is_string(json_object_get(c->args, "code"))) {
        srv_mcp_tool_text(c, true, "[run_code needs code: a string]");
        return true;
    }
    json_t *timeout = json_object_get(c->args, "timeout");
    if (c->tool == T_RUN && timeout && !(json_is_integer(timeout) && json_integer_value(timeout) > 0)) {
        srv_mcp_tool_text(c, true, "[timeout must be a whole number of seconds, 1 or more]");
        return true;
    }
    if (c->tool == T_INT && !*k->kernel_id) {
        srv_mcp_tool_text(c, false, "no kernel is running yet (run_code starts one): nothing to interrupt");
        return true;
    }
    if (c->tool == T_RESTART) {
        json_t *jk = json_object_get(c->args, "kernel");
        if (jk && !json_is_string(jk)) {
            srv_mcp_tool_text(c, true, "[kernel must be a kernelspec's name (list_kernelspecs names them)]");
            return true;
        }
        const char *want = json_string_value(jk);
        if (want) {
            korch_err_t err = {0};
            korch_kernelspec_t *spec = korch_kernelspec_find(want, &err);
            if (!spec) {
                char shown[200];
                korch_log_escape(shown, sizeof shown, want, strlen(want), 0);
                srv_mcp_tool_text(c, true, "[no kernelspec '%s' here: list_kernelspecs names them]", shown);
                return true;
            }
            korch_kernelspec_destroy(&spec);
        }
        const char *have = *k->spec ? k->spec : srv_mcp_opts(c->m)->kernel ? srv_mcp_opts(c->m)->kernel : "python3";
        if (!*k->kernel_id || (want && strcmp(want, have) != 0)) {
            /* another kernelspec (or none yet): a new kernel, the old one shut down */
            srv_kernel_t *mk = *k->kernel_id ? srv_kmgr_find(k->kmgr, k->kernel_id) : NULL;
            srv_kwait_cancel(&k->ready);
            srv_mcp_call_t *w;
            while ((w = zlistx_detach(k->waiting, NULL)))
                srv_mcp_tool_text(w, true, "[the kernel was replaced by restart before it was ready: call again]");
            srv_kmgr_delete(mk);
            k->kernel_id[0] = 0;
            k->had_kernel = false;
            c->phase = 1;
            snprintf(k->spec, sizeof k->spec, "%s", want ? want : have);
            s_start(c, k->spec);
            return true;
        }
    }
    s_with_kernel(c);
    return true;
}
