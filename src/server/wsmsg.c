/*  Jupyter kernel messages on a websocket: the legacy JSON / binary formats
 *  and the v1.kernel.websocket.jupyter.org subprotocol (see wsmsg.h). */
#include "korch/wsmsg.h"
#include "korch/jsonstr.h"
#include "korch/buf.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PARTS 4096 /* buffers per message; jupyter never sends near this */

/* ------------------------------------------------------------------ frames */

struct korch_wsblob {
    int refs;
    zframe_t *frame;
};

korch_wsblob_t *korch_wsblob_new(zframe_t **frame)
{
    korch_wsblob_t *b = frame && *frame ? malloc(sizeof *b) : NULL;
    if (!b) {
        if (frame)
            zframe_destroy(frame);
        return NULL;
    }
    b->refs = 1;
    b->frame = *frame;
    *frame = NULL;
    return b;
}

korch_wsblob_t *korch_wsblob_ref(korch_wsblob_t *b)
{
    if (b)
        b->refs++;
    return b;
}

void korch_wsblob_unref(korch_wsblob_t **b)
{
    if (!b || !*b)
        return;
    if (--(*b)->refs == 0) {
        zframe_destroy(&(*b)->frame);
        free(*b);
    }
    *b = NULL;
}

size_t korch_wsblob_size(const korch_wsblob_t *b) { return b ? zframe_size(b->frame) : 0; }

const void *korch_wsblob_data(const korch_wsblob_t *b) { return b ? zframe_data(b->frame) : NULL; }

/* A frame with own bytes for all of a len-byte message but the blob_len
   bytes it refers to in blob. */
static korch_wsframe_t *s_frame_new(size_t headroom, size_t len, bool binary, korch_wsblob_t *blob, size_t blob_len)
{
    if (!blob)
        blob_len = 0;
    size_t own = len - blob_len;
    if (own > SIZE_MAX - headroom - sizeof(korch_wsframe_t) - 1)
        return NULL;
    korch_wsframe_t *f = malloc(sizeof *f + headroom + own + 1);
    if (!f)
        return NULL;
    f->refs = 1;
    f->binary = binary;
    f->len = len;
    f->data = f->buf + headroom;
    f->data[own] = 0;
    f->blob = korch_wsblob_ref(blob);
    f->blob_len = blob_len;
    f->head = 0;
    return f;
}

korch_wsframe_t *korch_wsframe_ref(korch_wsframe_t *f)
{
    if (f)
        f->refs++;
    return f;
}

void korch_wsframe_unref(korch_wsframe_t **f)
{
    if (!f || !*f)
        return;
    if (--(*f)->refs == 0) {
        korch_wsblob_unref(&(*f)->blob);
        free(*f);
    }
    *f = NULL;
}

void korch_wsframe_read(const korch_wsframe_t *f, size_t off, void *out, size_t n)
{
    unsigned char *o = out;
    size_t bsize = f->blob ? f->blob_len : 0;
    /* three stretches: own head, blob, own tail (head = everything without a blob) */
    size_t head = f->blob ? f->head : f->len;
    if (off < head && n) {
        size_t k = head - off < n ? head - off : n;
        memcpy(o, f->data + off, k);
        o += k, off += k, n -= k;
    }
    if (off < head + bsize && n) {
        size_t k = head + bsize - off < n ? head + bsize - off : n;
        memcpy(o, zframe_data(f->blob->frame) + (off - head), k);
        o += k, off += k, n -= k;
    }
    if (n)
        memcpy(o, f->data + (off - bsize), n);
}

/* ----------------------------------------------------------------- parsing */

static bool s_channel(const char *name, size_t len, korch_channel_t *ch)
{
    /* Clients may talk on shell, control and stdin; iopub is the kernel's. */
    static const struct { const char *name; korch_channel_t ch; } names[] = {
        {"shell", KORCH_CH_SHELL}, {"control", KORCH_CH_CONTROL}, {"stdin", KORCH_CH_STDIN}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strlen(names[i].name) == len && memcmp(names[i].name, name, len) == 0) {
            *ch = names[i].ch;
            return true;
        }
    return false;
}

/* A JSON object from len bytes; an empty part counts as {} (parent_header
   and metadata are often "{}" but some clients send nothing). */
static json_t *s_object(const void *data, size_t len, bool allow_empty)
{
    if (len == 0)
        return allow_empty ? json_object() : NULL;
    json_t *v = json_loadb(data, len, JSON_REJECT_DUPLICATES, NULL);
    if (v && !json_is_object(v)) {
        json_decref(v);
        v = NULL;
    }
    return v;
}

