/*  The kernel client against real ipykernel processes. */
#include "kernel_fixture.h"
#include "korch/media.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

TEST_BOTH(kernel_state_persists)
{
    fx_t f;
    if (!fx_start(&f, NULL))
        return;
    korch_exec_t *a = fx_run(&f, "x = 41", 0);
    CHECK_EQ(korch_exec_result(a)->status, KORCH_EXEC_OK);
    korch_exec_t *b = fx_run(&f, "x += 1; print(x)", 0);
    CHECK_STREQ(fx_stream(b, "stdout"), "42\n");
    CHECK_EQ(korch_exec_result(b)->execution_count, korch_exec_result(a)->execution_count + 1);
    korch_exec_destroy(&a);
    korch_exec_destroy(&b);
    fx_stop(&f);
}

TEST_BOTH(kernel_stdout_stderr_apart_and_in_order)
{
    fx_t f;
    if (!fx_start(&f, NULL))
        return;
    korch_exec_t *ex = fx_run(&f,
                              "import sys\n"
                              "print('one'); sys.stdout.flush()\n"
                              "print('warn', file=sys.stderr); sys.stderr.flush()\n"
                              "print('two')\n",
                              0);
    json_t *outs = korch_exec_result(ex)->outputs;
    CHECK_EQ(json_array_size(outs), 3);
    CHECK_STREQ(json_string_value(json_object_get(json_array_get(outs, 0), "name")), "stdout");
    CHECK_STREQ(json_string_value(json_object_get(json_array_get(outs, 0), "text")), "one\n");
    CHECK_STREQ(json_string_value(json_object_get(json_array_get(outs, 1), "name")), "stderr");
    CHECK_STREQ(json_string_value(json_object_get(json_array_get(outs, 1), "text")), "warn\n");
    CHECK_STREQ(json_string_value(json_object_get(json_array_get(outs, 2), "text")), "two\n");
    korch_exec_destroy(&ex);
    fx_stop(&f);
}

TEST_BOTH(kernel_execute_result)
{
    fx_t f;
    if (!fx_start(&f, NULL))
        return;
    korch_exec_t *ex = fx_run(&f, "6 * 7", 0);
    const korch_exec_result_t *r = korch_exec_result(ex);
    json_t *o = json_array_get(r->outputs, 0);
    CHECK_STREQ(json_string_value(json_object_get(o, "output_type")), "execute_result");
    CHECK_STREQ(json_string_value(json_object_get(json_object_get(o, "data"), "text/plain")), "42");
    CHECK_EQ(json_integer_value(json_object_get(o, "execution_count")), r->execution_count);
    CHECK_STREQ(json_string_value(json_object_get(r->reply, "status")), "ok");
    korch_exec_destroy(&ex);
    fx_stop(&f);
}

TEST_BOTH(kernel_matplotlib_png_and_dataframe_html)
{
    fx_t f;
    if (!fx_start(&f, NULL))
        return;
    korch_exec_t *ex = fx_run(&f,
                              "import matplotlib.pyplot as plt\n"
                              "fig, ax = plt.subplots(figsize=(4, 3), dpi=100)\n"
                              "ax.plot([1, 2, 3], [3, 1, 2])\n"
                              "plt.show()\n",
                              30000);
    const korch_exec_result_t *r = korch_exec_result(ex);
    CHECK_EQ(r->status, KORCH_EXEC_OK);
    json_t *png = NULL;
    size_t i;
    json_t *o;
    json_array_foreach(r->outputs, i, o) {
        if (strcmp(json_string_value(json_object_get(o, "output_type")), "display_data") == 0)
            png = json_object_get(json_object_get(o, "data"), "image/png");
    }
    if (CHECK(json_is_string(png))) {
        size_t len = 0;
        unsigned char *bytes = korch_b64_decode(json_string_value(png), json_string_length(png), &len);
        CHECK(bytes != NULL);
        CHECK_GT(len, 1000);
        CHECK(bytes && memcmp(bytes, "\x89PNG\r\n\x1a\n", 8) == 0);
        int w = 0, h = 0;
        CHECK(korch_image_size(bytes, len, &w, &h));
        CHECK_GT(w, 200);
        CHECK_GT(h, 150);
        /* The IEND chunk closes a whole PNG. */
        CHECK(len > 12 && memcmp(bytes + len - 8, "IEND", 4) == 0);
        free(bytes);
    }
    korch_exec_destroy(&ex);

    ex = fx_run(&f, "import pandas as pd\npd.DataFrame({'city': ['Oslo', 'Lima'], 'temp': [3.5, 19.0]})", 30000);
    r = korch_exec_result(ex);
    json_t *data = json_object_get(json_array_get(r->outputs, 0), "data");
    CHECK_CONTAINS(json_string_value(json_object_get(data, "text/html")), "<table");
    CHECK_CONTAINS(json_string_value(json_object_get(data, "text/html")), "Oslo");
    CHECK_CONTAINS(json_string_value(json_object_get(data, "text/plain")), "Lima");
    korch_exec_destroy(&ex);
    fx_stop(&f);
}

