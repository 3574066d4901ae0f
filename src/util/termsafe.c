/*  Terminal-safe text (termsafe.h): one state machine over ECMA-48's
 *  shapes of control functions.
 *
 *  ECMA-48 5.4: a control sequence is CSI, parameter bytes 0x30-0x3F,
 *  intermediate bytes 0x20-0x2F, one final byte 0x40-0x7E. 5.6: a control
 *  string (OSC, DCS, APC, PM, SOS) is its opening, a command string and ST
 *  (ESC \); xterm also ends OSC at BEL. 5.3: ESC, intermediates 0x20-0x2F,
 *  a final 0x30-0x7E is an escape sequence (ESC 7, ESC c, ESC ( B).
 */
#include "korch/termsafe.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CSI_MAX 64       /* a pending CSI: SGR with 24-bit colours fits easily */
#define STR_MAX 4096     /* an unterminated control string hides no more than this */
#define INTER_MAX 8      /* intermediates of an ESC sequence */

typedef enum {
    ST_GROUND,
    ST_ESC,       /* after ESC */
    ST_ESC_INTER, /* ESC and intermediates */
    ST_CSI,       /* collecting a CSI (csi[], csi_len) */
    ST_CSI_DROP,  /* a CSI too long or malformed: dropped up to its final byte */
    ST_STR,       /* inside OSC/DCS/SOS/PM/APC: dropped */
    ST_STR_ESC,   /* ESC inside a control string: ST if '\\' follows */
} state_t;

struct korch_termsafe {
    unsigned flags;
    state_t st;
    char csi[CSI_MAX];  /* parameter and intermediate bytes of the pending CSI */
    size_t csi_len;
    bool csi_inter;     /* an intermediate byte was seen */
    size_t str_len;     /* bytes of the control string or ESC sequence so far */
    unsigned char u8[4]; /* a character begun */
    int u8_len, u8_need;
    bool cr;            /* a \r waits: CRLF or a lone \r? */
    bool sgr_on;        /* a kept SGR left attributes on */
    korch_buf_t tmp;    /* fwrite / fend */
};

korch_termsafe_t *korch_termsafe_new(unsigned flags)
{
    korch_termsafe_t *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->flags = flags;
    korch_buf_init(&t->tmp, 16 * 1024, NULL);
    return t;
}

void korch_termsafe_destroy(korch_termsafe_t **p)
{
    if (!p || !*p)
        return;
    korch_buf_free(&(*p)->tmp);
    free(*p);
    *p = NULL;
}

unsigned korch_termsafe_flags_for(int fd, bool want_cr)
{
    if (!isatty(fd))
        return 0;
    return KORCH_TERMSAFE_SGR | (want_cr ? KORCH_TERMSAFE_CR : 0);
}

/* ------------------------------------------------------------ output */

typedef struct {
    korch_buf_t *out;
    korch_err_t *err;
    korch_rc_t rc;
} sink_t;

static void s_put(sink_t *k, const char *s, size_t n)
{
    if (!k->rc)
        k->rc = korch_buf_add(k->out, s, n, "terminal text", k->err);
}

static void s_putc(sink_t *k, char c) { s_put(k, &c, 1); }

/* ^X for a C0 control, ^? for DEL (cat -v's notation). */
static void s_caret(sink_t *k, unsigned char c)
{
    char v[2] = {'^', c == 0x7f ? '?' : (char)(c + 0x40)};
    s_put(k, v, 2);
}

static void s_hexbyte(sink_t *k, unsigned char c)
{
    static const char hex[] = "0123456789abcdef";
    char v[6] = {'<', '0', 'x', hex[c >> 4], hex[c & 15], '>'};
    s_put(k, v, 6);
}

static void s_codepoint(sink_t *k, uint32_t cp)
{
    static const char hex[] = "0123456789ABCDEF";
    char v[8] = {'<', 'U', '+', hex[(cp >> 12) & 15], hex[(cp >> 8) & 15], hex[(cp >> 4) & 15], hex[cp & 15], '>'};
    s_put(k, v, 8);
}

/* Bidi controls (Unicode UAX #9, Table 4): shown, never obeyed. */
static bool s_is_bidi(uint32_t cp)
{
    return cp == 0x061C || cp == 0x200E || cp == 0x200F || (cp >= 0x202A && cp <= 0x202E) ||
           (cp >= 0x2066 && cp <= 0x2069);
}

