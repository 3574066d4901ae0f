/*  One MCP session: JSON-RPC 2.0 messages in, answers out (mcp_int.h).
 *
 *  The Model Context Protocol, revision 2025-11-25 (what the npm SDK
 *  1.32 speaks first), and the earlier ones it negotiates down to:
 *
 *    "The client MUST initiate this phase by sending an initialize request
 *     containing: Protocol version supported ...  If the server supports
 *     the requested protocol version, it MUST respond with the same
 *     version. Otherwise, the server MUST respond with another protocol
 *     version it supports. This SHOULD be the latest version supported by
 *     the server."  (basic/lifecycle)
 *
 *    "Requests MUST include a string or integer ID.  Unlike base JSON-RPC,
 *     the ID MUST NOT be null."  (basic/index)
 *
 *  Errors: what breaks JSON-RPC or MCP itself (malformed JSON -32700, not
 *  a request -32600, no such method -32601, bad params or an unknown tool
 *  -32602) is a JSON-RPC error; what goes wrong inside a tool (the code
 *  raised, a file is missing, a bad argument the model can correct) is a
 *  tool result with isError: true, which the model reads ("Tool Execution
 *  Errors", server/tools). Batches (JSON arrays), dropped from the
 *  protocol in 2025-06-18, are answered -32600.
 */
#include "mcp_int.h"
#include "korch/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const srv_mcp_versions[] = {MCP_LATEST_VERSION, "2025-06-18", "2025-03-26", "2024-11-05", NULL};

enum {
    RPC_PARSE = -32700,
    RPC_INVALID_REQUEST = -32600,
    RPC_NO_METHOD = -32601,
    RPC_INVALID_PARAMS = -32602,
    RPC_INTERNAL = -32603,
};

struct srv_mcp {
    srv_mcp_opts_t o;
    char id[40];
    char cwd[PATH_MAX];
    char owner[64];
    char version[16];           /* negotiated, "" before initialize */
    bool initialized;           /* initialize answered */
    bool client_ready;          /* notifications/initialized heard */
    zlistx_t *calls;            /* srv_mcp_call_t* under way (owned) */
    srv_mcp_kstate_t *ks;       /* the tools' state: the kernel */
    srv_mcp_call_t *current;    /* being handled by srv_mcp_handle; NULL once answered */
};

/* ------------------------------------------------------------ answers */

static void s_call_free(srv_mcp_call_t **pc)
{
    srv_mcp_call_t *c = *pc;
    if (!c)
        return;
    *pc = NULL;
    srv_mcp_tool_forget(c);
    json_decref(c->id);
    json_decref(c->args);
    free(c);
}

/* Send msg (stolen) as c's answer, unless c was cancelled, then free c. */
static void s_answer(srv_mcp_call_t *c, json_t *msg)
{
    srv_mcp_t *m = c->m;
    void *h = m ? zlistx_find(m->calls, c) : NULL;
    if (h)
        zlistx_detach(m->calls, h);
    if (m && m->current == c)
        m->current = NULL;
    if (!c->cancelled && c->fn) {
        /* JSON_ENSURE_ASCII: any byte a kernel sent arrives as escapes */
        char *text = msg ? json_dumps(msg, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
        if (msg && !text) /* out of memory: say so rather than leave the client waiting */
            text = strdup("{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32603,\"message\":\"out of memory\"}}");
        c->fn(text, text ? strlen(text) : 0, c->arg);
        free(text);
    }
    json_decref(msg);
    s_call_free(&c);
}

static json_t *s_error_msg(json_t *id, int code, const char *text)
{
    return json_pack("{s:s, s:O, s:{s:i, s:s}}", "jsonrpc", "2.0", "id", id ? id : json_null(), "error", "code", code,
                     "message", text);
}

void srv_mcp_result(srv_mcp_call_t *c, json_t *result)
{
    json_t *msg = json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", c->id ? c->id : json_null(), "result",
                            result ? result : json_object());
    s_answer(c, msg);
}

