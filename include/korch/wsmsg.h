/*  Jupyter kernel messages on a websocket, as Jupyter Server frames them.
 *
 *  Two formats (jupyter_server base/zmqhandlers.py, services/kernels/handlers.py):
 *
 *  legacy    a text frame holding one JSON object {header, parent_header,
 *            metadata, content, channel, buffers: []}; when the message has
 *            binary buffers, a binary frame instead:
 *                u32 nbufs (big-endian), u32 offsets[nbufs] (big-endian, from
 *                the frame's start), then the JSON (without buffers), then
 *                each buffer.
 *  v1        subprotocol "v1.kernel.websocket.jupyter.org", binary frames:
 *                u64 n (little-endian), u64 offsets[n] (little-endian),
 *                then channel, header, parent_header, metadata, content,
 *                buffers...; part i spans offsets[i] .. offsets[i + 1] and
 *                the last offset is the frame's length.
 *
 *  Parsing never trusts a count or an offset: every one is checked against
 *  the frame before use, so a malformed frame is an error, never a crash.
 *  The key never appears here: korch signs toward the kernel itself.
 */
#ifndef KORCH_WSMSG_H
#define KORCH_WSMSG_H

#include <stdbool.h>
#include <stddef.h>
#include "korch/conn.h"
#include "korch/error.h"
#include "korch/msg.h"

#define KORCH_WS_V1_PROTOCOL "v1.kernel.websocket.jupyter.org"

typedef enum { KORCH_WS_LEGACY, KORCH_WS_V1, KORCH_WS__COUNT } korch_ws_proto_t;

/* Bytes of a kernel's message that frames refer to instead of copying them
   (a 20 MB stream content), kept alive by reference counting. */
typedef struct korch_wsblob korch_wsblob_t;

/* A blob holding *frame, which it takes (also on failure: NULL then). */
korch_wsblob_t *korch_wsblob_new(zframe_t **frame);
korch_wsblob_t *korch_wsblob_ref(korch_wsblob_t *b);
void korch_wsblob_unref(korch_wsblob_t **b);
size_t korch_wsblob_size(const korch_wsblob_t *b);
const void *korch_wsblob_data(const korch_wsblob_t *b);

/* One serialized message, shared by every client it is queued for. Its own
   bytes are at data, with `headroom` writable bytes before them (for
   libwebsockets' LWS_PRE). Without a blob they are the whole message; with
   one, the message is data[0..head), the blob's first blob_len bytes, then
   data[head..len - blob_len): korch_wsframe_read copies any stretch of it. */
typedef struct {
    int refs;
    bool binary;                /* binary frame (else text) */
    size_t len;                 /* bytes of the whole message */
    unsigned char *data;        /* inside buf, after the headroom */
    korch_wsblob_t *blob;       /* NULL, or the middle of the message (a reference) */
    size_t blob_len;            /* bytes of the blob in the message */
    size_t head;                /* with a blob: own bytes before it */
    unsigned char buf[];
} korch_wsframe_t;

/* Copy n bytes of the message from offset off (off + n <= f->len) to out. */
void korch_wsframe_read(const korch_wsframe_t *f, size_t off, void *out, size_t n);

/* Parse one complete websocket message from a client. On success *ch is the
   channel (shell, control or stdin) and *out a new message whose header is
   the client's own (msg_id kept). KORCH_E_PROTOCOL + err when malformed. */
korch_rc_t korch_wsmsg_parse(korch_ws_proto_t proto, bool binary, const void *data, size_t len,
                             korch_channel_t *ch, korch_msg_t **out, korch_err_t *err);

/* Serialize msg (borrowed) from channel ch for a client, in one piece (no
   blob); NULL when out of memory. The frame starts with one reference. */
korch_wsframe_t *korch_wsmsg_serialize(korch_ws_proto_t proto, korch_channel_t ch, const korch_msg_t *msg,
                                       size_t headroom);

/* A message as its four serialized JSON parts, for relaying a kernel's
   message without parsing and dumping it again (all borrowed). */
typedef struct {
    const void *data[4];        /* header, parent_header, metadata, content: JSON objects */
    size_t len[4];
    korch_wsblob_t *content;    /* when set, the content is its first content_len bytes (referenced,
                                   not copied) followed by data[3] (len[3] bytes, may be 0) */
    size_t content_len;
    const char *msg_id;         /* the legacy format repeats these two at its top level */
    const char *msg_type;
    zmsg_t *buffers;            /* binary buffers (copied); NULL = none */
} korch_wsparts_t;

/* Serialize a message given as parts: nothing is parsed, each part is
   copied once (or referenced). The legacy JSON object is assembled around
   the parts, which must therefore be valid JSON: korch relays what the
   kernel signed, as jupyter_server does. NULL when out of memory. */
korch_wsframe_t *korch_wsmsg_serialize_parts(korch_ws_proto_t proto, korch_channel_t ch, const korch_wsparts_t *p,
                                             size_t headroom);

/* Where to cut a huge stream message for clients. content is as the
   kernel serialized it, an object of string members with "text" last, e.g.
   {"name": "stdout", "text": "..."}; when its text takes more than max
   bytes of JSON, *keep is how many bytes of content to send (ending inside
   the text, between two characters) and *dropped how many bytes of text
   that leaves out (decoded, as korch_session counts them): the caller
   closes the object with ","korch_dropped":N}. false when content is not
   of that shape or needs no cut. Bytes are scanned with memchr, none copied:
   a 30 MB message costs about a millisecond. */
bool korch_wsmsg_stream_cut(const void *content, size_t len, size_t max, size_t *keep, size_t *dropped);

korch_wsframe_t *korch_wsframe_ref(korch_wsframe_t *f);
/* Drop a reference; frees on the last and nulls *f. */
void korch_wsframe_unref(korch_wsframe_t **f);

#endif
