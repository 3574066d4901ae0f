/*  The package forwarder (pkgfwd.h): an allow-listing HTTP proxy on a unix
 *  socket in a kernel's runtime dir, on a thread of its own. */
#include "pkgfwd.h"
#include "korch/log.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define F_HEAD_MAX (16 * 1024)
#define F_IDLE_MS 30000
#define F_CONNECT_MS 10000

struct korch_pkgfwd {
    int stop_w;                 /* closing it ends the thread */
};

typedef struct {
    int stop_r;
    int dir_fd;
    char *hosts;
    int64_t max_bytes;
} fwd_thread_t;

/* ------------------------------------------------------------ the rule */

int korch_pkgfwd_allowed(const char *hosts, const char *host, int port)
{
    if (!hosts || !host || !*host)
        return 0;
    size_t hl = strlen(host);
    for (const char *s = hosts; *s;) {
        while (*s == ',' || *s == ' ')
            s++;
        const char *e = s;
        while (*e && *e != ',' && *e != ' ')
            e++;
        size_t n = (size_t)(e - s);
        const char *colon = memchr(s, ':', n);
        size_t name_len = colon ? (size_t)(colon - s) : n;
        if (n && name_len == hl && strncasecmp(s, host, hl) == 0) {
            if (!colon)
                return 1;
            char *end = NULL;
            long p = strtol(colon + 1, &end, 10);
            if (end == e && p == port)
                return 1;
        }
        s = e;
    }
    return 0;
}

/* ------------------------------------------------------------ the I/O */

/* Wait for fd (events) or the stop pipe; 1 ready, 0 timeout/stop/error. */
static int s_wait(fwd_thread_t *t, int fd, short events, int ms)
{
    struct pollfd pf[2] = {{.fd = fd, .events = events}, {.fd = t->stop_r, .events = POLLIN}};
    int r;
    do
        r = poll(pf, 2, ms);
    while (r < 0 && errno == EINTR);
    if (r <= 0 || pf[1].revents)
        return 0;
    return (pf[0].revents & (events | POLLHUP | POLLERR)) ? 1 : 0;
}

