/*  The host stays the host (issue 22 items 1-3), with real sandbox kernels
 *  as the attackers: the seccomp filter as the kernel feels it (and a
 *  normal analysis still working under it); the work dir, runtime dir,
 *  /tmp and fd 2 filled, each stopping at its bound.
 */
#include "kernel_fixture.h"
#include "korch/instance.h"
#include "korch/sandbox.h"

#include <errno.h>
#include <signal.h>
#include <sys/wait.h>
#include <dirent.h>
#include <grp.h>
#include <pwd.h>
#include "korch/fsutil.h"
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

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
    korch_launcher_t *l = fx_sandbox_new(NULL);
    fx_t f;
    if (!fx_start_on(&f, &l))
        return;
    const char *out = fx_out(&f, s_probe_code, 120000);
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

/* Fill one place from inside, 256 KiB at a time, until it refuses: print
   the errno name and the MiB written. */
#define S_FILL(path)                                                                                           \
    "def fill(path):\n"                                                                                       \
    "    n = 0\n"                                                                                             \
    "    try:\n"                                                                                              \
    "        with open(path, 'wb') as f:\n"                                                                   \
    "            while n < (64 << 20):\n"                                                                      \
    "                f.write(b'x' * 262144); f.flush(); n += 262144\n"                                        \
    "    except OSError as e:\n"                                                                              \
    "        return '%s %d' % (errno.errorcode.get(e.errno, e.errno), n >> 20)\n"                             \
    "    return 'unbounded %d' % (n >> 20)\n"                                                                 \
    "print(fill(" path "))\n"

/* The runtime dir as the host sees it: a tmpfs of at most max bytes. */
static void s_host_bounded(const char *dir, int64_t max)
{
    struct statfs sf;
    if (!CHECK_EQ(statfs(dir, &sf), 0))
        return;
    CHECK_EQ((long long)sf.f_type, (long long)TMPFS_MAGIC);
    CHECK_LE((long long)sf.f_blocks * sf.f_bsize, (long long)max);
}

/* The kernel fills its work dir, its runtime dir, /tmp and fd 2: each
   stops at its bound with ENOSPC (the log is capped in korch's memory),
   the host sees a tmpfs of the bound and nothing else grows; a restart
   keeps the work dir's files; the dir is gone after the kernel. */
TEST_T(host_sandbox_fills_stop_at_their_bounds, 180)
{
    korch_sandbox_opts_t o;
    korch_sandbox_opts_init(&o);
    o.runtime_size = 1 << 20;
    o.workdir_size = 24 << 20;
    o.tmp_size = 8 << 20;
    korch_launcher_t *l = fx_sandbox_new(&o);
    fx_t f;
    if (!fx_start_on(&f, &l))
        return;
    korch_proc_t *p = korch_kernel_proc(f.k);
    char rt[PATH_MAX];
    snprintf(rt, sizeof rt, "%s", korch_proc_runtime_dir(p));
    s_host_bounded(rt, 25 << 20);
    const char *out = fx_out(&f, "import errno, os\n" S_FILL("'big.bin'"), 120000);
    fprintf(stderr, "  work dir: %s", out);
    CHECK_CONTAINS(out, "ENOSPC");
    CHECK(atoi(strchr(out, ' ') + 1) <= 25);
    CHECK(atoi(strchr(out, ' ') + 1) >= 20);
    out = fx_out(&f, "import errno, os\nos.remove('big.bin')\n" S_FILL("'/run/korch/big.bin'"), 120000);
    fprintf(stderr, "  runtime dir: %s", out);
    CHECK_CONTAINS(out, "ENOSPC");
    CHECK(atoi(strchr(out, ' ') + 1) <= 25);
    out = fx_out(&f, "import errno, os\nos.remove('/run/korch/big.bin')\n" S_FILL("'/tmp/big.bin'") "os.remove('/tmp/big.bin')\n", 120000);
    fprintf(stderr, "  /tmp: %s", out);
    CHECK_CONTAINS(out, "ENOSPC");
    CHECK(atoi(strchr(out, ' ') + 1) <= 8);
    /* 64 MiB to fd 2, then a marker: korch keeps the tail, no file grows */
    /* fd 2 as the process got it (ipykernel moves its own pipe onto fd 2 and
       keeps the original aside) */
    out = fx_out(&f, "import os, sys\nb = b'e' * 1048576\n"
                    "fd = getattr(sys.stderr, '_original_stdstream_copy', None) or 2\n"
                    "for _ in range(64): os.write(fd, b)\n"
                    "os.write(fd, b'\\nlast-words\\n'); open('keep.txt', 'w').write('kept'); print('wrote')\n", 120000);
    if (!CHECK_CONTAINS(out, "wrote"))
        fprintf(stderr, "  tail: %.300s\n", korch_proc_log_tail(p));
    const char *tail = korch_proc_log_tail(p);
    CHECK_CONTAINS(tail, "last-words");
    CHECK_LE((long long)strlen(tail), 4096);
    s_host_bounded(rt, 25 << 20);
    char log[PATH_MAX + 16];
    snprintf(log, sizeof log, "%s/kernel.log", rt);
    CHECK(access(log, F_OK) != 0);
    /* a restart keeps the work dir (the tmpfs lives as long as the kernel) */
    korch_err_t err = {0};
    CHECK_EQ(korch_kernel_restart(f.k, &err), KORCH_OK);
    CHECK_EQ(korch_kernel_wait_ready(f.k, &err), KORCH_OK);
    CHECK_CONTAINS(fx_out(&f, "print(open('keep.txt').read())", 120000), "kept");
    fx_stop(&f);
    korch_launcher_destroy(&l);
    CHECK(access(rt, F_OK) != 0);
}

