/*  An agent session's thread (a czmq zactor): its own korch_loop, its own
 *  korch_llm (libcurl easy, blocking) and a korch_agent attached to one of
 *  the server's kernels through the kernel's connection file. agents.c
 *  talks to it over the actor's pipe:
 *
 *    main -> actor   ASK question | INTERRUPT | FILES | REMOVE path |
 *                    VERIFY conn_path started_ms |
 *                    KERNEL_GONE restarted|dead died_ms why | $TERM
 *    actor -> main   ready | failed message | event NAME JSON | done JSON |
 *                    verified JSON | removed path rc message | bye
 *
 *  "event" carries the agent's events as the API's server-sent events
 *  (step, text, code_delta, code, output, result, status, final, error,
 *  notice); "done" ends a turn with {status, tokens: {turn: {input, output},
 *  session: {input, output}}, message?}; "bye" is the last thing it sends.
 *  "removed" answers each REMOVE (between turns: main sends none during
 *  one) with korch_agent_remove_file's rc as a number and its message.
 *  "verified" ends a VERIFY (between turns, like REMOVE): the clean notebook
 *  re-run in the fresh kernel conn_path names (korch_agent_verify_in; its
 *  `verify` event came before), with the stream's `done` (steps 0, no
 *  tokens: no model call). main shuts that kernel down.
 *  "KERNEL_GONE": the kernel manager saw the session's kernel's process go
 *  (it restarts it, or it died for good): the step sent to it ends now
 *  (korch_agent_kernel_gone), during a turn too.
 *  A model call cannot see the pipe (it is inside libcurl): interrupting it
 *  goes through cfg->cancel, which the llm polls.
 */
#include "agent_actor.h"
#include "korch/agent.h"
#include "korch/llm.h"
#include "korch/log.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    zsock_t *pipe;
    srv_agent_cfg_t *cfg;
    korch_agent_t *agent;
    char *question;
    char *verify;               /* VERIFY's connection file, until it is done */
    int64_t verify_started;
    zlist_t *removes;           /* paths to remove (strings, owned), in order */
    bool term;
} s_actor_t;

static void s_send_event(s_actor_t *ac, const char *name, json_t *data)
{
    char *text = data ? json_dumps(data, JSON_COMPACT) : NULL;
    json_decref(data);
    if (text)
        zstr_sendx(ac->pipe, "event", name, text, NULL);
    free(text);
}

json_t *srv_agent_url(const char *id, const char *what, const char *path)
{
    char buf[4096 + 128];
    size_t n = (size_t)snprintf(buf, sizeof buf, "/api/agent/sessions/%s/%s/", id, what);
    static const char hex[] = "0123456789ABCDEF";
    for (const unsigned char *p = (const unsigned char *)path; *p && n + 4 < sizeof buf; p++) {
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || strchr("-._~/", *p))
            buf[n++] = (char)*p;
        else {
            buf[n++] = '%';
            buf[n++] = hex[*p >> 4];
            buf[n++] = hex[*p & 15];
        }
    }
    buf[n] = 0;
    return json_string(buf);
}

static json_t *s_url(s_actor_t *ac, const char *what, const char *path) { return srv_agent_url(ac->cfg->id, what, path); }

/* The agent's events in the one schema (korch_agent_event_json), with
   URLs where the CLI has host paths: figures and files by URL, no "saved". */
static void s_on_agent_event(const korch_agent_event_t *ev, void *arg)
{
    s_actor_t *ac = arg;
    if (ev->type == KORCH_AGENT_OUTPUT && !ev->data)
        return;
    json_t *d = korch_agent_event_json(ev);
    if (!d)
        return;
    size_t i;
    json_t *f;
    if (ev->type == KORCH_AGENT_RESULT) {
        json_object_del(d, "saved"); /* host paths: figures carry URLs instead */
        json_array_foreach(json_object_get(d, "figures"), i, f) {
            json_object_set_new(f, "url", s_url(ac, "figures", json_string_value(json_object_get(f, "name"))));
            json_object_del(f, "source");
        }
    } else if (ev->type == KORCH_AGENT_FILES) {
        json_array_foreach(json_object_get(d, "files"), i, f) {
            json_object_set_new(f, "url", s_url(ac, "files", json_string_value(json_object_get(f, "path"))));
            if (json_object_get(f, "figure"))
                json_object_set_new(f, "figure_url",
                                    s_url(ac, "figures", json_string_value(json_object_get(f, "figure"))));
        }
    }
    s_send_event(ac, korch_agent_event_name(ev->type), d);
}