/* ------------------------------------------------------------ SGR */

static bool s_sgr_param_ok(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!((p[i] >= '0' && p[i] <= '9') || p[i] == ';' || p[i] == ':'))
            return false;
    return true;
}

/* A numeric parameter's value (an empty one is 0; ':' sub-parameters
   belong to the parameter and do not count). */
static long s_param_value(const char *p, size_t n)
{
    long v = 0;
    for (size_t i = 0; i < n && p[i] != ':'; i++)
        v = v > 100000 ? v : v * 10 + (p[i] - '0');
    return v;
}

/* Emit the SGR of params p[0..n) without parameter 8 (conceal: text the
   person cannot see). 38/48/58;5;N and 38/48/58;2;R;G;B carry their colour
   as further parameters, which are not attributes (an 8 there is a colour);
   the ':' forms (38:2::R:G:B) are one parameter. */
static void s_emit_sgr(korch_termsafe_t *t, sink_t *k, const char *p, size_t n)
{
    char kept[CSI_MAX];
    size_t kn = 0, i = 0;
    int args = 0; /* parameters still belonging to a 38/48/58 */
    bool reset_only = true, any = false;
    for (;;) {
        size_t j = i;
        while (j < n && p[j] != ';')
            j++;
        bool colon = memchr(p + i, ':', j - i) != NULL;
        long v = s_param_value(p + i, j - i);
        bool drop = false;
        if (args > 0)
            args--;
        else if (v == 8 && !colon)
            drop = true;
        else if ((v == 38 || v == 48 || v == 58) && !colon && j < n) {
            size_t e = j + 1, f = e; /* the next parameter says how many follow */
            while (f < n && p[f] != ';')
                f++;
            long how = s_param_value(p + e, f - e);
            args = how == 5 ? 2 : how == 2 ? 4 : 0;
        }
        if (!drop) {
            if (any)
                kept[kn++] = ';';
            memcpy(kept + kn, p + i, j - i); /* kept never holds more than p: n <= CSI_MAX */
            kn += j - i;
            any = true;
            reset_only = reset_only && v == 0;
        }
        if (j >= n)
            break;
        i = j + 1;
    }
    if (!any)
        return; /* it only concealed: nothing left to do */
    s_put(k, "\033[", 2);
    s_put(k, kept, kn);
    s_putc(k, 'm');
    t->sgr_on = !reset_only;
}

/* ------------------------------------------------------------ ground */

static void s_lone_cr(korch_termsafe_t *t, sink_t *k)
{
    if (t->flags & KORCH_TERMSAFE_CR)
        s_putc(k, '\r');
    else
        s_putc(k, '\n');
}

static void s_u8_flush_invalid(korch_termsafe_t *t, sink_t *k)
{
    for (int i = 0; i < t->u8_len; i++)
        s_hexbyte(k, t->u8[i]);
    t->u8_len = t->u8_need = 0;
}

static void s_codepoint_out(korch_termsafe_t *t, sink_t *k, uint32_t cp)
{
    if ((cp >= 0x80 && cp <= 0x9f) || s_is_bidi(cp))
        s_codepoint(k, cp);
    else
        s_put(k, (const char *)t->u8, (size_t)t->u8_len);
    t->u8_len = t->u8_need = 0;
}

/* Is c a valid next byte of the character begun in u8 (RFC 3629 4)? */
static bool s_u8_next_ok(const korch_termsafe_t *t, unsigned char c)
{
    if (c < 0x80 || c > 0xbf)
        return false;
    if (t->u8_len != 1)
        return true;
    switch (t->u8[0]) {
    case 0xe0: return c >= 0xa0;            /* no overlong 3-byte forms */
    case 0xed: return c <= 0x9f;            /* no surrogates */
    case 0xf0: return c >= 0x90;            /* no overlong 4-byte forms */
    case 0xf4: return c <= 0x8f;            /* nothing past U+10FFFF */
    default: return true;
    }
}

