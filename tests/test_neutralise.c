/*  korch_htmlsafe and korch_neutraliser: hostile HTML, bundles and widget
 *  comms from a kernel, table-driven. Every rewrite is also judged by an
 *  independent checker of the output (html_inert.h).
 */
#define KORCH_TEST_UNIT /* no kernel, docker or browser: make check runs these */
#include "test.h"
#include "korch/htmlsafe.h"
#include "korch/neutralise.h"
#include "html_inert.h"

#include <ctype.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static bool s_has_ci(const char *hay, const char *needle) { return strcasestr(hay, needle) != NULL; }

typedef struct {
    const char *in;
    size_t len;          /* 0: strlen(in) (for inputs with NUL) */
    const char *want;    /* in the output, or NULL */
    const char *absent;  /* not in the output (any case), or NULL */
    unsigned bits;       /* must all be set */
    unsigned not_bits;   /* must all be clear */
} s_case_t;

#define NOTED KORCH_HS__NOTED
static const s_case_t s_cases[] = {
    {"<script>alert(1)</script>after", 0, "after", "alert", KORCH_HS_SCRIPT, 0},
    {"<SCRIPT>x()</SCRIPT >y", 0, "y", "x()", KORCH_HS_SCRIPT, 0},
    {"<ScRiPt src=//evil.example/x.js></sCrIpT>", 0, NULL, "evil", KORCH_HS_SCRIPT, 0},
    {"<scr<script>ipt>alert(1)</script>", 0, "ipt&gt;alert(1)", "<scr", 0, 0},
    {"<<script>>alert(1)<</script>", 0, "&lt;", "alert", KORCH_HS_SCRIPT, 0},
    {"<script>a</script <script>b</script>c", 0, NULL, "a</", KORCH_HS_SCRIPT, 0},
    {"<script><!--<script></script>alert(1)</script>x", 0, NULL, "<script", KORCH_HS_SCRIPT, 0},
    {"<img src=x onerror=alert(1)>", 0, "<img src=\"x\">", "onerror", KORCH_HS_HANDLER, 0},
    {"<img src=\"x\" ONERROR=\"alert(1)\">", 0, "<img src=\"x\">", "alert", KORCH_HS_HANDLER, 0},
    {"<img/src=x/onerror=alert(1)>", 0, "<img src=", NULL, 0, 0},
    {"<img src=x onerror  =  'alert(1)' >", 0, "<img src=\"x\">", "alert", KORCH_HS_HANDLER, 0},
    {"<body onload=alert(1)>x", 0, "x", "onload", KORCH_HS_OTHER, 0},
    {"<details open ontoggle=alert(1)>x</details>", 0, "<details open=\"\">", "ontoggle", KORCH_HS_HANDLER, 0},
    {"<a href=\"javascript:alert(1)\">x</a>", 0, "<a>x</a>", "javascript", KORCH_HS_URL, 0},
    {"<a href=javascript:alert(1)>x</a>", 0, "<a>x</a>", "javascript", KORCH_HS_URL, 0},
    {"<a href=\"JaVaScRiPt:alert(1)\">x</a>", 0, "<a>", "alert", KORCH_HS_URL, 0},
    {"<a href=\"jav&#x09;ascript:alert(1)\">x</a>", 0, "<a>", "alert", KORCH_HS_URL, 0},
    {"<a href=\"jav\tas\ncript:alert(1)\">x</a>", 0, "<a>", "alert", KORCH_HS_URL, 0},
    {"<a href=\"&#106;avascript:alert(1)\">x</a>", 0, "<a>", "alert", KORCH_HS_URL, 0},
    {"<a href=\"&#x6A&#x61;vascript:alert(1)\">x</a>", 0, NULL, NULL, 0, 0},
    {"<a href=\"javascript&colon;alert(1)\">x</a>", 0, "<a>", "alert", KORCH_HS_URL, 0},
    {"<a href=\"javas&NewLine;cript:alert(1)\">x</a>", 0, "<a>", "alert", KORCH_HS_URL, 0},
    {"<a href=\"&Tab;javascript:alert(1)\">x</a>", 0, "<a>", "alert", KORCH_HS_URL, 0},
    {"<a href=\" \x01\x02javascript:alert(1)\">x</a>", 0, "<a>", "alert", KORCH_HS_URL, 0},
    {"<a href=\"java&#0000000115;cript:alert(1)\">x</a>", 0, NULL, NULL, 0, 0},
    {"<a href=\"vbscript:msgbox(1)\">x</a>", 0, "<a>", "vbscript", KORCH_HS_URL, 0},
    {"<a href=\"data:text/html;base64,PHNjcmlwdD4=\">x</a>", 0, "<a>", "data:", KORCH_HS_URL, 0},
    {"<a href=\"data:image/png;base64,AA\">x</a>", 0, "<a>", "data:", KORCH_HS_URL, 0},
    {"<img src=\"data:image/png;base64,iVBORw0KGgo=\">", 0, "src=\"data:image/png;base64,iVBORw0KGgo=\"", NULL, 0,
     NOTED},
    {"<img src=\"data:text/html,<script>alert(1)</script>\">", 0, "<img>", "script", KORCH_HS_URL, 0},
    {"<a href=\"https://example.org/?q=<x>&amp;y=\"1\">ok</a>", 0, "href=\"https://example.org/?q=&lt;x&gt;&amp;y=\"",
     NULL, 0, NOTED},
    {"<a href=\"x\" href=\"javascript:alert(1)\">x</a>", 0, "<a href=\"x\">", "javascript", 0, 0},
    {"<a href=\"/api/contents\" target=\"_blank\" rel=\"opener\">x</a>", 0, "<a href=\"/api/contents\">", "target",
     KORCH_HS_OTHER, NOTED},
    {"<img src=\"https://x.example/a.png\" srcset=\"javascript:alert(1) 2x\">", 0, NULL, "srcset", KORCH_HS_OTHER, 0},
    {"<iframe srcdoc=\"<script>parent.x=1</script>\"></iframe>after", 0, "after", "srcdoc", KORCH_HS_FRAME, 0},
    {"<IFRAME SRC=\"javascript:alert(1)\"></IFRAME>", 0, NULL, "alert", KORCH_HS_FRAME, 0},
    {"<object data=\"x.swf\"></object><embed src=\"x\"><applet code=x>", 0, NULL, "x.swf", KORCH_HS_FRAME, 0},
    {"<base href=\"https://evil.example/\">", 0, NULL, "evil", KORCH_HS_META, 0},
    {"<meta http-equiv=\"refresh\" content=\"0;url=javascript:alert(1)\">", 0, NULL, "refresh", KORCH_HS_META, 0},
    {"<link rel=stylesheet href=\"https://evil.example/x.css\">", 0, NULL, "evil", KORCH_HS_META, 0},
    {"<form action=\"/api/contents\" method=post><input name=x value=1><button formaction=x>go</button></form>", 0,
     "go", "action", KORCH_HS_FORM, 0},
    {"<svg onload=alert(1)><script>alert(2)</script><circle r=5/></svg>", 0, NULL, "alert", KORCH_HS_SVG, 0},
    {"<svg><a xlink:href=\"javascript:alert(1)\"><text>t</text></a></svg>", 0, "t", "xlink", KORCH_HS_SVG, 0},
    {"<math><mtext><table><mglyph><style><img src=x onerror=alert(1)>", 0, NULL, "onerror", KORCH_HS_SVG, 0},
    {"<svg><style><img src=x onerror=alert(1)></style></svg>", 0, NULL, "onerror", 0, 0},
    {"<noscript><p title=\"</noscript><img src=x onerror=alert(1)>\">", 0, NULL, "onerror", 0, 0},
    {"<title><img src=x onerror=alert(1)></title>t", 0, "t", "img", 0, 0},
    {"<textarea><script>alert(1)</script></textarea>", 0, NULL, "alert", KORCH_HS_FORM, 0},
    {"<xmp><img src=x onerror=alert(1)></xmp>", 0, NULL, "img", 0, 0},
    {"<plaintext><script>alert(1)", 0, NULL, "alert", 0, 0},
    {"<style>*{background:url(//evil.example/?)}</style><b>x</b>", 0, "<b>x</b>", "evil", KORCH_HS_STYLE, NOTED},
    {"<div style=\"background:url(javascript:alert(1))\">x</div>", 0, "<div>x</div>", "url", KORCH_HS_STYLE, NOTED},
    {"<div style=\"color: red; position: fixed; width: expression(alert(1))\">x</div>", 0,
     "<div style=\"color: red\">x</div>", "position", KORCH_HS_STYLE, 0},
    /* found by fuzz_htmlsafe: the word alone, without its "(" */
    {"<div style=\"color: red; width: expressionfi\">iv>", 0, "<div style=\"color: red\">", "expression",
     KORCH_HS_STYLE, 0},
    {"<p style=\"font-family: curly\">x</p>", 0, "<p>x</p>", "curly", KORCH_HS_STYLE, 0},
    {"<p style=\"color: rgb(1, 2, 3); background-color:#fff\">x</p>", 0,
     "<p style=\"color: rgb(1, 2, 3); background-color: #fff\">", NULL, 0, KORCH_HS_STYLE},
    {"<p style=\"color: r\\65 d; font-family: 'x'\">x</p>", 0, "<p>x</p>", NULL, KORCH_HS_STYLE, 0},
    {"<p style=\"-moz-binding: url(x.xml#x)\">x</p>", 0, "<p>x</p>", NULL, KORCH_HS_STYLE, 0},
    {"<!-- <script>alert(1)</script> -->ok", 0, "ok", "alert", 0, 0},
    {"<!--><img src=x onerror=alert(1)>-->", 0, "<img src=\"x\">", "onerror", KORCH_HS_HANDLER, 0},
    {"<!---><img src=x onerror=alert(1)>", 0, "<img src=\"x\">", "onerror", KORCH_HS_HANDLER, 0},
    {"<!-- a --!><img src=x onerror=alert(1)>", 0, "<img src=\"x\">", "onerror", KORCH_HS_HANDLER, 0},
    {"<!-- never closed <script>alert(1)</script>", 0, NULL, "alert", 0, 0},
    {"<!DOCTYPE html><?xml version=1?><![CDATA[<script>alert(1)</script>]]>", 0, NULL, "<script", 0, 0},
    {"</x onclick=alert(1)>text", 0, "text", "onclick", 0, 0},
    {"</ script>x", 0, "x", NULL, 0, 0},
    {"<scri\0pt>alert(1)</scri\0pt>", 23, "alert(1)", "<scri", 0, 0},
    {"<img src=x\0 onerror=alert(1)>", 29, NULL, "onerror=", KORCH_HS_HANDLER, 0},
    {"a\0b", 3, "a\xEF\xBF\xBD" "b", NULL, 0, 0},
    {"<img src=x onerror=\"alert(1)", 0, NULL, "onerror", 0, 0},
    {"<img src=x onerror=alert(1)", 0, NULL, "onerror", 0, 0},
    {"<b title='a>b'>x", 0, "<b title=\"a&gt;b\">x", NULL, 0, 0},
    {"<b title=\"x\"onclick=\"alert(1)\">x</b>", 0, "<b title=\"x\">", "onclick", KORCH_HS_HANDLER, 0},
    {"<b title=\"&quot;&gt;&lt;script&gt;\">x</b>", 0, "title=\"&quot;&gt;&lt;script&gt;\"", NULL, 0, 0},
    {"<img src=x &#111;nerror=alert(1)>", 0, "<img src=\"x\">", NULL, KORCH_HS_OTHER, 0},
    {"<x-widget onclick=alert(1)>t</x-widget>", 0, "t", "onclick", KORCH_HS_OTHER, NOTED},
    {"<div id=\"x1\" name=\"x\">y</div>", 0, "<div id=\"x1\">y</div>", "name=", KORCH_HS_OTHER, NOTED},
    {"<DIV CLASS=\"A\">x</DIV>", 0, "<div class=\"A\">x</div>", NULL, 0, 0},
    {"&lt;script&gt; &#x3C;script&#x3E; &amp; &hellip; a & b < c > d", 0,
     "&lt;script&gt; &#x3C;script&#x3E; &amp; &hellip; a &amp; b &lt; c &gt; d", NULL, 0, 0},
    {"<br/><hr /><img src=a.png />", 0, "<br><hr><img src=\"a.png\">", NULL, 0, 0},
    {"<a href=\"https://a.example\"><b><i>deep</a></i></b>", 0, "deep", NULL, 0, 0},
    {"<table border=\"1\" class=\"dataframe\">\n  <thead>\n    <tr style=\"text-align: right;\">\n      <th></th>\n"
     "      <th>a</th>\n    </tr>\n  </thead>\n  <tbody>\n    <tr>\n      <th>0</th>\n      <td>1</td>\n    </tr>\n"
     "  </tbody>\n</table>",
     0,
     "<table border=\"1\" class=\"dataframe\">\n  <thead>\n    <tr style=\"text-align: right\">\n      <th></th>\n"
     "      <th>a</th>\n    </tr>\n  </thead>\n  <tbody>\n    <tr>\n      <th>0</th>\n      <td>1</td>\n    </tr>\n"
     "  </tbody>\n</table>",
     NULL, 0, NOTED | KORCH_HS_STYLE},
    {"<div>\n<style scoped>\n    .dataframe tbody tr th:only-of-type {\n        vertical-align: middle;\n    }\n"
     "</style>\n<table border=\"1\" class=\"dataframe\"><tr><td>1</td></tr></table>\n</div>",
     0, "<table border=\"1\" class=\"dataframe\"><tr><td>1</td></tr></table>", "vertical-align", KORCH_HS_STYLE, NOTED},
};

