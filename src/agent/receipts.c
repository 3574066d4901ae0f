/*  Numbers with receipts: see include/korch/receipts.h. */
#include "korch/receipts.h"
#include "korch/outputs.h"

#include <ctype.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TEXT (1u << 20)     /* bytes of one text read for numbers */
#define MAX_GIVEN 256           /* numbers of a question */

typedef struct {
    size_t start, end;  /* bytes of the text */
    double value;       /* as written, a suffix applied; "30%" is 30 */
    double res;         /* half a unit of its last significant digit */
    bool pct;           /* a % (or "percent") after it */
    bool sign;          /* written with a sign */
} s_num_t;

typedef struct {
    double value, res;
    bool pct;
    char text[40];      /* as printed */
    json_t *where;      /* a reference (shared by the numbers of one output) */
} s_ev_t;

struct korch_receipts {
    s_ev_t *ev;
    size_t n, cap;
    size_t dropped;             /* numbers forgotten at the cap: an unmatched number then says so */
    s_num_t given[MAX_GIVEN];
    size_t ngiven;
};

korch_receipts_t *korch_receipts_new(void) { return calloc(1, sizeof(korch_receipts_t)); }

void korch_receipts_destroy(korch_receipts_t **pr)
{
    if (!pr || !*pr)
        return;
    korch_receipts_t *r = *pr;
    for (size_t i = 0; i < r->n; i++)
        json_decref(r->ev[i].where);
    free(r->ev);
    free(r);
    *pr = NULL;
}

/* ------------------------------------------------------------- scanning */

static bool s_word(int c) { return isalnum(c) || c == '_'; }

/* A thousands separator at s[j] (a comma, a no-break or narrow no-break
   or thin space): its length in bytes, else 0. */
static size_t s_group_sep(const unsigned char *s, size_t len, size_t j)
{
    if (j < len && s[j] == ',')
        return 1;
    if (j + 1 < len && s[j] == 0xC2 && s[j + 1] == 0xA0)
        return 2;
    if (j + 2 < len && s[j] == 0xE2 && s[j + 1] == 0x80 && (s[j + 2] == 0xAF || s[j + 2] == 0x89))
        return 3;
    return 0;
}

static size_t s_digits(const unsigned char *s, size_t len, size_t j)
{
    size_t k = j;
    while (k < len && isdigit(s[k]))
        k++;
    return k - j;
}

/* A suffix word after a number (prose only): its multiplier and length, or 0. */
static double s_suffix(const unsigned char *s, size_t len, size_t j, size_t *used, bool *pct)
{
    static const struct {
        const char *w;
        double m;
    } words[] = {{"thousand", 1e3}, {"million", 1e6}, {"billion", 1e9}, {"percent", -1}, {"bn", 1e9},
                 {"mn", 1e6},       {"k", 1e3},       {"K", 1e3},       {"M", 1e6}};
    size_t k = j;
    if (k < len && s[k] == ' ')
        k++;
    for (size_t i = 0; i < sizeof words / sizeof *words; i++) {
        size_t wl = strlen(words[i].w);
        bool spaced = k > j;
        if (wl == 1 && spaced) /* "5 k" is not 5000 */
            continue;
        if (k + wl <= len && memcmp(s + k, words[i].w, wl) == 0 && (k + wl == len || !s_word(s[k + wl]))) {
            *used = k + wl - j;
            if (words[i].m < 0) {
                *pct = true;
                return 1;
            }
            return words[i].m;
        }
    }
    *used = 0;
    return 1;
}

