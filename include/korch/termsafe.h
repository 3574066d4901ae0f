/*  Text from a kernel or a model made safe to show on a terminal.
 *
 *  What the kernel prints, what the model writes and the names of the files
 *  they make reach a person's terminal through `korch run`, `korch chat` and
 *  `korch exec`. A terminal obeys escape sequences in that text: OSC 52
 *  writes the clipboard, ESC[2J clears the screen, OSC 0/2 set the window
 *  title, OSC 8 makes hyperlinks whose target is not what is shown, and bidi
 *  overrides (U+202E) show text in another order than it is. A sanitizer
 *  passes the text through one state machine (ECMA-48's shapes) and lets
 *  out only:
 *
 *  - printable UTF-8 (invalid bytes shown as "<0xff>");
 *  - \n and \t (shown as ^J, ^I with KORCH_TERMSAFE_LINE);
 *  - \r: CRLF becomes \n; a lone \r (a progress bar redrawing its line) is
 *    kept with KORCH_TERMSAFE_CR, shown as ^M with KORCH_TERMSAFE_LINE,
 *    else becomes \n (each redraw its own line in a log);
 *  - SGR (ESC [ params m: colours, bold) with KORCH_TERMSAFE_SGR only (give
 *    it when the stream is a terminal), without parameter 8 (conceal, which
 *    hides text); a colour left on is reset by korch_termsafe_finish.
 *
 *  Everything else is neutralised: CSI sequences other than SGR, OSC, DCS,
 *  SOS, PM and APC strings and other ESC sequences are dropped whole (an
 *  unterminated string ends at the next C0 control other than BEL/ESC or
 *  after 4096 bytes, so it hides at most one line); a lone ESC shows as ^[,
 *  other C0 controls and DEL as ^X / ^?, C1 controls (U+0080-U+009F) as
 *  "<U+009B>" (raw 0x80-0x9f bytes are not UTF-8: "<0x9b>"), bidi controls
 *  (U+061C, U+200E/F, U+202A-E, U+2066-9) as "<U+202E>".
 *
 *  A sanitizer keeps its state between calls (stream chunks split escapes
 *  and characters anywhere): at most 64 bytes of a pending CSI and 3 of a
 *  character. What it writes is always complete: it never lets out part of
 *  a sequence, so text written between two calls cannot combine with it.
 *  One sanitizer per source (a kernel's stdout, its stderr, the model's
 *  text). Not thread-safe.
 */
#ifndef KORCH_TERMSAFE_H
#define KORCH_TERMSAFE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include "korch/buf.h"
#include "korch/error.h"

enum {
    KORCH_TERMSAFE_SGR = 1,  /* keep SGR colour sequences (the output is a terminal) */
    KORCH_TERMSAFE_CR = 2,   /* a lone \r returns to the line's start (progress bars on a terminal) */
    KORCH_TERMSAFE_LINE = 4, /* one line (a name, a value): \n \t \r shown as ^J ^I ^M */
};

typedef struct korch_termsafe korch_termsafe_t;

/* A sanitizer with the given KORCH_TERMSAFE_* flags; NULL when out of memory. */
korch_termsafe_t *korch_termsafe_new(unsigned flags);

/* Free it (NULL is fine) and null the caller's pointer. */
void korch_termsafe_destroy(korch_termsafe_t **p);

/* The flags for a stream printed on fd: SGR (and CR when want_cr) when fd
   is a terminal. */
unsigned korch_termsafe_flags_for(int fd, bool want_cr);

/* Sanitize n bytes of s (any bytes, NULs too), appending what may be shown
   to out. Errors are out's (KORCH_E_TOOBIG, KORCH_E_NOMEM): out grows by
   at most 8 bytes per input byte plus 16. */
korch_rc_t korch_termsafe_feed(korch_termsafe_t *t, const char *s, size_t n, korch_buf_t *out, korch_err_t *err);

/* The end of the source (or of one execution's output): what is pending is
   resolved (an unfinished character shown as bytes, a lone ESC as ^[, a
   pending \r), a colour left on is reset; the sanitizer starts afresh. */
korch_rc_t korch_termsafe_finish(korch_termsafe_t *t, korch_buf_t *out, korch_err_t *err);

/* feed, written to f; returns false when f fails or memory runs out. */
bool korch_termsafe_fwrite(korch_termsafe_t *t, FILE *f, const char *s, size_t n);

/* finish, written to f. */
bool korch_termsafe_fend(korch_termsafe_t *t, FILE *f);

/* One value (a name, an error message) sanitized with flags, finished: a
   new string; s may be NULL (""). NULL when out of memory. */
char *korch_termsafe_str(const char *s, unsigned flags);

/* The same, written to f. */
bool korch_termsafe_fputs(const char *s, unsigned flags, FILE *f);

#endif
