/*  libFuzzer target: the JSON string scanner (korch_jsonstr_*).
 *
 *  Input: byte 0 is the output capacity for a bounded decode; the rest is
 *  scanned as a JSON string (a quote is put in front when missing).
 *
 *  Beyond "never reads past the end, no UB" it checks against jansson:
 *  a string jansson accepts must decode to the same bytes; a bounded decode
 *  is a prefix of the full one on a character boundary, with what it kept
 *  plus what it dropped equal to the whole; korch_jsonstr_end finds the
 *  closing quote the decoder stopped at. Any broken property aborts.
 */
#include "korch/jsonstr.h"

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define REQUIRE(c)                                                                      \
    do {                                                                                \
        if (!(c)) {                                                                     \
            fprintf(stderr, "fuzz_jsonstr: property failed: %s (%s:%d)\n", #c, __FILE__, \
                    __LINE__);                                                          \
            abort();                                                                    \
        }                                                                               \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t cap = data[0];
    size_t n = size - 1;
    char *s = malloc(n + 1); /* exactly the input, plus a quote when needed: ASan sees any overread */
    if (!s)
        return 0;
    size_t slen = 0;
    if (!n || data[1] != '"')
        s[slen++] = '"';
    memcpy(s + slen, data + 1, n);
    slen += n;
    const char *end = s + slen;

    char *full = malloc(slen + 1), *part = malloc(cap + 1);
    const char *p = s;
    size_t flen = 0, fdrop = 0;
    bool ok = full && korch_jsonstr_decode(&p, end, full, slen, &flen, &fdrop);
    if (ok) {
        REQUIRE(fdrop == 0); /* the decoded text is never longer than the source */
        REQUIRE(p > s && p <= end && p[-1] == '"');
        REQUIRE(korch_jsonstr_end(s + 1, end) == p - 1);
        /* bounded: a prefix, on a character boundary, kept + dropped = whole */
        const char *q = s;
        size_t plen = 0, pdrop = 0;
        REQUIRE(part && korch_jsonstr_decode(&q, end, part, cap, &plen, &pdrop));
        REQUIRE(q == p);
        REQUIRE(plen <= cap && plen + pdrop == flen);
        REQUIRE(memcmp(part, full, plen) == 0);
        REQUIRE(plen == flen || ((unsigned char)full[plen] & 0xC0) != 0x80);
    } else {
        REQUIRE(p == s);
    }
    /* what jansson accepts, we decode the same */
    json_error_t jerr;
    json_t *j = json_loadb(s, (size_t)(p > s ? p - s : (ptrdiff_t)slen), JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
    if (j && json_is_string(j)) {
        REQUIRE(ok);
        REQUIRE(json_string_length(j) == flen && memcmp(json_string_value(j), full, flen) == 0);
    }
    json_decref(j);
    /* escape lengths stay within the input */
    for (const char *b = s; b < end && (b = memchr(b, '\\', (size_t)(end - b)));) {
        size_t elen = 0;
        size_t out = korch_jsonstr_escape(b, end, &elen);
        REQUIRE(elen >= 1 && elen <= (size_t)(end - b) && out >= 1 && out <= 6);
        b += elen;
    }
    free(full);
    free(part);
    free(s);
    return 0;
}
