/*  Admission of HTTP connections: what keeps sockets that present no
 *  token from starving the clients that do (a "slowloris" attack needs no
 *  token, and behind a reverse proxy every client has the same address).
 *
 *  libwebsockets gives every accepted connection a header table (an "ah",
 *  max_http_header_pool of them) at once, and a connection waits in a queue
 *  when none is free. So korch counts connections itself, from the accept
 *  (LWS_CALLBACK_SERVER_NEW_CLIENT_INSTANTIATED) to the free
 *  (LWS_CALLBACK_WSI_DESTROY), in three pools:
 *
 *   - pending: accepted, its request headers not complete yet. It gets
 *     header_timeout_ms from its accept for them, however slowly it
 *     trickles (a sweep every 250 ms closes it). At most max_pending are
 *     pending, max_pending_per_peer from one client, but these are trimmed
 *     TRIM_MS after they are passed, not at the accept: lws accepts a
 *     whole backlog in one go before it reads any of them, and a legit
 *     client accepted in the middle of a flood must get the chance to be
 *     read. The trim closes the oldest first and never one whose complete
 *     headers are already waiting in its socket (it is read this round).
 *   - unauthenticated: headers in, no valid token (answered 403, or an
 *     open route: GET /api, the web page's files). Closed for room after
 *     the pending ones: a client that does not read the answer holds no
 *     slot an authenticated one needs.
 *   - authenticated: it presented the valid token (or the server has
 *     none). Never closed to make room for anything.
 *  At most max_connections are open, max_per_peer from one client: over
 *  that a pending connection is closed at once (the oldest that is not
 *  complete), else an unauthenticated one, else the new one is refused.
 *
 *  A client is an address, an IPv6 /64 counting as one. A connection from
 *  a trusted proxy (limits.trusted_proxies, `--trusted-proxy CIDR`) counts
 *  only in the totals until its headers say who the client is: the
 *  rightmost X-Forwarded-For address that is not a trusted proxy itself
 *  (proxies append the address they saw; anything to its left is the
 *  client's own claim). It then counts against that client, in
 *  max_per_peer and in the access log. From any other peer the header is
 *  ignored. A proxy reads a request's headers before it connects to us
 *  (nginx, HAProxy, Apache do), so a trickle behind it never reaches us
 *  as a pending connection.
 *  The header-table pool is sized above max_pending (server.c).
 */
#include "conns.h"
#include "metrics.h"
#include "korch/log.h"

#include <arpa/inet.h>
#include <libwebsockets.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define SWEEP_MS 250
#define TRIM_MS 50
#define PEEK_MAX 16384          /* lws's max_http_header_data (server.c) */

typedef struct {
    size_t open, pending;       /* connections of this client */
    size_t doomed;              /* pending ones the trim in progress closes */
} s_count_t;

typedef struct {
    struct lws *wsi;
    char key[KORCH_ADDR_KEY_MAX];   /* the client it counts against; "" = not yet known
                                       (a trusted proxy's, before its headers) */
    char addr[INET6_ADDRSTRLEN];    /* the client's address, for the log */
    char proxy_key[KORCH_ADDR_KEY_MAX]; /* a trusted proxy's own key */
    int64_t t0_ms;
    bool proxied;               /* from a trusted proxy */
    void *pending;              /* its handle in c->pending; NULL once its headers are in */
    void *unauth;               /* its handle in c->unauth: headers in, no valid token */
} s_conn_t;

struct srv_conns {
    korch_loop_t *loop;
    srv_metrics_t *metrics;
    void (*kick)(void *arg);    /* have lws service its loop once more this round */
    void *kick_arg;
    srv_conns_limits_t lim;     /* trusted_proxies points into proxies */
    korch_cidr_t *proxies;
    zlistx_t *pending;          /* s_conn_t*, in accept order (oldest first) */
    zlistx_t *unauth;           /* s_conn_t*, in the order their headers came */
    zhashx_t *counts;           /* key -> s_count_t* */
    size_t open;
    int timer, trim_timer;
    char peek[PEEK_MAX];
};

static void s_count_free(void **item)
{
    free(*item);
    *item = NULL;
}

static s_count_t *s_count(srv_conns_t *c, const char *key)
{
    return key[0] ? zhashx_lookup(c->counts, key) : NULL;
}