static bool s_send_all(fwd_thread_t *t, int fd, const char *p, size_t n)
{
    while (n) {
        if (!s_wait(t, fd, POLLOUT, F_IDLE_MS))
            return false;
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (w <= 0)
            return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

static void s_refuse(fwd_thread_t *t, int c, int code, const char *what)
{
    char reason[600], body[900], head[1600];
    snprintf(reason, sizeof reason, "korch allows packages from %s only (the operator of korch sets "
             "--package-hosts)", t->hosts);
    for (char *r = reason; *r; r++)
        if (*r == '\r' || *r == '\n')
            *r = ' ';
    int bl = snprintf(body, sizeof body, "%s: %s\n", what, reason);
    int hl = snprintf(head, sizeof head,
                      "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n",
                      code, reason, bl);
    if (hl > 0 && (size_t)hl < sizeof head && s_send_all(t, c, head, (size_t)hl))
        s_send_all(t, c, body, (size_t)bl < sizeof body ? (size_t)bl : sizeof body - 1);
}

/* A TCP connection to host:port from korch's own namespace, or -1. */
static int s_connect(fwd_thread_t *t, const char *host, int port)
{
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    if (getaddrinfo(host, ps, &hints, &res) != 0)
        return -1;
    int fd = -1;
    for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
        if (fd < 0)
            continue;
        int r = connect(fd, a->ai_addr, a->ai_addrlen);
        int soerr = 0;
        socklen_t sl = sizeof soerr;
        if (r != 0 && (errno != EINPROGRESS || !s_wait(t, fd, POLLOUT, F_CONNECT_MS) ||
                       getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0 || soerr != 0)) {
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    return fd;
}

/* Bytes both ways until both ends are done, an idle spell or the budget. */
static void s_pipe(fwd_thread_t *t, int a, int b, const char *pending, size_t plen)
{
    int64_t left[2] = {t->max_bytes, t->max_bytes}; /* a->b, b->a */
    bool open_[2] = {true, true};
    char buf[65536];
    if (plen && !s_send_all(t, b, pending, plen))
        return;
    while (open_[0] || open_[1]) {
        struct pollfd pf[3] = {{.fd = open_[0] ? a : -1, .events = POLLIN},
                               {.fd = open_[1] ? b : -1, .events = POLLIN},
                               {.fd = t->stop_r, .events = POLLIN}};
        int r = poll(pf, 3, F_IDLE_MS);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0 || pf[2].revents)
            return;
        for (int i = 0; i < 2; i++) {
            if (!open_[i] || !pf[i].revents)
                continue;
            int from = i ? b : a, to = i ? a : b;
            ssize_t n = recv(from, buf, sizeof buf, MSG_DONTWAIT);
            if (n < 0 && (errno == EAGAIN || errno == EINTR))
                continue;
            if (n <= 0) {
                open_[i] = false;
                shutdown(to, SHUT_WR);
                continue;
            }
            if ((left[i] -= n) < 0 || !s_send_all(t, to, buf, (size_t)n))
                return; /* over the budget: the connection ends */
        }
    }
}

/* "host[:port]" or "[v6][:port]" of len bytes into host; the port, def
   when none, -1 when malformed. */
static int s_hostport(const char *s, size_t len, char *host, size_t hcap, int def)
{
    const char *colon = NULL, *hs = s, *he;
    if (len && *s == '[') {
        const char *close_ = memchr(s, ']', len);
        if (!close_)
            return -1;
        hs = s + 1;
        he = close_;
        if ((size_t)(close_ + 1 - s) < len) {
            if (close_[1] != ':')
                return -1;
            colon = close_ + 1;
        }
    } else {
        colon = memrchr(s, ':', len);
        he = colon ? colon : s + len;
    }
    size_t hl = (size_t)(he - hs);
    if (!hl || hl >= hcap)
        return -1;
    for (size_t i = 0; i < hl; i++)
        if (!(isalnum((unsigned char)hs[i]) || strchr(".-_:", hs[i])))
            return -1;
    memcpy(host, hs, hl);
    host[hl] = 0;
    if (!colon)
        return def;
    int port = 0;
    for (const char *p = colon + 1; p < s + len; p++) {
        if (!isdigit((unsigned char)*p) || (port = port * 10 + (*p - '0')) > 65535)
            return -1;
    }
    return colon + 1 < s + len && port > 0 ? port : -1;
}

/* One client: read its head, judge it, pass it on. */
static void s_serve(fwd_thread_t *t, int c)
{
    char *head = malloc(F_HEAD_MAX + 1);
    size_t n = 0;
    char *end = NULL;
    if (!head)
        return;
    while (!end && n < F_HEAD_MAX) {
        if (!s_wait(t, c, POLLIN, F_IDLE_MS))
            goto out;
        ssize_t r = recv(c, head + n, F_HEAD_MAX - n, MSG_DONTWAIT);
        if (r < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (r <= 0)
            goto out;
        n += (size_t)r;
        head[n] = 0;
        end = strstr(head, "\r\n\r\n");
    }
    if (!end) {
        s_refuse(t, c, 431, "request head too large");
        goto out;
    }
    char *line_end = strstr(head, "\r\n");
    char *sp1 = memchr(head, ' ', (size_t)(line_end - head));
    char *sp2 = sp1 ? memchr(sp1 + 1, ' ', (size_t)(line_end - sp1 - 1)) : NULL;
    if (!sp2 || strncmp(sp2 + 1, "HTTP/1.", 7) != 0) {
        s_refuse(t, c, 400, "not an HTTP/1 request");
        goto out;
    }
    char host[256];
    const char *target = sp1 + 1;
    size_t tlen = (size_t)(sp2 - target);
    bool connect_ = (size_t)(sp1 - head) == 7 && memcmp(head, "CONNECT", 7) == 0;
    bool get = ((size_t)(sp1 - head) == 3 && memcmp(head, "GET", 3) == 0) ||
               ((size_t)(sp1 - head) == 4 && memcmp(head, "HEAD", 4) == 0);
    int port = -1;
    const char *path = NULL;
    if (connect_) {
        port = s_hostport(target, tlen, host, sizeof host, -1);
    } else if (get && tlen > 7 && strncasecmp(target, "http://", 7) == 0) {
        const char *auth = target + 7;
        path = memchr(auth, '/', (size_t)(sp2 - auth));
        size_t alen = (size_t)((path ? path : sp2) - auth);
        if (memchr(auth, '@', alen)) /* no userinfo: the host is what it says */
            alen = 0;
        port = alen ? s_hostport(auth, alen, host, sizeof host, 80) : -1;
    } else {
        s_refuse(t, c, 403, "only GET of http:// URLs and CONNECT go through korch");
        goto out;
    }
    if (port < 0) {
        s_refuse(t, c, 400, "malformed host");
        goto out;
    }
    if (!korch_pkgfwd_allowed(t->hosts, host, port)) {
        char what[400];
        snprintf(what, sizeof what, "host '%s' port %d refused", host, port);
        korch_notice("packages: a kernel asked for %s:%d, not an allowed package host (%s)", host, port, t->hosts);
        s_refuse(t, c, 403, what);
        goto out;
    }
    int u = s_connect(t, host, port);
    if (u < 0) {
        s_refuse(t, c, 502, "cannot reach the package host");
        goto out;
    }
    if (connect_) {
        static const char ok[] = "HTTP/1.1 200 Connection established\r\n\r\n";
        char *rest = end + 4;
        if (s_send_all(t, c, ok, sizeof ok - 1))
            s_pipe(t, c, u, rest, n - (size_t)(rest - head));
    } else {
        /* origin-form to the host, hop-by-hop headers dropped, one request */
        size_t cap = n + 64;
        char *out = malloc(cap);
        size_t o = 0;
        if (out) {
            o += (size_t)snprintf(out, cap, "%.*s %.*s HTTP/1.1\r\n", (int)(sp1 - head), head,
                                  path ? (int)(sp2 - path) : 1, path ? path : "/");
            for (char *h = line_end + 2; h < end;) {
                char *e = strstr(h, "\r\n");
                size_t hl = (size_t)(e - h);
                if (!(strncasecmp(h, "proxy-", 6) == 0 || strncasecmp(h, "connection:", 11) == 0 ||
                      strncasecmp(h, "keep-alive:", 11) == 0) && o + hl + 2 < cap) {
                    memcpy(out + o, h, hl);
                    memcpy(out + o + hl, "\r\n", 2);
                    o += hl + 2;
                }
                h = e + 2;
            }
            static const char tail[] = "Connection: close\r\n\r\n";
            if (o + sizeof tail <= cap) {
                memcpy(out + o, tail, sizeof tail - 1);
                o += sizeof tail - 1;
                s_pipe(t, c, u, out, o);
            }
            free(out);
        }
    }
    close(u);
out:
    free(head);
}

static void *s_thread(void *arg)
{
    fwd_thread_t *t = arg;
    int ls = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    char path[64];
    /* bound through /proc/self/fd: the runtime dir's path is never resolved again */
    snprintf(path, sizeof path, "/proc/self/fd/%d/%s", t->dir_fd, KORCH_PKGFWD_SOCK);
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    unlinkat(t->dir_fd, KORCH_PKGFWD_SOCK, 0); /* removes a name, never follows it */
    if (ls < 0 || bind(ls, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(ls, 16) != 0 ||
        fchmodat(t->dir_fd, KORCH_PKGFWD_SOCK, 0666, AT_SYMLINK_NOFOLLOW) != 0) {
        korch_warn("packages: cannot serve the kernel's package socket: %s", strerror(errno));
        goto out;
    }
    for (;;) {
        if (!s_wait(t, ls, POLLIN, -1))
            break;
        int c = accept4(ls, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (c < 0)
            continue;
        s_serve(t, c);
        close(c);
    }
out:
    if (ls >= 0)
        close(ls);
    close(t->dir_fd);
    close(t->stop_r);
    free(t->hosts);
    free(t);
    return NULL;
}

korch_pkgfwd_t *korch_pkgfwd_new(const char *dir, const char *hosts, int64_t max_bytes, korch_err_t *err)
{
    korch_pkgfwd_t *f = calloc(1, sizeof *f);
    fwd_thread_t *t = calloc(1, sizeof *t);
    int p[2] = {-1, -1};
    if (!f || !t || !(t->hosts = strdup(hosts ? hosts : "")) || pipe2(p, O_CLOEXEC) != 0) {
        korch_err_set(err, KORCH_E_NOMEM, "cannot make the package forwarder: %s", strerror(errno));
        goto fail;
    }
    t->dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (t->dir_fd < 0) {
        korch_err_set(err, KORCH_E_IO, "cannot open the runtime dir '%s': %s", dir, strerror(errno));
        goto fail;
    }
    t->stop_r = p[0];
    t->max_bytes = max_bytes > 0 ? max_bytes : (int64_t)1 << 30;
    f->stop_w = p[1];
    pthread_t th;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&th, &at, s_thread, t);
    pthread_attr_destroy(&at);
    if (rc != 0) {
        korch_err_set(err, KORCH_E_IO, "cannot start the package forwarder: %s", strerror(rc));
        close(t->dir_fd);
        goto fail;
    }
    return f;
fail:
    if (p[0] >= 0)
        close(p[0]);
    if (p[1] >= 0)
        close(p[1]);
    if (t)
        free(t->hosts);
    free(t);
    free(f);
    return NULL;
}

void korch_pkgfwd_destroy(korch_pkgfwd_t **pf)
{
    if (!pf || !*pf)
        return;
    close((*pf)->stop_w); /* the thread sees POLLHUP and ends */
    free(*pf);
    *pf = NULL;
}