TEST_BOTH(kernel_error_then_state_kept)
{
    fx_t f;
    if (!fx_start(&f, NULL))
        return;
    korch_exec_t *a = fx_run(&f, "keep = 'still here'\nraise ValueError('bad value 7')", 0);
    const korch_exec_result_t *r = korch_exec_result(a);
    CHECK_EQ(r->status, KORCH_EXEC_ERROR);
    json_t *err = json_array_get(r->outputs, json_array_size(r->outputs) - 1);
    CHECK_STREQ(json_string_value(json_object_get(err, "output_type")), "error");
    CHECK_STREQ(json_string_value(json_object_get(err, "ename")), "ValueError");
    CHECK_STREQ(json_string_value(json_object_get(err, "evalue")), "bad value 7");
    CHECK_GT(json_array_size(json_object_get(err, "traceback")), 0);
    korch_exec_t *b = fx_run(&f, "print(keep)", 0);
    CHECK_EQ(korch_exec_result(b)->status, KORCH_EXEC_OK);
    CHECK_STREQ(fx_stream(b, "stdout"), "still here\n");
    korch_exec_destroy(&a);
    korch_exec_destroy(&b);
    fx_stop(&f);
}

TEST_BOTH(kernel_timeout_interrupts_and_keeps_state)
{
    fx_t f;
    if (!fx_start(&f, NULL))
        return;
    korch_exec_destroy((korch_exec_t *[]){fx_run(&f, "survivor = 7", 0)});
    int64_t t0 = korch_now_ms();
    korch_exec_t *ex = fx_run(&f, "print('looping', flush=True)\nwhile True:\n    pass", 1000);
    const korch_exec_result_t *r = korch_exec_result(ex);
    CHECK_EQ(r->status, KORCH_EXEC_TIMEOUT);
    CHECK(r->interrupted);
    CHECK(!r->restarted);
    CHECK_LT(korch_now_ms() - t0, 5000);
    CHECK_STREQ(fx_stream(ex, "stdout"), "looping\n");
    CHECK_CONTAINS(r->detail, "interrupted");
    korch_exec_destroy(&ex);
    ex = fx_run(&f, "print(survivor)", 0);
    CHECK_STREQ(fx_stream(ex, "stdout"), "7\n");
    CHECK_EQ(korch_kernel_restarts(f.k), 0);
    korch_exec_destroy(&ex);
    fx_stop(&f);
}

