/*  Docker Engine API over libcurl: unix socket or tcp (+TLS), JSON in and out,
 *  a bounded reply, and errors that say what to do.
 */
#include "korch/docker_api.h"
#include "korch/buf.h"
#include "korch/log.h"
#include "korch/media.h"

#include <curl/curl.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct s_areq s_areq_t;

struct korch_docker {
    korch_loop_t *loop;         /* asynchronous requests run here; NULL = blocking only */
    CURLM *multi;               /* made with the first asynchronous request */
    int timer;                  /* libcurl's timeout on the loop, -1 none */
    s_areq_t *pending;          /* asynchronous requests in flight */
    size_t npending;
    CURL *curl;                 /* one handle: its connection cache keeps the socket open */
    char *sock;                 /* unix socket path, or NULL for tcp */
    char *base_url;             /* "http://docker" (unix) or "http(s)://host:port" */
    char where[PATH_MAX + 16];  /* for messages */
    bool tls;
    bool tls_verify;
    char *ca, *cert, *key;      /* TLS files, or NULL */
    long timeout_ms;
    size_t max_reply;
};

typedef struct {
    korch_buf_t buf;            /* the reply, bounded by max_reply */
    bool too_big;
} s_sink_t;

static pthread_once_t s_curl_once = PTHREAD_ONCE_INIT;
static CURLcode s_curl_init_rc = CURLE_OK;

static void s_curl_global_init(void) { s_curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT); }

static char *s_strdup_printf(const char *fmt, const char *a, const char *b)
{
    int n = snprintf(NULL, 0, fmt, a, b);
    char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (s)
        snprintf(s, (size_t)n + 1, fmt, a, b);
    return s;
}

static bool s_file_exists(const char *path)
{
    FILE *f = fopen(path, "r");
    if (f)
        fclose(f);
    return f != NULL;
}

/* The docker CLI's TLS environment: DOCKER_TLS_VERIFY turns on TLS with a
   verified server; DOCKER_CERT_PATH (default ~/.docker) holds ca.pem,
   cert.pem, key.pem. */
static korch_rc_t s_setup_tls(korch_docker_t *d, korch_err_t *err)
{
    const char *verify = getenv("DOCKER_TLS_VERIFY");
    const char *certs = getenv("DOCKER_CERT_PATH");
    d->tls_verify = verify && *verify && strcmp(verify, "0") != 0;
    d->tls = d->tls_verify || (certs && *certs);
    if (!d->tls)
        return KORCH_OK;
    char dir[PATH_MAX];
    if (certs && *certs)
        snprintf(dir, sizeof dir, "%s", certs);
    else
        snprintf(dir, sizeof dir, "%s/.docker", getenv("HOME") ? getenv("HOME") : "");
    d->ca = s_strdup_printf("%s/%s", dir, "ca.pem");
    d->cert = s_strdup_printf("%s/%s", dir, "cert.pem");
    d->key = s_strdup_printf("%s/%s", dir, "key.pem");
    if (!d->ca || !d->cert || !d->key)
        return korch_err_set(err, KORCH_E_NOMEM, "out of memory");
    if (d->tls_verify && !s_file_exists(d->ca))
        return korch_err_set(err, KORCH_E_DOCKER, "DOCKER_TLS_VERIFY is set but '%s' cannot be read", d->ca);
    if (!s_file_exists(d->cert) || !s_file_exists(d->key)) {
        free(d->cert);
        free(d->key);
        d->cert = d->key = NULL;
    }
    if (!s_file_exists(d->ca)) {
        free(d->ca);
        d->ca = NULL;
    }
    return KORCH_OK;
}

