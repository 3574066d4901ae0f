/*  What the model is shown of an execution: text that fits its context and
 *  the charts, as images (vision models) or as a line naming the saved file.
 *
 *  Text: stdout/stderr and text/plain results in order; errors as
 *  "ename: evalue" plus the traceback without ANSI colours; a status line
 *  when the execution timed out or the kernel died. Long text keeps its head
 *  and its tail with a note of how much was cut in between.
 */
#ifndef KORCH_FEEDBACK_H
#define KORCH_FEEDBACK_H

#include <stdbool.h>
#include <stddef.h>
#include <jansson.h>
#include "korch/error.h"
#include "korch/kernel.h"

typedef struct {
    size_t max_chars;           /* per result; 0 = 4000 */
    bool vision;                /* attach images */
    const char *figures_dir;    /* charts are saved here as fig-N.png (NULL = not saved) */
    int *figure_counter;        /* in/out: the last N used */
} korch_feedback_opts_t;

/* From a finished execution: *text (new string), *images (new array of
   neutral IMAGE objects; empty without vision) and *saved (new array of the
   paths written; a chart that cannot be saved is logged and left out).
   Cannot fail. */
void korch_feedback_build(const korch_exec_result_t *r, const korch_feedback_opts_t *opts, char **text,
                          json_t **images, json_t **saved);

/* s (len bytes) cut to at most max bytes: the head, a note
   "\n[... N characters cut ...]\n", the tail; UTF-8 kept whole. New string. */
char *korch_truncate_middle(const char *s, size_t len, size_t max);

#endif
