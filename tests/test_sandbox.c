/*  The sandbox launcher (bubblewrap + a cgroup per kernel) with real
 *  ipykernel: its limits as the host sees them and as the kernel feels
 *  them, OOM named, work-dir files without following the kernel's links,
 *  no orphans after kill -9 of korch, the reasons it gives when it cannot
 *  work, and the choices of --launcher auto. (The isolation probes are in
 *  test_isolation.c, the kernel suite runs as sandbox:NAME.)
 */
#include "kernel_fixture.h"
#include "korch/cgroup.h"
#include "korch/instance.h"
#include "korch/sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* The cgroup scope of a runtime base (NULL: this process's), "" when it
   cannot be resolved. */
static void s_scope(const char *base, char *buf, size_t len)
{
    char mine[PATH_MAX];
    buf[0] = 0;
    if (!base && korch_runtime_base(mine, sizeof mine, NULL) == KORCH_OK)
        base = mine;
    if (!base || !CHECK_EQ(korch_cgroup_scope(base, buf, len, NULL), KORCH_OK))
        buf[0] = 0;
}

/* The v1 directory of controller ctrl the sandbox uses for instance of
   scope (NULL: this process's runtime base; "": the layout before scopes):
   below the cgroup this process is in, as korch computes it. */
static void s_cg_dir_in(const char *ctrl, const char *scope, const char *instance, char *buf, size_t len)
{
    char sc[32];
    if (!scope) {
        s_scope(NULL, sc, sizeof sc);
        scope = sc;
    }
    char line[512], own[400] = "";
    FILE *fp = fopen("/proc/self/cgroup", "r");
    while (fp && fgets(line, sizeof line, fp)) {
        line[strcspn(line, "\n")] = 0;
        char *c = strchr(line, ':'), *p = c ? strchr(c + 1, ':') : NULL;
        if (p && (size_t)(p - c - 1) == strlen(ctrl) && strncmp(c + 1, ctrl, strlen(ctrl)) == 0)
            snprintf(own, sizeof own, "%s", strcmp(p + 1, "/") == 0 ? "" : p + 1);
    }
    if (fp)
        fclose(fp);
    snprintf(buf, len, "/sys/fs/cgroup/%s%s/korch/%s%s%s", ctrl, own, scope, scope[0] ? "/" : "", instance);
}

static void s_cg_dir(const char *ctrl, const char *instance, char *buf, size_t len)
{
    s_cg_dir_in(ctrl, NULL, instance, buf, len);
}

/* The first line of a file in the (one) kernel cgroup under dir, or "". */
static void s_cg_read(const char *dir, const char *file, char *buf, size_t len)
{
    char cmd[700];
    snprintf(cmd, sizeof cmd, "cat %s/*/%s 2>/dev/null | head -1", dir, file);
    buf[0] = 0;
    FILE *p = popen(cmd, "r");
    if (p && fgets(buf, (int)len, p))
        buf[strcspn(buf, "\n")] = 0;
    if (p)
        pclose(p);
}

/* The host sees the limits on the kernel's cgroup (v1 here) and the kernel
   in it; the kernel feels the CPU quota; the cgroup is gone after. */
