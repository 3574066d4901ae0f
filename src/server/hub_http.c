/*  Requests to JupyterHub's API on korch's loop (hub_http.h): libcurl's
 *  multi "socket" interface, as src/launcher/docker_api.c drives the Engine
 *  API: CURLMOPT_SOCKETFUNCTION puts curl's sockets on korch_loop,
 *  CURLMOPT_TIMERFUNCTION one korch timer; finished transfers are handed
 *  to their done after they are unlinked from curl (a done may start or
 *  cancel requests).
 */
#include "hub_http.h"
#include "korch/buf.h"

#include <curl/curl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct srv_hubreq {
    srv_hubhttp_t *h;
    srv_hubreq_t *prev, *next;
    CURL *easy;
    struct curl_slist *headers;
    char *form;
    korch_buf_t body;
    bool too_big;
    char errbuf[CURL_ERROR_SIZE];
    srv_hubhttp_done_fn *done;
    void *arg;
};

struct srv_hubhttp {
    korch_loop_t *loop;
    CURLM *multi;
    int timer;
    long timeout_ms;
    size_t max_reply;
    srv_hubreq_t *reqs;
    int n;
};

static void s_req_free(srv_hubreq_t *r)
{
    srv_hubhttp_t *h = r->h;
    if (r->prev)
        r->prev->next = r->next;
    else if (h->reqs == r)
        h->reqs = r->next;
    if (r->next)
        r->next->prev = r->prev;
    h->n--;
    if (r->easy) {
        curl_multi_remove_handle(h->multi, r->easy);
        curl_easy_cleanup(r->easy);
    }
    curl_slist_free_all(r->headers);
    free(r->form);
    korch_buf_free(&r->body);
    free(r);
}

static size_t s_write(char *p, size_t size, size_t n, void *arg)
{
    srv_hubreq_t *r = arg;
    if (korch_buf_add(&r->body, p, size * n, "JupyterHub's reply", NULL) != KORCH_OK) {
        r->too_big = true;
        return 0; /* curl fails the transfer (CURLE_WRITE_ERROR) */
    }
    return size * n;
}

static void s_finish(srv_hubhttp_t *h, srv_hubreq_t *r, CURLcode cc)
{
    srv_hubreply_t rep = {0};
    korch_err_t err = {0};
    char *url = NULL;
    curl_easy_getinfo(r->easy, CURLINFO_EFFECTIVE_URL, &url);
    if (cc == CURLE_OK) {
        curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &rep.status);
        rep.body = r->body.p ? r->body.p : "";
        rep.len = r->body.len;
    } else if (r->too_big)
        korch_err_set(&err, KORCH_E_TOOBIG, "JupyterHub's answer from '%s' is over %zu bytes", url ? url : "?",
                      h->max_reply);
    else if (cc == CURLE_OPERATION_TIMEDOUT)
        korch_err_set(&err, KORCH_E_TIMEOUT, "JupyterHub at '%s' did not answer within %ld ms", url ? url : "?",
                      h->timeout_ms);
    else
        korch_err_set(&err, KORCH_E_HTTP, "cannot reach JupyterHub at '%s': %s", url ? url : "?",
                      r->errbuf[0] ? r->errbuf : curl_easy_strerror(cc));
    /* unlinked from curl before done: done may start or cancel requests */
    srv_hubhttp_done_fn *done = r->done;
    void *arg = r->arg;
    korch_buf_t body = r->body;
    memset(&r->body, 0, sizeof r->body);
    curl_multi_remove_handle(h->multi, r->easy);
    curl_easy_cleanup(r->easy);
    r->easy = NULL;
    s_req_free(r);
    done(arg, cc == CURLE_OK ? &rep : NULL, cc == CURLE_OK ? NULL : &err);
    korch_buf_free(&body);
}

static void s_dispatch(srv_hubhttp_t *h)
{
    CURLMsg *m;
    int left;
    while ((m = curl_multi_info_read(h->multi, &left))) {
        if (m->msg != CURLMSG_DONE)
            continue;
        srv_hubreq_t *r = NULL;
        curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&r);
        if (r)
            s_finish(h, r, m->data.result);
    }
}

static int s_on_socket(korch_loop_t *loop, int fd, unsigned revents, void *arg)
{
    srv_hubhttp_t *h = arg;
    int flags = (revents & KORCH_POLL_IN ? CURL_CSELECT_IN : 0) | (revents & KORCH_POLL_OUT ? CURL_CSELECT_OUT : 0) |
                (revents & KORCH_POLL_ERR ? CURL_CSELECT_ERR : 0);
    int running = 0;
    curl_multi_socket_action(h->multi, fd, flags, &running);
    s_dispatch(h);
    return 0;
}

