/*  The users file of `korch serve --users FILE`: named users, their role
 *  (user or admin), their tokens kept hashed, their quotas. `korch user
 *  add/list/revoke` edit it; korch serve re-reads it when it changes
 *  (src/server/users.c), so minting or revoking needs no restart.
 *
 *  The file is JSON, mode 0600, written whole to a temporary file and
 *  renamed over the old one (a reader never sees half a file); editors
 *  hold an flock on FILE.lock so two `korch user` never lose each other's
 *  change:
 *
 *    {"version": 1,
 *     "quota": {"kernels": 4, ...},                  defaults for every user (optional)
 *     "users": [{"name": "alice", "role": "user",
 *                "quota": {"sessions": 2},           over the defaults (optional)
 *                "tokens": [{"id": "3f9a0c1e", "sha256": "<hex>", "created": "<ISO 8601>"}]}]}
 *
 *  A token is "korch_" + 48 hex digits (24 random bytes); only its SHA-256
 *  is stored (a token has 192 bits of entropy, so a fast hash is enough:
 *  there is nothing to guess from it). It is shown once, when minted.
 *  The quota keys are quota.h's (kernels, sessions, memory_mb, cpus,
 *  tokens_per_day, cost_per_day).
 *
 *  Threading: an object is used by one thread at a time.
 */
#ifndef KORCH_USERS_H
#define KORCH_USERS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "korch/error.h"

typedef struct korch_users korch_users_t;

#define KORCH_TOKEN_MAX 64          /* bytes of a minted token with its NUL */
#define KORCH_TOKEN_ID_MAX 16       /* bytes of a token's id with its NUL */

/* Read path. edit: lock FILE.lock first (held until destroy) and start
   empty when the file does not exist (else a missing file is an error).
   NULL + err on a malformed file (its line and column) or a bad entry. */
korch_users_t *korch_users_load(const char *path, bool edit, korch_err_t *err);
void korch_users_destroy(korch_users_t **pu);

/* Write it back (edit mode only): 0600, atomically. */
korch_rc_t korch_users_save(korch_users_t *u, korch_err_t *err);

/* Add user name with role ("user" or "admin"), or change an existing
   one's role (role NULL: keep it; a new user is "user"). */
korch_rc_t korch_users_add(korch_users_t *u, const char *name, const char *role, korch_err_t *err);
/* Set one quota key of user name ("" = the defaults) to v (a number;
   NULL deletes the key). */
korch_rc_t korch_users_set_quota(korch_users_t *u, const char *name, const char *key, json_t *v, korch_err_t *err);
/* Mint a token for user name: token (KORCH_TOKEN_MAX) and its id
   (KORCH_TOKEN_ID_MAX) are written; only the hash is kept. */
korch_rc_t korch_users_mint(korch_users_t *u, const char *name, char *token, char *id, korch_err_t *err);
/* Revoke user name's token id, or all of them (id NULL). *n: how many. */
korch_rc_t korch_users_revoke(korch_users_t *u, const char *name, const char *id, int *n, korch_err_t *err);
/* Delete user name and their tokens. */
korch_rc_t korch_users_delete(korch_users_t *u, const char *name, korch_err_t *err);

/* The user a token is (constant-time compare of hashes), or NULL.
   *role "user" / "admin". Borrowed until the object changes. */
const char *korch_users_lookup(const korch_users_t *u, const char *token, const char **role);
/* The users as [{name, role, quota, tokens: [{id, created}]}] (new; no hashes). */
json_t *korch_users_list(const korch_users_t *u);
/* The quota of user name: the defaults with the user's keys over them (new). */
json_t *korch_users_quota(const korch_users_t *u, const char *name);

/* 1-63 bytes of [A-Za-z0-9._@-], not starting with '.' or '-'. */
bool korch_users_name_ok(const char *name);
/* Is key a quota's name (kernels, sessions, memory_mb, cpus, tokens_per_day, cost_per_day)? */
bool korch_users_quota_key(const char *key);

#endif
