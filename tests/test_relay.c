/*  The websocket relay's building blocks, without a server: a kernel's
 *  message verified but kept raw (korch_session_deserialize_raw, content
 *  parsed only on demand), frames assembled from raw parts (legacy and v1),
 *  frames that refer to a big content instead of copying it, and the
 *  fragment reader the writer uses. The same frames through a real korch
 *  serve and real clients: tests/test_server.c. */
#define KORCH_TEST_UNIT /* no kernel, docker or browser: make check runs these */
#include "test.h"
#include "korch/session.h"
#include "korch/wsmsg.h"

#include <stdio.h>
#include <stdlib.h>

/* A message whose strings need every kind of JSON escape. */
static korch_msg_t *s_tricky(const char *type, size_t text_len, int nbuffers)
{
    char *text = malloc(text_len + 1);
    for (size_t i = 0; i < text_len; i++)
        text[i] = "ab\"c\\d\ne\tf\x01g/h"[i % 14];
    json_t *t = json_stringn(text, text_len);
    free(text);
    korch_msg_t *m = korch_msg_new(type, json_pack("{s:s, s:o, s:[i, f, b, n], s:{s:s}}", "name", "stdout", "text", t,
                                                  "misc", 42, 0.5, 1, "nested", "k", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));
    json_object_set_new(m->header, "msg_id", json_string("id-\"1\""));
    json_object_set_new(m->header, "session", json_string("s"));
    json_object_set_new(m->parent_header, "msg_id", json_string("parent\\1"));
    json_object_set_new(m->metadata, "nul", json_stringn("a\0b", 3));
    for (int i = 0; i < nbuffers; i++) {
        unsigned char b[300];
        for (size_t k = 0; k < sizeof b; k++)
            b[k] = (unsigned char)(k * 7 + (size_t)i);
        zmsg_addmem(m->buffers, b, sizeof b - (size_t)i * 10);
    }
    return m;
}

/* The whole message of f, read in pieces of `step` bytes. */
static unsigned char *s_read_all(const korch_wsframe_t *f, size_t step)
{
    unsigned char *out = malloc(f->len + 1);
    for (size_t off = 0; off < f->len; off += step)
        korch_wsframe_read(f, off, out + off, f->len - off < step ? f->len - off : step);
    return out;
}

static bool s_json_equal_bytes(const void *a, size_t alen, const json_t *b)
{
    json_t *ja = json_loadb(a, alen, JSON_ALLOW_NUL, NULL);
    bool eq = ja && json_equal(ja, b);
    json_decref(ja);
    return eq;
}

static bool s_no_content(const korch_msg_t *msg, void *arg)
{
    (*(int *)arg)++;
    return false;
}

static bool s_yes_content(const korch_msg_t *msg, void *arg)
{
    (*(int *)arg)++;
    return true;
}

TEST(relay_session_raw_and_lazy_content)
{
    korch_session_t *tx = korch_session_new("k3y", 3, "t", NULL, NULL), *rx = korch_session_new("k3y", 3, "t", NULL, NULL);
    korch_msg_t *m = s_tricky("stream", 100000, 0);
    json_t *content = json_incref(m->content);
    zmsg_t *wire = korch_session_serialize(tx, &m);
    zmsg_t *copy = zmsg_dup(wire);
    /* lazily: content neither parsed nor checked, raw frames are the wire's */
    korch_msg_t *out = NULL;
    zframe_t *raw[4] = {0};
    int asked = 0;
    CHECK_EQ(korch_session_deserialize_raw(rx, &wire, &out, raw, s_no_content, &asked, NULL, NULL), KORCH_OK);
    CHECK_EQ(asked, 1);
    CHECK(out && out->content == NULL);
    CHECK_STREQ(korch_msg_type(out), "stream");
    CHECK_STREQ(korch_msg_parent_id(out), "parent\\1");
    zframe_t *f = zmsg_first(copy); /* delimiter, signature, then the four parts */
    f = zmsg_next(copy);
    for (int i = 0; i < 4; i++) {
        f = zmsg_next(copy);
        CHECK(raw[i] && zframe_eq(raw[i], f));
    }
    CHECK(raw[3] && s_json_equal_bytes(zframe_data(raw[3]), zframe_size(raw[3]), content));
    korch_msg_destroy(&out);
    for (int i = 0; i < 4; i++)
        zframe_destroy(&raw[i]);
    /* the same bytes again: a replay, rejected however lazy the reader */
    zmsg_t *again = zmsg_dup(copy);
    korch_reject_t why = KORCH_REJ__COUNT;
    CHECK_NE(korch_session_deserialize_raw(rx, &again, &out, raw, s_no_content, &asked, &why, NULL), KORCH_OK);
    CHECK_EQ(why, KORCH_REJ_DUPLICATE);
    CHECK(raw[0] == NULL && out == NULL);
    /* wanted: parsed as korch_session_deserialize does (a fresh session) */
    korch_session_t *rx2 = korch_session_new("k3y", 3, "t", NULL, NULL);
    again = zmsg_dup(copy);
    CHECK_EQ(korch_session_deserialize_raw(rx2, &again, &out, raw, s_yes_content, &asked, NULL, NULL), KORCH_OK);
    CHECK(out && out->content && json_equal(json_object_get(out->content, "text"), json_object_get(content, "text")));
    korch_msg_destroy(&out);
    for (int i = 0; i < 4; i++)
        zframe_destroy(&raw[i]);
    /* a tampered content is caught by the HMAC even when nobody parses it */
    korch_session_t *rx3 = korch_session_new("k3y", 3, "t", NULL, NULL);
    again = zmsg_dup(copy);
    zframe_t *c = zmsg_last(again);
    ((unsigned char *)zframe_data(c))[10] ^= 1;
    CHECK_NE(korch_session_deserialize_raw(rx3, &again, &out, raw, s_no_content, &asked, &why, NULL), KORCH_OK);
    CHECK_EQ(why, KORCH_REJ_BAD_SIGNATURE);
    CHECK_EQ(korch_session_stats(rx)->received, 1);
    CHECK_EQ(korch_session_stats(rx)->rejected[KORCH_REJ_DUPLICATE], 1);
    zmsg_destroy(&copy);
    json_decref(content);
    korch_session_destroy(&tx);
    korch_session_destroy(&rx);
    korch_session_destroy(&rx2);
    korch_session_destroy(&rx3);
}

