/*  nbformat 4.5 notebooks (nbformat/v4/nbformat.v4.5.schema.json): cells
 *  have ids; source and text may be strings; outputs as the kernel gave them. */
#include "korch/notebook.h"
#include "korch/fsutil.h"
#include "korch/session.h"
#include "korch/uuid.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct korch_notebook {
    json_t *doc;
};

korch_notebook_t *korch_notebook_new(const char *kernel_name, const char *display_name, const char *language)
{
    korch_notebook_t *nb = calloc(1, sizeof *nb);
    if (!nb)
        return NULL;
    nb->doc = json_pack("{s:[], s:{s:{s:s, s:s, s:s}, s:{s:s}, s:{s:s}}, s:i, s:i}", "cells", "metadata",
                        "kernelspec", "name", kernel_name ? kernel_name : "python3", "display_name",
                        display_name ? display_name : "Python 3", "language", language ? language : "python",
                        "language_info", "name", language ? language : "python", "korch", "generator",
                        "korch " KORCH_VERSION, "nbformat", 4, "nbformat_minor", 5);
    if (!nb->doc) {
        free(nb);
        return NULL;
    }
    return nb;
}

void korch_notebook_destroy(korch_notebook_t **pnb)
{
    if (!pnb || !*pnb)
        return;
    json_decref((*pnb)->doc);
    free(*pnb);
    *pnb = NULL;
}

static json_t *s_cell_id(void)
{
    /* nbformat 4.5: unique within the notebook; not a secret, so without
       random bytes a counter does */
    static unsigned s_seq;
    char uuid[37];
    if (korch_uuid(uuid) != KORCH_OK)
        snprintf(uuid, sizeof uuid, "c%07x", __atomic_add_fetch(&s_seq, 1, __ATOMIC_RELAXED) & 0xfffffffu);
    return json_stringn(uuid, 8);
}

void korch_notebook_add_markdown(korch_notebook_t *nb, const char *text)
{
    json_array_append_new(json_object_get(nb->doc, "cells"),
                          json_pack("{s:s, s:o, s:{}, s:s}", "cell_type", "markdown", "id", s_cell_id(), "metadata",
                                    "source", text ? text : ""));
}

void korch_notebook_add_code_meta(korch_notebook_t *nb, const char *source, int execution_count, json_t *outputs,
                                  json_t *metadata)
{
    json_t *outs = json_is_array(outputs) ? json_deep_copy(outputs) : json_array();
    json_array_append_new(json_object_get(nb->doc, "cells"),
                          json_pack("{s:s, s:o, s:o, s:s, s:o, s:o}", "cell_type", "code", "id", s_cell_id(),
                                    "metadata", json_is_object(metadata) ? metadata : json_object(), "source",
                                    source ? source : "", "execution_count",
                                    execution_count >= 0 ? json_integer(execution_count) : json_null(), "outputs",
                                    outs));
    if (metadata && !json_is_object(metadata))
        json_decref(metadata);
}

void korch_notebook_add_code(korch_notebook_t *nb, const char *source, int execution_count, json_t *outputs)
{
    korch_notebook_add_code_meta(nb, source, execution_count, outputs, NULL);
}

void korch_notebook_set_language(korch_notebook_t *nb, json_t *language_info, const char *display_name)
{
    json_t *md = json_object_get(nb->doc, "metadata");
    const char *lang = json_string_value(json_object_get(language_info, "name"));
    if (json_is_object(language_info))
        json_object_set_new(md, "language_info", json_deep_copy(language_info));
    json_t *ks = json_object_get(md, "kernelspec");
    if (lang)
        json_object_set_new(ks, "language", json_string(lang));
    if (display_name && *display_name)
        json_object_set_new(ks, "display_name", json_string(display_name));
}

json_t *korch_notebook_json(korch_notebook_t *nb) { return nb->doc; }

korch_notebook_t *korch_notebook_from_json(json_t *doc)
{
    korch_notebook_t *nb = doc ? calloc(1, sizeof *nb) : NULL;
    if (!nb) {
        json_decref(doc);
        return NULL;
    }
    nb->doc = doc;
    return nb;
}

json_t *korch_notebook_last_meta(korch_notebook_t *nb)
{
    json_t *cells = json_object_get(nb->doc, "cells");
    return json_object_get(json_array_get(cells, json_array_size(cells) - 1), "metadata");
}

json_t *korch_notebook_cell_meta(const char *status, const char *note, int turn, int step)
{
    json_t *k = json_pack("{s:s}", "status", status ? status : "unknown");
    if (turn > 0)
        json_object_set_new(k, "turn", json_integer(turn));
    if (step > 0)
        json_object_set_new(k, "step", json_integer(step));
    if (note)
        json_object_set_new(k, "note", json_string(note));
    json_t *md = json_pack("{s:o}", "korch", k);
    /* nbclient: an error is expected in a "raises-exception" cell; a
       "skip-execution" cell is not run (one that hung or killed its kernel) */
    if (status && strcmp(status, "error") == 0)
        json_object_set_new(md, "tags", json_pack("[s]", "raises-exception"));
    else if (status && strcmp(status, "ok") != 0)
        json_object_set_new(md, "tags", json_pack("[s]", "skip-execution"));
    return md;
}

json_t *korch_notebook_clean(json_t *doc)
{
    json_t *clean = json_deep_copy(doc);
    json_t *cells = json_object_get(clean, "cells");
    size_t from = json_array_size(cells), dropped = 0;
    for (size_t i = 0; i < json_array_size(cells);) {
        json_t *c = json_array_get(cells, i);
        const char *type = json_string_value(json_object_get(c, "cell_type"));
        const char *st = json_string_value(json_object_get(json_object_get(json_object_get(c, "metadata"), "korch"),
                                                           "status"));
        if (type && strcmp(type, "code") == 0 && st && strcmp(st, "ok") != 0) {
            json_array_remove(cells, i);
            dropped++;
        } else
            i++;
    }
    json_t *md = json_object_get(clean, "metadata");
    json_t *k = json_object_get(md, "korch");
    if (!json_is_object(k)) {
        k = json_object();
        json_object_set_new(md, "korch", k);
    }
    json_object_set_new(k, "clean", json_pack("{s:I, s:I}", "from_cells", (json_int_t)from, "dropped",
                                              (json_int_t)dropped));
    return clean;
}

korch_rc_t korch_notebook_write(korch_notebook_t *nb, const char *path, korch_err_t *err)
{
    char *text = json_dumps(nb->doc, JSON_INDENT(1) | JSON_ENSURE_ASCII);
    if (!text)
        return korch_err_set(err, KORCH_E_NOMEM, "cannot write notebook '%s': out of memory", path);
    korch_fs_opts_t o = {.mode = 0644};
    korch_err_t e = {0};
    korch_rc_t rc = korch_fs_write(path, text, strlen(text), &o, &e);
    free(text);
    if (rc)
        return korch_err_set(err, rc, "cannot write notebook '%s': %s", path, e.msg);
    return KORCH_OK;
}
