/*  Admission of HTTP connections: what keeps idle sockets from starving
 *  the server (a "slowloris" attack needs no token).
 *
 *  libwebsockets gives every accepted connection a header table (an "ah",
 *  max_http_header_pool of them) at once, and a connection waits in a queue
 *  when none is free. Before this, 200 sockets that never sent a byte held
 *  all 64 tables for 10 s each (timeout_secs_ah_idle) and queued the
 *  rest for up to 30 s: legit requests timed out behind them. So korch
 *  counts connections itself, from the accept
 *  (LWS_CALLBACK_SERVER_NEW_CLIENT_INSTANTIATED) to the free
 *  (LWS_CALLBACK_WSI_DESTROY), and a connection is "pending" until its
 *  request's headers are complete:
 *
 *   - a pending connection gets header_timeout_ms from its accept to send
 *     them all, however slowly it trickles (a sweep every 250 ms closes it);
 *   - at most max_pending are pending, from all peers, and at most
 *     max_pending_per_peer from one address (an IPv6 /64 counts as one):
 *     over that the oldest pending connection (of that peer) that is not
 *     sending right now is closed to make room. A legit client sends its
 *     headers at once, so it is never the oldest for long; the ones closed
 *     are those that wait;
 *   - at most max_connections are open, max_per_peer from one address:
 *     over that the oldest pending one is closed, else the new one refused.
 *     Authenticated websockets and requests in progress are never closed
 *     to make room.
 *  The header-table pool is sized above max_pending (server.c) so a new
 *  connection never waits for one.
 */
#include "conns.h"
#include "metrics.h"
#include "korch/log.h"

#include <arpa/inet.h>
#include <libwebsockets.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#define SWEEP_MS 250

typedef struct {
    struct lws *wsi;
    char peer[INET6_ADDRSTRLEN + 4];
    int64_t t0_ms;
    void *pending;              /* its handle in c->pending; NULL once its headers are in */
} s_conn_t;

struct srv_conns {
    korch_loop_t *loop;
    srv_metrics_t *metrics;
    void (*kick)(void *arg);    /* have lws service its loop once more this round */
    void *kick_arg;
    srv_conns_limits_t lim;
    zlistx_t *pending;          /* s_conn_t*, in accept order (oldest first) */
    zhashx_t *peers;            /* peer -> size_t* open connections */
    size_t open;
    int timer;
};

/* The address a connection counts against: IPv4 (also v4-mapped IPv6), or
   the /64 of an IPv6 address. */
static void s_peer_key(int fd, char *key, size_t len)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    snprintf(key, len, "?");
    if (fd < 0 || getpeername(fd, (struct sockaddr *)&ss, &sl) != 0)
        return;
    if (ss.ss_family == AF_INET) {
        inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, key, (socklen_t)len);
    } else if (ss.ss_family == AF_INET6) {
        struct in6_addr a = ((struct sockaddr_in6 *)&ss)->sin6_addr;
        if (IN6_IS_ADDR_V4MAPPED(&a)) {
            inet_ntop(AF_INET, &a.s6_addr[12], key, (socklen_t)len);
            return;
        }
        memset(&a.s6_addr[8], 0, 8);
        char buf[INET6_ADDRSTRLEN];
        inet_ntop(AF_INET6, &a, buf, sizeof buf);
        snprintf(key, len, "%s/64", buf);
    }
}

static void s_count_free(void **item)
{
    free(*item);
    *item = NULL;
}

static size_t *s_peer_count(srv_conns_t *c, const char *peer)
{
    return zhashx_lookup(c->peers, peer);
}

/* Close a pending connection; it stops counting as pending now. Inside an
   lws callback (an accept) asynchronously: lws closes it when that service
   ends. From the sweep timer at once: lws keeps a kill from outside its
   callbacks on a timer list that libuv only looks at when lws's own next
   timeout is due (up to 10 s later). conn may be freed on return. */
