/*  The users file as korch serve reads it (--users FILE): a resolver of
 *  the identity chain (ident.h) and the quotas it holds (quota.c reads
 *  them). The file itself and its editing: korch/users.h. Not a public API.
 *
 *  The file is re-read when it changes (stat()ed at most once a second, on
 *  the loop: a small local file): `korch user add` / `revoke` take effect
 *  within a second, no restart. A file that no longer parses keeps the last
 *  good one (a warning in the log).
 *
 *  Threading: the loop thread only.
 */
#ifndef KORCH_SRV_USERS_H
#define KORCH_SRV_USERS_H

#include "ident.h"
#include "korch/users.h"

typedef struct srv_users srv_users_t;

/* Read path (it must exist). NULL + err. */
srv_users_t *srv_users_new(const char *path, korch_err_t *err);
void srv_users_destroy(srv_users_t **pr);
/* The users as of now (re-read if the file changed). Borrowed until the
   next call. */
const korch_users_t *srv_users_current(srv_users_t *r);

/* Its resolver ops: srv_ident_add(chain, &srv_users_resolver, r) (the
   chain owns r then; keep a borrowed pointer for quotas). */
extern const srv_resolver_ops_t srv_users_resolver;

#endif
