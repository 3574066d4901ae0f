/*  Test fixture of the agent tests (test_agent.c, test_agent_live.c): korch
 *  run / korch chat against a real kernel and the scripted LLM server
 *  (llm_fixture.h; scenarios in tests/peers/agent_scenarios.py), in a fresh
 *  session dir; and the table of a test's runs (agent_case_t), in the way of
 *  test_server.c's SCENARIO table: most agent tests are a scenario, a few
 *  korch commands and what each must print. Header-only: include it from
 *  one test file each. */
#ifndef KORCH_AGENT_FIXTURE_H
#define KORCH_AGENT_FIXTURE_H

#include "llm_fixture.h"
#include "korch/media.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The launcher korch runs its kernels with (a test may change it). */
static const char *s_launcher = "local";

/* korch run ARGS...; the exit status; out/err new strings. */
static inline int s_run(const char *const *args, char **out, char **err)
{
    const char *argv[40] = {korch_test_korch_bin(), "run", "--launcher", s_launcher};
    int n = 4;
    for (int i = 0; args[i] && n < 39; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    return korch_test_run(argv, NULL, out, err, 170);
}

/* korch chat --llm llm --session session with input on stdin, for at most
   timeout_s; the exit status. */
static inline int s_chat_t(const char *llm, const char *session, const char *input, char **out, char **err,
                           int timeout_s)
{
    const char *argv[] = {korch_test_korch_bin(), "chat", "--launcher", s_launcher, "--llm", llm, "--session", session,
                          NULL};
    return korch_test_run(argv, input, out, err, timeout_s);
}

static inline int s_chat(const char *llm, const char *session, const char *input, char **out, char **err)
{
    return s_chat_t(llm, session, input, out, err, 100);
}

/* What an agent test needs: the scripted server on a scenario (every
   provider's base URL pointed at it), a fresh dir and a session in it. */
typedef struct {
    llm_server_t srv;
    char *dir;
    char session[512]; /* dir/s, or the session of the case's current run */
    char *out, *err;   /* of the last run */
    char *question;    /* a case's question made by its set-up (freed at the end) */
    char r[64];        /* a value a run printed, for a later run's check */
} fx_t;

static inline bool s_fx(fx_t *f, const char *scenario)
{
    *f = (fx_t){0};
    if (!llm_server_start(&f->srv))
        return false;
    llm_server_env(&f->srv, scenario);
    f->dir = strdup("/tmp/korch-agent-XXXXXX");
    if (!CHECK(f->dir && mkdtemp(f->dir))) {
        free(f->dir);
        f->dir = NULL;
        llm_server_stop(&f->srv);
        return false;
    }
    snprintf(f->session, sizeof f->session, "%s/s", f->dir);
    return true;
}

/* The last run's output freed (before the next run). */
static inline void s_fx_clear(fx_t *f)
{
    free(f->out);
    free(f->err);
    f->out = f->err = NULL;
}

static inline void s_fx_end(fx_t *f)
{
    s_fx_clear(f);
    free(f->question);
    if (f->dir) {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->dir);
        CHECK_EQ(system(cmd), 0);
    }
    free(f->dir);
    llm_server_stop(&f->srv);
}

/* A file under dir, read (a new string, NULL when it is not there). */
static inline char *s_slurp(const char *dir, const char *rel)
{
    char path[700];
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    return korch_read_file(path, 1 << 26, NULL, NULL);
}

static inline void s_spit(const char *dir, const char *rel, const char *text)
{
    char path[700];
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    CHECK_EQ(korch_write_file(path, text, strlen(text), NULL), KORCH_OK);
}

/* python3 -c code must print want (the notebook, the server's requests...). */
static inline void s_py_prints(const char *code, const char *want)
{
    const char *argv[] = {"/usr/bin/python3", "-c", code, NULL};
    char *v = NULL;
    CHECK_EQ(korch_test_run(argv, NULL, &v, NULL, 60), 0);
    CHECK_STREQ(v, want);
    free(v);
}

/* ---- the table: a test as a scenario and its runs ---- */

/* One korch command of a case and what it must give. In args, "@/x" stands
   for x in the test's dir. */
