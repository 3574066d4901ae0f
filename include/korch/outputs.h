/*  The outputs of one execution, in nbformat v4 shape, built from IOPub.
 *
 *  stream (consecutive chunks of the same name merged), execute_result and
 *  display_data (full mime bundle + metadata), error (ename, evalue,
 *  traceback). clear_output (also with wait=true) and update_display_data
 *  (by transient.display_id) are applied as a notebook front end does.
 *
 *  Memory is bounded, for every kind of output: stream text beyond its
 *  budget, rich outputs (display_data, execute_result, update_display_data:
 *  images, HTML, JSON) beyond theirs, and outputs beyond max_outputs are
 *  dropped and counted. A dropped rich output leaves a display_data in its
 *  place whose text/plain says what was dropped and which limit applied
 *  (so the notebook shows it and a model reads it); korch_outputs_finish
 *  adds a note for dropped stream text and outputs.
 *
 *  Budgets: per execution (the limits below) and what the caller's session
 *  still allows (korch_kernel keeps a running total per kernel).
 */
#ifndef KORCH_OUTPUTS_H
#define KORCH_OUTPUTS_H

#include <stdbool.h>
#include <stddef.h>
#include <jansson.h>

typedef struct korch_outputs korch_outputs_t;

typedef enum {
    KORCH_OUTPUT_NONE,      /* the message was not an output */
    KORCH_OUTPUT_NEW,       /* a new output at index */
    KORCH_OUTPUT_STREAM,    /* stream text appended to the output at index; the event's json is the chunk */
    KORCH_OUTPUT_UPDATE,    /* the output at index was replaced (update_display_data) */
    KORCH_OUTPUT_CLEAR,     /* all outputs were cleared */
} korch_output_event_t;

/* 0 for a limit = its default (8 MiB of stream text, 10000 outputs). The
   constructors return NULL only when out of memory. */
korch_outputs_t *korch_outputs_new(size_t max_stream_bytes, size_t max_outputs);

#define KORCH_OUTPUTS_RICH_DEFAULT (32u << 20)

typedef struct {
    size_t max_stream_bytes;        /* stream text per execution (0 = 8 MiB) */
    size_t max_outputs;             /* outputs per execution (0 = 10000) */
    size_t max_rich_bytes;          /* rich output bundles per execution (0 = 32 MiB) */
    bool session;                   /* the two below apply */
    size_t session_stream_left;     /* stream text the session still allows */
    size_t session_rich_left;       /* rich bytes the session still allows */
} korch_outputs_limits_t;

korch_outputs_t *korch_outputs_new_limits(const korch_outputs_limits_t *lim);
void korch_outputs_destroy(korch_outputs_t **self);

/* Apply one IOPub message (msg_type and its content, borrowed). Returns what
   happened; *out (borrowed, valid until the next call) is the output
   concerned and *index its position. */
korch_output_event_t korch_outputs_apply(korch_outputs_t *self, const char *msg_type, json_t *content,
                                         json_t **out, size_t *index);

/* Append the truncation notes, if anything was dropped. Idempotent. */
void korch_outputs_finish(korch_outputs_t *self);

/* The outputs so far: a borrowed JSON array. */
json_t *korch_outputs_json(korch_outputs_t *self);

/* Bytes of stream text and number of outputs dropped by the limits. */
size_t korch_outputs_dropped_bytes(const korch_outputs_t *self);
size_t korch_outputs_dropped_outputs(const korch_outputs_t *self);

/* Rich outputs dropped (count, and their bytes as the kernel sent them). */
size_t korch_outputs_dropped_rich(const korch_outputs_t *self);
size_t korch_outputs_dropped_rich_bytes(const korch_outputs_t *self);

/* What was kept: stream text and rich bytes (for session totals). */
size_t korch_outputs_kept_stream_bytes(const korch_outputs_t *self);
size_t korch_outputs_kept_rich_bytes(const korch_outputs_t *self);

/* The text one nbformat output shows as text: a stream's "text", an
   execute_result's or display_data's "text/plain" (a string or, as in a
   notebook on disk, an array of lines); NULL for anything else. Borrowed. */
json_t *korch_output_plain(json_t *output);

/* "1.5 MiB", "300 KiB", "12 bytes" into buf. */
void korch_outputs_human_bytes(size_t n, char *buf, size_t len);

#endif
