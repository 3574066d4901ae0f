/*  korch's MCP server on stdio (`korch mcp`): the Model Context Protocol
 *  read from one file descriptor and written to another, one JSON-RPC
 *  message per line, as the spec's stdio transport has it ("Messages are
 *  delimited by newlines, and MUST NOT contain embedded newlines"; the
 *  server's logs go to stderr). One session, with a persistent kernel of
 *  its own started by the first tool that needs it; the same protocol and
 *  tools as /mcp on korch serve (src/server/mcp*.c).
 *
 *  Threading: the caller's; the loop runs on it.
 */
#ifndef KORCH_MCP_H
#define KORCH_MCP_H

#include <stdbool.h>
#include <stddef.h>
#include "korch/error.h"
#include "korch/launcher.h"
#include "korch/loop.h"

typedef struct {
    korch_launcher_t *launcher;     /* borrowed; NULL = local processes */
    const char *kernel;             /* default kernelspec (default python3) */
    const char *cwd;                /* the kernel's work dir (NULL: the launcher's default) */
    int in_fd, out_fd;              /* the transport (0 and 1 for a real client) */
    size_t max_message;             /* bytes of one incoming line (default 16 MiB); longer is answered
                                       with a parse error and skipped to its newline */
    size_t max_pending;             /* bytes of answers waiting for a client that does not read
                                       (default 256 MiB): over it korch stops, saying why */
    size_t max_upload;              /* bytes of one upload_file (default 64 MiB) */
    size_t max_chars;               /* text of one tool result (0 = the agent's 4000) */
    int kernel_start_timeout_ms;    /* default 60000 */
    bool (*quit)(void *arg);        /* checked every loop round (a signal); NULL = none */
    void *quit_arg;
} korch_mcp_stdio_opts_t;

/* Serve MCP on in_fd/out_fd until in_fd ends (the client closed it) or
   quit holds, then shut the kernel down. KORCH_OK at a clean end; else err
   says why (cannot read or write, a client over max_pending). */
korch_rc_t korch_mcp_stdio_run(korch_loop_t *loop, const korch_mcp_stdio_opts_t *o, korch_err_t *err);

#endif