TEST_BOTH(kernel_timeout_restarts_when_interrupt_is_ignored)
{
    fx_t f;
    if (!fx_start(&f, NULL))
        return;
    korch_exec_opts_t eo = {.timeout_ms = 800, .interrupt_grace_ms = 1000};
    korch_err_t err = {0};
    korch_exec_t *ex = korch_kernel_execute_wait(
        f.k, "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nlost = 1\nwhile True:\n    time.sleep(0.01)",
        &eo, NULL, &err);
    const korch_exec_result_t *r = korch_exec_result(ex);
    CHECK_EQ(r->status, KORCH_EXEC_TIMEOUT);
    CHECK(r->restarted);
    CHECK_CONTAINS(r->detail, "restarted");
    korch_exec_destroy(&ex);
    CHECK_EQ(korch_kernel_wait_ready(f.k, &err), KORCH_OK);
    ex = fx_run(&f, "print('lost' in globals())", 0);
    CHECK_STREQ(fx_stream(ex, "stdout"), "False\n");
    CHECK_EQ(korch_kernel_restarts(f.k), 1);
    korch_exec_destroy(&ex);
    fx_stop(&f);
}

TEST_BOTH(kernel_os_exit_reports_died_fast)
{
    fx_t f;
    if (!fx_start(&f, NULL))
        return;
    int64_t t0 = korch_now_ms();
    korch_exec_t *ex = fx_run(&f, "import os, sys, time\nprint('before', flush=True)\ntime.sleep(0.3)\nos._exit(3)", 0);
    const korch_exec_result_t *r = korch_exec_result(ex);
    CHECK_EQ(r->status, KORCH_EXEC_DIED);
    CHECK_LT(korch_now_ms() - t0, 2300);
    CHECK_CONTAINS(r->detail, "exited 3");
    CHECK_STREQ(fx_stream(ex, "stdout"), "before\n");
    CHECK(r->restarted);
    korch_exec_destroy(&ex);
    /* auto-restart: the next execution works in a fresh kernel */
    ex = fx_run(&f, "print('alive again')", 0);
    CHECK_STREQ(fx_stream(ex, "stdout"), "alive again\n");
    korch_exec_destroy(&ex);
    fx_stop(&f);
}

typedef struct {
    int64_t killed_at;
    korch_kernel_t *k;
} kill_ctx_t;

/* SIGKILL from outside as soon as the kernel prints its pid: kill(2) for a
   local kernel; for a container or a sandbox (whose pids are their own) through the launcher. */
static void s_kill_on_pid(korch_exec_t *ex, korch_output_event_t ev, json_t *output, size_t index, void *arg)
{
    kill_ctx_t *kc = arg;
    const char *text = json_string_value(json_object_get(output, "text"));
    int pid = text ? atoi(text) : 0;
    if (pid > 1 && !kc->killed_at) {
        if (fx_own_pids())
            korch_proc_signal(korch_kernel_proc(kc->k), SIGKILL, NULL, NULL, NULL); /* inside a handler: no wait */
        else
            kill(pid, SIGKILL);
        kc->killed_at = korch_now_ms();
    }
}

TEST_BOTH(kernel_sigkill_reports_died_within_2s)
{
    fx_t f;
    korch_kernel_opts_t o = {.no_auto_restart = true};
    if (!fx_start(&f, &o))
        return;
    kill_ctx_t kc = {0, f.k};
    korch_exec_cb_t cb = {.on_output = s_kill_on_pid, .arg = &kc};
    korch_err_t err = {0};
    korch_exec_t *ex =
        korch_kernel_execute_wait(f.k, "import os, time\nprint(os.getpid(), flush=True)\ntime.sleep(60)", NULL, &cb, &err);
    int64_t done_at = korch_now_ms();
    const korch_exec_result_t *r = korch_exec_result(ex);
    CHECK_GT(kc.killed_at, 0);
    CHECK_EQ(r->status, KORCH_EXEC_DIED);
    CHECK_LT(done_at - kc.killed_at, 2000);
    CHECK_CONTAINS(r->detail, "signal 9");
    CHECK(!r->restarted);
    CHECK_EQ(korch_kernel_state(f.k), KORCH_KERNEL_DEAD);
    korch_exec_destroy(&ex);
    /* a dead kernel refuses work with a clear error */
    err = (korch_err_t){0};
    ex = korch_kernel_execute(f.k, "1", NULL, NULL, &err);
    CHECK(ex == NULL);
    CHECK_EQ(err.rc, KORCH_E_DIED);
    CHECK_CONTAINS(err.msg, "dead");
    fx_stop(&f);
}

