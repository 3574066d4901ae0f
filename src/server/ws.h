/*  srv_ws_t: one websocket client of a kernel's channels
 *  (/api/kernels/{id}/channels), as libwebsockets serves it: the messages
 *  it sends, reassembled up to a bound; the frames for it, in a bounded
 *  queue written as the socket takes them (a client that lets the queue
 *  overflow is dropped, never the kernel its messages).
 *
 *  It knows no kernel: server.c makes one when an upgrade is accepted,
 *  hands it to the relay (kernels.c: srv_kernel_attach), gives the relay
 *  each message it completes (srv_ws_receive) and detaches it before
 *  srv_ws_destroy. The relay sends through srv_ws_send / srv_ws_finish.
 *  Loop thread only; the lws callbacks that call srv_ws_writable and
 *  srv_ws_receive run on it.
 */
#ifndef KORCH_SERVER_WS_H
#define KORCH_SERVER_WS_H

#include "server_int.h"
#include "korch/wsmsg.h"

struct srv_ws {
    srv_http_t *http;           /* the transport's state (waking lws, counters, limits) */
    struct lws *wsi;            /* NULL once the connection is gone */
    srv_kernel_t *kernel;       /* NULL once detached */
    struct srv_relay *relay;    /* the relay it was attached through (kernels.c) */
    korch_ws_proto_t proto;
    srv_user_t user;            /* who opened it (ident.h) */
    char session_key[128];      /* the client's session_id, its messages' header.session, or a unique "#n" */
    bool has_session_id;        /* session_key is the URL's ?session_id= */
    bool header_session;        /* session_key was taken from its first message's header.session */
    uint64_t attach_seq;        /* the kernel's iopub_seq when it attached (kernels.c) */
    zlistx_t *held;             /* korch_wsframe_t*, referenced: what it gets until it is named (kernels.c) */
    int hold_timer;             /* releases held after a while (0: none) */
    /* receiving */
    korch_buf_t rx;             /* the message being reassembled, bounded by --max-ws-message */
    bool rx_binary, rx_skip;
    /* sending */
    zlistx_t *queue;            /* korch_wsframe_t*, referenced */
    size_t queued_bytes;
    size_t tx_off;              /* bytes of the first queued frame already written */
    bool dropping;
    bool finishing;             /* srv_ws_finish: close once the queue is written */
    uint64_t sent, received;
    uint32_t malformed;         /* its messages that did not parse */
};

/* The websocket of an established connection: its subprotocol (v1 when the
   client chose it, else legacy), its ?session_id= when printable ASCII,
   else "#seq". Messages up to max_message bytes. NULL without memory. */
srv_ws_t *srv_ws_new(srv_http_t *http, struct lws *wsi, size_t max_message, uint64_t seq);
/* Frees it (detached from its kernel first: srv_kernel_detach) and what it
   still had queued; accepts NULL and nulls *pws. */
void srv_ws_destroy(srv_ws_t **pws);

/* LWS_CALLBACK_SERVER_WRITEABLE: write what is queued, a turn's worth.
   Returns -1 when the connection must close. */
int srv_ws_writable(srv_ws_t *ws);
/* LWS_CALLBACK_RECEIVE: a fragment of a message. Returns 1 when a message
   is complete: ws->rx holds it (ws->rx_binary says its kind) until
   srv_ws_received; 0 when more is to come (or a message over the bound was
   dropped, and said so); -1 when the connection must close. */
int srv_ws_receive(srv_ws_t *ws, const void *in, size_t len);
/* The complete message was handled: forget it. */
void srv_ws_received(srv_ws_t *ws);

/* Bytes frames need before their data (LWS_PRE). */
size_t srv_ws_headroom(void);

/* Queue a frame for the client (takes a reference of its own). */
void srv_ws_send(srv_ws_t *ws, korch_wsframe_t *f);

/* Close the connection (asynchronously). */
void srv_ws_close(srv_ws_t *ws, const char *why);

/* Close it once what is queued for it is written (a kernel's last words),
   or after a few seconds if the client does not read them. */
void srv_ws_finish(srv_ws_t *ws, const char *why);

#endif
