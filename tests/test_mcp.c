/*  korch's MCP server (src/server/mcp*.c) with real clients: the official
 *  TypeScript SDK (@modelcontextprotocol/sdk) over stdio (korch mcp) and
 *  Streamable HTTP (/mcp on korch serve), the MCP Inspector's CLI mode over
 *  both, a kernel whose output attacks the client (tests/npm/mcp/
 *  mcp_check.js), the sandbox and docker launchers, and a client sending
 *  korch mcp what no SDK would (mcp_stdio_hostile_input, no kernel). */
#include "test.h"
#include "serve_fixture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static bool s_npm_ready(void)
{
    static const char *const marks[] = {"@modelcontextprotocol/sdk/package.json",
                                        "@modelcontextprotocol/inspector/package.json", NULL};
    return korch_test_npm_ready("npm/mcp", marks, 200);
}

static const char *s_script(void)
{
    static char path[700];
    snprintf(path, sizeof path, "%s/tests/npm/mcp/mcp_check.js", korch_test_root());
    return path;
}

/* node mcp_check.js ARGS...: its "ok:" line, or the failures it printed. */
static void s_check(const char *const *argv, int timeout_s)
{
    char *out = NULL, *err = NULL;
    int rc = korch_test_run(argv, NULL, &out, &err, timeout_s);
    if (!CHECK_EQ(rc, 0) || !CHECK_CONTAINS(out ? out : "", "ok: "))
        fprintf(stderr, "  --- mcp_check.js ---\n%s\n  --- stderr (tail) ---\n%s\n", out ? out : "",
                err ? err + (strlen(err) > 6000 ? strlen(err) - 6000 : 0) : "");
    free(out);
    free(err);
}

/* korch mcp through the SDK's StdioClientTransport: every tool, the kernel attacking. */
TEST_T(mcp_stdio_sdk_client, 120)
{
    if (!s_npm_ready())
        return;
    char *dir = korch_test_mkdir("/tmp/korch-mcp-wd-XXXXXX");
    const char *argv[] = {"node", s_script(), "stdio", korch_test_korch_bin(), "mcp", "--launcher", "local",
                          "--workdir", dir, NULL};
    s_check(argv, 110);
    korch_test_rmdir(dir);
}

/* /mcp on korch serve through the SDK's StreamableHTTPClientTransport (every
   tool, then the session's end), then raw HTTP: no or a wrong token,
   malformed JSON, batches, sessions unknown or ended, bad versions, an
   oversized body, GET 405; the server then still answers and exits 0. */
TEST_T(mcp_http_sdk_client, 150)
{
    if (!s_npm_ready())
        return;
    char *dir = korch_test_mkdir("/tmp/korch-mcp-agents-XXXXXX");
    serve_t s;
    const char *extra[] = {"--agent-dir", dir, NULL};
    if (!serve_start_args(&s, extra)) {
        korch_test_rmdir(dir);
        return;
    }
    const char *argv[] = {"node", s_script(), "http", s.line, NULL};
    s_check(argv, 140);
    /* the session's kernel went with its DELETE */
    CHECK_EQ(serve_kernel_count(&s), 0);
    serve_stop(&s);
    korch_test_rmdir(dir);
}

/* korch serve --users FILE: alice's session and kernel are hers; bob's id
   probe and DELETE of it are 404, as for a session that does not exist. */
static char *s_mint(const char *users, const char *name)
{
    const char *argv[] = {korch_test_korch_bin(), "user", "add", name, "--users", users, NULL};
    char *out = NULL, *err = NULL;
    CHECK_EQ(korch_test_run(argv, NULL, &out, &err, 30), 0);
    free(err);
    if (out)
        out[strcspn(out, "\n")] = 0;
    return out;
}

