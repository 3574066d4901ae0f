/*  HTTP for the LLM providers: one blocking POST over libcurl whose body is
 *  handed on line by line as it streams, with the official SDKs' retry
 *  policy (openai-python / anthropic-sdk-python `_base_client.py`):
 *
 *    retry 408, 409, 429 and >= 500 (so Anthropic's 529 "overloaded"), or
 *    whatever "x-should-retry: true" says; connection errors too.
 *    wait "retry-after-ms", else "retry-after" (seconds or an HTTP date)
 *    when 0 < wait <= 60 s, else 0.5 s * 2^n capped at 8 s with jitter.
 *
 *  A response that has begun streaming (2xx) is never retried: its text has
 *  reached the user already.
 *
 *  Behind a fair gate (korch/llm_gate.h) each attempt waits for the gate
 *  first, and a 429 / 529 is retried until the request's timeout: the gate
 *  holds the call, in its party's place, until the provider's retry-after.
 */
#include "provider.h"
#include "korch/log.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define S_ERR_BODY_MAX 65536

static pthread_once_t s_curl_once = PTHREAD_ONCE_INIT;
static CURLcode s_curl_rc = CURLE_OK;
static void s_curl_init(void) { s_curl_rc = curl_global_init(CURL_GLOBAL_DEFAULT); }

typedef struct {
    korch_llm_t *llm;
    const korch_llm_post_t *post;
    const korch_llm_cb_t *cb;
    korch_err_t *err;
    long status;                /* of the last status line (a 100 Continue is followed by another) */
    char retry_ms[32], retry[64];
    int should_retry;           /* -1 not said, 0 / 1 from x-should-retry */
    korch_buf_t line;       /* the line being received */
    korch_buf_t ebody;      /* a non-2xx body, for its message */
    size_t body_bytes;          /* of a 2xx body */
    korch_rc_t fail_rc;         /* on_line or the line buffer failed (err is set) */
    bool cancelled;
} s_xfer_t;

double korch_llm_backoff_s(int n)
{
    double s = 0.5 * pow(2.0, n < 10 ? n : 10);
    if (s > 8.0)
        s = 8.0;
    return s * (1.0 - 0.25 * ((double)rand() / RAND_MAX));
}

double korch_llm_retry_after_s(const char *ms_value, const char *value, time_t now)
{
    char *end;
    double s = -1;
    if (ms_value && *ms_value) {
        double ms = strtod(ms_value, &end);
        if (end != ms_value && isfinite(ms))
            s = ms / 1000.0;
    }
    if (s < 0 && value && *value) {
        double v = strtod(value, &end);
        if (end != value && (*end == 0 || *end == ' ') && isfinite(v)) {
            s = v;
        } else {
            time_t t = curl_getdate(value, NULL);
            if (t != -1)
                s = difftime(t, now);
        }
    }
    /* the SDKs ignore waits that are negative, zero or over a minute */
    return s > 0 && s <= 60 ? s : -1;
}

void korch_llm_api_message(const char *body, size_t len, char *out, size_t cap)
{
    out[0] = 0;
    json_t *root = body && len ? json_loadb(body, len, 0, NULL) : NULL;
    json_t *e = json_object_get(root, "error");
    const char *msg = NULL, *type = NULL;
    if (json_is_object(e)) {
        msg = korch_llm_jstr(e, "message", NULL);
        type = korch_llm_jstr(e, "type", NULL);
    } else if (json_is_string(e)) {
        msg = json_string_value(e);
    } else if (root) {
        msg = korch_llm_jstr(root, "message", korch_llm_jstr(root, "detail", NULL));
    }
    if (msg && type && *type)
        snprintf(out, cap, "%s (%s)", msg, type);
    else if (msg)
        snprintf(out, cap, "%s", msg);
    else if (body && len) {
        size_t n = strcspn(body, "\r\n");
        if (n > len)
            n = len;
        snprintf(out, cap, "%.*s", (int)(n < 300 ? n : 300), body);
    } else {
        snprintf(out, cap, "empty reply");
    }
    json_decref(root);
}

static bool s_ok(long status) { return status >= 200 && status < 300; }

