/*  Execution results turned into what the model reads. */
#include "korch/path.h"
#include "korch/feedback.h"
#include "korch/buf.h"
#include "korch/log.h"
#include "korch/media.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What it gathers was bounded where it came from (kernel/outputs.c keeps at
   most max_output bytes per cell); this bound only stops a runaway. */
#define S_MAX ((size_t)1 << 30)

/* Out of memory drops text, as a cut output would: the model still gets a reply. */
static void s_add(korch_buf_t *s, const char *p, size_t n) { korch_buf_add(s, p, n, "feedback", NULL); }

static void s_adds(korch_buf_t *s, const char *p) { s_add(s, p, strlen(p)); }

/* Back off to the start of a UTF-8 character. */
static size_t s_char_start(const char *s, size_t i)
{
    while (i > 0 && ((unsigned char)s[i] & 0xC0) == 0x80)
        i--;
    return i;
}

char *korch_truncate_middle(const char *s, size_t len, size_t max)
{
    if (len <= max) {
        char *out = malloc(len + 1);
        if (out) {
            memcpy(out, s, len);
            out[len] = 0;
        }
        return out;
    }
    char note[96];
    /* The note's own length comes out of the budget; 60 % head, 40 % tail. */
    size_t budget = max > 80 ? max - 80 : max / 2;
    size_t head = s_char_start(s, budget * 6 / 10);
    size_t tail_start = s_char_start(s, len - (budget - head));
    if (tail_start < head)
        tail_start = head;
    snprintf(note, sizeof note, "\n[... %zu characters cut ...]\n", tail_start - head);
    korch_buf_t out = KORCH_BUF_INIT(S_MAX);
    s_add(&out, s, head);
    s_adds(&out, note);
    s_add(&out, s + tail_start, len - tail_start);
    return out.p;
}

/* Text the kernel sent, NULs shown as "^@": the result is a C string, and
   what followed a NUL would be lost to the reader. */
static void s_add_nul_safe(korch_buf_t *t, const char *p, size_t n)
{
    while (n) {
        const char *z = memchr(p, 0, n);
        size_t run = z ? (size_t)(z - p) : n;
        s_add(t, p, run);
        if (!z)
            break;
        s_adds(t, "^@");
        p += run + 1;
        n -= run + 1;
    }
}

static void s_add_text_value(korch_buf_t *t, json_t *v)
{
    if (json_is_string(v))
        s_add_nul_safe(t, json_string_value(v), json_string_length(v));
    else if (json_is_array(v)) { /* nbformat multiline strings */
        size_t i;
        json_t *line;
        json_array_foreach(v, i, line) s_add_nul_safe(t, json_string_value(line), json_string_length(line));
    }
}

static void s_newline(korch_buf_t *t)
{
    if (t->len && t->p[t->len - 1] != '\n')
        s_adds(t, "\n");
}

