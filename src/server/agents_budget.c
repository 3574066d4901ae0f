/*  A session's budgets per turn (tokens, seconds, cost), as korch run's:
 *  korch serve's --max-tokens / --max-seconds / --max-cost for every
 *  session, lowered (never raised) by a POST /api/agent/sessions
 *  {"budget": {...}} for its own, kept in session.json. The agent applies
 *  them (a notice, and done.stopped_by, when one ends a turn). */
#include "agents_int.h"

#include <stdio.h>
#include <string.h>

bool srv_sa_budget_ok(korch_server_t *s, json_t *b, char *why, size_t len)
{
    if (!b || json_is_null(b))
        return true;
    const char *k;
    json_t *v;
    if (!json_is_object(b))
        goto bad;
    json_object_foreach(b, k, v) {
        if ((strcmp(k, "tokens") != 0 && strcmp(k, "seconds") != 0 && strcmp(k, "cost") != 0) ||
            (!json_is_null(v) && (!json_is_number(v) || json_number_value(v) < 0)))
            goto bad;
    }
    if (json_is_number(json_object_get(b, "cost")) && !srv_sa_opts(s)->agent_prices) {
        snprintf(why, len, "a cost budget needs a price table: start korch serve with --prices FILE (or KORCH_PRICES)");
        return false;
    }
    return true;
bad:
    snprintf(why, len, "'budget' must be {\"tokens\": N, \"seconds\": N, \"cost\": X} with numbers >= 0 (each optional)");
    return false;
}

void srv_sa_budget_set(srv_agent_t *sa, json_t *b)
{
    json_t *t = json_object_get(b, "tokens"), *sec = json_object_get(b, "seconds"), *c = json_object_get(b, "cost");
    if (json_is_number(t) && json_number_value(t) >= 1 &&
        (!sa->cfg.max_tokens || json_number_value(t) < (double)sa->cfg.max_tokens))
        sa->cfg.max_tokens = (int64_t)json_number_value(t);
    if (json_is_number(sec) && json_number_value(sec) >= 1 &&
        (!sa->cfg.max_seconds || json_number_value(sec) < sa->cfg.max_seconds))
        sa->cfg.max_seconds = (int)json_number_value(sec);
    if (json_is_number(c) && json_number_value(c) > 0 && (!sa->cfg.max_cost || json_number_value(c) < sa->cfg.max_cost))
        sa->cfg.max_cost = json_number_value(c);
}

json_t *srv_sa_budget_json(const srv_agent_t *sa)
{
    return json_pack("{s:o, s:o, s:o}", "tokens", sa->cfg.max_tokens ? json_integer(sa->cfg.max_tokens) : json_null(),
                     "seconds", sa->cfg.max_seconds ? json_integer(sa->cfg.max_seconds) : json_null(), "cost",
                     sa->cfg.max_cost > 0 ? json_real(sa->cfg.max_cost) : json_null());
}