/* Take ownership of the four parts into a new message; checks the header. */
static korch_rc_t s_build(json_t *header, json_t *parent, json_t *metadata, json_t *content, korch_msg_t **out,
                          korch_err_t *err)
{
    korch_rc_t rc = KORCH_OK;
    if (!header || !parent || !metadata || !content) {
        rc = korch_err_set(err, KORCH_E_PROTOCOL, "a message part is missing or not a JSON object");
        goto fail;
    }
    const char *type = json_string_value(json_object_get(header, "msg_type"));
    if (!type || !*type) {
        rc = korch_err_set(err, KORCH_E_PROTOCOL, "the header has no msg_type");
        goto fail;
    }
    json_t *id = json_object_get(header, "msg_id");
    if (id && !json_is_string(id)) {
        rc = korch_err_set(err, KORCH_E_PROTOCOL, "the header's msg_id is not a string");
        goto fail;
    }
    korch_msg_t *m = korch_msg_new(type, NULL);
    if (!m) {
        rc = korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        goto fail;
    }
    json_decref(m->header);
    json_decref(m->parent_header);
    json_decref(m->metadata);
    json_decref(m->content);
    m->header = header;
    m->parent_header = parent;
    m->metadata = metadata;
    m->content = content;
    *out = m;
    return KORCH_OK;
fail:
    json_decref(header);
    json_decref(parent);
    json_decref(metadata);
    json_decref(content);
    return rc;
}

static json_t *s_take(json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return json_object();
    return json_is_object(v) ? json_incref(v) : NULL;
}

/* Legacy: {header, parent_header, metadata, content, channel} as JSON text. */
static korch_rc_t s_parse_json(const void *data, size_t len, korch_channel_t *ch, korch_msg_t **out,
                               korch_err_t *err)
{
    json_error_t jerr;
    json_t *root = json_loadb(data, len, 0, &jerr);
    if (!json_is_object(root)) {
        json_decref(root);
        return korch_err_set(err, KORCH_E_PROTOCOL, "not a JSON object: %s", root ? "wrong type" : jerr.text);
    }
    korch_rc_t rc;
    json_t *jch = json_object_get(root, "channel");
    const char *name = json_is_string(jch) ? json_string_value(jch) : NULL;
    /* jupyter_server: no channel means shell */
    if (!jch || json_is_null(jch))
        name = "shell";
    if (!name || !s_channel(name, strlen(name), ch)) {
        rc = korch_err_set(err, KORCH_E_PROTOCOL, "unknown channel '%.40s'", name ? name : "?");
        goto out;
    }
    json_t *h = json_object_get(root, "header");
    rc = s_build(json_is_object(h) ? json_incref(h) : NULL, s_take(root, "parent_header"), s_take(root, "metadata"),
                 s_take(root, "content"), out, err);
out:
    json_decref(root);
    return rc;
}

static uint64_t s_be32(const unsigned char *p)
{
    return ((uint64_t)p[0] << 24) | ((uint64_t)p[1] << 16) | ((uint64_t)p[2] << 8) | p[3];
}

static uint64_t s_le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* Check n offsets: non-decreasing, inside the frame, the first past the table. */
static bool s_offsets_ok(const uint64_t *off, size_t n, uint64_t table_end, uint64_t len)
{
    if (n == 0 || off[0] < table_end)
        return false;
    for (size_t i = 0; i < n; i++)
        if (off[i] > len || (i && off[i] < off[i - 1]))
            return false;
    return true;
}

static korch_rc_t s_add_buffers(korch_msg_t *m, const unsigned char *p, const uint64_t *off, size_t from, size_t n,
                                uint64_t len, korch_err_t *err)
{
    for (size_t i = from; i < n; i++) {
        uint64_t end = i + 1 < n ? off[i + 1] : len;
        if (zmsg_addmem(m->buffers, p + off[i], (size_t)(end - off[i])) != 0)
            return korch_err_set(err, KORCH_E_NOMEM, "out of memory");
    }
    return KORCH_OK;
}

