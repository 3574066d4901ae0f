/*  nbformat v4 outputs from IOPub messages (messaging spec "IOPub";
 *  nbformat v4 schema "output"). */
#include "korch/outputs.h"
#include "korch/buf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct korch_outputs {
    json_t *outputs;            /* array of nbformat outputs */
    json_t *display_ids;        /* array parallel to outputs: display_id string or null */
    json_t *chunk;              /* the last stream chunk handed out */
    bool clear_pending;         /* clear_output(wait=True) seen */
    bool finished;
    korch_buf_t sbuf;           /* text of the last output once a second chunk joined it (max_stream) */
    bool sopen;                 /* the last output is a stream later chunks may join */
    bool sbuf_valid;            /* its text lives in sbuf (else in the output itself) */
    size_t max_stream, max_outputs;
    size_t stream_bytes;        /* stream text kept */
    size_t dropped_bytes, dropped_outputs;
    size_t max_rich;            /* rich bytes this execution may keep (the smaller budget) */
    bool rich_by_session;       /* ... and that budget is the session's */
    bool stream_by_session;
    size_t rich_bytes;          /* rich bytes kept */
    size_t dropped_rich, dropped_rich_bytes;
};

korch_outputs_t *korch_outputs_new_limits(const korch_outputs_limits_t *lim)
{
    korch_outputs_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    korch_outputs_limits_t l = lim ? *lim : (korch_outputs_limits_t){0};
    self->outputs = json_array();
    self->display_ids = json_array();
    self->max_stream = l.max_stream_bytes ? l.max_stream_bytes : (8u << 20);
    self->max_outputs = l.max_outputs ? l.max_outputs : 10000;
    self->max_rich = l.max_rich_bytes ? l.max_rich_bytes : KORCH_OUTPUTS_RICH_DEFAULT;
    if (l.session && l.session_stream_left < self->max_stream) {
        self->max_stream = l.session_stream_left;
        self->stream_by_session = true;
    }
    if (l.session && l.session_rich_left < self->max_rich) {
        self->max_rich = l.session_rich_left;
        self->rich_by_session = true;
    }
    korch_buf_init(&self->sbuf, self->max_stream, NULL); /* it holds at most the stream text kept */
    if (!self->outputs || !self->display_ids)
        korch_outputs_destroy(&self);
    return self;
}

korch_outputs_t *korch_outputs_new(size_t max_stream_bytes, size_t max_outputs)
{
    return korch_outputs_new_limits(
        &(korch_outputs_limits_t){.max_stream_bytes = max_stream_bytes, .max_outputs = max_outputs});
}

void korch_outputs_human_bytes(size_t n, char *buf, size_t len)
{
    if (n >= (1u << 20))
        snprintf(buf, len, "%.1f MiB", (double)n / (1u << 20));
    else if (n >= 1024)
        snprintf(buf, len, "%.0f KiB", (double)n / 1024);
    else
        snprintf(buf, len, "%zu bytes", n);
}

void korch_outputs_destroy(korch_outputs_t **pself)
{
    if (!pself || !*pself)
        return;
    json_decref((*pself)->outputs);
    json_decref((*pself)->display_ids);
    json_decref((*pself)->chunk);
    korch_buf_free(&(*pself)->sbuf);
    free(*pself);
    *pself = NULL;
}

/* Write the growing stream's text into its output; appending to one JSON
   string per chunk would copy quadratically. */
static void s_flush_stream(korch_outputs_t *self)
{
    if (!self->sopen)
        return;
    size_t n = json_array_size(self->outputs);
    if (n && self->sbuf_valid)
        json_object_set_new(json_array_get(self->outputs, n - 1), "text",
                            json_stringn_nocheck(self->sbuf.p ? self->sbuf.p : "", self->sbuf.len));
    self->sopen = false;
    self->sbuf_valid = false;
    korch_buf_reset(&self->sbuf);
}

json_t *korch_output_plain(json_t *output)
{
    const char *type = json_string_value(json_object_get(output, "output_type"));
    if (type && strcmp(type, "stream") == 0)
        return json_object_get(output, "text");
    if (type && (strcmp(type, "execute_result") == 0 || strcmp(type, "display_data") == 0))
        return json_object_get(json_object_get(output, "data"), "text/plain");
    return NULL;
}

