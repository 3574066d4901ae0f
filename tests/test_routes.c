/*  The route table and its router (src/server/routes.c): every route of
 *  the table matched from a path built from its own pattern, parameters,
 *  404 / 405 with the methods to allow, bad paths (NUL, dot segments in a
 *  tail, too long, too many segments), and the same on the wire through a
 *  real `korch serve` (what libwebsockets does to a path before korch sees
 *  it: percent-decoding, dot segments).
 */
#define KORCH_TEST_UNIT /* no kernel, docker or browser (a korch serve that starts none): make check runs these */
#include "test.h"
#include "serve_fixture.h"
#include "../src/server/server_int.h"

#include <curl/curl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static srv_match_t s_match(const char *method, const char *path, const srv_route_t **r, srv_params_t *p, char *allow,
                           size_t allow_len)
{
    return srv_route_match(method, path, strlen(path), r, p, allow, allow_len);
}

/* A request path for a pattern: {x} -> "v-x", {x*} -> "d/e/f.csv". */
static void s_instance(const char *pattern, char *out, size_t len)
{
    size_t o = 0;
    for (const char *c = pattern; *c && o + 16 < len;) {
        if (*c == '{') {
            const char *end = strchr(c, '}');
            if (end[-1] == '*')
                o += (size_t)snprintf(out + o, len - o, "d/e/f.csv");
            else
                o += (size_t)snprintf(out + o, len - o, "v-%.*s", (int)(end - c - 1), c + 1);
            c = end + 1;
        } else
            out[o++] = *c++;
    }
    out[o] = 0;
}

TEST(server_routes_every_route_matches_its_own_pattern)
{
    size_t n;
    const srv_route_t *table = srv_routes(&n);
    CHECK_GE(n, 30);
    for (size_t i = 0; i < n; i++) {
        const srv_route_t *r = &table[i], *got = NULL;
        char path[512], slashed[520], doubled[1100];
        s_instance(r->pattern, path, sizeof path);
        srv_params_t p;
        if (!CHECK_EQ(s_match(r->method, path, &got, &p, NULL, 0), SRV_MATCH_OK) || !CHECK(got == r)) {
            fprintf(stderr, "  route %s %s, path %s\n", r->method, r->pattern, path);
            continue;
        }
        /* each parameter has the value its pattern put there */
        int params = 0;
        for (const char *c = strchr(r->pattern, '{'); c; c = strchr(c + 1, '{'), params++) {
            char name[64];
            snprintf(name, sizeof name, "%.*s", (int)strcspn(c + 1, "*}"), c + 1);
            char want[80];
            snprintf(want, sizeof want, strstr(c, "*}") == c + 1 + strlen(name) ? "d/e/f.csv" : "v-%s", name);
            CHECK_STREQ(srv_param(&p, name), want);
        }
        CHECK_EQ(p.n, params);
        CHECK_STREQ(srv_param(&p, "no-such-parameter"), "");
        CHECK(r->summary && *r->summary && !strchr(r->summary, '\n'));
        CHECK(r->handler != NULL);
        /* a trailing slash and doubled slashes change nothing (as before the table) */
        snprintf(slashed, sizeof slashed, "%s/", path);
        CHECK_EQ(s_match(r->method, slashed, &got, NULL, NULL, 0), SRV_MATCH_OK);
        CHECK(got == r);
        size_t o = 0;
        for (const char *c = path; *c; c++) {
            doubled[o++] = *c;
            if (*c == '/')
                doubled[o++] = '/';
        }
        doubled[o] = 0;
        CHECK_EQ(s_match(r->method, doubled, &got, NULL, NULL, 0), SRV_MATCH_OK);
        CHECK(got == r);
    }
}