korch_docker_t *korch_docker_new(korch_loop_t *loop, const char *host, korch_err_t *err)
{
    korch_rc_t rc = KORCH_OK;
    pthread_once(&s_curl_once, s_curl_global_init);
    if (s_curl_init_rc != CURLE_OK) {
        korch_err_set(err, KORCH_E_DOCKER, "cannot initialise libcurl: %s", curl_easy_strerror(s_curl_init_rc));
        return NULL;
    }
    if (!host || !*host)
        host = getenv("DOCKER_HOST");
    if (!host || !*host)
        host = KORCH_DOCKER_DEFAULT_HOST;
    korch_docker_t *d = calloc(1, sizeof *d);
    if (!d) {
        korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        return NULL;
    }
    d->loop = loop;
    d->timer = -1;
    d->timeout_ms = 30000;
    d->max_reply = KORCH_DOCKER_MAX_REPLY;
    if (strncmp(host, "unix://", 7) == 0) {
        const char *path = host + 7;
        if (!*path) {
            rc = korch_err_set(err, KORCH_E_INVALID, "docker host '%s' has no socket path", host);
            goto out;
        }
        d->sock = strdup(path);
        /* The host part of the URL is not used on a unix socket; dockerd wants one. */
        d->base_url = strdup("http://docker");
        snprintf(d->where, sizeof d->where, "%s", path);
    } else if (strncmp(host, "tcp://", 6) == 0 || strncmp(host, "http://", 7) == 0 ||
               strncmp(host, "https://", 8) == 0) {
        const char *hp = strstr(host, "://") + 3;
        size_t hl = strcspn(hp, "/");
        if (hl == 0) {
            rc = korch_err_set(err, KORCH_E_INVALID, "docker host '%s' has no address", host);
            goto out;
        }
        rc = s_setup_tls(d, err);
        if (rc)
            goto out;
        if (strncmp(host, "https://", 8) == 0)
            d->tls = true;
        char url[PATH_MAX];
        snprintf(url, sizeof url, "%s://%.*s", d->tls ? "https" : "http", (int)hl, hp);
        d->base_url = strdup(url);
        d->sock = NULL;
        snprintf(d->where, sizeof d->where, "%s", host);
        if (!d->base_url) {
            rc = korch_err_set(err, KORCH_E_NOMEM, "out of memory");
            goto out;
        }
    } else {
        rc = korch_err_set(err, KORCH_E_INVALID,
                           "docker host '%s' is not supported (use unix:///path or tcp://host:port)", host);
        goto out;
    }
    d->curl = curl_easy_init();
    if (!d->curl || !d->base_url || (strncmp(host, "unix://", 7) == 0 && !d->sock))
        rc = korch_err_set(err, KORCH_E_NOMEM, "out of memory");
out:
    if (rc) {
        korch_docker_destroy(&d);
        return NULL;
    }
    return d;
}

void korch_docker_destroy(korch_docker_t **dp)
{
    if (!dp || !*dp)
        return;
    korch_docker_t *d = *dp;
    while (d->pending) {
        korch_op_t *op = (korch_op_t *)d->pending;
        korch_op_cancel(&op);
    }
    if (d->multi)
        curl_multi_cleanup(d->multi);
    if (d->timer >= 0)
        korch_loop_timer_end(d->loop, d->timer);
    if (d->curl)
        curl_easy_cleanup(d->curl);
    free(d->sock);
    free(d->base_url);
    free(d->ca);
    free(d->cert);
    free(d->key);
    free(d);
    *dp = NULL;
}

const char *korch_docker_where(const korch_docker_t *d) { return d->where; }

const char *korch_docker_socket_path(const korch_docker_t *d) { return d->sock; }

void korch_docker_set_timeout_ms(korch_docker_t *d, long timeout_ms)
{
    d->timeout_ms = timeout_ms > 0 ? timeout_ms : 30000;
}

void korch_docker_set_max_reply(korch_docker_t *d, size_t max_bytes)
{
    d->max_reply = max_bytes ? max_bytes : KORCH_DOCKER_MAX_REPLY;
}

void korch_docker_reply_clear(korch_docker_reply_t *reply)
{
    if (!reply)
        return;
    json_decref(reply->json);
    json_decref(reply->path_stat);
    free(reply->body);
    memset(reply, 0, sizeof *reply);
}

