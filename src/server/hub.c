/*  JupyterHub's resolver (hub.h): a request's token asked of the Hub's
 *  GET /hub/api/user, the answers cached by the token's SHA-256.
 *
 *  JupyterHub 3.0's SelfAPIHandler (apihandlers/users.py) answers any valid
 *  token with its owner's model, including the token's expanded "scopes";
 *  HubAuth (services/auth.py) then requires access:services!service=NAME
 *  among them (check_scopes). korch does the same, and reads "groups" (an
 *  identify scope: always there) for its admins, not "admin" (which a
 *  server's token may not read).
 */
#include "hub.h"
#include "hub_http.h"
#include "korch/log.h"

#include <jansson.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define HUB_TOKEN_MAX 512           /* longer is not a Hub token */
#define HUB_REPLY_MAX (256 * 1024)  /* a user model with its groups and scopes */
#define HUB_DENIED_S 5              /* a refusal is kept this long at most */
#define HUB_DOWN_S 1                /* a failure to reach the Hub: only long enough to say why */

typedef struct {
    unsigned char key[SHA256_DIGEST_LENGTH];
    bool used;
    int64_t born_ms, expires_ms;
    srv_who_t verdict;              /* OK or DENIED */
    int status;                     /* DENIED: 403 or 503 */
    srv_user_t user;
    char why[320];
} s_entry_t;

typedef struct s_waiter {
    struct s_waiter *next;
    srv_who_done_fn *done;
    void *arg;
} s_waiter_t;

typedef struct s_lookup {
    struct s_lookup *prev, *next;
    srv_hub_t *hub;
    unsigned char key[SHA256_DIGEST_LENGTH];
    srv_hubreq_t *req;
    s_waiter_t *waiters;
} s_lookup_t;

struct srv_hub {
    srv_hub_opts_t o;
    char *api_url, *service_name, *access_scope, *admin_group;
    char *api_token, *client_id, *callback_url, *login_url;
    char user_url[1024];
    korch_loop_t *loop;
    srv_hubhttp_t *http;
    s_entry_t *cache;
    int ncache;
    s_lookup_t *lookups;
    int nlookups;
};

/* ------------------------------------------------------------ options */