TEST(neutralise_html_table)
{
    for (size_t i = 0; i < sizeof s_cases / sizeof *s_cases; i++) {
        const s_case_t *c = &s_cases[i];
        size_t len = c->len ? c->len : strlen(c->in);
        korch_buf_t b = KORCH_BUF_INIT(1 << 20);
        unsigned bits = 0;
        korch_err_t err = {0};
        if (!CHECK_EQ(korch_htmlsafe(c->in, len, &b, &bits, &err), KORCH_OK))
            continue;
        const char *out = b.p ? b.p : "";
        char why[256];
        bool ok = s_inert(out, b.len, why, sizeof why);
        if (!ok)
            fprintf(stderr, "  case %zu: not inert (%s): %s\n", i, why, out);
        CHECK(ok);
        if (c->want && !strstr(out, c->want)) {
            fprintf(stderr, "  case %zu: wanted %s in: %s\n", i, c->want, out);
            CHECK(false);
        }
        if (c->absent && s_has_ci(out, c->absent)) {
            fprintf(stderr, "  case %zu: %s should be gone from: %s\n", i, c->absent, out);
            CHECK(false);
        }
        if ((bits & c->bits) != c->bits || (bits & c->not_bits)) {
            fprintf(stderr, "  case %zu: bits %#x, want %#x set and %#x clear: %s\n", i, bits, c->bits, c->not_bits,
                    c->in);
            CHECK(false);
        }
        korch_buf_free(&b);
    }
}

