/*  Jupyter kernel messages on a websocket: the legacy JSON / binary formats
 *  and the v1.kernel.websocket.jupyter.org subprotocol (see wsmsg.h). */
#include "korch/wsmsg.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PARTS 4096 /* buffers per message; jupyter never sends near this */

/* ------------------------------------------------------------------ frames */

static korch_wsframe_t *s_frame_new(size_t headroom, size_t len, bool binary)
{
    if (len > SIZE_MAX - headroom - sizeof(korch_wsframe_t) - 1)
        return NULL;
    korch_wsframe_t *f = malloc(sizeof *f + headroom + len + 1);
    if (!f)
        return NULL;
    f->refs = 1;
    f->binary = binary;
    f->len = len;
    f->data = f->buf + headroom;
    f->data[len] = 0;
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
    if (--(*f)->refs == 0)
        free(*f);
    *f = NULL;
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

static korch_wsframe_t *s_ser_legacy(korch_channel_t ch, const korch_msg_t *msg, size_t headroom)
{
    size_t nbuf = zmsg_size(msg->buffers);
    json_t *root = json_pack("{s:O, s:O, s:O, s:O, s:s, s:s, s:s}", "header", msg->header, "parent_header",
                             msg->parent_header, "metadata", msg->metadata, "content", msg->content, "channel",
                             korch_channel_name(ch), "msg_id", korch_msg_id(msg), "msg_type", korch_msg_type(msg));
    if (!root)
        return NULL;
    if (!nbuf)
        json_object_set_new(root, "buffers", json_array());
    char *js = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (!js)
        return NULL;
    size_t jlen = strlen(js);
    korch_wsframe_t *f = NULL;
    if (!nbuf) {
        f = s_frame_new(headroom, jlen, false);
        if (f)
            memcpy(f->data, js, jlen);
        free(js);
        return f;
    }
    /* nbufs counts the JSON as part 0 */
    size_t n = nbuf + 1, total = 4 + 4 * n + jlen;
    for (zframe_t *fr = zmsg_first(msg->buffers); fr; fr = zmsg_next(msg->buffers))
        total += zframe_size(fr);
    f = s_frame_new(headroom, total, true);
    if (f) {
        unsigned char *p = f->data;
        s_put_be32(p, n);
        size_t pos = 4 + 4 * n, i = 0;
        s_put_be32(p + 4 + 4 * i++, pos);
        memcpy(p + pos, js, jlen);
        pos += jlen;
        for (zframe_t *fr = zmsg_first(msg->buffers); fr; fr = zmsg_next(msg->buffers)) {
            s_put_be32(p + 4 + 4 * i++, pos);
            memcpy(p + pos, zframe_data(fr), zframe_size(fr));
            pos += zframe_size(fr);
        }
    }
    free(js);
    return f;
}

static korch_wsframe_t *s_ser_v1(korch_channel_t ch, const korch_msg_t *msg, size_t headroom)
{
    json_t *parts_json[4] = {msg->header, msg->parent_header, msg->metadata, msg->content};
    char *parts[4] = {0};
    size_t lens[4];
    korch_wsframe_t *f = NULL;
    for (int i = 0; i < 4; i++) {
        parts[i] = json_dumps(parts_json[i], JSON_COMPACT);
        if (!parts[i])
            goto out;
        lens[i] = strlen(parts[i]);
    }
    const char *chname = korch_channel_name(ch);
    size_t clen = strlen(chname), nbuf = zmsg_size(msg->buffers);
    size_t n = 2 + 4 + nbuf; /* start, end of channel, end of each part */
    size_t total = 8 + 8 * n + clen;
    for (int i = 0; i < 4; i++)
        total += lens[i];
    for (zframe_t *fr = zmsg_first(msg->buffers); fr; fr = zmsg_next(msg->buffers))
        total += zframe_size(fr);
    f = s_frame_new(headroom, total, true);
    if (!f)
        goto out;
    unsigned char *p = f->data;
    s_put_le64(p, n);
    size_t pos = 8 + 8 * n, i = 0;
    s_put_le64(p + 8 + 8 * i++, pos);
    memcpy(p + pos, chname, clen);
    pos += clen;
    s_put_le64(p + 8 + 8 * i++, pos);
    for (int k = 0; k < 4; k++) {
        memcpy(p + pos, parts[k], lens[k]);
        pos += lens[k];
        s_put_le64(p + 8 + 8 * i++, pos);
    }
    for (zframe_t *fr = zmsg_first(msg->buffers); fr; fr = zmsg_next(msg->buffers)) {
        memcpy(p + pos, zframe_data(fr), zframe_size(fr));
        pos += zframe_size(fr);
        s_put_le64(p + 8 + 8 * i++, pos);
    }
out:
    for (int k = 0; k < 4; k++)
        free(parts[k]);
    return f;
}

korch_wsframe_t *korch_wsmsg_serialize(korch_ws_proto_t proto, korch_channel_t ch, const korch_msg_t *msg,
                                       size_t headroom)
{
    return proto == KORCH_WS_V1 ? s_ser_v1(ch, msg, headroom) : s_ser_legacy(ch, msg, headroom);
}
