/*  The honest ledger: token usage as the model APIs reported it, unknown
 *  kept unknown, and a price table that turns tokens into cost.
 *
 *  A call whose API did not say how many tokens it used (the replay
 *  provider, an OpenAI-compatible server that sends no usage while
 *  streaming) is counted as unreported: a sum over calls that all said
 *  nothing is unknown (JSON null, "unknown" for people), never 0 or -1; a
 *  sum where some said is "at least" that much, with the count of calls
 *  that did not.
 *
 *  Prices come only from a file the user gives (--prices FILE or
 *  KORCH_PRICES); none are built in, so none go stale silently:
 *
 *    {"currency": "USD",
 *     "models": {"openai:gpt-4o-mini": {"input_per_mtok": 0.15, "output_per_mtok": 0.60},
 *                "anthropic:*":        {"input_per_mtok": 3.00, "output_per_mtok": 15.00}}}
 *
 *  A model is looked up by its full name, then "provider:*". A cost is
 *  unknown when the model has no price or its tokens are not all reported.
 *  Plain values; no threads involved.
 */
#ifndef KORCH_LEDGER_H
#define KORCH_LEDGER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>
#include "korch/error.h"

typedef struct {
    int64_t input, output;          /* sums of what was reported */
    int calls;                      /* model calls counted */
    int input_unknown, output_unknown;  /* of those, calls that did not report it */
} korch_usage_t;

/* One call's tokens (-1: the API did not say). */
void korch_usage_add(korch_usage_t *u, int64_t input, int64_t output);
void korch_usage_merge(korch_usage_t *into, const korch_usage_t *u);
/* Every call reported both counts (true with no calls). */
bool korch_usage_known(const korch_usage_t *u);
/* {input: N | null, output: N | null, calls, unreported?: K}: null when no
   call reported it, unreported when some did not. New object. */
json_t *korch_usage_json(const korch_usage_t *u);
/* "698 in + 36 out", "unknown (the model's API did not report usage)",
   "at least 698 in + 36 out (1 of 3 calls unreported)". */
void korch_usage_text(const korch_usage_t *u, char *buf, size_t len);
/* Input + output, or -1 when any of it is unknown. */
int64_t korch_usage_total(const korch_usage_t *u);

/* Money spent over calls, each priced on its own (a session may change model). */
typedef struct {
    double amount;                  /* the sum of the calls priced */
    int calls, unknown;             /* calls counted; of those, not priced */
} korch_cost_t;

/* One call's cost (< 0: unknown). */
void korch_cost_add(korch_cost_t *c, double amount);
/* {amount, currency} when every call was priced, else JSON null. New value. */
json_t *korch_cost_json(const korch_cost_t *c, const char *currency);
/* "$0.0123 USD"-like text: "0.012300 USD", or "unknown (...)" saying why. */
void korch_cost_text(const korch_cost_t *c, const char *currency, char *buf, size_t len);

typedef struct korch_prices korch_prices_t;

/* Load a price table (see above). NULL + err naming the file and what is
   wrong with it. */
korch_prices_t *korch_prices_load(const char *path, korch_err_t *err);
void korch_prices_destroy(korch_prices_t **p);
/* The cost of u for model ("openai:gpt-4o-mini"), or < 0 when unknown
   (p NULL, no price for the model, tokens unreported). */
double korch_prices_cost(const korch_prices_t *p, const char *model, const korch_usage_t *u);
/* {amount, currency} or JSON null when unknown. New value. */
json_t *korch_prices_cost_json(const korch_prices_t *p, const char *model, const korch_usage_t *u);
/* Does the table price this model? */
bool korch_prices_has(const korch_prices_t *p, const char *model);
const char *korch_prices_currency(const korch_prices_t *p);

#endif