/* The count of key, made when it has none. NULL: out of memory. */
static s_count_t *s_count_get(srv_conns_t *c, const char *key)
{
    s_count_t *n = s_count(c, key);
    if (n || !key[0])
        return n;
    if (!(n = calloc(1, sizeof *n)) || zhashx_insert(c->counts, key, n) != 0) {
        free(n);
        return NULL;
    }
    return n;
}

static void s_count_drop(srv_conns_t *c, const char *key)
{
    s_count_t *n = s_count(c, key);
    if (n && n->open)
        n->open--;
    if (n && !n->open && !n->pending)
        zhashx_delete(c->counts, key);
}

/* It leaves the pending pool (headers in, or closed). */
static void s_unpend(srv_conns_t *c, s_conn_t *conn)
{
    if (!conn->pending)
        return;
    zlistx_delete(c->pending, conn->pending);
    conn->pending = NULL;
    s_count_t *n = s_count(c, conn->key);
    if (n && n->pending)
        n->pending--;
}

/* Close a connection we make room with. Inside an lws callback (an
   accept) asynchronously: lws closes it when that service ends. From a
   timer at once: lws keeps a kill from outside its callbacks on a timer
   list that libuv only looks at when lws's own next timeout is due (up to
   10 s later). conn may be freed on return. */
static void s_close(srv_conns_t *c, s_conn_t *conn, const char *why, bool now)
{
    s_unpend(c, conn);
    if (conn->unauth) {
        zlistx_delete(c->unauth, conn->unauth);
        conn->unauth = NULL;
    }
    korch_debug("closing a connection from %s: %s", conn->addr, why);
    lws_set_timeout(conn->wsi, PENDING_TIMEOUT_USER_OK, now ? LWS_TO_KILL_SYNC : LWS_TO_KILL_ASYNC);
    c->kick(c->kick_arg);
}

/* Are its complete request headers waiting in its socket? lws reads them
   this round (or as soon as a header table is free): it is about to stop
   being pending, and a trickle never looks like that. */
static bool s_ready(srv_conns_t *c, const s_conn_t *conn)
{
    int fd = (int)lws_get_socket_fd(conn->wsi);
    ssize_t n = fd >= 0 ? recv(fd, c->peek, sizeof c->peek, MSG_PEEK | MSG_DONTWAIT) : -1;
    if (n <= 0)
        return false;
    /* lws may hold the headers' first lines already */
    return memmem(c->peek, (size_t)n, "\r\n\r\n", 4) || (n >= 2 && memcmp(c->peek, "\r\n", 2) == 0);
}

/* The connection to close at once for room (of client key, or of anyone
   when NULL): the oldest pending one that is not complete, else the oldest
   unauthenticated one; NULL when every one is authenticated (or about to
   be read). */
static s_conn_t *s_victim(srv_conns_t *c, const char *key)
{
    for (s_conn_t *conn = zlistx_first(c->pending); conn; conn = zlistx_next(c->pending))
        if ((!key || strcmp(conn->key, key) == 0) && !s_ready(c, conn))
            return conn;
    for (s_conn_t *conn = zlistx_first(c->unauth); conn; conn = zlistx_next(c->unauth))
        if (!key || strcmp(conn->key, key) == 0)
            return conn;
    return NULL;
}

static int s_on_sweep(korch_loop_t *loop, int id, void *arg)
{
    srv_conns_t *c = arg;
    int64_t now = korch_now_ms();
    s_conn_t *conn;
    while ((conn = zlistx_first(c->pending)) && now - conn->t0_ms >= c->lim.header_timeout_ms) {
        c->metrics->conns_timed_out++;
        s_close(c, conn, "no complete request headers in time", true);
    }
    return 0;
}