/* Every cut of every case (inputs ending mid-tag, mid-entity, mid-comment)
   and every case with each byte uppercased or replaced by NUL is inert. */
TEST(neutralise_html_truncated_and_mangled)
{
    char why[256];
    size_t runs = 0;
    for (size_t i = 0; i < sizeof s_cases / sizeof *s_cases; i++) {
        const s_case_t *c = &s_cases[i];
        size_t len = c->len ? c->len : strlen(c->in);
        for (size_t cut = 0; cut <= len; cut++) {
            for (int mode = 0; mode < 3; mode++) {
                char *in = malloc(len + 1);
                memcpy(in, c->in, len);
                if (mode == 1 && cut < len)
                    in[cut] = (char)toupper((unsigned char)in[cut]);
                if (mode == 2 && cut < len)
                    in[cut] = 0;
                size_t n = mode == 0 ? cut : len;
                korch_buf_t b = KORCH_BUF_INIT(1 << 20);
                korch_rc_t rc = korch_htmlsafe(in, n, &b, NULL, NULL);
                bool ok = rc == KORCH_OK && s_inert(b.p ? b.p : "", b.len, why, sizeof why);
                if (!ok) {
                    fprintf(stderr, "  case %zu cut %zu mode %d: %s: %.*s -> %s\n", i, cut, mode, why, (int)n, in,
                            b.p);
                    CHECK(false);
                    free(in);
                    korch_buf_free(&b);
                    return;
                }
                runs++;
                free(in);
                korch_buf_free(&b);
            }
        }
    }
    CHECK(runs > 1000);
}

