/*  A request body as it arrives: bounded, de-chunked, in memory or spooled.
 *
 *  Memory grows with what has arrived (a korch_buf, doubling, capped at the
 *  declared length): a Content-Length alone never allocates anything. Every byte
 *  held is charged to a budget shared by all requests, so many requests
 *  at once cannot take more than its bound (the caller answers 503).
 *  Spooled bodies (big uploads) go to an unnamed file (O_TMPFILE, so
 *  nothing is left behind whatever happens) in a directory only korch can
 *  enter, charged to a disk budget instead.
 *
 *  Chunked transfer coding, RFC 9112 7.1:
 *    chunked-body   = *chunk last-chunk trailer-section CRLF
 *    chunk          = chunk-size [ chunk-ext ] CRLF chunk-data CRLF
 *    chunk-size     = 1*HEXDIG
 *    last-chunk     = 1*("0") [ chunk-ext ] CRLF
 *    chunk-ext      = *( BWS ";" BWS chunk-ext-name [ BWS "=" BWS chunk-ext-val ] )
 *    trailer-section = *( field-line CRLF )
 *  Extensions and trailer fields are read and dropped (7.1.1: "A recipient
 *  MUST ignore unrecognized chunk extensions"), each line bounded. Lines
 *  end in CRLF, strictly: a bare LF is refused (request smuggling lives in
 *  such leniency).
 */
#include "body.h"
#include "korch/buf.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_LINE 4096           /* a chunk-size line with its extensions, a trailer field */

typedef enum {
    C_SIZE,         /* hex digits */
    C_EXT,          /* after the size: BWS, extensions, up to CR */
    C_SIZE_LF,      /* CR seen */
    C_DATA,         /* chunk data, c->left bytes */
    C_DATA_CR,
    C_DATA_LF,
    C_TRAILER,      /* at the start of a trailer line (or the final CRLF) */
    C_TRAILER_TEXT, /* inside a trailer field line */
    C_TRAILER_LF,   /* CR of a field line seen */
    C_END_LF,       /* CR of the final empty line seen */
    C_DONE,
} s_cstate_t;

struct srv_body {
    size_t limit;               /* decoded bytes at most */
    size_t expect;              /* Content-Length; 0 when chunked */
    bool chunked;
    srv_budget_t *budget;       /* what the bytes are charged to */
    size_t charged;
    size_t len;                 /* decoded bytes so far (in mem, or in the spool file) */
    korch_buf_t mem;            /* the body in memory; bounded by expect (or limit), charged to budget */
    int fd;                     /* the spool file, or -1 */
    /* chunked decoding */
    s_cstate_t cs;
    uint64_t left;              /* of the current chunk's data */
    int digits;
    bool in_ext;                /* past the ';' of an extension */
    size_t line;                /* bytes of the current line */
};

/* Charge n more bytes held to the budget (also mem's korch_buf_grow_fn). */
static korch_rc_t s_charge(void *arg, size_t n, korch_err_t *err)
{
    srv_body_t *b = arg;
    srv_budget_t *g = b->budget;
    if (g->max && (g->used > g->max || n > g->max - g->used))
        return korch_err_set(err, KORCH_E_NOMEM,
                             "the server holds %zu MiB of request bodies, its limit (%s): retry later",
                             g->used >> 20, g->what);
    g->used += n;
    b->charged += n;
    return KORCH_OK;
}

/* An unnamed file in dirfd (O_TMPFILE), or a random name unlinked at once. */
static int s_spool_open(int dirfd, korch_err_t *err)
{
    int fd = openat(dirfd, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    for (int i = 0; fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EEXIST) && i < 8; i++) {
        unsigned char r[12];
        char name[40];
        if (RAND_bytes(r, sizeof r) != 1)
            break;
        int n = snprintf(name, sizeof name, ".upload-");
        for (size_t k = 0; k < sizeof r; k++)
            n += snprintf(name + n, sizeof name - (size_t)n, "%02x", r[k]);
        fd = openat(dirfd, name, O_CREAT | O_EXCL | O_RDWR | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd >= 0)
            unlinkat(dirfd, name, 0);
    }
    if (fd < 0)
        korch_err_set(err, KORCH_E_IO, "cannot create a file for the upload: %s", strerror(errno));
    return fd;
}

srv_body_t *srv_body_new(size_t limit, size_t expect, bool chunked, srv_budget_t *budget, int spool_dirfd,
                         korch_err_t *err)
{
    srv_body_t *b = calloc(1, sizeof *b);
    if (!b) {
        korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        return NULL;
    }
    b->limit = limit;
    b->expect = chunked ? 0 : expect;
    b->chunked = chunked;
    b->budget = budget;
    korch_buf_init(&b->mem, b->expect && b->expect < limit ? b->expect : limit, NULL);
    b->mem.grow = s_charge;
    b->mem.grow_arg = b;
    b->fd = -1;
    if (spool_dirfd >= 0 && (b->fd = s_spool_open(spool_dirfd, err)) < 0) {
        free(b);
        return NULL;
    }
    return b;
}

void srv_body_destroy(srv_body_t **pb)
{
    srv_body_t *b = *pb;
    if (!b)
        return;
    *pb = NULL;
    b->budget->used -= b->charged < b->budget->used ? b->charged : b->budget->used;
    if (b->fd >= 0)
        close(b->fd);
    korch_buf_free(&b->mem);
    free(b);
}