static bool s_cancelled(void *arg)
{
    s_actor_t *ac = arg;
    return atomic_load(&ac->cfg->cancel) != 0;
}

/* $TERM came (the pipe is heard during korch_agent_new too) */
static bool s_ended(void *arg) { return ((s_actor_t *)arg)->term; }

static int s_on_pipe(korch_loop_t *loop, zsock_t *pipe, void *arg)
{
    s_actor_t *ac = arg;
    zmsg_t *m = zmsg_recv(pipe);
    if (!m)
        return 0;
    char *cmd = zmsg_popstr(m);
    if (!cmd || strcmp(cmd, "$TERM") == 0) {
        ac->term = true;
        if (ac->agent)
            korch_agent_interrupt(ac->agent);
        korch_loop_break(loop);
    } else if (strcmp(cmd, "ASK") == 0 && !ac->question)
        ac->question = zmsg_popstr(m);
    else if (strcmp(cmd, "INTERRUPT") == 0 && ac->agent)
        korch_agent_interrupt(ac->agent);
    else if (strcmp(cmd, "VERIFY") == 0 && !ac->verify) {
        ac->verify = zmsg_popstr(m);
        char *t = zmsg_popstr(m);
        ac->verify_started = t ? strtoll(t, NULL, 10) : 0;
        free(t);
    } else if (strcmp(cmd, "KERNEL_GONE") == 0 && ac->agent) {
        char *how = zmsg_popstr(m), *t = zmsg_popstr(m), *why = zmsg_popstr(m);
        korch_agent_kernel_gone(ac->agent, how && strcmp(how, "restarted") == 0, t ? strtoll(t, NULL, 10) : 0, why);
        free(how);
        free(t);
        free(why);
    } else if (strcmp(cmd, "FILES") == 0 && ac->agent)
        korch_agent_files_changed(ac->agent);
    else if (strcmp(cmd, "REMOVE") == 0) { /* done from the actor's own loop, not inside this handler */
        char *path = zmsg_popstr(m);
        if (path && zlist_append(ac->removes, path) != 0)
            free(path);
    }
    free(cmd);
    zmsg_destroy(&m);
    return 0;
}

static bool s_actor_has_work(void *arg)
{
    s_actor_t *ac = arg;
    return ac->term || ac->question || ac->verify || zlist_size(ac->removes);
}

/* The VERIFY asked for: its event went out; "verified" with the stream's done. */
static void s_verify(s_actor_t *ac)
{
    korch_err_t err = {0};
    json_t *res = NULL;
    korch_rc_t rc = ac->agent ? korch_agent_verify_in(ac->agent, ac->verify, ac->verify_started, &res, &err)
                              : korch_err_set(&err, KORCH_E_STATE, "the session's agent did not start");
    free(ac->verify);
    ac->verify = NULL;
    if (rc != KORCH_OK)
        s_send_event(ac, "error", json_pack("{s:s, s:s, s:i}", "event", "error", "message", err.msg, "step", 0));
    double secs = json_number_value(json_object_get(res, "seconds"));
    json_t *done = json_pack("{s:s, s:s, s:i, s:I, s:{s:{s:i, s:i, s:i}, s:{s:i, s:i, s:i}}, s:{s:n, s:n}}", "event",
                             "done", "status", rc == KORCH_OK ? "ok" : "error", "steps", 0, "elapsed_ms",
                             (json_int_t)(secs * 1000), "tokens", "turn", "input", 0, "output", 0, "calls", 0,
                             "session", "input", 0, "output", 0, "calls", 0, "cost", "turn", "session");
    if (ac->agent) { /* the session's own sums, as a turn's done has them */
        json_t *d = korch_agent_done_json(ac->agent, KORCH_OK, NULL);
        json_object_set(json_object_get(done, "tokens"), "session", json_object_get(json_object_get(d, "tokens"), "session"));
        json_object_set(json_object_get(done, "cost"), "session", json_object_get(json_object_get(d, "cost"), "session"));
        json_decref(d);
    }
    if (rc != KORCH_OK)
        json_object_set_new(done, "message", json_string(err.msg));
    char *text = done ? json_dumps(done, JSON_COMPACT) : NULL;
    json_decref(done);
    json_decref(res);
    zstr_sendx(ac->pipe, "verified", text ? text : "{}", NULL);
    free(text);
}