typedef struct {
    const char *session;     /* the session dir under the test's dir; NULL: the last one ("s" first) */
    const char *chat;        /* korch chat with this on stdin, instead of korch run */
    int timeout_s;           /* korch chat's; 0: 100 s */
    const char *llm;         /* --llm; NULL: none given (the session's, or .env's) */
    const char *args[10];    /* after --llm, before --session */
    const char *question;    /* NULL: the one the case's set-up made (f->question) */
    int rc;                  /* the exit status wanted */
    const char *out[7];      /* stdout holds each */
    const char *out_is;      /* stdout is exactly this */
    const char *err[3];      /* stderr holds each */
    const char *not_out[4];  /* stdout holds none */
    void (*then)(fx_t *f);   /* more checks after this run */
} agent_run_t;

typedef struct {
    const char *test, *scenario;
    void (*setup)(fx_t *f);  /* before the first run */
    agent_run_t runs[3];     /* in order; the unused ones all zero */
} agent_case_t;

/* "@/x" as x in the test's dir, into buf (else arg itself). */
static inline const char *s_arg(const fx_t *f, const char *arg, char *buf, size_t len)
{
    if (strncmp(arg, "@/", 2) != 0)
        return arg;
    snprintf(buf, len, "%s/%s", f->dir, arg + 2);
    return buf;
}

static inline bool s_run_is_empty(const agent_run_t *r)
{
    return !r->llm && !r->chat && !r->question && !r->args[0] && !r->rc && !r->out[0] && !r->then;
}

/* Run r in fixture f and check what it must give. */
static inline void s_agent_run(fx_t *f, const agent_run_t *r)
{
    char paths[10][700];
    const char *args[24];
    int n = 0;
    int failed = korch_test_failures();
    s_fx_clear(f);
    if (r->session)
        snprintf(f->session, sizeof f->session, "%s/%s", f->dir, r->session);
    if (r->chat) {
        CHECK_EQ(s_chat_t(r->llm, f->session, r->chat, &f->out, &f->err, r->timeout_s ? r->timeout_s : 100), r->rc);
    } else {
        if (r->llm) {
            args[n++] = "--llm";
            args[n++] = r->llm;
        }
        for (int k = 0; k < 10 && r->args[k]; k++)
            args[n++] = s_arg(f, r->args[k], paths[k], sizeof paths[k]);
        args[n++] = "--session";
        args[n++] = f->session;
        args[n++] = r->question ? r->question : f->question;
        args[n] = NULL;
        CHECK_EQ(s_run(args, &f->out, &f->err), r->rc);
    }
    for (int k = 0; k < 7 && r->out[k]; k++)
        CHECK_CONTAINS(f->out, r->out[k]);
    if (r->out_is)
        CHECK_STREQ(f->out, r->out_is);
    for (int k = 0; k < 3 && r->err[k]; k++)
        CHECK_CONTAINS(f->err, r->err[k]);
    for (int k = 0; k < 4 && r->not_out[k]; k++)
        if (!CHECK(!f->out || !strstr(f->out, r->not_out[k])))
            fprintf(stderr, "  stdout holds '%s'\n", r->not_out[k]);
    if (korch_test_failures() > failed) /* what korch said, to see why */
        fprintf(stderr, "  korch's stderr:\n%s\n", f->err ? f->err : "(none)");
    if (r->then)
        r->then(f);
}

/* The case named test of the table: its set-up, then its runs in order. */
static inline void s_agent_case(const agent_case_t *cases, size_t ncases, const char *test)
{
    size_t i = 0;
    while (i < ncases && strcmp(cases[i].test, test) != 0)
        i++;
    fx_t f;
    if (!CHECK(i < ncases) || !s_fx(&f, cases[i].scenario))
        return;
    if (cases[i].setup)
        cases[i].setup(&f);
    for (int k = 0; k < 3 && !s_run_is_empty(&cases[i].runs[k]); k++)
        s_agent_run(&f, &cases[i].runs[k]);
    s_fx_end(&f);
}

/* AGENT_CASE(t, name): TEST agent_NAME runs the row "name" of table t. */
#define AGENT_CASE_T(table, name, timeout)                                                                      \
    TEST_T(agent_##name, timeout) { s_agent_case(table, sizeof table / sizeof *table, #name); }
#define AGENT_CASE(table, name) AGENT_CASE_T(table, name, 180)

#endif
