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

/* One serialized frame, shared by every client it is queued for. data has
   `headroom` writable bytes before it (libwebsockets wants LWS_PRE). */
typedef struct {
    int refs;
    bool binary;                /* binary frame (else text) */
    size_t len;                 /* bytes at data */
    unsigned char *data;        /* inside buf, after the headroom */
    unsigned char buf[];
} korch_wsframe_t;

/* Parse one complete websocket message from a client. On success *ch is the
   channel (shell, control or stdin) and *out a new message whose header is
   the client's own (msg_id kept). KORCH_E_PROTOCOL + err when malformed. */
korch_rc_t korch_wsmsg_parse(korch_ws_proto_t proto, bool binary, const void *data, size_t len,
                             korch_channel_t *ch, korch_msg_t **out, korch_err_t *err);

/* Serialize msg (borrowed) from channel ch for a client; NULL when out of
   memory. The frame starts with one reference. */
korch_wsframe_t *korch_wsmsg_serialize(korch_ws_proto_t proto, korch_channel_t ch, const korch_msg_t *msg,
                                       size_t headroom);

korch_wsframe_t *korch_wsframe_ref(korch_wsframe_t *f);
/* Drop a reference; frees on the last and nulls *f. */
void korch_wsframe_unref(korch_wsframe_t **f);

#endif