TEST(server_routes_parameters)
{
    const srv_route_t *r = NULL;
    srv_params_t p;
    CHECK_EQ(s_match("POST", "/api/kernels/1b7c-42/restart", &r, &p, NULL, 0), SRV_MATCH_OK);
    CHECK_STREQ(r->pattern, "/api/kernels/{kernel_id}/restart");
    CHECK_EQ(p.n, 1);
    CHECK_STREQ(p.name[0], "kernel_id");
    CHECK_STREQ(srv_param(&p, "kernel_id"), "1b7c-42");
    /* a tail takes the rest, any depth, joined with '/' */
    CHECK_EQ(s_match("PUT", "/api/agent/sessions/S1/files/data/2024//q1/sales.csv", &r, &p, NULL, 0), SRV_MATCH_OK);
    CHECK_STREQ(r->pattern, "/api/agent/sessions/{session_id}/files/{path*}");
    CHECK_EQ(r->body, SRV_BODY_UPLOAD);
    CHECK_STREQ(srv_param(&p, "session_id"), "S1");
    CHECK_STREQ(srv_param(&p, "path"), "data/2024/q1/sales.csv");
    /* without a tail it is the listing */
    CHECK_EQ(s_match("GET", "/api/agent/sessions/S1/files", &r, &p, NULL, 0), SRV_MATCH_OK);
    CHECK_STREQ(r->pattern, "/api/agent/sessions/{session_id}/files");
    CHECK_EQ(s_match("GET", "/kernelspecs/python3/logo-64x64.png", &r, &p, NULL, 0), SRV_MATCH_OK);
    CHECK_STREQ(srv_param(&p, "kernel_name"), "python3");
    CHECK_STREQ(srv_param(&p, "file"), "logo-64x64.png");
    /* literals: /api/kernelspecs is not a kernel named "kernelspecs" */
    CHECK_EQ(s_match("GET", "/api/kernelspecs", &r, &p, NULL, 0), SRV_MATCH_OK);
    CHECK_STREQ(r->pattern, "/api/kernelspecs");
    /* the router does not decode: libwebsockets did (a "%2F" left here is a
       client's "%252F"), so it is part of the value */
    CHECK_EQ(s_match("GET", "/api/kernels/a%2Fb", &r, &p, NULL, 0), SRV_MATCH_OK);
    CHECK_STREQ(srv_param(&p, "kernel_id"), "a%2Fb");
    /* a single parameter may be ".." (the handler answers: no such kernel) */
    CHECK_EQ(s_match("GET", "/api/kernels/..", &r, &p, NULL, 0), SRV_MATCH_OK);
    CHECK_STREQ(srv_param(&p, "kernel_id"), "..");
    /* the websocket's route */
    CHECK_EQ(s_match("GET", "/api/kernels/K/channels", &r, &p, NULL, 0), SRV_MATCH_OK);
    CHECK(r->websocket);
    /* open routes: GET /api, the web app's files and the JupyterHub login's two (hub_oauth.c) only */
    size_t n;
    const srv_route_t *t = srv_routes(&n);
    int open = 0;
    for (size_t i = 0; i < n; i++)
        if (t[i].auth == SRV_AUTH_NONE) {
            open++;
            CHECK_STREQ(t[i].method, "GET");
            CHECK(strcmp(t[i].pattern, "/api") == 0 || strcmp(t[i].pattern, "/") == 0 ||
                  strncmp(t[i].pattern, "/static/", 8) == 0 || strcmp(t[i].pattern, "/hub/login") == 0 ||
                  strcmp(t[i].pattern, "/oauth_callback") == 0);
        }
    CHECK_EQ(open, 6);
}