/* korch_kernel_destroy from a loop handler never runs the loop (which would
   abort: korch_loop_run is not reentrant): the kernel detaches, goes away on
   the loop (its process with it), and a running execution ends as closed. */
typedef struct {
    korch_kernel_t *k;
    int64_t destroyed_in_ms;
} s_detach_t;

static bool s_detach_ran(void *arg) { return ((s_detach_t *)arg)->destroyed_in_ms >= 0; }

static int s_destroy_in_handler(korch_loop_t *loop, int timer_id, void *arg)
{
    s_detach_t *d = arg;
    int64_t t0 = korch_now_ms();
    korch_kernel_destroy(&d->k);
    d->destroyed_in_ms = korch_now_ms() - t0;
    return 0;
}

TEST_BOTH(kernel_destroy_from_a_handler_detaches)
{
    fx_t f;
    if (!fx_start(&f, NULL))
        return;
    korch_exec_t *ex = fx_run(&f, "import os\nprint(os.getpid())", 30000);
    long pid = atol(fx_stream(ex, "stdout"));
    korch_exec_destroy(&ex);
    korch_err_t err = {0};
    ex = korch_kernel_execute(f.k, "import time\ntime.sleep(60)", NULL, NULL, &err);
    CHECK(ex);
    s_detach_t d = {.k = f.k, .destroyed_in_ms = -1};
    f.k = NULL;
    korch_loop_timer(f.loop, 300, 1, s_destroy_in_handler, &d);
    korch_loop_run(f.loop, s_detach_ran, &d, 5000);
    CHECK(d.k == NULL);
    CHECK_GE(d.destroyed_in_ms, 0);
    CHECK_LT(d.destroyed_in_ms, 100); /* returned at once: no grace waited here */
    CHECK(ex && korch_exec_done(ex));
    if (ex)
        CHECK_CONTAINS(korch_exec_result(ex)->detail, "kernel was closed");
    korch_exec_destroy(&ex);
    /* the teardown goes on on the loop: the process (local) ends */
    bool gone = false;
    for (int64_t end = korch_now_ms() + 15000; !gone && korch_now_ms() < end;) {
        korch_loop_run(f.loop, NULL, NULL, 100);
        gone = fx_own_pids() ? true : kill((pid_t)pid, 0) != 0;
    }
    CHECK(gone);
    if (f.launcher) /* docker, sandbox: the launcher finishes what is left */
        CHECK(korch_launcher_settle(f.launcher, 20000));
    fx_stop(&f);
}

static void s_answer(korch_exec_t *ex, const char *prompt, bool password, void *arg)
{
    *(char **)arg = strdup(prompt);
    korch_exec_input_reply(ex, "Ada", NULL);
}

TEST_BOTH(kernel_input_request_through_callback)
{
    fx_t f;
    if (!fx_start(&f, NULL))
        return;
    char *prompt = NULL;
    korch_exec_opts_t eo = {.allow_stdin = true};
    korch_exec_cb_t cb = {.on_input = s_answer, .arg = &prompt};
    korch_err_t err = {0};
    korch_exec_t *ex = korch_kernel_execute_wait(f.k, "name = input('who? ')\nprint('hi', name)", &eo, &cb, &err);
    CHECK_STREQ(prompt, "who? ");
    CHECK_STREQ(fx_stream(ex, "stdout"), "hi Ada\n");
    free(prompt);
    korch_exec_destroy(&ex);
    /* stdin off (the default): input() fails in the kernel, korch is unaffected */
    ex = fx_run(&f, "input('x')", 0);
    CHECK_EQ(korch_exec_result(ex)->status, KORCH_EXEC_ERROR);
    korch_exec_destroy(&ex);
    fx_stop(&f);
}