/* A tree `depth` levels deep (a file in each) below the cwd and below
   /run/korch, made by the kernel through dir fds (no path is that long). */
#define S_DEEP(depth)                                                                                          \
    "import os\n"                                                                                             \
    "def deep(top, n):\n"                                                                                     \
    "    fd = os.open(top, os.O_RDONLY)\n"                                                                    \
    "    for i in range(n):\n"                                                                                \
    "        os.mkdir('d', dir_fd=fd); nfd = os.open('d', os.O_RDONLY, dir_fd=fd); os.close(fd); fd = nfd\n" \
    "        if i % 50 == 0: os.close(os.open('f', os.O_WRONLY | os.O_CREAT, dir_fd=fd))\n"                  \
    "    os.close(fd)\n"                                                                                      \
    "deep('.', " #depth "); deep('/run/korch', " #depth "); print('deep', " #depth ")\n"

/* The runtime dirs of this test's runtime base that korch's tmpfs covers
   for instances named prefix* (/proc/self/mountinfo), the first one in
   dir; how many. */
static int s_mounts_of(const char *prefix, char *dir, size_t len)
{
    char src[128], line[4096], base[PATH_MAX];
    if (!CHECK_EQ(korch_runtime_base(base, sizeof base, NULL), KORCH_OK))
        return -1;
    snprintf(src, sizeof src, " korch-sandbox:%s", prefix);
    int n = 0;
    FILE *fp = fopen("/proc/self/mountinfo", "r");
    while (fp && fgets(line, sizeof line, fp)) {
        if (!strstr(line, src))
            continue;
        char *f = line;
        for (int i = 0; i < 4 && f; i++)
            f = strchr(f, ' ') ? strchr(f, ' ') + 1 : NULL;
        if (!f || strncmp(f, base, strlen(base)) != 0 || f[strlen(base)] != '/')
            continue;
        if (n++ == 0 && dir)
            snprintf(dir, len, "%.*s", (int)strcspn(f, " "), f);
    }
    if (fp)
        fclose(fp);
    return n;
}

/* A kernel leaves deep trees in its work and runtime dirs: gone after the
   kernel ends, with the runtime dir's tmpfs (5000 levels) and without it
   (1000 levels, korch_fs_rm_tree on the host's disk). */