/* The REMOVEs asked for, each answered. */
static void s_remove_all(s_actor_t *ac)
{
    char *path;
    while ((path = zlist_pop(ac->removes))) {
        korch_err_t err = {0};
        korch_rc_t rc = ac->agent ? korch_agent_remove_file(ac->agent, path, &err)
                                  : korch_err_set(&err, KORCH_E_STATE, "the session's agent did not start");
        char num[16];
        snprintf(num, sizeof num, "%d", (int)rc);
        zstr_sendx(ac->pipe, "removed", path, num, err.msg, NULL);
        free(path);
    }
}

static void s_actor(zsock_t *pipe, void *arg)
{
    srv_agent_cfg_t *cfg = arg;
    s_actor_t ac = {.pipe = pipe, .cfg = cfg, .removes = zlist_new()};
    zsock_signal(pipe, 0);
    korch_err_t err = {0};
    korch_loop_t *loop = korch_loop_new();
    korch_llm_opts_t lo = {0};
    korch_llm_t *llm = NULL;
    if (!loop)
        korch_err_set(&err, KORCH_E_NOMEM, "out of memory");
    else if (korch_llm_parse_spec(cfg->llm, &lo, &err) == KORCH_OK) {
        lo.gates = cfg->gates;
        lo.party = cfg->party;
        llm = korch_llm_new(&lo, &err);
    }
    /* the pipe is heard from the start: a $TERM while the agent attaches
       or replays (its kernel may never answer) ends those waits (s_ended) */
    if (loop)
        korch_loop_reader(loop, pipe, s_on_pipe, &ac);
    if (llm) {
        korch_agent_opts_t ao = {
            .llm = llm,
            .loop = loop,
            .kernelspec = cfg->kernel_name,
            .existing = cfg->conn_path,
            .session_dir = cfg->dir,
            .max_steps = cfg->max_steps,
            .context_chars = cfg->context_chars,
            .max_tokens = cfg->max_tokens,
            .max_seconds = cfg->max_seconds,
            .max_cost = cfg->max_cost,
            .max_session_bytes = cfg->max_session_bytes,
            .prices = cfg->prices,
            .usage_src = cfg->usage_src.version ? &cfg->usage_src : NULL,
            .workdir = cfg->workdir[0] ? cfg->workdir : NULL,
            .workdir_in_kernel = cfg->workdir_in_kernel,
            .resume_live = cfg->resume_live,
            .on_event = s_on_agent_event,
            .cancelled = s_cancelled,
            .ended = s_ended,
            .arg = &ac,
        };
        ac.agent = korch_agent_new(&ao, &err);
    }
    if (ac.agent)
        zstr_send(pipe, "ready");
    else
        zstr_sendx(pipe, "failed", err.msg[0] ? err.msg : korch_strerror(err.rc), NULL);
    while (loop && !ac.term) {
        korch_loop_run(loop, s_actor_has_work, &ac, -1);
        if (!ac.term)
            s_remove_all(&ac);
        if (!ac.term && ac.verify)
            s_verify(&ac);
        if (!ac.question || ac.term)
            continue;
        if (!ac.agent) { /* nothing to answer with */
            free(ac.question);
            ac.question = NULL;
            continue;
        }
        char *answer = NULL;
        korch_err_clear(&err);
        korch_rc_t rc = korch_agent_ask(ac.agent, ac.question, &answer, &err);
        free(ac.question);
        ac.question = NULL;
        free(answer);
        if (rc != KORCH_OK && rc != KORCH_E_INTERRUPTED)
            s_send_event(&ac, "error", json_pack("{s:s, s:s, s:i}", "event", "error", "message",
                                                 err.msg[0] ? err.msg : korch_strerror(rc), "step", 0));
        json_t *done = korch_agent_done_json(ac.agent, rc, err.msg[0] ? err.msg : korch_strerror(rc));
        char *text = json_dumps(done, JSON_COMPACT);
        json_decref(done);
        zstr_sendx(pipe, "done", text ? text : "{}", NULL);
        free(text);
    }
    korch_agent_destroy(&ac.agent); /* detaches from the kernel; the server keeps it */
    korch_llm_destroy(&llm);
    if (loop)
        korch_loop_reader_end(loop, pipe);
    korch_loop_destroy(&loop);
    free(ac.question);
    free(ac.verify);
    for (char *p = zlist_pop(ac.removes); p; p = zlist_pop(ac.removes))
        free(p);
    zlist_destroy(&ac.removes);
    zstr_send(pipe, "bye");
}

zactor_t *srv_agent_actor_new(srv_agent_cfg_t *cfg) { return zactor_new(s_actor, cfg); }