TEST_BOTH(kernel_clear_output_and_display_updates_live)
{
    fx_t f;
    if (!fx_start(&f, NULL))
        return;
    korch_exec_t *ex = fx_run(&f,
                              "from IPython.display import display, clear_output\n"
                              "h = display('start', display_id=True)\n"
                              "print('noise')\n"
                              "clear_output(wait=True)\n"
                              "print('after clear')\n"
                              "h2 = display('progress 0', display_id=True)\n"
                              "h2.update('progress 100')\n",
                              0);
    json_t *outs = korch_exec_result(ex)->outputs;
    CHECK_EQ(json_array_size(outs), 2);
    CHECK_STREQ(json_string_value(json_object_get(json_array_get(outs, 0), "text")), "after clear\n");
    CHECK_STREQ(json_string_value(json_object_get(json_object_get(json_array_get(outs, 1), "data"), "text/plain")),
                "'progress 100'");
    korch_exec_destroy(&ex);
    fx_stop(&f);
}

static bool s_both_done(void *arg)
{
    korch_exec_t **ex = arg;
    return korch_exec_done(ex[0]) && korch_exec_done(ex[1]);
}

/* Two kernels on one loop run at the same time: nothing blocks the other. */
TEST(kernel_two_kernels_one_loop_concurrently)
{
    fx_t f;
    if (!fx_start(&f, NULL))
        return;
    korch_err_t err = {0};
    korch_kernel_t *k2 = korch_kernel_new(f.loop, NULL, &err);
    if (!CHECK(k2) || !CHECK_EQ(korch_kernel_wait_ready(k2, &err), KORCH_OK)) {
        fprintf(stderr, "  %s\n", err.msg);
        korch_kernel_destroy(&k2);
        fx_stop(&f);
        return;
    }
    int64_t t0 = korch_now_ms();
    korch_exec_t *ex[2];
    ex[0] = korch_kernel_execute(f.k, "import time; time.sleep(1.5); print('a')", NULL, NULL, &err);
    ex[1] = korch_kernel_execute(k2, "import time; time.sleep(1.5); print('b')", NULL, NULL, &err);
    korch_loop_run(f.loop, s_both_done, ex, 20000);
    int64_t took = korch_now_ms() - t0;
    CHECK_LT(took, 2600); /* serially it would be >= 3 s */
    CHECK_STREQ(fx_stream(ex[0], "stdout"), "a\n");
    CHECK_STREQ(fx_stream(ex[1], "stdout"), "b\n");
    korch_exec_destroy(&ex[0]);
    korch_exec_destroy(&ex[1]);
    korch_kernel_destroy(&k2);
    fx_stop(&f);
}

TEST_BOTH(kernel_restart_on_request)
{
    fx_t f;
    if (!fx_start(&f, NULL))
        return;
    korch_exec_destroy((korch_exec_t *[]){fx_run(&f, "gone = 1", 0)});
    korch_err_t err = {0};
    CHECK_EQ(korch_kernel_restart(f.k, &err), KORCH_OK);
    CHECK_EQ(korch_kernel_wait_ready(f.k, &err), KORCH_OK);
    korch_exec_t *ex = fx_run(&f, "print('gone' in globals())", 0);
    CHECK_STREQ(fx_stream(ex, "stdout"), "False\n");
    korch_exec_destroy(&ex);
    fx_stop(&f);
}

TEST(kernel_ipc_transport)
{
    fx_t f;
    korch_kernel_opts_t o = {.transport = "ipc"};
    if (!fx_start(&f, &o))
        return;
    CHECK_STREQ(korch_kernel_conn(f.k)->transport, "ipc");
    korch_exec_t *ex = fx_run(&f, "print(sum(range(10)))", 0);
    CHECK_STREQ(fx_stream(ex, "stdout"), "45\n");
    korch_exec_destroy(&ex);
    fx_stop(&f);
}