TEST(server_routes_404_and_405_with_allow)
{
    const srv_route_t *r = (const srv_route_t *)1;
    char allow[48] = "x";
    CHECK_EQ(s_match("PUT", "/api/kernels", &r, NULL, allow, sizeof allow), SRV_MATCH_METHOD);
    CHECK(r == NULL);
    CHECK_STREQ(allow, "GET, POST");
    CHECK_EQ(s_match("GET", "/api/kernels/K/interrupt", &r, NULL, allow, sizeof allow), SRV_MATCH_METHOD);
    CHECK_STREQ(allow, "POST");
    CHECK_EQ(s_match("POST", "/api/sessions/S", &r, NULL, allow, sizeof allow), SRV_MATCH_METHOD);
    CHECK_STREQ(allow, "GET, PATCH, DELETE");
    CHECK_EQ(s_match("POST", "/api/agent/sessions/S/files/a/b.csv", &r, NULL, allow, sizeof allow),
             SRV_MATCH_METHOD);
    CHECK_STREQ(allow, "GET, PUT, DELETE");
    /* HEAD is not served (jupyter_server's API handlers answer it 405 too) */
    CHECK_EQ(s_match("HEAD", "/api/status", &r, NULL, allow, sizeof allow), SRV_MATCH_METHOD);
    CHECK_STREQ(allow, "GET");
    CHECK_EQ(s_match("HEAD", "/", &r, NULL, allow, sizeof allow), SRV_MATCH_METHOD);
    /* a method nobody knows, and lowercase (methods are case-sensitive, RFC 9110 9.1) */
    CHECK_EQ(s_match("BREW", "/api/kernels", &r, NULL, allow, sizeof allow), SRV_MATCH_METHOD);
    CHECK_EQ(s_match("get", "/api/kernels", &r, NULL, allow, sizeof allow), SRV_MATCH_METHOD);
    CHECK_EQ(s_match("", "/api/kernels", &r, NULL, allow, sizeof allow), SRV_MATCH_METHOD);
    /* a short buffer gets the methods that fit, never half of one */
    char tiny[6];
    CHECK_EQ(s_match("PUT", "/api/sessions/S", &r, NULL, tiny, sizeof tiny), SRV_MATCH_METHOD);
    CHECK_STREQ(tiny, "GET");
    /* no route at all: 404, allow empty */
    static const char *const missing[] = {"/api/nothing", "/api/kernels/K/restart/now", "/api/kernels/K/nope",
                                          "/apix", "/api/agent", "/api/agent/x", "/kernelspecs/python3",
                                          "/static/other.js", "/static", "/metrics/x", "/API"};
    for (size_t i = 0; i < sizeof missing / sizeof *missing; i++) {
        CHECK_EQ(s_match("GET", missing[i], &r, NULL, allow, sizeof allow), SRV_MATCH_NOT_FOUND);
        CHECK_STREQ(allow, "");
    }
    /* the unknown method on an unknown path is 404: the path comes first */
    CHECK_EQ(s_match("BREW", "/api/nothing", &r, NULL, NULL, 0), SRV_MATCH_NOT_FOUND);
}

TEST(server_routes_bad_paths)
{
    const srv_route_t *r;
    srv_params_t p;
    /* a NUL inside the given length */
    static const char nul[] = "/api/kernels/a\0b";
    CHECK_EQ(srv_route_match("GET", nul, sizeof nul - 1, &r, &p, NULL, 0), SRV_MATCH_BAD_PATH);
    /* a tail never holds "." or ".." (libwebsockets resolves them before us;
       this holds even if it did not) */
    static const char *const dots[] = {"/api/agent/sessions/S/files/../../etc/passwd",
                                       "/api/agent/sessions/S/files/a/./b", "/api/agent/sessions/S/files/..",
                                       "/api/agent/sessions/S/files/a/.."};
    for (size_t i = 0; i < sizeof dots / sizeof *dots; i++) {
        CHECK_EQ(s_match("GET", dots[i], &r, &p, NULL, 0), SRV_MATCH_BAD_PATH);
        CHECK_EQ(s_match("PUT", dots[i], &r, NULL, NULL, 0), SRV_MATCH_BAD_PATH);
    }
    /* names that only look like dots are names */
    CHECK_EQ(s_match("GET", "/api/agent/sessions/S/files/.../..x/.hidden", &r, &p, NULL, 0), SRV_MATCH_OK);
    CHECK_STREQ(srv_param(&p, "path"), ".../..x/.hidden");
    /* as long as a request's path may be (1023 bytes), and one more */
    char path[SRV_ROUTE_MAX_PATH + 8];
    int o = snprintf(path, sizeof path, "/api/agent/sessions/S/files/");
    memset(path + o, 'a', sizeof path - (size_t)o);
    path[SRV_ROUTE_MAX_PATH - 1] = 0;
    CHECK_EQ(s_match("GET", path, &r, &p, NULL, 0), SRV_MATCH_OK);
    CHECK_EQ(strlen(srv_param(&p, "path")), SRV_ROUTE_MAX_PATH - 1 - o);
    path[SRV_ROUTE_MAX_PATH - 1] = 'a';
    path[SRV_ROUTE_MAX_PATH] = 0;
    CHECK_EQ(s_match("GET", path, &r, &p, NULL, 0), SRV_MATCH_TOO_LONG);
    /* as many segments as allowed, and one more */
    o = snprintf(path, sizeof path, "/api/agent/sessions/S/files");
    for (int i = 5; i < SRV_ROUTE_MAX_SEGS; i++)
        o += snprintf(path + o, sizeof path - (size_t)o, "/d");
    CHECK_EQ(s_match("GET", path, &r, &p, NULL, 0), SRV_MATCH_OK);
    CHECK_EQ(strlen(srv_param(&p, "path")), 2 * (SRV_ROUTE_MAX_SEGS - 5) - 1);
    snprintf(path + o, sizeof path - (size_t)o, "/d");
    CHECK_EQ(s_match("GET", path, &r, &p, NULL, 0), SRV_MATCH_TOO_LONG);
    /* the root is the page; nothing and only slashes are the root too */
    CHECK_EQ(s_match("GET", "/", &r, NULL, NULL, 0), SRV_MATCH_OK);
    CHECK_STREQ(r->pattern, "/");
    CHECK_EQ(s_match("GET", "///", &r, NULL, NULL, 0), SRV_MATCH_OK);
    CHECK_STREQ(r->pattern, "/");
}

