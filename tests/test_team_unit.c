/*  Identities without a kernel (src/server/ident.c, users.c, korch user):
 *  the users file minted, looked up, revoked, re-read by a running
 *  resolver; the resolver chain's order and answers; the ownership check;
 *  `korch user` on the command line and through a real `korch serve
 *  --users` (REST: each token is its user, a revoked one is refused within
 *  a second, the single-token mode unchanged).
 */
#define KORCH_TEST_UNIT /* no kernel, docker or browser: make check runs these */
#include "test.h"
#include "serve_fixture.h"
#include "../src/server/ident.h"
#include "../src/server/users.h"
#include "../src/server/audit.h"
#include "korch/fsutil.h"

#include <curl/curl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

TEST(team_users_file_mint_lookup_revoke)
{
    char *dir = korch_test_mkdir("/tmp/korch-team-XXXXXX");
    char path[256];
    snprintf(path, sizeof path, "%s/users.json", dir);
    korch_err_t err = {0};
    korch_users_t *u = korch_users_load(path, true, &err);
    char ta[KORCH_TOKEN_MAX], ia[KORCH_TOKEN_ID_MAX], tb[KORCH_TOKEN_MAX], ib[KORCH_TOKEN_ID_MAX];
    if (!CHECK(u != NULL))
        goto out;
    CHECK(korch_users_add(u, "alice", NULL, &err) == KORCH_OK);
    CHECK(korch_users_add(u, "bob", "admin", &err) == KORCH_OK);
    CHECK(korch_users_add(u, "-bad", NULL, &err) == KORCH_E_INVALID);
    CHECK(korch_users_add(u, "eve", "root", &err) == KORCH_E_INVALID);
    korch_err_clear(&err);
    CHECK(korch_users_mint(u, "alice", ta, ia, &err) == KORCH_OK);
    CHECK(korch_users_mint(u, "bob", tb, ib, &err) == KORCH_OK);
    CHECK(korch_users_mint(u, "nobody", tb, ib, &err) == KORCH_E_NOTFOUND);
    korch_err_clear(&err);
    CHECK_INT_(strlen(ta), ==, 6 + 48);
    CHECK(strncmp(ta, "korch_", 6) == 0);
    CHECK(korch_users_save(u, &err) == KORCH_OK);
    korch_users_destroy(&u);
    /* the file holds hashes, never a token, and is 0600 */
    size_t len;
    char *text = korch_fs_read(path, 1 << 20, true, &len, &err);
    if (!CHECK(text != NULL))
        goto out;
    CHECK(strstr(text, ta) == NULL && strstr(text, ta + 6) == NULL);
    CHECK_CONTAINS(text, "\"sha256\"");
    free(text);
    struct stat st;
    CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600);
    u = korch_users_load(path, false, &err);
    if (!CHECK(u != NULL))
        goto out;
    const char *role = NULL;
    CHECK_STREQ(korch_users_lookup(u, ta, &role), "alice");
    CHECK_STREQ(role, "user");
    CHECK_STREQ(korch_users_lookup(u, tb, &role), "bob");
    CHECK_STREQ(role, "admin");
    char wrong[KORCH_TOKEN_MAX];
    snprintf(wrong, sizeof wrong, "%s", ta);
    wrong[10] = wrong[10] == 'a' ? 'b' : 'a';
    CHECK(korch_users_lookup(u, wrong, NULL) == NULL);
    CHECK(korch_users_lookup(u, "", NULL) == NULL);
    CHECK(korch_users_save(u, &err) == KORCH_E_STATE); /* not opened for editing */
    korch_err_clear(&err);
    korch_users_destroy(&u);
    /* revoke one token */
    u = korch_users_load(path, true, &err);
    int n = 0;
    CHECK(korch_users_revoke(u, "alice", "nope", &n, &err) == KORCH_E_NOTFOUND);
    korch_err_clear(&err);
    CHECK(korch_users_revoke(u, "alice", ia, &n, &err) == KORCH_OK && n == 1);
    CHECK(korch_users_lookup(u, ta, NULL) == NULL);
    CHECK_STREQ(korch_users_lookup(u, tb, NULL), "bob");
    korch_users_destroy(&u);
out:
    korch_users_destroy(&u);
    korch_test_rmdir(dir);
}