/* A bound too small fails cleanly (the caller then keeps nothing). */
TEST(neutralise_html_bound)
{
    korch_buf_t b = KORCH_BUF_INIT(8);
    korch_err_t err = {0};
    CHECK_EQ(korch_htmlsafe("<b>\"\"\"\"\"\"\"\"</b>", 22, &b, NULL, &err), KORCH_E_TOOBIG);
    korch_buf_free(&b);
}

/* ------------------------------------------------------------ bundles */

static json_t *s_bundle(const char *text)
{
    json_error_t e;
    json_t *j = json_loads(text, 0, &e);
    if (!j)
        fprintf(stderr, "  bad JSON in the test: %s: %s\n", e.text, text);
    return j;
}

static const char *s_get(const json_t *d, const char *k) { return json_string_value(json_object_get(d, k)); }

TEST(neutralise_bundles)
{
    const char *hint = "Restart the kernel to allow it.";
    char why[256];
    /* HTML with script: cleaned, the note says what and how */
    json_t *d = s_bundle("{\"text/html\": \"<b>helper loaded</b><script>fetch('/api/contents/x', {method:'PUT'})"
                         "</script>\", \"text/plain\": \"<IPython.core.display.HTML object>\"}");
    unsigned bits = korch_neutralise_bundle(d, hint, 0);
    const char *h = s_get(d, "text/html");
    CHECK(bits & KORCH_HS_SCRIPT);
    CHECK_CONTAINS(h, "<b>helper loaded</b>");
    CHECK_CONTAINS(h, "code from the agent ran in this kernel");
    CHECK_CONTAINS(h, "scripts");
    CHECK_CONTAINS(h, hint);
    CHECK(!strstr(h, "fetch"));
    CHECK(s_inert(h, strlen(h), why, sizeof why));
    CHECK_STREQ(s_get(d, "text/plain"), "<IPython.core.display.HTML object>");
    json_decref(d);

    /* application/javascript: gone, the note in HTML with the text shown */
    d = s_bundle("{\"application/javascript\": \"window.__pwned = 1\", \"text/plain\": "
                 "\"<IPython.core.display.Javascript object>\"}");
    bits = korch_neutralise_bundle(d, hint, 0);
    CHECK(bits & KORCH_HS_SCRIPT);
    CHECK(!json_object_get(d, "application/javascript"));
    h = s_get(d, "text/html");
    CHECK(h && strstr(h, "<pre>&lt;IPython.core.display.Javascript object&gt;</pre>"));
    CHECK(h && strstr(h, "korch:"));
    json_decref(d);

    /* SVG with script: an <img> of it, quietly */
    d = s_bundle("{\"image/svg+xml\": \"<svg xmlns='http://www.w3.org/2000/svg' onload='alert(1)'><circle r='5'/>"
                 "</svg>\", \"text/plain\": \"<Figure>\"}");
    bits = korch_neutralise_bundle(d, hint, 0);
    CHECK(!json_object_get(d, "image/svg+xml"));
    h = s_get(d, "text/html");
    CHECK(h && strncmp(h, "<img src=\"data:image/svg+xml;base64,", 36) == 0);
    CHECK(h && !strstr(h, "korch:"));
    CHECK(!(bits & KORCH_NE__NOTED));
    json_decref(d);

    /* markdown: its source as text */
    d = s_bundle("{\"text/markdown\": \"# t\\n<img src=x onerror=alert(1)> [a](javascript:alert(1))\", "
                 "\"text/plain\": \"<IPython.core.display.Markdown object>\"}");
    bits = korch_neutralise_bundle(d, hint, 0);
    CHECK(bits & KORCH_NE_MARKDOWN);
    CHECK(!json_object_get(d, "text/markdown"));
    CHECK_STREQ(s_get(d, "text/plain"), "# t\n<img src=x onerror=alert(1)> [a](javascript:alert(1))");
    h = s_get(d, "text/html");
    CHECK(h && strstr(h, "&lt;img src=x onerror=alert(1)&gt;") && strstr(h, "markdown"));
    CHECK(h && s_inert(h, strlen(h), why, sizeof why));
    json_decref(d);

    /* LaTeX: text/plain kept when there is one */
    d = s_bundle("{\"text/latex\": \"$\\\\href{javascript:alert(1)}{x}$\", \"text/plain\": \"x\"}");
    bits = korch_neutralise_bundle(d, hint, 0);
    CHECK(bits & KORCH_NE_LATEX);
    CHECK_STREQ(s_get(d, "text/plain"), "x");
    json_decref(d);

    /* a chart: untouched */
    d = s_bundle("{\"image/png\": \"iVBORw0KGgo=\\n\", \"text/plain\": \"<Figure size 640x480>\"}");
    CHECK_EQ(korch_neutralise_bundle(d, hint, 0), 0);
    CHECK_STREQ(s_get(d, "image/png"), "iVBORw0KGgo=\n");
    CHECK(!json_object_get(d, "text/html"));
    json_decref(d);

    /* another rich type beside an image: the image moves into the HTML */
    d = s_bundle("{\"image/png\": \"iVBO\\nRw0=\", \"application/vnd.evil+json\": {\"js\": 1}, \"text/plain\": \"p\"}");
    bits = korch_neutralise_bundle(d, hint, 0);
    CHECK(bits & KORCH_NE_MIME);
    CHECK(!json_object_get(d, "application/vnd.evil+json"));
    h = s_get(d, "text/html");
    CHECK(h && strstr(h, "<img src=\"data:image/png;base64,iVBORw0=\">"));
    CHECK_STREQ(s_get(d, "image/png"), "iVBO\nRw0=");
    json_decref(d);

    /* nbformat's list form of HTML */
    d = s_bundle("{\"text/html\": [\"<b onclick=x()>\", \"bold</b>\"]}");
    bits = korch_neutralise_bundle(d, NULL, 0);
    CHECK(bits & KORCH_HS_HANDLER);
    h = s_get(d, "text/html");
    CHECK(h && strncmp(h, "<b>bold</b>", 11) == 0);
    json_decref(d);

    /* a DataFrame: its table as it was, no note */
    d = s_bundle("{\"text/html\": \"<div><style scoped>.dataframe thead th {text-align: right;}</style><table "
                 "border=\\\"1\\\" class=\\\"dataframe\\\"><tr><td>4242</td></tr></table></div>\"}");
    bits = korch_neutralise_bundle(d, hint, 0);
    h = s_get(d, "text/html");
    CHECK_STREQ(h, "<div><table border=\"1\" class=\"dataframe\"><tr><td>4242</td></tr></table></div>");
    CHECK(!(bits & KORCH_NE__NOTED));
    json_decref(d);

    /* not a bundle */
    CHECK_EQ(korch_neutralise_bundle(NULL, hint, 0), 0);
    d = json_string("x");
    CHECK_EQ(korch_neutralise_bundle(d, hint, 0), 0);
    json_decref(d);
}