TEST(server_routes_json_lists_the_table)
{
    size_t n;
    const srv_route_t *t = srv_routes(&n);
    json_t *j = srv_routes_json();
    if (!CHECK(json_is_array(j)) || !CHECK_EQ(json_array_size(j), n))
        goto out;
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(j, i);
        CHECK_STREQ(json_string_value(json_object_get(e, "method")), t[i].method);
        CHECK_STREQ(json_string_value(json_object_get(e, "summary")), t[i].summary);
        CHECK_STREQ(json_string_value(json_object_get(e, "auth")), t[i].auth == SRV_AUTH_NONE ? "none" : "token");
        CHECK(json_is_boolean(json_object_get(e, "websocket")));
        const char *path = json_string_value(json_object_get(e, "path"));
        CHECK(path && !strchr(path, '*'));
    }
    /* {path*} is written as OpenAPI has it */
    bool seen = false;
    for (size_t i = 0; i < n; i++)
        seen = seen || strcmp(json_string_value(json_object_get(json_array_get(j, i), "path")),
                              "/api/agent/sessions/{session_id}/files/{path}") == 0;
    CHECK(seen);
out:
    json_decref(j);
}

/* docs/api.md's route table is scripts/gen-api-doc.py's rendering of the
   table in routes.c: the script reads routes.c as this build compiled it
   (its --json must be srv_routes_json, route for route), and the doc must be
   what it writes now (a route added, removed or re-summarised without
   running the script fails here). */
TEST(docs_api_matches_the_route_table)
{
    char script[4096];
    snprintf(script, sizeof script, "%s/scripts/gen-api-doc.py", korch_test_root());
    const char *json_argv[] = {"python3", script, "--json", NULL};
    const char *check_argv[] = {"python3", script, "--check", NULL};
    char *out = NULL, *err = NULL;
    json_t *parsed = NULL, *table = srv_routes_json();
    if (!CHECK_EQ(korch_test_run(json_argv, NULL, &out, &err, 30), 0))
        goto out;
    parsed = json_loads(out, 0, NULL);
    if (!CHECK(json_is_array(parsed)) || !CHECK_EQ(json_array_size(parsed), json_array_size(table)))
        goto out;
    for (size_t i = 0; i < json_array_size(table); i++) {
        json_t *a = json_array_get(parsed, i), *b = json_array_get(table, i);
        const char *keys[] = {"method", "path", "summary", "auth", "body"};
        for (size_t k = 0; k < sizeof keys / sizeof *keys; k++)
            CHECK_STREQ(json_string_value(json_object_get(a, keys[k])), json_string_value(json_object_get(b, keys[k])));
        CHECK_EQ(json_is_true(json_object_get(a, "websocket")), json_is_true(json_object_get(b, "websocket")));
    }
    free(out);
    free(err);
    out = err = NULL;
    CHECK_EQ(korch_test_run(check_argv, NULL, &out, &err, 30), 0);
    if (err && *err)
        fprintf(stderr, "%s", err);
out:
    json_decref(parsed);
    json_decref(table);
    free(out);
    free(err);
}

