/*  libFuzzer target: korch_htmlsafe, the allow-list rewrite of a kernel's
 *  HTML (korch/htmlsafe.h).
 *
 *  Beyond "never reads past the end, no UB": the output must be inert by
 *  the independent judge of tests/html_inert.h (only listed tags and
 *  attributes, quoted values, allowed URL schemes, no raw '>' or NUL), and
 *  the rewrite must be a fixed point: rewriting its output changes
 *  nothing (what it writes, it keeps). Any broken property aborts.
 */
#include "korch/htmlsafe.h"
#include "../html_inert.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define REQUIRE(c, out)                                                                              \
    do {                                                                                             \
        if (!(c)) {                                                                                  \
            fprintf(stderr, "fuzz_htmlsafe: property failed: %s (%s:%d): %s\n", #c, __FILE__, __LINE__, \
                    (out));                                                                          \
            abort();                                                                                 \
        }                                                                                            \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *in = malloc(size ? size : 1); /* exactly the input: ASan sees any overread */
    if (!in)
        return 0;
    memcpy(in, data, size);
    korch_buf_t a = KORCH_BUF_INIT(size * 6 + 4096), b = KORCH_BUF_INIT(size * 6 + 4096);
    char why[256] = "";
    if (korch_htmlsafe(in, size, &a, NULL, NULL) == KORCH_OK) {
        const char *out = a.p ? a.p : "";
        REQUIRE(s_inert(out, a.len, why, sizeof why), why);
        REQUIRE(korch_htmlsafe(out, a.len, &b, NULL, NULL) == KORCH_OK, out);
        REQUIRE(b.len == a.len && memcmp(b.p ? b.p : "", out, a.len) == 0, out);
    }
    korch_buf_free(&a);
    korch_buf_free(&b);
    free(in);
    return 0;
}
