/*  The honest ledger: see include/korch/ledger.h. */
#include "korch/ledger.h"
#include "korch/fsutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PRICES_FILE (1u << 20)

void korch_usage_add(korch_usage_t *u, int64_t input, int64_t output)
{
    u->calls++;
    if (input >= 0)
        u->input += input;
    else
        u->input_unknown++;
    if (output >= 0)
        u->output += output;
    else
        u->output_unknown++;
}

void korch_usage_merge(korch_usage_t *into, const korch_usage_t *u)
{
    into->input += u->input;
    into->output += u->output;
    into->calls += u->calls;
    into->input_unknown += u->input_unknown;
    into->output_unknown += u->output_unknown;
}

bool korch_usage_known(const korch_usage_t *u) { return !u->input_unknown && !u->output_unknown; }

int64_t korch_usage_total(const korch_usage_t *u) { return korch_usage_known(u) ? u->input + u->output : -1; }

json_t *korch_usage_json(const korch_usage_t *u)
{
    bool in_none = u->calls && u->input_unknown == u->calls, out_none = u->calls && u->output_unknown == u->calls;
    json_t *j = json_pack("{s:o, s:o, s:i}", "input", in_none ? json_null() : json_integer(u->input), "output",
                          out_none ? json_null() : json_integer(u->output), "calls", u->calls);
    int unreported = u->input_unknown > u->output_unknown ? u->input_unknown : u->output_unknown;
    if (j && unreported)
        json_object_set_new(j, "unreported", json_integer(unreported));
    return j;
}

void korch_usage_text(const korch_usage_t *u, char *buf, size_t len)
{
    int unreported = u->input_unknown > u->output_unknown ? u->input_unknown : u->output_unknown;
    if (u->calls && unreported == u->calls && !u->input && !u->output)
        snprintf(buf, len, "unknown (the model's API did not report usage)");
    else if (unreported)
        snprintf(buf, len, "at least %lld in + %lld out (%d of %d calls unreported)", (long long)u->input,
                 (long long)u->output, unreported, u->calls);
    else
        snprintf(buf, len, "%lld in + %lld out", (long long)u->input, (long long)u->output);
}

void korch_cost_add(korch_cost_t *c, double amount)
{
    c->calls++;
    if (amount >= 0)
        c->amount += amount;
    else
        c->unknown++;
}

json_t *korch_cost_json(const korch_cost_t *c, const char *currency)
{
    if (!currency || c->unknown)
        return json_null();
    return json_pack("{s:f, s:s}", "amount", round(c->amount * 1e8) / 1e8, "currency", currency);
}

void korch_cost_text(const korch_cost_t *c, const char *currency, char *buf, size_t len)
{
    if (!currency)
        snprintf(buf, len, "unknown (no price table: --prices FILE)");
    else if (c->unknown)
        snprintf(buf, len, "unknown (%d of %d calls without a price or a token count)", c->unknown, c->calls);
    else
        snprintf(buf, len, "%.6f %s", c->amount, currency);
}

/* ------------------------------------------------------------ prices */

struct korch_prices {
    json_t *models;     /* name -> {input_per_mtok, output_per_mtok} */
    char currency[16];
};

static bool s_price_ok(json_t *p)
{
    json_t *in = json_object_get(p, "input_per_mtok"), *out = json_object_get(p, "output_per_mtok");
    return json_is_object(p) && json_is_number(in) && json_is_number(out) && json_number_value(in) >= 0 &&
           json_number_value(out) >= 0;
}

korch_prices_t *korch_prices_load(const char *path, korch_err_t *err)
{
    size_t len = 0;
    korch_err_t rerr = {0};
    char *text = korch_read_file(path, MAX_PRICES_FILE, &len, &rerr);
    if (!text) {
        korch_err_set(err, rerr.rc ? rerr.rc : KORCH_E_IO, "cannot read the price table '%s': %s", path, rerr.msg);
        return NULL;
    }
    json_error_t jerr;
    json_t *root = json_loadb(text, len, 0, &jerr);
    free(text);
    korch_prices_t *p = NULL;
    json_t *models = json_object_get(root, "models");
    const char *cur = json_string_value(json_object_get(root, "currency"));
    if (!root) {
        korch_err_set(err, KORCH_E_INVALID, "the price table '%s' is not JSON: %s (line %d)", path, jerr.text,
                      jerr.line);
        goto out;
    }
    if (!json_is_object(models) || !cur || !*cur || strlen(cur) >= sizeof p->currency) {
        korch_err_set(err, KORCH_E_INVALID,
                      "the price table '%s' needs {\"currency\": \"USD\", \"models\": {\"PROVIDER:MODEL\": "
                      "{\"input_per_mtok\": N, \"output_per_mtok\": N}}}",
                      path);
        goto out;
    }
    const char *name;
    json_t *v;
    json_object_foreach(models, name, v) {
        if (!s_price_ok(v)) {
            korch_err_set(err, KORCH_E_INVALID,
                          "the price table '%s': '%s' needs non-negative numbers input_per_mtok and output_per_mtok "
                          "(per million tokens)",
                          path, name);
            goto out;
        }
    }
    p = calloc(1, sizeof *p);
    if (!p) {
        korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        goto out;
    }
    p->models = json_incref(models);
    snprintf(p->currency, sizeof p->currency, "%s", cur);
out:
    json_decref(root);
    return p;
}

void korch_prices_destroy(korch_prices_t **pp)
{
    if (!pp || !*pp)
        return;
    json_decref((*pp)->models);
    free(*pp);
    *pp = NULL;
}

static json_t *s_price(const korch_prices_t *p, const char *model)
{
    if (!p || !model)
        return NULL;
    json_t *v = json_object_get(p->models, model);
    if (v)
        return v;
    const char *colon = strchr(model, ':');
    char any[80];
    if (!colon || (size_t)(colon - model) > 64)
        return NULL;
    snprintf(any, sizeof any, "%.*s:*", (int)(colon - model), model);
    return json_object_get(p->models, any);
}

bool korch_prices_has(const korch_prices_t *p, const char *model) { return s_price(p, model) != NULL; }

double korch_prices_cost(const korch_prices_t *p, const char *model, const korch_usage_t *u)
{
    json_t *v = s_price(p, model);
    if (!v || !korch_usage_known(u))
        return -1;
    return ((double)u->input * json_number_value(json_object_get(v, "input_per_mtok")) +
            (double)u->output * json_number_value(json_object_get(v, "output_per_mtok"))) /
           1e6;
}

json_t *korch_prices_cost_json(const korch_prices_t *p, const char *model, const korch_usage_t *u)
{
    double c = korch_prices_cost(p, model, u);
    if (c < 0)
        return json_null();
    return json_pack("{s:f, s:s}", "amount", round(c * 1e8) / 1e8, "currency", p->currency);
}

const char *korch_prices_currency(const korch_prices_t *p) { return p ? p->currency : NULL; }
