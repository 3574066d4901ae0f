/*  srv_ws_t: a websocket client of a kernel's channels (ws.h). The bounded
 *  send side (srv_ws_send, written in turns by srv_ws_writable, fragments
 *  of big messages through one scratch buffer) and the bounded receive side
 *  (srv_ws_receive reassembles a message up to --max-ws-message).
 */
#include "ws.h"
#include "metrics.h"
#include "trace.h"
#include "korch/log.h"

#include <libwebsockets.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t srv_ws_headroom(void) { return LWS_PRE; }

srv_ws_t *srv_ws_new(srv_http_t *http, struct lws *wsi, size_t max_message, uint64_t seq)
{
    char sid[128] = "";
    srv_ws_t *ws = calloc(1, sizeof *ws);
    if (!ws || !(ws->queue = zlistx_new())) {
        free(ws);
        return NULL;
    }
    ws->http = http;
    ws->wsi = wsi;
    korch_buf_init(&ws->rx, max_message, NULL);
    http->metrics->ws_open++;
    const struct lws_protocols *proto = lws_get_protocol(wsi);
    ws->proto = proto && proto->name && strcmp(proto->name, KORCH_WS_V1_PROTOCOL) == 0 ? KORCH_WS_V1 : KORCH_WS_LEGACY;
    /* a session_id must be printable ASCII (Jupyter's are uuids): it names the client in logs */
    bool have = lws_get_urlarg_by_name(wsi, "session_id=", sid, sizeof sid) && sid[0];
    for (const char *c = sid; have && *c; c++)
        have = *c >= 0x20 && *c < 0x7f;
    if (have) {
        snprintf(ws->session_key, sizeof ws->session_key, "%s", sid);
        ws->has_session_id = true;
    } else
        snprintf(ws->session_key, sizeof ws->session_key, "#%llu", (unsigned long long)seq);
    return ws;
}

void srv_ws_destroy(srv_ws_t **pws)
{
    srv_ws_t *ws = *pws;
    if (!ws)
        return;
    if (ws->http->metrics->ws_open)
        ws->http->metrics->ws_open--;
    korch_wsframe_t *f;
    while ((f = zlistx_first(ws->queue))) {
        zlistx_delete(ws->queue, zlistx_cursor(ws->queue));
        korch_wsframe_unref(&f);
    }
    zlistx_destroy(&ws->queue);
    korch_buf_free(&ws->rx);
    free(ws);
    *pws = NULL;
}

void srv_ws_send(srv_ws_t *ws, korch_wsframe_t *f)
{
    if (!ws->wsi || ws->dropping)
        return;
    srv_http_t *h = ws->http;
    /* Bounded: a client that does not read loses its connection, never the
       kernel its messages. One message always fits an empty queue. */
    if (ws->queued_bytes && ws->queued_bytes + f->len > h->max_ws_queue) {
        korch_warn("websocket %s: client is not reading (%zu bytes queued); dropping it", ws->session_key,
                   ws->queued_bytes);
        h->metrics->ws_dropped_slow++;
        srv_ws_close(ws, "not reading");
        return;
    }
    zlistx_add_end(ws->queue, korch_wsframe_ref(f));
    ws->queued_bytes += f->len;
    lws_callback_on_writable(ws->wsi);
    h->kick(h->kick_arg);
}

