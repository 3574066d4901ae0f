/*  A session's agent on a thread of its own (agent_actor.c), for the
 *  agent API (agents*.c). */
#ifndef KORCH_SERVER_AGENT_ACTOR_H
#define KORCH_SERVER_AGENT_ACTOR_H

#include "server_int.h"
#include "korch/ledger.h"

#include <czmq.h>
#include <limits.h>
#include <stdatomic.h>

/* agent_actor.c: a session's agent on a thread of its own. cfg belongs to
   the session, outlives the actor (zactor_destroy joins it) and does not
   change while it runs, except cancel: set it to abandon a model call. */
typedef struct {
    char llm[256];              /* "provider:model" */
    char dir[PATH_MAX];         /* the session dir */
    char conn_path[PATH_MAX + 16];  /* the kernel's connection file */
    char kernel_name[128];
    char id[40];                /* the session's id, for the URLs in its events */
    char workdir[PATH_MAX + 8]; /* the kernel's work dir on this host ("" = not watched) */
    bool workdir_in_kernel;     /* no work dir on this host (a container): list it from the kernel */
    bool resume_live;           /* the kernel is the session's own from before korch's restart (re-adopted) */
    int max_steps;
    size_t context_chars;       /* what a model request sends, roughly (0 = the agent's default) */
    int64_t max_tokens;         /* per turn budgets (0 = none), as korch run's */
    int max_seconds;
    double max_cost;
    uint64_t max_session_bytes; /* the session's output budget on disk (0 = the agent's default) */
    const korch_prices_t *prices;   /* the server's price table (NULL = none); lives as long as the server */
    korch_usage_src_t usage_src;    /* its kernel's cgroup counters (korch_proc_usage_src; version 0 = unknown) */
    struct korch_llm_gates *gates;  /* the server's fair gates of the model keys (NULL = none); outlive the session */
    char party[64];             /* whose calls they are at the gate: the session's owner */
    atomic_int cancel;
} srv_agent_cfg_t;
zactor_t *srv_agent_actor_new(srv_agent_cfg_t *cfg);
/* "/api/agent/sessions/{id}/{what}/{path}" (relative, no token), path
   percent-encoded but for '/': a new string. */
json_t *srv_agent_url(const char *id, const char *what, const char *path);

#endif
