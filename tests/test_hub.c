/*  korch serve as a JupyterHub service, with real parts only: Debian 12's
 *  JupyterHub 3.0 and its configurable-http-proxy, DummyAuthenticator, two
 *  Hub users each with a single-user Notebook 6.4 server whose gateway is
 *  korch (their JUPYTERHUB_API_TOKEN as GatewayClient.auth_token), real
 *  kernels. tests/peers/hub_check.py starts the Hub (one for the whole
 *  file), drives it and the attacks, and prints one JSON line: each user
 *  sees only their own kernels, through korch and through their server; B
 *  cannot see, delete or join A's kernel; a forged, an expired, an
 *  ungranted token and a service's are refused with why; a token revoked at
 *  the Hub is refused within --hub-cache-seconds; korch's page logs in
 *  through the Hub's OAuth (a cookie, refused cross-site, a foreign state
 *  refused); the Hub down: a clear 503, korch still up.
 *
 *  hub_resolver_*: the resolver on its own (the cache's bound and TTL, the
 *  cookie, a Hub that is not there), no Hub needed.
 */
#include "serve_fixture.h"
#include "../src/server/hub.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

/* A port nobody listens on now (bound, read, closed). */
static int s_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    int port = -1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

static void s_hex(char *out, size_t n)
{
    FILE *f = fopen("/dev/urandom", "r");
    unsigned char b[64];
    size_t got = f ? fread(b, 1, n / 2, f) : 0;
    if (f)
        fclose(f);
    for (size_t i = 0; i < n / 2; i++)
        snprintf(out + 2 * i, 3, "%02x", i < got ? b[i] : (unsigned char)(i * 37));
}

TEST_T(hub_two_users_notebook_gateway, 150)
{
    char *dir = korch_test_mkdir("/tmp/korch-hub-XXXXXX");
    if (!CHECK(dir != NULL))
        return;
    int hub_port = s_free_port(), proxy_port = s_free_port(), api_port = s_free_port();
    char svc[33] = "", hub_api[96], hub_port_s[16], proxy_s[16], api_s[16], login[128], cb[160];
    s_hex(svc, 32);
    snprintf(hub_api, sizeof hub_api, "http://127.0.0.1:%d/hub/api", hub_port);
    snprintf(hub_port_s, sizeof hub_port_s, "%d", hub_port);
    snprintf(proxy_s, sizeof proxy_s, "%d", proxy_port);
    snprintf(api_s, sizeof api_s, "%d", api_port);
    snprintf(login, sizeof login, "http://127.0.0.1:%d/hub/api/oauth2/authorize", proxy_port);
    /* korch as the Hub would start a managed service: its token, name and
       OAuth callback in the environment (an external one here: the test
       owns its process) */
    setenv("JUPYTERHUB_API_TOKEN", svc, 1);
    setenv("JUPYTERHUB_SERVICE_NAME", "korch", 1);
    setenv("JUPYTERHUB_CLIENT_ID", "service-korch", 1);
    setenv("JUPYTERHUB_SERVICE_PREFIX", "/services/korch/", 1); /* the Hub's proxy routes it here */
    /* its OAuth callback is korch's own address, so its port is chosen here */
    int kport = s_free_port();
    char kport_s[16];
    snprintf(kport_s, sizeof kport_s, "%d", kport);
    snprintf(cb, sizeof cb, "http://127.0.0.1:%d/oauth_callback", kport);
    setenv("JUPYTERHUB_OAUTH_CALLBACK_URL", cb, 1);
    setenv("KORCH_LOG", "info", 1); /* its "JupyterHub: user 'alice'" lines */
    const char *args[] = {"--hub-api-url", hub_api, "--hub-cache-seconds", "3", "--hub-login-url", login,
                          "--port", kport_s, NULL};
    serve_t s;
    bool up = serve_start_args(&s, args);
    unsetenv("JUPYTERHUB_API_TOKEN");
    unsetenv("JUPYTERHUB_SERVICE_NAME");
    unsetenv("JUPYTERHUB_CLIENT_ID");
    unsetenv("JUPYTERHUB_SERVICE_PREFIX");
    unsetenv("JUPYTERHUB_OAUTH_CALLBACK_URL");
    unsetenv("KORCH_LOG");
    if (!up) {
        korch_test_rmdir(dir);
        return;
    }
    char korch[64];
    snprintf(korch, sizeof korch, "http://127.0.0.1:%d", kport);
    const char *argv[] = {PY, serve_peer("hub_check.py"), "--korch", korch, "--korch-token", s.token, "--dir", dir,
                          "--hub-port", hub_port_s, "--proxy-port", proxy_s, "--proxy-api-port", api_s,
                          "--service-token", svc, "--cache-s", "3", NULL};
    char *out = NULL, *err = NULL;
    int rc = korch_test_run(argv, NULL, &out, &err, 130);
    json_t *j = NULL;
    for (const char *p = out; p && *p && !j; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (*p == '{')
            j = json_loadb(p, strcspn(p, "\n"), 0, NULL);
    bool ok = CHECK(j != NULL) && CHECK(json_is_true(json_object_get(j, "ok"))) && CHECK_EQ(rc, 0);
    size_t i;
    json_t *f;
    json_array_foreach(json_object_get(j, "failures"), i, f)
        fprintf(stderr, "  hub_check: %s\n", json_string_value(f));
    char *d = j ? json_dumps(json_object_get(j, "details"), JSON_COMPACT) : NULL;
    fprintf(stderr, "  hub_check: %s (%.1f s) %.3000s\n", ok ? "ok" : "FAILED",
            json_number_value(json_object_get(j, "seconds")), d ? d : "");
    free(d);
    if (!ok && err && *err) {
        size_t len = strlen(err);
        fprintf(stderr, "  --- hub_check.py stderr (tail) ---\n%s\n", len > 3000 ? err + len - 3000 : err);
    }
    /* korch named who asked, from the Hub's answers */
    bool alice = serve_log_has(&s, "JupyterHub: user 'alice' (user)");
    bool bob = serve_log_has(&s, "JupyterHub: user 'bob' (user)");
    bool down = serve_log_has(&s, "cannot reach JupyterHub");
    CHECK(alice);
    CHECK(bob);
    CHECK(down);
    serve_stop(&s);
    if (!ok || !alice || !bob || !down) {
        serve_log_tail(&s);
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/hub.log", dir);
        FILE *hf = fopen(path, "r");
        if (hf) {
            fseek(hf, 0, SEEK_END);
            long n = ftell(hf);
            char tail[4001];
            fseek(hf, n > 4000 ? n - 4000 : 0, SEEK_SET);
            size_t got = fread(tail, 1, sizeof tail - 1, hf);
            tail[got] = 0;
            fprintf(stderr, "  --- hub.log (tail) ---\n%s\n", tail);
            fclose(hf);
        }
    }
    json_decref(j);
    unlink(s.log);
    free(out);
    free(err);
    korch_test_rmdir(dir);
}
