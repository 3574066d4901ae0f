/*  Files from a kernel or a user, served so that opening one can never run
 *  script in korch's origin (issue 21 item 4).
 *
 *  A work-dir file, a figure or the notebook is the kernel's (or the
 *  model's) doing: an .html or .svg opened from korch's origin would run its
 *  script with the page's token in reach. So every such response carries
 *
 *  - X-Content-Type-Options: nosniff (the type is the one korch says, never
 *    guessed from the bytes);
 *  - Content-Security-Policy: sandbox; default-src 'none' (opened anyway, the
 *    document is in a unique origin with no script and no requests);
 *  - Content-Disposition: attachment (a download, never a document) for
 *    everything but the raster images the page shows inline (PNG, JPEG,
 *    GIF, WebP: no script in them); SVG is an attachment too.
 *
 *  The file's name goes in the header as RFC 6266 says: filename="..." an
 *  ASCII fallback (quotes, backslashes, controls, '%' and non-ASCII as '_')
 *  and filename*=UTF-8''... (RFC 8187 percent-encoding of every byte that
 *  is not an attr-char), the latter only when the name is UTF-8; controls
 *  (CR, LF, C1, bidi overrides) never reach the header in any form: each
 *  is one '_'.
 */
#include "download.h"
#include "server_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NAME_MAX_HDR 160 /* bytes of a name in the header: the header stays well under a kilobyte */

const char *const srv_file_headers[2][2] = {
    {"x-content-type-options:", "nosniff"},
    {"content-security-policy:", "sandbox; default-src 'none'"},
};

bool srv_file_inline(const char *mime)
{
    static const char *const ok[] = {"image/png", "image/jpeg", "image/gif", "image/webp"};
    for (size_t i = 0; mime && i < sizeof ok / sizeof ok[0]; i++)
        if (strcmp(mime, ok[i]) == 0)
            return true;
    return false;
}

/* RFC 8187 3.2.1: attr-char = ALPHA / DIGIT / "!" / "#" / "$" / "&" / "+"
   / "-" / "." / "^" / "_" / "`" / "|" / "~" */
static bool s_attr_char(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c && strchr("!#$&+-.^_`|~", c));
}

/* Length of the valid UTF-8 character at s (at most n bytes), 0 when
   invalid; *control: it is a C1 or a bidi control (U+0080-U+009F, U+061C,
   U+200E/F, U+202A-E, U+2066-9), which a name never shows. */
static size_t s_u8_len(const unsigned char *s, size_t n, bool *control)
{
    unsigned char c = s[0];
    size_t need = c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
    *control = false;
    if (!need || need > n)
        return 0;
    unsigned cp = need == 1 ? c : need == 2 ? (c & 0x1fu) : need == 3 ? (c & 0x0fu) : (c & 0x07u);
    for (size_t i = 1; i < need; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3fu);
    }
    if ((c == 0xe0 && s[1] < 0xa0) || (c == 0xed && s[1] > 0x9f) || (c == 0xf0 && s[1] < 0x90) ||
        (c == 0xf4 && s[1] > 0x8f))
        return 0;
    *control = cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp <= 0x9f) || cp == 0x61c || cp == 0x200e ||
               cp == 0x200f || (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069);
    return need;
}

char *srv_content_disposition(const char *name, bool attachment)
{
    const char *base = name ? strrchr(name, '/') : NULL;
    base = base ? base + 1 : name ? name : "";
    /* the name, cut at a character's end, with every control made '_' */
    unsigned char clean[NAME_MAX_HDR + 1];
    size_t n = 0;
    bool utf8 = true;
    for (size_t i = 0; base[i] && n < NAME_MAX_HDR;) {
        const unsigned char *s = (const unsigned char *)base + i;
        bool control;
        size_t k = s_u8_len(s, strlen((const char *)s), &control);
        if (k == 0) {
            utf8 = false;
            k = 1;
        }
        if (control) {
            clean[n++] = '_'; /* CR, LF, RLO ...: one '_' for the character */
            i += k;
            continue;
        }
        if (n + k > NAME_MAX_HDR)
            break;
        memcpy(clean + n, s, k);
        n += k;
        i += k;
    }
    clean[n] = 0;
    char fallback[NAME_MAX_HDR + 1], star[3 * NAME_MAX_HDR + 1];
    size_t f = 0, st = 0;
    static const char hex[] = "0123456789ABCDEF";
    for (size_t i = 0; i < n; i++) {
        unsigned char c = clean[i];
        fallback[f++] = c >= 0x20 && c < 0x7f && !strchr("\"\\%;", c) ? (char)c : '_';
        if (s_attr_char(c))
            star[st++] = (char)c;
        else {
            star[st++] = '%';
            star[st++] = hex[c >> 4];
            star[st++] = hex[c & 15];
        }
    }
    fallback[f] = star[st] = 0;
    if (!f)
        snprintf(fallback, sizeof fallback, "download");
    const char *kind = attachment ? "attachment" : "inline";
    size_t cap = strlen(kind) + f + st + 48;
    char *out = malloc(cap);
    if (!out)
        return NULL;
    if (utf8 && st)
        snprintf(out, cap, "%s; filename=\"%s\"; filename*=UTF-8''%s", kind, fallback, star);
    else
        snprintf(out, cap, "%s; filename=\"%s\"", kind, fallback);
    return out;
}

void srv_respond_file(srv_req_t *req, const char *name, const char *mime, const void *data, size_t len)
{
    if (req->responded)
        return;
    free(req->disposition);
    req->disposition = srv_content_disposition(name, !srv_file_inline(mime));
    if (!req->disposition) {
        srv_respond_error(req, 500, "out of memory");
        return;
    }
    req->file = true;
    srv_respond_raw(req, 200, mime, data, len);
}
