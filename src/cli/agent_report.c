/*  korch run / chat: what a person reads under an answer - its numbers and
 *  where each came from (receipts), the verification of the clean
 *  notebook, and the turn's ledger line. Text only; agent.c prints it. */
#include "cli.h"
#include "korch/buf.h"
#include "korch/receipts.h"

#include <stdio.h>
#include <string.h>

#define MAX_REPORT (256u << 10)

char *korch_cli_receipts_text(json_t *receipts)
{
    size_t numbers = 0, unbacked = 0, i;
    korch_receipts_count(receipts, &numbers, &unbacked);
    if (!numbers)
        return NULL;
    korch_buf_t b = KORCH_BUF_INIT(MAX_REPORT);
    korch_buf_addf(&b, NULL, NULL, "numbers: %zu in the answer, %zu not computed by the kernel\n", numbers, unbacked);
    json_t *r;
    json_array_foreach(receipts, i, r) {
        const char *text = json_string_value(json_object_get(r, "text"));
        const char *form = json_string_value(json_object_get(r, "form"));
        if (!json_is_true(json_object_get(r, "found")))
            korch_buf_addf(&b, NULL, NULL, "  %-14s NOT COMPUTED BY THE KERNEL (no output printed it)\n", text);
        else if (form && strcmp(form, "given") == 0)
            korch_buf_addf(&b, NULL, NULL, "  %-14s from the question\n", text);
        else
            korch_buf_addf(&b, NULL, NULL, "  %-14s %s of '%s' printed at turn %d, step %d\n", text, form,
                           json_string_value(json_object_get(r, "printed")),
                           (int)json_integer_value(json_object_get(r, "turn")),
                           (int)json_integer_value(json_object_get(r, "step")));
    }
    return korch_buf_release(&b, NULL);
}

char *korch_cli_verify_text(json_t *v)
{
    korch_buf_t b = KORCH_BUF_INIT(MAX_REPORT);
    korch_buf_addf(&b, NULL, NULL,
                   "verify: %s in a fresh %s kernel (%d code cells, %d numbers compared) in %.1f s; the turn took %.1f s\n",
                   json_string_value(json_object_get(v, "status")), json_string_value(json_object_get(v, "kernel")),
                   (int)json_integer_value(json_object_get(v, "cells")),
                   (int)json_integer_value(json_object_get(v, "compared")),
                   json_number_value(json_object_get(v, "seconds")), json_number_value(json_object_get(v, "turn_seconds")));
    if (json_string_value(json_object_get(v, "message")))
        korch_buf_addf(&b, NULL, NULL, "  %s\n", json_string_value(json_object_get(v, "message")));
    size_t i;
    json_t *d;
    json_array_foreach(json_object_get(v, "differences"), i, d)
        korch_buf_addf(&b, NULL, NULL, "  %s: printed '%s' the first time, not again (now: %.120s)\n",
                       json_string_value(json_object_get(d, "text")), json_string_value(json_object_get(d, "printed")),
                       json_string_value(json_object_get(d, "now")));
    return korch_buf_release(&b, NULL);
}

char *korch_cli_ledger_text(korch_agent_t *agent, const korch_prices_t *prices, json_t *done)
{
    korch_agent_usage_t turn, session;
    korch_agent_usage(agent, &turn, &session);
    char tt[160], ts[160], money[256] = "";
    korch_usage_text(&turn, tt, sizeof tt);
    korch_usage_text(&session, ts, sizeof ts);
    if (prices) {
        korch_cost_t ct, cs;
        korch_agent_cost(agent, &ct, &cs);
        char a[96], b[96];
        korch_cost_text(&ct, korch_prices_currency(prices), a, sizeof a);
        korch_cost_text(&cs, korch_prices_currency(prices), b, sizeof b);
        snprintf(money, sizeof money, "; cost: %s (session: %s)", a, b);
    }
    int steps = (int)json_integer_value(json_object_get(done, "steps"));
    korch_buf_t out = KORCH_BUF_INIT(MAX_REPORT);
    korch_buf_addf(&out, NULL, NULL, "── %d step%s, %.1f s; tokens: %s (session: %s)%s ──\n", steps,
                   steps == 1 ? "" : "s", (double)json_integer_value(json_object_get(done, "elapsed_ms")) / 1e3, tt, ts,
                   money);
    return korch_buf_release(&out, NULL);
}
