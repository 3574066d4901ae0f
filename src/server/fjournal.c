/*  srv_fjournal: the server's uploads and deletes laid over the agent's
 *  listing of a confined work dir. See fjournal.h. */
#include "fjournal.h"
#include "korch/fsutil.h"
#include "korch/log.h"
#include "korch/path.h"
#include "korch/workdir.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_MAX_FILE (4u << 20)   /* fjournal.json, workdir.json: read at most this */

struct srv_fjournal {
    char path[PATH_MAX];        /* fjournal.json */
    char listing[PATH_MAX];     /* the agent's workdir.json */
    json_t *notes;              /* path -> {size, t, gone} */
};

static bool s_note_ok(const char *path, json_t *n)
{
    return korch_relpath_ok(path, PATH_MAX - 1, KORCH_RELPATH_NO_HIDDEN) && json_is_object(n) &&
           json_is_integer(json_object_get(n, "t")) && json_integer_value(json_object_get(n, "size")) >= 0;
}

srv_fjournal_t *srv_fjournal_new(const char *dir)
{
    srv_fjournal_t *j = calloc(1, sizeof *j);
    if (!j)
        return NULL;
    j->notes = json_object();
    if (!j->notes || korch_path_join(j->path, sizeof j->path, dir, "fjournal.json", NULL) != KORCH_OK ||
        korch_path_join(j->listing, sizeof j->listing, dir, "workdir.json", NULL) != KORCH_OK) {
        srv_fjournal_destroy(&j);
        return NULL;
    }
    size_t len = 0;
    char *text = korch_fs_read(j->path, S_MAX_FILE, true, &len, NULL);
    json_t *old = text ? json_loadb(text, len, 0, NULL) : NULL;
    free(text);
    const char *path;
    json_t *n;
    json_object_foreach(json_object_get(old, "notes"), path, n) {
        if (json_object_size(j->notes) < SRV_FJOURNAL_MAX && s_note_ok(path, n))
            json_object_set(j->notes, path, n);
    }
    json_decref(old);
    return j;
}

void srv_fjournal_destroy(srv_fjournal_t **pj)
{
    if (!pj || !*pj)
        return;
    json_decref((*pj)->notes);
    free(*pj);
    *pj = NULL;
}

static void s_save(srv_fjournal_t *j)
{
    json_t *doc = json_pack("{s:i, s:O}", "version", 1, "notes", j->notes);
    char *text = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
    korch_err_t err = {0};
    if (text && korch_write_file(j->path, text, strlen(text), &err) != KORCH_OK)
        korch_warn("cannot keep the file journal '%s': %s", j->path, err.msg);
    free(text);
    json_decref(doc);
}

/* The oldest note goes when the journal is full. */
static void s_make_room(srv_fjournal_t *j)
{
    while (json_object_size(j->notes) >= SRV_FJOURNAL_MAX) {
        const char *path, *oldest = NULL;
        json_int_t t0 = 0;
        json_t *n;
        json_object_foreach(j->notes, path, n) {
            json_int_t t = json_integer_value(json_object_get(n, "t"));
            if (!oldest || t < t0) {
                oldest = path;
                t0 = t;
            }
        }
        json_object_del(j->notes, oldest);
    }
}

static void s_note(srv_fjournal_t *j, const char *path, int64_t size, bool gone)
{
    if (!j || !path)
        return;
    json_object_del(j->notes, path);
    s_make_room(j);
    json_object_set_new(j->notes, path,
                        json_pack("{s:I, s:I, s:b}", "size", (json_int_t)size, "t",
                                  (json_int_t)korch_workdir_clock_ms(), "gone", gone));
    s_save(j);
}

void srv_fjournal_put(srv_fjournal_t *j, const char *path, int64_t size) { s_note(j, path, size, false); }
void srv_fjournal_delete(srv_fjournal_t *j, const char *path) { s_note(j, path, 0, true); }

json_t *srv_fjournal_listing(srv_fjournal_t *j)
{
    /* the agent's listing: {scanned_ms, files: [{path, size}]} (an older
       korch wrote the bare array, unstamped: every note is newer) */
    size_t len = 0;
    char *text = korch_fs_read(j->listing, S_MAX_FILE, true, &len, NULL);
    json_t *doc = text ? json_loadb(text, len, 0, NULL) : NULL;
    free(text);
    json_t *files = json_is_array(doc) ? doc : json_object_get(doc, "files");
    json_int_t scanned = json_integer_value(json_object_get(doc, "scanned_ms"));
    json_t *by = json_object();
    size_t i;
    json_t *f;
    json_array_foreach(files, i, f) {
        const char *path = json_string_value(json_object_get(f, "path"));
        json_t *size = json_object_get(f, "size");
        if (path && korch_relpath_ok(path, PATH_MAX - 1, KORCH_RELPATH_NO_HIDDEN) && json_is_integer(size) &&
            json_object_size(by) < 5000)
            json_object_set_new(by, path, json_pack("{s:s, s:O}", "path", path, "size", size));
    }
    json_decref(doc);
    bool stale = false;
    const char *path;
    json_t *n, *tmp;
    json_object_foreach_safe(j->notes, tmp, path, n) {
        if (json_integer_value(json_object_get(n, "t")) < scanned) { /* the walk saw it already */
            json_object_del(j->notes, path);
            stale = true;
        } else if (json_is_true(json_object_get(n, "gone")))
            json_object_del(by, path);
        else
            json_object_set_new(by, path, json_pack("{s:s, s:O}", "path", path, "size", json_object_get(n, "size")));
    }
    if (stale)
        s_save(j);
    json_t *out = json_array();
    json_object_foreach(by, path, n) json_array_append(out, n);
    korch_workdir_sort(out);
    json_decref(by);
    return out;
}
