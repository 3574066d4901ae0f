/*  Test fixture: the scripted LLM server (tests/peers/llm_server.py) as a
 *  child process, and the environment that points every provider at one of
 *  its scenarios. Header-only, like serve_fixture.h: include it from one
 *  test file each. */
#ifndef KORCH_LLM_FIXTURE_H
#define KORCH_LLM_FIXTURE_H

#include "test.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

typedef struct {
    pid_t pid;
    int port;
} llm_server_t;

static inline bool llm_server_start(llm_server_t *s)
{
    char path[600], line[64];
    snprintf(path, sizeof path, "%s/tests/peers/llm_server.py", korch_test_root());
    const char *argv[] = {"/usr/bin/python3", path, NULL};
    s->pid = korch_test_spawn_line(argv, line, sizeof line, 10, NULL);
    s->port = s->pid > 0 ? atoi(line) : 0;
    return CHECK_GT(s->port, 0);
}

static inline void llm_server_stop(llm_server_t *s)
{
    if (s->pid > 0) {
        kill(s->pid, SIGTERM);
        waitpid(s->pid, NULL, 0);
        s->pid = 0;
    }
}

/* Point every provider's base URL (and a key) at scenario. */
static inline void llm_server_env(const llm_server_t *s, const char *scenario)
{
    char url[256];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/s/%s/v1", s->port, scenario);
    setenv("OPENAI_BASE_URL", url, 1);
    snprintf(url, sizeof url, "http://127.0.0.1:%d/s/%s", s->port, scenario);
    setenv("ANTHROPIC_BASE_URL", url, 1);
    setenv("OLLAMA_HOST", url, 1);
    setenv("OPENAI_API_KEY", "sk-test", 1);
    setenv("ANTHROPIC_API_KEY", "sk-ant-test", 1);
    unsetenv("KORCH_LLM");
}

#endif