/* ------------------------------------------------------------ messages */

static korch_neut_rc_t s_msg(korch_neutraliser_t *n, bool tainted, const char *type, const char *content,
                             json_t **out)
{
    json_t *c = s_bundle(content);
    korch_neut_rc_t rc = korch_neutraliser_message(n, tainted, type, c, out, NULL);
    json_decref(c);
    return rc;
}

TEST(neutralise_messages)
{
    korch_neutraliser_t *n = korch_neutraliser_new("Restart the kernel to allow it.");
    json_t *out = NULL;
    const char *v;
    if (!CHECK(n))
        return;
    /* display_data, update_display_data, execute_result */
    const char *types[] = {"display_data", "update_display_data", "execute_result"};
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(s_msg(n, true, types[i],
                        "{\"data\": {\"text/html\": \"<script>window.__pwned=1</script>x\"}, \"metadata\": {}, "
                        "\"transient\": {\"display_id\": \"d1\"}}",
                        &out), KORCH_NEUT_CHANGED);
        v = json_string_value(json_object_get(json_object_get(out, "data"), "text/html"));
        CHECK(v && !strstr(v, "__pwned") && strstr(v, "korch:"));
        CHECK_STREQ(json_string_value(json_object_get(json_object_get(out, "transient"), "display_id")), "d1");
        json_decref(out);
        /* untainted: as it is */
        CHECK_EQ(s_msg(n, false, types[i], "{\"data\": {\"text/html\": \"<script>x()</script>\"}, \"metadata\": {}}",
                        &out), KORCH_NEUT_KEEP);
        CHECK(!out);
    }
    /* text and plain outputs: as they are */
    CHECK_EQ(s_msg(n, true, "stream", "{\"name\": \"stdout\", \"text\": \"<script>x()</script>\"}", &out), KORCH_NEUT_KEEP);
    CHECK_EQ(s_msg(n, true, "display_data", "{\"data\": {\"text/plain\": \"<b>\", \"image/png\": \"AA==\"}}", &out), KORCH_NEUT_KEEP);
    /* a page payload of execute_reply */
    CHECK_EQ(s_msg(n, true, "execute_reply",
                    "{\"status\": \"ok\", \"payload\": [{\"source\": \"page\", \"data\": {\"text/html\": "
                    "\"<img src=x onerror=alert(1)>\"}, \"start\": 0}]}",
                    &out), KORCH_NEUT_CHANGED);
    v = json_string_value(json_object_get(
        json_object_get(json_array_get(json_object_get(out, "payload"), 0), "data"), "text/html"));
    CHECK(v && !strstr(v, "onerror"));
    json_decref(out);
    /* help links */
    CHECK_EQ(s_msg(n, true, "kernel_info_reply",
                    "{\"help_links\": [{\"text\": \"a\", \"url\": \"javascript:alert(1)\"}, {\"text\": \"b\", "
                    "\"url\": \"https://docs.python.org\"}]}",
                    &out), KORCH_NEUT_CHANGED);
    CHECK_EQ(json_array_size(json_object_get(out, "help_links")), 1);
    json_decref(out);

    /* widgets: an HTML widget's value, in its comm_open and its updates */
    const char *open_html = "{\"comm_id\": \"c1\", \"target_name\": \"jupyter.widget\", \"data\": {\"state\": "
                            "{\"_model_name\": \"HTMLModel\", \"_model_module\": \"@jupyter-widgets/controls\", "
                            "\"_view_module\": \"@jupyter-widgets/controls\", \"value\": \"<img src=x "
                            "onerror=window.__pwned=1>\"}, \"buffer_paths\": []}}";
    CHECK_EQ(s_msg(n, true, "comm_open", open_html, &out), KORCH_NEUT_CHANGED);
    v = json_string_value(json_object_get(json_object_get(json_object_get(out, "data"), "state"), "value"));
    CHECK(v && !strstr(v, "onerror") && strstr(v, "korch:"));
    json_decref(out);
    CHECK_EQ(s_msg(n, true, "comm_msg",
                    "{\"comm_id\": \"c1\", \"data\": {\"method\": \"update\", \"state\": {\"value\": "
                    "\"<script>x()</script>ok\"}, \"buffer_paths\": []}}",
                    &out), KORCH_NEUT_CHANGED);
    v = json_string_value(json_object_get(json_object_get(json_object_get(out, "data"), "state"), "value"));
    CHECK(v && !strstr(v, "x()") && strstr(v, "ok"));
    json_decref(out);
    /* a Text widget (opened untainted, remembered) keeps its '<' */
    CHECK_EQ(s_msg(n, false, "comm_open",
                    "{\"comm_id\": \"c2\", \"target_name\": \"jupyter.widget\", \"data\": {\"state\": "
                    "{\"_model_name\": \"TextModel\", \"_model_module\": \"@jupyter-widgets/controls\", \"value\": "
                    "\"a\"}}}",
                    &out), KORCH_NEUT_KEEP);
    CHECK_EQ(s_msg(n, true, "comm_msg",
                    "{\"comm_id\": \"c2\", \"data\": {\"method\": \"update\", \"state\": {\"value\": \"a<b\"}}}",
                    &out), KORCH_NEUT_KEEP);
    /* a comm nobody opened through us: taken as HTML */
    CHECK_EQ(s_msg(n, true, "comm_msg",
                    "{\"comm_id\": \"zz\", \"data\": {\"method\": \"update\", \"state\": {\"value\": "
                    "\"<img src=x onerror=x()>\"}}}",
                    &out), KORCH_NEUT_CHANGED);
    json_decref(out);
    /* closed: forgotten, then taken as HTML */
    CHECK_EQ(s_msg(n, true, "comm_close", "{\"comm_id\": \"c2\", \"data\": {}}", &out), KORCH_NEUT_KEEP);
    CHECK_EQ(s_msg(n, true, "comm_msg",
                    "{\"comm_id\": \"c2\", \"data\": {\"method\": \"update\", \"state\": {\"value\": "
                    "\"a<b onclick=x()>\"}}}",
                    &out), KORCH_NEUT_CHANGED);
    json_decref(out);
    /* a custom widget module (code the browser would load), another target, target_module */
    CHECK_EQ(s_msg(n, true, "comm_open",
                    "{\"comm_id\": \"c3\", \"target_name\": \"jupyter.widget\", \"data\": {\"state\": "
                    "{\"_model_name\": \"M\", \"_model_module\": \"https://evil.example/w.js\", \"_view_module\": "
                    "\"evil\"}}}",
                    &out), KORCH_NEUT_DROP);
    CHECK_EQ(s_msg(n, true, "comm_open",
                    "{\"comm_id\": \"c4\", \"target_name\": \"jupyter.widget\", \"data\": {\"state\": "
                    "{\"_model_name\": \"ButtonModel\", \"_model_module\": \"@jupyter-widgets/controls\", "
                    "\"_view_module\": \"evil-view\"}}}",
                    &out), KORCH_NEUT_DROP);
    CHECK_EQ(s_msg(n, true, "comm_open", "{\"comm_id\": \"c5\", \"target_name\": \"bokeh_comm\", \"data\": {}}", &out), KORCH_NEUT_DROP);
    CHECK_EQ(s_msg(n, true, "comm_open",
                    "{\"comm_id\": \"c6\", \"target_name\": \"jupyter.widget.version\", \"target_module\": "
                    "\"https://evil.example/m.js\", \"data\": {}}",
                    &out), KORCH_NEUT_CHANGED);
    CHECK(!json_object_get(out, "target_module"));
    json_decref(out);
    /* the control comm's update_states: the custom model goes, the HTML one is cleaned */
    CHECK_EQ(s_msg(n, true, "comm_msg",
                    "{\"comm_id\": \"ctl\", \"data\": {\"method\": \"update_states\", \"states\": {\"m1\": "
                    "{\"model_name\": \"HTMLModel\", \"model_module\": \"@jupyter-widgets/controls\", \"state\": "
                    "{\"value\": \"<svg onload=x()>\"}}, \"m2\": {\"model_name\": \"E\", \"model_module\": \"evil\", "
                    "\"state\": {}}}, \"buffer_paths\": {}}}",
                    &out), KORCH_NEUT_CHANGED);
    json_t *states = json_object_get(json_object_get(out, "data"), "states");
    CHECK(!json_object_get(states, "m2"));
    v = json_string_value(json_object_get(json_object_get(json_object_get(states, "m1"), "state"), "value"));
    CHECK(v && !strstr(v, "onload"));
    json_decref(out);
    /* an Output widget's outputs set from the kernel */
    CHECK_EQ(s_msg(n, true, "comm_msg",
                    "{\"comm_id\": \"c7\", \"data\": {\"method\": \"update\", \"state\": {\"outputs\": "
                    "[{\"output_type\": \"display_data\", \"data\": {\"application/javascript\": \"x()\"}}]}}}",
                    &out), KORCH_NEUT_CHANGED);
    json_t *o0 = json_array_get(json_object_get(json_object_get(json_object_get(out, "data"), "state"), "outputs"), 0);
    CHECK(!json_object_get(json_object_get(o0, "data"), "application/javascript"));
    json_decref(out);
    korch_neutraliser_destroy(&n);
    CHECK(!n);
    korch_neutraliser_destroy(&n);
}