TEST_T(mcp_http_users_apart, 90)
{
    if (!s_npm_ready())
        return;
    char *dir = korch_test_mkdir("/tmp/korch-mcp-users-XXXXXX");
    char users[600];
    snprintf(users, sizeof users, "%s/users.json", dir);
    char *ta = s_mint(users, "alice"), *tb = s_mint(users, "bob");
    serve_t s;
    const char *extra[] = {"--users", users, "--agent-dir", dir, NULL};
    if (ta && tb && *ta && *tb && serve_start_args(&s, extra)) {
        char base[300];
        snprintf(base, sizeof base, "%.*s", (int)strlen(s.url) - 1, s.url); /* without its last '/' */
        const char *argv[] = {"node", s_script(), "users", base, ta, tb, NULL};
        s_check(argv, 80);
        serve_stop(&s);
    }
    free(ta);
    free(tb);
    korch_test_rmdir(dir);
}

/* The MCP Inspector's CLI mode (npx @modelcontextprotocol/inspector --cli),
   over stdio and over HTTP with the token in a header. */
TEST_T(mcp_inspector_cli, 120)
{
    if (!s_npm_ready())
        return;
    char bin[700];
    snprintf(bin, sizeof bin, "%s/tests/npm/mcp/node_modules/.bin/mcp-inspector", korch_test_root());
    char *out = NULL, *err = NULL;
    const char *list[] = {bin, "--cli", korch_test_korch_bin(), "mcp", "--launcher", "local", "--method",
                          "tools/list", NULL};
    CHECK_EQ(korch_test_run(list, NULL, &out, &err, 60), 0);
    CHECK_CONTAINS(out ? out : "", "\"name\": \"run_code\"");
    CHECK_CONTAINS(out ? out : "", "\"name\": \"fetch_file\"");
    free(out);
    free(err);
    const char *callv[] = {bin, "--cli", korch_test_korch_bin(), "mcp", "--launcher", "local", "--method",
                           "tools/call", "--tool-name", "run_code", "--tool-arg", "code=print(6*7)", NULL};
    CHECK_EQ(korch_test_run(callv, NULL, &out, &err, 60), 0);
    CHECK_CONTAINS(out ? out : "", "42\\n");
    CHECK_CONTAINS(out ? out : "", "\"isError\": false");
    free(out);
    free(err);
    serve_t s;
    if (!serve_start(&s))
        return;
    char url[300], auth[300];
    snprintf(url, sizeof url, "%smcp", s.url);
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", s.token);
    const char *hcall[] = {bin, "--cli", url, "--transport", "http", "--header", auth, "--method", "tools/call",
                           "--tool-name", "run_code", "--tool-arg", "code=sum(range(10))", NULL};
    CHECK_EQ(korch_test_run(hcall, NULL, &out, &err, 60), 0);
    CHECK_CONTAINS(out ? out : "", "\"text\": \"45\\n\"");
    free(out);
    free(err);
    /* a wrong token: the Inspector fails, saying so */
    const char *bad[] = {bin, "--cli", url, "--transport", "http", "--header", "Authorization: Bearer wrong",
                         "--method", "tools/list", NULL};
    CHECK_NE(korch_test_run(bad, NULL, &out, &err, 60), 0);
    char both[8192];
    snprintf(both, sizeof both, "%s%s", out ? out : "", err ? err : "");
    CHECK(strstr(both, "403") || strstr(both, "token"));
    free(out);
    free(err);
    serve_stop(&s);
}

/* The launcher's part (state, a chart, files through its put/get ops, interrupt,
   restart) with korch mcp --launcher sandbox and docker. */
static void s_quick(const char *launcher)
{
    if (!s_npm_ready())
        return;
    const char *argv[] = {"node", s_script(), "quick", korch_test_korch_bin(), "mcp", "--launcher", launcher, NULL};
    s_check(argv, 110);
}

TEST_T(mcp_stdio_sandbox_launcher, 120) { s_quick("sandbox"); }
TEST_T(mcp_stdio_docker_launcher, 120) { s_quick("docker"); }

/* Bytes no SDK sends, straight into korch mcp's stdin (no kernel starts):
   garbage, a line of 17 MiB (over the 16 MiB limit), NULs and invalid
   UTF-8, JSON nested 100000 deep, wrong types; each is answered with a
   JSON-RPC error on one line of stdout, and a ping after them all still
   gets its answer; korch mcp ends 0 when stdin closes. */