static int s_on_timeout(korch_loop_t *loop, int timer_id, void *arg)
{
    srv_hubhttp_t *h = arg;
    h->timer = -1;
    int running = 0;
    curl_multi_socket_action(h->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    s_dispatch(h);
    return 0;
}

static int s_curl_socket(CURL *easy, curl_socket_t s, int what, void *userp, void *socketp)
{
    srv_hubhttp_t *h = userp;
    if (what == CURL_POLL_REMOVE)
        korch_loop_poller_end(h->loop, s);
    else
        korch_loop_poller_ev(h->loop, s,
                             (what & CURL_POLL_IN ? KORCH_POLL_IN : 0) | (what & CURL_POLL_OUT ? KORCH_POLL_OUT : 0),
                             s_on_socket, h);
    return 0;
}

/* libcurl is called back from the loop, never from inside this function */
static int s_curl_timer(CURLM *multi, long timeout_ms, void *userp)
{
    srv_hubhttp_t *h = userp;
    if (h->timer >= 0)
        korch_loop_timer_end(h->loop, h->timer);
    h->timer = timeout_ms < 0 ? -1 : korch_loop_timer(h->loop, (int)timeout_ms, 1, s_on_timeout, h);
    return 0;
}

srv_hubhttp_t *srv_hubhttp_new(korch_loop_t *loop, long timeout_ms, size_t max_reply)
{
    srv_hubhttp_t *h = calloc(1, sizeof *h);
    if (!h)
        return NULL;
    h->loop = loop;
    h->timer = -1;
    h->timeout_ms = timeout_ms;
    h->max_reply = max_reply;
    h->multi = curl_multi_init();
    if (!h->multi) {
        free(h);
        return NULL;
    }
    curl_multi_setopt(h->multi, CURLMOPT_SOCKETFUNCTION, s_curl_socket);
    curl_multi_setopt(h->multi, CURLMOPT_SOCKETDATA, h);
    curl_multi_setopt(h->multi, CURLMOPT_TIMERFUNCTION, s_curl_timer);
    curl_multi_setopt(h->multi, CURLMOPT_TIMERDATA, h);
    return h;
}

void srv_hubhttp_destroy(srv_hubhttp_t **ph)
{
    srv_hubhttp_t *h = ph ? *ph : NULL;
    if (!h)
        return;
    /* what still waits (an OAuth callback's code exchange) is answered, so
       its request and its caller's state are freed, not left behind */
    korch_err_t err = {0};
    korch_err_set(&err, KORCH_E_IO, "korch serve is shutting down");
    while (h->reqs) {
        srv_hubreq_t *r = h->reqs;
        srv_hubhttp_done_fn *done = r->done;
        void *arg = r->arg;
        s_req_free(r);
        if (done)
            done(arg, NULL, &err);
    }
    if (h->timer >= 0)
        korch_loop_timer_end(h->loop, h->timer);
    curl_multi_cleanup(h->multi);
    free(h);
    *ph = NULL;
}

srv_hubreq_t *srv_hubhttp_start(srv_hubhttp_t *h, const char *url, const char *token, const char *form,
                                srv_hubhttp_done_fn *done, void *arg, korch_err_t *err)
{
    srv_hubreq_t *r = calloc(1, sizeof *r);
    if (!r) {
        korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        return NULL;
    }
    r->h = h;
    r->done = done;
    r->arg = arg;
    r->next = h->reqs;
    if (h->reqs)
        h->reqs->prev = r;
    h->reqs = r;
    h->n++;
    korch_buf_init(&r->body, h->max_reply, "the Hub's reply limit");
    r->easy = curl_easy_init();
    char auth[600];
    if (token && snprintf(auth, sizeof auth, "Authorization: token %s", token) >= (int)sizeof auth) {
        s_req_free(r);
        korch_err_set(err, KORCH_E_INVALID, "the token is too long to ask JupyterHub about (over 500 bytes)");
        return NULL;
    }
    struct curl_slist *hd = curl_slist_append(NULL, "Accept: application/json");
    r->headers = hd;
    if (hd && token)
        r->headers = curl_slist_append(hd, auth);
    if (form)
        r->form = strdup(form);
    if (!r->easy || !r->headers || (form && !r->form)) {
        s_req_free(r);
        korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        return NULL;
    }
    CURL *e = r->easy;
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, r->headers);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, s_write);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, r->errbuf);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, h->timeout_ms);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, h->timeout_ms);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_PRIVATE, (char *)r);
    if (form)
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, r->form);
    if (curl_multi_add_handle(h->multi, e) != CURLM_OK) {
        s_req_free(r);
        korch_err_set(err, KORCH_E_HTTP, "cannot start a request to JupyterHub at '%s'", url);
        return NULL;
    }
    return r; /* curl's 0 ms timer starts it on the loop's next round */
}

void srv_hubhttp_cancel(srv_hubhttp_t *h, srv_hubreq_t *r)
{
    if (r)
        s_req_free(r);
}

int srv_hubhttp_pending(const srv_hubhttp_t *h) { return h ? h->n : 0; }
