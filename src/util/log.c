/*  Level-checked logging through one sink (stderr by default):
 *  "korch: warn: ...", notices untagged. */
#include "korch/log.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

korch_log_level_t korch_log_level = KORCH_LOG_NOTICE;
static korch_log_sink_fn s_sink;
static void *s_sink_arg;

void korch_log_set_sink(korch_log_sink_fn fn, void *arg)
{
    s_sink = fn;
    s_sink_arg = arg;
}

void korch_log_init(void)
{
    const char *v = getenv("KORCH_LOG");
    if (!v)
        return;
    static const char *const names[] = {"debug", "info", "notice", "warn", "error", "off"};
    for (int i = 0; i <= KORCH_LOG_OFF; i++)
        if (strcmp(v, names[i]) == 0)
            korch_log_level = (korch_log_level_t)i;
}

void korch_log_write(korch_log_level_t level, const char *fmt, ...)
{
    static const char *const tags[] = {"debug: ", "info: ", "", "warn: ", "error: ", ""};
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    size_t len = n < 0 ? 0 : (size_t)n < sizeof line ? (size_t)n : sizeof line - 1;
    char safe[sizeof line * 2];
    korch_log_escape(safe, sizeof safe, line, len, KORCH_ESC_LINE);
    if (s_sink)
        s_sink(s_sink_arg, level, safe);
    else
        fprintf(stderr, "korch: %s%s\n", tags[level > KORCH_LOG_OFF ? KORCH_LOG_OFF : level], safe);
}

/* Length of the well-formed UTF-8 sequence at p (RFC 3629 table 3: no
   overlong forms, no surrogates, at most U+10FFFF), 0 when it is not one;
   *cp gets the code point. */
static size_t s_utf8(const unsigned char *p, size_t n, unsigned *cp)
{
    unsigned c = p[0];
    size_t len;
    unsigned lo = 0x80, hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf)
        len = 2, c &= 0x1f;
    else if (c >= 0xe0 && c <= 0xef) {
        len = 3, lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf;
        c &= 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4, lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;
        c &= 0x07;
    } else
        return 0;
    if (n < len || p[1] < lo || p[1] > hi)
        return 0;
    c = (c << 6) | (p[1] & 0x3f);
    for (size_t i = 2; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        c = (c << 6) | (p[i] & 0x3f);
    }
    *cp = c;
    return len;
}

char *korch_log_escape(char *out, size_t outlen, const char *in, size_t inlen, unsigned flags)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)in;
    size_t o = 0;
    if (!outlen)
        return out;
    for (size_t i = 0; in && i < inlen;) {
        unsigned cp = 0;
        size_t n = p[i] >= 0x80 ? s_utf8(p + i, inlen - i, &cp) : 1;
        bool bad = n == 0 || p[i] < 0x20 || p[i] == 0x7f || (cp >= 0x80 && cp <= 0x9f) ||
                   (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069);
        if (bad) {
            size_t k = n ? n : 1; /* each byte of it, as \xNN */
            if (o + 4 * k >= outlen)
                break;
            for (size_t j = 0; j < k; j++) {
                out[o++] = '\\', out[o++] = 'x';
                out[o++] = hex[p[i + j] >> 4], out[o++] = hex[p[i + j] & 15];
            }
            i += k;
        } else if (p[i] == '\\' && !(flags & KORCH_ESC_LINE)) {
            if (o + 2 >= outlen)
                break;
            out[o++] = '\\', out[o++] = '\\';
            i++;
        } else {
            if (o + n >= outlen)
                break;
            memcpy(out + o, p + i, n);
            o += n, i += n;
        }
    }
    out[o] = 0;
    return out;
}
