/*  korch_termsafe: what a terminal is let to see of a kernel's or a
 *  model's text. Every case is also fed split at every byte boundary (a
 *  stream's chunks cut escapes and characters anywhere) and must come out
 *  the same; random bytes must never let out a control function.
 */
#define KORCH_TEST_UNIT /* no kernel, docker or browser: make check runs these */
#include "test.h"
#include "korch/termsafe.h"

#include <stdio.h>
#include <stdlib.h>

#define SGR KORCH_TERMSAFE_SGR
#define CR KORCH_TERMSAFE_CR
#define LINE KORCH_TERMSAFE_LINE

typedef struct {
    const char *name;
    unsigned flags;
    const char *in;
    const char *want;
} tcase_t;

static const tcase_t s_cases[] = {
    {"plain", 0, "hello, world\n\tindented\n", "hello, world\n\tindented\n"},
    {"utf8 kept", 0, "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x93\x88", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x93\x88"},
    /* OSC 52: the clipboard; BEL- and ST-terminated */
    {"osc52 bel", SGR, "a\033]52;c;ZWNobyBwd25lZA==\007b", "ab"},
    {"osc52 st", SGR, "a\033]52;c;ZWNobyBwd25lZA==\033\\b", "ab"},
    {"title", SGR, "\033]0;you have been hacked\007x\033]2;t\033\\y", "xy"},
    {"osc8 link text kept", SGR, "\033]8;;http://evil.example/\033\\click\033]8;;\033\\", "click"},
    {"clear screen", SGR, "\033[2J\033[H\033[3Jtext", "text"},
    {"cursor and modes", SGR, "\033[?1049h\033[10;20H\033[?25l\033[6n\033[1 q!", "!"},
    {"dcs apc pm sos", SGR, "\033P+q436f\033\\1\033_apc\033\\2\033^pm\033\\3\033Xsos\033\\4", "1234"},
    {"two-byte escapes", SGR, "\033c\0337\0338\033M\033=\033(B\033#8ok", "ok"},
    {"sgr kept on a tty", SGR, "\033[0;31mred\033[0m", "\033[0;31mred\033[0m"},
    {"sgr dropped off a tty", 0, "\033[0;31mred\033[0m plain", "red plain"},
    {"sgr 256 and truecolour", SGR, "\033[38;5;8mx\033[48;2;8;8;8my\033[m", "\033[38;5;8mx\033[48;2;8;8;8my\033[m"},
    {"sgr conceal dropped", SGR, "\033[1;8mhidden?\033[8m\033[0m", "\033[1mhidden?\033[0m"},
    {"sgr colon form", SGR, "\033[38:2::1:2:3mx\033[0m", "\033[38:2::1:2:3mx\033[0m"},
    {"sgr left on is reset", SGR, "\033[31mred", "\033[31mred\033[0m"},
    {"sgr private is not sgr", SGR, "\033[>4;2m\033[?1mx", "x"},
    {"sgr with intermediate", SGR, "\033[1 mx", "x"},
    {"csi too long", SGR, "\033[1111111111111111111111111111111111111111111111111111111111111111111111111mx", "x"},
    {"csi void at a control", SGR, "\033[31\nx", "\nx"},
    {"lone esc", 0, "a\033\nb\033", "a^[\nb^["},
    {"esc before utf8", 0, "\033\xc3\xa9", "^[\xc3\xa9"},
    {"c0 controls", 0, "bell\007 bs\010 nul", "bell^G bs^H nul"},
    {"del", 0, "x\177y", "x^?y"},
    {"c1 as raw bytes", SGR, "\x9b" "2J \x9d" "52;c;x\x07 \x85", "<0x9b>2J <0x9d>52;c;x^G <0x85>"},
    {"c1 as utf8", SGR, "\xc2\x9b" "2J \xc2\x9d" "0;t\xc2\x9c \xc2\x85", "<U+009B>2J <U+009D>0;t<U+009C> <U+0085>"},
    {"bidi visible", 0, "abc\xe2\x80\xae" "fdp.exe \xe2\x81\xa6x\xe2\x81\xa9 \xe2\x80\x8f\xd8\x9c",
     "abc<U+202E>fdp.exe <U+2066>x<U+2069> <U+200F><U+061C>"},
    {"invalid utf8", 0, "a\xff\xfe\xc0\xafz\xed\xa0\x80\xf4\x90\x80\x80\xe2\x82",
     "a<0xff><0xfe><0xc0><0xaf>z<0xed><0xa0><0x80><0xf4><0x90><0x80><0x80><0xe2><0x82>"},
    {"truncated char then ascii", 0, "\xe2\x82x", "<0xe2><0x82>x"},
    {"crlf", 0, "one\r\ntwo\r\n", "one\ntwo\n"},
    {"lone cr off a tty", 0, " 10%\r 20%\rdone\n", " 10%\n 20%\ndone\n"},
    {"lone cr on a tty", SGR | CR, " 10%\r 20%\rdone\r\n", " 10%\r 20%\rdone\n"},
    {"line mode", LINE, "a\nb\tc\rd\033]0;x\007e", "a^Jb^Ic^Md" "e"},
    {"line mode crlf", LINE, "name\r\n.csv", "name^M^J.csv"},
    {"unterminated osc ends at newline", 0, "\033]52;c;AAAA\nvisible", "\nvisible"},
    {"esc inside a string starts anew", SGR, "\033]0;t\033[2Jx", "x"},
    {"esc inside a string then sgr", SGR, "\033]0;t\033[1mx", "\033[1mx\033[0m"},
};

/* Feed in using chunks cut at the given positions; finish; return the output. */
static char *s_run(unsigned flags, const char *in, size_t len, size_t cut1, size_t cut2)
{
    korch_termsafe_t *t = korch_termsafe_new(flags);
    korch_buf_t out = KORCH_BUF_INIT(1 << 20);
    korch_termsafe_feed(t, in, cut1, &out, NULL);
    korch_termsafe_feed(t, in + cut1, cut2 - cut1, &out, NULL);
    korch_termsafe_feed(t, in + cut2, len - cut2, &out, NULL);
    korch_termsafe_finish(t, &out, NULL);
    korch_termsafe_destroy(&t);
    CHECK(t == NULL);
    return korch_buf_release(&out, NULL);
}

TEST(termsafe_table)
{
    for (size_t i = 0; i < sizeof s_cases / sizeof s_cases[0]; i++) {
        const tcase_t *c = &s_cases[i];
        size_t len = strlen(c->in);
        char *whole = s_run(c->flags, c->in, len, len, len);
        if (!CHECK_STREQ(whole, c->want))
            fprintf(stderr, "  case '%s'\n", c->name);
        free(whole);
        /* every split in two and three pieces gives the same */
        int bad = 0;
        for (size_t a = 0; a <= len && !bad; a++)
            for (size_t b = a; b <= len && !bad; b++) {
                char *got = s_run(c->flags, c->in, len, a, b);
                if (strcmp(got, c->want) != 0) {
                    fprintf(stderr, "  case '%s' cut at %zu,%zu: got '%s'\n", c->name, a, b, got);
                    bad = 1;
                }
                free(got);
            }
        CHECK_EQ(bad, 0);
        /* the one-shot form agrees */
        char *one = korch_termsafe_str(c->in, c->flags);
        if (!CHECK_STREQ(one, c->want))
            fprintf(stderr, "  case '%s' (korch_termsafe_str)\n", c->name);
        free(one);
    }
}

/* A NUL is a control like the others; the NULL string is empty. */
TEST(termsafe_nul_and_null)
{
    char *got = s_run(0, "a\0b", 3, 1, 2);
    CHECK_STREQ(got, "a^@b");
    free(got);
    char *e = korch_termsafe_str(NULL, 0);
    CHECK_STREQ(e, "");
    free(e);
}

/* Is out safe to write to a terminal: no ESC but a kept SGR, no C0 but
   \n \t (and \r with CR), no DEL, valid UTF-8 with no C1 and no bidi? */
static bool s_safe(const char *o, size_t n, unsigned flags, char *why, size_t whylen)
{
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)o[i];
        if (c == 0x1b) {
            size_t j = i + 1;
            if (!(flags & SGR) || j >= n || o[j] != '[') {
                snprintf(why, whylen, "ESC at %zu", i);
                return false;
            }
            j++;
            while (j < n && ((o[j] >= '0' && o[j] <= '9') || o[j] == ';' || o[j] == ':'))
                j++;
            if (j >= n || o[j] != 'm') {
                snprintf(why, whylen, "a CSI that is not SGR at %zu", i);
                return false;
            }
            i = j + 1;
            continue;
        }
        if ((c < 0x20 && c != '\n' && c != '\t' && !(c == '\r' && (flags & CR))) || c == 0x7f) {
            snprintf(why, whylen, "control 0x%02x at %zu", c, i);
            return false;
        }
        if (c < 0x80) {
            i++;
            continue;
        }
        int need = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 ? 2 : 0;
        if (!need || i + (size_t)need > n) {
            snprintf(why, whylen, "invalid UTF-8 at %zu", i);
            return false;
        }
        unsigned cp = need == 2 ? (c & 0x1fu) : need == 3 ? (c & 0x0fu) : (c & 0x07u);
        for (int k = 1; k < need; k++) {
            unsigned char d = (unsigned char)o[i + (size_t)k];
            if ((d & 0xc0) != 0x80) {
                snprintf(why, whylen, "invalid UTF-8 at %zu", i);
                return false;
            }
            cp = cp << 6 | (d & 0x3fu);
        }
        if ((cp >= 0x80 && cp <= 0x9f) || cp == 0x61c || cp == 0x200e || cp == 0x200f ||
            (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069)) {
            snprintf(why, whylen, "U+%04X at %zu", cp, i);
            return false;
        }
        i += (size_t)need;
    }
    return true;
}

