/*  A kernel's messages made unable to run script in a Jupyter client.
 *
 *  What a kernel shows is rendered by JupyterLab, Notebook or korch's page
 *  in the person's own origin, and a Jupyter client trusts the outputs of
 *  a cell it ran: their <script> runs, application/javascript is
 *  evaluated. Once code from elsewhere (the agent, a model) has run in a
 *  kernel, that code can answer the person's next cell (IPython events,
 *  sys.displayhook, threads, update_display_data), so none of the
 *  kernel's messages may carry script any more. This rewrites them:
 *
 *    - a mime bundle (display_data, execute_result, update_display_data,
 *      inspect_reply, execute_reply's page payloads, an Output widget's
 *      outputs) keeps text/plain, PNG / JPEG / GIF / BMP / WebP,
 *      application/json and widget views as they are; text/html goes
 *      through the allow-list rewrite (korch/htmlsafe.h); image/svg+xml
 *      becomes an <img> of it (an image cannot run script); text/markdown
 *      and text/latex become their source as text/plain; script types
 *      (application/javascript ...) and every other rich type go. When
 *      anything that could run script went, the bundle's HTML ends with a
 *      visible note saying what went, why, and the hint (how to allow it);
 *    - widget comms: only the core widget modules (@jupyter-widgets/controls, base, output;
 *      ipywidgets 6's jupyter-js-widgets) and the widget comm targets are
 *      let through (a custom module is code the browser would load), without
 *      target_module (Notebook loads it as a script); HTML and HTMLMath
 *      values and descriptions go through the rewrite, in comm_open,
 *      updates and the control comm's update_states;
 *    - kernel_info_reply's help_links keep http(s) URLs only.
 *
 *  Streams, errors and statuses are text and pass as they are. One
 *  neutraliser per kernel: it remembers which comm is which widget model
 *  (from every kernel's comm_open, tainted or not, bounded). Not
 *  thread-safe: one thread per neutraliser.
 */
#ifndef KORCH_NEUTRALISE_H
#define KORCH_NEUTRALISE_H

#include <jansson.h>
#include <stdbool.h>

#include "korch/htmlsafe.h"

/* What went, beyond the KORCH_HS_* bits. */
enum {
    KORCH_NE_MARKDOWN = 1u << 12,   /* markdown shown as its source */
    KORCH_NE_LATEX = 1u << 13,      /* LaTeX shown as its source */
    KORCH_NE_MIME = 1u << 14,       /* another rich mime type */
    KORCH_NE_WIDGET = 1u << 15,     /* a widget of another module, or another comm target */
    KORCH_NE_SVG_IMG = 1u << 16,    /* an SVG shown as an image (quietly: it still shows) */
    KORCH_NE_EDITED = 1u << 17,     /* rewritten (HTML re-encoded), whether or not anything went */
    KORCH_NE__NOTED = KORCH_HS__NOTED | KORCH_NE_MARKDOWN | KORCH_NE_LATEX | KORCH_NE_MIME | KORCH_NE_WIDGET,
};

/* korch_neutralise_bundle's flags. */
enum {
    KORCH_NEUT_KEEP_SVG = 1u << 0,  /* leave image/svg+xml as it is (for a client that shows it as an image) */
};

/* A mime bundle (borrowed, changed in place) made inert. hint: the note's
   last sentence, how to allow it (NULL: none). Returns the bits of what
   went (0: the bundle is as it was). */
unsigned korch_neutralise_bundle(json_t *data, const char *hint, unsigned flags);

/* The note's HTML for what went (bits), with hint (NULL: none): a new
   string, NULL when out of memory. */
char *korch_neutralise_note(unsigned removed, const char *hint);

typedef struct korch_neutraliser korch_neutraliser_t;

/* hint as for korch_neutralise_bundle (copied; NULL: none). NULL when out
   of memory. */
korch_neutraliser_t *korch_neutraliser_new(const char *hint);
void korch_neutraliser_destroy(korch_neutraliser_t **n);

typedef enum {
    KORCH_NEUT_KEEP,        /* deliver the message as it is */
    KORCH_NEUT_CHANGED,     /* deliver *out instead (new content) */
    KORCH_NEUT_DROP,        /* deliver nothing (a comm of a module that is code) */
} korch_neut_rc_t;

/* A kernel message, of msg_type with content (borrowed, never changed).
   tainted false: only remembered (comms), always KEEP. Else KEEP, DROP, or
   CHANGED with *out the content to send instead (new). *removed (may be
   NULL) gets the bits of what went. */
korch_neut_rc_t korch_neutraliser_message(korch_neutraliser_t *n, bool tainted, const char *msg_type,
                                          const json_t *content, json_t **out, unsigned *removed);

#endif