static size_t s_header(char *data, size_t size, size_t nmemb, void *arg)
{
    s_xfer_t *x = arg;
    size_t n = size * nmemb;
    if (n >= 5 && memcmp(data, "HTTP/", 5) == 0) {
        const char *sp = memchr(data, ' ', n);
        x->status = sp ? strtol(sp + 1, NULL, 10) : 0;
        x->retry_ms[0] = x->retry[0] = 0;
        x->should_retry = -1;
        return n;
    }
    const char *colon = memchr(data, ':', n);
    if (!colon)
        return n;
    size_t nl = (size_t)(colon - data);
    const char *v = colon + 1;
    size_t vl = n - nl - 1;
    while (vl && (*v == ' ' || *v == '\t'))
        v++, vl--;
    while (vl && (v[vl - 1] == '\r' || v[vl - 1] == '\n' || v[vl - 1] == ' '))
        vl--;
    if (nl == 14 && strncasecmp(data, "retry-after-ms", nl) == 0)
        snprintf(x->retry_ms, sizeof x->retry_ms, "%.*s", (int)vl, v);
    else if (nl == 11 && strncasecmp(data, "retry-after", nl) == 0)
        snprintf(x->retry, sizeof x->retry, "%.*s", (int)vl, v);
    else if (nl == 14 && strncasecmp(data, "x-should-retry", nl) == 0)
        x->should_retry = vl == 4 && strncasecmp(v, "true", 4) == 0 ? 1 : vl == 5 && strncasecmp(v, "false", 5) == 0 ? 0 : -1;
    return n;
}

static size_t s_write(char *data, size_t size, size_t nmemb, void *arg)
{
    s_xfer_t *x = arg;
    size_t n = size * nmemb;
    if (!s_ok(x->status)) {
        size_t room = S_ERR_BODY_MAX - x->ebody.len;
        if (room)
            korch_buf_add(&x->ebody, data, n < room ? n : room, "error reply", NULL);
        return n;
    }
    x->body_bytes += n;
    const char *p = data, *end = data + n;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t chunk = nl ? (size_t)(nl - p) : (size_t)(end - p);
        korch_rc_t rc = korch_buf_add(&x->line, p, chunk, "line of the streamed reply", x->err);
        if (rc) {
            x->fail_rc = rc;
            return 0;
        }
        if (!nl)
            break;
        size_t ll = x->line.len;
        if (ll && x->line.p[ll - 1] == '\r')
            x->line.p[--ll] = 0;
        rc = x->post->on_line(x->post->arg, x->line.p ? x->line.p : (char *)"", ll, x->err);
        x->line.len = 0;
        if (x->line.p)
            x->line.p[0] = 0;
        if (rc) {
            x->fail_rc = rc;
            return 0;
        }
        p = nl + 1;
    }
    return n;
}

static int s_progress(void *arg, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow)
{
    s_xfer_t *x = arg;
    if (x->cb && x->cb->on_tick)
        x->cb->on_tick(x->cb->arg);
    if (x->cb && x->cb->cancelled && x->cb->cancelled(x->cb->arg)) {
        x->cancelled = true;
        return 1;
    }
    return 0;
}

/* Sleep s seconds in small slices, watching for cancellation. */
static bool s_wait(double s, const korch_llm_cb_t *cb)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        if (cb && cb->on_tick)
            cb->on_tick(cb->arg);
        if (cb && cb->cancelled && cb->cancelled(cb->arg))
            return false;
        clock_gettime(CLOCK_MONOTONIC, &t);
        double left = s - ((double)(t.tv_sec - t0.tv_sec) + (double)(t.tv_nsec - t0.tv_nsec) / 1e9);
        if (left <= 0)
            return true;
        double slice = left < 0.05 ? left : 0.05;
        struct timespec ts = {0, (long)(slice * 1e9)};
        nanosleep(&ts, NULL);
    }
}

static bool s_retryable_status(long status, int should_retry)
{
    if (should_retry >= 0)
        return should_retry == 1;
    return status == 408 || status == 409 || status == 429 || status >= 500;
}

static bool s_retryable_curl(CURLcode cc)
{
    switch (cc) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_SSL_CONNECT_ERROR:
        return true;
    default:
        return false;
    }
}