TEST_T(sandbox_cgroup_limits_seen_from_host_and_kernel, 120)
{
    char why[200];
    CHECK_EQ(korch_cgroup_available(why, sizeof why), 1); /* what this machine has; docs/security.md says so */
    korch_sandbox_opts_t o;
    korch_sandbox_opts_init(&o);
    o.instance = "sbx-limits";
    o.memory = 300LL << 20;
    o.nano_cpus = 500000000LL;
    o.pids_limit = 100;
    korch_launcher_t *l = fx_sandbox_new(&o);
    fx_t f;
    if (!fx_start_on(&f, &l))
        return;
    char mem[PATH_MAX], pids[PATH_MAX], cpu[PATH_MAX], v[256];
    s_cg_dir("memory", "sbx-limits", mem, sizeof mem);
    s_cg_dir("pids", "sbx-limits", pids, sizeof pids);
    s_cg_dir("cpu", "sbx-limits", cpu, sizeof cpu);
    s_cg_read(mem, "memory.limit_in_bytes", v, sizeof v);
    CHECK_STREQ(v, "314572800");
    s_cg_read(mem, "memory.memsw.limit_in_bytes", v, sizeof v);
    CHECK_STREQ(v, "314572800");
    s_cg_read(pids, "pids.max", v, sizeof v);
    CHECK_STREQ(v, "100");
    s_cg_read(cpu, "cpu.cfs_quota_us", v, sizeof v);
    CHECK_STREQ(v, "50000");
    s_cg_read(pids, "pids.current", v, sizeof v);
    CHECK_GT(atoi(v), 2); /* bwrap, its pid 1, the kernel and its threads */
    /* Half a CPU: 1.5 s of spinning gets about 0.75 s of CPU. */
    const char *out = fx_out(&f,
                            "import time\n"
                            "t0, c0 = time.monotonic(), time.process_time()\n"
                            "while time.monotonic() - t0 < 1.5: pass\n"
                            "print('ratio %.2f' % ((time.process_time() - c0) / (time.monotonic() - t0)))\n", 60000);
    double ratio = strstr(out, "ratio ") ? strtod(strstr(out, "ratio ") + 6, NULL) : 1;
    printf("  cpu used with --cpus 0.5: %.2f of the wall time\n", ratio);
    CHECK(ratio < 0.65); /* a busy machine gives less, never more */
    CHECK(ratio > 0.05);
    fx_stop(&f);
    korch_launcher_destroy(&l);
    struct stat st;
    CHECK(stat(pids, &st) != 0); /* the instance's cgroup went with its last kernel */
}

TEST_T(sandbox_oom_is_reported_and_next_kernel_works, 120)
{
    korch_sandbox_opts_t o;
    korch_sandbox_opts_init(&o);
    o.memory = 160LL << 20;
    korch_launcher_t *l = fx_sandbox_new(&o);
    fx_t f;
    if (!fx_start_on(&f, &l))
        return;
    fx_oom_then_fresh(&f, "160 MiB");
    fx_stop(&f);
    korch_launcher_destroy(&l);
}

/* put_file / get_file in the kernel's work dir, which the kernel can
   write: korch (root) follows none of the links it plants. */
TEST_T(sandbox_work_dir_files_and_planted_links, 90)
{
    korch_launcher_t *l = fx_sandbox_new(NULL);
    fx_t f;
    if (!fx_start_on(&f, &l))
        return;
    korch_proc_t *p = korch_kernel_proc(f.k);
    korch_err_t err = {0};
    CHECK_EQ(korch_proc_put_file_wait(p, "in/data.csv", "a,b\n1,2\n", 8, &err), KORCH_OK);
    const char *out = fx_out(&f,
                            "import os\n"
                            "u = os.getuid()\n"
                            "print(open('in/data.csv').read().splitlines()[1], os.stat('in/data.csv').st_uid == u,\n"
                            "      os.stat('in').st_uid == u, u >= 2000000000, os.access('in/data.csv', os.W_OK))\n"
                            "os.makedirs('out', exist_ok=True)\n"
                            "open('out/result.txt', 'w').write('forty-two')\n"
                            "os.symlink('/etc/shadow', 'shadow-link')\n"
                            "os.symlink('/etc', 'etc-dir')\n"
                            "os.mkfifo('fifo')\n"
                            "print('planted')\n", 60000);
    CHECK_CONTAINS(out, "1,2 True True True True\n"); /* given to the kernel's own uid (kuid.h) */
    CHECK_CONTAINS(out, "planted\n");
    char *data = NULL;
    size_t len = 0;
    err = (korch_err_t){0};
    CHECK_EQ(korch_proc_get_file_wait(p, "out/result.txt", 1000, &data, &len, &err), KORCH_OK);
    CHECK_STREQ(data, "forty-two");
    free(data);
    err = (korch_err_t){0};
    CHECK_EQ(korch_proc_get_file_wait(p, "shadow-link", 1000, &data, &len, &err), KORCH_E_INVALID);
    CHECK_CONTAINS(err.msg, "'shadow-link' in the kernel's work dir is a link: refusing to follow it");
    err = (korch_err_t){0};
    CHECK_EQ(korch_proc_get_file_wait(p, "etc-dir/passwd", 100000, &data, &len, &err), KORCH_E_INVALID);
    CHECK_CONTAINS(err.msg, "refusing to follow it");
    err = (korch_err_t){0};
    CHECK_EQ(korch_proc_put_file_wait(p, "etc-dir/korch-probe", "x", 1, &err), KORCH_E_INVALID);
    CHECK(access("/etc/korch-probe", F_OK) != 0);
    err = (korch_err_t){0};
    CHECK_EQ(korch_proc_put_file_wait(p, "shadow-link", "x", 1, &err), KORCH_E_INVALID);
    err = (korch_err_t){0};
    CHECK_EQ(korch_proc_get_file_wait(p, "fifo", 100, &data, &len, &err), KORCH_E_INVALID); /* and does not hang */
    CHECK_CONTAINS(err.msg, "not a plain file");
    /* The work dir is also {runtime dir}/work, which the kernel can rename
       and replace with a link: korch keeps using the dir it opened. */
    out = fx_out(&f,
                "os.rename('/run/korch/work', '/run/korch/work-moved'); os.symlink('/etc', '/run/korch/work')\n"
                "print('swapped', os.path.islink('/run/korch/work'))\n", 60000);
    CHECK_CONTAINS(out, "swapped True\n");
    err = (korch_err_t){0};
    CHECK_EQ(korch_proc_put_file_wait(p, "korch-probe-etc", "x", 1, &err), KORCH_OK);
    CHECK(access("/etc/korch-probe-etc", F_OK) != 0);
    CHECK_CONTAINS(fx_out(&f, "print(open('korch-probe-etc').read(), os.path.exists('/run/korch/work-moved/korch-probe-etc'))", 60000),
                   "x True\n");
    err = (korch_err_t){0};
    CHECK_EQ(korch_proc_get_file_wait(p, "out/result.txt", 3, &data, &len, &err), KORCH_E_TOOBIG);
    err = (korch_err_t){0};
    CHECK_EQ(korch_proc_get_file_wait(p, "out/none", 3, &data, &len, &err), KORCH_E_NOTFOUND);
    CHECK_STREQ(err.msg, "no file 'out/none' in the kernel's work dir");
    fx_stop(&f);
    korch_launcher_destroy(&l);
}