static uint32_t s_u8_decode(const korch_termsafe_t *t)
{
    const unsigned char *u = t->u8;
    switch (t->u8_len) {
    case 2: return (uint32_t)(u[0] & 0x1f) << 6 | (u[1] & 0x3f);
    case 3: return (uint32_t)(u[0] & 0x0f) << 12 | (uint32_t)(u[1] & 0x3f) << 6 | (u[2] & 0x3f);
    default:
        return (uint32_t)(u[0] & 0x07) << 18 | (uint32_t)(u[1] & 0x3f) << 12 | (uint32_t)(u[2] & 0x3f) << 6 |
               (u[3] & 0x3f);
    }
}

/* One byte in the ground state (no escape pending). */
static void s_ground(korch_termsafe_t *t, sink_t *k, unsigned char c)
{
    if (t->u8_need) {
        if (s_u8_next_ok(t, c)) {
            t->u8[t->u8_len++] = c;
            if (t->u8_len == t->u8_need)
                s_codepoint_out(t, k, s_u8_decode(t));
            return;
        }
        s_u8_flush_invalid(t, k); /* and c starts afresh */
    }
    if (t->cr) {
        t->cr = false;
        if (c == '\n') {
            s_putc(k, '\n');
            return;
        }
        s_lone_cr(t, k);
    }
    bool line = t->flags & KORCH_TERMSAFE_LINE;
    if (c == 0x1b) {
        t->st = ST_ESC;
        t->str_len = 0;
    } else if (c == '\r') {
        if (line)
            s_caret(k, c);
        else
            t->cr = true;
    } else if ((c == '\n' || c == '\t') && !line)
        s_putc(k, (char)c);
    else if (c < 0x20 || c == 0x7f)
        s_caret(k, c);
    else if (c < 0x80)
        s_putc(k, (char)c);
    else if (c >= 0xc2 && c <= 0xdf) {
        t->u8[0] = c, t->u8_len = 1, t->u8_need = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
        t->u8[0] = c, t->u8_len = 1, t->u8_need = 3;
    } else if (c >= 0xf0 && c <= 0xf4) {
        t->u8[0] = c, t->u8_len = 1, t->u8_need = 4;
    } else
        s_hexbyte(k, c); /* a continuation byte alone, C0/C1 lead bytes, 0xf5-0xff: raw C1 too */
}

/* ------------------------------------------------------------ the machine */

static void s_byte(korch_termsafe_t *t, sink_t *k, unsigned char c)
{
    switch (t->st) {
    case ST_GROUND: s_ground(t, k, c); return;
    case ST_ESC:
        if (c == '[') {
            t->st = ST_CSI;
            t->csi_len = 0;
            t->csi_inter = false;
        } else if (c == ']' || c == 'P' || c == 'X' || c == '^' || c == '_') {
            t->st = ST_STR;
            t->str_len = 0;
        } else if (c >= 0x20 && c <= 0x2f) {
            t->st = ST_ESC_INTER;
            t->str_len = 1;
        } else if (c >= 0x30 && c <= 0x7e)
            t->st = ST_GROUND; /* a two-byte escape (ESC c resets the terminal): dropped */
        else {
            t->st = ST_GROUND; /* a lone ESC: shown, and c is text again */
            s_caret(k, 0x1b);
            s_ground(t, k, c);
        }
        return;
    case ST_ESC_INTER:
        if (c >= 0x20 && c <= 0x2f && ++t->str_len <= INTER_MAX)
            return;
        t->st = ST_GROUND;
        if (c >= 0x30 && c <= 0x7e)
            return; /* ESC ( B and friends: dropped */
        s_ground(t, k, c); /* malformed: dropped, c is text again */
        return;
    case ST_CSI:
        if (c >= 0x40 && c <= 0x7e) {
            t->st = ST_GROUND;
            if (c == 'm' && !t->csi_inter && (t->flags & KORCH_TERMSAFE_SGR) && s_sgr_param_ok(t->csi, t->csi_len))
                s_emit_sgr(t, k, t->csi, t->csi_len);
            return; /* any other CSI (ESC[2J, cursor moves, modes): dropped */
        }
        if (c >= 0x20 && c <= 0x3f) {
            if (c >= 0x30 && t->csi_inter) {
                t->st = ST_CSI_DROP; /* a parameter after an intermediate: malformed */
                return;
            }
            t->csi_inter |= c < 0x30;
            if (t->csi_len < CSI_MAX)
                t->csi[t->csi_len++] = (char)c;
            else
                t->st = ST_CSI_DROP;
            return;
        }
        t->st = ST_GROUND; /* a control or non-ASCII inside: the sequence is void */
        s_ground(t, k, c);
        return;
    case ST_CSI_DROP:
        if (c >= 0x20 && c <= 0x7e) {
            if (c >= 0x40)
                t->st = ST_GROUND;
            return;
        }
        t->st = ST_GROUND;
        s_ground(t, k, c);
        return;
    case ST_STR:
        if (c == 0x07) {
            t->st = ST_GROUND; /* xterm's OSC terminator */
            return;
        }
        if (c == 0x1b) {
            t->st = ST_STR_ESC;
            return;
        }
        if (c < 0x20 || ++t->str_len > STR_MAX) {
            t->st = ST_GROUND; /* unterminated: it ends here, c is text again */
            s_ground(t, k, c);
        }
        return;
    case ST_STR_ESC:
        if (c == '\\') {
            t->st = ST_GROUND; /* ST */
            return;
        }
        t->st = ST_ESC; /* the string ended at that ESC, which begins something else */
        s_byte(t, k, c);
        return;
    }
}