static korch_rc_t s_status_error(korch_llm_t *llm, const s_xfer_t *x, int attempts, korch_err_t *err)
{
    const korch_llm_provider_t *p = llm->prov;
    char msg[600];
    korch_llm_api_message(x->ebody.p, x->ebody.len, msg, sizeof msg);
    if ((x->status == 401 || x->status == 403) && p->key_env)
        return korch_err_set(err, KORCH_E_HTTP, "the %s API rejected the key (HTTP %ld: %s); set %s", p->name, x->status,
                             msg, p->key_env);
    if (x->status == 404)
        return korch_err_set(err, KORCH_E_HTTP, "the %s API answered HTTP 404 for '%s': %s (check the model name '%s' and %s)",
                             p->name, x->post->url, msg, llm->model, p->url_env);
    if (attempts > 1)
        return korch_err_set(err, KORCH_E_HTTP, "the %s API answered HTTP %ld after %d attempts: %s", p->name, x->status,
                             attempts, msg);
    return korch_err_set(err, KORCH_E_HTTP, "the %s API answered HTTP %ld: %s", p->name, x->status, msg);
}

korch_rc_t korch_llm_http_post(korch_llm_t *llm, const korch_llm_post_t *post, const korch_llm_cb_t *cb,
                               int *attempts, korch_err_t *err)
{
    korch_rc_t rc = KORCH_OK;
    struct curl_slist *headers = NULL;
    s_xfer_t x = {.llm = llm, .post = post, .cb = cb, .err = err};
    korch_buf_init(&x.line, llm->opts.max_reply_bytes, "max_reply_bytes");
    korch_buf_init(&x.ebody, S_ERR_BODY_MAX, NULL);
    char errbuf[CURL_ERROR_SIZE];
    *attempts = 0;

    /* Providers pass what their encoder made; NULL means it could not. */
    if (!post->body)
        return korch_err_set(err, KORCH_E_INVALID,
                             "cannot encode the conversation for %s (out of memory, or text that is not UTF-8)",
                             llm->prov->name);
    pthread_once(&s_curl_once, s_curl_init);
    if (s_curl_rc != CURLE_OK)
        return korch_err_set(err, KORCH_E_HTTP, "cannot initialise libcurl: %s", curl_easy_strerror(s_curl_rc));
    if (!llm->curl && !(llm->curl = curl_easy_init()))
        return korch_err_set(err, KORCH_E_NOMEM, "cannot create a curl handle");
    headers = curl_slist_append(headers, "Content-Type: application/json");
    headers = curl_slist_append(headers, "Accept: application/json, text/event-stream, application/x-ndjson");
    /* no "Expect: 100-continue" round trip for big bodies (conversations with images) */
    headers = curl_slist_append(headers, "Expect:");
    for (const char *const *h = post->headers; h && *h; h++)
        headers = curl_slist_append(headers, *h);
    if (!headers)
        return korch_err_set(err, KORCH_E_NOMEM, "out of memory");

    CURL *c = llm->curl;
    int max_retries = llm->opts.max_retries;
    unsigned long long ticket = 0;  /* the call's place at the gate */
    time_t started = time(NULL);
    for (int attempt = 0;; attempt++) {
        x.status = 0;
        x.should_retry = -1;
        x.retry_ms[0] = x.retry[0] = 0;
        x.line.len = x.ebody.len = x.body_bytes = 0;
        errbuf[0] = 0;
        curl_easy_reset(c);     /* keeps live connections */
        curl_easy_setopt(c, CURLOPT_URL, post->url);
        curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(c, CURLOPT_TCP_NODELAY, 1L);
        curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, llm->opts.connect_timeout_ms);
        curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, llm->opts.timeout_ms);
        curl_easy_setopt(c, CURLOPT_POST, 1L);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, post->body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)post->body_len);
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
        curl_easy_setopt(c, CURLOPT_USERAGENT, "korch/" KORCH_VERSION);
        curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
        curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, s_header);
        curl_easy_setopt(c, CURLOPT_HEADERDATA, &x);
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, s_write);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, &x);
        curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
        curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, s_progress);
        curl_easy_setopt(c, CURLOPT_XFERINFODATA, &x);
        /* the body is ours to decode: ask for it uncompressed-or-gzip */
        curl_easy_setopt(c, CURLOPT_ACCEPT_ENCODING, "");
        if (llm->gate && !korch_llm_gate_enter(llm->gate, llm->party, &ticket, cb)) {
            rc = korch_err_set(err, KORCH_E_INTERRUPTED, "the %s request was interrupted", llm->prov->name);
            goto out;
        }
        CURLcode cc = curl_easy_perform(c);
        (*attempts)++;
        bool limited = x.status == 429 || x.status == 529;
        double said = limited ? korch_llm_retry_after_s(x.retry_ms, x.retry, time(NULL)) : -1;
        if (llm->gate)
            korch_llm_gate_leave(llm->gate, llm->party, x.status, said > 0 ? said : korch_llm_backoff_s(attempt));
        /* behind a gate a rate-limited call waits its turn until the request's timeout */
        bool gated = llm->gate && limited && x.should_retry != 0 &&
                     difftime(time(NULL), started) * 1000 < (double)llm->opts.timeout_ms;
        if (x.cancelled) {
            rc = korch_err_set(err, KORCH_E_INTERRUPTED, "the %s request was interrupted", llm->prov->name);
            goto out;
        }
        if (x.fail_rc) {
            rc = x.fail_rc;
            goto out;
        }
        if (cc == CURLE_OK && s_ok(x.status))
            goto out;       /* the provider checks that the stream reached its end */
        if (cc != CURLE_OK && s_ok(x.status)) {
            /* the stream had begun: its text may have been shown already */
            rc = korch_err_set(err, cc == CURLE_OPERATION_TIMEDOUT ? KORCH_E_TIMEOUT : KORCH_E_HTTP,
                               "the %s stream was cut before its end after %zu bytes: %s", llm->prov->name,
                               x.body_bytes, errbuf[0] ? errbuf : curl_easy_strerror(cc));
            goto out;
        }
        bool can_retry = attempt < max_retries || gated;
        double wait = -1;
        if (cc != CURLE_OK && x.status == 0) {
            if (!can_retry || !s_retryable_curl(cc)) {
                const char *why = errbuf[0] ? errbuf : curl_easy_strerror(cc);
                if (cc == CURLE_OPERATION_TIMEDOUT)
                    rc = korch_err_set(err, KORCH_E_TIMEOUT, "the %s API at '%s' did not answer in time: %s (%d attempts)",
                                       llm->prov->name, post->url, why, *attempts);
                else
                    rc = korch_err_set(err, KORCH_E_HTTP, "cannot reach the %s API at '%s': %s (is it running? check %s)",
                                       llm->prov->name, post->url, why, llm->prov->url_env);
                goto out;
            }
        } else if (cc != CURLE_OK) {
            /* an error reply cut short: judge it by its status */
            if (!can_retry || !s_retryable_status(x.status, x.should_retry)) {
                rc = s_status_error(llm, &x, *attempts, err);
                goto out;
            }
        } else {
            if (!can_retry || !s_retryable_status(x.status, x.should_retry)) {
                rc = s_status_error(llm, &x, *attempts, err);
                goto out;
            }
            wait = korch_llm_retry_after_s(x.retry_ms, x.retry, time(NULL));
        }
        if (wait < 0)
            wait = korch_llm_backoff_s(attempt);
        korch_info("llm: %s answered %ld (%s); retry %d of %d in %.2f s", llm->prov->name, x.status,
                   cc ? curl_easy_strerror(cc) : "error status", attempt + 1, max_retries, wait);
        if (cb && cb->on_retry) {
            char why[600];
            if (x.status)
                korch_llm_api_message(x.ebody.p, x.ebody.len, why, sizeof why);
            else
                snprintf(why, sizeof why, "%s", errbuf[0] ? errbuf : curl_easy_strerror(cc));
            korch_llm_retry_t r = {.attempt = attempt + 1, .max_retries = max_retries, .http_status = x.status,
                                   .wait_ms = (long)(wait * 1000 + 0.5), .why = why};
            cb->on_retry(&r, cb->arg);
        }
        if (!gated && !s_wait(wait, cb)) {
            rc = korch_err_set(err, KORCH_E_INTERRUPTED, "the %s request was interrupted", llm->prov->name);
            goto out;
        }
    }
out:
    curl_slist_free_all(headers);
    korch_buf_free(&x.line);
    korch_buf_free(&x.ebody);
    return rc;
}