TEST_T(host_sandbox_deep_trees_gone_after_the_kernel, 180)
{
    for (int bounded = 1; bounded >= 0; bounded--) {
        korch_sandbox_opts_t o;
        korch_sandbox_opts_init(&o);
        o.instance = "host-deep";
        if (!bounded)
            o.runtime_size = 0;
        korch_launcher_t *l = fx_sandbox_new(&o);
        fx_t f;
        if (!fx_start_on(&f, &l))
            return;
        char rt[PATH_MAX];
        snprintf(rt, sizeof rt, "%s", korch_proc_runtime_dir(korch_kernel_proc(f.k)));
        CHECK_EQ(s_mounts_of("host-deep", NULL, 0), bounded);
        /* on the disk (no tmpfs) korch_fs_rm_tree walks it all: 1000 levels
           here, 5000 in test_fsrm.c */
        CHECK_CONTAINS(fx_out(&f, bounded ? S_DEEP(5000) : S_DEEP(1000), 120000), bounded ? "deep 5000" : "deep 1000");
        fx_stop(&f);
        korch_launcher_destroy(&l);
        CHECK(access(rt, F_OK) != 0);
        CHECK_EQ(s_mounts_of("host-deep", NULL, 0), 0);
    }
}

/* kill -9 of korch while its kernel holds 300-level trees: the tmpfs and
   the trees stay until the next korch's start-up sweep, which removes
   them (and only the dead instance's). */
TEST_T(host_sandbox_sweep_removes_a_dead_korchs_deep_trees, 180)
{
    /* korch exec names its instance k-XXXXXXXX */
    const char *argv[] = {korch_test_korch_bin(), "exec", "--launcher", "sandbox", "-c",
                          S_DEEP(300) "import sys, time; sys.stdout.flush(); time.sleep(600)\n", NULL};
    char line[PATH_MAX], dir[PATH_MAX] = "";
    int fd = -1;
    int pid = korch_test_spawn_line(argv, line, sizeof line, 90, &fd);
    if (!CHECK_GT(pid, 0))
        return;
    CHECK_STREQ(line, "deep 300");
    CHECK_EQ(s_mounts_of("k-", dir, sizeof dir), 1);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    close(fd);
    struct stat st;
    CHECK_EQ(stat(dir, &st), 0); /* left behind ... */
    char *out = NULL, *err = NULL;
    const char *argv2[] = {korch_test_korch_bin(), "exec", "--launcher", "sandbox", "-c", "print('next')", NULL};
    CHECK_EQ(korch_test_run(argv2, NULL, &out, &err, 90), 0);
    CHECK_STREQ(out, "next\n");
    CHECK_CONTAINS(err, "removed 1 sandbox runtime dir(s) left by korch instances that are gone");
    CHECK_EQ(s_mounts_of("k-", NULL, 0), 0); /* ... until the next korch sweeps it */
    CHECK(stat(dir, &st) != 0);
    free(out);
    free(err);
}

/* ---------------------------------------------------------------- uids */

/* korch_test_attack_as's files in a sandbox kernel: 1 another user's
   data, 2 the key, 4 a planted file (and 8 a signal, 16 its environment). */
static const char *const s_attack_files[3] = {"/home/korch/work/confidential.csv", "/tmp/korch-kernel.json",
                                              "/home/korch/work/planted.txt"};

static uid_t s_uid_of(fx_t *f)
{
    return (uid_t)atol(fx_out(f, "import os; print(os.getuid())", 120000));
}

/* Kernels run as uids no account has, one each: a second local account
   (useradd) cannot read an upload or the HMAC key through /proc/PID/root,
   write into the kernel or signal it; neither can one kernel's uid reach
   the other kernel; what a kernel leaves in a host work dir is the asking
   user's afterwards (the owner of the dir it lies in), not the kernel's. */