TEST(team_users_file_bad_input_is_refused)
{
    char *dir = korch_test_mkdir("/tmp/korch-team-XXXXXX");
    char path[256];
    snprintf(path, sizeof path, "%s/users.json", dir);
    static const char *const bad[] = {
        "[1,2]",
        "{\"users\": 3}",
        "{\"users\": [{\"name\": \"../x\", \"role\": \"user\"}]}",
        "{\"users\": [{\"name\": \"a\", \"role\": \"god\"}]}",
        "{\"users\": [{\"name\": \"a\", \"role\": \"user\"}, {\"name\": \"a\", \"role\": \"user\"}]}",
        "{\"users\": [{\"name\": \"a\", \"role\": \"user\", \"tokens\": [{\"sha256\": \"zz\"}]}]}",
        "{\"users\": [{\"name\": \"a\", \"role\": \"user\", \"quota\": {\"kernels\": -1}}]}",
        "{\"users\": [], \"quota\": {\"gpus\": 1}}",
        "{\"users\": [",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        FILE *f = fopen(path, "w");
        fputs(bad[i], f);
        fclose(f);
        korch_err_t err = {0};
        korch_users_t *u = korch_users_load(path, false, &err);
        if (!CHECK(u == NULL))
            fprintf(stderr, "  accepted: %s\n", bad[i]);
        CHECK(err.msg[0] != 0);
        korch_users_destroy(&u);
    }
    korch_err_t err = {0};
    unlink(path);
    CHECK(korch_users_load(path, false, &err) == NULL && err.rc == KORCH_E_NOTFOUND);
    korch_test_rmdir(dir);
}

/* A resolver that answers PENDING, then done from outside resolve. */
typedef struct {
    srv_who_done_fn *done;
    void *arg;
    int cancelled;
} s_slow_t;

static srv_who_t s_slow_resolve(void *self, const srv_cred_t *c, srv_user_t *out, srv_who_done_fn *done, void *arg)
{
    s_slow_t *sl = self;
    if (!c->token || strcmp(c->token, "slow"))
        return SRV_WHO_NEXT;
    sl->done = done;
    sl->arg = arg;
    return SRV_WHO_PENDING;
}
static void s_slow_cancel(void *self, void *arg) { ((s_slow_t *)self)->cancelled++; }
static const srv_resolver_ops_t s_slow_ops = {"slow", s_slow_resolve, s_slow_cancel, NULL, NULL};

static srv_who_t s_deny_resolve(void *self, const srv_cred_t *c, srv_user_t *out, srv_who_done_fn *done, void *arg)
{
    return c->token && strcmp(c->token, "revoked") == 0 ? SRV_WHO_DENIED : SRV_WHO_NEXT;
}
static const srv_resolver_ops_t s_deny_ops = {"deny", s_deny_resolve, NULL, NULL, NULL};

/* A buggy resolver: OK with no name. */
static srv_who_t s_bug_resolve(void *self, const srv_cred_t *c, srv_user_t *out, srv_who_done_fn *done, void *arg)
{
    return c->token && strcmp(c->token, "bug") == 0 ? SRV_WHO_OK : SRV_WHO_NEXT;
}
static const srv_resolver_ops_t s_bug_ops = {"bug", s_bug_resolve, NULL, NULL, NULL};