/* The four parts as jansson dumps them (what a kernel's session would
   have put on the wire, give or take spacing). */
static void s_parts(const korch_msg_t *m, char *js[4], korch_wsparts_t *p)
{
    json_t *parts[4] = {m->header, m->parent_header, m->metadata, m->content};
    *p = (korch_wsparts_t){.msg_id = korch_msg_id(m), .msg_type = korch_msg_type(m), .buffers = m->buffers};
    for (int i = 0; i < 4; i++) {
        js[i] = json_dumps(parts[i], JSON_COMPACT | JSON_ENCODE_ANY);
        p->data[i] = js[i];
        p->len[i] = strlen(js[i]);
    }
}

/* A v1 frame's parts: n offsets, channel, header, parent, metadata, content, buffers. */
static bool s_v1_part(const korch_wsframe_t *f, size_t i, const unsigned char **p, size_t *len)
{
    const unsigned char *d = f->data;
    uint64_t n = 0, a = 0, b = 0;
    for (int k = 7; k >= 0; k--)
        n = (n << 8) | d[k];
    if (i + 1 >= n)
        return false;
    for (int k = 7; k >= 0; k--) {
        a = (a << 8) | d[8 + 8 * i + (size_t)k];
        b = (b << 8) | d[8 + 8 * (i + 1) + (size_t)k];
    }
    *p = d + a;
    *len = (size_t)(b - a);
    return a <= b && b <= f->len;
}

TEST(relay_wsmsg_parts_are_what_serialize_makes)
{
    for (int nbuf = 0; nbuf <= 2; nbuf += 2)
        for (int proto = 0; proto < KORCH_WS__COUNT; proto++) {
            korch_msg_t *m = s_tricky("stream", 5000, nbuf);
            korch_wsframe_t *a = korch_wsmsg_serialize((korch_ws_proto_t)proto, KORCH_CH_IOPUB, m, 16);
            char *js[4];
            korch_wsparts_t p;
            s_parts(m, js, &p);
            korch_wsframe_t *b = korch_wsmsg_serialize_parts((korch_ws_proto_t)proto, KORCH_CH_IOPUB, &p, 16);
            if (!CHECK(a && b))
                return;
            /* jansson's compact dump and korch's are byte for byte the same */
            CHECK_EQ(a->len, b->len);
            CHECK(a->binary == b->binary);
            CHECK(a->binary == (proto == KORCH_WS_V1 || nbuf > 0));
            CHECK(a->len == b->len && memcmp(a->data, b->data, a->len) == 0);
            CHECK(a->blob == NULL && b->blob == NULL);
            if (proto == KORCH_WS_V1) {
                const unsigned char *q;
                size_t n;
                CHECK(s_v1_part(a, 0, &q, &n) && n == 5 && memcmp(q, "iopub", 5) == 0);
                CHECK(s_v1_part(a, 4, &q, &n) && s_json_equal_bytes(q, n, m->content));
                CHECK(s_v1_part(a, 5, &q, &n) == (nbuf > 0));
            } else if (!nbuf) {
                json_t *j = json_loadb((const char *)a->data, a->len, JSON_ALLOW_NUL, NULL);
                CHECK(j && json_equal(json_object_get(j, "content"), m->content));
                CHECK(j && json_equal(json_object_get(j, "metadata"), m->metadata));
                CHECK_STREQ(json_string_value(json_object_get(j, "msg_id")), "id-\"1\"");
                CHECK_STREQ(json_string_value(json_object_get(j, "channel")), "iopub");
                CHECK_EQ(json_array_size(json_object_get(j, "buffers")), 0);
                json_decref(j);
            }
            for (int i = 0; i < 4; i++)
                free(js[i]);
            korch_wsframe_unref(&a);
            korch_wsframe_unref(&b);
            CHECK(a == NULL);
            korch_msg_destroy(&m);
        }
}

