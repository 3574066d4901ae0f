/*  korch's page logs in through JupyterHub's OAuth (hub.h): the service is
 *  an OAuth client of the Hub (client id service-NAME, its api_token the
 *  secret, its oauth_redirect_uri the callback), as HubOAuth does it in
 *  jupyterhub/services/auth.py:
 *
 *    GET /hub/login       302 to the Hub's /hub/api/oauth2/authorize with
 *                         client_id, redirect_uri, response_type=code and a
 *                         random state, which also goes in an HttpOnly
 *                         cookie (SameSite=Lax: the Hub's redirect back is a
 *                         top-level navigation that must carry it);
 *    GET /oauth_callback  the state must equal the cookie's (RFC 6749
 *                         10.12: no login forced on a victim); the code is
 *                         exchanged (POST {api}/oauth2/token) for a token
 *                         that goes in the HttpOnly cookie korch-hub-token;
 *                         302 to the page.
 *
 *  The cookie holds the Hub's OAuth token, whose scopes are the service's
 *  (identify, access to korch): what HubOAuth keeps in its cookie too. It
 *  is a credential a browser sends by itself, so cross-site requests that
 *  could ride on it are what the front door's Origin check refuses (a
 *  browser sends Origin with every POST, PUT, DELETE and websocket).
 */
#include "hub.h"
#include "hub_http.h"
#include "server_int.h"
#include "korch/log.h"

#include <jansson.h>
#include <libwebsockets.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STATE_BYTES 16

/* application/x-www-form-urlencoded / a query value (RFC 3986 unreserved kept) */
static void s_enc(char *out, size_t len, const char *in)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)in; *p && o + 4 < len; p++) {
        if ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-' ||
            *p == '_' || *p == '.' || *p == '~')
            out[o++] = (char)*p;
        else {
            out[o++] = '%';
            out[o++] = hex[*p >> 4];
            out[o++] = hex[*p & 15];
        }
    }
    out[o] = 0;
}

/* The page's path: the callback URL's path without "oauth_callback"
   ("/" for http://host:port/oauth_callback, "/services/korch/" behind the
   Hub's proxy). */
static void s_home(const srv_hub_opts_t *o, char *out, size_t len)
{
    const char *u = o->callback_url ? o->callback_url : "/oauth_callback";
    const char *p = strstr(u, "://");
    p = p ? strchr(p + 3, '/') : u;
    if (!p)
        p = "/";
    size_t n = strlen(p), tail = strlen("oauth_callback");
    if (n >= tail && strcmp(p + n - tail, "oauth_callback") == 0)
        n -= tail;
    snprintf(out, len, "%.*s", (int)(n ? n : 1), n ? p : "/");
}

static bool s_secure(const srv_hub_opts_t *o)
{
    return o->callback_url && strncmp(o->callback_url, "https://", 8) == 0;
}

static srv_hub_t *s_hub(korch_server_t *s, srv_req_t *req)
{
    srv_hub_t *h = srv_parts(s)->hub;
    const srv_hub_opts_t *o = h ? srv_hub_opts(h) : NULL;
    if (!o || !o->callback_url || !o->api_token) {
        srv_respond_error(req, 404,
                          "korch serve has no JupyterHub login: run it as a Hub service with an "
                          "oauth_redirect_uri (korch serve --hub, docs/team.md)");
        return NULL;
    }
    return h;
}

/* The value of cookie name in the request (false when absent or too long). */
static bool s_cookie(srv_req_t *req, const char *name, char *out, size_t len)
{
    srv_cred_t c = {0};
    char buf[4096];
    int n = req->wsi ? lws_hdr_copy(req->wsi, buf, sizeof buf, WSI_TOKEN_HTTP_COOKIE) : -1;
    if (n <= 0)
        return false;
    size_t nl = strlen(name);
    for (const char *p = buf; *p;) {
        while (*p == ' ' || *p == ';')
            p++;
        size_t k = strcspn(p, ";");
        if (k > nl && p[nl] == '=' && strncmp(p, name, nl) == 0 && k - nl - 1 < len && k - nl - 1 > 0) {
            memcpy(out, p + nl + 1, k - nl - 1);
            out[k - nl - 1] = 0;
            return true;
        }
        p += k;
    }
    (void)c;
    return false;
}

static void s_redirect(srv_req_t *req, const char *location, const char *cookies)
{
    snprintf(req->location, sizeof req->location, "%s", location);
    free(req->set_cookie);
    req->set_cookie = cookies ? strdup(cookies) : NULL;
    srv_respond(req, 302, NULL);
}

void srv_hub_login(korch_server_t *s, srv_req_t *req, const srv_params_t *p, json_t *body)
{
    srv_hub_t *h = s_hub(s, req);
    if (!h)
        return;
    const srv_hub_opts_t *o = srv_hub_opts(h);
    unsigned char raw[STATE_BYTES];
    char state[2 * STATE_BYTES + 1];
    if (RAND_bytes(raw, sizeof raw) != 1) {
        srv_respond_error(req, 500, "cannot make a login state (openssl RAND_bytes failed)");
        return;
    }
    for (int i = 0; i < STATE_BYTES; i++)
        snprintf(state + 2 * i, 3, "%02x", raw[i]);
    char cid[256], cb[1024], loc[2048], home[512], cookie[768];
    s_enc(cid, sizeof cid, o->client_id);
    s_enc(cb, sizeof cb, o->callback_url);
    s_home(o, home, sizeof home);
    int n = snprintf(loc, sizeof loc, "%s?client_id=%s&redirect_uri=%s&response_type=code&state=%s", o->login_url,
                     cid, cb, state);
    if (n >= (int)sizeof loc || n >= (int)sizeof req->location) {
        srv_respond_error(req, 500, "the Hub's login URL is too long");
        return;
    }
    snprintf(cookie, sizeof cookie, SRV_HUB_STATE_COOKIE "=%s; Path=%s; HttpOnly; SameSite=Lax; Max-Age=600%s",
             state, home, s_secure(o) ? "; Secure" : "");
    s_redirect(req, loc, cookie);
}