/* Random bytes, biased toward the interesting ones, in random chunks. */
TEST(termsafe_random_is_safe)
{
    static const unsigned char pick[] = {0x1b, '[', ']', 'P', '_', '\\', 0x07, '\n', '\r', ';', '2', '8',
                                         'm',  'J', 0x9b, 0x9c, 0xc2, 0xe2, 0x80, 0xae, 0x81, 0xa6, 'a', 0x00,
                                         0xf0, 0x9f, 0xed, 0xa0, 0xff, 0x85, 0x3a, '5', 0x20, 0x7f};
    const unsigned flag_sets[] = {0, SGR, SGR | CR, LINE, SGR | LINE};
    srand(21);
    unsigned char in[600];
    int unsafe = 0;
    for (int iter = 0; iter < 3000 && !unsafe; iter++) {
        size_t len = (size_t)(rand() % (int)sizeof in);
        for (size_t i = 0; i < len; i++)
            in[i] = rand() % 4 ? pick[rand() % (int)sizeof pick] : (unsigned char)rand();
        unsigned flags = flag_sets[iter % 5];
        korch_termsafe_t *t = korch_termsafe_new(flags);
        korch_buf_t out = KORCH_BUF_INIT(1 << 20);
        for (size_t at = 0; at < len;) {
            size_t step = (size_t)(rand() % 9);
            if (step > len - at)
                step = len - at;
            CHECK_EQ(korch_termsafe_feed(t, (const char *)in + at, step, &out, NULL), KORCH_OK);
            at += step;
        }
        korch_termsafe_finish(t, &out, NULL);
        korch_termsafe_destroy(&t);
        CHECK_LE(out.len, 8 * len + 16);
        char why[64];
        if (!s_safe(out.p ? out.p : "", out.len, flags, why, sizeof why)) {
            fprintf(stderr, "  iteration %d (flags %u): %s\n", iter, flags, why);
            unsafe = 1;
        }
        korch_buf_free(&out);
    }
    CHECK_EQ(unsafe, 0);
}