static size_t s_write(char *data, size_t size, size_t nmemb, void *arg)
{
    s_sink_t *s = arg;
    korch_rc_t rc = korch_buf_add(&s->buf, data, size * nmemb, "reply", NULL);
    s->too_big = s->too_big || rc == KORCH_E_TOOBIG;
    return rc ? 0 : size * nmemb; /* 0: curl stops with CURLE_WRITE_ERROR */
}

/* Why the engine could not be reached, in words a user can act on. */
static korch_rc_t s_transport_error(korch_docker_t *d, CURLcode cc, long os_errno, const char *detail,
                                    korch_err_t *err)
{
    if (cc == CURLE_OPERATION_TIMEDOUT)
        return korch_err_set(err, KORCH_E_TIMEOUT, "docker at '%s' did not answer within %ld ms", d->where,
                             d->timeout_ms);
    const char *why = NULL, *hint = "";
    switch (os_errno) {
    case ECONNREFUSED:
        why = "connection refused";
        hint = " (is dockerd running?)";
        break;
    case ENOENT:
        why = "no such socket";
        hint = " (is dockerd running?)";
        break;
    case EACCES:
    case EPERM:
        why = "permission denied";
        hint = " (run korch as root or add the user to the 'docker' group)";
        break;
    case 0:
        break;
    default:
        why = strerror((int)os_errno);
        break;
    }
    if (!why)
        why = detail && *detail ? detail : curl_easy_strerror(cc);
    if (cc == CURLE_COULDNT_CONNECT && !*hint)
        hint = " (is dockerd running?)";
    return korch_err_set(err, KORCH_E_DOCKER, "cannot reach docker at '%s': %s%s", d->where, why, hint);
}

/* Headers: only the archive endpoints' stat of the path is kept. */
#define S_STAT_HEADER "X-Docker-Container-Path-Stat:"
static size_t s_header(char *data, size_t size, size_t nmemb, void *arg)
{
    korch_docker_reply_t *reply = arg;
    size_t n = size * nmemb, hl = strlen(S_STAT_HEADER);
    if (n > hl && n < 16384 && strncasecmp(data, S_STAT_HEADER, hl) == 0 && !reply->path_stat) {
        const char *v = data + hl;
        size_t vl = n - hl;
        while (vl && (*v == ' ' || *v == '\t'))
            v++, vl--;
        while (vl && (v[vl - 1] == '\r' || v[vl - 1] == '\n' || v[vl - 1] == ' '))
            vl--;
        size_t jl = 0;
        unsigned char *j = korch_b64_decode(v, vl, &jl);
        if (j)
            reply->path_stat = json_loadb((const char *)j, jl, 0, NULL);
        free(j);
    }
    return n;
}

/* The options of one request on handle c; *headers is the caller's to
   free after the transfer. timeout_ms 0 = none. */
static void s_setup(korch_docker_t *d, CURL *c, const char *method, const char *url, const char *ctype,
                    const void *body, size_t len, long timeout_ms, s_sink_t *sink, korch_docker_reply_t *reply,
                    char *errbuf, struct curl_slist **headers)
{
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
    long ct = timeout_ms > 0 && timeout_ms < 10000 ? timeout_ms : 10000L;
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, ct);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, s_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, sink);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, s_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, reply);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "korch");
    if (d->sock)
        curl_easy_setopt(c, CURLOPT_UNIX_SOCKET_PATH, d->sock);
    if (d->tls) {
        if (d->ca)
            curl_easy_setopt(c, CURLOPT_CAINFO, d->ca);
        if (d->cert && d->key) {
            curl_easy_setopt(c, CURLOPT_SSLCERT, d->cert);
            curl_easy_setopt(c, CURLOPT_SSLKEY, d->key);
        }
        curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, d->tls_verify ? 1L : 0L);
        curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, d->tls_verify ? 2L : 0L);
    }
    *headers = curl_slist_append(*headers, "Expect:");
    if (body && ctype) {
        char h[128];
        snprintf(h, sizeof h, "Content-Type: %s", ctype);
        *headers = curl_slist_append(*headers, h);
    }
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, *headers);
    if (strcmp(method, "GET") == 0) {
        curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
    } else if (strcmp(method, "HEAD") == 0) {
        curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    } else {
        if (strcmp(method, "POST") == 0 || body) {
            curl_easy_setopt(c, CURLOPT_POSTFIELDS, body ? (const char *)body : "");
            curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)(body ? len : 0));
        }
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    }
}