/* Back within the pending limits: the oldest first, none that is complete. */
static int s_on_trim(korch_loop_t *loop, int id, void *arg)
{
    srv_conns_t *c = arg;
    c->trim_timer = -1;
    size_t total = zlistx_size(c->pending), nv = 0;
    s_conn_t **victims = total ? calloc(total, sizeof *victims) : NULL;
    if (!victims)
        return 0;
    for (s_conn_t *conn = zlistx_first(c->pending); conn; conn = zlistx_next(c->pending)) {
        s_count_t *n = s_count(c, conn->key);
        bool over = total - nv > (size_t)c->lim.max_pending ||
                    (n && n->pending - n->doomed > (size_t)c->lim.max_pending_per_peer);
        if (over && !s_ready(c, conn)) {
            victims[nv++] = conn;
            if (n)
                n->doomed++;
        }
    }
    for (size_t i = 0; i < nv; i++) {
        s_count_t *n = s_count(c, victims[i]->key);
        if (n)
            n->doomed = 0;
    }
    for (size_t i = 0; i < nv; i++) {
        c->metrics->conns_evicted++;
        s_close(c, victims[i], "too many connections without a request", true);
    }
    free(victims);
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
    c->trim_timer = -1;
    c->lim.trusted_proxies = NULL;
    c->lim.ntrusted_proxies = 0;
    if (lim->ntrusted_proxies && (c->proxies = calloc(lim->ntrusted_proxies, sizeof *c->proxies))) {
        memcpy(c->proxies, lim->trusted_proxies, lim->ntrusted_proxies * sizeof *c->proxies);
        c->lim.trusted_proxies = c->proxies;
        c->lim.ntrusted_proxies = lim->ntrusted_proxies;
    }
    c->pending = zlistx_new();
    c->unauth = zlistx_new();
    c->counts = zhashx_new();
    c->timer = korch_loop_timer(loop, SWEEP_MS, 0, s_on_sweep, c);
    if (!c->pending || !c->unauth || !c->counts || c->timer <= 0 ||
        c->lim.ntrusted_proxies != lim->ntrusted_proxies) {
        srv_conns_destroy(&c);
        return NULL;
    }
    zhashx_set_destructor(c->counts, s_count_free);
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
    if (c->trim_timer > 0)
        korch_loop_timer_end(c->loop, c->trim_timer);
    /* the connections themselves are lws's; their records go with the lists */
    for (s_conn_t *conn = zlistx_first(c->pending); conn; conn = zlistx_next(c->pending))
        conn->pending = NULL;
    for (s_conn_t *conn = zlistx_first(c->unauth); conn; conn = zlistx_next(c->unauth))
        conn->unauth = NULL;
    zlistx_destroy(&c->pending);
    zlistx_destroy(&c->unauth);
    zhashx_destroy(&c->counts);
    free(c->proxies);
    free(c);
}

bool srv_conns_accept(srv_conns_t *c, struct lws *wsi, int fd)
{
    if (!c)
        return true;
    srv_metrics_t *m = c->metrics;
    s_conn_t *conn = calloc(1, sizeof *conn);
    if (!conn)
        return false;
    conn->wsi = wsi;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (fd < 0 || getpeername(fd, (struct sockaddr *)&ss, &sl) != 0)
        memset(&ss, 0, sizeof ss);
    conn->proxied = korch_cidr_match_any(c->lim.trusted_proxies, c->lim.ntrusted_proxies, (struct sockaddr *)&ss);
    korch_addr_key((struct sockaddr *)&ss, conn->key, sizeof conn->key);
    korch_addr_text((struct sockaddr *)&ss, conn->addr, sizeof conn->addr);
    if (conn->proxied) { /* its client is known once its headers are in */
        snprintf(conn->proxy_key, sizeof conn->proxy_key, "%s", conn->key);
        conn->key[0] = 0;
    }
    s_count_t *n = conn->proxied ? NULL : s_count_get(c, conn->key);
    s_conn_t *victim;
    if (!conn->proxied && !n)
        goto refuse;
    /* full, from everyone or from this client: close one for room, else refuse */
    if (c->open >= (size_t)c->lim.max_connections) {
        if (!(victim = s_victim(c, NULL))) {
            korch_warn("refusing a connection from %s: %zu connections are open (the limit)", conn->addr, c->open);
            goto refuse;
        }
        m->conns_evicted++;
        s_close(c, victim, "connections are at their limit", false);
    }
    if (n && n->open >= (size_t)c->lim.max_per_peer) {
        if (!(victim = s_victim(c, conn->key))) {
            korch_warn("refusing a connection from %s: it has %zu open (the limit per client)", conn->addr, n->open);
            goto refuse;
        }
        m->conns_evicted++;
        s_close(c, victim, "its client has too many connections", false);
    }
    conn->t0_ms = korch_now_ms();
    if (!(conn->pending = zlistx_add_end(c->pending, conn)))
        goto refuse;
    if (n) {
        n->open++;
        n->pending++;
    }
    c->open++;
    lws_set_opaque_user_data(wsi, conn);
    /* over a pending limit: trimmed after lws had the chance to read them */
    if (c->trim_timer < 0 && (zlistx_size(c->pending) > (size_t)c->lim.max_pending ||
                              (n && n->pending > (size_t)c->lim.max_pending_per_peer)))
        c->trim_timer = korch_loop_timer(c->loop, TRIM_MS, 1, s_on_trim, c);
    return true;
refuse:
    m->conns_refused++;
    if (n && !n->open && !n->pending)
        zhashx_delete(c->counts, conn->key);
    free(conn);
    return false;
}