TEST_T(host_uids_no_account_one_per_kernel_files_back_to_the_user, 180)
{
    char name[32], home[] = "/tmp/korch-t22-XXXXXX", work[PATH_MAX];
    snprintf(name, sizeof name, "korcht22%d", (int)getpid() % 100000);
    const char *add[] = {"useradd", "-M", "-N", "-s", "/usr/sbin/nologin", name, NULL};
    if (!CHECK_EQ(korch_test_run(add, NULL, NULL, NULL, 30), 0))
        return;
    struct passwd *pw = getpwnam(name);
    uid_t other = pw ? pw->pw_uid : 0;
    gid_t other_gid = pw ? pw->pw_gid : 0;
    korch_launcher_t *l = NULL;
    fx_t a = {0}, b = {0};
    if (!CHECK_GT((long long)other, 0) || !CHECK(mkdtemp(home)))
        goto out;
    /* the "session dir" is the second account's: the user who asked */
    CHECK_EQ(chown(home, other, other_gid), 0);
    snprintf(work, sizeof work, "%s/files", home);
    CHECK_EQ(mkdir(work, 0755), 0);
    CHECK_EQ(chown(work, other, other_gid), 0);
    korch_sandbox_opts_t o;
    korch_sandbox_opts_init(&o);
    l = fx_sandbox_new(NULL);
    if (!l || !fx_start(&a, &(korch_kernel_opts_t){.launcher = l}) || !fx_start(&b, &(korch_kernel_opts_t){.launcher = l}))
        goto out;
    uid_t ua = s_uid_of(&a), ub = s_uid_of(&b);
    fprintf(stderr, "  kernel uids %u and %u, the second account %u\n", (unsigned)ua, (unsigned)ub, (unsigned)other);
    CHECK(ua != ub);
    CHECK(ua >= 2000000000u && ub >= 2000000000u);
    CHECK(getpwuid(ua) == NULL && getpwuid(ub) == NULL);
    korch_err_t err = {0};
    CHECK_EQ(korch_proc_put_file_wait(korch_kernel_proc(a.k), "confidential.csv", "secret\n", 7, &err), KORCH_OK);
    pid_t ka = korch_test_pid_of_uid(ua, "ipykernel"), kb = korch_test_pid_of_uid(ub, "ipykernel");
    if (!CHECK_GT(ka, 0) || !CHECK_GT(kb, 0))
        goto out;
    CHECK_EQ(korch_test_attack_as(other, other_gid, ka, s_attack_files), 0); /* the second account: nothing works */
    CHECK_EQ(korch_test_attack_as(ub, ub, ka, s_attack_files), 0);           /* kernel b's uid against kernel a */
    CHECK_EQ(korch_test_attack_as(ua, ua, kb, s_attack_files) & 8, 0);       /* and a's against b: no signal */
    CHECK(korch_test_attack_as(ua, ua, ka, s_attack_files) & 8);            /* the probe is live: the kernel's own uid can signal it */
    fx_stop(&a);
    fx_stop(&b);
    korch_launcher_destroy(&l);
    /* a host work dir handed to a kernel comes back to its owner */
    o.workdir = work;
    o.workdir_give = true;
    l = fx_sandbox_new(&o);
    if (!l || !fx_start(&a, &(korch_kernel_opts_t){.launcher = l}))
        goto out;
    CHECK_CONTAINS(fx_out(&a, "import os\nos.makedirs('out', exist_ok=True)\nopen('out/result.txt', 'w').write('42')\n"
                             "print(os.stat('out/result.txt').st_uid == os.getuid())\n", 120000),
                   "True");
    fx_stop(&a);
    korch_launcher_destroy(&l); /* finishes the hand-back on its worker */
    char res[PATH_MAX + 32];
    struct stat st;
    snprintf(res, sizeof res, "%s/out/result.txt", work);
    if (CHECK_EQ(stat(res, &st), 0))
        CHECK_EQ((long long)st.st_uid, (long long)other);
    snprintf(res, sizeof res, "%s/out", work);
    if (CHECK_EQ(stat(res, &st), 0))
        CHECK_EQ((long long)st.st_uid, (long long)other);
out:
    fx_stop(&a);
    fx_stop(&b);
    korch_launcher_destroy(&l);
    korch_fs_rm_tree(home);
    const char *del[] = {"userdel", name, NULL};
    CHECK_EQ(korch_test_run(del, NULL, NULL, NULL, 30), 0);
}

/* Bytes a process has caused to be written to storage (/proc/PID/io's
   write_bytes: counted as its pages of a real filesystem are dirtied; a
   tmpfs has no storage behind it) and the bytes it passed to write()
   (wchar). -1 when unreadable. */
static long long s_io_field(pid_t pid, const char *field)
{
    char path[64], line[128];
    snprintf(path, sizeof path, "/proc/%d/io", (int)pid);
    FILE *fp = fopen(path, "r");
    long long v = -1;
    size_t n = strlen(field);
    while (fp && fgets(line, sizeof line, fp))
        if (strncmp(line, field, n) == 0 && line[n] == ':')
            v = atoll(line + n + 1);
    if (fp)
        fclose(fp);
    return v;
}