/* kill -9 of korch: bwrap --die-with-parent takes the sandbox down at
   once; the next korch sweeps the dead instance's cgroups. */
TEST_T(sandbox_no_orphans_after_kill_9, 120)
{
    const char *argv[] = {korch_test_korch_bin(), "kernel", "--launcher", "sandbox", "--instance", "sbx-kill9", NULL};
    char line[PATH_MAX], pids[PATH_MAX], procs[64];
    int fd = -1;
    int pid = korch_test_spawn_line(argv, line, sizeof line, 60, &fd);
    if (!CHECK_GT(pid, 0))
        return;
    s_cg_dir("pids", "sbx-kill9", pids, sizeof pids);
    s_cg_read(pids, "pids.current", procs, sizeof procs);
    CHECK_GT(atoi(procs), 2);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    close(fd);
    int left = -1;
    for (int i = 0; i < 40 && left != 0; i++) {
        nanosleep(&(struct timespec){0, 50 * 1000 * 1000}, NULL);
        s_cg_read(pids, "pids.current", procs, sizeof procs);
        left = atoi(procs);
    }
    CHECK_EQ(left, 0);
    struct stat st;
    CHECK_EQ(stat(pids, &st), 0); /* the empty cgroup is still there ... */
    char *out = NULL, *err = NULL;
    const char *argv2[] = {korch_test_korch_bin(), "exec", "--launcher", "sandbox", "-c", "print('next')", NULL};
    CHECK_EQ(korch_test_run(argv2, NULL, &out, &err, 60), 0);
    CHECK_STREQ(out, "next\n");
    CHECK_CONTAINS(err, "removed 1 sandbox cgroup(s) left by korch instances that are gone");
    CHECK(stat(pids, &st) != 0); /* ... until the next korch sweeps it */
    char base[PATH_MAX], lock[PATH_MAX + 64];
    if (CHECK_EQ(korch_runtime_base(base, sizeof base, NULL), KORCH_OK)) {
        snprintf(lock, sizeof lock, "%s/instances/sbx-kill9.lock", base);
        CHECK(access(lock, F_OK) != 0); /* and forgets the instance */
    }
    free(out);
    free(err);
}