typedef struct {
    srv_req_t *req;
    srv_hub_t *hub;
} s_exchange_t;

static void s_exchanged(void *arg, const srv_hubreply_t *r, const korch_err_t *err)
{
    s_exchange_t *x = arg;
    srv_req_t *req = x->req;
    const srv_hub_opts_t *o = srv_hub_opts(x->hub);
    free(x);
    json_t *j = r && r->status == 200 ? json_loadb(r->body, r->len, 0, NULL) : NULL;
    const char *tok = json_string_value(json_object_get(j, "access_token"));
    if (!r)
        srv_respond_error(req, 503, "cannot log in through JupyterHub: %s", err ? err->msg : "no answer");
    else if (!tok || !*tok || strlen(tok) > 400 || strcspn(tok, "; \t\r\n,\"") != strlen(tok))
        srv_respond_error(req, 403,
                          "JupyterHub refused the login (HTTP %ld from its token endpoint): start again at "
                          "/hub/login",
                          r->status);
    else {
        char home[512], cookies[1400];
        s_home(o, home, sizeof home);
        const char *sec = s_secure(o) ? "; Secure" : "";
        snprintf(cookies, sizeof cookies,
                 SRV_HUB_COOKIE "=%s; Path=%s; HttpOnly; SameSite=Lax%s\n" SRV_HUB_STATE_COOKIE
                                "=; Path=%s; HttpOnly; SameSite=Lax; Max-Age=0%s",
                 tok, home, sec, home, sec);
        korch_info("JupyterHub: a browser logged in through OAuth");
        s_redirect(req, home, cookies);
        OPENSSL_cleanse(cookies, sizeof cookies);
    }
    json_decref(j);
}

void srv_hub_callback(korch_server_t *s, srv_req_t *req, const srv_params_t *p, json_t *body)
{
    srv_hub_t *h = s_hub(s, req);
    if (!h)
        return;
    const srv_hub_opts_t *o = srv_hub_opts(h);
    char code[512], state[128], want[128];
    if (!srv_req_query(req, "code", code, sizeof code) || !*code) {
        char e[128];
        srv_respond_error(req, 400, "JupyterHub sent no login code%s%s: start again at /hub/login",
                          srv_req_query(req, "error", e, sizeof e) ? ": " : "", srv_req_query(req, "error", e, sizeof e) ? e : "");
        return;
    }
    if (!srv_req_query(req, "state", state, sizeof state) || !s_cookie(req, SRV_HUB_STATE_COOKIE, want, sizeof want) ||
        strlen(state) != strlen(want) || CRYPTO_memcmp(state, want, strlen(want)) != 0) {
        srv_respond_error(req, 400,
                          "the login's state does not match this browser's (an old or foreign login link): start "
                          "again at /hub/login");
        return;
    }
    char form[4600], e_id[256], e_secret[600], e_code[1600], e_cb[1024], url[1100];
    s_enc(e_id, sizeof e_id, o->client_id);
    s_enc(e_secret, sizeof e_secret, o->api_token);
    s_enc(e_code, sizeof e_code, code);
    s_enc(e_cb, sizeof e_cb, o->callback_url);
    snprintf(form, sizeof form, "client_id=%s&client_secret=%s&grant_type=authorization_code&code=%s&redirect_uri=%s",
             e_id, e_secret, e_code, e_cb);
    snprintf(url, sizeof url, "%s/oauth2/token", o->api_url);
    s_exchange_t *x = calloc(1, sizeof *x);
    korch_err_t err = {0};
    if (!x) {
        srv_respond_error(req, 500, "out of memory");
        return;
    }
    x->req = req;
    x->hub = h;
    srv_req_wait(req);
    if (!srv_hubhttp_start(srv_hub_http(h), url, NULL, form, s_exchanged, x, &err)) {
        free(x);
        srv_respond_error(req, 503, "cannot log in through JupyterHub: %s", err.msg);
    }
    OPENSSL_cleanse(form, sizeof form);
    OPENSSL_cleanse(e_secret, sizeof e_secret);
}

bool srv_hub_page_login(korch_server_t *s, srv_req_t *req)
{
    srv_hub_t *h = srv_parts(s)->hub;
    const srv_hub_opts_t *o = h ? srv_hub_opts(h) : NULL;
    if (!o || !o->callback_url || !o->api_token || req->user.role != SRV_ROLE_NONE || strcmp(req->path, "/") != 0)
        return false;
    /* relative: the page's own place, at korch's address or behind the Hub's proxy */
    s_redirect(req, "hub/login", NULL);
    return true;
}