static long s_rss_kib(const char *field)
{
    FILE *fp = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    size_t n = strlen(field);
    while (fp && fgets(line, sizeof line, fp))
        if (strncmp(line, field, n) == 0)
            v = atol(line + n + 1);
    if (fp)
        fclose(fp);
    return v;
}

TEST_BOTH_T(kernel_100mb_of_stdout_in_bounded_memory, 120)
{
    fx_t f;
    korch_kernel_opts_t o = {.max_stream_bytes = 4u << 20};
    if (!fx_start(&f, &o))
        return;
    long before = s_rss_kib("VmRSS:");
    korch_exec_t *ex = fx_run(&f, "import sys\nfor i in range(100):\n    sys.stdout.write('x' * (1 << 20))\nprint('end')", 0);
    const korch_exec_result_t *r = korch_exec_result(ex);
    CHECK_EQ(r->status, KORCH_EXEC_OK);
    /* 100 MiB + 4 bytes printed; 4 MiB kept */
    CHECK_EQ(r->dropped_bytes, (100u << 20) + 4 - (4u << 20));
    CHECK_EQ(strlen(fx_stream(ex, "stdout")), 4u << 20);
    CHECK_CONTAINS(fx_stream(ex, "stderr"), "bytes of stream output dropped");
    korch_exec_destroy(&ex);
    long after = s_rss_kib("VmRSS:"), peak = s_rss_kib("VmHWM:");
    fprintf(stderr, "  rss before %ld KiB, after %ld KiB, peak %ld KiB\n", before, after, peak);
#if defined(__SANITIZE_ADDRESS__)
    /* ASan's quarantine keeps freed memory on purpose: RSS says nothing here. */
    (void)after;
    (void)peak;
#else
    CHECK_LT(after - before, 16 * 1024);
    CHECK_LT(peak, 128 * 1024);
#endif
    fx_stop(&f);
}

TEST(kernel_start_failure_says_why)
{
    char dir[] = "/tmp/korch-spec-XXXXXX";
    if (!CHECK(mkdtemp(dir)))
        return;
    fx_write_kernelspec(dir, "nomod",
                        "{\"argv\": [\"/usr/bin/python3\", \"-m\", \"ipykernel_nonexistent\", \"-f\", "
                        "\"{connection_file}\"], \"display_name\": \"broken\", \"language\": \"python\"}");
    fx_write_kernelspec(dir, "nobin",
                        "{\"argv\": [\"/nonexistent/bin/kernel\", \"{connection_file}\"], \"display_name\": \"x\", "
                        "\"language\": \"x\"}");
    setenv("KORCH_KERNELSPEC_PATH", dir, 1);

    korch_loop_t *loop = korch_loop_new();
    korch_err_t err = {0};
    korch_kernel_t *k = korch_kernel_new(loop, &(korch_kernel_opts_t){.kernelspec = "nomod"}, &err);
    if (k)
        CHECK_NE(korch_kernel_wait_ready(k, &err), KORCH_OK);
    CHECK_CONTAINS(err.msg, "cannot start kernel 'nomod': '/usr/bin/python3 -m ipykernel_nonexistent' exited 1");
    CHECK_CONTAINS(err.msg, "No module named ipykernel_nonexistent");
    CHECK_CONTAINS(err.msg, "(install python3-ipykernel-nonexistent)");
    korch_kernel_destroy(&k);

    err = (korch_err_t){0};
    k = korch_kernel_new(loop, &(korch_kernel_opts_t){.kernelspec = "nobin"}, &err);
    CHECK(k == NULL);
    CHECK_CONTAINS(err.msg, "'/nonexistent/bin/kernel': No such file or directory");
    korch_kernel_destroy(&k);

    err = (korch_err_t){0};
    k = korch_kernel_new(loop, &(korch_kernel_opts_t){.kernelspec = "no-such-kernel"}, &err);
    CHECK(k == NULL);
    CHECK_EQ(err.rc, KORCH_E_NOTFOUND);
    CHECK_CONTAINS(err.msg, "no kernelspec named 'no-such-kernel'");
    korch_loop_destroy(&loop);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK_EQ(system(cmd), 0);
}

