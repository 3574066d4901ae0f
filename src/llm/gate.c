/*  The fair gate in front of a provider key (include/korch/llm_gate.h):
 *  least-recently-served party first, an in-flight limit that halves on a
 *  429 and grows back by one after `limit` successes (AIMD, as TCP shares a
 *  link), and a closing until the provider's retry-after for everyone.
 *
 *  Waiters live on their callers' stacks, linked into the gate's list while
 *  they wait; the callers poll their cancel callback every 50 ms outside
 *  the lock.
 */
#include "provider.h"
#include "korch/llm_gate.h"
#include "korch/log.h"

#include <errno.h>
#include <openssl/sha.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define S_PARTIES_MAX 4096      /* idle parties beyond this are forgotten */

typedef struct s_party {
    struct s_party *next;
    char name[64];
    unsigned long long last_served;     /* the gate's admission number when it was last admitted (0 = never) */
    int waiting, in_flight;
    long long admitted, rate_limited, waited_ms;
} s_party_t;

typedef struct s_waiter {
    struct s_waiter *next;
    s_party_t *party;
    unsigned long long ticket;  /* arrival order, kept across its retries */
    bool admitted;
} s_waiter_t;

struct korch_llm_gate {
    struct korch_llm_gate *next;
    char provider[32];
    char base_url[512];
    unsigned char key[SHA256_DIGEST_LENGTH];    /* the key's digest: which budget */
    int limit, max, in_flight, ok_streak;
    double closed_until;        /* monotonic seconds */
    unsigned long long served, arrivals;
    long long rate_limited;
    s_waiter_t *waiters;
    s_party_t *parties;
    int nparties;
    pthread_mutex_t mu;
    pthread_cond_t cv;          /* CLOCK_MONOTONIC */
};

struct korch_llm_gates {
    pthread_mutex_t mu;
    int max;
    korch_llm_gate_t *gates;
};

static double s_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

korch_llm_gates_t *korch_llm_gates_new(int max_in_flight)
{
    korch_llm_gates_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    pthread_mutex_init(&self->mu, NULL);
    self->max = max_in_flight >= 1 ? max_in_flight : 1;
    return self;
}

void korch_llm_gates_destroy(korch_llm_gates_t **pself)
{
    if (!pself || !*pself)
        return;
    korch_llm_gates_t *self = *pself;
    korch_llm_gate_t *g = self->gates;
    while (g) {
        korch_llm_gate_t *next = g->next;
        s_party_t *p = g->parties;
        while (p) {
            s_party_t *pn = p->next;
            free(p);
            p = pn;
        }
        pthread_mutex_destroy(&g->mu);
        pthread_cond_destroy(&g->cv);
        free(g);
        g = next;
    }
    pthread_mutex_destroy(&self->mu);
    free(self);
    *pself = NULL;
}

korch_llm_gate_t *korch_llm_gate_of(korch_llm_gates_t *self, const char *provider, const char *base_url,
                                    const char *key)
{
    unsigned char d[SHA256_DIGEST_LENGTH];
    SHA256((const unsigned char *)(key ? key : ""), key ? strlen(key) : 0, d);
    pthread_mutex_lock(&self->mu);
    korch_llm_gate_t *g;
    for (g = self->gates; g; g = g->next)
        if (!strcmp(g->provider, provider) && !strcmp(g->base_url, base_url ? base_url : "") &&
            !memcmp(g->key, d, sizeof d))
            break;
    if (!g && (g = calloc(1, sizeof *g))) {
        snprintf(g->provider, sizeof g->provider, "%s", provider);
        snprintf(g->base_url, sizeof g->base_url, "%s", base_url ? base_url : "");
        memcpy(g->key, d, sizeof d);
        g->limit = g->max = self->max;
        pthread_mutex_init(&g->mu, NULL);
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&g->cv, &ca);
        pthread_condattr_destroy(&ca);
        g->next = self->gates;
        self->gates = g;
    }
    pthread_mutex_unlock(&self->mu);
    return g;
}

/* The party called name (made when new; an idle one is forgotten when
   there are too many). Under g->mu. */
static s_party_t *s_party(korch_llm_gate_t *g, const char *name)
{
    s_party_t **pp = &g->parties, *idle = NULL;
    for (s_party_t *p = g->parties; p; p = p->next) {
        if (!strcmp(p->name, name))
            return p;
        if (!p->waiting && !p->in_flight)
            idle = p;
    }
    if (g->nparties >= S_PARTIES_MAX && idle) {
        while (*pp != idle)
            pp = &(*pp)->next;
        *pp = idle->next;
        free(idle);
        g->nparties--;
    }
    s_party_t *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    snprintf(p->name, sizeof p->name, "%s", name);
    p->next = g->parties;
    g->parties = p;
    g->nparties++;
    return p;
}