/* ------------------------------------------------------------ on the wire */

typedef struct {
    char allow[128];
    char *body;
    size_t len;
} s_answer_t;

static size_t s_on_header(char *data, size_t size, size_t n, void *arg)
{
    s_answer_t *a = arg;
    size_t len = size * n;
    if (len > 6 && strncasecmp(data, "allow:", 6) == 0) {
        size_t v = len - 6;
        while (v && (data[6 + v - 1] == '\r' || data[6 + v - 1] == '\n'))
            v--;
        snprintf(a->allow, sizeof a->allow, "%.*s", (int)v, data + 6);
    }
    return len;
}

static size_t s_on_body(char *data, size_t size, size_t n, void *arg)
{
    s_answer_t *a = arg;
    char *b = realloc(a->body, a->len + size * n + 1);
    if (!b)
        return 0;
    memcpy(b + a->len, data, size * n);
    a->body = b;
    a->len += size * n;
    b[a->len] = 0;
    return size * n;
}

/* method path (sent as is: no dot-segment squashing by curl) with or without the token. */
static long s_req(const serve_t *s, const char *method, const char *path, bool token, s_answer_t *a)
{
    char url[2300], auth[300];
    snprintf(url, sizeof url, "%.*s%s", (int)strlen(s->url) - 1, s->url, path);
    memset(a, 0, sizeof *a);
    CURL *c = curl_easy_init();
    struct curl_slist *h = NULL;
    if (token) {
        snprintf(auth, sizeof auth, "Authorization: token %s", s->token);
        h = curl_slist_append(h, auth);
    }
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_PATH_AS_IS, 1L);
    if (strcmp(method, "HEAD") == 0)
        curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    else
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, s_on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, a);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, s_on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, a);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
    long status = -1;
    if (curl_easy_perform(c) == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    return status;
}

TEST_T(server_routes_on_the_wire, 60)
{
    serve_t s;
    s_answer_t a = {0};
    if (!serve_start(&s))
        return;
    /* 405 names the methods in Allow, with a JSON message */
    CHECK_EQ(s_req(&s, "PUT", "/api/kernels", true, &a), 405);
    CHECK_STREQ(a.allow, " GET, POST");
    CHECK_CONTAINS(a.body ? a.body : "", "\"message\"");
    free(a.body);
    CHECK_EQ(s_req(&s, "GET", "/api/kernels/K/restart", true, &a), 405);
    CHECK_STREQ(a.allow, " POST");
    free(a.body);
    /* HEAD: 405, no content */
    CHECK_EQ(s_req(&s, "HEAD", "/api/status", true, &a), 405);
    CHECK_STREQ(a.allow, " GET");
    CHECK_EQ(a.len, 0);
    free(a.body);
    /* without the token a client learns nothing, not even which paths exist */
    CHECK_EQ(s_req(&s, "GET", "/api/nothing", false, &a), 403);
    free(a.body);
    CHECK_EQ(s_req(&s, "PUT", "/api/kernels", false, &a), 403);
    free(a.body);
    CHECK_EQ(s_req(&s, "GET", "/api/nothing", true, &a), 404);
    free(a.body);
    /* the open ones */
    CHECK_EQ(s_req(&s, "GET", "/api", false, &a), 200);
    free(a.body);
    CHECK_EQ(s_req(&s, "GET", "/", false, &a), 200);
    CHECK_CONTAINS(a.body ? a.body : "", "<html");
    free(a.body);
    CHECK_EQ(s_req(&s, "POST", "/", false, &a), 403);
    free(a.body);
    /* libwebsockets decodes "%2F" into a '/' before korch routes: a segment
       boundary like any other */
    CHECK_EQ(s_req(&s, "GET", "/api%2Fstatus", true, &a), 200);
    CHECK_CONTAINS(a.body ? a.body : "", "\"started\"");
    free(a.body);
    /* ... and resolves dot segments, decoded or not, within the path: they
       cannot climb out of a route's tail into another route */
    CHECK_EQ(s_req(&s, "GET", "/api/agent/sessions/S/files/..%2F..%2F..%2F..%2Fstatus", true, &a), 200);
    CHECK_CONTAINS(a.body ? a.body : "", "\"started\""); /* /api/agent/sessions/S/files/../../../../status */
    free(a.body);
    CHECK_EQ(s_req(&s, "GET", "/api/agent/sessions/S/files/%2e%2e/x", true, &a), 404);
    free(a.body);
    /* a NUL: libwebsockets drops the connection (no answer at all) */
    CHECK_EQ(s_req(&s, "GET", "/api/kernels/a%00b", true, &a), -1);
    free(a.body);
    /* a path too long to keep is 414, never cut */
    char path[2100];
    int o = snprintf(path, sizeof path, "/api/agent/sessions/S/files/");
    memset(path + o, 'a', 1100);
    path[o + 1100] = 0;
    CHECK_EQ(s_req(&s, "GET", path, true, &a), 414);
    CHECK_CONTAINS(a.body ? a.body : "", "too long");
    free(a.body);
    /* the kernel API's answers are as before the table */
    CHECK_EQ(s_req(&s, "GET", "/api/kernels/", true, &a), 200);
    CHECK_STREQ(a.body ? a.body : "", "[]");
    free(a.body);
    CHECK_EQ(s_req(&s, "GET", "/api/kernels/nope/channels", true, &a), 404);
    free(a.body);
    CHECK_EQ(s_req(&s, "POST", "/api/kernels/nope/interrupt", true, &a), 404);
    CHECK_CONTAINS(a.body ? a.body : "", "Kernel does not exist: nope");
    free(a.body);
    serve_stop(&s);
}