/* The outcome of a transfer on c into reply (cleared on failure). */
static korch_rc_t s_outcome(korch_docker_t *d, CURL *c, CURLcode cc, const char *method, const char *path,
                            long timeout_ms, s_sink_t *sink, const char *errbuf, korch_docker_reply_t *reply,
                            korch_err_t *err)
{
    korch_rc_t rc = KORCH_OK;
    if (cc != CURLE_OK) {
        if (sink->too_big) {
            rc = korch_err_set(err, KORCH_E_TOOBIG, "reply from docker at '%s' to %s %s is larger than %zu bytes",
                               d->where, method, path, sink->buf.max);
        } else if (cc == CURLE_OPERATION_TIMEDOUT) {
            rc = korch_err_set(err, KORCH_E_TIMEOUT, "docker at '%s' did not answer within %ld ms", d->where,
                               timeout_ms);
        } else {
            long os_errno = 0;
            curl_easy_getinfo(c, CURLINFO_OS_ERRNO, &os_errno);
            rc = s_transport_error(d, cc, os_errno, errbuf, err);
        }
        goto out;
    }
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &reply->status);
    reply->body = korch_buf_release(&sink->buf, &reply->body_len);
    if (!reply->body) {
        rc = korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        goto out;
    }
    char *rtype = NULL;
    curl_easy_getinfo(c, CURLINFO_CONTENT_TYPE, &rtype);
    if (reply->body_len && rtype && strstr(rtype, "json"))
        reply->json = json_loadb(reply->body, reply->body_len, JSON_DECODE_ANY, NULL);
    korch_debug("docker %s %s -> %ld (%zu bytes)", method, path, reply->status, reply->body_len);
out:
    if (rc)
        korch_docker_reply_clear(reply);
    korch_buf_free(&sink->buf);
    return rc;
}

/* One blocking request: body (len bytes, may be NULL) sent as ctype. */
static korch_rc_t s_perform(korch_docker_t *d, const char *method, const char *path, const char *ctype,
                            const void *body, size_t len, korch_docker_reply_t *reply, korch_err_t *err)
{
    struct curl_slist *headers = NULL;
    s_sink_t sink = {.buf = KORCH_BUF_INIT(d->max_reply)};
    char errbuf[CURL_ERROR_SIZE] = "";
    CURL *c = d->curl;
    char *url = s_strdup_printf("%s%s", d->base_url, path);
    if (!url)
        return korch_err_set(err, KORCH_E_NOMEM, "out of memory");
    /* Reset forgets the previous request's options but keeps live connections. */
    curl_easy_reset(c);
    s_setup(d, c, method, url, ctype, body, len, d->timeout_ms, &sink, reply, errbuf, &headers);
    CURLcode cc = curl_easy_perform(c);
    korch_rc_t rc = s_outcome(d, c, cc, method, path, d->timeout_ms, &sink, errbuf, reply, err);
    curl_slist_free_all(headers);
    free(url);
    return rc;
}

/* ---------------------------------------------------------- asynchronous */

struct s_areq {
    korch_op_t base;                /* first: the handle */
    korch_docker_t *d;
    s_areq_t *prev, *next;          /* d->pending */
    CURL *easy;
    char *url;
    char method[16];
    char *path;
    void *body;                     /* owned copy */
    struct curl_slist *headers;
    s_sink_t sink;
    korch_docker_reply_t reply;
    char errbuf[CURL_ERROR_SIZE];
    long timeout_ms;
    korch_docker_done_fn *done;
    void *arg;
};