/* The same summed over every process of uid (the kernel's: bwrap, its
   pid 1 and the kernel process). */
static long long s_io_of_uid(uid_t uid, const char *field)
{
    long long sum = 0;
    DIR *d = opendir("/proc");
    struct dirent *de;
    while (d && (de = readdir(d))) {
        char path[300];
        struct stat st;
        pid_t pid = atoi(de->d_name);
        snprintf(path, sizeof path, "/proc/%s", de->d_name);
        long long v;
        if (pid > 0 && stat(path, &st) == 0 && st.st_uid == uid && (v = s_io_field(pid, field)) > 0)
            sum += v;
    }
    if (d)
        closedir(d);
    return sum;
}

/* The kernel as the attacker of the host's disk (issue 22, the write
   rate): it rewrites 32 MiB files in its work dir, /run/korch and /tmp,
   fsyncing each, GBs in all. Everything it can write is a tmpfs, so none
   of it reaches storage: the write_bytes of its uid's processes stay ~0
   while their wchar counts the GBs. The measure is checked first on this machine: 16 MiB the test
   itself writes to the real disk do show in its own write_bytes. */
TEST_T(host_sandbox_write_flood_reaches_no_disk, 180)
{
    char path[] = "/var/tmp/korch-t22-flood-XXXXXX";
    int fd = mkstemp(path);
    if (!CHECK_GE(fd, 0))
        return;
    long long w0 = s_io_field(getpid(), "write_bytes");
    char *buf = calloc(1, 1 << 20);
    for (int i = 0; buf && i < 16; i++)
        CHECK_EQ((long long)write(fd, buf, 1 << 20), (long long)(1 << 20));
    CHECK_EQ(fsync(fd), 0);
    long long w1 = s_io_field(getpid(), "write_bytes");
    free(buf);
    close(fd);
    unlink(path);
    fprintf(stderr, "  control: the test's own 16 MiB to disk: write_bytes +%lld KiB\n", (w1 - w0) >> 10);
    if (!CHECK_GE(w1 - w0, 16LL << 20)) /* no task I/O accounting here: the measure would prove nothing */
        return;

    korch_sandbox_opts_t o;
    korch_sandbox_opts_init(&o);
    o.workdir_size = 64 << 20;
    o.tmp_size = 64 << 20;
    o.runtime_size = 64 << 20;
    korch_launcher_t *l = fx_sandbox_new(&o);
    fx_t f;
    if (!fx_start_on(&f, &l))
        return;
    uid_t ku = s_uid_of(&f);
    CHECK_GT((long long)korch_test_pid_of_uid(ku, "ipykernel"), 0LL);
    long long b0 = s_io_of_uid(ku, "write_bytes"), c0 = s_io_of_uid(ku, "wchar");
    const char *out = fx_out(&f, "import os, time\n"
                                "b = os.urandom(1 << 20) * 32\n"
                                "n, t0 = 0, time.time()\n"
                                "while n < (3 << 30) and time.time() - t0 < 60:\n"
                                "    for p in ('flood.bin', '/run/korch/flood.bin', '/tmp/flood.bin'):\n"
                                "        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)\n"
                                "        os.write(fd, b); os.fsync(fd); os.close(fd); n += len(b)\n"
                                "print('flooded', n >> 20, 'MiB in', round(time.time() - t0, 1), 's')\n",
                          120000);
    long long b1 = s_io_of_uid(ku, "write_bytes"), c1 = s_io_of_uid(ku, "wchar");
    fprintf(stderr, "  kernel: %s  wchar +%lld MiB, write_bytes +%lld KiB\n", out, (c1 - c0) >> 20, (b1 - b0) >> 10);
    CHECK_CONTAINS(out, "flooded");
    CHECK_GE(c1 - c0, 1LL << 30);       /* GBs went through write() */
    CHECK_LE(b1 - b0, 256LL << 10);     /* and none of it to storage */
    fx_stop(&f);
    korch_launcher_destroy(&l);
}
