/*  The server's kernels: lifecycle, and the relay between a kernel's
 *  channels and its websocket clients.
 *
 *  Routing, as jupyter_server does with one set of ZeroMQ sockets per
 *  websocket, here over korch's one client per kernel:
 *    - IOPub goes to every connected client.
 *    - A client's shell / control / stdin request is remembered by msg_id
 *      (-> the client's session key); the kernel's messages on those
 *      channels go to the client whose request is their parent. A *_reply
 *      ends the entry (input_request on stdin does not: the reply follows).
 *    - A client that disconnects with a session_id leaves a bounded replay
 *      buffer: IOPub and its replies are kept and replayed, in order, when
 *      a websocket with the same session_id opens again.
 *    - A client without ?session_id= (Notebook 6.4's and jupyter_server
 *      1.x's gateway clients connect so) is known by its first message's
 *      header.session, which the browser keeps across reconnects: its
 *      replies are routed and its replay buffer kept under that name, and
 *      replayed when its first message shows it is back (without what it
 *      already got live since it connected).
 *    - When the kernel dies and is restarted, or dies for good, clients
 *      get an IOPub status "restarting" / "dead", as jupyter_server sends
 *      (not for a restart asked for: jupyter_server is silent, and the
 *      Notebook UI takes "restarting" for a crash); when it is deleted
 *      or culled, "dead" too (what a dying kernel says) before the close,
 *      so that a notebook shows its dead-kernel dialog.
 *  Messages from clients are parsed (wsmsg.c), keep their own header and
 *  are signed by korch_kernel_send; the kernel's are verified by korch's
 *  session before they get here.
 */
#include "server_int.h"
#include "taint.h"
#include "relay.h"
#include "metrics.h"
#include "ws.h"
#include "trace.h"
#include "audit.h"
#include "korch/log.h"
#include "korch/session.h"
#include "korch/uuid.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ROUTES 10000        /* requests awaiting replies, per kernel */
#define MAX_REPLAY_SESSIONS 8   /* disconnected session_ids kept per kernel */
#define REPLAY_TTL_MS (10 * 60 * 1000)
#define MAX_ENV_VARS 256
#define MAX_MALFORMED_LOGGED 10 /* per websocket */
/* A socket without ?session_id= that may be a session coming back gets
   nothing until its first message names it (then the session's replay
   first, in order) or this long has passed. Notebook's gateway client
   sends the browser's kernel_info_request as soon as it is connected. */
#define HOLD_MS 3000

typedef struct {
    char key[128];
    uint64_t seq;
} s_route_t;

/* A message kept for a disconnected session. */
typedef struct {
    korch_wsframe_t *f;         /* referenced */
    uint64_t seq;               /* the IOPub broadcast it was (KR(mk)->iopub_seq), 0 for a reply */
} s_kept_t;

typedef struct {
    char key[128];
    korch_ws_proto_t proto;
    zlistx_t *frames;           /* s_kept_t* (owned) */
    size_t bytes;
    int64_t since_ms;
    bool overflowed;
} s_replay_t;

static void s_free_item(void **item)
{
    free(*item);
    *item = NULL;
}

static void s_replay_free(s_replay_t **pr)
{
    s_replay_t *r = *pr;
    if (!r)
        return;
    s_kept_t *h;
    while ((h = zlistx_first(r->frames))) {
        zlistx_delete(r->frames, zlistx_cursor(r->frames));
        korch_wsframe_unref(&h->f);
        free(h);
    }
    zlistx_destroy(&r->frames);
    free(r);
    *pr = NULL;
}

#define KR(mk) ((s_kr_t *)(mk)->relay)

struct srv_relay {
    korch_loop_t *loop;
    size_t max_replay_bytes;
    srv_metrics_t *metrics;
    srv_audit_t *audit;
    srv_relay_hold_fn *hold;    /* a restart keeps the taint while this says so (agents) */
    void *hold_arg;
};

