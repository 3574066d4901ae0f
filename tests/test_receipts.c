/*  The receipts matcher (korch/receipts.h), table-driven: a number of an
 *  answer against what the kernel printed. */
#define KORCH_TEST_UNIT
#include "test.h"
#include "korch/receipts.h"

#include <stdio.h>

typedef struct {
    const char *printed;    /* what the kernel printed */
    const char *answer;     /* one number in it, the one checked */
    const char *form;       /* the match expected; NULL = not computed by the kernel */
    const char *matched;    /* the printed text cited */
} s_case_t;

static const s_case_t s_cases[] = {
    /* exact, whatever the formatting */
    {"revenue    8451.0\n", "East brings 8,451.00.", "exact", "8451.0"},
    {"8451\n", "in total 8,451", "exact", "8451"},
    {"1.23e-05\n", "a p-value of 0.0000123", "exact", "1.23e-05"},
    {"1234\n", "1\xc2\xa0" "234 rows", "exact", "1234"},                 /* no-break space groups */
    {"1234567\n", "1\xe2\x80\xaf" "234\xe2\x80\xaf" "567 rows", "exact", "1234567"}, /* narrow no-break */
    {"-5\n", "a change of \xe2\x88\x92" "5", "exact", "-5"},               /* U+2212 minus */
    {"-3.2\n", "it moved -3.2 points", "exact", "-3.2"},
    {"(200, 5)\n", "200 rows", "exact", "200"},
    {"(200, 5)\n", "and 5 columns", "exact", "5"},
    {"share 29.5%\n", "29.5% of sales", "exact", "29.5%"},
    /* rounded to the answer's own precision */
    {"8451.37\n", "about 8,451", "rounded", "8451.37"},
    {"8451.37\n", "about 8.45k", "rounded", "8451.37"},
    {"8451\n", "roughly 8,500", "rounded", "8451"},
    {"1512345\n", "1.5 million users", "rounded", "1512345"},
    {"2.3e9\n", "2.3 billion", "exact", "2.3e9"},
    {"1.2345e-05\n", "1.2e-05", "rounded", "1.2345e-05"},
    {"0.2954\n", "about 30%", "percent", "0.2954"},
    {"0.2954\n", "29.5%", "percent", "0.2954"},
    {"0.2954\n", "29.54 percent", "percent", "0.2954"},
    {"0.300\n", "30% of the total", "percent", "0.300"},
    /* a percentage: the printed ratio, not the row count that happens to be 30 */
    {"(30, 5)\nshare 0.300\n", "about 30%", "percent", "0.300"},
    {"30 rows\nshare 30.0%\n", "30%", "exact", "30.0%"},
    /* a sign left out in prose */
    {"delta   -3.2\n", "it fell by 3.2", "magnitude", "-3.2"},
    /* not computed by the kernel */
    {"41\n", "the answer is 42", NULL, NULL},
    {"8451.4\n", "exactly 8,451.37", NULL, NULL},   /* more precise than printed */
    {"3.2\n", "a change of -3.2", NULL, NULL},      /* the sign made up */
    {"0.2954\n", "31%", NULL, NULL},
    {"dtype: float64\n", "64 of them", NULL, NULL}, /* digits of a name are not printed numbers */
    {"x2 = 7\n", "2 of them", NULL, NULL},
    {"100\n", "1000 rows", NULL, NULL},             /* one significant digit: not a rounding */
    {"8451\n", "8,452", NULL, NULL},
};

TEST(receipts_table)
{
    for (size_t i = 0; i < sizeof s_cases / sizeof *s_cases; i++) {
        const s_case_t *c = &s_cases[i];
        korch_receipts_t *r = korch_receipts_new();
        korch_receipts_add(r, c->printed, strlen(c->printed), json_pack("{s:i, s:i}", "step", 3, "turn", 1));
        json_t *rec = korch_receipts_match(r, c->answer);
        if (!CHECK_EQ(json_array_size(rec), 1)) {
            fprintf(stderr, "case %zu: %s -> %s\n", i, c->answer, json_dumps(rec, 0));
            json_decref(rec);
            korch_receipts_destroy(&r);
            continue;
        }
        json_t *n = json_array_get(rec, 0);
        const char *form = json_string_value(json_object_get(n, "form"));
        if (!CHECK_STREQ(form ? form : "(none)", c->form ? c->form : "(none)"))
            fprintf(stderr, "case %zu: '%s' against '%s'\n", i, c->answer, c->printed);
        CHECK_EQ(json_is_true(json_object_get(n, "found")), c->form != NULL);
        if (c->form) {
            CHECK_STREQ(json_string_value(json_object_get(n, "printed")), c->matched);
            CHECK_EQ(json_integer_value(json_object_get(n, "step")), 3);
        } else
            CHECK_STREQ(json_string_value(json_object_get(n, "note")), "not computed by the kernel");
        json_decref(rec);
        korch_receipts_destroy(&r);
    }
}