void korch_feedback_build(const korch_exec_result_t *r, const korch_feedback_opts_t *o, char **ptext,
                          json_t **pimages, json_t **psaved)
{
    korch_buf_t t = KORCH_BUF_INIT(S_MAX);
    json_t *images = json_array(), *saved = json_array();
    size_t max = o->max_chars ? o->max_chars : 4000;
    size_t i;
    json_t *out;
    s_adds(&t, "");
    json_array_foreach(r->outputs, i, out) {
        const char *type = json_string_value(json_object_get(out, "output_type"));
        if (!type)
            continue;
        if (strcmp(type, "stream") == 0) {
            s_add_text_value(&t, json_object_get(out, "text"));
            continue;
        }
        if (strcmp(type, "error") == 0) {
            s_newline(&t);
            korch_buf_t raw = KORCH_BUF_INIT(S_MAX);
            json_t *tb = json_object_get(out, "traceback");
            size_t k;
            json_t *line;
            json_array_foreach(tb, k, line) {
                s_add(&raw, json_string_value(line), json_string_length(line));
                s_adds(&raw, "\n");
            }
            char *plain = korch_strip_ansi(raw.p ? raw.p : "");
            if (plain && *plain)
                s_adds(&t, plain);
            else {
                s_adds(&t, json_string_value(json_object_get(out, "ename")));
                s_adds(&t, ": ");
                s_adds(&t, json_string_value(json_object_get(out, "evalue")));
                s_adds(&t, "\n");
            }
            free(plain);
            free(raw.p);
            continue;
        }
        /* execute_result / display_data */
        json_t *data = json_object_get(out, "data");
        bool had_image = false;
        const char *mime;
        json_t *v;
        json_object_foreach(data, mime, v) {
            const char *ext = korch_image_ext(mime);
            if (!ext || strcmp(ext, "svg") == 0 || !json_is_string(v))
                continue;
            had_image = true;
            size_t blen = 0;
            unsigned char *bytes = korch_b64_decode(json_string_value(v), json_string_length(v), &blen);
            int w = 0, h = 0;
            char dims[40] = "";
            if (bytes && korch_image_size(bytes, blen, &w, &h))
                snprintf(dims, sizeof dims, " %dx%d", w, h);
            int n = o->figure_counter ? ++*o->figure_counter : (int)json_array_size(saved) + 1;
            char name[64], path[4200], line[4400];
            snprintf(name, sizeof name, "fig-%d.%s", n, ext);
            korch_err_t e = {0};
            if (o->figures_dir && bytes) {
                if (korch_path_join(path, sizeof path, o->figures_dir, name, &e) == KORCH_OK &&
                    korch_write_file(path, bytes, blen, &e) == KORCH_OK)
                    json_array_append_new(saved, json_string(path));
                else /* the model still gets the chart; only the saved copy is missing */
                    korch_warn("cannot save chart %s: %s", name, e.msg);
            }
            s_newline(&t);
            if (o->figures_dir)
                snprintf(line, sizeof line, "[chart %d: %s%s saved as %s%s]\n", n, mime, dims, name,
                         o->vision ? ", attached" : "");
            else /* nothing saved (an MCP client keeps the image it is given) */
                snprintf(line, sizeof line, "[chart %d: %s%s%s]\n", n, mime, dims, o->vision ? ", attached" : "");
            s_adds(&t, line);
            if (o->vision) {
                /* the base64 without Jupyter's line breaks */
                char *clean = bytes ? korch_b64_encode(bytes, blen) : NULL;
                if (clean)
                    json_array_append_new(images, json_pack("{s:s, s:s, s:s}", "mime", mime, "data", clean, "name",
                                                            name));
                free(clean);
            }
            free(bytes);
        }
        json_t *plain = json_object_get(data, "text/plain");
        if (json_is_string(plain) && !(had_image && strncmp(json_string_value(plain), "<Figure", 7) == 0)) {
            s_newline(&t);
            s_add_text_value(&t, plain);
            s_adds(&t, "\n");
        } else if (!had_image && !json_is_string(plain) && json_object_size(data)) {
            s_newline(&t);
            json_object_foreach(data, mime, v) {
                char line[200];
                snprintf(line, sizeof line, "[%s output, %zu bytes]\n", mime, json_string_length(v));
                s_adds(&t, line);
            }
        }
    }
    char *body = korch_truncate_middle(t.p ? t.p : "", t.len, max);
    free(t.p);
    korch_buf_t final = KORCH_BUF_INIT(S_MAX);
    switch (r->status) {
    case KORCH_EXEC_OK:
        s_adds(&final, body && *body ? "" : "[ok, no output]\n");
        break;
    case KORCH_EXEC_ERROR:
        s_adds(&final, "[the code raised an error; the kernel's other variables are kept]\n");
        break;
    case KORCH_EXEC_ABORTED:
        s_adds(&final, "[not run: the kernel aborted it after an earlier error]\n");
        break;
    case KORCH_EXEC_TIMEOUT:
    case KORCH_EXEC_DIED: {
        char line[700];
        snprintf(line, sizeof line, "[%s%s]\n", r->detail,
                 r->restarted ? "; a fresh kernel is running: variables are lost, re-create what you need" : "");
        s_adds(&final, line);
        break;
    }
    default: break;
    }
    s_adds(&final, body ? body : "");
    free(body);
    *ptext = final.p;
    *pimages = images;
    *psaved = saved;
}