static void s_areq_free(s_areq_t *r)
{
    korch_docker_t *d = r->d;
    if (r->prev)
        r->prev->next = r->next;
    else if (d->pending == r)
        d->pending = r->next;
    if (r->next)
        r->next->prev = r->prev;
    d->npending--;
    if (r->easy) {
        curl_multi_remove_handle(d->multi, r->easy);
        curl_easy_cleanup(r->easy);
    }
    curl_slist_free_all(r->headers);
    korch_docker_reply_clear(&r->reply);
    korch_buf_free(&r->sink.buf);
    free(r->url);
    free(r->path);
    free(r->body);
    free(r);
}

static void s_areq_cancel(korch_op_t *op) { s_areq_free((s_areq_t *)op); }

/* Transfers libcurl has finished: their done, one by one. */
static void s_dispatch(korch_docker_t *d)
{
    CURLMsg *m;
    int left;
    while ((m = curl_multi_info_read(d->multi, &left))) {
        if (m->msg != CURLMSG_DONE)
            continue;
        s_areq_t *r = NULL;
        curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&r);
        if (!r)
            continue;
        CURLcode cc = m->data.result;
        korch_err_t err = {0};
        korch_rc_t rc = s_outcome(d, r->easy, cc, r->method, r->path, r->timeout_ms, &r->sink, r->errbuf,
                                  &r->reply, &err);
        /* unlinked from libcurl before done: done may start or cancel requests */
        curl_multi_remove_handle(d->multi, r->easy);
        curl_easy_cleanup(r->easy);
        r->easy = NULL;
        korch_docker_done_fn *done = r->done;
        void *arg = r->arg;
        korch_docker_reply_t reply = r->reply;
        memset(&r->reply, 0, sizeof r->reply);
        s_areq_free(r);
        if (done)
            done(rc, rc ? &err : NULL, &reply, arg);
        korch_docker_reply_clear(&reply);
    }
}

static int s_on_socket(korch_loop_t *loop, int fd, unsigned revents, void *arg)
{
    korch_docker_t *d = arg;
    int flags = (revents & KORCH_POLL_IN ? CURL_CSELECT_IN : 0) | (revents & KORCH_POLL_OUT ? CURL_CSELECT_OUT : 0) |
                (revents & KORCH_POLL_ERR ? CURL_CSELECT_ERR : 0);
    int running = 0;
    curl_multi_socket_action(d->multi, fd, flags, &running);
    s_dispatch(d);
    return 0;
}

