/*  Logging, level-checked before any argument is evaluated.
 *
 *  KORCH_LOG=debug|info|notice|warn|error|off picks the level (default
 *  notice). Library code never prints to stderr itself: it logs, and the
 *  sink (stderr unless korch_log_set_sink says otherwise) writes the line.
 *  notice is what a running server says by default ("korch: kernel K
 *  started"), without a level tag; the other levels are tagged
 *  ("korch: warn: ..."). User-facing output of the CLI is not logging.
 */
#ifndef KORCH_LOG_H
#define KORCH_LOG_H

#include <stddef.h>

typedef enum {
    KORCH_LOG_DEBUG,
    KORCH_LOG_INFO,
    KORCH_LOG_NOTICE,   /* shown by default, untagged: a server's lifecycle lines */
    KORCH_LOG_WARN,
    KORCH_LOG_ERROR,
    KORCH_LOG_OFF
} korch_log_level_t;

extern korch_log_level_t korch_log_level;

/* Read KORCH_LOG once; safe to call again. */
void korch_log_init(void);

/* Where lines go: fn(arg, level, line) with line already escaped, without
   "korch: " or a newline. NULL restores stderr. Set it at start-up, before
   other threads log (it is read without a lock). */
typedef void (*korch_log_sink_fn)(void *arg, korch_log_level_t level, const char *line);
void korch_log_set_sink(korch_log_sink_fn fn, void *arg);

/* Writes one line; the formatted text is passed through korch_log_escape
   (KORCH_ESC_LINE) first, so no client byte can end a line or drive the
   terminal. */
void korch_log_write(korch_log_level_t level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Escape in[0..inlen) for a log into out (always NUL-terminated, cut at
   outlen): control bytes (C0, DEL), C1 controls (U+0080..U+009F), bytes
   that are not well-formed UTF-8 and the bidi overrides (U+202A..U+202E,
   U+2066..U+2069) become \xNN per byte, and a backslash becomes "\\", so the
   result is printable and unambiguous. Other UTF-8 passes through. With
   KORCH_ESC_LINE backslashes are left alone (for a whole line whose fields
   may have been escaped already). Every string from a client that reaches
   the log goes through this. Returns out. */
#define KORCH_ESC_LINE 1u
char *korch_log_escape(char *out, size_t outlen, const char *in, size_t inlen, unsigned flags);

#define korch_log(level, ...) \
    do { if ((level) >= korch_log_level) korch_log_write((level), __VA_ARGS__); } while (0)
#define korch_debug(...) korch_log(KORCH_LOG_DEBUG, __VA_ARGS__)
#define korch_info(...)  korch_log(KORCH_LOG_INFO, __VA_ARGS__)
#define korch_notice(...) korch_log(KORCH_LOG_NOTICE, __VA_ARGS__)
#define korch_warn(...)  korch_log(KORCH_LOG_WARN, __VA_ARGS__)
#define korch_error(...) korch_log(KORCH_LOG_ERROR, __VA_ARGS__)

#endif
