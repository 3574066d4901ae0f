/*  korch serve, the server core: REST status codes and shapes, auth, limits,
 *  and an execute round trip over the kernel websocket in both Jupyter
 *  formats, driven by a real websocket client (tests/peers/ws_smoke.py on
 *  python3-websocket) against a real ipykernel (local launcher). */
#include "test.h"

#include <curl/curl.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct {
    pid_t pid;
    char base[128];
    char token[128];
} srv_t;

static bool s_start(srv_t *s, const char *const *extra)
{
    const char *argv[32] = {korch_test_korch_bin(), "serve", "--port", "0", "--launcher", "local"};
    int n = 6;
    for (int i = 0; extra && extra[i] && n < 30; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    char line[512] = "";
    s->pid = korch_test_spawn_line(argv, line, sizeof line, 20, NULL);
    /* http://127.0.0.1:PORT/?token=TOKEN */
    const char *tok = strstr(line, "/?token=");
    if (!CHECK(strncmp(line, "http://127.0.0.1:", 17) == 0 && tok))
        return false;
    snprintf(s->base, sizeof s->base, "%.*s", (int)(tok - line), line);
    snprintf(s->token, sizeof s->token, "%s", tok + 8);
    return CHECK_GT(strlen(s->token), 16);
}

static int s_stop(srv_t *s)
{
    int st = -1;
    if (s->pid > 0) {
        kill(s->pid, SIGTERM);
        waitpid(s->pid, &st, 0);
        s->pid = -1;
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

typedef struct {
    char *p;
    size_t len;
} buf_t;

static size_t s_collect(char *data, size_t size, size_t nmemb, void *arg)
{
    buf_t *b = arg;
    char *n = realloc(b->p, b->len + size * nmemb + 1);
    if (!n)
        return 0;
    b->p = n;
    memcpy(b->p + b->len, data, size * nmemb);
    b->len += size * nmemb;
    b->p[b->len] = 0;
    return size * nmemb;
}

/* One request; returns the status, *out the JSON body (new, or NULL). */
static long s_http(const srv_t *s, const char *method, const char *path, const char *token, const char *body,
                   size_t body_len, json_t **out)
{
    char url[512], auth[256];
    snprintf(url, sizeof url, "%s%s", s->base, path);
    buf_t b = {0};
    CURL *c = curl_easy_init();
    struct curl_slist *h = NULL;
    if (token) {
        snprintf(auth, sizeof auth, "Authorization: token %s", token);
        h = curl_slist_append(h, auth);
    }
    h = curl_slist_append(h, "Content-Type: application/json");
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, s_collect);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 60L);
    if (body) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)body_len);
    }
    long status = -1;
    if (curl_easy_perform(c) == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    if (out)
        *out = b.p ? json_loads(b.p, 0, NULL) : NULL;
    free(b.p);
    return status;
}

static bool s_has_message(json_t *j) { return json_is_string(json_object_get(j, "message")); }

