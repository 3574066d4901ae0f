/*  HTML from a kernel made inert: an allow-list rewrite.
 *
 *  The input is tokenized the way an HTML5 parser would (tags, attributes
 *  in their three quotings, comments, raw-text elements such as <script>
 *  and <style> up to their end tag) and the output is written afresh from
 *  the tokens: only the tags of a fixed list (tables, text markup, lists,
 *  images, links), each with only the attributes allowed for it, every
 *  attribute value decoded then re-encoded in double quotes, links and
 *  image sources checked for their scheme after decoding (http, https,
 *  mailto, relative; images also data:image/...), style attributes kept
 *  only for a list of properties with plain values. Everything else is
 *  dropped: a forbidden element's tag (its text stays, escaped), a
 *  raw-text element with its content, comments, doctypes, processing
 *  instructions. Text is re-emitted with <, > and bare & escaped; character
 *  references that are well formed stay (they decode to text, never to
 *  markup). NUL becomes U+FFFD.
 *
 *  Whatever the input (malformed, unterminated, nested, in any case, with
 *  entity tricks), the output holds no element or attribute outside the
 *  list and no URL with another scheme: how the input is tokenized only
 *  changes what is kept, never what the browser may run. Thread-safe,
 *  no state.
 */
#ifndef KORCH_HTMLSAFE_H
#define KORCH_HTMLSAFE_H

#include <stddef.h>

#include "korch/buf.h"
#include "korch/error.h"

/* What a rewrite removed (bits). */
enum {
    KORCH_HS_SCRIPT = 1u << 0,      /* <script>, or script in a mime type of its own */
    KORCH_HS_HANDLER = 1u << 1,     /* on* event handler attributes */
    KORCH_HS_URL = 1u << 2,         /* a link or source with another scheme (javascript:, data:text/html ...) */
    KORCH_HS_FRAME = 1u << 3,       /* iframe, frame, object, embed, applet, portal */
    KORCH_HS_FORM = 1u << 4,        /* form, input, button, select, textarea ... */
    KORCH_HS_SVG = 1u << 5,         /* inline svg or math (shown as text) */
    KORCH_HS_META = 1u << 6,        /* base, meta, link */
    KORCH_HS_STYLE = 1u << 7,       /* a style sheet, or style properties outside the list */
    KORCH_HS_OTHER = 1u << 8,       /* other tags and attributes outside the list (quietly) */
    KORCH_HS__NOTED = KORCH_HS_SCRIPT | KORCH_HS_HANDLER | KORCH_HS_URL | KORCH_HS_FRAME | KORCH_HS_FORM |
                      KORCH_HS_SVG | KORCH_HS_META,
};

/* Append the inert rewrite of html (len bytes, may hold NUL) to out.
   *removed gets the KORCH_HS_* bits of what went (may be NULL). Fails only
   as out's bound or memory does (out is then as the failed add left it:
   the caller drops it). */
korch_rc_t korch_htmlsafe(const char *html, size_t len, korch_buf_t *out, unsigned *removed, korch_err_t *err);

/* Append text escaped for HTML (<, >, &, both quotes; NUL as U+FFFD). */
korch_rc_t korch_html_escape(const char *text, size_t len, korch_buf_t *out, korch_err_t *err);

/* The words for what the bits name ("scripts, event handlers"), into buf;
   "" when no noted bit is set. */
void korch_htmlsafe_what(unsigned removed, char *buf, size_t len);

#endif