static const char *s_env(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

void srv_hub_opts_from_env(srv_hub_opts_t *o)
{
    if (!o->api_url)
        o->api_url = s_env("JUPYTERHUB_API_URL");
    if (!o->service_name)
        o->service_name = s_env("JUPYTERHUB_SERVICE_NAME");
    if (!o->api_token)
        o->api_token = s_env("JUPYTERHUB_API_TOKEN");
    if (!o->client_id)
        o->client_id = s_env("JUPYTERHUB_CLIENT_ID");
    if (!o->callback_url)
        o->callback_url = s_env("JUPYTERHUB_OAUTH_CALLBACK_URL");
}

static char *s_dup(const char *s) { return s ? strdup(s) : NULL; }

static void s_destroy(void *self)
{
    srv_hub_t *h = self;
    if (!h)
        return;
    while (h->lookups) {
        s_lookup_t *l = h->lookups;
        h->lookups = l->next;
        srv_hubhttp_cancel(h->http, l->req);
        for (s_waiter_t *w = l->waiters, *nw; w; w = nw) {
            nw = w->next;
            free(w);
        }
        free(l);
    }
    srv_hubhttp_destroy(&h->http);
    free(h->cache);
    free(h->api_url);
    free(h->service_name);
    free(h->access_scope);
    free(h->admin_group);
    free(h->api_token);
    free(h->client_id);
    free(h->callback_url);
    free(h->login_url);
    free(h);
}

srv_hub_t *srv_hub_new(korch_loop_t *loop, const srv_hub_opts_t *opts, korch_err_t *err)
{
    srv_hub_opts_t o = *opts;
    if (!o.api_url || !*o.api_url) {
        korch_err_set(err, KORCH_E_INVALID,
                      "no JupyterHub API URL: give --hub-api-url or run korch as a Hub service "
                      "($JUPYTERHUB_API_URL)");
        return NULL;
    }
    if (strncmp(o.api_url, "http://", 7) != 0 && strncmp(o.api_url, "https://", 8) != 0) {
        korch_err_set(err, KORCH_E_INVALID, "the JupyterHub API URL '%s' is not http:// or https://", o.api_url);
        return NULL;
    }
    srv_hub_t *h = calloc(1, sizeof *h);
    if (!h) {
        korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        return NULL;
    }
    h->loop = loop;
    const char *name = o.service_name ? o.service_name : "korch";
    char scope[300], client[300], login[1024];
    snprintf(scope, sizeof scope, "access:services!service=%s", name);
    snprintf(client, sizeof client, "service-%s", name);
    const char *host = s_env("JUPYTERHUB_HOST"), *base = s_env("JUPYTERHUB_BASE_URL");
    snprintf(login, sizeof login, "%s%s%shub/api/oauth2/authorize", host ? host : "", base ? base : "/",
             base && base[strlen(base) - 1] != '/' ? "/" : "");
    size_t n = strlen(o.api_url);
    while (n && o.api_url[n - 1] == '/')
        n--;
    if (n + 8 > sizeof h->user_url) {
        free(h);
        korch_err_set(err, KORCH_E_INVALID, "the JupyterHub API URL is too long");
        return NULL;
    }
    snprintf(h->user_url, sizeof h->user_url, "%.*s/user", (int)n, o.api_url);
    h->o.cache_s = o.cache_s > 0 ? o.cache_s : 30;
    h->o.cache_max = o.cache_max > 0 ? o.cache_max : 4096;
    h->o.max_lookups = o.max_lookups > 0 ? o.max_lookups : 64;
    h->o.timeout_ms = o.timeout_ms > 0 ? o.timeout_ms : 5000;
    h->api_url = strndup(o.api_url, n);
    h->service_name = strdup(name);
    h->access_scope = strdup(o.access_scope ? o.access_scope : scope);
    h->admin_group = s_dup(o.admin_group);
    h->api_token = s_dup(o.api_token);
    h->client_id = strdup(o.client_id ? o.client_id : client);
    h->callback_url = s_dup(o.callback_url);
    h->login_url = strdup(o.login_url ? o.login_url : login);
    h->cache = calloc((size_t)h->o.cache_max, sizeof *h->cache);
    h->http = srv_hubhttp_new(loop, h->o.timeout_ms, HUB_REPLY_MAX);
    if (!h->api_url || !h->service_name || !h->access_scope || (o.admin_group && !h->admin_group) ||
        (o.api_token && !h->api_token) || !h->client_id || (o.callback_url && !h->callback_url) || !h->login_url ||
        !h->cache || !h->http) {
        s_destroy(h);
        korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        return NULL;
    }
    h->o.api_url = h->api_url;
    h->o.service_name = h->service_name;
    h->o.access_scope = h->access_scope;
    h->o.admin_group = h->admin_group;
    h->o.api_token = h->api_token;
    h->o.client_id = h->client_id;
    h->o.callback_url = h->callback_url;
    h->o.login_url = h->login_url;
    korch_info("JupyterHub: users are asked of %s (cached %d s, access scope '%s'%s%s)", h->user_url, h->o.cache_s,
               h->access_scope, h->admin_group ? ", admins: group " : "", h->admin_group ? h->admin_group : "");
    return h;
}

const srv_hub_opts_t *srv_hub_opts(const srv_hub_t *h) { return &h->o; }
struct srv_hubhttp *srv_hub_http(srv_hub_t *h) { return h->http; }

/* ------------------------------------------------------------- the cache */

static void s_key(const char *token, unsigned char key[SHA256_DIGEST_LENGTH])
{
    SHA256((const unsigned char *)token, strlen(token), key);
}

static s_entry_t *s_find(srv_hub_t *h, const unsigned char *key, int64_t now)
{
    for (int i = 0; i < h->o.cache_max; i++) {
        s_entry_t *e = &h->cache[i];
        if (e->used && CRYPTO_memcmp(e->key, key, SHA256_DIGEST_LENGTH) == 0) {
            if (e->expires_ms > now)
                return e;
            e->used = false; /* expired: asked again */
            h->ncache--;
            return NULL;
        }
    }
    return NULL;
}

/* A slot for key: its own, a free one, an expired one, else the oldest. */
static s_entry_t *s_slot(srv_hub_t *h, const unsigned char *key, int64_t now)
{
    s_entry_t *free_e = NULL, *oldest = NULL;
    for (int i = 0; i < h->o.cache_max; i++) {
        s_entry_t *e = &h->cache[i];
        if (e->used && CRYPTO_memcmp(e->key, key, SHA256_DIGEST_LENGTH) == 0)
            return e;
        if (!e->used || e->expires_ms <= now) {
            if (!free_e)
                free_e = e;
        } else if (!oldest || e->born_ms < oldest->born_ms)
            oldest = e;
    }
    s_entry_t *e = free_e ? free_e : oldest;
    if (!e->used)
        h->ncache++;
    memset(e, 0, sizeof *e);
    e->used = true;
    memcpy(e->key, key, SHA256_DIGEST_LENGTH);
    e->born_ms = now;
    return e;
}

static s_entry_t *s_put(srv_hub_t *h, const unsigned char *key, srv_who_t verdict, int status, int keep_s,
                        const srv_user_t *u, const char *why)
{
    int64_t now = korch_now_ms();
    s_entry_t *e = s_slot(h, key, now);
    e->verdict = verdict;
    e->status = status;
    e->expires_ms = now + 1000LL * keep_s;
    if (u)
        e->user = *u;
    snprintf(e->why, sizeof e->why, "%.319s", why ? why : "");
    return e;
}

int srv_hub_cache_count(const srv_hub_t *h) { return h->ncache; }

void srv_hub_cache_put_test(srv_hub_t *h, const char *token, const char *name, int64_t now_ms)
{
    unsigned char key[SHA256_DIGEST_LENGTH];
    s_key(token, key);
    s_entry_t *e = s_slot(h, key, now_ms);
    e->verdict = SRV_WHO_OK;
    e->expires_ms = now_ms + 1000LL * h->o.cache_s;
    snprintf(e->user.name, sizeof e->user.name, "%s", name);
    e->user.role = SRV_ROLE_USER;
}

bool srv_hub_cache_get_test(srv_hub_t *h, const char *token, char *name, size_t len, int64_t now_ms)
{
    unsigned char key[SHA256_DIGEST_LENGTH];
    s_key(token, key);
    s_entry_t *e = s_find(h, key, now_ms);
    if (e)
        snprintf(name, len, "%s", e->user.name);
    return e != NULL;
}

/* ------------------------------------------------------ the Hub's answer */

static bool s_has(json_t *list, const char *what)
{
    size_t i;
    json_t *v;
    json_array_foreach(list, i, v) if (json_is_string(v) && strcmp(json_string_value(v), what) == 0) return true;
    return false;
}

/* The Hub's answer to GET /user as a verdict in e (kept in the cache). */
static s_entry_t *s_judge(srv_hub_t *h, const unsigned char *key, const srv_hubreply_t *r, const korch_err_t *err)
{
    char why[320];
    if (!r) {
        snprintf(why, sizeof why, "cannot identify you through JupyterHub: %.270s", err ? err->msg : "no answer");
        korch_warn("JupyterHub: %s", why);
        return s_put(h, key, SRV_WHO_DENIED, 503, HUB_DOWN_S, NULL, why);
    }
    if (r->status == 401 || r->status == 403 || r->status == 404)
        return s_put(h, key, SRV_WHO_DENIED, 403, HUB_DENIED_S, NULL,
                     "JupyterHub does not know this token (wrong, expired or revoked): use your single-user "
                     "server's JUPYTERHUB_API_TOKEN or a new token from the Hub's token page");
    if (r->status != 200) {
        snprintf(why, sizeof why, "cannot identify you through JupyterHub: %.200s answered HTTP %ld", h->user_url,
                 r->status);
        korch_warn("JupyterHub: %s", why);
        return s_put(h, key, SRV_WHO_DENIED, 503, HUB_DOWN_S, NULL, why);
    }
    json_t *m = json_loadb(r->body, r->len, 0, NULL);
    const char *kind = json_string_value(json_object_get(m, "kind"));
    const char *name = json_string_value(json_object_get(m, "name"));
    s_entry_t *e;
    if (!json_is_object(m) || !name) {
        snprintf(why, sizeof why, "cannot identify you through JupyterHub: %.200s answered no user model",
                 h->user_url);
        e = s_put(h, key, SRV_WHO_DENIED, 503, HUB_DOWN_S, NULL, why);
    } else if (kind && strcmp(kind, "user") != 0) {
        snprintf(why, sizeof why, "this is the token of JupyterHub's %s '%.64s', not of a user: korch serves Hub users",
                 kind, name);
        e = s_put(h, key, SRV_WHO_DENIED, 403, HUB_DENIED_S, NULL, why);
    } else if (*h->access_scope && !s_has(json_object_get(m, "scopes"), "access:services") &&
               !s_has(json_object_get(m, "scopes"), h->access_scope)) {
        snprintf(why, sizeof why,
                 "JupyterHub user '%.64s' may not use korch: the token lacks the scope '%s' (the Hub's admin "
                 "grants it in load_roles, docs/team.md)",
                 name, h->access_scope);
        e = s_put(h, key, SRV_WHO_DENIED, 403, HUB_DENIED_S, NULL, why);
    } else if (!srv_user_name_ok(name)) {
        snprintf(why, sizeof why,
                 "JupyterHub user '%.64s' has a name korch cannot take (1-63 of A-Z a-z 0-9 . _ @ -)", name);
        e = s_put(h, key, SRV_WHO_DENIED, 403, HUB_DENIED_S, NULL, why);
    } else {
        srv_user_t u = {.role = SRV_ROLE_USER};
        snprintf(u.name, sizeof u.name, "%s", name);
        if (h->admin_group && s_has(json_object_get(m, "groups"), h->admin_group))
            u.role = SRV_ROLE_ADMIN;
        e = s_put(h, key, SRV_WHO_OK, 200, h->o.cache_s, &u, NULL);
        korch_info("JupyterHub: user '%s' (%s)", u.name, srv_role_name(u.role));
    }
    json_decref(m);
    return e;
}

static void s_lookup_unlink(srv_hub_t *h, s_lookup_t *l)
{
    if (l->prev)
        l->prev->next = l->next;
    else
        h->lookups = l->next;
    if (l->next)
        l->next->prev = l->prev;
    h->nlookups--;
}

static void s_lookup_done(void *arg, const srv_hubreply_t *r, const korch_err_t *err)
{
    s_lookup_t *l = arg;
    srv_hub_t *h = l->hub;
    s_lookup_unlink(h, l);
    s_entry_t *e = s_judge(h, l->key, r, err);
    srv_who_t verdict = e->verdict;
    srv_user_t u = e->user;
    /* each waiter once; a done may ask again (a hit now) or cancel others */
    while (l->waiters) {
        s_waiter_t *w = l->waiters;
        l->waiters = w->next;
        srv_who_done_fn *done = w->done;
        void *warg = w->arg;
        free(w);
        done(warg, verdict, verdict == SRV_WHO_OK ? &u : NULL);
    }
    free(l);
}

/* ------------------------------------------------------------ resolving */

bool srv_hub_token_of(const srv_cred_t *c, char *buf, size_t len)
{
    if (c->token && *c->token) {
        if (strlen(c->token) >= len)
            return false;
        snprintf(buf, len, "%s", c->token);
        return true;
    }
    /* Cookie: a=b; korch-hub-token=T; c=d */
    static const char name[] = SRV_HUB_COOKIE "=";
    for (const char *p = c->cookie; p && *p;) {
        while (*p == ' ' || *p == ';')
            p++;
        size_t n = strcspn(p, ";");
        if (n > sizeof name - 1 && strncmp(p, name, sizeof name - 1) == 0) {
            size_t v = n - (sizeof name - 1);
            if (v == 0 || v >= len)
                return false;
            memcpy(buf, p + sizeof name - 1, v);
            buf[v] = 0;
            return true;
        }
        p += n;
    }
    return false;
}

static srv_who_t s_resolve(void *self, const srv_cred_t *c, srv_user_t *out, srv_who_done_fn *done, void *arg)
{
    srv_hub_t *h = self;
    char token[HUB_TOKEN_MAX];
    if (!srv_hub_token_of(c, token, sizeof token))
        return SRV_WHO_NEXT;
    unsigned char key[SHA256_DIGEST_LENGTH];
    s_key(token, key);
    s_entry_t *e = s_find(h, key, korch_now_ms());
    if (e) {
        OPENSSL_cleanse(token, sizeof token);
        if (e->verdict == SRV_WHO_OK)
            *out = e->user;
        return e->verdict;
    }
    s_lookup_t *l = h->lookups;
    while (l && CRYPTO_memcmp(l->key, key, sizeof key) != 0)
        l = l->next;
    if (!l) {
        if (h->nlookups >= h->o.max_lookups) {
            OPENSSL_cleanse(token, sizeof token);
            char why[160];
            snprintf(why, sizeof why, "too many identity lookups at JupyterHub at once (%d): retry in a moment",
                     h->o.max_lookups);
            s_put(h, key, SRV_WHO_DENIED, 503, HUB_DOWN_S, NULL, why);
            return SRV_WHO_DENIED;
        }
        korch_err_t err = {0};
        if (!(l = calloc(1, sizeof *l))) {
            OPENSSL_cleanse(token, sizeof token);
            return SRV_WHO_NEXT;
        }
        l->hub = h;
        memcpy(l->key, key, sizeof key);
        l->req = srv_hubhttp_start(h->http, h->user_url, token, NULL, s_lookup_done, l, &err);
        OPENSSL_cleanse(token, sizeof token);
        if (!l->req) {
            free(l);
            s_put(h, key, SRV_WHO_DENIED, 503, HUB_DOWN_S, NULL, err.msg);
            return SRV_WHO_DENIED;
        }
        l->next = h->lookups;
        if (h->lookups)
            h->lookups->prev = l;
        h->lookups = l;
        h->nlookups++;
    }
    OPENSSL_cleanse(token, sizeof token);
    if (arg) { /* NULL: nobody waits (a websocket's lookup, answered 503 at once) */
        s_waiter_t *w = calloc(1, sizeof *w);
        if (!w)
            return SRV_WHO_NEXT;
        w->done = done;
        w->arg = arg;
        w->next = l->waiters;
        l->waiters = w;
    }
    return SRV_WHO_PENDING;
}

static void s_cancel(void *self, void *arg)
{
    srv_hub_t *h = self;
    for (s_lookup_t *l = h->lookups; l; l = l->next)
        for (s_waiter_t **pw = &l->waiters; *pw;)
            if ((*pw)->arg == arg) {
                s_waiter_t *w = *pw;
                *pw = w->next;
                free(w);
            } else
                pw = &(*pw)->next;
    /* the lookup goes on: its answer is cached for the next request */
}

static int s_why(void *self, const srv_cred_t *c, char *msg, size_t len)
{
    srv_hub_t *h = self;
    char token[HUB_TOKEN_MAX];
    if (!srv_hub_token_of(c, token, sizeof token))
        return 0;
    unsigned char key[SHA256_DIGEST_LENGTH];
    s_key(token, key);
    OPENSSL_cleanse(token, sizeof token);
    s_entry_t *e = s_find(h, key, korch_now_ms());
    if (!e || e->verdict != SRV_WHO_DENIED)
        return 0;
    snprintf(msg, len, "%s", e->why);
    return e->status;
}

const srv_resolver_ops_t srv_hub_resolver = {"hub", s_resolve, s_cancel, s_destroy, s_why};