TEST_T(server_rest_and_auth, 120)
{
    srv_t s;
    json_t *j = NULL;
    char path[256], kid[64] = "";
    if (!s_start(&s, (const char *const[]){"--max-kernels", "1", NULL}))
        goto out;
    /* /api is open; everything else needs the token */
    CHECK_EQ(s_http(&s, "GET", "/api", NULL, NULL, 0, &j), 200);
    CHECK(json_is_string(json_object_get(j, "version")));
    json_decref(j);
    CHECK_EQ(s_http(&s, "GET", "/api/kernels", NULL, NULL, 0, &j), 403);
    CHECK(s_has_message(j));
    json_decref(j);
    CHECK_EQ(s_http(&s, "GET", "/api/kernels", "wrong-token-of-the-same-length-as-the-real-one!", NULL, 0, NULL),
             403);
    CHECK_EQ(s_http(&s, "GET", "/api/kernels?token=nope", NULL, NULL, 0, NULL), 403);
    char qpath[256];
    snprintf(qpath, sizeof qpath, "/api/kernels?token=%s", s.token);
    CHECK_EQ(s_http(&s, "GET", qpath, NULL, NULL, 0, NULL), 200);

    CHECK_EQ(s_http(&s, "GET", "/api/kernelspecs", s.token, NULL, 0, &j), 200);
    CHECK_STREQ(json_string_value(json_object_get(j, "default")), "python3");
    CHECK(json_is_object(json_object_get(json_object_get(json_object_get(j, "kernelspecs"), "python3"), "spec")));
    json_decref(j);
    CHECK_EQ(s_http(&s, "GET", "/api/kernelspecs/python3", s.token, NULL, 0, NULL), 200);
    CHECK_EQ(s_http(&s, "GET", "/api/kernelspecs/nope", s.token, NULL, 0, NULL), 404);
    CHECK_EQ(s_http(&s, "GET", "/api/status", s.token, NULL, 0, NULL), 200);

    /* malformed, too big, unknown */
    CHECK_EQ(s_http(&s, "POST", "/api/kernels", s.token, "{bad", 4, &j), 400);
    CHECK(s_has_message(j));
    json_decref(j);
    size_t big = 10u << 20;
    char *blob = malloc(big);
    if (blob) {
        memset(blob, ' ', big);
        CHECK_EQ(s_http(&s, "POST", "/api/kernels", s.token, blob, big, NULL), 413);
        free(blob);
    }
    CHECK_EQ(s_http(&s, "GET", "/api/kernels/no-such-kernel", s.token, NULL, 0, &j), 404);
    CHECK(s_has_message(j));
    json_decref(j);
    CHECK_EQ(s_http(&s, "POST", "/api/kernels/no-such-kernel/interrupt", s.token, "", 0, NULL), 404);
    CHECK_EQ(s_http(&s, "DELETE", "/api/kernels/no-such-kernel", s.token, NULL, 0, NULL), 404);
    CHECK_EQ(s_http(&s, "GET", "/api/nothing-here", s.token, NULL, 0, NULL), 404);

    /* a kernel: 201 with the model, once ready */
    const char *req = "{\"name\": \"python3\", \"env\": {\"KERNEL_USERNAME\": \"tester\"}}";
    CHECK_EQ(s_http(&s, "POST", "/api/kernels", s.token, req, strlen(req), &j), 201);
    const char *id = json_string_value(json_object_get(j, "id"));
    if (!CHECK(id != NULL))
        goto out;
    snprintf(kid, sizeof kid, "%s", id);
    CHECK_STREQ(json_string_value(json_object_get(j, "name")), "python3");
    CHECK_STREQ(json_string_value(json_object_get(j, "execution_state")), "idle");
    CHECK(json_is_integer(json_object_get(j, "connections")));
    CHECK(json_is_string(json_object_get(j, "last_activity")));
    json_decref(j);
    j = NULL;
    /* --max-kernels 1 */
    CHECK_EQ(s_http(&s, "POST", "/api/kernels", s.token, "{}", 2, &j), 403);
    CHECK(s_has_message(j));
    json_decref(j);
    snprintf(path, sizeof path, "/api/kernels/%s", kid);
    CHECK_EQ(s_http(&s, "GET", path, s.token, NULL, 0, NULL), 200);
    snprintf(path, sizeof path, "/api/kernels/%s/interrupt", kid);
    CHECK_EQ(s_http(&s, "POST", path, s.token, "", 0, NULL), 204);
    snprintf(path, sizeof path, "/api/kernels/%s/restart", kid);
    CHECK_EQ(s_http(&s, "POST", path, s.token, "", 0, &j), 200);
    CHECK_STREQ(json_string_value(json_object_get(j, "id")), kid);
    json_decref(j);
    j = NULL;
    /* a session on the existing kernel */
    char sess[256];
    snprintf(sess, sizeof sess, "{\"path\": \"a.ipynb\", \"type\": \"notebook\", \"name\": \"a\", \"kernel\": {\"id\": \"%s\"}}",
             kid);
    CHECK_EQ(s_http(&s, "POST", "/api/sessions", s.token, sess, strlen(sess), &j), 201);
    CHECK_STREQ(json_string_value(json_object_get(json_object_get(j, "kernel"), "id")), kid);
    json_decref(j);
    j = NULL;
    CHECK_EQ(s_http(&s, "POST", "/api/sessions", s.token, "{\"type\": \"notebook\"}", 20, NULL), 400);
    CHECK_EQ(s_http(&s, "GET", "/api/sessions", s.token, NULL, 0, &j), 200);
    CHECK_EQ(json_array_size(j), 1);
    json_decref(j);
    j = NULL;
    snprintf(path, sizeof path, "/api/kernels/%s", kid);
    CHECK_EQ(s_http(&s, "DELETE", path, s.token, NULL, 0, NULL), 204);
    CHECK_EQ(s_http(&s, "GET", path, s.token, NULL, 0, NULL), 404);
    CHECK_EQ(s_http(&s, "GET", "/api/sessions", s.token, NULL, 0, &j), 200);
    CHECK_EQ(json_array_size(j), 0);
out:
    json_decref(j);
    CHECK_EQ(s_stop(&s), 0);
}

static void s_ws_round_trip(const char *proto, bool binary)
{
    srv_t s;
    json_t *j = NULL;
    char *out = NULL, *err = NULL;
    if (!s_start(&s, NULL))
        goto out;
    CHECK_EQ(s_http(&s, "POST", "/api/kernels", s.token, "{}", 2, &j), 201);
    const char *kid = json_string_value(json_object_get(j, "id"));
    if (!CHECK(kid != NULL))
        goto out;
    char script[4096];
    snprintf(script, sizeof script, "%s/tests/peers/ws_smoke.py", korch_test_root());
    const char *argv[] = {"/usr/bin/python3", script, s.base, s.token, kid, "--proto", proto, "--bench", "20",
                          binary ? "--binary" : NULL, NULL};
    int rc = korch_test_run(argv, NULL, &out, &err, 60);
    if (!CHECK_EQ(rc, 0))
        fprintf(stderr, "ws_smoke: %s%s\n", out ? out : "", err ? err : "");
    CHECK_CONTAINS(out, "ok");
    CHECK_CONTAINS(out, "p50_ms=");
    /* a websocket to a kernel that does not exist: refused */
    char path[128];
    snprintf(path, sizeof path, "/api/kernels/%s/channels", kid);
    CHECK_EQ(s_http(&s, "GET", path, s.token, NULL, 0, NULL), 400);
out:
    free(out);
    free(err);
    json_decref(j);
    CHECK_EQ(s_stop(&s), 0);
}

TEST_T(server_ws_v1, 90) { s_ws_round_trip("v1", false); }
TEST_T(server_ws_legacy, 90) { s_ws_round_trip("legacy", false); }
TEST_T(server_ws_legacy_binary, 90) { s_ws_round_trip("legacy", true); }
