/*  The users file (korch/users.h) and its resolver for korch serve
 *  (users.h): tokens hashed with SHA-256, looked up in constant time per
 *  entry, the file re-read when it changes (checked at most once a second,
 *  by its inode, size and mtime; a file that no longer parses keeps the
 *  last good one and says so in the log).
 */
#include "users.h"
#include "korch/fsutil.h"
#include "korch/log.h"
#include "korch/users.h"
#include "korch/uuid.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define USERS_FILE_MAX (16u << 20)  /* a users file this big is a mistake */
#define TOKEN_PREFIX "korch_"

typedef struct {
    unsigned char hash[32];
    size_t user;                    /* index into users */
} s_entry_t;

struct korch_users {
    char *path;
    json_t *root;                   /* {"version", "quota", "users": [...]} */
    s_entry_t *tokens;              /* index of every token's hash */
    size_t ntokens;
    int lock_fd;                    /* edit mode: FILE.lock, flocked; -1 else */
};

static const char *const s_quota_keys[] = {"kernels", "sessions", "memory_mb", "cpus", "tokens_per_day",
                                           "cost_per_day", NULL};

bool korch_users_quota_key(const char *key)
{
    for (int i = 0; key && s_quota_keys[i]; i++)
        if (strcmp(key, s_quota_keys[i]) == 0)
            return true;
    return false;
}

bool korch_users_name_ok(const char *name)
{
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n >= 64 || name[0] == '.' || name[0] == '-')
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
              c == '@' || c == '-'))
            return false;
    }
    return true;
}

static void s_sha256(const char *s, unsigned char out[32])
{
    unsigned int n = 32;
    EVP_Digest(s, strlen(s), out, &n, EVP_sha256(), NULL);
}

static bool s_unhex(const char *hex, unsigned char out[32])
{
    if (!hex || strlen(hex) != 64)
        return false;
    for (int i = 0; i < 32; i++) {
        unsigned v;
        if (sscanf(hex + 2 * i, "%2x", &v) != 1)
            return false;
        out[i] = (unsigned char)v;
    }
    return true;
}

static bool s_quota_ok(json_t *q, const char *who, korch_err_t *err)
{
    if (!q)
        return true;
    if (!json_is_object(q)) {
        korch_err_set(err, KORCH_E_INVALID, "the quota of %s is not an object", who);
        return false;
    }
    const char *k;
    json_t *v;
    json_object_foreach(q, k, v) {
        bool known = false;
        for (int i = 0; s_quota_keys[i]; i++)
            known |= strcmp(k, s_quota_keys[i]) == 0;
        if (!known || !json_is_number(v) || json_number_value(v) < 0) {
            korch_err_set(err, KORCH_E_INVALID,
                          "quota '%s' of %s is not one of kernels, sessions, memory_mb, cpus, tokens_per_day, "
                          "cost_per_day with a number >= 0",
                          k, who);
            return false;
        }
    }
    return true;
}

/* Check root and build the token index. */
static korch_rc_t s_index(korch_users_t *u, korch_err_t *err)
{
    free(u->tokens);
    u->tokens = NULL;
    u->ntokens = 0;
    json_t *users = json_object_get(u->root, "users");
    if (!json_is_array(users))
        return korch_err_set(err, KORCH_E_INVALID, "'%s' has no \"users\" array", u->path);
    if (!s_quota_ok(json_object_get(u->root, "quota"), "the defaults", err))
        return err->rc;
    size_t cap = 0, i;
    json_t *usr;
    json_array_foreach(users, i, usr) {
        const char *name = json_string_value(json_object_get(usr, "name"));
        const char *role = json_string_value(json_object_get(usr, "role"));
        if (!korch_users_name_ok(name))
            return korch_err_set(err, KORCH_E_INVALID, "user %zu of '%s' has no valid name", i + 1, u->path);
        if (!role || (strcmp(role, "user") && strcmp(role, "admin")))
            return korch_err_set(err, KORCH_E_INVALID, "user '%s' has role '%s' (user or admin)", name,
                                 role ? role : "(none)");
        if (!s_quota_ok(json_object_get(usr, "quota"), name, err))
            return err->rc;
        for (size_t j = 0; j < i; j++)
            if (strcmp(json_string_value(json_object_get(json_array_get(users, j), "name")), name) == 0)
                return korch_err_set(err, KORCH_E_INVALID, "user '%s' is in '%s' twice", name, u->path);
        json_t *toks = json_object_get(usr, "tokens"), *t;
        size_t k;
        json_array_foreach(toks, k, t) {
            if (u->ntokens == cap) {
                cap = cap ? cap * 2 : 16;
                s_entry_t *n = realloc(u->tokens, cap * sizeof *n);
                if (!n)
                    return korch_err_set(err, KORCH_E_NOMEM, "out of memory");
                u->tokens = n;
            }
            if (!s_unhex(json_string_value(json_object_get(t, "sha256")), u->tokens[u->ntokens].hash))
                return korch_err_set(err, KORCH_E_INVALID, "a token of user '%s' has no valid sha256", name);
            u->tokens[u->ntokens++].user = i;
        }
    }
    return KORCH_OK;
}