/* A process of the test's (sleep 600) in the cgroup dirs of cg_fds
   (-1-terminated cgroup.procs fds): a kernel's leftover. */
static pid_t s_sleeper_in(const int *cg_fds)
{
    pid_t pid = fork();
    if (pid == 0) {
        for (int i = 0; cg_fds[i] >= 0; i++)
            if (write(cg_fds[i], "0", 1) != 1)
                _exit(3);
        execl("/bin/sleep", "sleep", "600", (char *)NULL);
        _exit(4);
    }
    return pid;
}

/* Has our child pid ended (within ms), and how? */
static bool s_ended(pid_t pid, int ms, int *status)
{
    for (int i = 0; i < ms / 20; i++) {
        if (waitpid(pid, status, WNOHANG) == pid)
            return true;
        nanosleep(&(struct timespec){0, 20 * 1000 * 1000}, NULL);
    }
    return false;
}

/* cgroups are machine-wide, instance locks live per runtime dir: a korch
   with another KORCH_RUNTIME_DIR must leave this one's sandbox alone (it
   used to take it for the cgroup of a dead instance and kill it), while
   a really dead instance of its own runtime dir is still swept; the
   layout before scopes (korch/{instance}/{kernel}) keeps a cgroup that
   still holds processes (whose korch cannot be judged) or was just made,
   and loses one empty for long. */