/* The FILE helpers write the same text; a bounded output buffer that
   cannot take it is an error, not an overflow. */
TEST(termsafe_fwrite_and_bounds)
{
    char *big = malloc(5000);
    for (int i = 0; i < 5000; i++)
        big[i] = i % 100 == 99 ? '\n' : (i % 7 == 0 ? '\x9b' : 'x');
    korch_termsafe_t *t = korch_termsafe_new(0);
    char *mem = NULL;
    size_t memlen = 0;
    FILE *f = open_memstream(&mem, &memlen);
    CHECK(korch_termsafe_fwrite(t, f, big, 5000));
    CHECK(korch_termsafe_fend(t, f));
    fclose(f);
    korch_buf_t ref = KORCH_BUF_INIT(1 << 20);
    korch_termsafe_t *r = korch_termsafe_new(0);
    korch_termsafe_feed(r, big, 5000, &ref, NULL);
    korch_termsafe_finish(r, &ref, NULL);
    CHECK_EQ(memlen, ref.len);
    CHECK(mem && ref.p && memcmp(mem, ref.p, memlen) == 0);
    korch_buf_t small = KORCH_BUF_INIT(10);
    korch_err_t err = {0};
    CHECK_EQ(korch_termsafe_feed(r, big, 100, &small, &err), KORCH_E_TOOBIG);
    CHECK_LE(small.len, 10);
    korch_buf_free(&small);
    korch_buf_free(&ref);
    korch_termsafe_destroy(&r);
    korch_termsafe_destroy(&t);
    korch_termsafe_destroy(&t); /* NULL is fine */
    free(mem);
    free(big);
}
