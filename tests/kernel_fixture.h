/*  Shared set-up for tests that need a real kernel on a loop. */
#ifndef KORCH_KERNEL_FIXTURE_H
#define KORCH_KERNEL_FIXTURE_H

#include "test.h"
#include "korch/docker.h"
#include "korch/kernel.h"
#include "korch/sandbox.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

typedef struct {
    korch_loop_t *loop;
    korch_kernel_t *k;
    korch_launcher_t *launcher;     /* docker and sandbox runs only */
} fx_t;

/* Is this the docker:NAME run of a TEST_BOTH test? */
static inline bool fx_docker(void)
{
    const char *l = getenv("KORCH_TEST_LAUNCHER");
    return l && strcmp(l, "docker") == 0;
}

/* Is this the sandbox:NAME run of a TEST_BOTH test? */
static inline bool fx_sandbox(void)
{
    const char *l = getenv("KORCH_TEST_LAUNCHER");
    return l && strcmp(l, "sandbox") == 0;
}

/* Does the kernel have pids of its own (kill(2) from here cannot use them)? */
static inline bool fx_own_pids(void) { return fx_docker() || fx_sandbox(); }

/* The loop of this test (each test is a forked child, so one per
   process): launchers a test makes run on it, so kernels can use them. */
static inline korch_loop_t *fx_loop(void)
{
    static korch_loop_t *loop;
    if (!loop)
        loop = korch_loop_new();
    return loop;
}

/* A kernel on the test's loop: local, in a container for docker: runs (the
   python3 kernel image serves every python kernelspec the tests make), in
   bubblewrap for sandbox: runs. */
static inline bool fx_start(fx_t *f, const korch_kernel_opts_t *o)
{
    memset(f, 0, sizeof *f);
    f->loop = fx_loop();
    korch_err_t err = {0};
    korch_kernel_opts_t ko = o ? *o : (korch_kernel_opts_t){0};
    if (fx_docker() && !ko.existing && !ko.launcher) {
        korch_docker_opts_t d;
        korch_docker_opts_init(&d);
        d.image = "korch-kernel-python3:latest";
        f->launcher = korch_launcher_docker_new(f->loop, &d, &err);
        if (!CHECK(f->launcher)) {
            fprintf(stderr, "  docker launcher: %s\n", err.msg);
            return false;
        }
        ko.launcher = f->launcher;
    } else if (fx_sandbox() && !ko.existing && !ko.launcher) {
        f->launcher = korch_launcher_sandbox_new(f->loop, NULL, &err);
        if (!CHECK(f->launcher)) {
            fprintf(stderr, "  sandbox launcher: %s\n", err.msg);
            return false;
        }
        ko.launcher = f->launcher;
    }
    f->k = korch_kernel_new(f->loop, &ko, &err);
    if (f->k)
        korch_kernel_wait_ready(f->k, &err);
    if (!CHECK_EQ(err.rc, KORCH_OK)) {
        fprintf(stderr, "  kernel did not start: %s\n", err.msg);
        korch_kernel_destroy(&f->k);
        korch_launcher_destroy(&f->launcher);
        return false;
    }
    return true;
}

static inline void fx_stop(fx_t *f)
{
    korch_kernel_destroy(&f->k);
    korch_launcher_destroy(&f->launcher);
    f->loop = NULL; /* fx_loop's, for the rest of the test */
}

/* Execute and wait; timeout_ms 0 = none. Never NULL (the test fails instead). */
static inline korch_exec_t *fx_run(fx_t *f, const char *code, int timeout_ms)
{
    korch_exec_opts_t eo = {.timeout_ms = timeout_ms};
    korch_err_t err = {0};
    korch_exec_t *ex = korch_kernel_execute_wait(f->k, code, &eo, NULL, &err);
    if (!ex) {
        fprintf(stderr, "  execute failed: %s\n", err.msg);
        abort();
    }
    return ex;
}