/* A kernel started by jupyter_client, reached through a proxy that replays
   and tampers with IOPub messages: korch drops and counts them, and the
   outputs are exactly what the kernel sent. */
TEST_T(kernel_attach_to_jupyter_client_kernel_through_tampering_proxy, 90)
{
    char dir[] = "/tmp/korch-attach-XXXXXX";
    if (!CHECK(mkdtemp(dir)))
        return;
    char conn[300], ready[300], cmd[1200];
    snprintf(conn, sizeof conn, "%s/proxy.json", dir);
    snprintf(ready, sizeof ready, "%s/ready", dir);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/tests/peers/tamper_proxy.py %s %s > %s/proxy.log 2>&1 &",
             korch_test_root(), dir, conn, dir);
    CHECK_EQ(system(cmd), 0);
    for (int i = 0; i < 300 && access(ready, F_OK) != 0; i++)
        usleep(100000);
    if (!CHECK_EQ(access(ready, F_OK), 0)) {
        snprintf(cmd, sizeof cmd, "cat %s/proxy.log >&2", dir);
        CHECK_EQ(system(cmd), 0);
        return;
    }
    fx_t f;
    korch_kernel_opts_t o = {.existing = conn};
    if (fx_start(&f, &o)) {
        korch_exec_t *ex = fx_run(&f, "for i in range(3):\n    print('line', i, flush=True)\nattached = True", 0);
        CHECK_EQ(korch_exec_result(ex)->status, KORCH_EXEC_OK);
        CHECK_STREQ(fx_stream(ex, "stdout"), "line 0\nline 1\nline 2\n");
        korch_exec_destroy(&ex);
        ex = fx_run(&f, "print(attached)", 0);
        CHECK_STREQ(fx_stream(ex, "stdout"), "True\n");
        korch_exec_destroy(&ex);
        const korch_session_stats_t *st = korch_kernel_stats(f.k);
        fprintf(stderr, "  received %llu, duplicate %llu, bad signature %llu\n", (unsigned long long)st->received,
                (unsigned long long)st->rejected[KORCH_REJ_DUPLICATE],
                (unsigned long long)st->rejected[KORCH_REJ_BAD_SIGNATURE]);
        CHECK_GT(st->rejected[KORCH_REJ_DUPLICATE], 0);
        CHECK_GT(st->rejected[KORCH_REJ_BAD_SIGNATURE], 0);
        /* an attached kernel cannot be restarted by korch */
        korch_err_t err = {0};
        CHECK_EQ(korch_kernel_restart(f.k, &err), KORCH_E_STATE);
        /* the owner shuts it down: korch notices through the heartbeat */
        snprintf(cmd, sizeof cmd, "touch %s/stop", dir);
        CHECK_EQ(system(cmd), 0);
        ex = korch_kernel_execute_wait(f.k, "import time; time.sleep(30)", NULL, NULL, &err);
        if (ex) {
            CHECK_EQ(korch_exec_result(ex)->status, KORCH_EXEC_DIED);
            CHECK_CONTAINS(korch_exec_result(ex)->detail, "heartbeat");
        }
        korch_exec_destroy(&ex);
        fx_stop(&f);
    }
    snprintf(cmd, sizeof cmd, "touch %s/stop; sleep 0.5; rm -rf %s", dir, dir);
    CHECK_EQ(system(cmd), 0);
}