TEST(team_ident_chain)
{
    srv_ident_t *i = srv_ident_new();
    s_slow_t slow = {0};
    korch_err_t err = {0};
    srv_user_t u;
    CHECK(srv_ident_add(i, &s_deny_ops, NULL, &err) == KORCH_OK);
    CHECK(srv_ident_add(i, &s_slow_ops, &slow, &err) == KORCH_OK);
    CHECK(srv_ident_add(i, &s_bug_ops, NULL, &err) == KORCH_OK);
    CHECK(srv_ident_add_token(i, "sekrit", &err) == KORCH_OK);
    CHECK(srv_ident_multi(i));
    srv_cred_t c = {.token = "sekrit", .path = "/api/kernels"};
    CHECK(srv_ident_resolve(i, &c, &u, NULL, NULL) == SRV_WHO_OK);
    CHECK_STREQ(u.name, SRV_USER_DEFAULT);
    CHECK(u.role == SRV_ROLE_ADMIN);
    c.token = "sekriT";
    CHECK(srv_ident_resolve(i, &c, &u, NULL, NULL) == SRV_WHO_NEXT && u.role == SRV_ROLE_NONE);
    c.token = NULL;
    CHECK(srv_ident_resolve(i, &c, &u, NULL, NULL) == SRV_WHO_NEXT);
    c.token = "revoked";
    CHECK(srv_ident_resolve(i, &c, &u, NULL, NULL) == SRV_WHO_DENIED);
    c.token = "bug";
    CHECK(srv_ident_resolve(i, &c, &u, NULL, NULL) == SRV_WHO_DENIED && u.role == SRV_ROLE_NONE);
    int cookie = 7;
    c.token = "slow";
    CHECK(srv_ident_resolve(i, &c, &u, (srv_who_done_fn *)1, &cookie) == SRV_WHO_PENDING);
    CHECK(slow.arg == &cookie);
    srv_ident_cancel(i, &cookie);
    CHECK_INT_(slow.cancelled, ==, 1);
    srv_ident_destroy(&i);
    CHECK(i == NULL);
    /* only the single token: not multi */
    i = srv_ident_new();
    srv_ident_add_token(i, "t", &err);
    CHECK(!srv_ident_multi(i));
    CHECK(srv_ident_add_token(i, "", &err) == KORCH_E_INVALID);
    srv_ident_destroy(&i);
}

TEST(team_ownership_check)
{
    srv_user_t alice = {"alice", SRV_ROLE_USER}, root = {"root", SRV_ROLE_ADMIN}, none = {"", SRV_ROLE_NONE};
    CHECK(srv_user_may(&alice, "alice"));
    CHECK(!srv_user_may(&alice, "bob"));
    CHECK(!srv_user_may(&alice, ""));       /* nobody's (before users): admins' only */
    CHECK(!srv_user_may(&alice, "alice2"));
    CHECK(!srv_user_may(&alice, NULL));
    CHECK(srv_user_may(&root, "alice"));
    CHECK(srv_user_may(&root, ""));
    CHECK(!srv_user_may(&none, ""));
    CHECK(!srv_user_may(NULL, "alice"));
    CHECK(srv_user_name_ok("a.b_c@d-e"));
    CHECK(!srv_user_name_ok(".hidden") && !srv_user_name_ok("a/b") && !srv_user_name_ok("") &&
          !srv_user_name_ok("a b") && !srv_user_name_ok("x\n"));
    char long_name[80];
    memset(long_name, 'a', 64);
    long_name[64] = 0;
    CHECK(!srv_user_name_ok(long_name));
}

TEST(team_users_resolver_rereads_the_file)
{
    char *dir = korch_test_mkdir("/tmp/korch-team-XXXXXX");
    char path[256];
    snprintf(path, sizeof path, "%s/users.json", dir);
    korch_err_t err = {0};
    korch_users_t *u = korch_users_load(path, true, &err);
    char ta[KORCH_TOKEN_MAX], ia[KORCH_TOKEN_ID_MAX];
    korch_users_add(u, "alice", NULL, &err);
    korch_users_mint(u, "alice", ta, ia, &err);
    CHECK(korch_users_save(u, &err) == KORCH_OK);
    korch_users_destroy(&u);
    srv_users_t *r = srv_users_new(path, &err);
    if (!CHECK(r != NULL))
        goto out;
    CHECK_STREQ(korch_users_lookup(srv_users_current(r), ta, NULL), "alice");
    u = korch_users_load(path, true, &err);
    int n;
    korch_users_revoke(u, "alice", NULL, &n, &err);
    korch_users_save(u, &err);
    korch_users_destroy(&u);
    sleep(1); /* checked at most once a second */
    CHECK(korch_users_lookup(srv_users_current(r), ta, NULL) == NULL);
    /* a broken file keeps the last good one */
    FILE *f = fopen(path, "w");
    fputs("{\"users\": [", f);
    fclose(f);
    sleep(1);
    CHECK(srv_users_current(r) != NULL);
out:
    srv_users_destroy(&r);
    korch_test_rmdir(dir);
}

typedef struct {
    char *p;
    size_t len;
} s_body_t;

static size_t s_sink(char *p, size_t sz, size_t n, void *arg)
{
    s_body_t *b = arg;
    char *q = realloc(b->p, b->len + sz * n + 1);
    if (!q)
        return 0;
    memcpy(q + b->len, p, sz * n);
    b->p = q;
    b->len += sz * n;
    q[b->len] = 0;
    return sz * n;
}