/* Several numbers: offsets in code points, identifiers skipped, the latest
   output cited, the question's numbers given. */
TEST(receipts_answer_with_several_numbers)
{
    korch_receipts_t *r = korch_receipts_new();
    json_t *outs = json_pack("[{s:s, s:s, s:s}, {s:s, s:{s:s}, s:{}, s:i}]", "output_type", "stream", "name",
                             "stdout", "text", "east 8451.0\nshare 0.300\n", "output_type", "execute_result", "data",
                             "text/plain", "7010.5", "metadata", "execution_count", 3);
    korch_receipts_add_outputs(r, outs, json_pack("{s:i}", "step", 2));
    korch_receipts_add(r, "8451.0\n", 7, json_pack("{s:i}", "step", 4));
    korch_receipts_given(r, "Which are the top 3 regions?");
    const char *answer = "\xe2\x82\xac East: 8,451.00 (30%), north 7,010.50; see fig-1.png. The top 3 are close; "
                         "a growth of 12.5% is made up.";
    json_t *rec = korch_receipts_match(r, answer);
    size_t n = 0, bad = 0;
    korch_receipts_count(rec, &n, &bad);
    CHECK_EQ(n, 5);
    CHECK_EQ(bad, 1);
    json_t *e = json_array_get(rec, 0);
    CHECK_STREQ(json_string_value(json_object_get(e, "text")), "8,451.00");
    CHECK_EQ(json_integer_value(json_object_get(e, "start")), 8); /* the euro sign is one code point */
    CHECK_EQ(json_integer_value(json_object_get(e, "end")), 16);
    CHECK_EQ(json_integer_value(json_object_get(e, "step")), 4);  /* the latest output that printed it */
    e = json_array_get(rec, 1);
    CHECK_STREQ(json_string_value(json_object_get(e, "form")), "percent");
    CHECK_EQ(json_integer_value(json_object_get(e, "output_index")), 0);
    e = json_array_get(rec, 2);
    CHECK_EQ(json_integer_value(json_object_get(e, "output_index")), 1);
    CHECK_STREQ(json_string_value(json_object_get(json_array_get(rec, 3), "form")), "given");
    CHECK_STREQ(json_string_value(json_object_get(json_array_get(rec, 4), "text")), "12.5%");
    CHECK(!json_is_true(json_object_get(json_array_get(rec, 4), "found")));
    json_decref(rec);
    json_decref(outs);
    korch_receipts_destroy(&r);
}

/* The kernel prints without end: the evidence stays bounded and recent. */
TEST(receipts_evidence_is_bounded)
{
    korch_receipts_t *r = korch_receipts_new();
    char line[64];
    for (int i = 0; i < KORCH_RECEIPTS_MAX + 5000; i++) {
        int n = snprintf(line, sizeof line, "%d.5\n", 100000 + i);
        korch_receipts_add(r, line, (size_t)n, NULL);
    }
    json_t *rec = korch_receipts_match(r, "100000.5 and 154999.5");
    json_t *old = json_array_get(rec, 0);
    CHECK(!json_is_true(json_object_get(old, "found"))); /* the oldest went, and its note says why it may be */
    CHECK_CONTAINS(json_string_value(json_object_get(old, "note")), "50000 are kept per session");
    CHECK_EQ(json_integer_value(json_object_get(old, "evidence_dropped")), KORCH_RECEIPTS_MAX / 10);
    CHECK(json_is_true(json_object_get(json_array_get(rec, 1), "found")));
    json_decref(rec);
    korch_receipts_destroy(&r);
}
