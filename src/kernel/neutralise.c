/*  A kernel's messages made unable to run script (korch/neutralise.h).
 *
 *  Where a Jupyter client runs script from a kernel (what this takes away):
 *    - JupyterLab 4 and Notebook 6.4 set a trusted text/html output as
 *      the output's innerHTML and run its <script> elements; on* handlers
 *      and javascript: links run in any HTML they render;
 *    - application/javascript is evaluated (IPython.display.Javascript,
 *      %%javascript);
 *    - Notebook 6.4 puts image/svg+xml inline (its script runs);
 *      JupyterLab renders it as an <img>;
 *    - markdown is turned into HTML without the sanitizer when trusted;
 *    - ipywidgets' HTML and HTMLMath views set their value as innerHTML
 *      (handlers run), a widget model names a module the widget manager
 *      loads (Notebook's require.js takes a URL for one), and Notebook's
 *      comm manager loads a comm_open's target_module;
 *    - JupyterLab puts kernel_info_reply's help_links in its Help menu.
 */
#include "korch/neutralise.h"
#include "korch/media.h"

#include <czmq.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MAX_HTML_OUT(n) ((n) * 6 + 64 * 1024) /* &quot; is the longest escape of one byte */
#define MAX_COMMS 20000                       /* widget comms remembered per kernel */

struct korch_neutraliser {
    char *hint;
    zhashx_t *models; /* comm_id -> widget _model_name (owned strings) */
};

/* ------------------------------------------------------------ HTML */

/* A string or a list of strings (nbformat's multiline form): the text, new. */
static char *s_text(const json_t *v, size_t *len)
{
    if (json_is_string(v)) {
        *len = json_string_length(v);
        char *s = malloc(*len + 1);
        if (s) {
            memcpy(s, json_string_value(v), *len);
            s[*len] = 0;
        }
        return s;
    }
    if (!json_is_array(v))
        return NULL;
    korch_buf_t b = KORCH_BUF_INIT(SIZE_MAX / 2);
    size_t i;
    json_t *line;
    json_array_foreach(v, i, line)
    {
        if (json_is_string(line) &&
            korch_buf_add(&b, json_string_value(line), json_string_length(line), "text", NULL) != KORCH_OK) {
            korch_buf_free(&b);
            return NULL;
        }
    }
    return korch_buf_release(&b, len);
}

/* html rewritten (new string, its length in *len) and what went in *bits;
   NULL when out of memory. */
static char *s_safe(const char *html, size_t n, size_t *len, unsigned *bits)
{
    korch_buf_t b = KORCH_BUF_INIT(MAX_HTML_OUT(n));
    if (korch_htmlsafe(html, n, &b, bits, NULL) != KORCH_OK) {
        korch_buf_free(&b);
        return NULL;
    }
    return korch_buf_release(&b, len);
}

char *korch_neutralise_note(unsigned removed, const char *hint)
{
    char what[512];
    korch_htmlsafe_what(removed, what, sizeof what);
    korch_buf_t b = KORCH_BUF_INIT(64 * 1024);
    korch_rc_t rc = korch_buf_adds(&b,
                                   "<div class=\"korch-neutralised\" style=\"border-left: 3px solid #c77700; "
                                   "padding: 4px 8px; margin: 4px 0; font-size: 12px; color: #5c3b00; "
                                   "background-color: #fff4e0\"><b>korch:</b> code from the agent ran in this "
                                   "kernel, so its outputs may not run script in your browser. Removed from "
                                   "this output: ",
                                   "note", NULL);
    const char *parts[] = {what,
                           (removed & KORCH_NE_MARKDOWN) ? "markdown (shown as its source)" : "",
                           (removed & KORCH_NE_LATEX) ? "LaTeX (shown as its source)" : "",
                           (removed & KORCH_NE_MIME) ? "rich output types that can carry script" : "",
                           (removed & KORCH_NE_WIDGET) ? "widgets whose code is not ipywidgets' own" : ""};
    bool first = true;
    for (size_t i = 0; i < sizeof parts / sizeof *parts && rc == KORCH_OK; i++) {
        if (!*parts[i])
            continue;
        if (!first)
            rc = korch_buf_adds(&b, ", ", "note", NULL);
        if (rc == KORCH_OK)
            rc = korch_buf_adds(&b, parts[i], "note", NULL);
        first = false;
    }
    if (rc == KORCH_OK)
        rc = korch_buf_adds(&b, ".", "note", NULL);
    if (rc == KORCH_OK && hint && *hint) {
        rc = korch_buf_adds(&b, " ", "note", NULL);
        if (rc == KORCH_OK)
            rc = korch_html_escape(hint, strlen(hint), &b, NULL);
    }
    if (rc == KORCH_OK)
        rc = korch_buf_adds(&b, "</div>", "note", NULL);
    if (rc != KORCH_OK) {
        korch_buf_free(&b);
        return NULL;
    }
    return korch_buf_release(&b, NULL);
}