/* Write {dir}/{name}/kernel.json holding json (a kernelspec for a test). */
static inline void fx_write_kernelspec(const char *dir, const char *name, const char *json)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/%s/kernel.json", dir, name);
    FILE *fp = fopen(path, "w");
    if (CHECK(fp)) {
        fputs(json, fp);
        fclose(fp);
    }
}

/* The concatenated text of one stream (the merged output), or "". Large
   texts are returned from a malloc'd buffer that lives until exit. */
static inline const char *fx_stream(korch_exec_t *ex, const char *name)
{
    json_t *outs = korch_exec_result(ex)->outputs;
    size_t total = 0, i;
    json_t *o;
    json_array_foreach(outs, i, o) {
        if (json_string_value(json_object_get(o, "name")) &&
            strcmp(json_string_value(json_object_get(o, "name")), name) == 0)
            total += json_string_length(json_object_get(o, "text"));
    }
    char *buf = malloc(total + 1);
    size_t n = 0;
    json_array_foreach(outs, i, o) {
        if (json_string_value(json_object_get(o, "name")) &&
            strcmp(json_string_value(json_object_get(o, "name")), name) == 0) {
            json_t *t = json_object_get(o, "text");
            memcpy(buf + n, json_string_value(t), json_string_length(t));
            n += json_string_length(t);
        }
    }
    buf[n] = 0;
    return buf; /* leaked on purpose: tests are short-lived forked children */
}

/* A sandbox launcher on the test's loop (o NULL: its defaults); NULL, the
   test failed with the reason, when it cannot be made. */
static inline korch_launcher_t *fx_sandbox_new(const korch_sandbox_opts_t *o)
{
    korch_err_t err = {0};
    korch_launcher_t *l = korch_launcher_sandbox_new(fx_loop(), o, &err);
    if (!CHECK(l))
        fprintf(stderr, "  %s\n", err.msg);
    return l;
}

/* fx_start on launcher *l (which stays the caller's): false when there is
   no launcher or the kernel did not start, and then *l is destroyed. */
static inline bool fx_start_on(fx_t *f, korch_launcher_t **l)
{
    if (*l && fx_start(f, &(korch_kernel_opts_t){.launcher = *l}))
        return true;
    korch_launcher_destroy(l);
    return false;
}

/* Run code (timeout_ms 0 = none): its stdout; the test fails, with the
   detail and outputs, unless it ended ok. */
static inline const char *fx_out(fx_t *f, const char *code, int timeout_ms)
{
    korch_exec_t *ex = fx_run(f, code, timeout_ms);
    if (!CHECK_EQ(korch_exec_result(ex)->status, KORCH_EXEC_OK))
        fprintf(stderr, "  detail: %s\n  outputs: %s\n", korch_exec_result(ex)->detail,
                json_dumps(korch_exec_result(ex)->outputs, JSON_COMPACT));
    const char *out = fx_stream(ex, "stdout");
    korch_exec_destroy(&ex);
    return out;
}

/* The kernel allocates until its memory limit kills it: it died, saying so
   with its limit (limit: "160 MiB"), restarted, and runs code again. */
static inline void fx_oom_then_fresh(fx_t *f, const char *limit)
{
    char want[128];
    snprintf(want, sizeof want, "kernel died: out of memory (limit %s)", limit);
    korch_exec_t *ex = fx_run(f, "blocks = []\nwhile True:\n    blocks.append(bytearray(32 << 20))", 0);
    CHECK_EQ(korch_exec_result(ex)->status, KORCH_EXEC_DIED);
    CHECK_CONTAINS(korch_exec_result(ex)->detail, want);
    korch_exec_destroy(&ex);
    korch_err_t err = {0};
    CHECK_EQ(korch_kernel_wait_ready(f->k, &err), KORCH_OK);
    CHECK_STREQ(fx_out(f, "print('fresh')", 60000), "fresh\n");
}

#endif
