/*  An allow-list rewrite of HTML (korch/htmlsafe.h).
 *
 *  The tokenizer follows the states of the HTML5 spec ("13.2.5
 *  Tokenization") closely enough that ordinary HTML (a pandas table, a
 *  styled span) comes out as it went in; it never needs to be exact,
 *  because nothing of the input reaches the output but text (escaped here)
 *  and the tags and attributes this file writes itself.
 */
#include "korch/htmlsafe.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct {
    const char *p, *end;
    korch_buf_t *out;
    korch_err_t *err;
    korch_rc_t rc;
    unsigned removed;
} s_rw_t;

static void s_put(s_rw_t *w, const char *s, size_t n)
{
    if (w->rc == KORCH_OK && n)
        w->rc = korch_buf_add(w->out, s, n, "neutralised output", w->err);
}

static void s_puts(s_rw_t *w, const char *s) { s_put(w, s, strlen(s)); }

static bool s_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\f' || c == '\r'; }
static bool s_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
static bool s_digit(char c) { return c >= '0' && c <= '9'; }
static bool s_hex(char c) { return s_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
static char s_lower(char c) { return c >= 'A' && c <= 'Z' ? (char)(c + 32) : c; }

/* ------------------------------------------------------------ the lists */

/* Elements kept, with the attributes each may have besides the global
   ones. Nothing here is a raw-text element, foreign content or able to
   load a document. */
typedef struct {
    const char *name;
    const char *attrs;  /* space-separated, with spaces around: " href " */
    bool is_void;
} s_elem_t;

static const s_elem_t s_elems[] = {
    {"a", " href ", false},        {"abbr", "", false},         {"b", "", false},
    {"bdi", "", false},            {"blockquote", "", false},   {"br", "", true},
    {"caption", "", false},        {"center", "", false},       {"cite", "", false},
    {"code", "", false},           {"col", " span width ", true}, {"colgroup", " span width ", false},
    {"dd", "", false},             {"del", "", false},          {"details", " open ", false},
    {"dfn", "", false},            {"div", "", false},          {"dl", "", false},
    {"dt", "", false},             {"em", "", false},           {"figcaption", "", false},
    {"figure", "", false},         {"h1", "", false},           {"h2", "", false},
    {"h3", "", false},             {"h4", "", false},           {"h5", "", false},
    {"h6", "", false},             {"hr", "", true},            {"i", "", false},
    {"img", " src alt width height ", true},                    {"ins", "", false},
    {"kbd", "", false},            {"li", " value ", false},    {"mark", "", false},
    {"ol", " start type reversed ", false},                     {"p", "", false},
    {"pre", "", false},            {"q", "", false},            {"rp", "", false},
    {"rt", "", false},             {"ruby", "", false},         {"s", "", false},
    {"samp", "", false},           {"small", "", false},        {"span", "", false},
    {"strike", "", false},         {"strong", "", false},       {"sub", "", false},
    {"summary", "", false},        {"sup", "", false},
    {"table", " border cellpadding cellspacing width ", false}, {"tbody", "", false},
    {"td", " colspan rowspan width height nowrap ", false},     {"tfoot", "", false},
    {"th", " colspan rowspan width height nowrap scope ", false}, {"thead", "", false},
    {"time", "", false},           {"tr", "", false},           {"tt", "", false},
    {"u", "", false},              {"ul", " type ", false},     {"var", "", false},
    {"wbr", "", true},
};

/* Attributes every kept element may have (id as JupyterLab's sanitizer
   keeps it; not name, not on*). */
static const char s_global_attrs[] = " id class title dir lang align valign style ";

/* Elements whose content is not markup (script data, RAWTEXT, RCDATA): they
   go with everything up to their end tag. */
static const char s_rawtext[] = " script style xmp iframe noembed noframes noscript textarea title ";

static const struct {
    const char *names;
    unsigned bit;
} s_kinds[] = {
    {" script ", KORCH_HS_SCRIPT},
    {" iframe frame frameset object embed applet portal fencedframe param ", KORCH_HS_FRAME},
    {" form input button select option optgroup textarea datalist output label fieldset legend keygen ",
     KORCH_HS_FORM},
    {" svg math ", KORCH_HS_SVG},
    {" base meta link ", KORCH_HS_META},
    {" style ", KORCH_HS_STYLE},
};

/* Is name (n bytes, lowercase) a word of list (" a b ")? */
static bool s_in(const char *list, const char *name, size_t n)
{
    if (!n || n > 64)
        return false;
    char key[68];
    key[0] = ' ';
    memcpy(key + 1, name, n);
    key[n + 1] = ' ';
    key[n + 2] = 0;
    return strstr(list, key) != NULL;
}

static const s_elem_t *s_elem(const char *name, size_t n)
{
    for (size_t i = 0; i < sizeof s_elems / sizeof *s_elems; i++)
        if (strlen(s_elems[i].name) == n && memcmp(s_elems[i].name, name, n) == 0)
            return &s_elems[i];
    return NULL;
}

static unsigned s_kind(const char *name, size_t n)
{
    for (size_t i = 0; i < sizeof s_kinds / sizeof *s_kinds; i++)
        if (s_in(s_kinds[i].names, name, n))
            return s_kinds[i].bit;
    return KORCH_HS_OTHER;
}

/* ------------------------------------------------------------ escaping */

/* cp as UTF-8 into b; NUL, surrogates and what is past Unicode as U+FFFD. */
static size_t s_utf8(unsigned long cp, char b[4])
{
    if (cp == 0 || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        cp = 0xFFFD;
    if (cp < 0x80) {
        b[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        b[0] = (char)(0xC0 | (cp >> 6));
        b[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        b[0] = (char)(0xE0 | (cp >> 12));
        b[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        b[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    b[0] = (char)(0xF0 | (cp >> 18));
    b[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    b[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    b[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

static void s_escape(s_rw_t *w, const char *s, size_t n)
{
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        const char *rep = NULL;
        switch (s[i]) {
        case '<': rep = "&lt;"; break;
        case '>': rep = "&gt;"; break;
        case '&': rep = "&amp;"; break;
        case '"': rep = "&quot;"; break;
        case '\'': rep = "&#39;"; break;
        case 0: rep = "\xEF\xBF\xBD"; break;
        default: break;
        }
        if (!rep)
            continue;
        s_put(w, s + run, i - run);
        s_puts(w, rep);
        run = i + 1;
    }
    s_put(w, s + run, n - run);
}

korch_rc_t korch_html_escape(const char *text, size_t len, korch_buf_t *out, korch_err_t *err)
{
    s_rw_t w = {.out = out, .err = err};
    s_escape(&w, text, len);
    return w.rc;
}

/* Length of a well-formed character reference at s ("&amp;", "&#39;",
   "&#x27;"), 0 when it is not one. */
static size_t s_charref(const char *s, const char *end)
{
    const char *q = s + 1;
    if (q < end && *q == '#') {
        q++;
        bool hex = q < end && (*q == 'x' || *q == 'X');
        if (hex)
            q++;
        const char *d = q;
        while (q < end && q - d < 8 && (hex ? s_hex(*q) : s_digit(*q)))
            q++;
        return q > d && q < end && *q == ';' ? (size_t)(q + 1 - s) : 0;
    }
    const char *d = q;
    while (q < end && q - d < 32 && (s_alpha(*q) || s_digit(*q)))
        q++;
    return q > d && s_alpha(*d) && q < end && *q == ';' ? (size_t)(q + 1 - s) : 0;
}

/* An attribute value decoded: numeric references and a few named ones
   (those URL tricks use). Others stay as written and are escaped on
   output, so the browser sees exactly this decoded value. */
static size_t s_decode(const char *v, size_t n, char *out, size_t cap)
{
    static const struct {
        const char *name;
        const char *text;
    } named[] = {
        {"amp;", "&"},  {"lt;", "<"},    {"gt;", ">"},      {"quot;", "\""}, {"apos;", "'"},   {"nbsp;", "\xC2\xA0"},
        {"Tab;", "\t"}, {"NewLine;", "\n"}, {"colon;", ":"}, {"sol;", "/"},  {"lpar;", "("},   {"rpar;", ")"},
        {"semi;", ";"}, {"comma;", ","}, {"period;", "."}, {"excl;", "!"},  {"num;", "#"},    {"equals;", "="},
        {"bsol;", "\\"}, {"quest;", "?"}, {"percnt;", "%"}, {"plus;", "+"}, {"lowbar;", "_"}, {"hyphen;", "-"},
        {"dash;", "\xE2\x80\x90"}, {"ast;", "*"}, {"commat;", "@"},
    };
    size_t o = 0;
    for (size_t i = 0; i < n && o + 4 < cap;) {
        if (v[i] == '&') {
            size_t r = s_charref(v + i, v + n);
            if (r && v[i + 1] == '#') {
                bool hex = v[i + 2] == 'x' || v[i + 2] == 'X';
                unsigned long cp = 0;
                for (size_t k = i + (hex ? 3 : 2); k < i + r - 1 && cp <= 0x10FFFF; k++)
                    cp = cp * (hex ? 16 : 10) +
                         (unsigned long)(s_digit(v[k]) ? v[k] - '0' : s_lower(v[k]) - 'a' + 10);
                /* the spec's replacements for C1 codes do not matter here: what
                   is decoded is what is re-encoded */
                char b[4];
                size_t bl = s_utf8(cp > 0x10FFFF ? 0 : cp, b);
                memcpy(out + o, b, bl); /* fits: a reference is longer than its UTF-8 */
                o += bl;
                i += r;
                continue;
            }
            bool done = false;
            for (size_t k = 0; r && k < sizeof named / sizeof *named; k++) {
                size_t ln = strlen(named[k].name);
                if (ln == r - 1 && memcmp(v + i + 1, named[k].name, ln) == 0) {
                    size_t lt = strlen(named[k].text);
                    memcpy(out + o, named[k].text, lt);
                    o += lt;
                    i += r;
                    done = true;
                    break;
                }
            }
            if (done)
                continue;
        }
        out[o++] = v[i] ? v[i] : '\x01'; /* a NUL: never part of a scheme or a property */
        i++;
    }
    out[o] = 0;
    return o;
}

/* ------------------------------------------------------------ attributes */

/* A URL attribute's value (decoded) allowed? As the URL parser reads it:
   leading and trailing C0 controls and spaces stripped, tabs and newlines
   removed anywhere; then the scheme is what comes before a ':' that comes
   before any '/', '?' or '#'. */
static bool s_url_ok(const char *v, bool image)
{
    char u[64];
    size_t n = 0;
    const char *s = v;
    while (*s && (unsigned char)*s <= 0x20)
        s++;
    for (; *s && n < sizeof u - 1; s++)
        if (*s != '\t' && *s != '\n' && *s != '\r')
            u[n++] = s_lower(*s);
    u[n] = 0;
    size_t k = strcspn(u, ":/?#");
    if (u[k] != ':')
        return !*s || u[k]; /* relative (this origin's GET, no script); not when cut before its end */
    if ((k == 4 && memcmp(u, "http", 4) == 0) || (k == 5 && memcmp(u, "https", 5) == 0))
        return true;
    if (!image)
        return k == 6 && memcmp(u, "mailto", 6) == 0;
    static const char *const imgs[] = {"data:image/png", "data:image/jpeg", "data:image/gif", "data:image/webp",
                                       "data:image/bmp", "data:image/svg+xml"}; /* an image cannot run script */
    for (size_t i = 0; i < sizeof imgs / sizeof *imgs; i++) {
        size_t l = strlen(imgs[i]);
        if (strncmp(u, imgs[i], l) == 0 && (u[l] == ';' || u[l] == ','))
            return true;
    }
    return false;
}

/* A style property's value: words, numbers, units, #colours and
   rgb()/hsl() colours; no url(), expression(), escapes, quotes or
   comments. */
static bool s_css_value_ok(const char *v, size_t n)
{
    if (!n)
        return false;
    /* Words that name a script or a fetch in some engine's CSS are refused
       whole, even without their "(": "url", "expression" (old IE). */
    static const char *const words[] = {"url", "expression"};
    for (size_t w = 0; w < sizeof words / sizeof *words; w++) {
        size_t wl = strlen(words[w]);
        for (size_t i = 0; i + wl <= n; i++)
            if (strncasecmp(v + i, words[w], wl) == 0)
                return false;
    }
    for (size_t i = 0; i < n; i++) {
        char c = v[i];
        if (s_alpha(c) || s_digit(c) || strchr(" #%.,+-_!", c))
            continue;
        if (c == '(') {
            size_t b = i;
            while (b > 0 && s_alpha(v[b - 1]))
                b--;
            size_t fn = i - b;
            if (!((fn == 3 && (strncasecmp(v + b, "rgb", 3) == 0 || strncasecmp(v + b, "hsl", 3) == 0)) ||
                  (fn == 4 && (strncasecmp(v + b, "rgba", 4) == 0 || strncasecmp(v + b, "hsla", 4) == 0))))
                return false;
            size_t j = i + 1;
            while (j < n && (s_digit(v[j]) || strchr(" .,%/", v[j])))
                j++;
            if (j >= n || v[j] != ')')
                return false;
            i = j;
            continue;
        }
        return false;
    }
    return true;
}

static const char s_css_props[] =
    " color background-color text-align vertical-align font-weight font-style font-size font-family "
    "text-decoration white-space border border-collapse border-spacing border-color border-style border-width "
    "border-top border-bottom border-left border-right padding padding-top padding-bottom padding-left "
    "padding-right margin margin-top margin-bottom margin-left margin-right width height min-width max-width "
    "min-height max-height line-height letter-spacing word-break overflow-wrap text-indent list-style-type ";

/* Keep the declarations of style whose property is listed and whose value
   is plain; into out as "p: v; p: v". */
static size_t s_style(s_rw_t *w, const char *v, char *out, size_t cap)
{
    size_t o = 0;
    const char *s = v;
    while (*s) {
        const char *e = strchr(s, ';');
        size_t dl = e ? (size_t)(e - s) : strlen(s);
        const char *colon = memchr(s, ':', dl);
        bool kept = false;
        if (colon) {
            const char *pb = s, *pe = colon, *vb = colon + 1, *ve = s + dl;
            while (pb < pe && s_space(*pb))
                pb++;
            while (pe > pb && s_space(pe[-1]))
                pe--;
            while (vb < ve && s_space(*vb))
                vb++;
            while (ve > vb && s_space(ve[-1]))
                ve--;
            char prop[40];
            size_t pl = (size_t)(pe - pb);
            if (pl && pl < sizeof prop) {
                for (size_t i = 0; i < pl; i++)
                    prop[i] = s_lower(pb[i]);
                if (s_in(s_css_props, prop, pl) && s_css_value_ok(vb, (size_t)(ve - vb)) &&
                    o + pl + (size_t)(ve - vb) + 4 < cap) {
                    if (o) {
                        memcpy(out + o, "; ", 2);
                        o += 2;
                    }
                    memcpy(out + o, prop, pl);
                    o += pl;
                    memcpy(out + o, ": ", 2);
                    o += 2;
                    memcpy(out + o, vb, (size_t)(ve - vb));
                    o += (size_t)(ve - vb);
                    kept = true;
                }
            }
        }
        bool blank = true;
        for (size_t i = 0; i < dl; i++)
            blank = blank && s_space(s[i]);
        if (!kept && !blank)
            w->removed |= KORCH_HS_STYLE;
        s = e ? e + 1 : s + dl;
    }
    out[o] = 0;
    return o;
}

#define MAX_ATTR_VALUE 8192 /* longer values are dropped (a data: image in an <img> is the long one) */
#define MAX_IMG_SRC (16u << 20)

/* Write attribute name = raw value (as written, n bytes) when allowed on
   elem; else note why it went. */
static void s_attr(s_rw_t *w, const s_elem_t *elem, const char *name, size_t nl, const char *raw, size_t n)
{
    if (nl >= 2 && name[0] == 'o' && name[1] == 'n') {
        w->removed |= KORCH_HS_HANDLER;
        return;
    }
    if (!s_in(s_global_attrs, name, nl) && !s_in(elem->attrs, name, nl)) {
        w->removed |= KORCH_HS_OTHER;
        return;
    }
    bool url = (nl == 4 && memcmp(name, "href", 4) == 0) || (nl == 3 && memcmp(name, "src", 3) == 0);
    bool img_src = url && nl == 3;
    size_t cap = (img_src ? MAX_IMG_SRC : MAX_ATTR_VALUE) + 8;
    if (n + 8 > cap) {
        w->removed |= KORCH_HS_OTHER;
        return;
    }
    korch_buf_t dec = KORCH_BUF_INIT(cap);
    if (korch_buf_reserve(&dec, n + 8, "attribute", NULL) != KORCH_OK) {
        w->rc = korch_err_set(w->err, KORCH_E_NOMEM, "out of memory for an attribute of %zu bytes", n);
        return;
    }
    size_t dl = s_decode(raw, n, dec.p, n + 8);
    if (url && !s_url_ok(dec.p, img_src)) {
        w->removed |= KORCH_HS_URL;
        goto out;
    }
    const char *val = dec.p;
    char *style = NULL;
    if (nl == 5 && memcmp(name, "style", 5) == 0) {
        style = malloc(dl + 8);
        if (!style)
            goto out;
        dl = s_style(w, dec.p, style, dl + 8);
        val = style;
        if (!dl) {
            free(style);
            goto out;
        }
    }
    s_puts(w, " ");
    s_put(w, name, nl);
    s_puts(w, "=\"");
    s_escape(w, val, dl);
    s_puts(w, "\"");
    free(style);
out:
    korch_buf_free(&dec);
}

/* ------------------------------------------------------------ tags */

/* The end of the raw-text element name's content: just after its end tag
   ("</script" + space, / or >, in any case, then to its >), or the end. */
static const char *s_skip_rawtext(const char *p, const char *end, const char *name, size_t nl)
{
    for (const char *q = p; q + 2 + nl <= end; q++) {
        if (q[0] != '<' || q[1] != '/' || strncasecmp(q + 2, name, nl) != 0)
            continue;
        const char *a = q + 2 + nl;
        if (a < end && !s_space(*a) && *a != '/' && *a != '>')
            continue;
        const char *gt = memchr(a, '>', (size_t)(end - a));
        return gt ? gt + 1 : end;
    }
    return end;
}

#define MAX_NAME 64

/* A tag at w->p ('<' then a letter, or '</' then a letter). Returns false
   at the end of the input inside the tag (the spec drops such a tag). */
static bool s_tag_(s_rw_t *w);
static bool s_tag(s_rw_t *w)
{
    size_t mark = w->out->len; /* a tag the input ends inside is taken back */
    bool ok = s_tag_(w);
    if (!ok && w->rc == KORCH_OK && w->out->p) {
        w->out->len = mark;
        w->out->p[mark] = 0;
    }
    return ok;
}

static bool s_tag_(s_rw_t *w)
{
    const char *p = w->p + 1, *end = w->end;
    bool closing = *p == '/';
    if (closing)
        p++;
    char name[MAX_NAME + 1];
    size_t nl = 0;
    bool long_name = false;
    while (p < end && !s_space(*p) && *p != '/' && *p != '>') {
        if (nl < MAX_NAME)
            name[nl++] = *p ? s_lower(*p) : '?';
        else
            long_name = true;
        p++;
    }
    name[nl] = 0;
    const s_elem_t *elem = long_name ? NULL : s_elem(name, nl);
    if (!elem && !closing)
        w->removed |= long_name ? KORCH_HS_OTHER : s_kind(name, nl);
    bool open = elem && !closing;
    char seen[512] = " "; /* the attribute names written: " href class " */
    size_t seen_len = 1;
    if (open) {
        s_puts(w, "<");
        s_puts(w, name);
    }
    /* attributes (an end tag's are read and dropped) */
    for (;;) {
        while (p < end && (s_space(*p) || *p == '/'))
            p++;
        if (p >= end)
            return false;
        if (*p == '>') {
            p++;
            break;
        }
        const char *an = p;
        p++; /* the first character may be '=' */
        while (p < end && !s_space(*p) && *p != '/' && *p != '>' && *p != '=')
            p++;
        char aname[MAX_NAME + 1];
        size_t al = (size_t)(p - an);
        bool attr_ok = al <= MAX_NAME;
        for (size_t i = 0; attr_ok && i < al; i++)
            aname[i] = an[i] ? s_lower(an[i]) : '?';
        const char *val = NULL;
        size_t vl = 0;
        while (p < end && s_space(*p))
            p++;
        if (p < end && *p == '=') {
            p++;
            while (p < end && s_space(*p))
                p++;
            if (p >= end)
                return false;
            if (*p == '"' || *p == '\'') {
                const char *q = memchr(p + 1, *p, (size_t)(end - p - 1));
                if (!q)
                    return false;
                val = p + 1;
                vl = (size_t)(q - val);
                p = q + 1;
            } else {
                val = p;
                while (p < end && !s_space(*p) && *p != '>')
                    p++;
                vl = (size_t)(p - val);
            }
        }
        if (!open)
            continue;
        if (!attr_ok) {
            w->removed |= KORCH_HS_OTHER;
            continue;
        }
        /* the first of a name wins (the spec drops the repeats) */
        if (s_in(seen, aname, al))
            continue;
        if (seen_len + al + 2 < sizeof seen) {
            memcpy(seen + seen_len, aname, al);
            seen_len += al;
            seen[seen_len++] = ' ';
            seen[seen_len] = 0;
        } else
            continue; /* more distinct attributes than any element needs */
        s_attr(w, elem, aname, al, val ? val : "", vl);
    }
    if (open)
        s_puts(w, ">");
    else if (elem && closing && !elem->is_void) {
        s_puts(w, "</");
        s_puts(w, name);
        s_puts(w, ">");
    }
    if (!closing && !elem && nl == 9 && memcmp(name, "plaintext", 9) == 0)
        p = end; /* the rest is its text: dropped with it */
    else if (!closing && !elem && s_in(s_rawtext, name, nl))
        p = s_skip_rawtext(p, end, name, nl);
    w->p = p;
    return true;
}

/* A comment, doctype, processing instruction or bogus end tag at w->p:
   skipped. */
static void s_markup_decl(s_rw_t *w)
{
    const char *p = w->p, *end = w->end;
    if (end - p >= 4 && memcmp(p, "<!--", 4) == 0) {
        const char *q = p + 4;
        if (q < end && *q == '>') /* <!--> */
            q++;
        else if (end - q >= 2 && q[0] == '-' && q[1] == '>') /* <!---> */
            q += 2;
        else {
            for (; q < end; q++) {
                if (end - q >= 3 && memcmp(q, "-->", 3) == 0) {
                    q += 3;
                    break;
                }
                if (end - q >= 4 && memcmp(q, "--!>", 4) == 0) {
                    q += 4;
                    break;
                }
            }
        }
        w->p = q > end ? end : q;
        return;
    }
    const char *gt = memchr(p, '>', (size_t)(end - p));
    w->p = gt ? gt + 1 : end;
}

korch_rc_t korch_htmlsafe(const char *html, size_t len, korch_buf_t *out, unsigned *removed, korch_err_t *err)
{
    s_rw_t w = {.p = html, .end = html + len, .out = out, .err = err};
    while (w.p < w.end && w.rc == KORCH_OK) {
        const char *p = w.p;
        size_t run = 0;
        while (p + run < w.end && !strchr("<>&\"'", p[run]) && p[run])
            run++;
        if (run) {
            s_put(&w, p, run);
            w.p += run;
            continue;
        }
        char c = *p;
        char next = p + 1 < w.end ? p[1] : 0;
        if (c == '<' && (s_alpha(next) || (next == '/' && p + 2 < w.end && s_alpha(p[2])))) {
            if (!s_tag(&w)) {
                w.removed |= KORCH_HS_OTHER; /* the input ended inside a tag: dropped */
                break;
            }
        } else if (c == '<' && (next == '!' || next == '?' || next == '/')) {
            s_markup_decl(&w);
        } else if (c == '&') {
            size_t r = s_charref(p, w.end);
            if (r)
                s_put(&w, p, r);
            else
                s_puts(&w, "&amp;");
            w.p += r ? r : 1;
        } else {
            s_escape(&w, p, 1);
            w.p++;
        }
    }
    if (removed)
        *removed = w.removed;
    return w.rc;
}

void korch_htmlsafe_what(unsigned removed, char *buf, size_t len)
{
    static const struct {
        unsigned bit;
        const char *words;
    } words[] = {
        {KORCH_HS_SCRIPT, "scripts"},
        {KORCH_HS_HANDLER, "event handlers"},
        {KORCH_HS_URL, "links with a script or document scheme"},
        {KORCH_HS_FRAME, "embedded frames and objects"},
        {KORCH_HS_FORM, "forms"},
        {KORCH_HS_SVG, "inline SVG or MathML"},
        {KORCH_HS_META, "base, meta and link tags"},
    };
    size_t o = 0;
    buf[0] = 0;
    for (size_t i = 0; i < sizeof words / sizeof *words; i++) {
        if (!(removed & words[i].bit))
            continue;
        int n = snprintf(buf + o, len - o, "%s%s", o ? ", " : "", words[i].words);
        if (n < 0 || (size_t)n >= len - o)
            break;
        o += (size_t)n;
    }
}
