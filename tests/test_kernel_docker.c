/*  The kernel client over the docker launcher: real containers, real dockerd. */
#include "kernel_fixture.h"
#include "korch/docker.h"
#include "korch/media.h"

static korch_launcher_t *s_docker(int64_t memory)
{
    korch_docker_opts_t o;
    korch_docker_opts_init(&o);
    if (memory)
        o.memory = memory;
    korch_err_t err = {0};
    korch_launcher_t *l = korch_launcher_docker_new(fx_loop(), &o, &err);
    if (!CHECK(l))
        fprintf(stderr, "  %s\n", err.msg);
    return l;
}

TEST(docker_kernel_state_outputs_and_isolation)
{
    korch_launcher_t *l = s_docker(0);
    fx_t f;
    if (!fx_start_on(&f, &l))
        return;
    CHECK_STREQ(korch_kernel_conn(f.k)->transport, "ipc");
    korch_exec_destroy((korch_exec_t *[]){fx_run(&f, "x = 41", 0)});
    korch_exec_t *ex = fx_run(&f, "x += 1; print(x)", 0);
    CHECK_STREQ(fx_stream(ex, "stdout"), "42\n");
    korch_exec_destroy(&ex);
    ex = fx_run(&f, "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2]); plt.show()", 60000);
    json_t *png = json_object_get(json_object_get(json_array_get(korch_exec_result(ex)->outputs, 0), "data"),
                                  "image/png");
    size_t len = 0;
    unsigned char *bytes = png ? korch_b64_decode(json_string_value(png), json_string_length(png), &len) : NULL;
    CHECK(bytes && len > 1000 && memcmp(bytes, "\x89PNG", 4) == 0);
    free(bytes);
    korch_exec_destroy(&ex);
    /* isolation, seen from inside */
    ex = fx_run(&f,
                "import os, socket\n"
                "print('uid', os.getuid() >= 2000000000)\n"
                "try:\n    open('/etc/korch-test', 'w')\nexcept OSError as e:\n    print('rootfs', type(e).__name__)\n"
                "try:\n    socket.create_connection(('127.0.0.1', 22), timeout=2)\nexcept OSError as e:\n"
                "    print('net', type(e).__name__)\n",
                30000);
    const char *out = fx_stream(ex, "stdout");
    CHECK_CONTAINS(out, "uid True\n"); /* one no account has (src/launcher/kuid.h) */
    CHECK_CONTAINS(out, "rootfs OSError\n");
    CHECK_CONTAINS(out, "net ");
    korch_exec_destroy(&ex);
    fx_stop(&f);
    korch_launcher_destroy(&l);
}

TEST(docker_kernel_timeout_interrupts_and_keeps_state)
{
    korch_launcher_t *l = s_docker(0);
    fx_t f;
    if (!fx_start_on(&f, &l))
        return;
    korch_exec_destroy((korch_exec_t *[]){fx_run(&f, "kept = 'yes'", 0)});
    korch_exec_t *ex = fx_run(&f, "while True:\n    pass", 1000);
    CHECK_EQ(korch_exec_result(ex)->status, KORCH_EXEC_TIMEOUT);
    CHECK(korch_exec_result(ex)->interrupted);
    CHECK(!korch_exec_result(ex)->restarted);
    korch_exec_destroy(&ex);
    ex = fx_run(&f, "print(kept)", 0);
    CHECK_STREQ(fx_stream(ex, "stdout"), "yes\n");
    korch_exec_destroy(&ex);
    fx_stop(&f);
    korch_launcher_destroy(&l);
}

TEST_T(docker_kernel_oom_is_reported_and_next_kernel_works, 120)
{
    korch_launcher_t *l = s_docker(160 << 20);
    fx_t f;
    if (!fx_start_on(&f, &l))
        return;
    fx_oom_then_fresh(&f, "160 MiB"); /* auto-restart gives a fresh container */
    fx_stop(&f);
    korch_launcher_destroy(&l);
}