/* Decoded bytes: to the file or the buffer. */
static korch_rc_t s_append(srv_body_t *b, const char *p, size_t n, korch_err_t *err)
{
    if (!n)
        return KORCH_OK;
    if (n > b->limit - b->len)
        return korch_err_set(err, KORCH_E_TOOBIG, "request body is over the limit of %zu bytes", b->limit);
    korch_rc_t rc;
    if (b->fd >= 0) {
        if ((rc = s_charge(b, n, err)))
            return rc;
        for (size_t off = 0; off < n;) {
            ssize_t w = write(b->fd, p + off, n - off);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0)
                return korch_err_set(err, KORCH_E_IO, "cannot store the upload: %s",
                                     w < 0 ? strerror(errno) : "short write");
            off += (size_t)w;
        }
        b->len += n;
        return KORCH_OK;
    }
    if ((rc = korch_buf_add(&b->mem, p, n, "request body", err)))
        return rc;
    b->len += n;
    return KORCH_OK;
}

static int s_hex(unsigned char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static korch_rc_t s_bad(korch_err_t *err, const char *what)
{
    return korch_err_set(err, KORCH_E_INVALID, "malformed chunked request body: %s", what);
}

static korch_rc_t s_dechunk(srv_body_t *b, const unsigned char *p, size_t n, korch_err_t *err)
{
    for (size_t i = 0; i < n && b->cs != C_DONE;) {
        unsigned char c = p[i];
        switch (b->cs) {
        case C_SIZE: {
            int h = s_hex(c);
            if (h >= 0) {
                if (b->left > (b->limit - b->len) / 16 + 1 || ++b->digits > 16)
                    return korch_err_set(err, KORCH_E_TOOBIG, "request body is over the limit of %zu bytes",
                                         b->limit);
                b->left = b->left * 16 + (uint64_t)h;
                i++;
                break;
            }
            if (!b->digits)
                return s_bad(err, "a chunk does not start with its size in hex");
            if (b->left > b->limit - b->len)
                return korch_err_set(err, KORCH_E_TOOBIG, "request body is over the limit of %zu bytes", b->limit);
            b->cs = C_EXT;
            b->line = (size_t)b->digits;
            break;
        }
        case C_EXT:
            if (c == '\r')
                b->cs = C_SIZE_LF;
            else if (c == '\n')
                return s_bad(err, "a chunk-size line ends in a bare LF");
            else if (!b->in_ext && c != ' ' && c != '\t' && c != ';')
                return s_bad(err, "junk after a chunk size");
            else if (++b->line > MAX_LINE)
                return s_bad(err, "a chunk extension is too long");
            b->in_ext = b->in_ext || c == ';';
            i++;
            break;
        case C_SIZE_LF:
            if (c != '\n')
                return s_bad(err, "CR without LF after a chunk size");
            i++;
            b->cs = b->left ? C_DATA : C_TRAILER;
            b->digits = 0;
            b->line = 0;
            b->in_ext = false;
            break;
        case C_DATA: {
            size_t take = n - i < b->left ? n - i : (size_t)b->left;
            korch_rc_t rc = s_append(b, (const char *)p + i, take, err);
            if (rc)
                return rc;
            b->left -= take;
            i += take;
            if (!b->left)
                b->cs = C_DATA_CR;
            break;
        }
        case C_DATA_CR:
            if (c != '\r')
                return s_bad(err, "chunk data longer than its size");
            i++;
            b->cs = C_DATA_LF;
            break;
        case C_DATA_LF:
            if (c != '\n')
                return s_bad(err, "CR without LF after chunk data");
            i++;
            b->cs = C_SIZE;
            break;
        case C_TRAILER:
            i++;
            if (c == '\r')
                b->cs = C_END_LF;
            else if (c == '\n')
                return s_bad(err, "the trailer ends in a bare LF");
            else {
                b->cs = C_TRAILER_TEXT;
                b->line = 1;
            }
            break;
        case C_TRAILER_TEXT:
            i++;
            if (c == '\r')
                b->cs = C_TRAILER_LF;
            else if (c == '\n')
                return s_bad(err, "a trailer field ends in a bare LF");
            else if (++b->line > MAX_LINE)
                return s_bad(err, "a trailer field is too long");
            break;
        case C_TRAILER_LF:
            if (c != '\n')
                return s_bad(err, "CR without LF in the trailer");
            i++;
            b->cs = C_TRAILER;
            break;
        case C_END_LF:
            if (c != '\n')
                return s_bad(err, "CR without LF at the end");
            i++;
            b->cs = C_DONE;
            break;
        case C_DONE:
            break;
        }
    }
    return KORCH_OK;
}

korch_rc_t srv_body_feed(srv_body_t *b, const void *data, size_t len, korch_err_t *err)
{
    if (srv_body_complete(b))
        return KORCH_OK; /* what follows is not this body's (the connection closes after the answer) */
    if (b->chunked)
        return s_dechunk(b, data, len, err);
    if (len > b->expect - b->len)
        len = b->expect - b->len;
    return s_append(b, data, len, err);
}

bool srv_body_complete(const srv_body_t *b)
{
    return b->chunked ? b->cs == C_DONE : b->len == b->expect;
}

size_t srv_body_len(const srv_body_t *b) { return b->len; }
bool srv_body_chunked(const srv_body_t *b) { return b->chunked; }

char *srv_body_data(srv_body_t *b)
{
    if (b->fd >= 0)
        return NULL;
    return b->mem.p ? b->mem.p : "";
}

int srv_body_fd(const srv_body_t *b) { return b->fd; }
