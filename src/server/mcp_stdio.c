/*  `korch mcp`: MCP's stdio transport (korch/mcp.h) around one session of
 *  mcp.c, with a kernel manager of its own (no HTTP, no relay).
 *
 *  From the spec (basic/transports): "The server reads JSON-RPC messages
 *  from its standard input (stdin) and sends messages to its standard
 *  output (stdout). Messages are individual JSON-RPC requests,
 *  notifications, or responses. Messages are delimited by newlines, and
 *  MUST NOT contain embedded newlines. The server MAY write UTF-8 strings
 *  to its standard error (stderr) for logging purposes. The server MUST
 *  NOT write anything to its stdout that is not a valid MCP message."
 *
 *  Both ends are bounded: a line over max_message is answered with a parse
 *  error and skipped up to its newline; answers wait for a client that
 *  does not read up to max_pending bytes (stdout is non-blocking, written
 *  when the loop says it is writable), then korch stops and says why.
 */
#include "mcp_int.h"
#include "korch/buf.h"
#include "korch/log.h"
#include "korch/mcp.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    const korch_mcp_stdio_opts_t *o;
    korch_loop_t *loop;
    srv_mcp_t *m;
    korch_buf_t in;             /* the line being read */
    bool skipping;              /* a line over max_message: dropped to its newline */
    korch_buf_t out;            /* answers not written yet: out.p[out_off .. out.len) */
    size_t out_off;
    bool out_watch;             /* waiting for stdout to be writable */
    bool eof;                   /* stdin ended */
    bool failed;
    korch_err_t err;
} s_io_t;

static int s_on_out(korch_loop_t *loop, int fd, unsigned revents, void *arg);

/* Write what is pending; watch stdout while some is left. */
static void s_flush(s_io_t *io)
{
    while (io->out_off < io->out.len) {
        ssize_t n = write(io->o->out_fd, io->out.p + io->out_off, io->out.len - io->out_off);
        if (n > 0) {
            io->out_off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        korch_err_set(&io->err, KORCH_E_IO, "cannot write to the MCP client: %s", n < 0 ? strerror(errno) : "closed");
        io->failed = true;
        korch_loop_break(io->loop);
        return;
    }
    if (io->out_off == io->out.len) {
        korch_buf_reset(&io->out);
        io->out_off = 0;
    }
    bool want = io->out_off < io->out.len;
    if (want != io->out_watch) {
        if (want)
            korch_loop_poller_ev(io->loop, io->o->out_fd, KORCH_POLL_OUT, s_on_out, io);
        else
            korch_loop_poller_end(io->loop, io->o->out_fd);
        io->out_watch = want;
    }
}

static int s_on_out(korch_loop_t *loop, int fd, unsigned revents, void *arg)
{
    s_io_t *io = arg;
    s_flush(io);
    return korch_loop_rc(loop);
}

static void s_on_answer(const char *json, size_t len, void *arg)
{
    s_io_t *io = arg;
    if (!json || io->failed)
        return;
    korch_err_t err = {0};
    /* the answer is compact JSON, ASCII-escaped: it has no newline of its own */
    if (korch_buf_add(&io->out, json, len, "answers waiting for the MCP client", &err) != KORCH_OK ||
        korch_buf_add(&io->out, "\n", 1, "answers waiting for the MCP client", &err) != KORCH_OK) {
        korch_err_set(&io->err, err.rc, "%s (the client does not read its answers)", err.msg);
        io->failed = true;
        korch_loop_break(io->loop);
        return;
    }
    s_flush(io);
}

static void s_line(s_io_t *io, const char *p, size_t n)
{
    if (n && p[n - 1] == '\r')
        n--;
    size_t i = 0;
    while (i < n && (p[i] == ' ' || p[i] == '\t'))
        i++;
    if (i == n)
        return; /* blank lines between messages: nothing */
    srv_mcp_handle(io->m, p + i, n - i, s_on_answer, io); /* answers go to s_on_answer, now or later */
}

static void s_too_long(s_io_t *io)
{
    char msg[200];
    snprintf(msg, sizeof msg,
             "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32700,\"message\":\"Parse error: a message over "
             "%zu bytes was skipped (korch mcp's limit for one line)\"}}",
             io->o->max_message);
    s_on_answer(msg, strlen(msg), io);
}

static int s_on_in(korch_loop_t *loop, int fd, void *arg)
{
    s_io_t *io = arg;
    char buf[65536];
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
        return 0;
    if (n <= 0) {
        if (n < 0)
            korch_warn("cannot read from the MCP client: %s", strerror(errno));
        io->eof = true;
        korch_loop_poller_end(loop, fd);
        korch_loop_break(loop);
        return korch_loop_rc(loop);
    }
    const char *p = buf, *end = buf + n;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t take = (size_t)((nl ? nl : end) - p);
        if (!io->skipping && io->in.len + take > io->o->max_message) {
            io->skipping = true;
            korch_buf_reset(&io->in);
            s_too_long(io);
        }
        if (!io->skipping)
            korch_buf_add(&io->in, p, take, "an MCP message", NULL);
        if (!nl)
            break;
        if (!io->skipping) {
            s_line(io, io->in.p ? io->in.p : "", io->in.len);
            korch_buf_reset(&io->in);
        }
        io->skipping = false;
        p = nl + 1;
    }
    return korch_loop_rc(loop);
}

