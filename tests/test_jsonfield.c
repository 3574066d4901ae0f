/*  korch_jsonfield: a tool call's "code" decoded from its streamed
 *  arguments, judged against jansson's decoding of the complete text. */
#define KORCH_TEST_UNIT /* no kernel, docker or browser: make check runs these */
#include "test.h"
#include "korch/jsonfield.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

/* Feed text in the given fragment sizes (cycled); the decoded output. */
static char *s_decode(const char *key, const char *text, const size_t *sizes, size_t nsizes, bool *done)
{
    korch_jsonfield_t f;
    korch_jsonfield_init(&f, key);
    size_t len = strlen(text), at = 0, n = 0, k = 0;
    char *out = malloc(len + KORCH_JSONFIELD_SLACK + 1);
    while (at < len) {
        size_t step = sizes[k++ % nsizes];
        if (step > len - at)
            step = len - at;
        char *tmp = malloc(step + KORCH_JSONFIELD_SLACK);
        size_t got = korch_jsonfield_feed(&f, text + at, step, tmp);
        memcpy(out + n, tmp, got); /* fits: everything decoded is no longer than its input */
        free(tmp);
        n += got;
        at += step;
    }
    out[n] = 0;
    if (done)
        *done = f.done;
    return out;
}

/* What jansson makes of the member: the reference. */
static char *s_reference(const char *key, const char *text)
{
    json_t *j = json_loads(text, 0, NULL);
    const char *v = json_string_value(json_object_get(j, key));
    char *r = strdup(v ? v : "(none)");
    json_decref(j);
    return r;
}

static const char *const s_cases[] = {
    "{\"code\": \"import pandas as pd\\nprint(\\\"a\\\\tb\\\")\\n# caf\\u00e9 \\ud83d\\ude00 \\/ end\"}",
    /* other members first: strings with escaped quotes and braces, nesting, numbers, literals */
    "{\"note\": \"say \\\"code\\\": {\\\"x\\\"}\", \"n\": -1.5e3, \"ok\": true, \"nested\": {\"code\": \"no\", "
    "\"a\": [1, {\"b\": \"]}\"}]}, \"code\":\"x = 1\\r\\n\\by\\f\"}",
    "{\"code\": \"plain\"}",
    "  {  \"code\"  :  \"\\u20ac\\u0041\\u00DF\"  }  ",
    "{\"code\": \"\"}",
};

TEST(llm_jsonfield_matches_jansson_for_every_split)
{
    for (size_t c = 0; c < sizeof s_cases / sizeof *s_cases; c++) {
        const char *text = s_cases[c];
        char *want = s_reference("code", text);
        size_t len = strlen(text);
        /* one split point anywhere, so every escape is cut at every place */
        for (size_t cut = 0; cut <= len; cut++) {
            size_t sizes[2] = {cut ? cut : 1, len};
            bool done = false;
            char *got = s_decode("code", text, sizes, 2, &done);
            if (!CHECK_STREQ(got, want) || !CHECK(done)) {
                fprintf(stderr, "  case %zu cut at %zu\n", c, cut);
                free(got);
                break;
            }
            free(got);
        }
        /* byte by byte, and in the 7-character fragments the scripted server sends */
        static const size_t ones[] = {1}, sevens[] = {7}, mixed[] = {3, 1, 5, 2, 11};
        char *got = s_decode("code", text, ones, 1, NULL);
        CHECK_STREQ(got, want);
        free(got);
        got = s_decode("code", text, sevens, 1, NULL);
        CHECK_STREQ(got, want);
        free(got);
        got = s_decode("code", text, mixed, 5, NULL);
        CHECK_STREQ(got, want);
        free(got);
        free(want);
    }
}

TEST(llm_jsonfield_odd_input_stops_quietly)
{
    static const size_t ones[] = {1};
    bool done = true;
    /* not an object, no such key, a key that is a prefix of another */
    char *got = s_decode("code", "[\"code\", \"x\"]", ones, 1, &done);
    CHECK_STREQ(got, "");
    free(got);
    got = s_decode("code", "{\"codex\": \"no\", \"cod\": \"no\"}", ones, 1, &done);
    CHECK_STREQ(got, "");
    CHECK(!done);
    free(got);
    /* the value is not a string */
    got = s_decode("code", "{\"code\": 42}", ones, 1, NULL);
    CHECK_STREQ(got, "");
    free(got);
    /* a lone surrogate becomes U+FFFD, a bad escape ends the text */
    got = s_decode("code", "{\"code\": \"a\\ud800b\\udc00c\"}", ones, 1, NULL);
    CHECK_STREQ(got, "a\xef\xbf\xbd" "b\xef\xbf\xbd" "c");
    free(got);
    got = s_decode("code", "{\"code\": \"ok\\qnot this\"}", ones, 1, &done);
    CHECK_STREQ(got, "ok");
    CHECK(done);
    free(got);
    got = s_decode("code", "{\"code\": \"ok\\u12G4\"}", ones, 1, NULL);
    CHECK_STREQ(got, "ok");
    free(got);
    /* cut before its end: what came so far */
    got = s_decode("code", "{\"code\": \"print(1)\\", ones, 1, &done);
    CHECK_STREQ(got, "print(1)");
    CHECK(!done);
    free(got);
    /* a key too long to hold never matches, a long key that is wanted does */
    char big[200];
    snprintf(big, sizeof big, "{\"%0100d\": \"no\", \"code\": \"yes\"}", 0);
    got = s_decode("code", big, ones, 1, NULL);
    CHECK_STREQ(got, "yes");
    free(got);
}
