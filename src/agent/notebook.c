/*  nbformat 4.5 notebooks (nbformat/v4/nbformat.v4.5.schema.json): cells
 *  have ids; source and text may be strings; outputs as the kernel gave them. */
#include "korch/notebook.h"
#include "korch/fsutil.h"
#include "korch/session.h"
#include "korch/uuid.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* On disk (korch_notebook_keep_on_disk): doc's "cells" holds only the
   cells not written yet; the file holds the others, and ends its last
   cell at disk_end. Each write copies those bytes from the file as it is
   and adds the new cells, so memory holds one step's cells, not the
   session's. */
struct korch_notebook {
    json_t *doc;
    char *disk;                 /* the file the written cells are kept in (NULL: all in memory) */
    size_t disk_cells;          /* cells in it */
    off_t disk_end;             /* bytes of it up to the end of its last cell */
    dev_t dev;                  /* the file as last written, to notice another writer */
    ino_t ino;
    off_t size;
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
    free((*pnb)->disk);
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

json_t *korch_notebook_meta(korch_notebook_t *nb) { return json_object_get(nb->doc, "metadata"); }

void korch_notebook_keep_on_disk(korch_notebook_t *nb, const char *path)
{
    free(nb->disk);
    nb->disk = path ? strdup(path) : NULL;
    nb->disk_cells = 0;
    nb->disk_end = 0;
}

/* The cells the file holds (new array), or NULL when it no longer has them. */
static json_t *s_disk_cells(korch_notebook_t *nb)
{
    if (!nb->disk || !nb->disk_cells)
        return json_array();
    json_t *doc = json_load_file(nb->disk, 0, NULL);
    json_t *cells = json_incref(json_object_get(doc, "cells"));
    json_decref(doc);
    if (!json_is_array(cells) || json_array_size(cells) < nb->disk_cells) {
        json_decref(cells);
        return NULL;
    }
    while (json_array_size(cells) > nb->disk_cells)
        json_array_remove(cells, nb->disk_cells);
    return cells;
}

json_t *korch_notebook_doc(korch_notebook_t *nb)
{
    json_t *cells = s_disk_cells(nb);
    if (!cells)
        cells = json_array(); /* changed by another writer: what is in memory */
    json_t *doc = json_copy(nb->doc);
    json_array_extend(cells, json_object_get(nb->doc, "cells"));
    json_object_set_new(doc, "cells", cells);
    json_t *full = json_deep_copy(doc);
    json_decref(doc);
    return full;
}

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

/* Writing: the bytes json_dumps(doc, JSON_INDENT(1) | JSON_ENSURE_ASCII)
   gives, made piece by piece. A cell dumped alone is indented two more
   (JSON strings hold no raw newline: every '\n' is the dump's own). */
typedef struct {
    korch_notebook_t *nb;
    int from;                   /* the file with the written cells (-1: none) */
    off_t end;                  /* where the last cell ends in the new file */
} s_fill_t;

static korch_rc_t s_put(int fd, s_fill_t *f, const char *p, size_t len, korch_err_t *err)
{
    f->end += (off_t)len;
    return korch_fs_write_fd(fd, p, len, err);
}

static korch_rc_t s_put_cell(int fd, s_fill_t *f, json_t *cell, bool first, korch_err_t *err)
{
    char *text = json_dumps(cell, JSON_INDENT(1) | JSON_ENSURE_ASCII);
    if (!text)
        return korch_err_set(err, KORCH_E_NOMEM, "out of memory");
    korch_rc_t rc = s_put(fd, f, first ? "\n  " : ",\n  ", first ? 3 : 4, err);
    for (char *p = text, *nl; rc == KORCH_OK && *p; p = nl + 1) {
        nl = strchr(p, '\n');
        if (!nl) {
            rc = s_put(fd, f, p, strlen(p), err);
            break;
        }
        rc = s_put(fd, f, p, (size_t)(nl - p + 1), err);
        if (rc == KORCH_OK)
            rc = s_put(fd, f, "  ", 2, err);
    }
    free(text);
    return rc;
}

static korch_rc_t s_fill(int fd, void *arg, korch_err_t *err)
{
    s_fill_t *f = arg;
    korch_notebook_t *nb = f->nb;
    korch_rc_t rc = KORCH_OK;
    f->end = 0;
    if (f->from >= 0) { /* the file's bytes up to its last cell, as they are */
        char buf[65536];
        off_t left = nb->disk_end;
        while (rc == KORCH_OK && left > 0) {
            ssize_t n = pread(f->from, buf, left < (off_t)sizeof buf ? (size_t)left : sizeof buf, nb->disk_end - left);
            if (n <= 0)
                return korch_err_set(err, KORCH_E_IO, "cannot read '%s': %s", nb->disk,
                                     n < 0 ? strerror(errno) : "it is shorter than korch wrote it");
            rc = s_put(fd, f, buf, (size_t)n, err);
            left -= n;
        }
    } else
        rc = s_put(fd, f, "{\n \"cells\": [", 13, err);
    json_t *cells = json_object_get(nb->doc, "cells");
    size_t i;
    json_t *c;
    json_array_foreach(cells, i, c) {
        if (rc == KORCH_OK)
            rc = s_put_cell(fd, f, c, f->from < 0 && i == 0, err);
    }
    off_t end = f->end;
    bool none = f->from < 0 && json_array_size(cells) == 0;
    if (rc == KORCH_OK)
        rc = s_put(fd, f, none ? "],\n" : "\n ],\n", none ? 3 : 5, err);
    /* the rest of the document: "metadata", "nbformat", ... as one dump of it gives them */
    json_t *rest = json_copy(nb->doc);
    json_object_del(rest, "cells");
    char *text = rest ? json_dumps(rest, JSON_INDENT(1) | JSON_ENSURE_ASCII) : NULL;
    json_decref(rest);
    if (rc == KORCH_OK && !text)
        rc = korch_err_set(err, KORCH_E_NOMEM, "out of memory");
    if (rc == KORCH_OK)
        rc = s_put(fd, f, text + 2, strlen(text) - 2, err); /* after its "{\n" */
    free(text);
    f->end = end;
    return rc;
}

korch_rc_t korch_notebook_write(korch_notebook_t *nb, const char *path, korch_err_t *err)
{
    bool ours = nb->disk && strcmp(path, nb->disk) == 0;
    s_fill_t f = {nb, -1, 0};
    if (nb->disk && nb->disk_cells) {
        struct stat st;
        f.from = open(nb->disk, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (f.from >= 0 && (fstat(f.from, &st) != 0 || st.st_dev != nb->dev || st.st_ino != nb->ino ||
                            st.st_size != nb->size)) {
            close(f.from);
            f.from = -1;
        }
        if (f.from < 0) { /* changed by someone else: what it still holds, else what is in memory */
            json_t *was = s_disk_cells(nb);
            if (was) {
                json_array_extend(was, json_object_get(nb->doc, "cells"));
                json_object_set_new(nb->doc, "cells", was);
            }
            nb->disk_cells = 0;
            nb->disk_end = 0;
        }
    }
    korch_fs_opts_t o = {.mode = 0644};
    korch_err_t e = {0};
    korch_rc_t rc = korch_fs_write_fill(path, s_fill, &f, &o, &e);
    if (f.from >= 0)
        close(f.from);
    if (rc)
        return korch_err_set(err, rc, "cannot write notebook '%s': %s", path, e.msg);
    struct stat st;
    if (ours && stat(path, &st) == 0) { /* the new cells are on disk now: out of memory */
        nb->disk_cells += json_array_size(json_object_get(nb->doc, "cells"));
        nb->disk_end = f.end;
        nb->dev = st.st_dev;
        nb->ino = st.st_ino;
        nb->size = st.st_size;
        json_array_clear(json_object_get(nb->doc, "cells"));
    }
    return KORCH_OK;
}