/* GET url with "Authorization: token T" (T NULL: none); the status, body in *body. */
static long s_get(const char *url, const char *token, char **body)
{
    CURL *c = curl_easy_init();
    s_body_t b = {0};
    char h[256];
    struct curl_slist *hs = NULL;
    if (token) {
        snprintf(h, sizeof h, "Authorization: token %s", token);
        hs = curl_slist_append(hs, h);
    }
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hs);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, s_sink);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 10L);
    long code = 0;
    if (curl_easy_perform(c) == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    curl_slist_free_all(hs);
    curl_easy_cleanup(c);
    if (body)
        *body = b.p;
    else
        free(b.p);
    return code;
}

TEST_T(team_cli_user_and_serve_users, 60)
{
    char *dir = korch_test_mkdir("/tmp/korch-team-XXXXXX");
    char path[256], url[512];
    snprintf(path, sizeof path, "%s/users.json", dir);
    char *ta = NULL, *tb = NULL, *out = NULL, *err = NULL;
    serve_t s = {0};
    const char *add_a[] = {korch_test_korch_bin(), "user", "--users", path, "add", "alice", NULL};
    const char *add_b[] = {korch_test_korch_bin(), "user", "--users", path, "add", "bob", "--admin", "--quota", "kernels=3", NULL};
    const char *list[] = {korch_test_korch_bin(), "user", "--users", path, "list", NULL};
    const char *bad[] = {korch_test_korch_bin(), "user", "--users", path, "add", "../x", NULL};
    const char *badq[] = {korch_test_korch_bin(), "user", "--users", path, "add", "alice", "--quota", "gpus=1", NULL};
    CHECK_INT_(korch_test_run(add_a, NULL, &ta, NULL, 20), ==, 0);
    CHECK_INT_(korch_test_run(add_b, NULL, &tb, NULL, 20), ==, 0);
    if (!CHECK(ta && tb && strncmp(ta, "korch_", 6) == 0 && strncmp(tb, "korch_", 6) == 0))
        goto out;
    ta[strcspn(ta, "\n")] = tb[strcspn(tb, "\n")] = 0;
    CHECK_INT_(korch_test_run(list, NULL, &out, NULL, 20), ==, 0);
    CHECK_CONTAINS(out, "alice");
    CHECK_CONTAINS(out, "admin");
    CHECK_CONTAINS(out, "\"kernels\":3");
    CHECK(strstr(out, ta) == NULL);
    CHECK_INT_(korch_test_run(bad, NULL, NULL, &err, 20), ==, 1);
    CHECK_CONTAINS(err, "is not a user name");
    free(err);
    err = NULL;
    CHECK_INT_(korch_test_run(badq, NULL, NULL, &err, 20), ==, 1);
    CHECK_CONTAINS(err, "gpus");
    const char *extra[] = {"--users", path, "--quota", "kernels=1", "--quota", "tokens_per_day=500", NULL};
    if (!CHECK(serve_start_args(&s, extra)))
        goto out;
    /* korch serve --quota: every named user's default, the file's own over it */
    char *me = NULL;
    snprintf(url, sizeof url, "%sapi/me", s.url);
    CHECK_INT_(s_get(url, ta, &me), ==, 200);
    json_t *mj = me ? json_loads(me, 0, NULL) : NULL;
    CHECK_EQ(json_integer_value(json_object_get(json_object_get(mj, "quota"), "kernels")), 1);
    CHECK_EQ(json_integer_value(json_object_get(json_object_get(mj, "quota"), "tokens_per_day")), 500);
    json_decref(mj);
    free(me);
    me = NULL;
    CHECK_INT_(s_get(url, tb, &me), ==, 200);
    mj = me ? json_loads(me, 0, NULL) : NULL;
    CHECK_EQ(json_integer_value(json_object_get(json_object_get(mj, "quota"), "kernels")), 3);
    json_decref(mj);
    free(me);
    me = NULL;
    CHECK(s.token[0] == 0); /* no single token printed */
    snprintf(url, sizeof url, "%sapi/kernels", s.url);
    CHECK_INT_(s_get(url, NULL, NULL), ==, 403);
    CHECK_INT_(s_get(url, "korch_0123", NULL), ==, 403);
    CHECK_INT_(s_get(url, ta, NULL), ==, 200);
    CHECK_INT_(s_get(url, tb, NULL), ==, 200);
    snprintf(url, sizeof url, "%sapi", s.url);
    CHECK_INT_(s_get(url, NULL, NULL), ==, 200); /* open, as before */
    /* revoked: refused within a second or so, no restart */
    const char *rev[] = {korch_test_korch_bin(), "user", "--users", path, "revoke", "alice", NULL};
    CHECK_INT_(korch_test_run(rev, NULL, NULL, NULL, 20), ==, 0);
    snprintf(url, sizeof url, "%sapi/kernels", s.url);
    long code = 0;
    for (int i = 0; i < 30 && (code = s_get(url, ta, NULL)) != 403; i++)
        usleep(100000);
    CHECK_INT_(code, ==, 403);
    /* it says why: a korch token the file does not hold; another shape gets the generic refusal */
    char *why = NULL;
    CHECK_INT_(s_get(url, ta, &why), ==, 403);
    CHECK_CONTAINS(why, "not in korch serve's users file");
    CHECK_CONTAINS(why, "korch user add");
    CHECK(why && !strstr(why, path)); /* the file's path is not told to whoever asks */
    free(why);
    why = NULL;
    CHECK_INT_(s_get(url, "korch_0123", &why), ==, 403);
    CHECK_CONTAINS(why, "missing or wrong token");
    free(why);
    CHECK_INT_(s_get(url, tb, NULL), ==, 200);
out:
    serve_stop(&s);
    free(ta);
    free(tb);
    free(out);
    free(err);
    korch_test_rmdir(dir);
}