/* Legacy binary: u32 BE nbufs, u32 BE offsets[nbufs], JSON, buffers. */
static korch_rc_t s_parse_legacy_binary(const unsigned char *p, size_t len, korch_channel_t *ch,
                                        korch_msg_t **out, korch_err_t *err)
{
    if (len < 4)
        return korch_err_set(err, KORCH_E_PROTOCOL, "binary frame of %zu bytes is too short", len);
    uint64_t n = s_be32(p);
    if (n < 1 || n > MAX_PARTS || 4 + 4 * n > len)
        return korch_err_set(err, KORCH_E_PROTOCOL, "binary frame: bad part count %llu", (unsigned long long)n);
    uint64_t off[MAX_PARTS];
    for (size_t i = 0; i < n; i++)
        off[i] = s_be32(p + 4 + 4 * i);
    if (!s_offsets_ok(off, (size_t)n, 4 + 4 * n, len))
        return korch_err_set(err, KORCH_E_PROTOCOL, "binary frame: offsets out of order or out of range");
    uint64_t jend = n > 1 ? off[1] : len;
    korch_rc_t rc = s_parse_json(p + off[0], (size_t)(jend - off[0]), ch, out, err);
    if (rc == KORCH_OK && (rc = s_add_buffers(*out, p, off, 1, (size_t)n, len, err)) != KORCH_OK)
        korch_msg_destroy(out);
    return rc;
}

/* v1: u64 LE n, u64 LE offsets[n], channel, header, parent, metadata, content, buffers. */
static korch_rc_t s_parse_v1(const unsigned char *p, size_t len, korch_channel_t *ch, korch_msg_t **out,
                             korch_err_t *err)
{
    if (len < 8)
        return korch_err_set(err, KORCH_E_PROTOCOL, "v1 frame of %zu bytes is too short", len);
    uint64_t n = s_le64(p);
    /* offsets: channel start, then the end of channel and of each part */
    if (n < 6 || n > MAX_PARTS || (len - 8) / 8 < n)
        return korch_err_set(err, KORCH_E_PROTOCOL, "v1 frame: bad offset count %llu", (unsigned long long)n);
    uint64_t off[MAX_PARTS];
    for (size_t i = 0; i < n; i++)
        off[i] = s_le64(p + 8 + 8 * i);
    if (!s_offsets_ok(off, (size_t)n, 8 + 8 * n, len))
        return korch_err_set(err, KORCH_E_PROTOCOL, "v1 frame: offsets out of order or out of range");
    if (!s_channel((const char *)p + off[0], (size_t)(off[1] - off[0]), ch))
        return korch_err_set(err, KORCH_E_PROTOCOL, "v1 frame: unknown channel '%.*s'",
                             (int)(off[1] - off[0] > 40 ? 40 : off[1] - off[0]), (const char *)p + off[0]);
    json_t *parts[4];
    for (int i = 0; i < 4; i++)
        parts[i] = s_object(p + off[1 + i], (size_t)(off[2 + i] - off[1 + i]), i > 0);
    korch_rc_t rc = s_build(parts[0], parts[1], parts[2], parts[3], out, err);
    /* parts 6.. are buffers; the last offset is the frame's end */
    if (rc == KORCH_OK && n > 6 && (rc = s_add_buffers(*out, p, off, 5, (size_t)n - 1, off[n - 1], err)) != KORCH_OK)
        korch_msg_destroy(out);
    return rc;
}

korch_rc_t korch_wsmsg_parse(korch_ws_proto_t proto, bool binary, const void *data, size_t len,
                             korch_channel_t *ch, korch_msg_t **out, korch_err_t *err)
{
    *out = NULL;
    if (!data && len)
        return korch_err_set(err, KORCH_E_PROTOCOL, "no data");
    if (proto == KORCH_WS_V1) {
        if (!binary)
            /* jupyter_server parses even text as v1; JupyterLab only sends binary */
            return korch_err_set(err, KORCH_E_PROTOCOL, "text frame on the v1 protocol");
        return s_parse_v1(data, len, ch, out, err);
    }
    return binary ? s_parse_legacy_binary(data, len, ch, out, err) : s_parse_json(data, len, ch, out, err);
}

/* ------------------------------------------------------------- serializing */