/* ------------------------------------------------------------ bundles */

static bool s_one_of(const char *s, const char *const *list)
{
    for (; *list; list++)
        if (strcmp(s, *list) == 0)
            return true;
    return false;
}

/* Shown as they are: text, raster images (an <img> of them), JSON (a tree
   view), a widget view (its model is checked on its comm). */
static const char *const s_kept_types[] = {
    "text/plain", "image/png", "image/jpeg", "image/gif", "image/bmp", "image/webp", "application/json",
    "application/vnd.jupyter.widget-view+json", NULL};
static const char *const s_script_types[] = {"application/javascript", "text/javascript", "application/x-javascript",
                                             "application/ecmascript", "text/ecmascript", NULL};
static const char *const s_raster_types[] = {"image/png", "image/jpeg", "image/gif", NULL};

/* <img src="data:MIME;base64,B64"> (b64's whitespace dropped) to b. */
static korch_rc_t s_img(korch_buf_t *b, const char *mime, const char *b64, size_t n)
{
    korch_rc_t rc = korch_buf_addf(b, "html", NULL, "<img src=\"data:%s;base64,", mime);
    for (size_t i = 0; i < n && rc == KORCH_OK;) {
        size_t run = 0;
        while (i + run < n && strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=", b64[i + run]) &&
               b64[i + run])
            run++;
        if (run)
            rc = korch_buf_add(b, b64 + i, run, "html", NULL);
        i += run ? run : 1;
    }
    return rc == KORCH_OK ? korch_buf_adds(b, "\">", "html", NULL) : rc;
}

unsigned korch_neutralise_bundle(json_t *data, const char *hint, unsigned flags)
{
    if (!json_is_object(data))
        return 0;
    unsigned removed = 0;
    char *source = NULL; /* markdown or LaTeX, for text/plain */
    size_t source_len = 0;
    bool source_over = false; /* markdown: instead of the text/plain there is */
    char *svg = NULL;
    size_t svg_len = 0;
    const char *key;
    json_t *v, *tmp;
    json_object_foreach_safe(data, tmp, key, v)
    {
        if (s_one_of(key, s_kept_types))
            continue;
        if (strcmp(key, "text/html") == 0) {
            size_t n, out_len;
            unsigned bits = 0;
            char *html = s_text(v, &n);
            char *safe = html ? s_safe(html, n, &out_len, &bits) : NULL;
            if (!safe || out_len != n || memcmp(safe, html, n) != 0) {
                /* a rewrite that ran out of memory keeps nothing */
                json_object_set_new(data, key, safe ? json_stringn(safe, out_len) : json_string(""));
                removed |= bits | KORCH_NE_EDITED;
            }
            free(html);
            free(safe);
            continue;
        }
        if (strcmp(key, "image/svg+xml") == 0 && (flags & KORCH_NEUT_KEEP_SVG))
            continue;
        if (strcmp(key, "image/svg+xml") == 0) {
            free(svg);
            svg = s_text(v, &svg_len);
            removed |= KORCH_NE_SVG_IMG;
        } else if (strcmp(key, "text/markdown") == 0) {
            free(source);
            source = s_text(v, &source_len); /* more use than its repr ("<IPython.core.display.Markdown object>") */
            source_over = true;
            removed |= KORCH_NE_MARKDOWN;
        } else if (strcmp(key, "text/latex") == 0) {
            if (!source)
                source = s_text(v, &source_len);
            removed |= KORCH_NE_LATEX;
        } else
            removed |= s_one_of(key, s_script_types) ? KORCH_HS_SCRIPT : KORCH_NE_MIME;
        json_object_del(data, key);
    }
    if (source && (source_over || !json_object_get(data, "text/plain")))
        json_object_set_new(data, "text/plain", json_stringn(source, source_len));
    json_t *html = json_object_get(data, "text/html");
    korch_buf_t b = KORCH_BUF_INIT(SIZE_MAX / 2);
    korch_rc_t rc = KORCH_OK;
    if (svg && !html) { /* an image of it (an SVG image runs no script) */
        char *b64 = korch_b64_encode((const unsigned char *)svg, svg_len);
        rc = b64 ? s_img(&b, "image/svg+xml", b64, strlen(b64)) : KORCH_E_NOMEM;
        free(b64);
    }
    if (rc == KORCH_OK && (removed & KORCH_NE__NOTED)) {
        if (html)
            rc = korch_buf_add(&b, json_string_value(html), json_string_length(html), "html", NULL);
        else if (!b.len) { /* HTML now outranks the bundle's images: show them in it */
            for (const char *const *m = s_raster_types; *m && rc == KORCH_OK; m++) {
                json_t *img = json_object_get(data, *m);
                if (json_is_string(img))
                    rc = s_img(&b, *m, json_string_value(img), json_string_length(img));
            }
            json_t *plain = json_object_get(data, "text/plain");
            size_t n;
            char *text = !b.len && plain ? s_text(plain, &n) : NULL;
            if (text && rc == KORCH_OK) {
                rc = korch_buf_adds(&b, "<pre>", "html", NULL);
                if (rc == KORCH_OK)
                    rc = korch_html_escape(text, n, &b, NULL);
                if (rc == KORCH_OK)
                    rc = korch_buf_adds(&b, "</pre>", "html", NULL);
            }
            free(text);
        }
        char *note = rc == KORCH_OK ? korch_neutralise_note(removed, hint) : NULL;
        rc = note ? korch_buf_adds(&b, note, "html", NULL) : KORCH_E_NOMEM;
        free(note);
    }
    if (b.len && rc == KORCH_OK)
        json_object_set_new(data, "text/html", json_stringn(b.p, b.len));
    else if (rc != KORCH_OK)
        json_object_set_new(data, "text/html", json_string(""));
    korch_buf_free(&b);
    free(source);
    free(svg);
    return removed;
}