/* The relay of one kernel (its mk->relay). */
typedef struct {
    srv_relay_t *r;
    zlistx_t *conns;            /* srv_ws_t*, not owned */
    zhashx_t *routes;           /* parent msg_id -> s_route_t (owned) */
    uint64_t route_seq;
    zlistx_t *replay;           /* s_replay_t* (owned): buffers of disconnected sessions */
    uint64_t iopub_seq;         /* IOPub messages broadcast so far */
    srv_taint_t *taint;         /* what clients may be sent (taint.c) */
} s_kr_t;

/* ---------------------------------------------------------------- relay */

/* A frame of msg for each protocol, made when first needed. A kernel's
   message is relayed from its raw parts, as the kernel serialized them:
   nothing is parsed or dumped again, and a big content (a 20 MB stream
   message) is not even copied: frames refer to the kernel's bytes, which
   clients' writers copy out a chunk at a time. (Parsing and dumping took
   a quarter of a second per 8 MiB, in one go, while every other client
   and kernel waited.) */
typedef struct {
    const korch_msg_t *msg;
    korch_msg_raw_t *raw;           /* NULL: korch's own message, serialized */
    korch_channel_t ch;
    korch_wsblob_t *content;        /* a big raw content, taken from raw */
    size_t content_len;             /* the part of it clients get */
    char suffix[160];               /* closes a cut stream's content */
    korch_wsframe_t *frame[KORCH_WS__COUNT];
} s_frames_t;

#define BLOB_MIN (64 * 1024) /* smaller contents are copied */
/* A stream message's text beyond this (as JSON) is cut for clients, with
   a line at the cut saying how much went ("[korch: 4.2 MB of output
   dropped here]": what a notebook user sees) and content.korch_dropped
   the bytes, as korch_exec's outputs are:
   ipykernel sends 0.2 s of fast printing as one message of tens of MB,
   which no notebook shows, and Tornado's websocket client (jupyter_server
   --gateway-url) closes the connection on a message over 10 MiB. */
#define MAX_STREAM_JSON (8u << 20)

/* Take a big content from raw; cut it when it is a huge stream. */
static bool s_take_content(s_frames_t *fs)
{
    zframe_t **content = &fs->raw->frame[3];
    if (fs->content)
        return true;
    if (!*content || zframe_size(*content) < BLOB_MIN)
        return true;
    size_t keep, dropped;
    bool cut = strcmp(korch_msg_type(fs->msg), "stream") == 0 &&
               korch_wsmsg_stream_cut(zframe_data(*content), zframe_size(*content), MAX_STREAM_JSON, &keep,
                                      &dropped);
    fs->content_len = cut ? keep : zframe_size(*content);
    if (cut) {
        char size[32];
        if (dropped >= 1000 * 1000)
            snprintf(size, sizeof size, "%.1f MB", dropped / 1e6);
        else if (dropped >= 1000)
            snprintf(size, sizeof size, "%.1f kB", dropped / 1e3);
        else
            snprintf(size, sizeof size, "%zu bytes", dropped);
        /* inside the JSON string the cut left open: \n as its escape */
        snprintf(fs->suffix, sizeof fs->suffix, "\\n[korch: %s of output dropped here]\\n\",\"korch_dropped\":%zu}",
                 size, dropped);
    }
    return (fs->content = korch_wsblob_new(content)) != NULL;
}

static korch_wsframe_t *s_frame(s_frames_t *fs, korch_ws_proto_t proto)
{
    if (fs->frame[proto])
        return fs->frame[proto];
    if (!fs->raw) {
        fs->frame[proto] = korch_wsmsg_serialize(proto, fs->ch, fs->msg, srv_ws_headroom());
        return fs->frame[proto];
    }
    if (!s_take_content(fs))
        return NULL;
    korch_wsparts_t p = {.content = fs->content, .content_len = fs->content_len, .msg_id = korch_msg_id(fs->msg),
                         .msg_type = korch_msg_type(fs->msg), .buffers = fs->msg->buffers};
    for (int i = 0; i < 3; i++) {
        p.data[i] = zframe_data(fs->raw->frame[i]);
        p.len[i] = zframe_size(fs->raw->frame[i]);
    }
    if (fs->content) { /* what follows its share: the cut's end, if any */
        p.data[3] = fs->suffix;
        p.len[3] = strlen(fs->suffix);
    } else if (fs->raw->frame[3]) {
        p.data[3] = zframe_data(fs->raw->frame[3]);
        p.len[3] = zframe_size(fs->raw->frame[3]);
    } else
        return NULL; /* taken by a blob that could not be made */
    fs->frame[proto] = korch_wsmsg_serialize_parts(proto, fs->ch, &p, srv_ws_headroom());
    return fs->frame[proto];
}