/* Admit what the limit allows, least recently served party first. Under g->mu. */
static void s_dispatch(korch_llm_gate_t *g, double now)
{
    bool any = false;
    while (now >= g->closed_until && g->in_flight < g->limit) {
        s_waiter_t **best = NULL;
        for (s_waiter_t **w = &g->waiters; *w; w = &(*w)->next) {
            const s_waiter_t *b = best ? *best : NULL;
            if (!b || (*w)->party->last_served < b->party->last_served ||
                ((*w)->party->last_served == b->party->last_served && (*w)->ticket < b->ticket))
                best = w;
        }
        if (!best)
            break;
        s_waiter_t *w = *best;
        *best = w->next;
        w->admitted = true;
        w->party->waiting--;
        w->party->in_flight++;
        w->party->admitted++;
        w->party->last_served = ++g->served;
        g->in_flight++;
        any = true;
    }
    if (any)
        pthread_cond_broadcast(&g->cv);
}

bool korch_llm_gate_enter(korch_llm_gate_t *g, const char *party, unsigned long long *ticket, const korch_llm_cb_t *cb)
{
    double t0 = s_now();
    pthread_mutex_lock(&g->mu);
    s_waiter_t w = {.party = s_party(g, party ? party : "")};
    if (!w.party) { /* out of memory: let it through rather than fail the call */
        g->in_flight++;
        pthread_mutex_unlock(&g->mu);
        return true;
    }
    if (!*ticket)
        *ticket = ++g->arrivals;
    w.ticket = *ticket;
    w.next = g->waiters;
    g->waiters = &w;
    w.party->waiting++;
    s_dispatch(g, t0);
    while (!w.admitted) {
        double now = s_now(), until = now + 0.05;
        if (g->closed_until > now && g->closed_until < until)
            until = g->closed_until;
        struct timespec ts = {.tv_sec = (time_t)until, .tv_nsec = (long)((until - (double)(time_t)until) * 1e9)};
        int e = pthread_cond_timedwait(&g->cv, &g->mu, &ts);
        if (w.admitted)
            break;
        s_dispatch(g, s_now());
        if (w.admitted || e != ETIMEDOUT)
            continue;
        pthread_mutex_unlock(&g->mu);
        if (cb && cb->on_tick)
            cb->on_tick(cb->arg);
        bool cancel = cb && cb->cancelled && cb->cancelled(cb->arg);
        pthread_mutex_lock(&g->mu);
        if (cancel && !w.admitted) {
            for (s_waiter_t **pw = &g->waiters; *pw; pw = &(*pw)->next)
                if (*pw == &w) {
                    *pw = w.next;
                    break;
                }
            w.party->waiting--;
            pthread_mutex_unlock(&g->mu);
            return false;
        }
    }
    w.party->waited_ms += (long long)((s_now() - t0) * 1000);
    pthread_mutex_unlock(&g->mu);
    return true;
}

void korch_llm_gate_leave(korch_llm_gate_t *g, const char *party, long status, double wait_s)
{
    double now = s_now();
    pthread_mutex_lock(&g->mu);
    s_party_t *p = s_party(g, party ? party : "");
    g->in_flight--;
    if (p && p->in_flight > 0)
        p->in_flight--;
    if (status == 429 || status == 529) {
        if (p)
            p->rate_limited++;
        g->rate_limited++;
        g->ok_streak = 0;
        if (now >= g->closed_until && g->limit > 1) /* once per closing: a burst of 429s is one signal */
            g->limit /= 2;
        if (wait_s > 0 && now + wait_s > g->closed_until)
            g->closed_until = now + wait_s;
        korch_debug("llm gate %s: rate limited; %d in flight at most, closed for %.2f s", g->provider, g->limit,
                    g->closed_until - now);
    } else if (status >= 200 && status < 300 && g->limit < g->max && ++g->ok_streak >= g->limit) {
        g->limit++;
        g->ok_streak = 0;
    }
    s_dispatch(g, now);
    pthread_mutex_unlock(&g->mu);
}

json_t *korch_llm_gates_stats(korch_llm_gates_t *self)
{
    json_t *out = json_array();
    pthread_mutex_lock(&self->mu);
    for (korch_llm_gate_t *g = self->gates; g && out; g = g->next) {
        pthread_mutex_lock(&g->mu);
        json_t *parties = json_object();
        int waiting = 0;
        for (s_party_t *p = g->parties; p; p = p->next) {
            waiting += p->waiting;
            json_object_set_new(parties, p->name,
                                json_pack("{s:I, s:I, s:I, s:i, s:i}", "admitted", p->admitted, "rate_limited",
                                          p->rate_limited, "waited_ms", p->waited_ms, "waiting", p->waiting,
                                          "in_flight", p->in_flight));
        }
        json_array_append_new(out, json_pack("{s:s, s:s, s:i, s:i, s:i, s:I, s:o}", "provider", g->provider,
                                             "base_url", g->base_url, "limit", g->limit, "in_flight", g->in_flight,
                                             "waiting", waiting, "rate_limited", g->rate_limited, "parties",
                                             parties ? parties : json_object()));
        pthread_mutex_unlock(&g->mu);
    }
    pthread_mutex_unlock(&self->mu);
    return out;
}