/* The next number of s[*pos, len): true and *out filled, *pos after it. */
static bool s_next(const char *text, size_t len, size_t *pos, s_num_t *out, bool prose)
{
    const unsigned char *s = (const unsigned char *)text;
    size_t i = *pos;
    while (i < len) {
        size_t sl = 0; /* a sign's length */
        if ((s[i] == '-' || s[i] == '+') && i + 1 < len)
            sl = 1;
        else if (i + 3 < len && s[i] == 0xE2 && s[i + 1] == 0x88 && s[i + 2] == 0x92) /* U+2212 minus */
            sl = 3;
        size_t d = i + sl;
        bool starts = d < len && (isdigit(s[d]) || (s[d] == '.' && d + 1 < len && isdigit(s[d + 1])));
        if (sl && !starts) {
            i += sl;
            continue;
        }
        if (!starts) {
            i++;
            continue;
        }
        unsigned char prev = i ? s[i - 1] : ' ', prev2 = i > 1 ? s[i - 2] : ' ';
        /* inside an identifier (x2, float64, fig-1, v1.2): not a number */
        bool ident = s_word(prev) || (prev == '.' && s_word(prev2)) ||
                     (prev == '-' && (isalpha(prev2) || prev2 == '_'));
        if (sl && (s_word(prev) || prev == ')' || prev == '.'))
            ident = true;
        if (ident) {
            i += sl;
            while (i < len && (s_word(s[i]) || (s[i] == '.' && i + 1 < len && s_word(s[i + 1]))))
                i++;
            continue;
        }
        char buf[400];
        size_t bl = 0;
        bool neg = sl && s[i] != '+';
        if (neg)
            buf[bl++] = '-';
        size_t j = d;
        size_t nd = s_digits(s, len, j);
        int int_digits = 0, tz = 0;
        for (size_t k = 0; k < nd && bl < 300; k++) {
            buf[bl++] = (char)s[j + k];
            int_digits++;
            tz = s[j + k] == '0' ? tz + 1 : 0;
        }
        j += nd;
        /* 1,234,567: groups of exactly three digits after 1-3 */
        if (nd >= 1 && nd <= 3) {
            size_t gl;
            while ((gl = s_group_sep(s, len, j)) && s_digits(s, len, j + gl) == 3 && bl < 300) {
                for (size_t k = 0; k < 3; k++) {
                    buf[bl++] = (char)s[j + gl + k];
                    int_digits++;
                    tz = s[j + gl + k] == '0' ? tz + 1 : 0;
                }
                j += gl + 3;
            }
        }
        int frac = 0;
        if (j + 1 < len && s[j] == '.' && isdigit(s[j + 1])) {
            buf[bl++] = '.';
            j++;
            while (j < len && isdigit(s[j]) && bl < 320) {
                buf[bl++] = (char)s[j++];
                frac++;
            }
            while (j < len && isdigit(s[j]))
                j++;
        }
        int exp10 = 0;
        if (j < len && (s[j] == 'e' || s[j] == 'E')) {
            size_t k = j + 1;
            if (k < len && (s[k] == '-' || s[k] == '+'))
                k++;
            size_t ed = s_digits(s, len, k);
            if (ed && ed < 5) {
                for (size_t q = k; q < k + ed; q++)
                    exp10 = exp10 * 10 + (s[q] - '0');
                if (s[k - 1] == '-')
                    exp10 = -exp10;
                char e[16];
                int el = snprintf(e, sizeof e, "e%d", exp10);
                memcpy(buf + bl, e, (size_t)el);
                bl += (size_t)el;
                j = k + ed;
            }
        }
        buf[bl] = 0;
        double mult = 1;
        bool pct = false;
        size_t used = 0;
        if (prose)
            mult = s_suffix(s, len, j, &used, &pct);
        j += used;
        size_t k = j;
        if (k < len && s[k] == ' ' && k + 1 < len && s[k + 1] == '%')
            k++;
        if (!pct && k < len && s[k] == '%') {
            pct = true;
            j = k + 1;
        }
        /* glued to letters (3D, 2nd, 0x1f, 10px): an identifier, not a quantity */
        if (!used && !pct && j < len && (isalpha(s[j]) || s[j] == '_')) {
            i = j;
            while (i < len && s_word(s[i]))
                i++;
            continue;
        }
        out->start = i;
        out->end = j;
        out->value = strtod(buf, NULL) * mult;
        out->pct = pct;
        out->sign = sl > 0;
        double res = 0.5 * pow(10, exp10 - frac);
        if (!frac && !exp10 && tz > 0 && int_digits - tz >= 2) /* 8,500: rounded to hundreds */
            res = 0.5 * pow(10, tz);
        out->res = res * mult;
        *pos = j;
        return true;
    }
    *pos = len;
    return false;
}