/* ------------------------------------------------------------ widgets */

static const char *const s_widget_modules[] = {"@jupyter-widgets/controls", "@jupyter-widgets/base",
                                               "@jupyter-widgets/output", "jupyter-js-widgets", NULL};
static const char *const s_comm_targets[] = {"jupyter.widget", "jupyter.widget.control", "jupyter.widget.version",
                                             NULL};

/* Model and view modules of a widget's state (or of update_states' entry
   keys) are ipywidgets' own. */
static bool s_module_ok(const json_t *v)
{
    return !v || json_is_null(v) || (json_is_string(v) && s_one_of(json_string_value(v), s_widget_modules));
}

/* A string member of obj rewritten as HTML; its bits. */
static unsigned s_html_member(json_t *obj, const char *key, const char *hint, bool note)
{
    json_t *v = json_object_get(obj, key);
    if (!json_is_string(v))
        return 0;
    size_t n = json_string_length(v), len;
    unsigned bits = 0;
    char *safe = s_safe(json_string_value(v), n, &len, &bits);
    if (safe && len == n && memcmp(safe, json_string_value(v), n) == 0) {
        free(safe);
        return 0;
    }
    korch_buf_t b = KORCH_BUF_INIT(SIZE_MAX / 2);
    if (safe)
        korch_buf_add(&b, safe, len, "html", NULL);
    char *n_html = note && (bits & KORCH_NE__NOTED) ? korch_neutralise_note(bits, hint) : NULL;
    if (n_html)
        korch_buf_adds(&b, n_html, "html", NULL);
    json_object_set_new(obj, key, json_stringn(b.p ? b.p : "", b.len));
    korch_buf_free(&b);
    free(n_html);
    free(safe);
    return bits | KORCH_NE_EDITED;
}

/* A widget's state (borrowed, changed in place) of model (NULL: unknown,
   taken as an HTML one). */
static unsigned s_widget_state(json_t *state, const char *model, const char *hint)
{
    if (!json_is_object(state))
        return 0;
    unsigned bits = 0;
    if (!model || strcmp(model, "HTMLModel") == 0 || strcmp(model, "HTMLMathModel") == 0)
        bits |= s_html_member(state, "value", hint, true);
    json_t *d = json_object_get(state, "description");
    if (json_is_string(d) && strpbrk(json_string_value(d), "<&"))
        bits |= s_html_member(state, "description", hint, false);
    json_t *outs = json_object_get(state, "outputs");
    size_t i;
    json_t *o;
    json_array_foreach(outs, i, o) bits |= korch_neutralise_bundle(json_object_get(o, "data"), hint, 0);
    return bits;
}