TEST_T(sandbox_sweep_spares_other_runtime_dirs, 150)
{
    char dir_a[] = "/tmp/korch-rt-scope-a-XXXXXX", dir_b[] = "/tmp/korch-rt-scope-b-XXXXXX";
    char saved[PATH_MAX] = "", line[PATH_MAX], pids_a[PATH_MAX], v[64], sc_a[32], sc_b[32];
    const char *rt = getenv("KORCH_RUNTIME_DIR");
    if (rt)
        snprintf(saved, sizeof saved, "%s", rt);
    char old[PATH_MAX] = "", busy[PATH_MAX + 16] = "", empty[PATH_MAX + 16] = "", procs[PATH_MAX + 32];
    pid_t old_pid = -1;
    int st = 0;
    if (!CHECK(mkdtemp(dir_a)) || !CHECK(mkdtemp(dir_b)))
        return;
    s_scope(dir_a, sc_a, sizeof sc_a);
    s_scope(dir_b, sc_b, sizeof sc_b);
    CHECK_STRNE(sc_a, sc_b);

    /* korch A: a sandboxed kernel that stays up */
    setenv("KORCH_RUNTIME_DIR", dir_a, 1);
    const char *argv_a[] = {korch_test_korch_bin(), "kernel", "--launcher", "sandbox", "--instance", "sbx-scope-a", NULL};
    int fd_a = -1;
    int pid_a = korch_test_spawn_line(argv_a, line, sizeof line, 60, &fd_a);
    if (!CHECK_GT(pid_a, 0))
        goto out;
    s_cg_dir_in("pids", sc_a, "sbx-scope-a", pids_a, sizeof pids_a);
    s_cg_read(pids_a, "pids.current", v, sizeof v);
    CHECK_GT(atoi(v), 2);

    /* leftovers: a dead instance of B's runtime dir with a process still
       in its cgroup; an old-layout instance with a busy and an empty one */
    korch_err_t err = {0};
    korch_cgroup_t *dead = korch_cgroup_new(sc_b, "sbx-dead", "k1", NULL, &err);
    if (!CHECK(dead))
        fprintf(stderr, "  %s\n", err.msg);
    pid_t dead_pid = dead ? s_sleeper_in(korch_cgroup_procs_fds(dead)) : -1;
    /* ("default": an older korch running meanwhile sweeps any other name) */
    s_cg_dir_in("pids", "", "default", old, sizeof old);
    snprintf(busy, sizeof busy, "%s/busy", old);
    snprintf(empty, sizeof empty, "%s/empty", old);
    CHECK(mkdir(old, 0755) == 0 || errno == EEXIST);
    CHECK(mkdir(busy, 0755) == 0 || errno == EEXIST);
    CHECK(mkdir(empty, 0755) == 0 || errno == EEXIST);
    char young[PATH_MAX + 16];
    snprintf(young, sizeof young, "%s/young", old);
    CHECK(mkdir(young, 0755) == 0 || errno == EEXIST);
    /* empty for an hour; young was made just now (by an older korch starting a kernel?) */
    CHECK_EQ(utimensat(AT_FDCWD, empty, (struct timespec[2]){{time(NULL) - 3600, 0}, {time(NULL) - 3600, 0}}, 0), 0);
    snprintf(procs, sizeof procs, "%s/cgroup.procs", busy);
    int busy_fds[2] = {open(procs, O_WRONLY | O_CLOEXEC), -1};
    CHECK_GE(busy_fds[0], 0);
    old_pid = busy_fds[0] >= 0 ? s_sleeper_in(busy_fds) : -1;
    if (busy_fds[0] >= 0)
        close(busy_fds[0]);
    nanosleep(&(struct timespec){0, 100 * 1000 * 1000}, NULL); /* the sleepers are in */
    s_cg_read(old, "pids.current", v, sizeof v);
    CHECK_STREQ(v, "1");

    /* korch B: another runtime dir; its start-up sweep runs */
    setenv("KORCH_RUNTIME_DIR", dir_b, 1);
    char *out = NULL, *errs = NULL;
    const char *argv_b[] = {korch_test_korch_bin(), "exec", "--launcher", "sandbox", "-c", "print('b ran')", NULL};
    CHECK_EQ(korch_test_run(argv_b, NULL, &out, &errs, 60), 0);
    CHECK_STREQ(out, "b ran\n");
    CHECK_CONTAINS(errs, "removed 1 sandbox cgroup(s) left by korch instances that are gone");
    CHECK_CONTAINS(errs, "is from an older korch and still holds processes: left alone");
    free(out);
    free(errs);
    out = errs = NULL;

    /* B's dead instance: its process killed, its cgroup gone */
    if (dead_pid > 0 && CHECK(s_ended(dead_pid, 3000, &st)))
        CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    char dead_dir[PATH_MAX];
    struct stat sb;
    s_cg_dir_in("pids", sc_b, "sbx-dead", dead_dir, sizeof dead_dir);
    CHECK(stat(dead_dir, &sb) != 0);
    korch_cgroup_destroy(&dead);
    /* the old layout: the busy cgroup and its process kept, the empty one gone */
    CHECK(!s_ended(old_pid, 100, &st));
    CHECK_EQ(stat(busy, &sb), 0);
    CHECK(stat(empty, &sb) != 0);
    CHECK_EQ(stat(young, &sb), 0);
    rmdir(young);
    /* A's kernel: alive, in its cgroup, and it still answers */
    s_cg_read(pids_a, "pids.current", v, sizeof v);
    CHECK_GT(atoi(v), 2);
    char code[PATH_MAX + 400];
    snprintf(code, sizeof code,
             "from jupyter_client import BlockingKernelClient\n"
             "c = BlockingKernelClient(connection_file='%s')\nc.load_connection_file()\nc.start_channels()\n"
             "c.wait_for_ready(timeout=20)\n"
             "r = c.execute_interactive('print(6 * 7)', timeout=20, output_hook=lambda m: m['msg_type'] == 'stream' "
             "and print(m['content']['text'], end=''))\n"
             "print(r['content']['status'])\n",
             line);
    const char *py[] = {"/usr/bin/python3", "-c", code, NULL};
    CHECK_EQ(korch_test_run(py, NULL, &out, NULL, 60), 0);
    CHECK_STREQ(out, "42\nok\n");
    free(out);

out:
    if (old_pid > 0) {
        kill(old_pid, SIGKILL);
        waitpid(old_pid, NULL, 0);
    }
    nanosleep(&(struct timespec){0, 50 * 1000 * 1000}, NULL);
    if (old[0]) {
        rmdir(busy);
        rmdir(empty);
        rmdir(old);
    }
    if (pid_a > 0) {
        kill(pid_a, SIGTERM);
        CHECK(s_ended(pid_a, 20000, &st));
        close(fd_a);
    }
    if (saved[0])
        setenv("KORCH_RUNTIME_DIR", saved, 1);
    else
        unsetenv("KORCH_RUNTIME_DIR");
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf %s %s", dir_a, dir_b);
    CHECK_EQ(system(cmd), 0);
}

/* Without bwrap, or when bwrap cannot make namespaces (user namespaces
   off: its error is reproduced by a stand-in that says what bwrap says and
   fails), the sandbox is unavailable with the reason. */