json_t *korch_outputs_json(korch_outputs_t *self)
{
    s_flush_stream(self);
    return self->outputs;
}
size_t korch_outputs_dropped_bytes(const korch_outputs_t *self) { return self->dropped_bytes; }
size_t korch_outputs_dropped_outputs(const korch_outputs_t *self) { return self->dropped_outputs; }
size_t korch_outputs_dropped_rich(const korch_outputs_t *self) { return self->dropped_rich; }
size_t korch_outputs_dropped_rich_bytes(const korch_outputs_t *self) { return self->dropped_rich_bytes; }
size_t korch_outputs_kept_stream_bytes(const korch_outputs_t *self) { return self->stream_bytes; }
size_t korch_outputs_kept_rich_bytes(const korch_outputs_t *self) { return self->rich_bytes; }

/* Bytes a JSON value holds (strings' lengths, a few per scalar): what a
   mime bundle costs in memory and on disk, near enough. */
static size_t s_json_bytes(json_t *v, int depth)
{
    if (json_is_string(v))
        return json_string_length(v);
    size_t n = 8;
    if (depth > 32)
        return n;
    const char *key;
    json_t *x;
    size_t i;
    if (json_is_object(v))
        json_object_foreach(v, key, x) n += strlen(key) + s_json_bytes(x, depth + 1);
    else if (json_is_array(v))
        json_array_foreach(v, i, x) n += s_json_bytes(x, depth + 1);
    return n;
}

/* The mime types of a bundle, "image/png, text/plain", into buf. */
static void s_mimes(json_t *data, char *buf, size_t len)
{
    const char *mime;
    json_t *v;
    size_t w = 0;
    buf[0] = 0;
    json_object_foreach(data, mime, v) {
        int n = snprintf(buf + w, len - w, "%s%s", w ? ", " : "", mime);
        if (n < 0 || (size_t)n >= len - w)
            break;
        w += (size_t)n;
    }
}

/* What stands for a dropped rich output: a display_data whose text/plain
   says what and why (stolen content of neither). */
static json_t *s_placeholder(korch_outputs_t *self, const char *type, json_t *data, size_t bytes)
{
    char size[32], lim[32], mimes[200], text[512];
    korch_outputs_human_bytes(bytes, size, sizeof size);
    korch_outputs_human_bytes(self->max_rich, lim, sizeof lim);
    s_mimes(data, mimes, sizeof mimes);
    snprintf(text, sizeof text,
             "[korch: %s output of %s%s%s%s dropped: korch keeps %s of images/HTML/rich output %s]", type, size,
             mimes[0] ? " (" : "", mimes, mimes[0] ? ")" : "", lim,
             self->rich_by_session ? "per session (the rest of this session's budget)" : "per execution");
    return json_pack("{s:s, s:{s:s}, s:{s:{s:I, s:s}}}", "output_type", "display_data", "data", "text/plain", text,
                     "metadata", "korch", "dropped_bytes", (json_int_t)bytes, "dropped_type", type);
}

/* May a bundle of bytes be kept? Counts it either way. */
static bool s_rich_fits(korch_outputs_t *self, size_t bytes)
{
    if (bytes <= self->max_rich - self->rich_bytes) {
        self->rich_bytes += bytes;
        return true;
    }
    self->dropped_rich++;
    self->dropped_rich_bytes += bytes;
    return false;
}

static void s_clear(korch_outputs_t *self)
{
    self->sopen = false;
    self->sbuf_valid = false;
    korch_buf_reset(&self->sbuf);
    json_array_clear(self->outputs);
    json_array_clear(self->display_ids);
    self->stream_bytes = 0;
    self->rich_bytes = 0; /* cleared outputs cost nothing any more (animations clear and redraw) */
    self->clear_pending = false;
}

static json_t *s_obj_or_empty(json_t *v) { return json_is_object(v) ? json_deep_copy(v) : json_object(); }

/* Append a new output (stolen). */
static korch_output_event_t s_append(korch_outputs_t *self, json_t *output, const char *display_id, json_t **out,
                                     size_t *index)
{
    if (!output)
        return KORCH_OUTPUT_NONE;
    s_flush_stream(self);
    if (json_array_size(self->outputs) >= self->max_outputs) {
        self->dropped_outputs++;
        json_decref(output);
        return KORCH_OUTPUT_NONE;
    }
    json_array_append_new(self->outputs, output);
    json_array_append_new(self->display_ids, display_id ? json_string(display_id) : json_null());
    *index = json_array_size(self->outputs) - 1;
    *out = output;
    return KORCH_OUTPUT_NEW;
}