static void s_remember(korch_neutraliser_t *n, const char *comm_id, const char *model)
{
    if (!comm_id || !*comm_id)
        return;
    if (zhashx_size(n->models) >= MAX_COMMS)
        zhashx_purge(n->models); /* forgotten ones are taken as HTML: stricter, never looser */
    char *m = strdup(model ? model : "");
    if (m)
        zhashx_update(n->models, comm_id, m);
}

static const char *s_str(const json_t *obj, const char *key)
{
    return json_string_value(json_object_get(obj, key));
}

/* comm_open (content is a copy of ours). */
static korch_neut_rc_t s_comm_open(korch_neutraliser_t *n, bool tainted, json_t *c, unsigned *bits)
{
    const char *target = s_str(c, "target_name");
    json_t *state = json_object_get(json_object_get(c, "data"), "state");
    const char *model = s_str(state, "_model_name");
    if (target && strcmp(target, "jupyter.widget") == 0)
        s_remember(n, s_str(c, "comm_id"), model);
    if (!tainted)
        return KORCH_NEUT_KEEP;
    if (!target || !s_one_of(target, s_comm_targets) ||
        !s_module_ok(json_object_get(state, "_model_module")) || !s_module_ok(json_object_get(state, "_view_module"))) {
        *bits |= KORCH_NE_WIDGET;
        return KORCH_NEUT_DROP;
    }
    unsigned b = s_widget_state(state, model ? model : "", n->hint);
    if (json_object_get(c, "target_module")) {
        json_object_del(c, "target_module");
        b |= KORCH_NE_EDITED;
    }
    *bits |= b;
    return b ? KORCH_NEUT_CHANGED : KORCH_NEUT_KEEP;
}

/* comm_msg: an update of a model, or the control comm's update_states. */
static korch_neut_rc_t s_comm_msg(korch_neutraliser_t *n, bool tainted, json_t *c, unsigned *bits)
{
    json_t *data = json_object_get(c, "data");
    const char *method = s_str(data, "method");
    json_t *states = json_object_get(data, "states");
    if (method && strcmp(method, "update_states") == 0 && json_is_object(states)) {
        const char *id;
        json_t *st, *tmp;
        unsigned b = 0;
        json_object_foreach_safe(states, tmp, id, st)
        {
            const char *model = s_str(st, "model_name");
            s_remember(n, id, model);
            if (!tainted)
                continue;
            json_t *inner = json_object_get(st, "state");
            if (!s_module_ok(json_object_get(st, "model_module")) ||
                !s_module_ok(json_object_get(inner, "_view_module"))) {
                json_object_del(states, id);
                b |= KORCH_NE_WIDGET;
                continue;
            }
            b |= s_widget_state(inner, model ? model : "", n->hint);
        }
        *bits |= b;
        return b ? KORCH_NEUT_CHANGED : KORCH_NEUT_KEEP;
    }
    if (!tainted)
        return KORCH_NEUT_KEEP;
    json_t *state = json_object_get(data, "state");
    if (!state)
        return KORCH_NEUT_KEEP;
    const char *model = zhashx_lookup(n->models, s_str(c, "comm_id") ? s_str(c, "comm_id") : "");
    if (!s_module_ok(json_object_get(state, "_model_module")) || !s_module_ok(json_object_get(state, "_view_module"))) {
        *bits |= KORCH_NE_WIDGET;
        return KORCH_NEUT_DROP;
    }
    unsigned b = s_widget_state(state, model, n->hint);
    *bits |= b;
    return b ? KORCH_NEUT_CHANGED : KORCH_NEUT_KEEP;
}

/* ------------------------------------------------------------ messages */