/* The client behind a trusted proxy: the rightmost X-Forwarded-For address
   that is not a trusted proxy. false when the header names none. */
static bool s_forwarded_client(srv_conns_t *c, struct lws *wsi, struct sockaddr_storage *client)
{
    char xff[2048];
    int len = lws_hdr_total_length(wsi, WSI_TOKEN_X_FORWARDED_FOR);
    /* too long to copy: its right end is what counts, and lws cannot give
       just that; the client stays the proxy */
    if (len <= 0 || len >= (int)sizeof xff || lws_hdr_copy(wsi, xff, sizeof xff, WSI_TOKEN_X_FORWARDED_FOR) <= 0)
        return false;
    size_t end = strlen(xff);
    while (end) {
        size_t start = end;
        while (start && xff[start - 1] != ',')
            start--;
        if (!korch_addr_parse(xff + start, end - start, client))
            return false; /* not an address: a proxy would not write it */
        if (!korch_cidr_match_any(c->lim.trusted_proxies, c->lim.ntrusted_proxies, (struct sockaddr *)client))
            return true;
        end = start ? start - 1 : 0;
    }
    return false;
}

bool srv_conns_headers_done(srv_conns_t *c, struct lws *wsi, bool authed, char *why, size_t why_len)
{
    s_conn_t *conn = c ? lws_get_opaque_user_data(wsi) : NULL;
    if (!conn || !conn->pending)
        return true;
    s_unpend(c, conn);
    if (!authed)
        conn->unauth = zlistx_add_end(c->unauth, conn);
    if (!conn->proxied)
        return true;
    struct sockaddr_storage client;
    if (s_forwarded_client(c, wsi, &client)) {
        korch_addr_key((struct sockaddr *)&client, conn->key, sizeof conn->key);
        korch_addr_text((struct sockaddr *)&client, conn->addr, sizeof conn->addr);
    } else
        snprintf(conn->key, sizeof conn->key, "%s", conn->proxy_key); /* the proxy's own request */
    s_count_t *n = s_count_get(c, conn->key);
    if (!n) {
        conn->key[0] = 0;
        snprintf(why, why_len, "out of memory");
        return false;
    }
    n->open++;
    if (n->open > (size_t)c->lim.max_per_peer) {
        c->metrics->conns_refused++;
        snprintf(why, why_len, "too many connections from '%s' (%zu open; the limit per client is %d)", conn->addr,
                 n->open - 1, c->lim.max_per_peer);
        korch_warn("refusing a request from %s: %s", conn->addr, why);
        return false;
    }
    return true;
}

void srv_conns_unauthed(srv_conns_t *c, struct lws *wsi)
{
    s_conn_t *conn = c ? lws_get_opaque_user_data(wsi) : NULL;
    if (conn && !conn->pending && !conn->unauth)
        conn->unauth = zlistx_add_end(c->unauth, conn);
}

void srv_conns_closed(srv_conns_t *c, struct lws *wsi)
{
    s_conn_t *conn = c ? lws_get_opaque_user_data(wsi) : NULL;
    if (!conn)
        return;
    lws_set_opaque_user_data(wsi, NULL);
    s_unpend(c, conn);
    if (conn->unauth)
        zlistx_delete(c->unauth, conn->unauth);
    s_count_drop(c, conn->key);
    if (c->open)
        c->open--;
    free(conn);
}

const char *srv_conns_client(struct lws *wsi)
{
    s_conn_t *conn = wsi ? lws_get_opaque_user_data(wsi) : NULL;
    return conn ? conn->addr : NULL;
}

size_t srv_conns_open(const srv_conns_t *c) { return c ? c->open : 0; }
size_t srv_conns_pending(const srv_conns_t *c) { return c ? zlistx_size(c->pending) : 0; }