korch_rc_t korch_termsafe_feed(korch_termsafe_t *t, const char *s, size_t n, korch_buf_t *out, korch_err_t *err)
{
    sink_t k = {out, err, KORCH_OK};
    for (size_t i = 0; i < n && !k.rc; i++)
        s_byte(t, &k, (unsigned char)s[i]);
    return k.rc;
}

korch_rc_t korch_termsafe_finish(korch_termsafe_t *t, korch_buf_t *out, korch_err_t *err)
{
    sink_t k = {out, err, KORCH_OK};
    if (t->st == ST_ESC || t->st == ST_STR_ESC)
        s_caret(&k, 0x1b); /* what followed never came: the ESC alone is shown */
    t->st = ST_GROUND;
    s_u8_flush_invalid(t, &k);
    if (t->cr) {
        t->cr = false;
        s_lone_cr(t, &k);
    }
    if (t->sgr_on) {
        s_put(&k, "\033[0m", 4);
        t->sgr_on = false;
    }
    return k.rc;
}

/* ------------------------------------------------------------ FILE helpers */

bool korch_termsafe_fwrite(korch_termsafe_t *t, FILE *f, const char *s, size_t n)
{
    bool ok = true;
    for (size_t off = 0; off < n && ok; off += 1024) {
        size_t chunk = n - off < 1024 ? n - off : 1024; /* 8 * 1024 + 16 fits tmp */
        korch_buf_reset(&t->tmp);
        ok = korch_termsafe_feed(t, s + off, chunk, &t->tmp, NULL) == KORCH_OK &&
             fwrite(t->tmp.p ? t->tmp.p : "", 1, t->tmp.len, f) == t->tmp.len;
    }
    return ok;
}

bool korch_termsafe_fend(korch_termsafe_t *t, FILE *f)
{
    korch_buf_reset(&t->tmp);
    return korch_termsafe_finish(t, &t->tmp, NULL) == KORCH_OK &&
           fwrite(t->tmp.p ? t->tmp.p : "", 1, t->tmp.len, f) == t->tmp.len;
}

char *korch_termsafe_str(const char *s, unsigned flags)
{
    korch_termsafe_t t = {.flags = flags};
    size_t n = s ? strlen(s) : 0;
    korch_buf_t out;
    korch_buf_init(&out, n <= (SIZE_MAX - 64) / 8 ? 8 * n + 64 : SIZE_MAX, NULL);
    char *r = NULL;
    if (korch_termsafe_feed(&t, s ? s : "", n, &out, NULL) == KORCH_OK &&
        korch_termsafe_finish(&t, &out, NULL) == KORCH_OK)
        r = korch_buf_release(&out, NULL);
    korch_buf_free(&out);
    return r;
}

bool korch_termsafe_fputs(const char *s, unsigned flags, FILE *f)
{
    char *safe = korch_termsafe_str(s, flags);
    bool ok = safe && fputs(safe, f) >= 0;
    free(safe);
    return ok;
}