static void s_put_be32(unsigned char *p, uint64_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static void s_put_le64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* A growing buffer for what korch itself serializes (its size follows
   from a message that is already in memory and bounded). */
typedef struct {
    korch_buf_t buf;            /* util's bounded buffer (unbounded here: the input is) */
    bool oom;                   /* sticky: an add failed */
} s_buf_t;

#define S_BUF_INIT {.buf = KORCH_BUF_INIT(SIZE_MAX / 2)}

static void s_put(s_buf_t *b, const void *data, size_t n)
{
    if (!b->oom && n && korch_buf_add(&b->buf, data, n, "message", NULL) != KORCH_OK)
        b->oom = true;
}

/* A JSON string (RFC 8259 section 7: '"', '\' and controls escaped, the
   rest as is, UTF-8 included), copying the runs between escapes whole. */
static void s_put_string(s_buf_t *b, const char *str, size_t n)
{
    s_put(b, "\"", 1);
    size_t i = 0;
    while (i < n) {
        size_t run = i;
        while (run < n && (unsigned char)str[run] >= 0x20 && str[run] != '"' && str[run] != '\\')
            run++;
        s_put(b, str + i, run - i);
        if (run == n)
            break;
        unsigned char c = (unsigned char)str[run];
        char esc[8];
        switch (c) {
        case '"': memcpy(esc, "\\\"", 3); break;
        case '\\': memcpy(esc, "\\\\", 3); break;
        case '\b': memcpy(esc, "\\b", 3); break;
        case '\f': memcpy(esc, "\\f", 3); break;
        case '\n': memcpy(esc, "\\n", 3); break;
        case '\r': memcpy(esc, "\\r", 3); break;
        case '\t': memcpy(esc, "\\t", 3); break;
        default: snprintf(esc, sizeof esc, "\\u%04x", c); break;
        }
        s_put(b, esc, strlen(esc));
        i = run + 1;
    }
    s_put(b, "\"", 1);
}

static void s_put_value(s_buf_t *b, const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        const char *key;
        json_t *val;
        bool first = true;
        s_put(b, "{", 1);
        json_object_foreach((json_t *)v, key, val) {
            if (!first)
                s_put(b, ",", 1);
            first = false;
            s_put_string(b, key, strlen(key));
            s_put(b, ":", 1);
            s_put_value(b, val);
        }
        s_put(b, "}", 1);
        break;
    }
    case JSON_ARRAY:
        s_put(b, "[", 1);
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i)
                s_put(b, ",", 1);
            s_put_value(b, json_array_get(v, i));
        }
        s_put(b, "]", 1);
        break;
    case JSON_STRING: s_put_string(b, json_string_value(v), json_string_length(v)); break;
    default: {
        /* numbers, true, false, null: short; jansson formats reals its way */
        char *js = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
        if (!js)
            b->oom = true;
        else
            s_put(b, js, strlen(js));
        free(js);
        break;
    }
    }
}

/* value (borrowed) as compact JSON into a new malloc'ed string, *len its
   length; NULL when out of memory. What json_dumps(JSON_COMPACT |
   JSON_ENCODE_ANY) writes, but long strings are copied in runs rather
   than a character at a time. */
static char *s_dump(const json_t *value, size_t *len)
{
    s_buf_t b = S_BUF_INIT;
    if (!value)
        return NULL;
    s_put_value(&b, value);
    if (b.oom || !b.buf.p) {
        korch_buf_free(&b.buf);
        return NULL;
    }
    if (len)
        *len = b.buf.len;
    return b.buf.p;
}

/* Part i as given, "{}" when empty; the content may be a blob. */
static void s_part(const korch_wsparts_t *p, int i, const void **data, size_t *len)
{
    *data = p->len[i] ? p->data[i] : "{}";
    *len = p->len[i] ? p->len[i] : 2;
}

static size_t s_part_len(const korch_wsparts_t *p, int i)
{
    if (i == 3 && p->content)
        return p->content_len + p->len[3];
    return p->len[i] ? p->len[i] : 2;
}

static size_t s_buffers_total(zmsg_t *buffers, size_t *count)
{
    size_t total = 0;
    *count = buffers ? zmsg_size(buffers) : 0;
    for (zframe_t *fr = buffers ? zmsg_first(buffers) : NULL; fr; fr = zmsg_next(buffers))
        total += zframe_size(fr);
    return total;
}

/* Writes a frame front to back; pos counts the message's bytes, the blob's
   included, own only the frame's own. */
typedef struct {
    korch_wsframe_t *f;
    size_t pos, own;
} s_emit_t;

static void s_emit(s_emit_t *e, const void *data, size_t n)
{
    memcpy(e->f->data + e->own, data, n);
    e->own += n;
    e->pos += n;
}

static void s_emit_part(s_emit_t *e, const korch_wsparts_t *p, int i)
{
    if (i == 3 && p->content) {
        e->f->head = e->own;
        e->pos += p->content_len;
        if (p->len[3])
            s_emit(e, p->data[3], p->len[3]);
        return;
    }
    const void *d;
    size_t n;
    s_part(p, i, &d, &n);
    s_emit(e, d, n);
}

