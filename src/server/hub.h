/*  JupyterHub as a resolver of the identity chain (ident.h): korch serve as
 *  a Hub service, the way JupyterHub's own HubAuth identifies a request.
 *
 *  A request's token (what a single-user server sends as
 *  GatewayClient.auth_token: its JUPYTERHUB_API_TOKEN; a token a user made
 *  on the Hub's token page; the OAuth token in korch's cookie) is asked of
 *  the Hub: GET {api_url}/user with "Authorization: token T". The Hub
 *  answers with the token's owner: {kind: "user", name, groups, scopes}.
 *  The user is let in when the token's scopes grant access to this service
 *  (access:services or access:services!service=NAME, as HubAuth checks);
 *  members of admin_group are korch admins. The answer is cached by the
 *  token's SHA-256 (never the token itself) for cache_s seconds, at most
 *  cache_max tokens (the oldest go first): a revoked token is refused
 *  within cache_s. Lookups run on korch's loop (hub_http.h) and never block
 *  it; one lookup per token however many requests wait on it, and at most
 *  max_lookups at once (more: 503).
 *
 *  Refusals say why (the resolver's `why`): 403 for a token the Hub does not
 *  know (wrong, expired, revoked), one without access to korch, a service's
 *  or a name korch cannot take; 503 when the Hub cannot be reached or
 *  answers an error (the request may be retried; nothing is cached long).
 *
 *  OAuth (hub_oauth.c): korch's page logs in through the Hub. GET
 *  /hub/login sends the browser to the Hub's authorize URL with a state
 *  kept in a cookie; GET /oauth_callback exchanges the code for a token
 *  (POST {api_url}/oauth2/token, with the service's own api_token as the
 *  client secret) and keeps it in an HttpOnly cookie, which the resolver
 *  then reads like any token.
 *
 *  Threading: the loop thread only.
 */
#ifndef KORCH_SRV_HUB_H
#define KORCH_SRV_HUB_H

#include <stdbool.h>
#include <stddef.h>

#include "ident.h"
#include "korch/error.h"
#include "korch/loop.h"
#include "korch/server.h"

#define SRV_HUB_COOKIE "korch-hub-token"        /* the OAuth token, HttpOnly */
#define SRV_HUB_STATE_COOKIE "korch-oauth-state" /* the login's state, for its callback */

typedef struct {
    const char *api_url;        /* the Hub's API: http://127.0.0.1:8081/hub/api ($JUPYTERHUB_API_URL) */
    const char *service_name;   /* this service's name ($JUPYTERHUB_SERVICE_NAME; default "korch") */
    const char *access_scope;   /* required of tokens (default access:services!service=NAME; "" = none) */
    const char *admin_group;    /* members of this Hub group are korch admins (NULL = none) */
    int cache_s;                /* seconds an answer is kept (default 30) */
    int cache_max;              /* tokens kept at most (default 4096) */
    int max_lookups;            /* at the Hub at once (default 64) */
    int timeout_ms;             /* one request to the Hub (default 5000) */
    /* OAuth for the page (all NULL: no login through the Hub) */
    const char *api_token;      /* this service's token, the OAuth client secret ($JUPYTERHUB_API_TOKEN) */
    const char *client_id;      /* ($JUPYTERHUB_CLIENT_ID; default service-NAME) */
    const char *callback_url;   /* the redirect_uri registered with the Hub ($JUPYTERHUB_OAUTH_CALLBACK_URL) */
    const char *login_url;      /* the Hub's authorize URL as the browser reaches it (default
                                   $JUPYTERHUB_HOST + $JUPYTERHUB_BASE_URL + "hub/api/oauth2/authorize") */
} srv_hub_opts_t;

typedef struct srv_hub srv_hub_t;

/* Fill o from JupyterHub's environment (what the Hub gives a managed
   service): fields already set are kept. Borrowed from the environment. */
void srv_hub_opts_from_env(srv_hub_opts_t *o);

/* A resolver on loop (borrowed). NULL + err without api_url or memory. */
srv_hub_t *srv_hub_new(korch_loop_t *loop, const srv_hub_opts_t *o, korch_err_t *err);
/* Its ops: srv_ident_add(chain, &srv_hub_resolver, hub): the chain owns hub
   (destroyed with it); keep a borrowed pointer for the OAuth routes. */
extern const srv_resolver_ops_t srv_hub_resolver;

/* The token a request presented: its token, else the OAuth cookie's; into
   buf. False when neither. */
bool srv_hub_token_of(const srv_cred_t *c, char *buf, size_t len);

/* For hub_oauth.c: the options (borrowed), the HTTP client. */
const srv_hub_opts_t *srv_hub_opts(const srv_hub_t *h);
struct srv_hubhttp *srv_hub_http(srv_hub_t *h);

/* hub_oauth.c: the page's redirect to the Hub's login: true (and req
   answered 302 to /hub/login) when req is the page, the Hub's OAuth is on
   and req has no user. The routes (GET /hub/login, /oauth_callback) are
   routes.h's srv_hub_login / srv_hub_callback. */
typedef struct srv_req srv_req_t;
bool srv_hub_page_login(korch_server_t *s, srv_req_t *req);

/* Unit tests: the cache on its own. srv_hub_cache_test_* drive a hub made
   with srv_hub_new (no lookup is started by them). */
int srv_hub_cache_count(const srv_hub_t *h);
void srv_hub_cache_put_test(srv_hub_t *h, const char *token, const char *name, int64_t now_ms);
bool srv_hub_cache_get_test(srv_hub_t *h, const char *token, char *name, size_t len, int64_t now_ms);

#endif
