/*  libFuzzer target: websocket messages from clients (korch_wsmsg_parse).
 *
 *  Input: byte 0 chooses the framing (bit 0: v1 subprotocol, else legacy)
 *  and the frame type (bit 1: binary, else text); the rest is the message
 *  exactly as a client would send it on /api/kernels/{id}/channels.
 *
 *  Beyond "never crashes, never leaks, no UB" it checks a round trip: a
 *  message that parses must serialize (in both framings) and parse back to
 *  the same channel, the same four JSON parts and the same buffers, and a
 *  second serialization must give the same bytes as the first. Any broken
 *  property aborts, which libFuzzer reports as a crash with the input.
 */
#include "korch/wsmsg.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define REQUIRE(c)                                                                  \
    do {                                                                            \
        if (!(c)) {                                                                 \
            fprintf(stderr, "fuzz_wsmsg: property failed: %s (%s:%d)\n", #c, __FILE__, \
                    __LINE__);                                                      \
            abort();                                                                \
        }                                                                           \
    } while (0)

static bool s_same_buffers(zmsg_t *a, zmsg_t *b)
{
    if (zmsg_size(a) != zmsg_size(b))
        return false;
    for (zframe_t *fa = zmsg_first(a), *fb = zmsg_first(b); fa && fb; fa = zmsg_next(a), fb = zmsg_next(b))
        if (zframe_size(fa) != zframe_size(fb) ||
            (zframe_size(fa) && memcmp(zframe_data(fa), zframe_data(fb), zframe_size(fa)) != 0))
            return false;
    return true;
}

static bool s_same_msg(const korch_msg_t *a, const korch_msg_t *b)
{
    return json_equal(a->header, b->header) && json_equal(a->parent_header, b->parent_header) &&
           json_equal(a->metadata, b->metadata) && json_equal(a->content, b->content) &&
           s_same_buffers(a->buffers, b->buffers);
}

/* Serialize m from ch in proto, parse it back, compare; then serialize the
   copy again and compare bytes. */
static void s_round_trip(korch_ws_proto_t proto, korch_channel_t ch, const korch_msg_t *m)
{
    korch_wsframe_t *f = korch_wsmsg_serialize(proto, ch, m, 16);
    REQUIRE(f);
    REQUIRE(f->refs == 1);
    korch_channel_t ch2 = KORCH_CH_HB;
    korch_msg_t *back = NULL;
    korch_err_t err = {0};
    korch_rc_t rc = korch_wsmsg_parse(proto, f->binary, f->data, f->len, &ch2, &back, &err);
    if (rc != KORCH_OK)
        fprintf(stderr, "fuzz_wsmsg: re-parse failed: %s\n", err.msg);
    REQUIRE(rc == KORCH_OK && back);
    REQUIRE(ch2 == ch);
    REQUIRE(s_same_msg(m, back));
    korch_wsframe_t *f2 = korch_wsmsg_serialize(proto, ch2, back, 0);
    REQUIRE(f2);
    REQUIRE(f2->binary == f->binary && f2->len == f->len && memcmp(f2->data, f->data, f->len) == 0);
    korch_wsframe_unref(&f2);
    korch_wsframe_unref(&f);
    REQUIRE(!f);
    korch_msg_destroy(&back);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    korch_ws_proto_t proto = (data[0] & 1) ? KORCH_WS_V1 : KORCH_WS_LEGACY;
    bool binary = (data[0] & 2) != 0;
    /* a private copy, so a read past the frame is caught by ASan exactly */
    size_t len = size - 1;
    uint8_t *frame = malloc(len ? len : 1);
    if (!frame)
        return 0;
    memcpy(frame, data + 1, len);
    korch_channel_t ch = KORCH_CH_HB;
    korch_msg_t *m = NULL;
    korch_err_t err = {0};
    korch_rc_t rc = korch_wsmsg_parse(proto, binary, frame, len, &ch, &m, &err);
    free(frame);
    if (rc != KORCH_OK) {
        /* a rejection is an error with a message and no message object */
        REQUIRE(!m);
        REQUIRE(err.rc != KORCH_OK && err.msg[0]);
        return 0;
    }
    REQUIRE(m);
    REQUIRE(ch == KORCH_CH_SHELL || ch == KORCH_CH_CONTROL || ch == KORCH_CH_STDIN);
    REQUIRE(json_is_object(m->header) && json_is_object(m->parent_header) && json_is_object(m->metadata) &&
            json_is_object(m->content));
    REQUIRE(korch_msg_type(m)[0] != 0);
    REQUIRE(m->identities && m->buffers);
    s_round_trip(KORCH_WS_LEGACY, ch, m);
    s_round_trip(KORCH_WS_V1, ch, m);
    korch_msg_destroy(&m);
    return 0;
}