/* ------------------------------------------------- against a second matcher */

/* The table read the plain way: split both into segments (empty ones
   skipped) and compare one pattern after the other. The trie must agree
   with it on every path: the same route, or the same 404 / 405. */
static int s_split(const char *s, size_t len, const char **seg, size_t *sl, int max)
{
    int n = 0;
    for (size_t i = 0; i < len;) {
        while (i < len && s[i] == '/')
            i++;
        size_t j = i;
        while (j < len && s[j] != '/')
            j++;
        if (j == i)
            break;
        if (n == max)
            return -1;
        seg[n] = s + i;
        sl[n++] = j - i;
        i = j;
    }
    return n;
}

static bool s_plain_path_match(const char *pattern, const char **seg, const size_t *sl, int n)
{
    const char *ps[32];
    size_t pl[32];
    int pn = s_split(pattern, strlen(pattern), ps, pl, 32);
    for (int i = 0; i < pn; i++) {
        bool param = ps[i][0] == '{', tail = param && ps[i][pl[i] - 2] == '*';
        if (tail)
            return n > i;
        if (i >= n || (!param && (pl[i] != sl[i] || memcmp(ps[i], seg[i], sl[i]) != 0)))
            return false;
    }
    return pn == n;
}

TEST(server_routes_agree_with_a_plain_matcher_on_random_paths)
{
    static const char *const words[] = {"/", "/", "/", "api", "agent", "sessions", "kernels", "files", "figures",
                                        "channels", "restart", "interrupt", "kernelspecs", "static", "korch.js",
                                        "metrics", "status", ".", "..", "x", "%2F", "{", "*}", "S1", "messages"};
    static const char *const methods[] = {"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "get"};
    size_t nr;
    const srv_route_t *t = srv_routes(&nr);
    unsigned seed = 12345;
    int ok = 0, m405 = 0, m404 = 0, bad = 0;
    for (int iter = 0; iter < 100000; iter++) {
        /* a route's pattern with random values, then mutated: a segment
           replaced, dropped or added, slashes doubled */
#define RND(k) ((seed = seed * 1103515245u + 12345u), (int)((seed >> 16) % (unsigned)(k)))
        const char *ps[16];
        size_t pl[16];
        char segs[24][40];
        int ns = 0;
        const char *pat = t[RND(nr)].pattern;
        int pn = s_split(pat, strlen(pat), ps, pl, 16);
        for (int i = 0; i < pn && ns < 20; i++) {
            if (ps[i][0] != '{')
                snprintf(segs[ns++], sizeof segs[0], "%.*s", (int)pl[i], ps[i]);
            else
                for (int k = ps[i][pl[i] - 2] == '*' ? 1 + RND(3) : 1; k > 0 && ns < 20; k--)
                    snprintf(segs[ns++], sizeof segs[0], "%s", words[3 + RND(sizeof words / sizeof *words - 3)]);
        }
        int mut = RND(4);
        for (int k = 0; k < mut; k++) {
            int at = ns ? RND(ns) : 0;
            switch (RND(3)) {
            case 0: /* replace */
                if (ns)
                    snprintf(segs[at], sizeof segs[0], "%s", words[3 + RND(sizeof words / sizeof *words - 3)]);
                break;
            case 1: /* drop */
                if (ns) {
                    memmove(segs[at], segs[at + 1], (size_t)(ns - at - 1) * sizeof segs[0]);
                    ns--;
                }
                break;
            default: /* add */
                if (ns < 20) {
                    memmove(segs[at + 1], segs[at], (size_t)(ns - at) * sizeof segs[0]);
                    snprintf(segs[at], sizeof segs[0], "%s", words[3 + RND(sizeof words / sizeof *words - 3)]);
                    ns++;
                }
                break;
            }
        }
        char path[1024];
        size_t o = 0;
        for (int i = 0; i < ns; i++)
            o += (size_t)snprintf(path + o, sizeof path - o, "%s%s", RND(8) ? "/" : "//", segs[i]);
        if (!ns || RND(6) == 0)
            o += (size_t)snprintf(path + o, sizeof path - o, "/");
        path[o] = 0;
        const char *method = methods[RND(sizeof methods / sizeof *methods)];
        const srv_route_t *r = NULL;
        srv_params_t p;
        char allow[48];
        srv_match_t m = srv_route_match(method, path, o, &r, &p, allow, sizeof allow);
        /* the plain way */
        const char *seg[SRV_ROUTE_MAX_SEGS];
        size_t sl[SRV_ROUTE_MAX_SEGS];
        int n = s_split(path, o, seg, sl, SRV_ROUTE_MAX_SEGS);
        const srv_route_t *want = NULL;
        char want_allow[48] = "";
        static const char *const order[] = {"GET", "POST", "PUT", "PATCH", "DELETE"};
        for (size_t k = 0; k < 5; k++)
            for (size_t i = 0; i < nr; i++)
                if (strcmp(t[i].method, order[k]) == 0 && s_plain_path_match(t[i].pattern, seg, sl, n)) {
                    if (strcmp(method, order[k]) == 0)
                        want = &t[i];
                    snprintf(want_allow + strlen(want_allow), sizeof want_allow - strlen(want_allow), "%s%s",
                             want_allow[0] ? ", " : "", order[k]);
                    break;
                }
        if (m == SRV_MATCH_BAD_PATH) { /* only a tail with a dot segment */
            bad++;
            CHECK(want && strstr(want->pattern, "*}"));
            continue;
        }
        if (want) {
            if (!CHECK_EQ(m, SRV_MATCH_OK) || !CHECK(r == want)) {
                fprintf(stderr, "  %s '%s'\n", method, path);
                return;
            }
            ok++;
            for (int i = 0; i < p.n; i++) {
                CHECK(p.value[i][0] != 0);
                bool tail = strstr(want->pattern, "*}") && i == p.n - 1;
                CHECK(tail || !strchr(p.value[i], '/'));
            }
        } else if (want_allow[0]) {
            if (!CHECK_EQ(m, SRV_MATCH_METHOD) || !CHECK_STREQ(allow, want_allow)) {
                fprintf(stderr, "  %s '%s'\n", method, path);
                return;
            }
            m405++;
        } else {
            if (!CHECK_EQ(m, SRV_MATCH_NOT_FOUND)) {
                fprintf(stderr, "  %s '%s'\n", method, path);
                return;
            }
            m404++;
        }
    }
#undef RND
    /* the mix reached every outcome */
    CHECK_GT(ok, 1000);
    CHECK_GT(m405, 1000);
    CHECK_GT(m404, 1000);
    CHECK_GT(bad, 10);
}