void srv_ws_close(srv_ws_t *ws, const char *why)
{
    if (ws->dropping || !ws->wsi)
        return;
    ws->dropping = true;
    korch_info("websocket %s: closing: %s", ws->session_key, why);
    /* asynchronously: the client may not be reading, so no close handshake */
    lws_set_timeout(ws->wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
    ws->http->kick(ws->http->kick_arg);
}

void srv_ws_finish(srv_ws_t *ws, const char *why)
{
    if (ws->dropping || ws->finishing || !ws->wsi)
        return;
    if (!zlistx_size(ws->queue)) {
        srv_ws_close(ws, why);
        return;
    }
    ws->finishing = true;
    korch_info("websocket %s: closing once its last %zu messages are written: %s", ws->session_key,
               zlistx_size(ws->queue), why);
    lws_set_timeout(ws->wsi, PENDING_TIMEOUT_USER_OK, 5); /* a client that does not read them */
    lws_callback_on_writable(ws->wsi);
    ws->http->kick(ws->http->kick_arg);
}

/* A big message goes out as fragments of this size (RFC 6455 5.4: "a
   fragmented message consists of a single frame with the FIN bit clear
   and an opcode other than 0, followed by zero or more frames with the FIN
   bit clear and the opcode set to 0, and terminated by a single frame with
   the FIN bit set and an opcode of 0"), copied into one scratch buffer:
   no copy of the whole message is ever made. */
#define WS_CHUNK (256 * 1024)
/* Bytes one connection may write per writable turn before the others get
   theirs; lws calls each writable connection once per service. */
#define WS_TURN_BYTES (1024 * 1024)

int srv_ws_writable(srv_ws_t *ws)
{
    struct lws *wsi = ws->wsi;
    srv_http_t *h = ws->http;
    if (ws->dropping)
        return -1;
    size_t budget = WS_TURN_BYTES;
    for (int n = 0; n < 64 && budget; ) {
        korch_wsframe_t *f = zlistx_first(ws->queue);
        if (!f)
            break;
        size_t off = ws->tx_off, len;
        int w;
        if (off == 0 && !f->blob && f->len <= WS_CHUNK) {
            /* the whole message, straight from the frame (it has LWS_PRE) */
            len = f->len;
            w = lws_write(wsi, f->data, len, f->binary ? LWS_WRITE_BINARY : LWS_WRITE_TEXT);
        } else {
            len = f->len - off < WS_CHUNK ? f->len - off : WS_CHUNK;
            if (!h->ws_scratch && !(h->ws_scratch = malloc(LWS_PRE + WS_CHUNK)))
                return -1;
            korch_wsframe_read(f, off, h->ws_scratch + LWS_PRE, len);
            int flags = off == 0 ? (f->binary ? LWS_WRITE_BINARY : LWS_WRITE_TEXT) : LWS_WRITE_CONTINUATION;
            if (off + len < f->len)
                flags |= LWS_WRITE_NO_FIN;
            w = lws_write(wsi, h->ws_scratch + LWS_PRE, len, flags);
        }
        if (w < (int)len) {
            korch_warn("websocket %s: write failed", ws->session_key);
            return -1;
        }
        budget = len < budget ? budget - len : 0;
        ws->tx_off += len;
        if (ws->tx_off == f->len) {
            zlistx_delete(ws->queue, zlistx_cursor(ws->queue));
            ws->queued_bytes -= f->len;
            ws->tx_off = 0;
            korch_wsframe_unref(&f);
            ws->sent++;
            h->metrics->ws_sent++;
            if (srv_trace_on)
                srv_trace("w %s %llu %lld", ws->session_key, (unsigned long long)ws->sent, (long long)srv_trace_now());
            n++;
        }
        /* lws keeps what the socket did not take; wait for it to drain */
        if (lws_send_pipe_choked(wsi))
            break;
    }
    if (ws->finishing && !zlistx_size(ws->queue) && !lws_send_pipe_choked(wsi)) {
        lws_close_reason(wsi, LWS_CLOSE_STATUS_GOINGAWAY, NULL, 0);
        return -1;
    }
    if (zlistx_size(ws->queue) || ws->finishing) {
        lws_callback_on_writable(wsi);
        h->kick(h->kick_arg);
    }
    return 0;
}

int srv_ws_receive(srv_ws_t *ws, const void *in, size_t len)
{
    struct lws *wsi = ws->wsi;
    if (ws->dropping)
        return 0;
    if (lws_is_first_fragment(wsi)) {
        korch_buf_reset(&ws->rx);
        ws->rx_skip = false;
        ws->rx_binary = lws_frame_is_binary(wsi);
    }
    if (!ws->rx_skip) {
        korch_rc_t rc = korch_buf_add(&ws->rx, in, len, "websocket message", NULL);
        if (rc == KORCH_E_TOOBIG) {
            korch_warn("websocket %s: message over %zu bytes dropped", ws->session_key, ws->http->max_ws_message);
            ws->rx_skip = true;
        } else if (rc)
            return -1;
    }
    if (!lws_is_final_fragment(wsi) || lws_remaining_packet_payload(wsi))
        return 0;
    ws->received++;
    if (!ws->rx_skip)
        return 1;
    srv_ws_received(ws);
    return 0;
}

void srv_ws_received(srv_ws_t *ws)
{
    korch_buf_reset(&ws->rx);
    /* do not keep a huge buffer around for one big message */
    if (ws->rx.cap > 1 << 20)
        korch_buf_free(&ws->rx);
}