TEST_T(mcp_stdio_hostile_input, 60)
{
    size_t big = (17u << 20) + 10, deep = 100000;
    size_t cap = big + 2 * deep + 4096;
    char *in = malloc(cap);
    if (!CHECK(in))
        return;
    size_t n = 0;
    n += (size_t)snprintf(in + n, cap - n,
                          "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":"
                          "\"2025-11-25\",\"capabilities\":{},\"clientInfo\":{\"name\":\"x\",\"version\":\"1\"}}}\n"
                          "not json at all\n"
                          "{\"jsonrpc\":\"1.0\",\"id\":2,\"method\":\"ping\"}\n"
                          "{\"jsonrpc\":\"2.0\",\"id\":{\"a\":1},\"method\":\"ping\"}\n"
                          "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":42}\n"
                          "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/call\",\"params\":{\"name\":7}}\n"
                          "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/call\",\"params\":{\"name\":\"x\\u001b[2J\"}}\n"
                          "{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"ping\",\"id\":7}\n");
    static const char utf[] = "{\"a\":\"\xff\xfe\x00\x01\"}\n"; /* invalid UTF-8 and a NUL */
    memcpy(in + n, utf, sizeof utf - 1);
    n += sizeof utf - 1;
    memset(in + n, '[', deep);
    n += deep;
    memset(in + n, ']', deep);
    n += deep;
    in[n++] = '\n';
    memset(in + n, 'x', big);
    n += big;
    in[n++] = '\n';
    n += (size_t)snprintf(in + n, cap - n, "\n\r\n{\"jsonrpc\":\"2.0\",\"id\":\"last\",\"method\":\"ping\"}\n");
    /* korch_test_run takes a string: the NUL above would end it, so write a file and redirect */
    char path[128];
    snprintf(path, sizeof path, "/tmp/korch-mcp-hostile-%d.in", (int)getpid());
    FILE *f = fopen(path, "wb");
    if (!CHECK(f)) {
        free(in);
        return;
    }
    CHECK_EQ(fwrite(in, 1, n, f), n);
    fclose(f);
    free(in);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "exec '%s' mcp --launcher local < '%s'", korch_test_korch_bin(), path);
    const char *argv[] = {"/bin/sh", "-c", cmd, NULL};
    char *out = NULL, *err = NULL;
    CHECK_EQ(korch_test_run(argv, NULL, &out, &err, 50), 0);
    unlink(path);
    const char *o = out ? out : "";
    CHECK_CONTAINS(o, "\"id\":1,\"result\":{\"protocolVersion\":\"2025-11-25\"");
    CHECK_CONTAINS(o, "\"code\":-32700,\"message\":\"Parse error: '[' or '{' expected");
    CHECK_CONTAINS(o, "not a JSON-RPC 2.0 message");
    CHECK_CONTAINS(o, "\\\"id\\\" must be a string or an integer");
    CHECK_CONTAINS(o, "\\\"method\\\" must be a string");
    CHECK_CONTAINS(o, "unable to decode byte 0xff");
    CHECK_CONTAINS(o, "\"id\":4,\"error\":{\"code\":-32602");
    CHECK_CONTAINS(o, "\"id\":5,\"error\":{\"code\":-32602,\"message\":\"Unknown tool: x\\\\x1b[2J");
    CHECK_CONTAINS(o, "duplicate object key");
    CHECK_CONTAINS(o, "maximum parsing depth");
    CHECK_CONTAINS(o, "a message over 16777216 bytes was skipped");
    CHECK_CONTAINS(o, "{\"jsonrpc\":\"2.0\",\"id\":\"last\",\"result\":{}}");
    /* every answer is one line of ASCII JSON */
    int lines = 0;
    for (const char *p = o; *p; p++) {
        CHECK((unsigned char)*p < 0x80 && (*p == '\n' || (unsigned char)*p >= 0x20));
        if (*p == '\n')
            lines++;
    }
    CHECK_EQ(lines, 12);
    free(out);
    free(err);
}