/* ------------------------------------------------------------- evidence */

static void s_push(korch_receipts_t *r, const s_num_t *num, const char *text, json_t *where)
{
    if (r->n == KORCH_RECEIPTS_MAX) { /* the oldest tenth goes */
        size_t drop = KORCH_RECEIPTS_MAX / 10;
        for (size_t i = 0; i < drop; i++)
            json_decref(r->ev[i].where);
        memmove(r->ev, r->ev + drop, (r->n - drop) * sizeof *r->ev);
        r->n -= drop;
        r->dropped += drop;
    }
    if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 256;
        s_ev_t *ev = realloc(r->ev, cap * sizeof *ev);
        if (!ev)
            return;
        r->ev = ev;
        r->cap = cap;
    }
    s_ev_t *e = &r->ev[r->n++];
    e->value = num->value;
    e->res = num->res;
    e->pct = num->pct;
    size_t tl = num->end - num->start;
    if (tl >= sizeof e->text)
        tl = sizeof e->text - 1;
    memcpy(e->text, text + num->start, tl);
    e->text[tl] = 0;
    e->where = json_incref(where);
}

void korch_receipts_add(korch_receipts_t *r, const char *text, size_t len, json_t *where)
{
    if (!r || !text) {
        json_decref(where);
        return;
    }
    if (len > MAX_TEXT)
        len = MAX_TEXT;
    size_t pos = 0;
    s_num_t num;
    while (s_next(text, len, &pos, &num, false))
        s_push(r, &num, text, where);
    json_decref(where);
}

static void s_add_string(korch_receipts_t *r, json_t *t, json_t *where)
{
    if (json_is_string(t)) {
        korch_receipts_add(r, json_string_value(t), json_string_length(t), where);
        return;
    }
    /* nbformat multiline strings: a list of lines */
    size_t i;
    json_t *line;
    json_array_foreach(t, i, line) if (json_is_string(line))
        korch_receipts_add(r, json_string_value(line), json_string_length(line), json_incref(where));
    json_decref(where);
}

void korch_receipts_add_outputs(korch_receipts_t *r, json_t *outputs, json_t *where)
{
    size_t i;
    json_t *o;
    json_array_foreach(outputs, i, o) {
        json_t *text = korch_output_plain(o);
        if (!text)
            continue;
        json_t *w = where ? json_deep_copy(where) : json_object();
        json_object_set_new(w, "output_index", json_integer((json_int_t)i));
        s_add_string(r, text, w);
    }
    json_decref(where);
}

void korch_receipts_given(korch_receipts_t *r, const char *text)
{
    if (!r || !text)
        return;
    size_t len = strlen(text), pos = 0;
    if (len > MAX_TEXT)
        len = MAX_TEXT;
    s_num_t num;
    while (r->ngiven < MAX_GIVEN && s_next(text, len, &pos, &num, true))
        r->given[r->ngiven++] = num;
}

void korch_receipts_given_clear(korch_receipts_t *r)
{
    if (r)
        r->ngiven = 0;
}

/* -------------------------------------------------------------- matching */

enum { F_NONE, F_MAGNITUDE, F_PERCENT, F_ROUNDED, F_EXACT };
static const char *s_forms[] = {NULL, "magnitude", "percent", "rounded", "exact"};

static bool s_equal(double a, double b) { return fabs(a - b) <= 1e-9 * fmax(1.0, fmax(fabs(a), fabs(b))); }