/* A big content referenced, not copied: the same message, read in any pieces. */
TEST(relay_wsmsg_blob_content)
{
    for (int nbuf = 0; nbuf <= 3; nbuf += 3)
        for (int proto = 0; proto < KORCH_WS__COUNT; proto++) {
            korch_msg_t *m = s_tricky("stream", 300000, nbuf);
            char *js[4];
            korch_wsparts_t p;
            s_parts(m, js, &p);
            korch_wsframe_t *whole = korch_wsmsg_serialize_parts((korch_ws_proto_t)proto, KORCH_CH_IOPUB, &p, 16);
            zframe_t *c = zframe_new(js[3], p.len[3]);
            korch_wsblob_t *blob = korch_wsblob_new(&c);
            CHECK(c == NULL && blob != NULL);
            p.content = blob;
            p.content_len = p.len[3];
            p.data[3] = "garbage: must not be read";
            p.len[3] = 0;
            korch_wsframe_t *f = korch_wsmsg_serialize_parts((korch_ws_proto_t)proto, KORCH_CH_IOPUB, &p, 16);
            korch_wsblob_unref(&blob); /* the frame keeps its own reference */
            if (!CHECK(f && whole))
                return;
            CHECK(f->blob != NULL);
            CHECK_EQ(f->len, whole->len);
            CHECK(f->binary == whole->binary);
            size_t steps[] = {1, 7, 4096, 65536, 262144, f->len};
            for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
                unsigned char *got = s_read_all(f, steps[i]);
                if (!CHECK(memcmp(got, whole->data, f->len) == 0))
                    fprintf(stderr, "  proto %d, %d buffers, read in steps of %zu\n", proto, nbuf, steps[i]);
                free(got);
            }
            /* only the frame's own bytes were allocated */
            korch_wsframe_t *g = korch_wsframe_ref(f);
            korch_wsframe_unref(&f);
            unsigned char *got = s_read_all(g, 1000);
            CHECK(memcmp(got, whole->data, g->len) == 0);
            free(got);
            korch_wsframe_unref(&g);
            korch_wsframe_unref(&whole);
            for (int i = 0; i < 4; i++)
                free(js[i]);
            korch_msg_destroy(&m);
        }
}

/* What korch sends on v1 a client can send back (shell), and it parses to
   the same message. */
TEST(relay_wsmsg_round_trip)
{
    for (int proto = 0; proto < KORCH_WS__COUNT; proto++) {
        korch_msg_t *m = s_tricky("execute_request", 100, proto == KORCH_WS_V1 ? 2 : 0);
        json_object_del(m->metadata, "nul"); /* clients' JSON is parsed without \u0000 */
        korch_wsframe_t *f = korch_wsmsg_serialize((korch_ws_proto_t)proto, KORCH_CH_SHELL, m, 0);
        korch_channel_t ch = KORCH_CH_IOPUB;
        korch_msg_t *back = NULL;
        korch_err_t err = {0};
        if (CHECK(f) && CHECK_EQ(korch_wsmsg_parse((korch_ws_proto_t)proto, f->binary, f->data, f->len, &ch, &back,
                                                   &err),
                                 KORCH_OK)) {
            CHECK_EQ(ch, KORCH_CH_SHELL);
            CHECK(json_equal(back->header, m->header));
            CHECK(json_equal(back->parent_header, m->parent_header));
            CHECK(json_equal(back->metadata, m->metadata));
            CHECK(json_equal(back->content, m->content));
            CHECK_EQ(zmsg_size(back->buffers), zmsg_size(m->buffers));
        } else
            fprintf(stderr, "  %s\n", err.msg);
        korch_msg_destroy(&back);
        korch_wsframe_unref(&f);
        korch_msg_destroy(&m);
    }
}

