/*  korch_jsonfield: one string member of a streamed JSON object, decoded as
 *  it arrives. See include/korch/jsonfield.h. */
#include "korch/jsonfield.h"
#include "korch/jsonstr.h"

#include <string.h>

enum {
    S_START,        /* before the object's "{" */
    S_KEY_WAIT,     /* a key (or the object's end) comes next */
    S_KEY,          /* inside a key */
    S_COLON,        /* after a key */
    S_VALUE_WAIT,   /* after the colon */
    S_STR,          /* inside the wanted value */
    S_ESC,          /* inside an escape of the wanted value */
    S_SKIP_STR,     /* inside a string value not wanted */
    S_SKIP_NEST,    /* inside an object or array value not wanted */
    S_SKIP_SCALAR,  /* inside a number, true, false or null */
    S_AFTER,        /* after a value: "," or "}" */
    S_END,
};

void korch_jsonfield_init(korch_jsonfield_t *f, const char *key)
{
    memset(f, 0, sizeof *f);
    size_t n = strlen(key);
    if (n >= sizeof f->key)
        n = sizeof f->key - 1;
    memcpy(f->key, key, n);
    f->key_len = n;
}

static bool s_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* One character inside a string that is skipped: true when it ends it. */
static bool s_skip_char(korch_jsonfield_t *f, char c)
{
    if (f->skip_esc) {
        f->skip_esc = false;
        return false;
    }
    if (c == '\\')
        f->skip_esc = true;
    return c == '"';
}

/* A high surrogate that no low half followed. */
static size_t s_flush_hi(korch_jsonfield_t *f, char *out)
{
    if (!f->hi)
        return 0;
    f->hi = 0;
    return korch_utf8_put(0xFFFD, out);
}

/* The escape in f->esc is complete: decode it. */
static size_t s_escape(korch_jsonfield_t *f, char *out)
{
    size_t n = 0;
    char c = f->esc[0];
    if (c != 'u') {
        static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
        const char *p = strchr(from, c);
        n += s_flush_hi(f, out);
        if (!p || !c) {
            f->done = true;
            f->state = S_END;
            return n;
        }
        out[n++] = to[p - from];
        return n;
    }
    unsigned cp = 0;
    for (int i = 1; i <= 4; i++)
        cp = cp << 4 | (unsigned)korch_hexval(f->esc[i]);
    if (cp >= 0xD800 && cp <= 0xDBFF) {
        n += s_flush_hi(f, out);
        f->hi = cp;
    } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
        if (f->hi) {
            n += korch_utf8_put(0x10000 + ((f->hi - 0xD800) << 10) + (cp - 0xDC00), out);
            f->hi = 0;
        } else
            n += korch_utf8_put(0xFFFD, out);
    } else {
        n += s_flush_hi(f, out);
        n += korch_utf8_put(cp, out + n);
    }
    return n;
}

size_t korch_jsonfield_feed(korch_jsonfield_t *f, const char *in, size_t len, char *out)
{
    size_t n = 0;
    for (size_t i = 0; i < len && f->state != S_END; i++) {
        char c = in[i];
        switch (f->state) {
        case S_START:
            if (c == '{')
                f->state = S_KEY_WAIT;
            else if (!s_ws(c))
                f->state = S_END;
            break;
        case S_KEY_WAIT:
            if (c == '"') {
                f->state = S_KEY;
                f->klen = 0;
                f->kesc = f->ktoolong = false;
            } else if (c == '}' || (!s_ws(c) && c != ','))
                f->state = S_END;
            break;
        case S_KEY:
            if (!f->kesc && c == '"') {
                f->matched = !f->found && !f->ktoolong && f->klen == f->key_len && memcmp(f->kbuf, f->key, f->klen) == 0;
                f->state = S_COLON;
                break;
            }
            /* an escaped character in a key is kept as written: such a key is never ours */
            f->kesc = !f->kesc && c == '\\';
            if (f->klen < sizeof f->kbuf)
                f->kbuf[f->klen++] = c;
            else
                f->ktoolong = true;
            break;
        case S_COLON:
            if (c == ':')
                f->state = S_VALUE_WAIT;
            else if (!s_ws(c))
                f->state = S_END;
            break;
        case S_VALUE_WAIT:
            if (s_ws(c))
                break;
            if (c == '"' && f->matched) {
                f->found = true;
                f->state = S_STR;
            } else if (c == '"') {
                f->state = S_SKIP_STR;
                f->skip_esc = false;
            } else if (c == '{' || c == '[') {
                f->state = S_SKIP_NEST;
                f->depth = 1;
                f->in_skip_str = f->skip_esc = false;
            } else
                f->state = S_SKIP_SCALAR;
            break;
        case S_STR:
            if (c == '\\') {
                f->state = S_ESC;
                f->esc_len = 0;
            } else if (c == '"') {
                n += s_flush_hi(f, out + n);
                f->done = true;
                f->state = S_END;
            } else {
                n += s_flush_hi(f, out + n);
                out[n++] = c;
            }
            break;
        case S_ESC:
            if (f->esc_len > 0 && f->esc[0] == 'u' && korch_hexval(c) < 0) {
                f->done = true;
                f->state = S_END;
                break;
            }
            f->esc[f->esc_len++] = c;
            if (f->esc[0] != 'u' || f->esc_len == 5) {
                f->state = S_STR;
                n += s_escape(f, out + n);
            }
            break;
        case S_SKIP_STR:
            if (s_skip_char(f, c))
                f->state = S_AFTER;
            break;
        case S_SKIP_NEST:
            if (f->in_skip_str) {
                if (s_skip_char(f, c))
                    f->in_skip_str = false;
            } else if (c == '"')
                f->in_skip_str = true;
            else if (c == '{' || c == '[')
                f->depth++;
            else if ((c == '}' || c == ']') && --f->depth == 0)
                f->state = S_AFTER;
            break;
        case S_SKIP_SCALAR:
            if (c == ',')
                f->state = S_KEY_WAIT;
            else if (c == '}')
                f->state = S_END;
            else if (s_ws(c))
                f->state = S_AFTER;
            break;
        case S_AFTER:
            if (c == ',')
                f->state = S_KEY_WAIT;
            else if (!s_ws(c))
                f->state = S_END;
            break;
        }
    }
    return n;
}
