#include "agents_int.h"
#include "korch/agent.h"
#include "korch/launcher.h"
#include "korch/llm.h"
#include "korch/fsutil.h"
#include "korch/log.h"
#include "korch/media.h"
#include "korch/path.h"
#include "korch/session.h"
#include "korch/workdir.h"
#include "korch/uuid.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---------------------------------------------------------- streams */

void srv_sa_log_clear(srv_agent_t *sa)
{
    srv_sa_logged_t *e;
    while (sa->log && (e = zlistx_first(sa->log))) {
        zlistx_delete(sa->log, zlistx_cursor(sa->log));
        free(e);
    }
    sa->log_bytes = 0;
    sa->log_dropped = 0;
}

static void s_log_add(srv_agent_t *sa, uint64_t id, const char *text, size_t len)
{
    srv_sa_logged_t *e = malloc(sizeof *e + len);
    if (!e)
        return;
    e->id = id;
    e->len = len;
    memcpy(e->text, text, len);
    zlistx_add_end(sa->log, e);
    sa->log_bytes += len;
    while (sa->log_bytes > MAX_LOG_BYTES && zlistx_size(sa->log) > 1) {
        srv_sa_logged_t *old = zlistx_first(sa->log);
        zlistx_delete(sa->log, zlistx_cursor(sa->log));
        sa->log_bytes -= old->len;
        sa->log_dropped++;
        free(old);
    }
}

/* The followers' streams end (a `done` was written to them, or the session goes). */
void srv_sa_followers_end(srv_agent_t *sa)
{
    srv_req_t *f;
    while (sa->followers && (f = zlistx_first(sa->followers))) {
        zlistx_delete(sa->followers, zlistx_cursor(sa->followers));
        srv_stream_end(f);
        srv_stream_release(&f);
    }
}

/* Write to every subscriber of the turn; one that does not read is dropped
   (the POST's client cancels the turn then, unless it detached). */
static void s_stream_write_all(srv_agent_t *sa, const char *buf, size_t n)
{
    if (sa->stream && srv_stream_write(sa->stream, buf, n, MAX_SSE_PENDING) == KORCH_E_TOOBIG) {
        srv_stream_release(&sa->stream);
        if (!sa->detach) { /* treated as a client that left (the turn is cancelled) */
            atomic_store(&sa->cfg.cancel, 1);
            if (sa->actor)
                zstr_send(sa->actor, "INTERRUPT");
        }
    }
    srv_req_t *slow[MAX_FOLLOWERS];
    size_t nslow = 0;
    for (srv_req_t *f = sa->followers ? zlistx_first(sa->followers) : NULL; f; f = zlistx_next(sa->followers))
        if (srv_stream_write(f, buf, n, MAX_SSE_PENDING) == KORCH_E_TOOBIG && nslow < MAX_FOLLOWERS)
            slow[nslow++] = f;
    for (size_t i = 0; i < nslow; i++) {
        zlistx_delete(sa->followers, zlistx_find(sa->followers, slow[i]));
        srv_stream_release(&slow[i]);
    }
}

int srv_sa_on_keepalive(korch_loop_t *loop, int id, void *arg)
{
    srv_agent_t *sa = arg;
    s_stream_write_all(sa, ": keepalive\n\n", 13);
    return 0;
}

void srv_sa_stream_event(srv_agent_t *sa, const char *name, const char *json)
{
    if (!sa->turn_open)
        return;
    size_t nl = strlen(name), jl = strlen(json);
    char *buf = malloc(nl + jl + 64);
    if (!buf)
        return;
    uint64_t id = sa->next_id++;
    int n = snprintf(buf, nl + jl + 64, "id: %llu\nevent: %s\ndata: %s\n\n", (unsigned long long)id, name, json);
    s_log_add(sa, id, buf, (size_t)n);
    s_stream_write_all(sa, buf, (size_t)n);
    free(buf);
}

void srv_sa_stream_eventj(srv_agent_t *sa, const char *name, json_t *data)
{
    /* the server's own events (a resume's notice, a start that failed) in the one schema too */
    if (json_is_object(data) && !json_object_get(data, "event"))
        json_object_set_new(data, "event", json_string(name));
    if (json_is_object(data) && !json_object_get(data, "step"))
        json_object_set_new(data, "step", json_integer(0));
    char *text = data ? json_dumps(data, JSON_COMPACT) : NULL;
    json_decref(data);
    if (text)
        srv_sa_stream_event(sa, name, text);
    free(text);
}

/* The turn's last event, then the stream ends. */
void srv_sa_stream_done(srv_agent_t *sa, const char *done_json)
{
    if (sa->keepalive >= 0)
        korch_loop_timer_end(srv_parts(sa->srv)->loop, sa->keepalive);
    sa->keepalive = -1;
    srv_sa_stream_event(sa, "done", done_json);
    if (sa->stream) {
        srv_stream_end(sa->stream);
        srv_stream_release(&sa->stream);
    }
    srv_sa_followers_end(sa);
    srv_sa_log_clear(sa);
    sa->turn_open = false;
}

/* A turn that ends here rather than in the agent (it was deleted, its start
   failed): done as the agent's would be, with no tokens spent this turn. */
void srv_sa_stream_end_turn(srv_agent_t *sa, const char *status, const char *msg)
{
    json_t *session =
        sa->usage ? json_incref(sa->usage) : json_pack("{s:i, s:i, s:i}", "input", 0, "output", 0, "calls", 0);
    json_t *done = json_pack("{s:s, s:s, s:s, s:i, s:i, s:{s:{s:i, s:i, s:i}, s:o}, s:{s:n, s:n}}", "event", "done",
                             "status", status, "message", msg, "steps", 0, "elapsed_ms", 0, "tokens", "turn", "input",
                             0, "output", 0, "calls", 0, "session", session, "cost", "turn", "session");
    char *text = done ? json_dumps(done, JSON_COMPACT) : NULL;
    srv_sa_stream_done(sa, text ? text : "{}");
    free(text);
    json_decref(done);
}