/* Is a (with its resolution) p, exactly or rounded? 2 exact, 1 rounded, 0 no. */
static int s_same(double a, double ares, double p, double pres)
{
    if (s_equal(a, p))
        return 2;
    double slack = 1e-9 * fmax(1.0, fabs(a));
    if (fabs(a - p) <= ares + slack && ares > pres * (1 + 1e-9))
        return 1;
    return 0;
}

static int s_form(const s_num_t *a, double pv, double pres)
{
    int k = s_same(a->value, a->res, pv, pres);
    if (k)
        return k == 2 ? F_EXACT : F_ROUNDED;
    if (a->pct && s_same(a->value / 100, a->res / 100, pv, pres))
        return F_PERCENT;
    if (!a->sign && pv < 0 && a->value >= 0 && s_same(a->value, a->res, -pv, pres))
        return F_MAGNITUDE;
    return F_NONE;
}

static size_t s_codepoints(const char *s, size_t bytes)
{
    size_t n = 0;
    for (size_t i = 0; i < bytes; i++)
        n += ((unsigned char)s[i] & 0xC0) != 0x80;
    return n;
}

json_t *korch_receipts_match(const korch_receipts_t *r, const char *answer)
{
    json_t *out = json_array();
    if (!r || !answer || !out)
        return out;
    size_t len = strlen(answer), pos = 0;
    if (len > MAX_TEXT)
        len = MAX_TEXT;
    s_num_t a;
    while (s_next(answer, len, &pos, &a, true)) {
        int best = F_NONE, best_score = 0;
        const s_ev_t *from = NULL;
        for (size_t i = 0; i < r->n; i++) {
            int f = s_form(&a, r->ev[i].value, r->ev[i].res);
            /* "30%": a printed percentage or ratio says more than a bare 30 (a row count, say) */
            int score = f * 2 - (a.pct && !r->ev[i].pct && (f == F_EXACT || f == F_ROUNDED) ? 5 : 0);
            if (f && score >= best_score) { /* the best form, then the latest output */
                best = f;
                best_score = score;
                from = &r->ev[i];
            }
        }
        bool given = false;
        for (size_t i = 0; !from && i < r->ngiven && !given; i++)
            given = s_form(&a, r->given[i].value, r->given[i].res) >= F_ROUNDED;
        json_t *rec = json_pack("{s:s%, s:I, s:I, s:f, s:b}", "text", answer + a.start, a.end - a.start, "start",
                                (json_int_t)s_codepoints(answer, a.start), "end",
                                (json_int_t)s_codepoints(answer, a.end), "value", a.value, "found",
                                from != NULL || given);
        if (!rec)
            continue;
        if (from) {
            json_object_set_new(rec, "form", json_string(s_forms[best]));
            json_object_set_new(rec, "printed", json_string(from->text));
            if (json_is_object(from->where))
                json_object_update_missing(rec, from->where);
        } else if (given)
            json_object_set_new(rec, "form", json_string("given"));
        else if (!r->dropped)
            json_object_set_new(rec, "note", json_string("not computed by the kernel"));
        else { /* it may be among what the cap forgot: say so, never a plain "not computed" */
            char note[200];
            snprintf(note, sizeof note,
                     "not among the last %zu numbers the kernel printed (%d are kept per session; %zu older ones "
                     "were dropped)",
                     r->n, KORCH_RECEIPTS_MAX, r->dropped);
            json_object_set_new(rec, "note", json_string(note));
            json_object_set_new(rec, "evidence_dropped", json_integer((json_int_t)r->dropped));
        }
        json_array_append_new(out, rec);
    }
    return out;
}

void korch_receipts_count(json_t *receipts, size_t *numbers, size_t *unbacked)
{
    size_t n = 0, u = 0, i;
    json_t *rec;
    json_array_foreach(receipts, i, rec) {
        n++;
        u += !json_is_true(json_object_get(rec, "found"));
    }
    if (numbers)
        *numbers = n;
    if (unbacked)
        *unbacked = u;
}
