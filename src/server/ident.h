/*  Who is asking: the identity of every request and websocket of korch
 *  serve, and the one ownership check. Not a public API.
 *
 *  A request's user is {name, role} (srv_user_t). It is found by a chain
 *  of resolvers (srv_ident_t) the front door (front.c) asks, in the order
 *  they were added, with what the request presented (srv_cred_t: its
 *  token from "Authorization: token T" / "Bearer T" or ?token=, its
 *  Cookie header, its path). Each resolver answers:
 *
 *    SRV_WHO_NEXT     not mine (no such token here): ask the next one;
 *    SRV_WHO_OK       *out is the user;
 *    SRV_WHO_DENIED   mine and refused (a revoked token, a Hub that said
 *                     no): 403 at once, no other resolver is asked;
 *    SRV_WHO_PENDING  being looked up (the Hub's API): done(arg, rc, user)
 *                     will be called exactly once, later, on the loop
 *                     thread, never from inside resolve, never after
 *                     cancel(self, arg). Blocking calls (HTTP to the Hub)
 *                     never run on the loop: a resolver does them on a
 *                     thread of its own and calls done from the loop.
 *
 *  When every resolver said NEXT the request is unauthenticated (403,
 *  "missing or wrong token"), except on open routes (GET /api, the page's
 *  files), which are served with no user.
 *
 *  PENDING on an HTTP request: the front door holds the request (its body
 *  is not read yet) until done; a request whose client leaves meanwhile is
 *  cancelled. PENDING on a websocket upgrade (which libwebsockets cannot
 *  hold): answered 503 "identity is being looked up, retry"; the lookup
 *  goes on, so a resolver that caches (hub.c) knows the token next time.
 *  Jupyter clients make REST calls (POST /api/kernels) before they open a
 *  kernel's websocket, so its token is known by then.
 *
 *  The built-in resolvers:
 *    - the single token (srv_ident_add_token): korch serve's default, one
 *      person: its token is user SRV_USER_DEFAULT, an admin;
 *    - the users file (users.c, korch serve --users FILE): hashed tokens of
 *      named users, role user or admin; re-read when the file changes.
 *  hub.c adds JupyterHub's (a Hub user's token, asked of GET /hub/api/user).
 *
 *  Ownership: everything a user makes (kernels, agent sessions and their
 *  files and notebooks, event streams, websockets) records its owner's
 *  name; srv_user_may(u, owner) is the only check. Anything of another
 *  user answers 404, never 403, so ids cannot be probed. Admins see and
 *  touch everything. A thing with owner "" (made before users existed, or
 *  by the pool) is an admin's only.
 *
 *  Threading: the loop thread only (a resolver's own threads never touch
 *  the chain).
 */
#ifndef KORCH_SRV_IDENT_H
#define KORCH_SRV_IDENT_H

#include <stdbool.h>
#include <stddef.h>

#include "korch/error.h"

#define SRV_USER_NAME_MAX 64        /* bytes of a name with its NUL */
#define SRV_USER_DEFAULT "default"  /* the single token's user */

typedef enum {
    SRV_ROLE_NONE = 0,              /* no user (an open route, or not resolved) */
    SRV_ROLE_USER,                  /* sees and touches their own things */
    SRV_ROLE_ADMIN,                 /* sees and touches everyone's */
} srv_role_t;

/* A user, by value (copied into requests and websockets). */
typedef struct {
    char name[SRV_USER_NAME_MAX];   /* 1-63 bytes of [A-Za-z0-9._@-] (srv_user_name_ok); "" = none */
    srv_role_t role;
} srv_user_t;

/* What a request presented (borrowed for the call; copy what you keep). */
typedef struct {
    const char *token;              /* the token it gave (header or ?token=), or NULL */
    const char *cookie;             /* its Cookie header, or NULL */
    const char *path;               /* its path ("/api/kernels") */
    bool websocket;                 /* a websocket upgrade */
} srv_cred_t;

typedef enum { SRV_WHO_NEXT, SRV_WHO_OK, SRV_WHO_DENIED, SRV_WHO_PENDING } srv_who_t;

/* A PENDING lookup's answer: rc OK (u: the user, borrowed), DENIED or NEXT
   (unknown: the request is refused as unauthenticated). For a websocket
   upgrade done does nothing and arg is NULL (never cancelled): call it
   all the same. */
typedef void srv_who_done_fn(void *arg, srv_who_t rc, const srv_user_t *u);

/* A resolver: a table of functions and its state (self). */
typedef struct {
    const char *name;               /* "token", "users", "hub": for logs */
    /* Who is c? See the header. done/arg only for PENDING. */
    srv_who_t (*resolve)(void *self, const srv_cred_t *c, srv_user_t *out, srv_who_done_fn *done, void *arg);
    /* The request that waits on arg has gone: never call done(arg) now.
       May be NULL for resolvers that never answer PENDING. */
    void (*cancel)(void *self, void *arg);
    /* Free self (when the server is destroyed). May be NULL. */
    void (*destroy)(void *self);
    /* Why c was refused (it answered DENIED for it, or NEXT at the end of
       a PENDING lookup): the HTTP status to answer (403; 503 when it could
       not tell, e.g. the Hub is down) with a message a user can act on in
       msg. 0: no opinion (the front door says "missing or wrong token").
       May be NULL. */
    int (*why)(void *self, const srv_cred_t *c, char *msg, size_t len);
} srv_resolver_ops_t;

typedef struct srv_ident srv_ident_t;

/* An empty chain (every request unauthenticated). NULL without memory. */
srv_ident_t *srv_ident_new(void);
/* Destroys every resolver added; accepts NULL and nulls *pi. */
void srv_ident_destroy(srv_ident_t **pi);
/* Add a resolver at the end of the chain; the chain owns self from now on
   (ops->destroy(self) on failure too). ops is static. */
korch_rc_t srv_ident_add(srv_ident_t *i, const srv_resolver_ops_t *ops, void *self, korch_err_t *err);
/* The single-token resolver: token (copied, non-empty) is SRV_USER_DEFAULT,
   an admin. Compared in constant time. */
korch_rc_t srv_ident_add_token(srv_ident_t *i, const char *token, korch_err_t *err);
/* No authentication at all (korch serve --token ''): everyone is
   SRV_USER_DEFAULT, an admin. */
korch_rc_t srv_ident_add_open(srv_ident_t *i, korch_err_t *err);
/* Ask the chain (see the header). On PENDING, cancel with srv_ident_cancel
   if the asker goes before done is called. */
srv_who_t srv_ident_resolve(srv_ident_t *i, const srv_cred_t *c, srv_user_t *out, srv_who_done_fn *done, void *arg);
void srv_ident_cancel(srv_ident_t *i, void *arg);
/* A refused c's status and message (the first resolver's `why` that has
   one), else 403 "missing or wrong token". */
int srv_ident_why(srv_ident_t *i, const srv_cred_t *c, char *msg, size_t len);
/* Is any resolver there but the single token / open one (users or Hub)? */
bool srv_ident_multi(const srv_ident_t *i);

/* May u see and touch a thing owned by owner ("" = nobody's)? Admins may
   anything; a user only their own; no user nothing. */
bool srv_user_may(const srv_user_t *u, const char *owner);
/* Is name a valid user name (1-63 bytes of [A-Za-z0-9._@-], not starting
   with '.' or '-')? */
bool srv_user_name_ok(const char *name);
/* "user" / "admin" / "none". */
const char *srv_role_name(srv_role_t r);

#endif
