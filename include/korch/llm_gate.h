/*  A fair share of an LLM provider's rate limit between the users of one
 *  korch serve (issue 26).
 *
 *  Every korch_llm_t made with the same registry (korch_llm_opts_t.gates)
 *  and the same provider, base URL and API key shares one gate: the key's
 *  budget at the provider is one, so its queue is one. A model call waits
 *  at the gate before each HTTP attempt; the gate admits at most `limit`
 *  calls in flight and, when more wait, the waiting call of the party
 *  (user) served least recently first, FIFO within a party. So a user with
 *  ten sessions and a user with one take turns: the one-session user waits
 *  for at most one of the other's calls, however many sessions they run.
 *
 *  What the provider says shapes the gate:
 *    - 429 (and Anthropic's 529): the gate closes for everyone until the
 *      retry-after (retry-after-ms, retry-after) the answer gave, else the
 *      SDK back-off, and `limit` halves (once per closing, at least 1); the
 *      call goes back to its party's place in the queue. Behind a gate a
 *      rate-limited call is retried until the request's timeout, not just
 *      max_retries times: a contended key slows calls, it does not fail
 *      them.
 *    - a 2xx: after `limit` of them in a row `limit` grows by one, up to
 *      the registry's maximum.
 *
 *  Thread-safe: agents call it from their own threads. The registry must
 *  outlive every korch_llm_t made with it.
 */
#ifndef KORCH_LLM_GATE_H
#define KORCH_LLM_GATE_H

#include <jansson.h>

typedef struct korch_llm_gates korch_llm_gates_t;

/* A registry whose gates admit at most max_in_flight calls each (>= 1). */
korch_llm_gates_t *korch_llm_gates_new(int max_in_flight);
void korch_llm_gates_destroy(korch_llm_gates_t **self);

/* What the gates did so far (new): [{"provider", "base_url", "limit",
   "in_flight", "waiting", "rate_limited", "parties": {NAME: {"admitted",
   "rate_limited", "waited_ms", "waiting", "in_flight"}}}]. The key is
   never shown. */
json_t *korch_llm_gates_stats(korch_llm_gates_t *self);

#endif
