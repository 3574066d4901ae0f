/*  An independent judge of korch_htmlsafe's output, for the unit tests and
 *  the fuzz target: only listed tags (its own list, not htmlsafe.c's),
 *  listed attributes in double quotes with no raw < or > in them, no raw
 *  '>' or NUL in text, no on* attribute, URL attributes of an allowed
 *  scheme (as the URL parser reads them), style values without a function
 *  call but colours' (url(), expression() ...), escapes or comments. Header-only (static functions).
 */
#ifndef KORCH_TESTS_HTML_INERT_H
#define KORCH_TESTS_HTML_INERT_H

#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* The checker's own lists (not htmlsafe.c's). */
static const char s_ok_tags[] =
    " a abbr b bdi blockquote br caption center cite code col colgroup dd del details dfn div dl dt em figcaption "
    "figure h1 h2 h3 h4 h5 h6 hr i img ins kbd li mark ol p pre q rp rt ruby s samp small span strike strong sub "
    "summary sup table tbody td tfoot th thead time tr tt u ul var wbr ";
static const char s_ok_attrs[] = " id class title dir lang align valign style href src alt width height span open value "
                                 "start type reversed border cellpadding cellspacing colspan rowspan nowrap scope ";

static inline bool s_word(const char *list, const char *w, size_t n)
{
    char key[80];
    if (n == 0 || n > 64)
        return false;
    snprintf(key, sizeof key, " %.*s ", (int)n, w);
    return strstr(list, key) != NULL;
}

/* Decode the five escapes htmlsafe writes. */
static inline void s_unescape(const char *v, size_t n, char *out, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < n && o + 1 < cap; i++) {
        static const char *const e[][2] = {{"&amp;", "&"}, {"&lt;", "<"}, {"&gt;", ">"}, {"&quot;", "\""}, {"&#39;", "'"}};
        bool done = false;
        for (size_t k = 0; k < 5 && !done; k++) {
            size_t l = strlen(e[k][0]);
            if (i + l <= n && memcmp(v + i, e[k][0], l) == 0) {
                out[o++] = e[k][1][0];
                i += l - 1;
                done = true;
            }
        }
        if (!done)
            out[o++] = v[i];
    }
    out[o] = 0;
}

static inline bool s_bad_url(const char *v)
{
    while (*v && (unsigned char)*v <= 0x20)
        v++;
    char u[64];
    size_t n = 0;
    for (; *v && n < sizeof u - 1; v++)
        if (*v != '\t' && *v != '\n' && *v != '\r')
            u[n++] = (char)tolower((unsigned char)*v);
    u[n] = 0;
    size_t k = strcspn(u, ":/?#");
    if (u[k] != ':')
        return false;
    return !(strncmp(u, "http:", 5) == 0 || strncmp(u, "https:", 6) == 0 || strncmp(u, "mailto:", 7) == 0 ||
             strncmp(u, "data:image/", 11) == 0);
}

/* A CSS function call other than a colour's (url(), expression(), var() ...). */
static inline bool s_css_call(const char *v)
{
    for (const char *p = strchr(v, '('); p; p = strchr(p + 1, '(')) {
        const char *b = p;
        while (b > v && isalpha((unsigned char)b[-1]))
            b--;
        size_t n = (size_t)(p - b);
        if (!((n == 3 && (strncasecmp(b, "rgb", 3) == 0 || strncasecmp(b, "hsl", 3) == 0)) ||
              (n == 4 && (strncasecmp(b, "rgba", 4) == 0 || strncasecmp(b, "hsla", 4) == 0))))
            return true;
    }
    return false;
}

/* Is out inert? why gets the first reason it is not. */
static inline bool s_inert(const char *out, size_t n, char *why, size_t wl)
{
    for (size_t i = 0; i < n; i++) {
        char c = out[i];
        if (c == 0) {
            snprintf(why, wl, "NUL at %zu", i);
            return false;
        }
        if (c == '>') {
            snprintf(why, wl, "'>' outside a tag at %zu", i);
            return false;
        }
        if (c != '<')
            continue;
        size_t j = i + 1;
        if (j < n && out[j] == '/')
            j++;
        size_t nb = j;
        while (j < n && (islower((unsigned char)out[j]) || isdigit((unsigned char)out[j])))
            j++;
        if (!s_word(s_ok_tags, out + nb, j - nb)) {
            snprintf(why, wl, "tag '%.*s' at %zu", (int)(j - nb + 1), out + nb, i);
            return false;
        }
        for (;;) {
            if (j < n && out[j] == '>')
                break;
            if (j >= n || out[j] != ' ') {
                snprintf(why, wl, "bad tag syntax at %zu", j);
                return false;
            }
            size_t ab = ++j;
            while (j < n && islower((unsigned char)out[j]))
                j++;
            size_t al = j - ab;
            if (!s_word(s_ok_attrs, out + ab, al) || (al >= 2 && out[ab] == 'o' && out[ab + 1] == 'n')) {
                snprintf(why, wl, "attribute '%.*s' at %zu", (int)al, out + ab, ab);
                return false;
            }
            if (j + 1 >= n || out[j] != '=' || out[j + 1] != '"') {
                snprintf(why, wl, "attribute not double-quoted at %zu", j);
                return false;
            }
            size_t vb = j + 2, ve = vb;
            while (ve < n && out[ve] != '"' && out[ve] != '<' && out[ve] != '>')
                ve++;
            if (ve >= n || out[ve] != '"') {
                snprintf(why, wl, "raw < or > in a value at %zu", ve);
                return false;
            }
            char val[8192];
            s_unescape(out + vb, ve - vb, val, sizeof val);
            if ((al == 4 && memcmp(out + ab, "href", 4) == 0) || (al == 3 && memcmp(out + ab, "src", 3) == 0)) {
                if (s_bad_url(val)) {
                    snprintf(why, wl, "URL '%.200s'", val);
                    return false;
                }
            }
            if (al == 5 && memcmp(out + ab, "style", 5) == 0 && (strchr(val, '\\') || s_css_call(val) ||
                                                                  strstr(val, "/*"))) {
                snprintf(why, wl, "style '%.200s'", val);
                return false;
            }
            j = ve + 1;
        }
        i = j;
    }
    return true;
}

#endif