static bool s_done(void *arg)
{
    s_io_t *io = arg;
    if (io->failed)
        return true;
    if (io->o->quit && io->o->quit(io->o->quit_arg))
        return true;
    /* stdin ended: finish the answers under way and write them, then go */
    return io->eof && !srv_mcp_busy(io->m) && io->out_off == io->out.len;
}

korch_rc_t korch_mcp_stdio_run(korch_loop_t *loop, const korch_mcp_stdio_opts_t *o, korch_err_t *err)
{
    korch_mcp_stdio_opts_t oo = *o;
    if (!oo.max_message)
        oo.max_message = 16u << 20;
    if (!oo.max_pending)
        oo.max_pending = 256u << 20;
    if (!oo.max_upload)
        oo.max_upload = 64u << 20;
    s_io_t io = {.o = &oo, .loop = loop};
    korch_buf_init(&io.in, oo.max_message + 1, "an MCP message");
    korch_buf_init(&io.out, oo.max_pending, "answers waiting for the MCP client");
    korch_rc_t rc = KORCH_OK;
    srv_kmgr_t *kmgr = srv_kmgr_new(&(srv_kmgr_opts_t){.loop = loop, .launcher = oo.launcher,
                                                       .start_timeout_ms = oo.kernel_start_timeout_ms},
                                    err);
    if (!kmgr)
        return err ? err->rc : KORCH_E_NOMEM;
    srv_mcp_opts_t mo = {.loop = loop, .kmgr = kmgr, .kernel = oo.kernel, .cwd = oo.cwd,
                         .max_chars = oo.max_chars, .max_upload = oo.max_upload};
    io.m = srv_mcp_new(&mo, "stdio");
    int fl = fcntl(oo.out_fd, F_GETFL);
    if (fl >= 0)
        (void)fcntl(oo.out_fd, F_SETFL, fl | O_NONBLOCK);
    if (!io.m || korch_loop_poller(loop, oo.in_fd, s_on_in, &io) < 0) {
        rc = korch_err_set(err, KORCH_E_NOMEM, "cannot serve MCP on stdin: out of memory");
        goto out;
    }
    korch_info("korch mcp: serving MCP on stdio");
    while (!s_done(&io))
        korch_loop_run(loop, s_done, &io, 1000);
    if (io.failed)
        rc = korch_err_set(err, io.err.rc ? io.err.rc : KORCH_E_IO, "%s", io.err.msg);
    if (!io.eof)
        korch_loop_poller_end(loop, oo.in_fd);
out:
    if (io.out_watch)
        korch_loop_poller_end(loop, oo.out_fd);
    srv_mcp_destroy(&io.m);
    srv_kmgr_destroy(&kmgr); /* shuts the kernel down */
    if (fl >= 0)
        (void)fcntl(oo.out_fd, F_SETFL, fl);
    korch_buf_free(&io.in);
    korch_buf_free(&io.out);
    return rc;
}