TEST(sandbox_unavailable_says_why)
{
    korch_sandbox_opts_t o;
    korch_sandbox_opts_init(&o);
    o.bwrap = "/nonexistent/bwrap";
    korch_err_t err = {0};
    korch_launcher_t *l = korch_launcher_sandbox_new(fx_loop(), &o, &err);
    CHECK(l == NULL);
    CHECK_CONTAINS(err.msg, "sandbox unavailable: cannot run '/nonexistent/bwrap': No such file or directory");
    CHECK_CONTAINS(err.msg, "apt-get install bubblewrap");

    char dir[] = "/tmp/korch-bwrap-XXXXXX", path[64];
    if (!CHECK(mkdtemp(dir)))
        return;
    chmod(dir, 0755); /* the probe runs as the kernel's uid */
    snprintf(path, sizeof path, "%s/bwrap", dir);
    FILE *fp = fopen(path, "w");
    if (CHECK(fp)) {
        fputs("#!/bin/sh\necho 'bwrap: No permissions to create a new namespace, likely because the kernel does "
              "not allow non-privileged user namespaces.' >&2\nexit 1\n",
              fp);
        fclose(fp);
    }
    chmod(path, 0755);
    setenv("KORCH_BWRAP", path, 1);
    err = (korch_err_t){0};
    l = korch_launcher_sandbox_new(fx_loop(), NULL, &err);
    CHECK(l == NULL);
    CHECK_CONTAINS(err.msg, "sandbox unavailable: bwrap: No permissions to create a new namespace");
    CHECK_CONTAINS(err.msg, "are unprivileged user namespaces turned off?");
    unsetenv("KORCH_BWRAP");
    unlink(path);
    rmdir(dir);
}

/* --launcher auto: docker when it answers and has the image, else the
   sandbox with a one-line note, else a refusal that says how to get
   either; --launcher local says what it means. */
TEST_T(sandbox_auto_choice, 180)
{
    char *out = NULL, *err = NULL;
    const char *docker[] = {korch_test_korch_bin(), "exec", "--launcher", "auto", "-c",
                            "import os; print(os.path.exists('/.dockerenv'), os.getuid() >= 2000000000)", NULL};
    CHECK_EQ(korch_test_run(docker, NULL, &out, &err, 90), 0);
    CHECK_CONTAINS(err, "korch: launcher auto picked docker\n");
    CHECK_STREQ(out, "True True\n");
    free(out);
    free(err);

    const char *sandbox[] = {korch_test_korch_bin(), "exec", "--launcher", "auto", "--image", "korch-no-such:img",
                             "-c", "import os; print(os.path.exists('/.dockerenv'), os.getuid() >= 2000000000, os.getcwd())", NULL};
    CHECK_EQ(korch_test_run(sandbox, NULL, &out, &err, 90), 0);
    CHECK_CONTAINS(err, "korch: launcher auto picked sandbox (docker: image 'korch-no-such:img' not found");
    CHECK_STREQ(out, "False True /home/korch/work\n");
    free(out);
    free(err);

    setenv("KORCH_BWRAP", "/nonexistent/bwrap", 1);
    CHECK_NE(korch_test_run(sandbox, NULL, &out, &err, 90), 0);
    CHECK_STREQ(out, "");
    CHECK_CONTAINS(err, "no launcher that confines the kernel works here (docker: image 'korch-no-such:img' not found");
    CHECK_CONTAINS(err, "sandbox unavailable: cannot run '/nonexistent/bwrap'");
    CHECK_CONTAINS(err, "make image");
    CHECK_CONTAINS(err, "apt-get install bubblewrap");
    CHECK_CONTAINS(err, "--launcher local runs the model's code unconfined as the current user");
    unsetenv("KORCH_BWRAP");
    free(out);
    free(err);

    const char *local[] = {korch_test_korch_bin(), "kernel", "--launcher", "local", "--kernel", "korch-no-such-spec",
                           NULL};
    CHECK_NE(korch_test_run(local, NULL, &out, &err, 30), 0);
    CHECK_CONTAINS(err, "korch: launcher local: the kernel runs unconfined as uid 0 (root) on this machine");
    CHECK_CONTAINS(err, "reach the network");
    free(out);
    free(err);
}