TEST(team_audit_lines_hash_and_code)
{
    char *dir = korch_test_mkdir("/tmp/korch-team-XXXXXX");
    char path[256], link[256];
    snprintf(path, sizeof path, "%s/audit.jsonl", dir);
    snprintf(link, sizeof link, "%s/link.jsonl", dir);
    korch_err_t err = {0};
    srv_user_t alice = {"alice", SRV_ROLE_USER};
    srv_audit_t *a = srv_audit_new(path, false, &err), *b = NULL;
    if (!CHECK(a != NULL))
        goto out;
    srv_audit_code(a, &alice, "kernel.execute", "kernel", "k1", "print(1)", 8);
    srv_audit(a, &alice, "file.upload", "session", "s1", json_pack("{s:s, s:i}", "path", "a\nb\"c", "size", 3));
    srv_audit_destroy(&a);
    b = srv_audit_new(path, true, &err); /* appends */
    srv_audit_code(b, &alice, "kernel.execute", "kernel", "k1", "x = '\xff'", 8); /* not UTF-8 */
    srv_audit_code(b, &alice, "kernel.execute", "kernel", "k1", "print(2)", 8);
    srv_audit_destroy(&b);
    size_t len;
    char *text = korch_fs_read(path, 1 << 20, true, &len, &err);
    if (!CHECK(text != NULL))
        goto out;
    int n = 0;
    json_t *l[8] = {0};
    for (char *line = text, *nl; n < 8 && (nl = strchr(line, '\n')); line = nl + 1)
        l[n++] = json_loadb(line, (size_t)(nl - line), 0, NULL);
    CHECK_EQ(n, 4);
    /* sha256("print(1)") */
    CHECK_STREQ(json_string_value(json_object_get(l[0], "code_sha256")),
                "d287bb7f9d15abdc5b6e98536263815744b6ef21c8f3c839fc434ca70d8efe99");
    CHECK(json_object_get(l[0], "code") == NULL); /* the hash only, by default */
    CHECK_STREQ(json_string_value(json_object_get(l[0], "user")), "alice");
    CHECK_STREQ(json_string_value(json_object_get(l[1], "path")), "a\nb\"c"); /* one line, escaped */
    CHECK_STREQ(json_string_value(json_object_get(l[2], "code")), "(not UTF-8: see code_sha256)");
    CHECK_STREQ(json_string_value(json_object_get(l[3], "code")), "print(2)");
    for (int i = 0; i < n; i++)
        json_decref(l[i]);
    free(text);
    /* never through a symlink */
    CHECK(symlink(path, link) == 0);
    korch_err_clear(&err);
    a = srv_audit_new(link, false, &err);
    CHECK(a == NULL && err.rc == KORCH_E_IO);
    srv_audit_destroy(&a);
out:
    korch_test_rmdir(dir);
}