static korch_output_event_t s_stream(korch_outputs_t *self, json_t *content, json_t **out, size_t *index)
{
    const char *name = json_string_value(json_object_get(content, "name"));
    json_t *jtext = json_object_get(content, "text");
    if (!name || !json_is_string(jtext))
        return KORCH_OUTPUT_NONE;
    const char *text = json_string_value(jtext);
    size_t len = json_string_length(jtext);
    /* text the wire layer already left out of a huge message */
    json_t *pre = json_object_get(content, "korch_dropped");
    if (json_is_integer(pre) && json_integer_value(pre) > 0)
        self->dropped_bytes += (size_t)json_integer_value(pre);
    size_t room = self->stream_bytes < self->max_stream ? self->max_stream - self->stream_bytes : 0;
    if (len > room) {
        /* Cut on a UTF-8 character boundary. */
        size_t keep = room;
        while (keep > 0 && ((unsigned char)text[keep] & 0xC0) == 0x80)
            keep--;
        self->dropped_bytes += len - keep;
        len = keep;
    }
    if (len == 0)
        return KORCH_OUTPUT_NONE;
    self->stream_bytes += len;
    /* Share the kernel's string unless it was cut: no copy of big output. */
    json_t *tv = len == json_string_length(jtext) ? json_incref(jtext) : json_stringn_nocheck(text, len);
    json_decref(self->chunk);
    self->chunk = json_pack("{s:s, s:s, s:O}", "output_type", "stream", "name", name, "text", tv);
    size_t n = json_array_size(self->outputs);
    json_t *last = n ? json_array_get(self->outputs, n - 1) : NULL;
    const char *ln = json_string_value(json_object_get(last, "name"));
    if (self->sopen && ln && strcmp(ln, name) == 0) {
        json_t *have = json_object_get(last, "text");
        if (!self->sbuf_valid) { /* the second chunk: from now on the text grows here */
            korch_buf_reset(&self->sbuf);
            self->sbuf_valid = korch_buf_add(&self->sbuf, json_string_value(have), json_string_length(have),
                                             "stream", NULL) == KORCH_OK;
        }
        /* (within max_stream: all the stream text kept is) */
        if (!self->sbuf_valid || korch_buf_add(&self->sbuf, text, len, "stream", NULL) != KORCH_OK) {
            json_decref(tv);
            return KORCH_OUTPUT_NONE;
        }
        json_decref(tv);
        *index = n - 1;
        *out = self->chunk;
        return KORCH_OUTPUT_STREAM;
    }
    json_t *o = json_pack("{s:s, s:s, s:o}", "output_type", "stream", "name", name, "text", tv);
    korch_output_event_t ev = s_append(self, o, NULL, out, index);
    if (ev == KORCH_OUTPUT_NEW) {
        *out = self->chunk;
        self->sopen = true;
        self->sbuf_valid = false;
        korch_buf_reset(&self->sbuf);
    }
    return ev;
}

static const char *s_display_id(json_t *content)
{
    return json_string_value(json_object_get(json_object_get(content, "transient"), "display_id"));
}

