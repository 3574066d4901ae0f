/*  One string member of a JSON object that arrives in fragments, decoded
 *  as it comes.
 *
 *  A model writes a tool call's arguments ({"code": "import pandas as pd\n..."})
 *  a few characters at a time; this turns the fragments into the text of
 *  one member ("code") while it is being written, so the code can be shown
 *  before the call is complete. Escapes split across fragments (a "\" at
 *  the end of one, "n" at the start of the next; "\u00" + "e9"; a surrogate
 *  pair in two halves) are held until complete, then decoded to UTF-8
 *  (RFC 8259 section 7: "\" followed by one of " \ / b f n r t, or uXXXX;
 *  characters outside the BMP as a UTF-16 surrogate pair). A lone
 *  surrogate becomes U+FFFD.
 *
 *  Only the first occurrence of the key at the top level of the object
 *  counts; other members (strings, numbers, nested objects and arrays) are
 *  skipped. It is not a validator: on input that is not a JSON object it
 *  stops producing text (the complete arguments are parsed properly later).
 *  No allocation; a plain struct the caller owns.
 */
#ifndef KORCH_JSONFIELD_H
#define KORCH_JSONFIELD_H

#include <stdbool.h>
#include <stddef.h>

/* Bytes of output a feed may produce beyond the length of its input (text
   held back from earlier fragments). */
#define KORCH_JSONFIELD_SLACK 16

typedef struct {
    char key[64];               /* the member wanted */
    size_t key_len;
    int state;                  /* internal */
    int depth;                  /* nesting of a skipped value */
    bool skip_esc;              /* a backslash in a skipped string */
    bool in_skip_str;           /* inside a string of a skipped nested value */
    char kbuf[64];              /* the key being read (truncated: then it cannot match) */
    size_t klen;
    bool kesc, ktoolong;
    bool matched;               /* the current key is the one wanted */
    char esc[8];                /* an escape being read, after its backslash */
    int esc_len;
    unsigned hi;                /* a high surrogate waiting for its low half; 0 none */
    bool found;                 /* the member's value has begun */
    bool done;                  /* the member's value is complete (or the input went wrong) */
} korch_jsonfield_t;

/* Start looking for key (at most 63 bytes). */
void korch_jsonfield_init(korch_jsonfield_t *f, const char *key);

/* Feed the next fragment. The decoded text it completes is written to out,
   which must have room for len + KORCH_JSONFIELD_SLACK bytes (it is not
   NUL-terminated); returns how many bytes were written. */
size_t korch_jsonfield_feed(korch_jsonfield_t *f, const char *in, size_t len, char *out);

#endif