korch_users_t *korch_users_load(const char *path, bool edit, korch_err_t *err)
{
    korch_users_t *u = calloc(1, sizeof *u);
    if (!u || !(u->path = strdup(path))) {
        free(u);
        korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        return NULL;
    }
    u->lock_fd = -1;
    if (edit) {
        char lock[4096];
        snprintf(lock, sizeof lock, "%s.lock", path);
        u->lock_fd = open(lock, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (u->lock_fd < 0 || flock(u->lock_fd, LOCK_EX) != 0) {
            korch_err_set(err, KORCH_E_IO, "cannot lock '%s': %s", lock, strerror(errno));
            goto fail;
        }
    }
    korch_err_t e = {0};
    size_t len;
    char *text = korch_fs_read(path, USERS_FILE_MAX, false, &len, &e);
    if (!text && e.rc == KORCH_E_NOTFOUND && edit)
        u->root = json_pack("{s:i, s:[]}", "version", 1, "users");
    else if (!text) {
        korch_err_set(err, e.rc, "cannot read the users file: %s", e.msg);
        goto fail;
    } else {
        json_error_t je;
        u->root = json_loadb(text, len, 0, &je);
        free(text);
        if (!u->root || !json_is_object(u->root)) {
            korch_err_set(err, KORCH_E_INVALID, "'%s' is not a users file (JSON object) at line %d column %d: %s", path,
                          je.line, je.column, u->root ? "not an object" : je.text);
            goto fail;
        }
    }
    if (!u->root || s_index(u, err) != KORCH_OK)
        goto fail;
    return u;
fail:
    korch_users_destroy(&u);
    return NULL;
}

void korch_users_destroy(korch_users_t **pu)
{
    korch_users_t *u = pu ? *pu : NULL;
    if (!u)
        return;
    if (u->lock_fd >= 0)
        close(u->lock_fd); /* releases the flock */
    json_decref(u->root);
    free(u->tokens);
    free(u->path);
    free(u);
    *pu = NULL;
}

korch_rc_t korch_users_save(korch_users_t *u, korch_err_t *err)
{
    if (u->lock_fd < 0)
        return korch_err_set(err, KORCH_E_STATE, "'%s' was not opened for editing", u->path);
    char *text = json_dumps(u->root, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
    if (!text)
        return korch_err_set(err, KORCH_E_NOMEM, "out of memory");
    size_t n = strlen(text);
    text[n] = 0;
    korch_fs_opts_t o = {.mode = 0600};
    char *withnl = malloc(n + 2);
    korch_rc_t rc = KORCH_E_NOMEM;
    if (withnl) {
        memcpy(withnl, text, n);
        withnl[n] = '\n';
        rc = korch_fs_write(u->path, withnl, n + 1, &o, err);
    } else
        korch_err_set(err, rc, "out of memory");
    free(withnl);
    free(text);
    return rc;
}

static json_t *s_user(const korch_users_t *u, const char *name, size_t *idx)
{
    json_t *users = json_object_get(u->root, "users"), *usr;
    size_t i;
    json_array_foreach(users, i, usr) {
        if (strcmp(json_string_value(json_object_get(usr, "name")), name) == 0) {
            if (idx)
                *idx = i;
            return usr;
        }
    }
    return NULL;
}

korch_rc_t korch_users_add(korch_users_t *u, const char *name, const char *role, korch_err_t *err)
{
    if (!korch_users_name_ok(name))
        return korch_err_set(err, KORCH_E_INVALID,
                             "'%s' is not a user name (1-63 of letters, digits and . _ @ -, not starting with . or -)",
                             name);
    if (role && strcmp(role, "user") && strcmp(role, "admin"))
        return korch_err_set(err, KORCH_E_INVALID, "role '%s' is neither user nor admin", role);
    json_t *usr = s_user(u, name, NULL);
    if (!usr) {
        usr = json_pack("{s:s, s:s, s:[]}", "name", name, "role", role ? role : "user", "tokens");
        if (!usr || json_array_append_new(json_object_get(u->root, "users"), usr))
            return korch_err_set(err, KORCH_E_NOMEM, "out of memory");
    } else if (role)
        json_object_set_new(usr, "role", json_string(role));
    return s_index(u, err);
}

korch_rc_t korch_users_set_quota(korch_users_t *u, const char *name, const char *key, json_t *v, korch_err_t *err)
{
    json_t *holder = *name ? s_user(u, name, NULL) : u->root;
    if (!holder) {
        json_decref(v);
        return korch_err_set(err, KORCH_E_NOTFOUND, "no user '%s'", name);
    }
    json_t *q = json_object_get(holder, "quota");
    if (!q) {
        q = json_object();
        json_object_set_new(holder, "quota", q);
    }
    if (v)
        json_object_set_new(q, key, v);
    else
        json_object_del(q, key);
    return s_index(u, err);
}

korch_rc_t korch_users_mint(korch_users_t *u, const char *name, char *token, char *id, korch_err_t *err)
{
    json_t *usr = s_user(u, name, NULL);
    if (!usr)
        return korch_err_set(err, KORCH_E_NOTFOUND, "no user '%s' (korch user add %s)", name, name);
    unsigned char raw[28];
    if (RAND_bytes(raw, sizeof raw) != 1)
        return korch_err_set(err, KORCH_E_IO, "cannot make a token (openssl RAND_bytes failed)");
    size_t o = (size_t)snprintf(token, KORCH_TOKEN_MAX, TOKEN_PREFIX);
    for (int i = 0; i < 24; i++)
        o += (size_t)snprintf(token + o, KORCH_TOKEN_MAX - o, "%02x", raw[i]);
    for (int i = 0; i < 4; i++)
        snprintf(id + 2 * i, KORCH_TOKEN_ID_MAX - 2 * (size_t)i, "%02x", raw[24 + i]);
    unsigned char h[32];
    char hex[65], now[32];
    s_sha256(token, h);
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", h[i]);
    korch_iso8601_now(now);
    json_t *t = json_pack("{s:s, s:s, s:s}", "id", id, "sha256", hex, "created", now);
    json_t *toks = json_object_get(usr, "tokens");
    if (!toks) {
        toks = json_array();
        json_object_set_new(usr, "tokens", toks);
    }
    if (!t || json_array_append_new(toks, t))
        return korch_err_set(err, KORCH_E_NOMEM, "out of memory");
    return s_index(u, err);
}

korch_rc_t korch_users_revoke(korch_users_t *u, const char *name, const char *id, int *n, korch_err_t *err)
{
    *n = 0;
    json_t *usr = s_user(u, name, NULL);
    if (!usr)
        return korch_err_set(err, KORCH_E_NOTFOUND, "no user '%s'", name);
    json_t *toks = json_object_get(usr, "tokens");
    for (size_t i = json_array_size(toks); i-- > 0;) {
        const char *tid = json_string_value(json_object_get(json_array_get(toks, i), "id"));
        if (!id || (tid && strcmp(tid, id) == 0)) {
            json_array_remove(toks, i);
            (*n)++;
        }
    }
    if (id && !*n)
        return korch_err_set(err, KORCH_E_NOTFOUND, "user '%s' has no token '%s' (korch user list)", name, id);
    return s_index(u, err);
}

korch_rc_t korch_users_delete(korch_users_t *u, const char *name, korch_err_t *err)
{
    size_t i;
    if (!s_user(u, name, &i))
        return korch_err_set(err, KORCH_E_NOTFOUND, "no user '%s'", name);
    json_array_remove(json_object_get(u->root, "users"), i);
    return s_index(u, err);
}

const char *korch_users_lookup(const korch_users_t *u, const char *token, const char **role)
{
    if (!token || strncmp(token, TOKEN_PREFIX, strlen(TOKEN_PREFIX)) != 0)
        return NULL;
    unsigned char h[32];
    s_sha256(token, h);
    const s_entry_t *hit = NULL;
    for (size_t i = 0; i < u->ntokens; i++) /* every entry compared: the time says nothing of which matched */
        if (CRYPTO_memcmp(h, u->tokens[i].hash, 32) == 0)
            hit = &u->tokens[i];
    if (!hit)
        return NULL;
    json_t *usr = json_array_get(json_object_get(u->root, "users"), hit->user);
    if (role)
        *role = json_string_value(json_object_get(usr, "role"));
    return json_string_value(json_object_get(usr, "name"));
}

json_t *korch_users_list(const korch_users_t *u)
{
    json_t *out = json_array(), *usr;
    size_t i;
    json_array_foreach(json_object_get(u->root, "users"), i, usr) {
        json_t *toks = json_array(), *t;
        size_t k;
        json_array_foreach(json_object_get(usr, "tokens"), k, t)
            json_array_append_new(toks, json_pack("{s:O, s:O}", "id", json_object_get(t, "id"), "created",
                                                  json_object_get(t, "created")));
        json_array_append_new(out, json_pack("{s:O, s:O, s:o, s:o}", "name", json_object_get(usr, "name"), "role",
                                             json_object_get(usr, "role"), "quota",
                                             korch_users_quota(u, json_string_value(json_object_get(usr, "name"))),
                                             "tokens", toks));
    }
    return out;
}

json_t *korch_users_quota(const korch_users_t *u, const char *name)
{
    json_t *q = json_object();
    json_t *d = json_object_get(u->root, "quota");
    if (json_is_object(d))
        json_object_update(q, d);
    json_t *usr = name ? s_user(u, name, NULL) : NULL;
    json_t *own = usr ? json_object_get(usr, "quota") : NULL;
    if (json_is_object(own))
        json_object_update(q, own);
    return q;
}

/* ----------------------------------------------------------- the resolver */

struct srv_users {
    korch_users_t *u;
    char *path;
    struct stat st;                 /* of the file last read */
    time_t checked;                 /* when it was last stat()ed */
};

static bool s_changed(const struct stat *a, const struct stat *b)
{
    return a->st_ino != b->st_ino || a->st_dev != b->st_dev || a->st_size != b->st_size ||
           a->st_mtim.tv_sec != b->st_mtim.tv_sec || a->st_mtim.tv_nsec != b->st_mtim.tv_nsec;
}

srv_users_t *srv_users_new(const char *path, korch_err_t *err)
{
    srv_users_t *r = calloc(1, sizeof *r);
    if (!r || !(r->path = strdup(path))) {
        free(r);
        korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        return NULL;
    }
    if (stat(path, &r->st) != 0 || !(r->u = korch_users_load(path, false, err))) {
        korch_err_set(err, KORCH_E_NOTFOUND, "cannot read the users file '%s': %s (make it with korch user add)",
                      path, strerror(errno));
        srv_users_destroy(&r);
        return NULL;
    }
    r->checked = time(NULL);
    return r;
}

void srv_users_destroy(srv_users_t **pr)
{
    srv_users_t *r = pr ? *pr : NULL;
    if (!r)
        return;
    korch_users_destroy(&r->u);
    free(r->path);
    free(r);
    *pr = NULL;
}

const korch_users_t *srv_users_current(srv_users_t *r)
{
    time_t now = time(NULL);
    struct stat st;
    if (now == r->checked)
        return r->u;
    r->checked = now;
    if (stat(r->path, &st) != 0 || !s_changed(&st, &r->st))
        return r->u;
    korch_err_t err = {0};
    korch_users_t *n = korch_users_load(r->path, false, &err);
    r->st = st;
    if (!n) {
        korch_warn("keeping the users read before: %s", err.msg);
        return r->u;
    }
    korch_users_destroy(&r->u);
    r->u = n;
    korch_info("users file '%s' re-read", r->path);
    return r->u;
}

static srv_who_t s_resolve(void *self, const srv_cred_t *c, srv_user_t *out, srv_who_done_fn *done, void *arg)
{
    const char *role = NULL;
    const char *name = c->token ? korch_users_lookup(srv_users_current(self), c->token, &role) : NULL;
    if (!name)
        return SRV_WHO_NEXT;
    snprintf(out->name, sizeof out->name, "%s", name);
    out->role = role && strcmp(role, "admin") == 0 ? SRV_ROLE_ADMIN : SRV_ROLE_USER;
    return SRV_WHO_OK;
}

static void s_destroy(void *self)
{
    srv_users_t *r = self;
    srv_users_destroy(&r);
}

/* A refused token that looks like one of korch's (korch_ + 48 hex digits)
   was minted for a users file: this one does not hold it (any more). Other
   tokens are not ours to explain (the Hub's, or a typo: the generic 403). */
static int s_why(void *self, const srv_cred_t *c, char *msg, size_t len)
{
    (void)self; /* the file's path is not told: the asker is not known yet */
    const char *t = c->token;
    if (!t || strncmp(t, "korch_", 6) != 0 || strlen(t) != 6 + 48 || strspn(t + 6, "0123456789abcdef") != 48)
        return 0;
    snprintf(msg, len,
             "this korch token is not in korch serve's users file (revoked, or minted for another server): ask the "
             "operator for a new one (korch user add NAME mints one)");
    return 403;
}

const srv_resolver_ops_t srv_users_resolver = {"users", s_resolve, NULL, s_destroy, s_why};
