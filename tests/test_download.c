/*  How korch names and marks a kernel's file it serves (src/server/download.c):
 *  Content-Disposition for hostile names (quotes, CR/LF, backslashes, '%',
 *  non-ASCII, invalid UTF-8, C1, very long), and which types are shown
 *  inline. The headers on the wire, with a kernel writing the files, are
 *  tests/test_downloads_web.c's.
 */
#define KORCH_TEST_UNIT /* no kernel, docker or browser: make check runs these */
#include "test.h"
#include "../src/server/download.h"

#include <stdio.h>
#include <stdlib.h>

static const struct {
    const char *name;
    bool attachment;
    const char *want;
} s_cases[] = {
    {"evil.html", true, "attachment; filename=\"evil.html\"; filename*=UTF-8''evil.html"},
    {"sub/dir/fig-1.png", false, "inline; filename=\"fig-1.png\"; filename*=UTF-8''fig-1.png"},
    {"a\"b\\c.svg", true, "attachment; filename=\"a_b_c.svg\"; filename*=UTF-8''a%22b%5Cc.svg"},
    {"x\r\nSet-Cookie: a=b.txt", true,
     "attachment; filename=\"x__Set-Cookie: a=b.txt\"; filename*=UTF-8''x__Set-Cookie%3A%20a%3Db.txt"},
    {"100%;.csv", true, "attachment; filename=\"100__.csv\"; filename*=UTF-8''100%25%3B.csv"},
    {"caf\xc3\xa9 \xe2\x80\xae.txt", true,
     "attachment; filename=\"caf__ _.txt\"; filename*=UTF-8''caf%C3%A9%20_.txt"},
    {"bad\xff.bin", true, "attachment; filename=\"bad_.bin\""},           /* not UTF-8: no filename* */
    {"c1\xc2\x9b.txt", true, "attachment; filename=\"c1_.txt\"; filename*=UTF-8''c1_.txt"}, /* a C1 control */
    {"", true, "attachment; filename=\"download\""},
    {"dir/", true, "attachment; filename=\"download\""},
};

TEST(download_disposition_of_hostile_names)
{
    for (size_t i = 0; i < sizeof s_cases / sizeof s_cases[0]; i++) {
        char *d = srv_content_disposition(s_cases[i].name, s_cases[i].attachment);
        if (!CHECK_STREQ(d, s_cases[i].want))
            fprintf(stderr, "  case %zu\n", i);
        CHECK(d && !strpbrk(d, "\r\n"));
        free(d);
    }
}

/* A very long name is cut at a character's end: the header stays short and UTF-8. */
TEST(download_disposition_of_a_long_name)
{
    char name[3000] = "";
    for (int i = 0; i < 900; i++)
        strcat(name, "\xc3\xa9");
    char *d = srv_content_disposition(name, true);
    CHECK(d != NULL);
    CHECK_LT(strlen(d), 700);
    const char *star = d ? strstr(d, "UTF-8''") : NULL;
    CHECK(star != NULL);
    /* whole characters only: %C3%A9 pairs */
    CHECK(star && (strlen(star + 7) % 12) == 0);
    free(d);
}

TEST(download_inline_only_for_raster_images)
{
    CHECK(srv_file_inline("image/png"));
    CHECK(srv_file_inline("image/jpeg"));
    CHECK(srv_file_inline("image/gif"));
    CHECK(srv_file_inline("image/webp"));
    CHECK(!srv_file_inline("image/svg+xml"));
    CHECK(!srv_file_inline("text/html"));
    CHECK(!srv_file_inline("application/x-ipynb+json"));
    CHECK(!srv_file_inline("application/pdf"));
    CHECK(!srv_file_inline(NULL));
}
