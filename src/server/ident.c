/*  The identity chain (ident.h): resolvers asked in order, the single
 *  token's and the open one, and the ownership check.
 */
#include "ident.h"
#include "korch/users.h"

#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IDENT_MAX 8                 /* resolvers in one chain */

typedef struct {
    const srv_resolver_ops_t *ops;
    void *self;
} s_link_t;

struct srv_ident {
    s_link_t link[IDENT_MAX];
    int n;
    bool multi;                     /* a resolver other than the token's / the open one */
};

srv_ident_t *srv_ident_new(void) { return calloc(1, sizeof(srv_ident_t)); }

void srv_ident_destroy(srv_ident_t **pi)
{
    srv_ident_t *i = pi ? *pi : NULL;
    if (!i)
        return;
    for (int k = 0; k < i->n; k++)
        if (i->link[k].ops->destroy)
            i->link[k].ops->destroy(i->link[k].self);
    free(i);
    *pi = NULL;
}

korch_rc_t srv_ident_add(srv_ident_t *i, const srv_resolver_ops_t *ops, void *self, korch_err_t *err)
{
    if (i->n == IDENT_MAX) {
        if (ops->destroy)
            ops->destroy(self);
        return korch_err_set(err, KORCH_E_INVALID, "more than %d identity resolvers", IDENT_MAX);
    }
    i->link[i->n++] = (s_link_t){ops, self};
    if (strcmp(ops->name, "token") && strcmp(ops->name, "open"))
        i->multi = true;
    return KORCH_OK;
}

/* ------------------------------------------------ the single token, open */

typedef struct {
    char token[256];
    size_t len;
} s_token_t;

static srv_who_t s_token_resolve(void *self, const srv_cred_t *c, srv_user_t *out, srv_who_done_fn *done, void *arg)
{
    s_token_t *t = self;
    if (!c->token || strlen(c->token) != t->len || CRYPTO_memcmp(c->token, t->token, t->len) != 0)
        return SRV_WHO_NEXT;
    snprintf(out->name, sizeof out->name, "%s", SRV_USER_DEFAULT);
    out->role = SRV_ROLE_ADMIN;
    return SRV_WHO_OK;
}

static const srv_resolver_ops_t s_token_ops = {"token", s_token_resolve, NULL, free, NULL};

korch_rc_t srv_ident_add_token(srv_ident_t *i, const char *token, korch_err_t *err)
{
    size_t n = token ? strlen(token) : 0;
    if (n == 0 || n >= sizeof ((s_token_t *)0)->token)
        return korch_err_set(err, KORCH_E_INVALID, "the token must be 1 to 255 bytes");
    s_token_t *t = calloc(1, sizeof *t);
    if (!t)
        return korch_err_set(err, KORCH_E_NOMEM, "out of memory");
    memcpy(t->token, token, n);
    t->len = n;
    return srv_ident_add(i, &s_token_ops, t, err);
}

static srv_who_t s_open_resolve(void *self, const srv_cred_t *c, srv_user_t *out, srv_who_done_fn *done, void *arg)
{
    snprintf(out->name, sizeof out->name, "%s", SRV_USER_DEFAULT);
    out->role = SRV_ROLE_ADMIN;
    return SRV_WHO_OK;
}

static const srv_resolver_ops_t s_open_ops = {"open", s_open_resolve, NULL, NULL, NULL};

korch_rc_t srv_ident_add_open(srv_ident_t *i, korch_err_t *err) { return srv_ident_add(i, &s_open_ops, NULL, err); }

/* ---------------------------------------------------------------- asking */

srv_who_t srv_ident_resolve(srv_ident_t *i, const srv_cred_t *c, srv_user_t *out, srv_who_done_fn *done, void *arg)
{
    *out = (srv_user_t){.role = SRV_ROLE_NONE};
    for (int k = 0; k < i->n; k++) {
        srv_who_t rc = i->link[k].ops->resolve(i->link[k].self, c, out, done, arg);
        if (rc == SRV_WHO_OK && (!srv_user_name_ok(out->name) || out->role == SRV_ROLE_NONE)) {
            *out = (srv_user_t){.role = SRV_ROLE_NONE}; /* a resolver's bug must not make a nameless user */
            return SRV_WHO_DENIED;
        }
        if (rc != SRV_WHO_NEXT)
            return rc;
    }
    *out = (srv_user_t){.role = SRV_ROLE_NONE};
    return SRV_WHO_NEXT;
}

void srv_ident_cancel(srv_ident_t *i, void *arg)
{
    for (int k = 0; k < i->n; k++)
        if (i->link[k].ops->cancel)
            i->link[k].ops->cancel(i->link[k].self, arg);
}

int srv_ident_why(srv_ident_t *i, const srv_cred_t *c, char *msg, size_t len)
{
    for (int k = 0; i && k < i->n; k++) {
        int st = i->link[k].ops->why ? i->link[k].ops->why(i->link[k].self, c, msg, len) : 0;
        if (st)
            return st;
    }
    snprintf(msg, len, "missing or wrong token");
    return 403;
}

bool srv_ident_multi(const srv_ident_t *i) { return i && i->multi; }

/* ------------------------------------------------------------- ownership */

bool srv_user_may(const srv_user_t *u, const char *owner)
{
    if (!u || u->role == SRV_ROLE_NONE)
        return false;
    if (u->role == SRV_ROLE_ADMIN)
        return true;
    return owner && *owner && strcmp(owner, u->name) == 0;
}

bool srv_user_name_ok(const char *name) { return korch_users_name_ok(name); }

const char *srv_role_name(srv_role_t r)
{
    return r == SRV_ROLE_ADMIN ? "admin" : r == SRV_ROLE_USER ? "user" : "none";
}
