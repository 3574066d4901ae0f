/*  An agent session's notebook: a valid nbformat 4.5 document built cell by
 *  cell (markdown for the user's and the model's words, code cells with their
 *  outputs and execution counts) and written atomically after every step. */
#ifndef KORCH_NOTEBOOK_H
#define KORCH_NOTEBOOK_H

#include <jansson.h>
#include "korch/error.h"

typedef struct korch_notebook korch_notebook_t;

/* A new, empty notebook for the given kernelspec (name, display name, language). */
korch_notebook_t *korch_notebook_new(const char *kernel_name, const char *display_name, const char *language);
void korch_notebook_destroy(korch_notebook_t **nb);

/* Append a markdown cell. */
void korch_notebook_add_markdown(korch_notebook_t *nb, const char *text);

/* Append a code cell; outputs (nbformat outputs) are copied; count < 0 = null. */
void korch_notebook_add_code(korch_notebook_t *nb, const char *source, int execution_count, json_t *outputs);

/* The same with cell metadata (stolen, may be NULL), e.g. {"korch": {"status": "died", "note": ...}}. */
void korch_notebook_add_code_meta(korch_notebook_t *nb, const char *source, int execution_count, json_t *outputs,
                                  json_t *metadata);

/* The metadata of a code cell korch ran (new object): {"korch": {"status",
   "turn", "step", "note"?}} and the tags nbclient honours, so that `jupyter
   nbconvert --execute` runs the notebook through: "raises-exception" on a
   cell that failed (status "error"), "skip-execution" on one that timed
   out, was aborted or killed its kernel (running it again would not end
   or would kill the kernel nbconvert runs). turn/step <= 0 are left out. */
json_t *korch_notebook_cell_meta(const char *status, const char *note, int turn, int step);

/* The clean export: a copy of doc (borrowed) without the dead ends - the
   code cells whose korch status is not "ok" and the markdown cells right
   before them that only narrate them (the model's text of that step) -
   with metadata.korch.clean = {"from_cells", "dropped"}. New document. */
json_t *korch_notebook_clean(json_t *doc);

/* A notebook holding doc (stolen), e.g. to write a clean export; NULL when doc is NULL. */
korch_notebook_t *korch_notebook_from_json(json_t *doc);

/* The last cell's metadata (borrowed), NULL when there is no cell. */
json_t *korch_notebook_last_meta(korch_notebook_t *nb);

/* The kernel's language_info (kernel_info_reply; copied) and the
   kernelspec's display name, in the notebook's metadata. */
void korch_notebook_set_language(korch_notebook_t *nb, json_t *language_info, const char *display_name);

/* The notebook's metadata (borrowed; changes go into the next write). */
json_t *korch_notebook_meta(korch_notebook_t *nb);

/* The whole document (new): with korch_notebook_keep_on_disk, the cells
   written so far are read back from the file. */
json_t *korch_notebook_doc(korch_notebook_t *nb);

/* Keep written cells on disk only: from now on, each write to path (an
   agent session's notebook.ipynb) moves the cells added since the last one
   out of memory, and the next write copies them from the file, so a long
   session's notebook costs one step's cells in memory. Writes to another
   path are whole copies that change nothing. NULL: all in memory again
   (with no cells written). korch_notebook_last_meta sees only the cells
   added since the last write. */
void korch_notebook_keep_on_disk(korch_notebook_t *nb, const char *path);

/* Write to path atomically (temp file + rename), the same bytes as
   json_dumps(doc, JSON_INDENT(1) | JSON_ENSURE_ASCII). */
korch_rc_t korch_notebook_write(korch_notebook_t *nb, const char *path, korch_err_t *err);

#endif