korch_output_event_t korch_outputs_apply(korch_outputs_t *self, const char *msg_type, json_t *content,
                                         json_t **out, size_t *index)
{
    *out = NULL;
    *index = 0;
    if (strcmp(msg_type, "clear_output") == 0) {
        if (json_is_true(json_object_get(content, "wait"))) {
            self->clear_pending = true;
            return KORCH_OUTPUT_NONE;
        }
        s_clear(self);
        return KORCH_OUTPUT_CLEAR;
    }
    if (strcmp(msg_type, "update_display_data") == 0) {
        const char *id = s_display_id(content);
        korch_output_event_t ev = KORCH_OUTPUT_NONE;
        json_t *pre = json_object_get(content, "korch_dropped");
        if (json_is_integer(pre) && json_integer_value(pre) > 0) { /* left out by the wire layer: say so */
            self->dropped_rich++;
            self->dropped_rich_bytes += (size_t)json_integer_value(pre);
            return s_append(self, s_placeholder(self, msg_type, NULL, (size_t)json_integer_value(pre)), NULL, out,
                            index);
        }
        if (!id)
            return ev;
        /* Update every output showing that display, keep their positions. */
        for (size_t i = 0; i < json_array_size(self->display_ids); i++) {
            const char *have = json_string_value(json_array_get(self->display_ids, i));
            if (!have || strcmp(have, id) != 0)
                continue;
            json_t *o = json_array_get(self->outputs, i);
            json_t *data = json_object_get(content, "data");
            size_t bytes = s_json_bytes(data, 0), had = s_json_bytes(json_object_get(o, "data"), 0);
            /* the old bundle's bytes come back to the budget */
            self->rich_bytes -= had < self->rich_bytes ? had : self->rich_bytes;
            if (!s_rich_fits(self, bytes)) {
                json_t *ph = s_placeholder(self, "update_display_data", data, bytes);
                json_object_set(o, "data", json_object_get(ph, "data"));
                json_object_set(o, "metadata", json_object_get(ph, "metadata"));
                json_decref(ph);
            } else {
                json_object_set_new(o, "data", s_obj_or_empty(data));
                json_object_set_new(o, "metadata", s_obj_or_empty(json_object_get(content, "metadata")));
            }
            *out = o;
            *index = i;
            ev = KORCH_OUTPUT_UPDATE;
        }
        return ev;
    }
    bool is_output = strcmp(msg_type, "stream") == 0 || strcmp(msg_type, "display_data") == 0 ||
                     strcmp(msg_type, "execute_result") == 0 || strcmp(msg_type, "error") == 0;
    if (!is_output)
        return KORCH_OUTPUT_NONE;
    if (self->clear_pending)
        s_clear(self);
    if (strcmp(msg_type, "stream") == 0)
        return s_stream(self, content, out, index);
    json_t *o = NULL;
    if (strcmp(msg_type, "error") != 0) {
        json_t *data = json_object_get(content, "data");
        size_t bytes = s_json_bytes(data, 0) + s_json_bytes(json_object_get(content, "metadata"), 0);
        json_t *pre = json_object_get(content, "korch_dropped"); /* the wire layer left it out already */
        if (json_is_integer(pre) && json_integer_value(pre) > 0) {
            bytes = (size_t)json_integer_value(pre);
            self->dropped_rich++;
            self->dropped_rich_bytes += bytes;
            return s_append(self, s_placeholder(self, msg_type, NULL, bytes), NULL, out, index);
        }
        if (!s_rich_fits(self, bytes))
            return s_append(self, s_placeholder(self, msg_type, data, bytes), s_display_id(content), out, index);
    }
    if (strcmp(msg_type, "display_data") == 0) {
        o = json_pack("{s:s, s:o, s:o}", "output_type", "display_data", "data",
                      s_obj_or_empty(json_object_get(content, "data")), "metadata",
                      s_obj_or_empty(json_object_get(content, "metadata")));
    } else if (strcmp(msg_type, "execute_result") == 0) {
        json_t *count = json_object_get(content, "execution_count");
        o = json_pack("{s:s, s:O, s:o, s:o}", "output_type", "execute_result", "execution_count",
                      json_is_integer(count) ? count : json_null(), "data",
                      s_obj_or_empty(json_object_get(content, "data")), "metadata",
                      s_obj_or_empty(json_object_get(content, "metadata")));
    } else {
        json_t *tb = json_object_get(content, "traceback");
        const char *ename = json_string_value(json_object_get(content, "ename"));
        const char *evalue = json_string_value(json_object_get(content, "evalue"));
        o = json_pack("{s:s, s:s, s:s, s:o}", "output_type", "error", "ename", ename ? ename : "", "evalue",
                      evalue ? evalue : "", "traceback", json_is_array(tb) ? json_deep_copy(tb) : json_array());
    }
    return s_append(self, o, s_display_id(content), out, index);
}

void korch_outputs_finish(korch_outputs_t *self)
{
    if (self->finished)
        return;
    self->finished = true;
    s_flush_stream(self);
    char note[256];
    if (self->dropped_bytes) {
        char lim[32];
        korch_outputs_human_bytes(self->max_stream, lim, sizeof lim);
        snprintf(note, sizeof note,
                 "\n[korch: output truncated: %zu more bytes of stream output dropped (korch keeps %s %s)]\n",
                 self->dropped_bytes, lim, self->stream_by_session ? "per session" : "per execution");
        json_array_append_new(self->outputs, json_pack("{s:s, s:s, s:s}", "output_type", "stream", "name", "stderr",
                                                       "text", note));
        json_array_append_new(self->display_ids, json_null());
    }
    if (self->dropped_outputs) {
        snprintf(note, sizeof note, "\n[korch: %zu more outputs dropped]\n", self->dropped_outputs);
        json_array_append_new(self->outputs, json_pack("{s:s, s:s, s:s}", "output_type", "stream", "name", "stderr",
                                                       "text", note));
        json_array_append_new(self->display_ids, json_null());
    }
}