/* An untainted kernel's comms: which is which widget model. */
static void s_track(korch_neutraliser_t *n, const char *msg_type, const json_t *c)
{
    if (strcmp(msg_type, "comm_close") == 0) {
        const char *id = s_str(c, "comm_id");
        if (id)
            zhashx_delete(n->models, id);
    } else if (strcmp(msg_type, "comm_open") == 0) {
        const char *target = s_str(c, "target_name");
        if (target && strcmp(target, "jupyter.widget") == 0)
            s_remember(n, s_str(c, "comm_id"),
                       s_str(json_object_get(json_object_get(c, "data"), "state"), "_model_name"));
    } else if (strcmp(msg_type, "comm_msg") == 0) {
        json_t *data = json_object_get(c, "data");
        const char *method = s_str(data, "method");
        if (method && strcmp(method, "update_states") == 0) {
            const char *id;
            json_t *st;
            json_object_foreach(json_object_get(data, "states"), id, st) s_remember(n, id, s_str(st, "model_name"));
        }
    }
}

korch_neutraliser_t *korch_neutraliser_new(const char *hint)
{
    korch_neutraliser_t *n = calloc(1, sizeof *n);
    if (!n)
        return NULL;
    n->hint = strdup(hint ? hint : "");
    n->models = zhashx_new();
    if (!n->hint || !n->models) {
        korch_neutraliser_destroy(&n);
        return NULL;
    }
    zhashx_set_destructor(n->models, (zhashx_destructor_fn *)zstr_free);
    return n;
}

void korch_neutraliser_destroy(korch_neutraliser_t **pn)
{
    korch_neutraliser_t *n = *pn;
    if (!n)
        return;
    zhashx_destroy(&n->models);
    free(n->hint);
    free(n);
    *pn = NULL;
}

/* help_links whose URL is not http(s) go. */
static unsigned s_help_links(json_t *c)
{
    json_t *links = json_object_get(c, "help_links");
    unsigned bits = 0;
    for (size_t i = json_array_size(links); i-- > 0;) {
        const char *url = s_str(json_array_get(links, i), "url");
        if (!url || (strncasecmp(url, "https://", 8) != 0 && strncasecmp(url, "http://", 7) != 0)) {
            json_array_remove(links, i);
            bits |= KORCH_HS_URL;
        }
    }
    return bits;
}

korch_neut_rc_t korch_neutraliser_message(korch_neutraliser_t *n, bool tainted, const char *msg_type,
                                          const json_t *content, json_t **out, unsigned *removed)
{
    static const char *const bundles[] = {"display_data", "execute_result", "update_display_data", "inspect_reply",
                                          NULL};
    static const char *const others[] = {"comm_open", "comm_msg", "comm_close", "execute_reply",
                                         "kernel_info_reply", NULL};
    unsigned bits = 0;
    *out = NULL;
    if (removed)
        *removed = 0;
    bool bundle = s_one_of(msg_type, bundles);
    if (!json_is_object(content) || (!bundle && !s_one_of(msg_type, others)))
        return KORCH_NEUT_KEEP;
    if (!tainted) { /* only remembered, without a copy */
        s_track(n, msg_type, content);
        return KORCH_NEUT_KEEP;
    }
    json_t *c = json_deep_copy(content);
    if (!c)
        return tainted ? KORCH_NEUT_DROP : KORCH_NEUT_KEEP; /* out of memory: nothing unchecked goes out */
    korch_neut_rc_t rc = KORCH_NEUT_KEEP;
    if (bundle) {
        bits = korch_neutralise_bundle(json_object_get(c, "data"), n->hint, 0);
        rc = bits ? KORCH_NEUT_CHANGED : KORCH_NEUT_KEEP;
    } else if (strcmp(msg_type, "comm_open") == 0)
        rc = s_comm_open(n, tainted, c, &bits);
    else if (strcmp(msg_type, "comm_msg") == 0)
        rc = s_comm_msg(n, tainted, c, &bits);
    else if (strcmp(msg_type, "comm_close") == 0) {
        const char *id = s_str(c, "comm_id");
        if (id)
            zhashx_delete(n->models, id);
    } else if (strcmp(msg_type, "execute_reply") == 0) {
        size_t i;
        json_t *p;
        json_array_foreach(json_object_get(c, "payload"), i, p) bits |= korch_neutralise_bundle(json_object_get(p, "data"), n->hint, 0);
        rc = bits ? KORCH_NEUT_CHANGED : KORCH_NEUT_KEEP;
    } else if (strcmp(msg_type, "kernel_info_reply") == 0) {
        bits = s_help_links(c);
        rc = bits ? KORCH_NEUT_CHANGED : KORCH_NEUT_KEEP;
    }
    if (removed)
        *removed = bits;
    if (rc == KORCH_NEUT_CHANGED)
        *out = c;
    else
        json_decref(c);
    return rc;
}