static void s_close_pending(srv_conns_t *c, s_conn_t *conn, const char *why, bool now)
{
    zlistx_delete(c->pending, conn->pending);
    conn->pending = NULL;
    korch_debug("closing a connection from %s: %s", conn->peer, why);
    struct lws *wsi = conn->wsi;
    if (now)
        lws_set_timeout(wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_SYNC);
    else
        lws_set_timeout(wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
    c->kick(c->kick_arg);
}

/* Bytes the client sent that lws has not read yet: it is sending its
   request right now (lws reads it in this round). */
static bool s_sending(const s_conn_t *conn)
{
    int n = 0, fd = (int)lws_get_socket_fd(conn->wsi);
    return fd >= 0 && ioctl(fd, FIONREAD, &n) == 0 && n > 0;
}

/* The pending connection to close for room (of peer, or of anyone when
   NULL): the oldest that is not sending right now, else the oldest. An
   attacker opening connections by the thousand from the legit client's
   own address would otherwise close the legit one between its accept and
   the read of its request. */
static s_conn_t *s_oldest_pending(srv_conns_t *c, const char *peer)
{
    s_conn_t *first = NULL;
    for (s_conn_t *conn = zlistx_first(c->pending); conn; conn = zlistx_next(c->pending))
        if (!peer || strcmp(conn->peer, peer) == 0) {
            if (!s_sending(conn))
                return conn;
            if (!first)
                first = conn;
        }
    return first;
}

static size_t s_pending_of(srv_conns_t *c, const char *peer)
{
    size_t n = 0;
    for (s_conn_t *conn = zlistx_first(c->pending); conn; conn = zlistx_next(c->pending))
        n += strcmp(conn->peer, peer) == 0;
    return n;
}

static int s_on_sweep(korch_loop_t *loop, int id, void *arg)
{
    srv_conns_t *c = arg;
    int64_t now = korch_now_ms();
    s_conn_t *conn;
    while ((conn = zlistx_first(c->pending)) && now - conn->t0_ms >= c->lim.header_timeout_ms) {
        c->metrics->conns_timed_out++;
        s_close_pending(c, conn, "no complete request headers in time", true);
    }
    return 0;
}

srv_conns_t *srv_conns_new(korch_loop_t *loop, srv_metrics_t *metrics, void (*kick)(void *arg), void *kick_arg,
                           const srv_conns_limits_t *lim)
{
    srv_conns_t *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->loop = loop;
    c->metrics = metrics;
    c->kick = kick;
    c->kick_arg = kick_arg;
    c->lim = *lim;
    c->pending = zlistx_new();
    c->peers = zhashx_new();
    c->timer = korch_loop_timer(loop, SWEEP_MS, 0, s_on_sweep, c);
    if (!c->pending || !c->peers || c->timer <= 0) {
        srv_conns_destroy(&c);
        return NULL;
    }
    zhashx_set_destructor(c->peers, s_count_free);
    return c;
}

void srv_conns_destroy(srv_conns_t **pc)
{
    srv_conns_t *c = *pc;
    if (!c)
        return;
    *pc = NULL;
    if (c->timer > 0)
        korch_loop_timer_end(c->loop, c->timer);
    /* the connections themselves are lws's; their records go with the lists */
    for (s_conn_t *conn = zlistx_first(c->pending); conn; conn = zlistx_next(c->pending))
        conn->pending = NULL;
    zlistx_destroy(&c->pending);
    zhashx_destroy(&c->peers);
    free(c);
}

bool srv_conns_accept(srv_conns_t *c, struct lws *wsi, int fd)
{
    if (!c)
        return true;
    srv_metrics_t *m = c->metrics;
    char peer[sizeof ((s_conn_t *)0)->peer];
    s_peer_key(fd, peer, sizeof peer);
    size_t *count = s_peer_count(c, peer);
    s_conn_t *victim;
    /* full, from everyone or from this peer: make room from the pending
       ones, oldest first, else refuse */
    if (c->open >= (size_t)c->lim.max_connections) {
        if (!(victim = s_oldest_pending(c, NULL))) {
            m->conns_refused++;
            korch_warn("refusing a connection from %s: %zu connections are open (the limit)", peer, c->open);
            return false;
        }
        m->conns_evicted++;
        s_close_pending(c, victim, "connections are at their limit", false);
    }
    if (count && *count >= (size_t)c->lim.max_per_peer) {
        if (!(victim = s_oldest_pending(c, peer))) {
            m->conns_refused++;
            korch_warn("refusing a connection from %s: it has %zu open (the limit per address)", peer, *count);
            return false;
        }
        m->conns_evicted++;
        s_close_pending(c, victim, "its address has too many connections", false);
    }
    if (s_pending_of(c, peer) >= (size_t)c->lim.max_pending_per_peer && (victim = s_oldest_pending(c, peer))) {
        m->conns_evicted++;
        s_close_pending(c, victim, "its address has too many connections without a request", false);
    }
    if (zlistx_size(c->pending) >= (size_t)c->lim.max_pending && (victim = s_oldest_pending(c, NULL))) {
        m->conns_evicted++;
        s_close_pending(c, victim, "too many connections without a request", false);
    }
    s_conn_t *conn = calloc(1, sizeof *conn);
    if (!conn)
        return false;
    conn->wsi = wsi;
    snprintf(conn->peer, sizeof conn->peer, "%s", peer);
    conn->t0_ms = korch_now_ms();
    conn->pending = zlistx_add_end(c->pending, conn);
    if (!count) {
        count = calloc(1, sizeof *count);
        if (!count || !conn->pending || zhashx_insert(c->peers, peer, count) != 0) {
            if (conn->pending)
                zlistx_delete(c->pending, conn->pending);
            free(count);
            free(conn);
            return false;
        }
    }
    ++*count;
    c->open++;
    lws_set_opaque_user_data(wsi, conn);
    return true;
}

void srv_conns_headers_done(srv_conns_t *c, struct lws *wsi)
{
    s_conn_t *conn = c ? lws_get_opaque_user_data(wsi) : NULL;
    if (conn && conn->pending) {
        zlistx_delete(c->pending, conn->pending);
        conn->pending = NULL;
    }
}

void srv_conns_closed(srv_conns_t *c, struct lws *wsi)
{
    s_conn_t *conn = c ? lws_get_opaque_user_data(wsi) : NULL;
    if (!conn)
        return;
    lws_set_opaque_user_data(wsi, NULL);
    if (conn->pending)
        zlistx_delete(c->pending, conn->pending);
    size_t *count = s_peer_count(c, conn->peer);
    if (count && --*count == 0)
        zhashx_delete(c->peers, conn->peer);
    if (c->open)
        c->open--;
    free(conn);
}

size_t srv_conns_open(const srv_conns_t *c) { return c ? c->open : 0; }
size_t srv_conns_pending(const srv_conns_t *c) { return c ? zlistx_size(c->pending) : 0; }