static void s_frames_release(s_frames_t *fs)
{
    for (int i = 0; i < KORCH_WS__COUNT; i++)
        korch_wsframe_unref(&fs->frame[i]);
    korch_wsblob_unref(&fs->content);
}

static s_replay_t *s_replay_find(srv_kernel_t *mk, const char *key)
{
    for (s_replay_t *r = zlistx_first(KR(mk)->replay); r; r = zlistx_next(KR(mk)->replay))
        if (strcmp(r->key, key) == 0)
            return r;
    return NULL;
}

static void s_replay_add(srv_kernel_t *mk, s_replay_t *r, s_frames_t *fs, uint64_t seq)
{
    if (korch_now_ms() - r->since_ms > REPLAY_TTL_MS) {
        zlistx_delete(KR(mk)->replay, zlistx_find(KR(mk)->replay, r));
        korch_info("kernel %.8s: replay buffer of session %s expired", mk->id, r->key);
        s_replay_free(&r);
        return;
    }
    korch_wsframe_t *f = s_frame(fs, r->proto);
    if (!f)
        return;
    size_t max = KR(mk)->r->max_replay_bytes;
    s_kept_t *h = malloc(sizeof *h);
    if (!h)
        return;
    while (r->bytes && r->bytes + f->len > max) {
        s_kept_t *old = zlistx_first(r->frames);
        zlistx_delete(r->frames, zlistx_cursor(r->frames));
        r->bytes -= old->f->len;
        korch_wsframe_unref(&old->f);
        free(old);
        if (!r->overflowed)
            korch_warn("kernel %.8s: replay buffer of session %s is full; dropping its oldest messages", mk->id,
                       r->key);
        r->overflowed = true;
    }
    h->f = korch_wsframe_ref(f);
    h->seq = seq;
    zlistx_add_end(r->frames, h);
    r->bytes += f->len;
}

static srv_ws_t *s_conn_for(srv_kernel_t *mk, const char *key)
{
    srv_ws_t *found = NULL;
    for (srv_ws_t *ws = zlistx_first(KR(mk)->conns); ws; ws = zlistx_next(KR(mk)->conns))
        if (strcmp(ws->session_key, key) == 0)
            found = ws; /* the newest one with that key */
    return found;
}

/* $KORCH_TRACE_WS (trace.h): msg queued for ws as its N-th message. */
static void s_trace_q(srv_ws_t *ws, const korch_msg_t *msg)
{
    const char *type = korch_msg_type(msg);
    json_t *st = strcmp(type, "status") == 0 ? json_object_get(msg->content, "execution_state") : NULL;
    srv_trace("q %s %llu %s %s%s%s %lld", ws->session_key, (unsigned long long)(ws->sent + zlistx_size(ws->queue)),
              *korch_msg_parent_id(msg) ? korch_msg_parent_id(msg) : "-", type, st ? "/" : "",
              st ? json_string_value(st) : "", (long long)srv_trace_now());
}

/* Send f (made of msg) to ws, or hold it while ws waits for its name. */
static void s_deliver(srv_ws_t *ws, korch_wsframe_t *f, const korch_msg_t *msg)
{
    if (ws->held)
        zlistx_add_end(ws->held, korch_wsframe_ref(f));
    else {
        srv_ws_send(ws, f);
        if (srv_trace_on && zlistx_size(ws->queue))
            s_trace_q(ws, msg);
    }
}

