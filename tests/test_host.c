/*  The host stays the host (issue 22 items 1-3), with real sandbox kernels
 *  as the attackers: the seccomp filter as the kernel feels it, and a normal
 *  analysis still working under it.
 */
#include "kernel_fixture.h"
#include "korch/sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static korch_launcher_t *s_sandbox(const korch_sandbox_opts_t *o)
{
    korch_err_t err = {0};
    korch_launcher_t *l = korch_launcher_sandbox_new(fx_loop(), o, &err);
    if (!CHECK(l))
        fprintf(stderr, "  %s\n", err.msg);
    return l;
}

/* Run code, its stdout (the test fails on an error). */
static const char *s_out(fx_t *f, const char *code)
{
    korch_exec_t *ex = fx_run(f, code, 120000);
    if (!CHECK_EQ(korch_exec_result(ex)->status, KORCH_EXEC_OK))
        fprintf(stderr, "  detail: %s\n  outputs: %s\n", korch_exec_result(ex)->detail,
                json_dumps(korch_exec_result(ex)->outputs, JSON_COMPACT));
    const char *out = fx_stream(ex, "stdout");
    korch_exec_destroy(&ex);
    return out;
}

/* The calls the filter refuses, tried by the kernel itself (ctypes, the raw
   syscall numbers of x86_64), each printing its errno name. */
static const char s_probe_code[] =
    "import ctypes, errno, os, socket\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "def sc(name, nr, *args):\n"
    "    r = libc.syscall(nr, *args)\n"
    "    e = ctypes.get_errno()\n"
    "    print(name, 'ok' if r >= 0 else errno.errorcode.get(e, e))\n"
    "print([l for l in open('/proc/self/status') if l.startswith('Seccomp:')][0].split()[1], 'seccomp')\n"
    "params = ctypes.create_string_buffer(120)\n"
    "sc('io_uring_setup', 425, 8, params)\n"
    "sc('userfaultfd', 323, 0)\n"
    "sc('bpf', 321, 0, 0, 0)\n"
    "sc('perf_event_open', 298, 0, 0, -1, -1, 0)\n"
    "sc('keyctl', 250, 0, 0, 0, 0, 0)\n"
    "sc('unshare_ns', 272, 0x00020000)\n"
    "sc('clone_newnet', 56, 0x40000000 | 17, 0, 0, 0, 0)\n"
    "sc('personality_norandom', 135, 0x0040000)\n"
    "sc('ptrace', 101, 16, 1, 0, 0)\n"
    "sc('mount', 165, b'none', b'/tmp', b'tmpfs', 0, 0)\n"
    "for fam, name in ((40, 'vsock'), (17, 'packet'), (16, 'netlink_route')):\n"
    "    try:\n"
    "        s = socket.socket(fam, socket.SOCK_DGRAM if fam != 17 else socket.SOCK_RAW, 0); s.close(); print(name, 'ok')\n"
    "    except OSError as e:\n"
    "        print(name, errno.errorcode.get(e.errno, e.errno))\n"
    "for fam, name in ((socket.AF_UNIX, 'unix'), (socket.AF_INET, 'inet'), (socket.AF_INET6, 'inet6')):\n"
    "    socket.socket(fam, socket.SOCK_STREAM).close(); print(name, 'ok')\n";

/* Seccomp: 2 inside, io_uring and friends refused, AF_VSOCK refused, the
   families ipykernel uses kept; pandas and a matplotlib PNG still work. */
TEST_T(host_sandbox_seccomp_refuses_and_analysis_works, 120)
{
    korch_launcher_t *l = s_sandbox(NULL);
    fx_t f;
    if (!l || !fx_start(&f, &(korch_kernel_opts_t){.launcher = l})) {
        korch_launcher_destroy(&l);
        return;
    }
    const char *out = s_out(&f, s_probe_code);
    CHECK_CONTAINS(out, "2 seccomp\n");
    CHECK_CONTAINS(out, "io_uring_setup EPERM\n");
    CHECK_CONTAINS(out, "userfaultfd EPERM\n");
    CHECK_CONTAINS(out, "bpf EPERM\n");
    CHECK_CONTAINS(out, "perf_event_open EPERM\n");
    CHECK_CONTAINS(out, "keyctl EPERM\n");
    CHECK_CONTAINS(out, "unshare_ns EPERM\n");
    CHECK_CONTAINS(out, "clone_newnet EPERM\n");
    CHECK_CONTAINS(out, "personality_norandom EPERM\n");
    CHECK_CONTAINS(out, "ptrace EPERM\n");
    CHECK_CONTAINS(out, "mount EPERM\n");
    CHECK_CONTAINS(out, "vsock EAFNOSUPPORT\n");
    CHECK_CONTAINS(out, "packet EAFNOSUPPORT\n");
    CHECK_CONTAINS(out, "netlink_route ok\n");
    CHECK_CONTAINS(out, "unix ok\ninet ok\ninet6 ok\n");
    /* a normal analysis */
    korch_exec_t *ex = fx_run(&f,
                              "import pandas as pd, matplotlib\n"
                              "matplotlib.use('module://matplotlib_inline.backend_inline')\n"
                              "import matplotlib.pyplot as plt\n"
                              "df = pd.DataFrame({'region': ['n', 's', 'n'], 'rev': [3, 4, 5]})\n"
                              "t = df.groupby('region').rev.sum()\n"
                              "print(t.to_dict())\n"
                              "t.plot.bar(); plt.show()\n",
                              120000);
    CHECK_EQ(korch_exec_result(ex)->status, KORCH_EXEC_OK);
    CHECK_CONTAINS(fx_stream(ex, "stdout"), "{'n': 8, 's': 4}");
    char *outs = json_dumps(korch_exec_result(ex)->outputs, JSON_COMPACT);
    CHECK_CONTAINS(outs, "\"image/png\":\"iVBORw0KGgo");
    free(outs);
    korch_exec_destroy(&ex);
    fx_stop(&f);
    korch_launcher_destroy(&l);
}