static int s_on_timeout(korch_loop_t *loop, int timer_id, void *arg)
{
    korch_docker_t *d = arg;
    d->timer = -1;
    int running = 0;
    curl_multi_socket_action(d->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    s_dispatch(d);
    return 0;
}

/* CURLMOPT_SOCKETFUNCTION: the interest libcurl has in a socket, on the loop. */
static int s_curl_socket(CURL *easy, curl_socket_t s, int what, void *userp, void *socketp)
{
    korch_docker_t *d = userp;
    if (what == CURL_POLL_REMOVE)
        korch_loop_poller_end(d->loop, s);
    else
        korch_loop_poller_ev(d->loop, s,
                             (what & CURL_POLL_IN ? KORCH_POLL_IN : 0) | (what & CURL_POLL_OUT ? KORCH_POLL_OUT : 0),
                             s_on_socket, d);
    return 0;
}

/* CURLMOPT_TIMERFUNCTION: one timer; libcurl is called back from the loop,
   never from inside this function. */
static int s_curl_timer(CURLM *multi, long timeout_ms, void *userp)
{
    korch_docker_t *d = userp;
    if (d->timer >= 0)
        korch_loop_timer_end(d->loop, d->timer);
    d->timer = timeout_ms < 0 ? -1 : korch_loop_timer(d->loop, (int)timeout_ms, 1, s_on_timeout, d);
    return 0;
}

static korch_op_t *s_start_async(korch_docker_t *d, const char *method, const char *path, const char *ctype,
                                 void *body, size_t len, const korch_docker_async_opts_t *opts,
                                 korch_docker_done_fn *done, void *arg, korch_err_t *err)
{
    if (!d->loop) {
        free(body);
        korch_err_set(err, KORCH_E_STATE, "this docker client has no loop for asynchronous requests");
        return NULL;
    }
    if (!d->multi) {
        d->multi = curl_multi_init();
        if (!d->multi) {
            free(body);
            korch_err_set(err, KORCH_E_NOMEM, "out of memory");
            return NULL;
        }
        curl_multi_setopt(d->multi, CURLMOPT_SOCKETFUNCTION, s_curl_socket);
        curl_multi_setopt(d->multi, CURLMOPT_SOCKETDATA, d);
        curl_multi_setopt(d->multi, CURLMOPT_TIMERFUNCTION, s_curl_timer);
        curl_multi_setopt(d->multi, CURLMOPT_TIMERDATA, d);
    }
    s_areq_t *r = calloc(1, sizeof *r);
    if (!r) {
        free(body);
        korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        return NULL;
    }
    r->base.cancel = s_areq_cancel;
    r->d = d;
    r->body = body;
    r->done = done;
    r->arg = arg;
    r->next = d->pending;
    if (d->pending)
        d->pending->prev = r;
    d->pending = r;
    d->npending++;
    snprintf(r->method, sizeof r->method, "%s", method);
    r->timeout_ms = opts && opts->timeout_ms >= 0 ? opts->timeout_ms : d->timeout_ms;
    korch_buf_init(&r->sink.buf, opts && opts->max_reply ? opts->max_reply : d->max_reply, NULL);
    r->url = s_strdup_printf("%s%s", d->base_url, path);
    r->path = strdup(path);
    r->easy = curl_easy_init();
    if (!r->url || !r->path || !r->easy) {
        s_areq_free(r);
        korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        return NULL;
    }
    s_setup(d, r->easy, method, r->url, ctype, body, len, r->timeout_ms, &r->sink, &r->reply, r->errbuf,
            &r->headers);
    curl_easy_setopt(r->easy, CURLOPT_PRIVATE, (char *)r);
    if (curl_multi_add_handle(d->multi, r->easy) != CURLM_OK) {
        s_areq_free(r);
        korch_err_set(err, KORCH_E_DOCKER, "cannot start a request to docker at '%s'", d->where);
        return NULL;
    }
    return &r->base; /* libcurl's timer (0 ms) starts it on the loop's next round */
}

korch_op_t *korch_docker_request_async(korch_docker_t *d, const char *method, const char *path, const json_t *body,
                                       const korch_docker_async_opts_t *opts, korch_docker_done_fn *done, void *arg,
                                       korch_err_t *err)
{
    char *payload = body ? json_dumps(body, JSON_COMPACT) : NULL;
    if (body && !payload) {
        korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        return NULL;
    }
    return s_start_async(d, method, path, "application/json", payload, payload ? strlen(payload) : 0, opts, done,
                         arg, err);
}

korch_op_t *korch_docker_request_raw_async(korch_docker_t *d, const char *method, const char *path,
                                           const char *content_type, const void *data, size_t len,
                                           const korch_docker_async_opts_t *opts, korch_docker_done_fn *done,
                                           void *arg, korch_err_t *err)
{
    void *copy = NULL;
    if (data && opts && opts->take)
        copy = (void *)data;
    else if (data) {
        copy = malloc(len ? len : 1);
        if (!copy) {
            korch_err_set(err, KORCH_E_NOMEM, "out of memory");
            return NULL;
        }
        memcpy(copy, data, len);
    }
    return s_start_async(d, method, path, content_type, copy, len, opts, done, arg, err);
}

size_t korch_docker_pending(const korch_docker_t *d) { return d->npending; }

korch_rc_t korch_docker_request(korch_docker_t *d, const char *method, const char *path, const json_t *body,
                                korch_docker_reply_t *reply, korch_err_t *err)
{
    memset(reply, 0, sizeof *reply);
    char *payload = body ? json_dumps(body, JSON_COMPACT) : NULL;
    if (body && !payload)
        return korch_err_set(err, KORCH_E_NOMEM, "out of memory");
    korch_rc_t rc = s_perform(d, method, path, "application/json", payload, payload ? strlen(payload) : 0, reply,
                              err);
    free(payload);
    return rc;
}

korch_rc_t korch_docker_request_raw(korch_docker_t *d, const char *method, const char *path,
                                    const char *content_type, const void *data, size_t len,
                                    korch_docker_reply_t *reply, korch_err_t *err)
{
    memset(reply, 0, sizeof *reply);
    return s_perform(d, method, path, content_type, data, len, reply, err);
}

const char *korch_docker_reply_message(const korch_docker_reply_t *reply)
{
    static _Thread_local char buf[32];
    json_t *m = json_is_object(reply->json) ? json_object_get(reply->json, "message") : NULL;
    if (json_is_string(m))
        return json_string_value(m);
    if (reply->body && reply->body[0])
        return reply->body;
    snprintf(buf, sizeof buf, "HTTP %ld", reply->status);
    return buf;
}

korch_rc_t korch_docker_ping(korch_docker_t *d, korch_err_t *err)
{
    korch_docker_reply_t r;
    korch_rc_t rc = korch_docker_request(d, "GET", "/_ping", NULL, &r, err);
    if (rc == KORCH_OK && (r.status != 200 || strncmp(r.body, "OK", 2) != 0))
        rc = korch_err_set(err, KORCH_E_DOCKER, "docker at '%s' does not answer its ping: %s", d->where,
                           korch_docker_reply_message(&r));
    korch_docker_reply_clear(&r);
    return rc;
}

json_t *korch_docker_version(korch_docker_t *d, korch_err_t *err)
{
    korch_docker_reply_t r;
    json_t *v = NULL;
    if (korch_docker_request(d, "GET", "/version", NULL, &r, err))
        return NULL;
    if (r.status == 200 && json_is_object(r.json))
        v = json_incref(r.json);
    else
        korch_err_set(err, KORCH_E_DOCKER, "docker at '%s' did not tell its version: %s", d->where,
                      korch_docker_reply_message(&r));
    korch_docker_reply_clear(&r);
    return v;
}

/* Image references are [host[:port]/]name[:tag][@digest]: nothing to escape,
   but refuse what would change the URL's meaning. */
static bool s_valid_ref(const char *s)
{
    if (!s || !*s || strlen(s) > 512)
        return false;
    for (const char *p = s; *p; p++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-:/@", *p))
            return false;
    return true;
}

json_t *korch_docker_image_inspect(korch_docker_t *d, const char *image, korch_err_t *err)
{
    if (!s_valid_ref(image)) {
        korch_err_set(err, KORCH_E_INVALID, "'%s' is not a valid image name", image ? image : "");
        return NULL;
    }
    char path[700];
    snprintf(path, sizeof path, "/images/%s/json", image);
    korch_docker_reply_t r;
    json_t *v = NULL;
    if (korch_docker_request(d, "GET", path, NULL, &r, err))
        return NULL;
    if (r.status == 200 && json_is_object(r.json))
        v = json_incref(r.json);
    else if (r.status == 404)
        korch_err_set(err, KORCH_E_NOTFOUND, "image '%s' not found (build it with: make image)", image);
    else
        korch_err_set(err, KORCH_E_DOCKER, "cannot inspect image '%s': %s", image, korch_docker_reply_message(&r));
    korch_docker_reply_clear(&r);
    return v;
}

char *korch_docker_escape(korch_docker_t *d, const char *s)
{
    char *e = curl_easy_escape(d->curl, s, 0);
    char *copy = e ? strdup(e) : NULL;
    curl_free(e);
    return copy;
}
