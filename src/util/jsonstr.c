/*  JSON string scanning (jsonstr.h). */
#include "korch/jsonstr.h"

#include <stddef.h>
#include <string.h>

typedef struct {
    const char *p, *end;
} s_cursor_t;

static bool s_decode(s_cursor_t *c, char *out, size_t cap, size_t *len, size_t *dropped);

int korch_hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static int s_hex4(const char *p)
{
    int v = 0;
    for (int i = 0; i < 4; i++) {
        int d = korch_hexval(p[i]);
        if (d < 0)
            return -1;
        v = v << 4 | d;
    }
    return v;
}

size_t korch_utf8_put(unsigned cp, char out[4])
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Decode a JSON string at c->p (on the opening quote) into out (capacity
   cap, whole UTF-8 characters only); bytes that do not fit go to *dropped. */
bool korch_jsonstr_decode(const char **pp, const char *end, char *out, size_t cap, size_t *len, size_t *dropped)
{
    s_cursor_t cur = {*pp, end}, *c = &cur;
    bool ok = s_decode(c, out, cap, len, dropped);
    if (ok)
        *pp = c->p;
    return ok;
}

static bool s_decode(s_cursor_t *c, char *out, size_t cap, size_t *len, size_t *dropped)
{
    if (c->p >= c->end || *c->p != '"')
        return false;
    c->p++;
    *len = 0;
    while (c->p < c->end) {
        unsigned char ch = (unsigned char)*c->p;
        char enc[4];
        size_t n = 0;
        if (ch == '"') {
            c->p++;
            return true;
        }
        if (ch < 0x20)
            return false;
        if (ch < 0x80 && ch != '\\') {
            /* A run of plain ASCII: copy it in one go. */
            const char *run = c->p;
            while (run < c->end && (unsigned char)*run >= 0x20 && (unsigned char)*run < 0x80 && *run != '"' &&
                   *run != '\\')
                run++;
            size_t runlen = (size_t)(run - c->p);
            size_t room = *dropped ? 0 : cap - *len;
            size_t take = runlen < room ? runlen : room;
            memcpy(out + *len, c->p, take);
            *len += take;
            *dropped += runlen - take;
            c->p = run;
            continue;
        }
        if (ch != '\\') {
            /* copy a raw UTF-8 character whole */
            size_t clen = ch < 0x80 ? 1 : (ch >> 5) == 6 ? 2 : (ch >> 4) == 14 ? 3 : (ch >> 3) == 30 ? 4 : 0;
            if (!clen || c->p + clen > c->end)
                return false;
            for (size_t i = 1; i < clen; i++) /* continuation bytes only: a quote is never swallowed */
                if (((unsigned char)c->p[i] & 0xC0) != 0x80)
                    return false;
            if (!*dropped && *len + clen <= cap) {
                memcpy(out + *len, c->p, clen);
                *len += clen;
            } else
                *dropped += clen;
            c->p += clen;
            continue;
        }
        if (c->p + 1 >= c->end)
            return false;
        char e = c->p[1];
        c->p += 2;
        unsigned cp;
        switch (e) {
        case '"': cp = '"'; break;
        case '\\': cp = '\\'; break;
        case '/': cp = '/'; break;
        case 'b': cp = '\b'; break;
        case 'f': cp = '\f'; break;
        case 'n': cp = '\n'; break;
        case 'r': cp = '\r'; break;
        case 't': cp = '\t'; break;
        case 'u': {
            if (c->end - c->p < 4)
                return false;
            int v = s_hex4(c->p);
            if (v < 0)
                return false;
            c->p += 4;
            cp = (unsigned)v;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                if (c->end - c->p < 6 || c->p[0] != '\\' || c->p[1] != 'u')
                    return false;
                int lo = s_hex4(c->p + 2);
                if (lo < 0xDC00 || lo > 0xDFFF)
                    return false;
                c->p += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + ((unsigned)lo - 0xDC00);
            } else if (cp >= 0xDC00 && cp <= 0xDFFF)
                return false;
            break;
        }
        default: return false;
        }
        n = korch_utf8_put(cp, enc);
        if (!*dropped && *len + n <= cap) { /* once cut, the rest is dropped */
            memcpy(out + *len, enc, n);
            *len += n;
        } else
            *dropped += n;
    }
    return false;
}

const char *korch_jsonstr_end(const char *p, const char *end)
{
    const char *from = p;
    while (p < end) {
        const char *q = memchr(p, '"', (size_t)(end - p));
        if (!q)
            return NULL;
        size_t n = 0;
        while (q - n > from && q[-1 - (ptrdiff_t)n] == '\\')
            n++;
        if (n % 2 == 0)
            return q;
        p = q + 1;
    }
    return NULL;
}

size_t korch_jsonstr_escape(const char *q, const char *end, size_t *elen)
{
    if (end - q >= 6 && q[1] == 'u') {
        int cp = s_hex4(q + 2);
        if (cp >= 0xD800 && cp <= 0xDBFF && end - q >= 12 && q[6] == '\\' && q[7] == 'u') {
            *elen = 12;
            return 4;
        }
        *elen = 6;
        return cp < 0 ? 6 : cp < 0x80 ? 1 : cp < 0x800 ? 2 : 3;
    }
    *elen = end - q >= 2 ? 2 : (size_t)(end - q);
    return 1;
}