/* Legacy: {"header":H,"parent_header":P,"metadata":M,"content":C,"channel":...,
   "msg_id":...,"msg_type":...,"buffers":[]} assembled from the parts; with
   buffers, the binary frame (u32 BE count, offsets, that JSON without
   "buffers", the buffers). */
static korch_wsframe_t *s_ser_legacy(korch_channel_t ch, const korch_wsparts_t *p, size_t headroom)
{
    static const char *const keys[4] = {"{\"header\":", ",\"parent_header\":", ",\"metadata\":", ",\"content\":"};
    size_t nbuf, btotal = s_buffers_total(p->buffers, &nbuf);
    s_buf_t tail = S_BUF_INIT;
    s_put(&tail, ",\"channel\":", 11);
    const char *chname = korch_channel_name(ch);
    s_put_string(&tail, chname, strlen(chname));
    s_put(&tail, ",\"msg_id\":", 10);
    s_put_string(&tail, p->msg_id ? p->msg_id : "", p->msg_id ? strlen(p->msg_id) : 0);
    s_put(&tail, ",\"msg_type\":", 12);
    s_put_string(&tail, p->msg_type ? p->msg_type : "", p->msg_type ? strlen(p->msg_type) : 0);
    if (!nbuf)
        s_put(&tail, ",\"buffers\":[]", 13);
    s_put(&tail, "}", 1);
    if (tail.oom) {
        korch_buf_free(&tail.buf);
        return NULL;
    }
    size_t jlen = tail.buf.len;
    for (int i = 0; i < 4; i++)
        jlen += strlen(keys[i]) + s_part_len(p, i);
    /* nbufs counts the JSON as part 0 */
    size_t n = nbuf + 1, table = nbuf ? 4 + 4 * n : 0;
    korch_wsframe_t *f = s_frame_new(headroom, table + jlen + btotal, nbuf > 0, p->content, p->content_len);
    if (f) {
        s_emit_t e = {.f = f};
        if (nbuf) {
            unsigned char t[4];
            s_put_be32(t, n);
            s_emit(&e, t, 4);
            s_put_be32(t, table);
            s_emit(&e, t, 4);
            size_t at = table + jlen;
            for (zframe_t *fr = zmsg_first(p->buffers); fr; fr = zmsg_next(p->buffers)) {
                s_put_be32(t, at);
                s_emit(&e, t, 4);
                at += zframe_size(fr);
            }
        }
        for (int i = 0; i < 4; i++) {
            s_emit(&e, keys[i], strlen(keys[i]));
            s_emit_part(&e, p, i);
        }
        s_emit(&e, tail.buf.p, tail.buf.len);
        for (zframe_t *fr = nbuf ? zmsg_first(p->buffers) : NULL; fr; fr = zmsg_next(p->buffers))
            s_emit(&e, zframe_data(fr), zframe_size(fr));
    }
    korch_buf_free(&tail.buf);
    return f;
}

/* v1: u64 LE n, u64 LE offsets[n], channel, the four parts, buffers. */
static korch_wsframe_t *s_ser_v1(korch_channel_t ch, const korch_wsparts_t *p, size_t headroom)
{
    const char *chname = korch_channel_name(ch);
    size_t clen = strlen(chname), nbuf, btotal = s_buffers_total(p->buffers, &nbuf);
    size_t n = 2 + 4 + nbuf; /* start, end of channel, end of each part */
    size_t total = 8 + 8 * n + clen + btotal;
    for (int k = 0; k < 4; k++)
        total += s_part_len(p, k);
    korch_wsframe_t *f = s_frame_new(headroom, total, true, p->content, p->content_len);
    if (!f)
        return NULL;
    s_emit_t e = {.f = f};
    unsigned char t[8];
    s_put_le64(t, n);
    s_emit(&e, t, 8);
    size_t at = 8 + 8 * n;
    s_put_le64(t, at);
    s_emit(&e, t, 8);
    at += clen;
    s_put_le64(t, at);
    s_emit(&e, t, 8);
    for (int k = 0; k < 4; k++) {
        at += s_part_len(p, k);
        s_put_le64(t, at);
        s_emit(&e, t, 8);
    }
    for (zframe_t *fr = nbuf ? zmsg_first(p->buffers) : NULL; fr; fr = zmsg_next(p->buffers)) {
        at += zframe_size(fr);
        s_put_le64(t, at);
        s_emit(&e, t, 8);
    }
    s_emit(&e, chname, clen);
    for (int k = 0; k < 4; k++)
        s_emit_part(&e, p, k);
    for (zframe_t *fr = nbuf ? zmsg_first(p->buffers) : NULL; fr; fr = zmsg_next(p->buffers))
        s_emit(&e, zframe_data(fr), zframe_size(fr));
    return f;
}