/* Stop holding: send what was held (send) or forget it. */
static void s_unhold(srv_ws_t *ws, bool send)
{
    if (!ws->held)
        return;
    if (ws->hold_timer)
        korch_loop_timer_end(ws->relay->loop, ws->hold_timer);
    ws->hold_timer = 0;
    zlistx_t *held = ws->held;
    ws->held = NULL;
    korch_wsframe_t *f;
    while ((f = zlistx_first(held))) {
        zlistx_delete(held, zlistx_cursor(held));
        if (send)
            srv_ws_send(ws, f);
        korch_wsframe_unref(&f);
    }
    zlistx_destroy(&held);
}

static int s_on_hold_timer(korch_loop_t *loop, int timer_id, void *arg)
{
    srv_ws_t *ws = arg;
    ws->hold_timer = 0;
    korch_debug("websocket %s: no message named it within %d ms", ws->session_key, HOLD_MS);
    s_unhold(ws, true);
    return 0;
}

static void s_broadcast(srv_kernel_t *mk, s_frames_t *fs)
{
    uint64_t seq = ++KR(mk)->iopub_seq;
    for (srv_ws_t *ws = zlistx_first(KR(mk)->conns); ws; ws = zlistx_next(KR(mk)->conns)) {
        korch_wsframe_t *f = s_frame(fs, ws->proto);
        if (f)
            s_deliver(ws, f, fs->msg);
    }
    /* The relay may have closed connections: never mid-iteration. */
    s_replay_t *r = zlistx_first(KR(mk)->replay);
    while (r) {
        s_replay_t *next = zlistx_next(KR(mk)->replay);
        s_replay_add(mk, r, fs, seq);
        r = next;
    }
}

/* An IOPub message of korch's own (content stolen), as a kernel's: its
   header filled in, the kernel's id as its session. NULL when out of memory. */
static korch_msg_t *s_own_msg(srv_kernel_t *mk, const char *type, json_t *content)
{
    korch_msg_t *m = korch_msg_new(type, content);
    if (!m)
        return NULL;
    char id[37], date[32];
    korch_uuid(id);
    korch_iso8601_now(date);
    json_object_set_new(m->header, "msg_id", json_string(id));
    json_object_set_new(m->header, "session", json_string(mk->id));
    json_object_set_new(m->header, "username", json_string("korch"));
    json_object_set_new(m->header, "date", json_string(date));
    json_object_set_new(m->header, "version", json_string("5.3"));
    return m;
}

/* The taint's state to one client (ws) or to all (NULL). */
static void s_tell_taint(srv_kernel_t *mk, srv_ws_t *ws)
{
    korch_msg_t *m = s_own_msg(mk, "korch_untrusted", srv_taint_notice(KR(mk)->taint));
    if (!m)
        return;
    s_frames_t fs = {.msg = m, .ch = KORCH_CH_IOPUB};
    if (!ws)
        s_broadcast(mk, &fs);
    else {
        korch_wsframe_t *f = s_frame(&fs, ws->proto);
        if (f)
            s_deliver(ws, f, m);
    }
    s_frames_release(&fs);
    korch_msg_destroy(&m);
}

void srv_kernel_taint(srv_kernel_t *mk, const char *why)
{
    if (mk && KR(mk) && srv_taint_set(KR(mk)->taint, why))
        s_tell_taint(mk, NULL);
}

bool srv_kernel_untaint(srv_kernel_t *mk)
{
    if (!mk || !KR(mk) || !srv_taint_clear(KR(mk)->taint))
        return false;
    s_tell_taint(mk, NULL);
    return true;
}

void srv_kernel_taint_model(srv_kernel_t *mk, json_t *model)
{
    srv_taint_model(mk && KR(mk) ? KR(mk)->taint : NULL, model);
}

void srv_relay_hold_taint(srv_relay_t *r, srv_relay_hold_fn *fn, void *arg)
{
    r->hold = fn;
    r->hold_arg = arg;
}

static void s_route_evict(srv_kernel_t *mk)
{
    /* Requests without replies (comm traffic of buggy clients, a kernel
       restarted mid-request) would pile up: drop the oldest tenth. */
    uint64_t cut = KR(mk)->route_seq - MAX_ROUTES + MAX_ROUTES / 10;
    zlistx_t *keys = zhashx_keys(KR(mk)->routes);
    for (const char *k = keys ? zlistx_first(keys) : NULL; k; k = zlistx_next(keys)) {
        s_route_t *r = zhashx_lookup(KR(mk)->routes, k);
        if (r && r->seq < cut)
            zhashx_delete(KR(mk)->routes, k);
    }
    zlistx_destroy(&keys);
}