/* content[0..keep) + ","korch_dropped":N} is JSON whose text is a prefix of
   the whole text, and the two lengths add up. */
static bool s_cut_ok(const char *content, size_t len, const char *whole, size_t whole_len, size_t max)
{
    size_t keep = 0, dropped = 0;
    if (!CHECK(korch_wsmsg_stream_cut(content, len, max, &keep, &dropped)))
        return false;
    char suffix[64];
    snprintf(suffix, sizeof suffix, "\",\"korch_dropped\":%zu}", dropped);
    size_t n = keep + strlen(suffix);
    char *cut = malloc(n);
    memcpy(cut, content, keep);
    memcpy(cut + keep, suffix, strlen(suffix));
    json_error_t je;
    json_t *j = json_loadb(cut, n, 0, &je);
    const char *text = json_string_value(json_object_get(j, "text"));
    size_t tlen = json_string_length(json_object_get(j, "text"));
    bool ok = CHECK(j != NULL) && CHECK(text != NULL) && CHECK_EQ(tlen + dropped, whole_len) &&
              CHECK(memcmp(text, whole, tlen) == 0) && CHECK_STREQ(json_string_value(json_object_get(j, "name")), "stdout") &&
              CHECK_EQ(json_integer_value(json_object_get(j, "korch_dropped")), dropped);
    /* at most max bytes of the text's JSON, and no fewer than max - 12 */
    const char *ts = strstr(content, "\"text\"");
    ts = ts ? strchr(ts + 6, '"') + 1 : content;
    ok = ok && CHECK_LE(content + keep - ts, max) && CHECK_GE(content + keep - ts + 12, max);
    if (!ok)
        fprintf(stderr, "  max %zu keep %zu dropped %zu: %s\n", max, keep, dropped, j ? "" : je.text);
    json_decref(j);
    free(cut);
    return ok;
}

TEST(relay_stream_cut)
{
    /* every kind of character, escaped or raw, at every cut position */
    const char *units[] = {"plain ascii line\n", "quote\" back\\slash\ttab\x01", "caf\xc3\xa9 \xe2\x82\xac ",
                           "\xf0\x9f\x98\x80 emoji"};
    char whole[4000];
    size_t wl = 0;
    for (int i = 0; wl + 40 < sizeof whole; i++) {
        const char *u = units[i % 4];
        memcpy(whole + wl, u, strlen(u));
        wl += strlen(u);
    }
    json_t *c = json_pack("{s:s, s:o}", "name", "stdout", "text", json_stringn(whole, wl));
    size_t flags[] = {JSON_COMPACT, JSON_COMPACT | JSON_ENSURE_ASCII, 0 /* ", " and ": " like Python */};
    for (size_t f = 0; f < 3; f++) {
        char *js = json_dumps(c, flags[f]);
        size_t len = strlen(js);
        size_t keep, dropped;
        CHECK(!korch_wsmsg_stream_cut(js, len, len, &keep, &dropped)); /* fits: no cut */
        bool all = true;
        for (size_t max = 0; max < len - 40 && all; max += (max < 100 ? 1 : 7))
            all = s_cut_ok(js, len, whole, wl, max);
        free(js);
    }
    json_decref(c);
    /* shapes it leaves alone */
    const char *other[] = {
        "{\"text\": \"0123456789abcdef\", \"name\": \"stdout\"}", /* text not last */
        "{\"name\": \"stdout\", \"text\": \"0123456789abcdef\", \"x\": 1}",
        "{\"name\": 3, \"text\": \"0123456789abcdef\"}",
        "[\"text\", \"0123456789abcdef\"]",
        "{\"name\": \"stdout\", \"text\": \"0123456789abcdef",   /* unterminated */
        "{\"name\": \"stdout\", \"text\": \"0123456789abcdef\"} x",
        "",
    };
    for (size_t i = 0; i < sizeof other / sizeof other[0]; i++) {
        size_t keep, dropped;
        if (!CHECK(!korch_wsmsg_stream_cut(other[i], strlen(other[i]), 4, &keep, &dropped)))
            fprintf(stderr, "  cut: %s\n", other[i]);
    }
    /* every truncation of a valid content: never a crash, never a read past it */
    const char *v = "{\"name\": \"stdout\", \"text\": \"ab\\\\c\\\"d\\u00e9\\ud83d\\ude00\xc3\xa9xyz\"}";
    for (size_t n = 0; n <= strlen(v); n++) {
        char *copy = malloc(n ? n : 1);
        memcpy(copy, v, n);
        size_t keep = 0, dropped = 0;
        if (korch_wsmsg_stream_cut(copy, n, 3, &keep, &dropped))
            CHECK_LE(keep, n);
        free(copy);
    }
}