/* ------------------------------------------------------ cutting streams */

static const unsigned char *s_ws(const unsigned char *p, const unsigned char *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    return p;
}

/* The JSON scanner (korch/jsonstr.h) on unsigned bytes. */
static const unsigned char *s_string_end(const unsigned char *p, const unsigned char *end)
{
    return (const unsigned char *)korch_jsonstr_end((const char *)p, (const char *)end);
}

static size_t s_escape(const unsigned char *q, const unsigned char *end, size_t *elen)
{
    return korch_jsonstr_escape((const char *)q, (const char *)end, elen);
}

bool korch_wsmsg_stream_cut(const void *content, size_t len, size_t max, size_t *keep, size_t *dropped)
{
    const unsigned char *start = content, *end = start + len, *p = s_ws(start, end);
    const unsigned char *vs = NULL, *ve = NULL;
    if (p >= end || *p++ != '{')
        return false;
    for (;;) { /* "key": "value" members; text must be the last */
        p = s_ws(p, end);
        if (p >= end || *p != '"')
            return false;
        const unsigned char *ks = p + 1, *ke = s_string_end(ks, end);
        if (!ke)
            return false;
        p = s_ws(ke + 1, end);
        if (p >= end || *p != ':')
            return false;
        p = s_ws(p + 1, end);
        if (p >= end || *p != '"')
            return false;
        vs = p + 1;
        if (!(ve = s_string_end(vs, end)))
            return false;
        bool text = ke - ks == 4 && memcmp(ks, "text", 4) == 0;
        p = s_ws(ve + 1, end);
        if (p < end && *p == ',' && !text) {
            p++;
            continue;
        }
        if (p >= end || *p != '}' || !text || s_ws(p + 1, end) != end)
            return false;
        break;
    }
    if ((size_t)(ve - vs) <= max)
        return false;
    /* never inside an escape, nor between the halves of a surrogate pair */
    const unsigned char *cut = vs + max, *q = vs;
    while (q < cut && (q = memchr(q, '\\', (size_t)(cut - q)))) {
        size_t elen;
        s_escape(q, ve, &elen);
        if (q + elen > cut) {
            cut = q;
            break;
        }
        q += elen;
    }
    /* nor inside a UTF-8 character: back to its lead byte */
    while (cut > vs && (*cut & 0xC0) == 0x80)
        cut--;
    size_t d = 0;
    for (q = cut; q < ve;) {
        const unsigned char *b = memchr(q, '\\', (size_t)(ve - q));
        if (!b) {
            d += (size_t)(ve - q);
            break;
        }
        size_t elen;
        d += (size_t)(b - q) + s_escape(b, ve, &elen);
        q = b + elen;
    }
    *keep = (size_t)(cut - start);
    *dropped = d;
    return true;
}

korch_wsframe_t *korch_wsmsg_serialize_parts(korch_ws_proto_t proto, korch_channel_t ch, const korch_wsparts_t *p,
                                             size_t headroom)
{
    return proto == KORCH_WS_V1 ? s_ser_v1(ch, p, headroom) : s_ser_legacy(ch, p, headroom);
}

korch_wsframe_t *korch_wsmsg_serialize(korch_ws_proto_t proto, korch_channel_t ch, const korch_msg_t *msg,
                                       size_t headroom)
{
    json_t *parts[4] = {msg->header, msg->parent_header, msg->metadata, msg->content};
    korch_wsparts_t p = {.msg_id = korch_msg_id(msg), .msg_type = korch_msg_type(msg), .buffers = msg->buffers};
    char *js[4] = {0};
    korch_wsframe_t *f = NULL;
    for (int i = 0; i < 4; i++) {
        if (!(js[i] = s_dump(parts[i], &p.len[i])))
            goto out;
        p.data[i] = js[i];
    }
    f = korch_wsmsg_serialize_parts(proto, ch, &p, headroom);
out:
    for (int i = 0; i < 4; i++)
        free(js[i]);
    return f;
}