/* interrupt_mode "message": korch sends interrupt_request on control. */
TEST_BOTH(kernel_interrupt_by_message)
{
    char dir[] = "/tmp/korch-spec-XXXXXX";
    if (!CHECK(mkdtemp(dir)))
        return;
    fx_write_kernelspec(dir, "pymsg",
                        "{\"argv\": [\"/usr/bin/python3\", \"-m\", \"ipykernel_launcher\", \"-f\", "
                        "\"{connection_file}\"], \"display_name\": \"py msg\", \"language\": \"python\", "
                        "\"interrupt_mode\": \"message\"}");
    setenv("KORCH_KERNELSPEC_PATH", dir, 1);
    fx_t f;
    if (fx_start(&f, &(korch_kernel_opts_t){.kernelspec = "pymsg"})) {
        korch_exec_destroy((korch_exec_t *[]){fx_run(&f, "kept = 'by message'", 0)});
        korch_exec_t *ex = fx_run(&f, "import time\nwhile True:\n    time.sleep(0.05)", 1000);
        CHECK_EQ(korch_exec_result(ex)->status, KORCH_EXEC_TIMEOUT);
        CHECK(!korch_exec_result(ex)->restarted);
        json_t *outs = korch_exec_result(ex)->outputs;
        CHECK_STREQ(json_string_value(json_object_get(json_array_get(outs, json_array_size(outs) - 1), "ename")),
                    "KeyboardInterrupt");
        korch_exec_destroy(&ex);
        ex = fx_run(&f, "print(kept)", 0);
        CHECK_STREQ(fx_stream(ex, "stdout"), "by message\n");
        korch_exec_destroy(&ex);
        fx_stop(&f);
    }
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK_EQ(system(cmd), 0);
}

/* One loop outlives many kernels: start, use, destroy, three times over. */
TEST(kernel_loop_reused_after_destroy)
{
    korch_loop_t *loop = korch_loop_new();
    for (int i = 0; i < 3; i++) {
        korch_err_t err = {0};
        korch_kernel_t *k = korch_kernel_new(loop, NULL, &err);
        if (!CHECK(k) || !CHECK_EQ(korch_kernel_wait_ready(k, &err), KORCH_OK)) {
            fprintf(stderr, "  round %d: %s\n", i, err.msg);
            korch_kernel_destroy(&k);
            break;
        }
        korch_exec_t *ex = korch_kernel_execute_wait(k, "print(6 * 7)", NULL, NULL, &err);
        CHECK(ex && korch_exec_result(ex)->status == KORCH_EXEC_OK);
        korch_exec_destroy(&ex);
        korch_kernel_destroy(&k);
    }
    korch_loop_destroy(&loop);
}

/* A few MB of unicode in one print arrive whole (the bounded parser's fast
   path must not change a byte). */
TEST_BOTH(kernel_large_unicode_output_is_exact)
{
    fx_t f;
    if (!fx_start(&f, NULL))
        return;
    korch_exec_t *ex = fx_run(&f, "print('h\\u00e9llo w\\u00f6rld \\u2603 \"q\" \\\\ \\t' * 100000)", 0);
    const char *out = fx_stream(ex, "stdout");
    /* 'héllo wörld ☃ "q" \ <tab>' is 25 bytes; 100000 of them and a newline */
    if (CHECK_EQ(strlen(out), 25u * 100000 + 1)) {
        CHECK(strncmp(out, "h\xc3\xa9llo w\xc3\xb6rld \xe2\x98\x83 \"q\" \\ \t", 25) == 0);
        CHECK(strncmp(out + 25u * 99999, "h\xc3\xa9llo", 6) == 0);
    }
    CHECK_EQ(korch_exec_result(ex)->dropped_bytes, 0);
    korch_exec_destroy(&ex);
    fx_stop(&f);
}

/* Local kernels use ipc by default; tcp on 127.0.0.1 is there on request. */
TEST(kernel_tcp_transport)
{
    fx_t f;
    if (!fx_start(&f, &(korch_kernel_opts_t){.transport = "tcp"}))
        return;
    CHECK_STREQ(korch_kernel_conn(f.k)->transport, "tcp");
    CHECK_STREQ(korch_kernel_conn(f.k)->ip, "127.0.0.1");
    korch_exec_t *ex = fx_run(&f, "print(sum(range(10)))", 0);
    CHECK_STREQ(fx_stream(ex, "stdout"), "45\n");
    korch_exec_destroy(&ex);
    fx_stop(&f);
}
