/*  libFuzzer target: kernel wire messages (korch_session_deserialize), the
 *  signed multipart frames korch receives from kernels over ZeroMQ.
 *
 *  Input: byte 0 holds the mode, the rest is split into frames at every
 *  "\xff\xfe" (never in JSON, which is UTF-8).
 *    bit 0   the session has a key ("fuzz-key"); else unsigned messages
 *    bit 1   sign: the frames are [header, parent_header, metadata, content,
 *            buffers...] and the harness puts an identity, <IDS|MSG> and the
 *            right HMAC in front, so the parser past the signature check is
 *            reached; else the frames go in as they are (garbage, bad or
 *            missing delimiters and signatures)
 *    bit 2   pad the content frame (frame 3 when signing, else frame 5) with 64 KiB of
 *            spaces in front: stream messages over 64 KiB take the bounded
 *            decoder instead of jansson
 *    bits 3-4  max_stream_text: default, 1, 7 or 64 bytes
 *    bit 5   tiny size limits (json parts 256, content 70000, buffers 64)
 *    bit 6   the relays' korch_session_deserialize_raw, whose want_content
 *            callback answers bit 7: the four signed frames come back as
 *            they were received, and unwanted content is not parsed
 *
 *  Properties checked besides memory safety and no UB:
 *    - an accepted message has object parts and string msg_id, msg_type and
 *      session; a rejection names a reason and leaves no message;
 *    - the same signed frames a second time are rejected as a replay;
 *    - the bounded stream decoder agrees with jansson: with nothing dropped
 *      it gives exactly jansson's object (+ korch_dropped 0), else a prefix of
 *      jansson's text whose length plus korch_dropped is the whole length;
 *    - an accepted message serializes (korch_session_serialize) into frames
 *      another session with the same key accepts, with the same content;
 *    - the raw variant hands back exactly the four frames that were signed
 *      (and nothing on a rejection), and leaves unwanted content NULL.
 */
