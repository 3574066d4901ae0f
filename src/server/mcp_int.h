/*  Inside korch's MCP server (mcp*.c): the Model Context Protocol over
 *  JSON-RPC 2.0, its tools on a persistent kernel, and its two transports.
 *  Not an API outside src/server (korch/mcp.h is the stdio entry point; the
 *  HTTP one is the /mcp route of routes.c).
 *
 *  The files, top to bottom; each calls only those below it:
 *
 *  mcp_http.c   Streamable HTTP at /mcp on korch serve (POST a message,
 *               DELETE a session), its sessions (Mcp-Session-Id), behind
 *               the server's token like every other route.
 *  mcp_stdio.c  `korch mcp`: one session on stdin/stdout, a line per
 *               message, a kernel manager of its own.
 *  mcp.c        one MCP session (srv_mcp_t): a message in, its answer
 *               out; initialize and version negotiation, ping, tools/list,
 *               tools/call, notifications; JSON-RPC errors. Transport-free:
 *               both transports above hand it the same bytes.
 *  mcp_tools.c  the tools (run_code, list_files, upload_file, fetch_file,
 *               interrupt, restart, list_kernelspecs) on the session's
 *               kernel, through the kernel manager (kmgr.h) and the
 *               launcher's ops: every launcher alike. What a tool shows
 *               of an execution is what the agent's model is shown
 *               (korch_feedback_build: head + tail cut, charts as images)
 *               made terminal-safe (korch_termsafe_str).
 *
 *  Everything runs on the loop's thread. A json_t argument is borrowed
 *  unless the comment says stolen.
 */
#ifndef KORCH_SERVER_MCP_INT_H
#define KORCH_SERVER_MCP_INT_H

#include "server_int.h"

/* The revisions korch speaks, newest first; the npm SDK's latest first. */
#define MCP_LATEST_VERSION "2025-11-25"
extern const char *const srv_mcp_versions[];

#define MCP_MAX_CALLS 32            /* requests of one session under way at once */
#define MCP_MAX_QUEUED 16           /* run_code calls waiting behind the running one */
#define MCP_MAX_FILE (16u << 20)    /* fetch_file: bytes read from the kernel's work dir */

typedef struct srv_mcp srv_mcp_t;
typedef struct srv_mcp_call srv_mcp_call_t;

/* The answer to one message: json (len bytes, borrowed for the call) is
   the JSON-RPC response to send, NULL when there is nothing to send (a
   notification, a response from the client, a cancelled request). Called
   exactly once per srv_mcp_handle that returned a call, on the loop,
   never after srv_mcp_call_cancel. */
typedef void(srv_mcp_answer_fn)(const char *json, size_t len, void *arg);

typedef struct {
    korch_loop_t *loop;
    srv_kmgr_t *kmgr;               /* borrowed: where the session's kernel runs */
    srv_pool_t *pool;               /* borrowed; NULL = none (kernels from the warm pool when it has one) */
    const char *kernel;             /* default kernelspec ("python3") */
    const char *cwd;                /* the kernel's work dir (NULL: the launcher's default); copied */
    const char *owner;              /* the user the session and its kernel belong to (ident.h; NULL ""); copied */
    int max_kernels;                /* of the kernel manager (0 = no limit) */
    size_t max_chars;               /* text of one result (0 = the agent's 4000) */
    size_t max_upload;              /* bytes of one upload_file */
    /* A kernel of the session is ready (after a start or a restart): the
       HTTP side makes its outputs untrusted for other clients (taint.h). */
    void (*on_kernel)(srv_kernel_t *mk, const char *session_id, void *arg);
    void *on_kernel_arg;
} srv_mcp_opts_t;

/* A session with id (copied; "" for stdio). opts copied. NULL when out of memory. */
srv_mcp_t *srv_mcp_new(const srv_mcp_opts_t *o, const char *id);
/* Cancel its calls (their answers never come), shut its kernel down, free it. */
void srv_mcp_destroy(srv_mcp_t **m);
const char *srv_mcp_id(const srv_mcp_t *m);
/* The negotiated revision ("" before initialize). */
const char *srv_mcp_version(const srv_mcp_t *m);
/* Its kernel's id ("" none yet). */
const char *srv_mcp_kernel_id(const srv_mcp_t *m);
/* Requests under way. */
size_t srv_mcp_busy(const srv_mcp_t *m);
/* Was initialize answered (the HTTP side hands out the session id then). */
bool srv_mcp_initialized(const srv_mcp_t *m);

/* One message from the client (any bytes: malformed ones are answered
   with JSON-RPC's parse or invalid-request error). Returns NULL when the
   answer was given inside (fn has run), else the call under way: fn runs
   later, or never after srv_mcp_call_cancel. */
srv_mcp_call_t *srv_mcp_handle(srv_mcp_t *m, const char *data, size_t len, srv_mcp_answer_fn *fn, void *arg);
/* fn will not be called (the client has gone); *c is NULLed. A run_code
   under way goes on in the kernel. */
void srv_mcp_call_cancel(srv_mcp_call_t **c);

/* A call a tool of mcp_tools.c answers (mcp.c owns the call object). */
struct srv_mcp_call {
    srv_mcp_t *m;
    json_t *id;                     /* the request's id (owned) */
    srv_mcp_answer_fn *fn;
    void *arg;
    bool cancelled;                 /* the client is gone or asked: no answer */
    /* the tool's state */
    const char *tool;
    json_t *args;                   /* arguments (owned) */
    korch_exec_t *ex;               /* run_code under way */
    korch_op_t *op;                 /* a file op under way */
    srv_kwait_t *wait;              /* waiting for the kernel */
    int phase;                      /* restart: 1 once the restart was asked for */
};

/* mcp.c: answer c with result (stolen) or a JSON-RPC error, and free it. */
void srv_mcp_result(srv_mcp_call_t *c, json_t *result);
void srv_mcp_error(srv_mcp_call_t *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* A tool's result: {content: [{type: text, text}], isError}. */
void srv_mcp_tool_text(srv_mcp_call_t *c, bool is_error, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The session's options and id for the tools. */
const srv_mcp_opts_t *srv_mcp_opts(const srv_mcp_t *m);

/* mcp_tools.c */
/* The tools' descriptions for tools/list (new array). */
json_t *srv_mcp_tools_list(void);
/* The tool of this name (static storage: compare pointers), NULL none. */
const char *srv_mcp_tool_name(const char *name);
/* Start c's tool (c->tool, c->args): it answers c now or later. false when
   there is no such tool (c not answered). */
bool srv_mcp_tool_call(srv_mcp_call_t *c);
/* The tools' state of a session (its kernel, run_code's queue). */
typedef struct srv_mcp_kstate srv_mcp_kstate_t;
srv_mcp_kstate_t *srv_mcp_kstate_new(void);
/* Shut its kernel down and free it (its calls were cancelled first). */
void srv_mcp_kstate_destroy(srv_mcp_kstate_t **k, srv_kmgr_t *kmgr);
const char *srv_mcp_kstate_kernel_id(const srv_mcp_kstate_t *k);
/* c is going (answered or cancelled): forget it; a run_code under way is
   left to finish in the kernel. */
void srv_mcp_tool_forget(srv_mcp_call_t *c);
/* The session's tool state (mcp.c owns it). */
srv_mcp_kstate_t *srv_mcp_kstate(srv_mcp_t *m);
/* notifications/cancelled of a run_code under way: interrupt the kernel. */
void srv_mcp_tool_interrupt(srv_mcp_call_t *c);

#endif
