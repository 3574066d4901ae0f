/*  Scanning JSON strings in raw bytes, without a parser (RFC 8259 section 7).
 *
 *  For the fast paths that look inside a large frame without handing it to
 *  jansson whole: find where a string ends, decode one into a bounded
 *  buffer, or find a safe place to cut one. Input is never trusted: every
 *  function stops at end and says false/NULL on malformed text rather than
 *  reading past it. No allocation; thread-safe.
 */
#ifndef KORCH_JSONSTR_H
#define KORCH_JSONSTR_H

#include <stdbool.h>
#include <stddef.h>

/* The closing quote of the JSON string whose body starts at p (just after
   its opening quote), or NULL when there is none before end: a quote is
   escaped when an odd number of backslashes precede it. Does not validate
   the body. */
const char *korch_jsonstr_end(const char *p, const char *end);

/* Decode the JSON string at *p (on its opening quote) into out (capacity
   cap; whole UTF-8 characters only, not NUL-terminated), its length in
   *len. Once something does not fit, it and everything after it is only
   counted, in *dropped (which the caller zeroes). On success *p is moved
   past the closing quote; false on a malformed string (a control byte, a
   bad escape, a lone surrogate, a truncated UTF-8 sequence, no closing
   quote), *p unchanged. */
bool korch_jsonstr_decode(const char **p, const char *end, char *out, size_t cap, size_t *len, size_t *dropped);

/* For the escape at q (a backslash, before end): the number of bytes it
   decodes to, and its length in the source in *elen (a \uXXXX surrogate
   pair is 12 characters and 4 bytes, other \u escapes 6 characters and 1-3
   bytes, a short escape 2 and 1). Malformed escapes count as their raw
   length. */
size_t korch_jsonstr_escape(const char *q, const char *end, size_t *elen);

/* The UTF-8 encoding of code point cp (at most U+10FFFF) into out[4]; its
   length (1-4). */
size_t korch_utf8_put(unsigned cp, char out[4]);

/* The value of hex digit c, or -1. */
int korch_hexval(char c);

#endif