void srv_mcp_error(srv_mcp_call_t *c, int code, const char *fmt, ...)
{
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    s_answer(c, s_error_msg(c->id, code, text));
}

void srv_mcp_tool_text(srv_mcp_call_t *c, bool is_error, const char *fmt, ...)
{
    char text[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    srv_mcp_result(c, json_pack("{s:[{s:s, s:s}], s:b}", "content", "type", "text", "text", text, "isError", is_error));
}

/* ------------------------------------------------------------ session */

srv_mcp_t *srv_mcp_new(const srv_mcp_opts_t *o, const char *id)
{
    srv_mcp_t *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->o = *o;
    if (o->cwd) {
        snprintf(m->cwd, sizeof m->cwd, "%s", o->cwd);
        m->o.cwd = m->cwd;
    }
    snprintf(m->owner, sizeof m->owner, "%s", o->owner ? o->owner : "");
    m->o.owner = m->owner;
    snprintf(m->id, sizeof m->id, "%s", id ? id : "");
    m->calls = zlistx_new();
    m->ks = srv_mcp_kstate_new();
    if (!m->calls || !m->ks) {
        srv_mcp_destroy(&m);
        return NULL;
    }
    return m;
}

void srv_mcp_destroy(srv_mcp_t **pm)
{
    srv_mcp_t *m = *pm;
    if (!m)
        return;
    *pm = NULL;
    if (m->calls) {
        srv_mcp_call_t *c;
        while ((c = zlistx_detach(m->calls, NULL)))
            s_call_free(&c); /* their answers never come */
        zlistx_destroy(&m->calls);
    }
    srv_mcp_kstate_destroy(&m->ks, m->o.kmgr);
    free(m);
}

const char *srv_mcp_id(const srv_mcp_t *m) { return m->id; }
const char *srv_mcp_version(const srv_mcp_t *m) { return m->version; }
const char *srv_mcp_kernel_id(const srv_mcp_t *m) { return srv_mcp_kstate_kernel_id(m->ks); }
size_t srv_mcp_busy(const srv_mcp_t *m) { return zlistx_size(m->calls); }
bool srv_mcp_initialized(const srv_mcp_t *m) { return m->initialized; }
const srv_mcp_opts_t *srv_mcp_opts(const srv_mcp_t *m) { return &m->o; }
srv_mcp_kstate_t *srv_mcp_kstate(srv_mcp_t *m) { return m->ks; }

void srv_mcp_call_cancel(srv_mcp_call_t **pc)
{
    srv_mcp_call_t *c = *pc;
    if (!c)
        return;
    *pc = NULL;
    c->cancelled = true;
    c->fn = NULL;
    /* a run_code keeps running in the kernel; its answer goes nowhere */
    if (!c->ex) {
        void *h = c->m ? zlistx_find(c->m->calls, c) : NULL;
        if (h)
            zlistx_detach(c->m->calls, h);
        s_call_free(&c);
    }
}

/* ------------------------------------------------------------ methods */

static const char s_instructions[] =
    "korch runs your code in a persistent Jupyter kernel, confined (a sandbox or a container) unless its operator "
    "chose otherwise. Variables persist between run_code calls until restart. Charts (matplotlib and the like) come "
    "back as images; long output is cut in the middle. Files: upload_file puts one into the kernel's working "
    "directory, list_files and fetch_file read it back.";

static void s_initialize(srv_mcp_call_t *c, json_t *params)
{
    srv_mcp_t *m = c->m;
    json_t *jv = json_object_get(params, "protocolVersion");
    if (!json_is_string(jv)) {
        srv_mcp_error(c, RPC_INVALID_PARAMS, "initialize needs params.protocolVersion (a string such as \"%s\")",
                      MCP_LATEST_VERSION);
        return;
    }
    const char *want = json_string_value(jv), *use = MCP_LATEST_VERSION;
    for (int i = 0; srv_mcp_versions[i]; i++)
        if (strcmp(want, srv_mcp_versions[i]) == 0)
            use = srv_mcp_versions[i];
    if (m->initialized && strcmp(use, m->version) != 0) {
        srv_mcp_error(c, RPC_INVALID_REQUEST, "this session was initialized with protocol version %s already",
                      m->version);
        return;
    }
    snprintf(m->version, sizeof m->version, "%s", use);
    m->initialized = true;
    json_t *info = json_object_get(params, "clientInfo");
    korch_debug("mcp %.8s: initialize by %.80s (protocol %s)", m->id,
                json_is_string(json_object_get(info, "name")) ? json_string_value(json_object_get(info, "name"))
                                                              : "a client",
                use);
    srv_mcp_result(c, json_pack("{s:s, s:{s:{s:b}}, s:{s:s, s:s, s:s}, s:s}", "protocolVersion", use, "capabilities",
                                "tools", "listChanged", 0, "serverInfo", "name", "korch", "title",
                                "korch: a confined, persistent Jupyter kernel", "version", KORCH_VERSION,
                                "instructions", s_instructions));
}

static void s_tools_call(srv_mcp_call_t *c, json_t *params)
{
    json_t *name = json_object_get(params, "name"), *args = json_object_get(params, "arguments");
    if (!json_is_string(name)) {
        srv_mcp_error(c, RPC_INVALID_PARAMS, "tools/call needs params.name (a string; tools/list names them)");
        return;
    }
    if (args && !json_is_object(args) && !json_is_null(args)) {
        srv_mcp_error(c, RPC_INVALID_PARAMS, "tools/call's params.arguments must be an object");
        return;
    }
    c->tool = srv_mcp_tool_name(json_string_value(name));
    if (!c->tool) {
        char shown[64];
        korch_log_escape(shown, sizeof shown, json_string_value(name), json_string_length(name), 0);
        srv_mcp_error(c, RPC_INVALID_PARAMS, "Unknown tool: %s (tools/list names korch's tools)", shown);
        return;
    }
    c->args = json_is_object(args) ? json_incref(args) : json_object();
    if (!srv_mcp_tool_call(c))
        srv_mcp_error(c, RPC_INVALID_PARAMS, "Unknown tool");
}

/* A request (id set): answered now or by its tool later. */
static void s_request(srv_mcp_call_t *c, const char *method, json_t *params)
{
    srv_mcp_t *m = c->m;
    if (strcmp(method, "initialize") == 0) {
        s_initialize(c, params);
        return;
    }
    if (strcmp(method, "ping") == 0) {
        srv_mcp_result(c, json_object());
        return;
    }
    if (!m->initialized) {
        srv_mcp_error(c, RPC_INVALID_REQUEST, "send initialize first (this session is not initialized)");
        return;
    }
    if (strcmp(method, "tools/list") == 0)
        srv_mcp_result(c, json_pack("{s:o}", "tools", srv_mcp_tools_list()));
    else if (strcmp(method, "tools/call") == 0)
        s_tools_call(c, params);
    else {
        char shown[80];
        korch_log_escape(shown, sizeof shown, method, strlen(method), 0);
        srv_mcp_error(c, RPC_NO_METHOD, "Method not found: %s (korch offers tools only)", shown);
    }
}

/* A notification (no id): never answered. */
static void s_notification(srv_mcp_t *m, const char *method, json_t *params)
{
    if (strcmp(method, "notifications/initialized") == 0) {
        m->client_ready = true;
        return;
    }
    if (strcmp(method, "notifications/cancelled") == 0) {
        json_t *rid = json_object_get(params, "requestId");
        srv_mcp_call_t *c;
        for (c = zlistx_first(m->calls); c; c = zlistx_next(m->calls))
            if (rid && c->id && json_equal(rid, c->id) && !c->cancelled)
                break;
        if (!c)
            return; /* "The receiver MAY ignore ... unknown or already completed" */
        /* "Receivers ... SHOULD NOT send a response for the cancelled request" */
        srv_mcp_answer_fn *fn = c->fn;
        void *arg = c->arg;
        c->fn = NULL;
        c->cancelled = true;
        if (fn)
            fn(NULL, 0, arg); /* its transport learns there is nothing to send */
        srv_mcp_tool_interrupt(c);
        return;
    }
    /* others (progress, roots changed ...) ask nothing of a server without them */
}

static bool s_id_ok(json_t *id) { return json_is_string(id) || json_is_integer(id); }

srv_mcp_call_t *srv_mcp_handle(srv_mcp_t *m, const char *data, size_t len, srv_mcp_answer_fn *fn, void *arg)
{
    srv_mcp_call_t *c = calloc(1, sizeof *c);
    if (!c) {
        static const char oom[] = "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32603,\"message\":\"out of "
                                  "memory\"}}";
        fn(oom, sizeof oom - 1, arg);
        return NULL;
    }
    c->m = m;
    c->fn = fn;
    c->arg = arg;
    zlistx_add_end(m->calls, c);
    m->current = c;
    json_error_t jerr;
    json_t *msg = json_loadb(data ? data : "", len, JSON_REJECT_DUPLICATES, &jerr);
    if (!msg) {
        char why[200];
        korch_log_escape(why, sizeof why, jerr.text, strlen(jerr.text), 0);
        srv_mcp_error(c, RPC_PARSE, "Parse error: %s (at byte %d); send one JSON-RPC message", why, jerr.position);
        return NULL;
    }
    if (json_is_array(msg)) {
        srv_mcp_error(c, RPC_INVALID_REQUEST,
                      "Invalid Request: JSON-RPC batches are not supported (MCP dropped them in 2025-06-18); send one "
                      "message at a time");
        json_decref(msg);
        return NULL;
    }
    json_t *id = json_is_object(msg) ? json_object_get(msg, "id") : NULL;
    if (s_id_ok(id))
        c->id = json_incref(id);
    json_t *jmethod = json_object_get(msg, "method"), *params = json_object_get(msg, "params");
    const char *version = json_string_value(json_object_get(msg, "jsonrpc"));
    if (!json_is_object(msg) || !version || strcmp(version, "2.0") != 0) {
        srv_mcp_error(c, RPC_INVALID_REQUEST, "Invalid Request: not a JSON-RPC 2.0 message (\"jsonrpc\": \"2.0\")");
        goto out;
    }
    if (!jmethod) { /* a response or an error from the client: korch asks it nothing, so nothing to do */
        bool reply = json_object_get(msg, "result") || json_object_get(msg, "error");
        if (reply)
            s_answer(c, NULL);
        else
            srv_mcp_error(c, RPC_INVALID_REQUEST, "Invalid Request: a message needs a \"method\"");
        goto out;
    }
    if (!json_is_string(jmethod)) {
        srv_mcp_error(c, RPC_INVALID_REQUEST, "Invalid Request: \"method\" must be a string");
        goto out;
    }
    if (params && !json_is_object(params)) {
        srv_mcp_error(c, RPC_INVALID_PARAMS, "Invalid params: \"params\" must be an object");
        goto out;
    }
    if (!id) { /* a notification */
        s_notification(m, json_string_value(jmethod), params);
        s_answer(c, NULL);
        goto out;
    }
    if (!c->id) {
        srv_mcp_error(c, RPC_INVALID_REQUEST, "Invalid Request: \"id\" must be a string or an integer (not null)");
        goto out;
    }
    if (zlistx_size(m->calls) > MCP_MAX_CALLS) {
        srv_mcp_error(c, RPC_INTERNAL, "too many requests under way in this session (at most %d): wait for answers",
                      MCP_MAX_CALLS);
        goto out;
    }
    s_request(c, json_string_value(jmethod), params ? params : NULL);
out:
    json_decref(msg);
    /* still current: under way (its tool answers later); NULL: answered inside */
    srv_mcp_call_t *left = m->current;
    m->current = NULL;
    return left;
}