static bool s_ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* An IOPub message only korch may send: its own notices (korch_untrusted,
   which korch's extension believes) and a status a kernel cannot know of
   itself ("restarting", "dead": the manager says those, as jupyter_server
   does). A kernel forging one would clear the extension's untrusted badge or
   make a client think it died; it is dropped, tainted or not. */
static bool s_forged(const korch_msg_t *msg)
{
    const char *type = korch_msg_type(msg);
    if (strncmp(type, "korch_", 6) == 0)
        return true;
    if (strcmp(type, "status") != 0)
        return false;
    const char *st = json_string_value(json_object_get(msg->content, "execution_state"));
    return !st || (strcmp(st, "busy") != 0 && strcmp(st, "idle") != 0 && strcmp(st, "starting") != 0);
}

static void s_on_message(srv_kernel_t *mk, korch_channel_t ch, const korch_msg_t *msg, korch_msg_raw_t *raw,
                         void *arg)
{
    if (!KR(mk))
        return;
    if (ch == KORCH_CH_IOPUB && s_forged(msg)) {
        korch_debug("kernel %.8s: its own IOPub %s dropped (only korch says that)", mk->id, korch_msg_type(msg));
        return;
    }
    if (ch == KORCH_CH_IOPUB && strcmp(korch_msg_type(msg), "execute_input") == 0)
        KR(mk)->r->metrics->executions++;
    /* a tainted kernel's messages are made inert first (taint.c) */
    korch_msg_t *clean = NULL;
    if (srv_taint_filter(KR(mk)->taint, ch, msg, raw, &clean) == KORCH_NEUT_DROP)
        return;
    s_frames_t fs = {.msg = clean ? clean : msg, .raw = clean ? NULL : raw, .ch = ch};
    if (ch == KORCH_CH_IOPUB) {
        s_broadcast(mk, &fs);
        s_frames_release(&fs);
        korch_msg_destroy(&clean);
        return;
    }
    const char *parent = korch_msg_parent_id(msg);
    s_route_t *route = *parent ? zhashx_lookup(KR(mk)->routes, parent) : NULL;
    if (!route) {
        /* korch's own requests (the readiness handshake) or a forgotten one */
        korch_debug("kernel %.8s: %s for nobody's request dropped", mk->id, korch_msg_type(msg));
        korch_msg_destroy(&clean);
        return;
    }
    char key[128];
    snprintf(key, sizeof key, "%s", route->key);
    if ((ch == KORCH_CH_SHELL || ch == KORCH_CH_CONTROL) && s_ends_with(korch_msg_type(msg), "_reply"))
        zhashx_delete(KR(mk)->routes, parent);
    srv_ws_t *ws = s_conn_for(mk, key);
    if (ws) {
        korch_wsframe_t *f = s_frame(&fs, ws->proto);
        if (f)
            s_deliver(ws, f, msg);
        if (srv_taint_on(KR(mk)->taint) && strcmp(korch_msg_type(msg), "kernel_info_reply") == 0)
            s_tell_taint(mk, ws); /* a client that has just (re)connected hears it now */
    } else {
        s_replay_t *r = s_replay_find(mk, key);
        if (r)
            s_replay_add(mk, r, &fs, 0);
    }
    s_frames_release(&fs);
    korch_msg_destroy(&clean);
}

/* An IOPub status message of korch's own (restarting / dead). */
static void s_send_status(srv_kernel_t *mk, const char *state)
{
    korch_msg_t *m = s_own_msg(mk, "status", json_pack("{s:s}", "execution_state", state));
    if (!m)
        return;
    s_frames_t fs = {.msg = m, .ch = KORCH_CH_IOPUB};
    s_broadcast(mk, &fs);
    s_frames_release(&fs);
    korch_msg_destroy(&m);
}

/* ------------------------------------------------------------ lifecycle */

static void s_kr_free(s_kr_t **pkr)
{
    s_kr_t *kr = *pkr;
    if (!kr)
        return;
    zlistx_destroy(&kr->conns);
    zhashx_destroy(&kr->routes);
    s_replay_t *r;
    while (kr->replay && (r = zlistx_first(kr->replay))) {
        zlistx_delete(kr->replay, zlistx_cursor(kr->replay));
        s_replay_free(&r);
    }
    zlistx_destroy(&kr->replay);
    srv_taint_destroy(&kr->taint);
    free(kr);
    *pkr = NULL;
}

/* Clients closed ("dead" first: the Notebook UI ignores a closed socket
   but shows its dead-kernel dialog on that), replay buffers dropped. */
static void s_kernel_deleted(srv_kernel_t *mk)
{
    s_kr_t *kr = KR(mk);
    if (korch_kernel_state(mk->k) != KORCH_KERNEL_DEAD)
        s_send_status(mk, "dead");
    srv_ws_t *ws;
    while ((ws = zlistx_first(kr->conns))) {
        zlistx_delete(kr->conns, zlistx_cursor(kr->conns));
        mk->connections--;
        ws->kernel = NULL;
        s_unhold(ws, true);
        srv_ws_finish(ws, "kernel shut down");
    }
    s_replay_t *r;
    while ((r = zlistx_first(kr->replay))) {
        zlistx_delete(kr->replay, zlistx_cursor(kr->replay));
        s_replay_free(&r);
    }
}

static void s_on_kernel(srv_kernel_t *mk, srv_kev_t ev, const char *detail, void *arg)
{
    srv_relay_t *rl = arg;
    if (ev == SRV_KEV_STARTED) {
        s_kr_t *kr = calloc(1, sizeof *kr);
        if (kr && (kr->conns = zlistx_new()) && (kr->routes = zhashx_new()) && (kr->replay = zlistx_new()) &&
            (kr->taint = srv_taint_new(mk->id))) {
            zhashx_set_destructor(kr->routes, s_free_item);
            kr->r = rl;
            mk->relay = kr;
        } else {
            s_kr_free(&kr);
            korch_warn("kernel %.8s: out of memory for its relay: shutting it down", mk->id);
            srv_kmgr_delete(mk);
        }
        return;
    }
    if (!KR(mk))
        return;
    switch (ev) {
    case SRV_KEV_RESTARTING:
        /* what was asked of the old process will never be answered */
        zhashx_purge(KR(mk)->routes);
        if (!mk->restart_requested) /* jupyter_server is silent on a restart asked for */
            s_send_status(mk, "restarting");
        /* a new process: what the agent's code did is gone with the old one,
           unless an agent's turn is running in it still */
        if (srv_taint_on(KR(mk)->taint) && rl->hold && rl->hold(mk, rl->hold_arg))
            korch_info("kernel %.8s restarted during an agent's turn: its outputs stay untrusted", mk->id);
        else
            srv_kernel_untaint(mk);
        break;
    case SRV_KEV_DEAD:
        s_send_status(mk, "dead");
        break;
    case SRV_KEV_DELETED:
        s_kernel_deleted(mk);
        break;
    case SRV_KEV_GONE: {
        s_kr_t *kr = KR(mk);
        mk->relay = NULL;
        s_kr_free(&kr);
        break;
    }
    default:
        break;
    }
}

srv_relay_t *srv_relay_new(srv_kmgr_t *m, const srv_relay_opts_t *o)
{
    srv_relay_t *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->loop = o->loop;
    r->max_replay_bytes = o->max_replay_bytes;
    r->metrics = o->metrics;
    r->audit = o->audit;
    srv_kmgr_listen(m, s_on_kernel, r);
    srv_kmgr_set_message_sink(m, s_on_message, r);
    return r;
}

void srv_relay_destroy(srv_relay_t **pr)
{
    free(*pr);
    *pr = NULL;
}

/* ------------------------------------------------------------ clients */

/* ws now has its session's name: give it what was kept for that session,
   but the IOPub it already got (or holds) since it attached. */
static void s_replay_resume(srv_kernel_t *mk, srv_ws_t *ws)
{
    s_replay_t *r = s_replay_find(mk, ws->session_key);
    if (!r)
        return;
    zlistx_delete(KR(mk)->replay, zlistx_find(KR(mk)->replay, r));
    if (r->proto != ws->proto)
        korch_warn("kernel %.8s: session %s came back on the other protocol; %zu buffered messages dropped", mk->id,
                   r->key, zlistx_size(r->frames));
    else {
        size_t n = 0;
        for (s_kept_t *h = zlistx_first(r->frames); h; h = zlistx_next(r->frames))
            if (h->seq == 0 || h->seq <= ws->attach_seq) {
                srv_ws_send(ws, h->f);
                n++;
            }
        korch_info("kernel %.8s: replayed %zu messages to session %s", mk->id, n, r->key);
    }
    s_replay_free(&r);
}

void srv_kernel_attach(srv_kernel_t *mk, srv_ws_t *ws)
{
    ws->kernel = mk;
    ws->relay = KR(mk)->r;
    mk->connections++;
    ws->attach_seq = KR(mk)->iopub_seq;
    zlistx_add_end(KR(mk)->conns, ws);
    srv_kernel_touch(mk);
    if (srv_taint_on(KR(mk)->taint))
        s_tell_taint(mk, ws);
    if (ws->has_session_id)
        s_replay_resume(mk, ws);
    else if (zlistx_size(KR(mk)->replay)) { /* perhaps one of them, back: wait for its name */
        ws->held = zlistx_new();
        ws->hold_timer = ws->held ? korch_loop_timer(KR(mk)->r->loop, HOLD_MS, 1, s_on_hold_timer, ws) : 0;
    }
}

/* A socket without ?session_id= takes its name from its first message
   that has a usable header.session (printable, as a session_id must be). */
static void s_name_from_header(srv_kernel_t *mk, srv_ws_t *ws, const korch_msg_t *msg)
{
    const char *sess = json_string_value(json_object_get(msg->header, "session"));
    size_t n = sess ? strlen(sess) : 0;
    bool ok = n > 0 && n < sizeof ws->session_key && sess[0] != '#';
    for (const char *c = sess; ok && *c; c++)
        ok = (unsigned char)*c >= 0x20 && *c != 0x7f;
    if (ok) {
        korch_info("websocket %s is session %s (its messages' header.session)", ws->session_key, sess);
        snprintf(ws->session_key, sizeof ws->session_key, "%s", sess);
        ws->header_session = true;
        s_replay_resume(mk, ws);
    }
    s_unhold(ws, true);
}

void srv_kernel_detach(srv_ws_t *ws)
{
    srv_kernel_t *mk = ws->kernel;
    if (!mk)
        return;
    ws->kernel = NULL;
    s_unhold(ws, false);
    void *h = zlistx_find(KR(mk)->conns, ws);
    if (h) {
        zlistx_delete(KR(mk)->conns, h);
        mk->connections--;
    }
    srv_kernel_touch(mk);
    if (!(ws->has_session_id || ws->header_session) || mk->doomed || s_conn_for(mk, ws->session_key) ||
        s_replay_find(mk, ws->session_key))
        return;
    /* keep what this session would have received, for its return */
    if (zlistx_size(KR(mk)->replay) >= MAX_REPLAY_SESSIONS) {
        s_replay_t *old = zlistx_first(KR(mk)->replay);
        zlistx_delete(KR(mk)->replay, zlistx_cursor(KR(mk)->replay));
        s_replay_free(&old);
    }
    s_replay_t *r = calloc(1, sizeof *r);
    if (!r || !(r->frames = zlistx_new())) {
        free(r);
        return;
    }
    snprintf(r->key, sizeof r->key, "%s", ws->session_key);
    r->proto = ws->proto;
    r->since_ms = korch_now_ms();
    /* what was queued for it and not written (a message cut short by the
       close included: the client dropped its fragments) comes back first */
    size_t max = KR(mk)->r->max_replay_bytes, n = 0;
    for (korch_wsframe_t *f = zlistx_first(ws->queue); f; f = zlistx_next(ws->queue)) {
        s_kept_t *kept = r->bytes + f->len <= max ? malloc(sizeof *kept) : NULL;
        if (!kept)
            break;
        kept->f = korch_wsframe_ref(f);
        kept->seq = 0;
        zlistx_add_end(r->frames, kept);
        r->bytes += f->len;
        n++;
    }
    if (n)
        korch_info("kernel %.8s: %zu messages never written to session %s kept for its return", mk->id, n, r->key);
    zlistx_add_end(KR(mk)->replay, r);
}

void srv_kernel_client_message(srv_ws_t *ws, const void *data, size_t len, bool binary)
{
    srv_kernel_t *mk = ws->kernel;
    korch_channel_t ch;
    korch_msg_t *msg = NULL;
    korch_err_t err = {0};
    int64_t t_rx = srv_trace_on ? srv_trace_now() : 0;
    if (korch_wsmsg_parse(ws->proto, binary, data, len, &ch, &msg, &err) != KORCH_OK) {
        if (ws->relay)
            ws->relay->metrics->ws_malformed++;
        /* the reason may quote the client's bytes: printable only, and a
           client sending nothing else cannot flood the log */
        for (char *c = err.msg; *c; c++)
            if ((unsigned char)*c < 0x20 || *c == 0x7f)
                *c = '?';
        if (++ws->malformed <= MAX_MALFORMED_LOGGED)
            korch_warn("websocket %s: dropped a malformed message (%zu bytes): %s%s", ws->session_key, len, err.msg,
                       ws->malformed == MAX_MALFORMED_LOGGED ? " (its further malformed messages are not logged)"
                                                             : "");
        return;
    }
    if (!mk || mk->doomed) {
        korch_msg_destroy(&msg);
        return;
    }
    srv_kernel_touch(mk);
    if (!ws->has_session_id && !ws->header_session)
        s_name_from_header(mk, ws, msg);
    const char *id = korch_msg_id(msg);
    if (!*id) {
        char uuid[37];
        korch_uuid(uuid);
        json_object_set_new(msg->header, "msg_id", json_string(uuid));
        id = korch_msg_id(msg);
    }
    const char *type = korch_msg_type(msg);
    /* requests that the kernel answers. Not input_reply, nor the one-way
       comm messages (messaging spec, "Custom Messages": comm_open,
       comm_msg, comm_close); comm_info_request has a comm_info_reply. */
    bool answered = ch != KORCH_CH_STDIN && strcmp(type, "comm_open") != 0 && strcmp(type, "comm_msg") != 0 &&
                    strcmp(type, "comm_close") != 0;
    if (answered) {
        if (zhashx_size(KR(mk)->routes) >= MAX_ROUTES)
            s_route_evict(mk);
        s_route_t *r = calloc(1, sizeof *r);
        if (r) {
            snprintf(r->key, sizeof r->key, "%s", ws->session_key);
            r->seq = ++KR(mk)->route_seq;
            zhashx_update(KR(mk)->routes, id, r);
        }
    }
    char idcopy[128];
    snprintf(idcopy, sizeof idcopy, "%s", id);
    if (ch == KORCH_CH_SHELL && strcmp(type, "execute_request") == 0) { /* who ran what (audit.h) */
        json_t *code = json_object_get(msg->content, "code");
        if (json_is_string(code))
            srv_audit_code(KR(mk)->r->audit, &ws->user, "kernel.execute", "kernel", mk->id, json_string_value(code),
                           json_string_length(code));
    }
    if (korch_kernel_send(mk->k, ch, &msg, &err) != KORCH_OK) {
        korch_warn("kernel %.8s: cannot relay a message: %s", mk->id, err.msg);
        if (answered)
            zhashx_delete(KR(mk)->routes, idcopy);
    } else {
        KR(mk)->r->metrics->ws_received++;
        if (srv_trace_on)
            srv_trace("rx %s %s %lld %lld", ws->session_key, idcopy, (long long)t_rx, (long long)srv_trace_now());
    }
}
