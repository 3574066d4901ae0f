/*  Quotas per user (korch serve --users FILE; the limits are the file's,
 *  korch/users.h: its "quota" defaults with each user's keys over them).
 *  Not a public API.
 *
 *    kernels         kernels of theirs at once (agent sessions' included)
 *    sessions        agent sessions of theirs at once
 *    memory_mb       kernels x each kernel's memory limit (korch serve --memory)
 *    cpus            kernels x each kernel's CPU limit (korch serve --cpus)
 *    tokens_per_day  model tokens of their agent turns since 00:00 UTC
 *    cost_per_day    the same in money (korch serve --prices)
 *
 *  A request that would go over one is answered 429 with
 *  {"message", "quota": KEY, "used", "limit"}; nothing is started. An
 *  admin has quotas too when the file gives them (a key missing = no
 *  limit). The single-token mode has none. The day's tokens and cost are
 *  kept in a file beside the sessions, so a restart does not start the day
 *  afresh (srv_quota_new).
 *
 *  Fair share: each user's kernels, sessions and turns are bounded on their
 *  own, so one user's runaway takes at most their quota of the pool, of
 *  the kernels' memory and of the model's tokens; requests are served on
 *  one loop in arrival order, and no request of one user waits for
 *  another's kernel or turn.
 *
 *  Threading: the loop thread only.
 */
#ifndef KORCH_SRV_QUOTA_H
#define KORCH_SRV_QUOTA_H

#include "server_int.h"

typedef struct srv_quota srv_quota_t;

/* The day's use as korch serve left it before a restart: read from
   opts.agent_dir/.quota-today.json (0600; the day's only: another day's
   is 0), written again after each charge on the launcher's worker (never
   on the loop; one write at a time, the latest state after it), and at
   destroy. Without a launcher, in memory only. */
srv_quota_t *srv_quota_new(const korch_server_opts_t *o);
void srv_quota_destroy(srv_quota_t **pq);

/* May req's user start one more kernel (kernels, memory_mb, cpus)? Else
   req is answered 429 and false. */
bool srv_quota_kernel_ok(korch_server_t *s, srv_req_t *req);
/* One more agent session, the user having `sessions` (agents.c counts)? */
bool srv_quota_session_ok(korch_server_t *s, srv_req_t *req, int sessions);
/* One more agent turn (tokens_per_day, cost_per_day)? */
bool srv_quota_turn_ok(korch_server_t *s, srv_req_t *req);
/* A turn of user's used tokens and cost (added to today's). */
void srv_quota_charge(korch_server_t *s, const char *user, int64_t tokens, double cost);
/* {"quota": {limits}, "used": {kernels, sessions, memory_mb, cpus,
   tokens_today, cost_today}} of u (new), for GET /api/me; sessions and
   running (turns now) as srv_agents_owned counts them. */
json_t *srv_quota_report(korch_server_t *s, const srv_user_t *u, int sessions, int running);

#endif