#include "korch/session.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define REQUIRE(c)                                                                                       \
    do {                                                                                                 \
        if (!(c)) {                                                                                      \
            fprintf(stderr, "fuzz_wire: property failed: %s (%s:%d)\n", #c, __FILE__, __LINE__);         \
            abort();                                                                                     \
        }                                                                                                \
    } while (0)

#define KEY "fuzz-key"
#define PAD 65537

static zmsg_t *s_split(const uint8_t *p, size_t len, int pad_frame)
{
    zmsg_t *frames = zmsg_new();
    size_t start = 0;
    int idx = 0;
    for (size_t i = 0; i <= len; i++) {
        bool end = i == len || (i + 1 < len && p[i] == 0xff && p[i + 1] == 0xfe);
        if (!end)
            continue;
        size_t n = i - start;
        if (idx == pad_frame) {
            zframe_t *f = zframe_new(NULL, PAD + n);
            memset(zframe_data(f), ' ', PAD);
            if (n)
                memcpy(zframe_data(f) + PAD, p + start, n);
            zmsg_append(frames, &f);
        } else
            zmsg_addmem(frames, p + start, n);
        idx++;
        start = i + 2;
        i++;
    }
    return frames;
}

/* Put identity, delimiter and the HMAC of the first four frames in front. */
static void s_sign(korch_session_t *sess, zmsg_t *frames)
{
    const void *parts[4] = {"", "", "", ""};
    size_t lens[4] = {0};
    int i = 0;
    for (zframe_t *f = zmsg_first(frames); f && i < 4; f = zmsg_next(frames), i++) {
        parts[i] = zframe_data(f);
        lens[i] = zframe_size(f);
    }
    char hex[65];
    korch_session_sign(sess, parts, lens, hex);
    zmsg_pushstr(frames, hex);
    zmsg_pushstr(frames, "<IDS|MSG>");
    zmsg_pushstr(frames, "client-identity");
}

/* The content frame as jansson sees it: what the bounded decoder must match. */
static void s_check_stream(const korch_msg_t *m, zframe_t *content_frame)
{
    json_t *dropped = json_object_get(m->content, "korch_dropped");
    json_t *ref = json_loadb((const char *)zframe_data(content_frame), zframe_size(content_frame), JSON_ALLOW_NUL,
                             NULL);
    if (!dropped || json_object_get(ref, "korch_dropped")) {
        /* jansson parsed it: the content is exactly that */
        REQUIRE(ref && json_equal(ref, m->content));
        json_decref(ref);
        return;
    }
    /* the bounded decoder parsed it */
    REQUIRE(json_is_integer(dropped) && json_integer_value(dropped) >= 0);
    size_t ndrop = (size_t)json_integer_value(dropped);
    REQUIRE(json_object_size(m->content) == 3);
    json_t *text = json_object_get(m->content, "text"), *name = json_object_get(m->content, "name");
    REQUIRE(json_is_string(text) && json_is_string(name));
    if (ndrop == 0) {
        /* nothing was cut: jansson must agree exactly */
        REQUIRE(ref);
        json_t *copy = json_copy(m->content);
        json_object_del(copy, "korch_dropped");
        REQUIRE(json_equal(ref, copy));
        json_decref(copy);
    } else if (ref) {
        /* cut: a prefix of the whole text, and the counts add up (bytes
           past the cut are not validated, so jansson may refuse those) */
        json_t *rtext = json_object_get(ref, "text");
        REQUIRE(json_is_string(rtext) && json_equal(json_object_get(ref, "name"), name));
        REQUIRE(json_object_size(ref) == 2);
        size_t kept = json_string_length(text), whole = json_string_length(rtext);
        REQUIRE(kept + ndrop == whole);
        REQUIRE(memcmp(json_string_value(text), json_string_value(rtext), kept) == 0);
    }
    json_decref(ref);
}

static bool s_want(const korch_msg_t *msg, void *arg)
{
    REQUIRE(json_is_object(msg->header) && json_is_object(msg->parent_header) && json_is_object(msg->metadata));
    REQUIRE(!msg->content);
    return *(bool *)arg;
}

static void s_check_accepted(korch_session_t *sess, korch_msg_t **pm, zframe_t *content_frame, size_t key_len,
                             const korch_session_limits_t *lim)
{
    korch_msg_t *m = *pm;
    REQUIRE(json_is_object(m->header) && json_is_object(m->parent_header) && json_is_object(m->metadata) &&
            json_is_object(m->content));
    REQUIRE(json_is_string(json_object_get(m->header, "msg_id")));
    REQUIRE(json_is_string(json_object_get(m->header, "msg_type")));
    REQUIRE(json_is_string(json_object_get(m->header, "session")));
    REQUIRE(m->identities && m->buffers);
    if (content_frame)
        s_check_stream(m, content_frame);
    /* korch's own serialization is accepted by a peer with the same key */
    json_t *h = json_incref(m->header), *p = json_incref(m->parent_header), *md = json_incref(m->metadata),
           *c = json_incref(m->content);
    zmsg_t *bufs = zmsg_dup(m->buffers);
    zmsg_t *out = korch_session_serialize(sess, pm);
    REQUIRE(out && !*pm);
    korch_session_t *peer = korch_session_new(KEY, key_len, "peer", lim, NULL);
    REQUIRE(peer);
    korch_msg_t *back = NULL;
    korch_reject_t why = KORCH_REJ__COUNT;
    korch_err_t err = {0};
    korch_rc_t rc = korch_session_deserialize(peer, &out, &back, &why, &err);
    if (rc != KORCH_OK)
        fprintf(stderr, "fuzz_wire: korch's own frames rejected: %s\n", err.msg);
    REQUIRE(rc == KORCH_OK && back && !out);
    REQUIRE(json_equal(h, back->header) && json_equal(p, back->parent_header) && json_equal(md, back->metadata));
    /* a long stream's content re-parses through the bounded decoder, which
       may add korch_dropped itself: compare without it */
    json_t *c1 = json_copy(c), *c2 = json_copy(back->content);
    if (json_object_get(c1, "korch_dropped") || json_object_get(c2, "korch_dropped")) {
        json_object_del(c1, "korch_dropped");
        json_object_del(c2, "korch_dropped");
    }
    REQUIRE(json_equal(c1, c2));
    json_decref(c1);
    json_decref(c2);
    REQUIRE(zmsg_size(bufs) == zmsg_size(back->buffers));
    for (zframe_t *a = zmsg_first(bufs), *b = zmsg_first(back->buffers); a && b;
         a = zmsg_next(bufs), b = zmsg_next(back->buffers))
        REQUIRE(zframe_size(a) == zframe_size(b) &&
                (zframe_size(a) == 0 || memcmp(zframe_data(a), zframe_data(b), zframe_size(a)) == 0));
    korch_msg_destroy(&back);
    korch_session_destroy(&peer);
    zmsg_destroy(&bufs);
    json_decref(h);
    json_decref(p);
    json_decref(md);
    json_decref(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 1 << 20)
        return 0;
    uint8_t mode = data[0];
    bool keyed = mode & 1, sign = (mode & 2) && keyed, pad = mode & 4;
    static const size_t stream_text[4] = {0, 1, 7, 64};
    korch_session_limits_t lim = {.digest_history = 4, .max_stream_text = stream_text[(mode >> 3) & 3]};
    if (mode & 32) {
        lim.max_json_part = 256;
        lim.max_content = 70000;
        lim.max_buffers_total = 64;
    }
    size_t key_len = keyed ? strlen(KEY) : 0;
    korch_session_t *sess = korch_session_new(KEY, key_len, "fuzz", &lim, NULL);
    REQUIRE(sess);
    /* content is frame 3 when signing, else frame 5 of [<IDS|MSG>, sig, h, p, m, c] */
    zmsg_t *frames = s_split(data + 1, size - 1, !pad ? -1 : sign ? 3 : 5);
    if (sign)
        s_sign(sess, frames);
    zmsg_t *again = zmsg_dup(frames);
    /* the content frame (5th after the delimiter), for the stream check */
    zframe_t *content = NULL;
    int after = -1;
    for (zframe_t *f = zmsg_first(frames); f; f = zmsg_next(frames)) {
        if (after < 0 && zframe_size(f) == 9 && memcmp(zframe_data(f), "<IDS|MSG>", 9) == 0)
            after = 0;
        else if (after >= 0 && ++after == 5) {
            content = zframe_dup(f);
            break;
        }
    }
    /* the four frames after the delimiter, for the raw variant's check */
    zframe_t *signed_parts[4] = {0};
    if (after >= 0) {
        int i = -2; /* delimiter, signature, then the parts */
        for (zframe_t *f = zmsg_first(frames); f; f = zmsg_next(frames)) {
            if (i == -2 && !(zframe_size(f) == 9 && memcmp(zframe_data(f), "<IDS|MSG>", 9) == 0))
                continue;
            if (i >= 0 && i < 4)
                signed_parts[i] = zframe_dup(f);
            if (++i == 4)
                break;
        }
    }
    bool raw_mode = mode & 64, want = mode & 128;
    zframe_t *raw[4] = {0};
    korch_msg_t *m = NULL;
    korch_reject_t why = KORCH_REJ__COUNT;
    korch_err_t err = {0};
    korch_rc_t rc = raw_mode ? korch_session_deserialize_raw(sess, &frames, &m, raw, s_want, &want, &why, &err)
                             : korch_session_deserialize(sess, &frames, &m, &why, &err);
    REQUIRE(!frames);
    for (int i = 0; i < 4; i++) {
        if (raw_mode && rc == KORCH_OK) /* exactly the signed bytes */
            REQUIRE(raw[i] && signed_parts[i] && zframe_size(raw[i]) == zframe_size(signed_parts[i]) &&
                    (zframe_size(raw[i]) == 0 ||
                     memcmp(zframe_data(raw[i]), zframe_data(signed_parts[i]), zframe_size(raw[i])) == 0));
        else
            REQUIRE(!raw[i]); /* untouched on a rejection */
        zframe_destroy(&raw[i]);
        zframe_destroy(&signed_parts[i]);
    }
    if (raw_mode && rc == KORCH_OK && !want) {
        /* content neither parsed nor checked; the rest as usual */
        REQUIRE(m && !m->content);
        REQUIRE(json_is_string(json_object_get(m->header, "msg_id")) &&
                json_is_string(json_object_get(m->header, "msg_type")) &&
                json_is_string(json_object_get(m->header, "session")));
        korch_msg_destroy(&m);
        zmsg_destroy(&again);
        zframe_destroy(&content);
        korch_session_destroy(&sess);
        return 0;
    }
    const korch_session_stats_t *st = korch_session_stats(sess);
    if (rc != KORCH_OK) {
        REQUIRE(!m);
        REQUIRE(err.msg[0]);
        if (rc == KORCH_E_PROTOCOL)
            REQUIRE(why < KORCH_REJ__COUNT && st->rejected[why] == 1);
    } else {
        REQUIRE(m && st->received == 1);
        s_check_accepted(sess, &m, content, key_len, &lim);
        /* a replay of the same signed frames is refused */
        korch_msg_t *m2 = NULL;
        korch_err_t err2 = {0};
        korch_reject_t why2 = KORCH_REJ__COUNT;
        korch_rc_t rc2 = korch_session_deserialize(sess, &again, &m2, &why2, &err2);
        if (keyed)
            REQUIRE(rc2 != KORCH_OK && why2 == KORCH_REJ_DUPLICATE && !m2);
        else
            REQUIRE(rc2 == KORCH_OK && m2);
        korch_msg_destroy(&m2);
    }
    zmsg_destroy(&again);
    zframe_destroy(&content);
    korch_msg_destroy(&m);
    korch_session_destroy(&sess);
    return 0;
}
