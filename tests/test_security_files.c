/*  The kernel as the attacker of the host's files, through korch (issue 9,
 *  points 1, 2, 7): links, races and FIFOs planted where korch reads and
 *  writes, each attack run for real, by code in a real kernel (a docker
 *  container where the boundary is), against the real korch. The bounds
 *  (environment, floods, disk fills: points 3, 4, 8) are in
 *  test_security_bounds.c.
 */
#include "secfiles_fixture.h"

#define S_VICTIM_TEXT "root only: korch must never write, chown or follow into this\n"

/* A root-owned 0600 host file the kernel will aim its links at. */
static void s_victim(char *path, size_t len)
{
    snprintf(path, len, "/tmp/korch-secfiles-victim-%d-%ld", (int)getpid(), (long)time(NULL));
    unlink(path);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (CHECK(fd >= 0)) {
        CHECK_EQ(write(fd, S_VICTIM_TEXT, strlen(S_VICTIM_TEXT)), (ssize_t)strlen(S_VICTIM_TEXT));
        CHECK_EQ(fchown(fd, 0, 0), 0);
        close(fd);
    }
}

/* The victim is as it was: content, owner root, mode 0600. */
static bool s_victim_intact(const char *path)
{
    struct stat st;
    char buf[256] = "";
    int fd = open(path, O_RDONLY);
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
    if (fd >= 0)
        close(fd);
    buf[n > 0 ? n : 0] = 0;
    bool ok = CHECK_EQ(lstat(path, &st), 0);
    ok = CHECK(S_ISREG(st.st_mode)) && ok;
    ok = CHECK_EQ(st.st_uid, 0) && ok;
    ok = CHECK_EQ(st.st_gid, 0) && ok;
    ok = CHECK_EQ(st.st_mode & 07777, 0600) && ok;
    ok = CHECK_STREQ(buf, S_VICTIM_TEXT) && ok;
    return ok;
}

/* ------------------------------------------------------------ fsutil */

/* The helper itself, the attacker being this test: a planted link at the
   name and at the old fixed temp name, a FIFO, a symlinked directory. */
TEST(secfiles_fsutil_refuses_links_fifos_and_escapes)
{
    char dir[] = "/tmp/korch-secfiles-fs.XXXXXX", victim[256], p[PATH_MAX + 64];
    if (!CHECK(mkdtemp(dir)))
        return;
    s_victim(victim, sizeof victim);
    korch_err_t err = {0};
    /* A link at the name is replaced, never written through. */
    snprintf(p, sizeof p, "%s/out.txt", dir);
    CHECK_EQ(symlink(victim, p), 0);
    snprintf(p, sizeof p, "%s/out.txt.tmp", dir);
    CHECK_EQ(symlink(victim, p), 0);
    korch_fs_opts_t o = {.mode = 0644, .chown = true, .uid = 1000, .gid = 1000};
    snprintf(p, sizeof p, "%s/out.txt", dir);
    CHECK_EQ(korch_fs_write(p, "new\n", 4, &o, &err), KORCH_OK);
    struct stat st;
    CHECK_EQ(lstat(p, &st), 0);
    CHECK(S_ISREG(st.st_mode));
    CHECK_EQ(st.st_uid, 1000);
    CHECK_EQ(st.st_mode & 0777, 0644);
    s_victim_intact(victim);
    /* Through a symlinked directory on the way: refused. */
    snprintf(p, sizeof p, "%s/sub", dir);
    CHECK_EQ(symlink("/etc", p), 0);
    korch_err_clear(&err);
    CHECK_EQ(korch_fs_write_rel(dir, "sub/passwd-korch", "x", 1, true, &o, &err), KORCH_E_INVALID);
    CHECK_CONTAINS(err.msg, "'sub' is a symbolic link: refusing to follow it");
    CHECK_EQ(access("/etc/passwd-korch", F_OK), -1);
    korch_err_clear(&err);
    CHECK_EQ(korch_fs_write_rel(dir, "../escape", "x", 1, true, &o, &err), KORCH_E_INVALID);
    korch_err_clear(&err);
    CHECK_EQ(korch_fs_write_rel(dir, "a/b/c.csv", "1,2\n", 4, true, &o, &err), KORCH_OK);
    snprintf(p, sizeof p, "%s/a/b", dir);
    CHECK_EQ(stat(p, &st), 0);
    CHECK_EQ(st.st_uid, 1000);
    size_t len = 0;
    char *data = korch_fs_read_rel(dir, "a/b/c.csv", 100, &len, &err);
    CHECK_STREQ(data, "1,2\n");
    free(data);
    /* Reads: a link refused, a FIFO returns at once, a big file bounded. */
    korch_err_clear(&err);
    snprintf(p, sizeof p, "%s/link", dir);
    CHECK_EQ(symlink(victim, p), 0);
    CHECK(korch_fs_read(p, 100, true, &len, &err) == NULL);
    CHECK_EQ(err.rc, KORCH_E_INVALID);
    snprintf(p, sizeof p, "%s/fifo", dir);
    CHECK_EQ(mkfifo(p, 0600), 0);
    korch_err_clear(&err);
    int64_t t0 = korch_now_ms();
    CHECK(korch_fs_read(p, 100, true, &len, &err) == NULL);
    CHECK_LT(korch_now_ms() - t0, 1000);
    CHECK_CONTAINS(err.msg, "is not a regular file");
    korch_err_clear(&err);
    snprintf(p, sizeof p, "%s/out.txt", dir);
    CHECK(korch_fs_read(p, 2, true, &len, &err) == NULL);
    CHECK_EQ(err.rc, KORCH_E_TOOBIG);
    /* chown_tree: links and multiply-linked files are left alone. */
    snprintf(p, sizeof p, "%s/hard", dir);
    CHECK_EQ(link(victim, p), 0);
    CHECK_EQ(korch_fs_chown_tree(dir, 1000, 1000, NULL), KORCH_OK);
    CHECK_EQ(unlink(p), 0);
    s_victim_intact(victim);
    korch_fs_rm_tree(dir);
    CHECK_EQ(access(dir, F_OK), -1);
    s_victim_intact(victim);
    unlink(victim);
}

/* --------------------------------------------- 1. connection-file symlink */

/* Kernel code in a container plants kernel.json.tmp (and kernel.json) as
   links to a root-only host file and kills its kernel; korch restarts it,
   writing the new connection file into that same runtime dir. The host
   file must stay untouched and root's; the new kernel must work. */
TEST_T(secfiles_docker_conn_symlink_then_restart, 240)
{
    char victim[256], code[2048];
    s_victim(victim, sizeof victim);
    /* With korch's tmpfs on the runtime dir (a restart starts from an empty
       one) and without it (korch not root, or runtime_size 0): there the
       links are still in place when korch writes. */
    for (int bounded = 1; bounded >= 0; bounded--) {
        korch_docker_opts_t o;
        korch_docker_opts_init(&o);
        if (!bounded)
            o.runtime_size = 0;
        korch_err_t err = {0};
        korch_launcher_t *l = korch_launcher_docker_new(fx_loop(), &o, &err);
        fx_t f;
        if (!CHECK(l) || !fx_start(&f, &(korch_kernel_opts_t){.launcher = l})) {
            korch_launcher_destroy(&l);
            break;
        }
        static const char *const plant =
            "import os\n"
            "os.chdir('/run/korch')\n"
            "for n in ('kernel.json.tmp', 'kernel.json', '.kernel.json.korch-0000000000000000'):\n"
            "    try:\n        os.remove(n)\n    except OSError:\n        pass\n"
            "    os.symlink('%s', n)\n"
            "print(sorted(n for n in os.listdir('.') if os.path.islink(n)))\n";
        snprintf(code, sizeof code, plant, victim);
        const char *out = s_ok(&f, code);
        CHECK_CONTAINS(out, "'kernel.json', 'kernel.json.tmp'");
        /* Death, then korch's automatic restart. */
        korch_exec_t *ex = fx_run(&f, "import os; os._exit(1)", 30000);
        CHECK_EQ(korch_exec_result(ex)->status, KORCH_EXEC_DIED);
        korch_exec_destroy(&ex);
        CHECK_EQ(korch_kernel_wait_ready(f.k, &err), KORCH_OK);
        CHECK_GE(korch_kernel_restarts(f.k), 1);
        s_victim_intact(victim);
        CHECK_STREQ(s_ok(&f, "print('alive')"), "alive\n");
        /* Again with an explicit restart (the links planted anew). */
        s_ok(&f, code);
        CHECK_EQ(korch_kernel_restart(f.k, &err), KORCH_OK);
        CHECK_EQ(korch_kernel_wait_ready(f.k, &err), KORCH_OK);
        s_victim_intact(victim);
        /* The connection file korch wrote is a regular file of the kernel's
           user, not the link; without the tmpfs the other links are still
           there, untouched by korch. */
        out = s_ok(&f, "import os, stat\nst = os.lstat('/run/korch/kernel.json')\n"
                       "print(stat.S_ISREG(st.st_mode), st.st_uid == os.getuid(), oct(st.st_mode & 0o777), "
                       "os.path.islink('/run/korch/kernel.json.tmp'))\n");
        CHECK_STREQ(out, bounded ? "True True 0o600 False\n" : "True True 0o600 True\n");
        fx_stop(&f);
        korch_launcher_destroy(&l);
        s_victim_intact(victim);
    }
    unlink(victim);
}

/* --------------------------------------------- 2. the upload chown race */

/* korch run --launcher docker --file: a thread that earlier code left
   (re-run when the session resumes) swaps symlinks to a root-only host
   file in for the upload's name and for every temp file korch makes. */
TEST_T(secfiles_docker_upload_race_with_symlink_swapping_thread, 300)
{
    char victim[256], dir[] = "/tmp/korch-secfiles-race.XXXXXX", p1[PATH_MAX], p2[PATH_MAX], csv[PATH_MAX],
                      session[PATH_MAX], code[2048];
    if (!CHECK(mkdtemp(dir)))
        return;
    s_victim(victim, sizeof victim);
    snprintf(session, sizeof session, "%s/session", dir);
    snprintf(csv, sizeof csv, "%s/data.csv", dir);
    s_write_text(csv, "a,b\n1,2\n");
    snprintf(code, sizeof code,
             "import os, threading, time\n"
             "V = '%s'\n"
             "def swap_name():\n"  /* data.csv: a link to V, atomically, nonstop */
             "    end = time.time() + 12\n"
             "    while time.time() < end:\n"
             "        try:\n"
             "            os.symlink(V, '.l')\n"
             "        except OSError:\n"
             "            pass\n"
             "        try:\n"
             "            os.replace('.l', 'data.csv')\n"
             "        except OSError:\n"
             "            pass\n"
             "def swap_temps():\n"  /* any temp file korch makes: a link to V */
             "    end = time.time() + 12\n"
             "    while time.time() < end:\n"
             "        for n in os.listdir('.'):\n"
             "            if n not in ('.l', 'data.csv') and not os.path.islink(n):\n"
             "                try:\n"
             "                    os.remove(n)\n"
             "                    os.symlink(V, n)\n"
             "                except OSError:\n"
             "                    pass\n"
             "threading.Thread(target=swap_name, daemon=True).start()\n"
             "threading.Thread(target=swap_temps, daemon=True).start()\n"
             "print('swapping')\n",
             victim);
    json_t *r = json_pack("{s:[{s:[{s:s, s:{s:s}}]}, {s:s}]}", "replies", "tool_calls", "name", "run_python",
                          "arguments", "code", code, "text", "started");
    char *txt = json_dumps(r, 0);
    json_decref(r);
    snprintf(p1, sizeof p1, "%s/first.json", dir);
    s_write_text(p1, txt);
    free(txt);
    /* The resumed runs: a step that waits while the thread races, then an answer. */
    r = json_pack("{s:[{s:[{s:s, s:{s:s}}]}, {s:s}]}", "replies", "tool_calls", "name", "run_python", "arguments",
                  "code", "import time, os; time.sleep(1); print(os.path.islink('data.csv'))", "text", "done");
    txt = json_dumps(r, 0);
    json_decref(r);
    snprintf(p2, sizeof p2, "%s/again.json", dir);
    s_write_text(p2, txt);
    free(txt);
    char spec1[PATH_MAX + 16], spec2[PATH_MAX + 16];
    snprintf(spec1, sizeof spec1, "replay:%s", p1);
    snprintf(spec2, sizeof spec2, "replay:%s", p2);
    const char *first[] = {korch_test_korch_bin(), "run", "--launcher", "docker", "--llm", spec1, "--session",
                           session, "-q", "start the thread", NULL};
    char *out = NULL, *errs = NULL;
    int st = korch_test_run(first, NULL, &out, &errs, 120);
    if (!CHECK_EQ(st, 0))
        fprintf(stderr, "  stdout: %s\n  stderr: %s\n", out, errs);
    free(out);
    free(errs);
    int runs = 4;
    for (int i = 0; i < runs; i++) {
        const char *again[] = {korch_test_korch_bin(), "run", "--launcher", "docker", "--llm", spec2, "--session",
                               session, "--file", csv, "-q", "again", NULL};
        out = errs = NULL;
        st = korch_test_run(again, NULL, &out, &errs, 120);
        /* korch may refuse the upload (its temp file was replaced under
           it) or win the race; what it must never do is touch the host. */
        fprintf(stderr, "  run %d: exit %d%s%.200s\n", i + 1, st, errs && *errs ? ", stderr: " : "", errs ? errs : "");
        CHECK(st == 0 || st == 2);
        free(out);
        free(errs);
        if (!s_victim_intact(victim))
            break;
    }
    /* Without the thread the upload lands, the asking user's after the run. */
    char files[PATH_MAX + 16];
    snprintf(files, sizeof files, "%s/files", session);
    korch_fs_rm_tree(session);
    const char *clean[] = {korch_test_korch_bin(), "run", "--launcher", "docker", "--llm", spec2, "--session",
                           session, "--file", csv, "-q", "clean", NULL};
    out = errs = NULL;
    st = korch_test_run(clean, NULL, &out, &errs, 120);
    CHECK_EQ(st, 0);
    free(out);
    free(errs);
    struct stat sb;
    char up[PATH_MAX + 32];
    snprintf(up, sizeof up, "%s/data.csv", files);
    if (CHECK_EQ(lstat(up, &sb), 0)) {
        CHECK(S_ISREG(sb.st_mode));
        CHECK_EQ(sb.st_uid, geteuid());
        CHECK_EQ(sb.st_size, 8);
    }
    s_victim_intact(victim);
    unlink(victim);
    korch_fs_rm_tree(dir);
}

/* ------------------------------------------- 7. a FIFO named kernel.json */

/* A kernel replaces its connection file with a FIFO, then its korch dies.
   Re-adoption, `korch kernel` of the same instance and another korch's
   start-up sweep all go on (none opens the FIFO for a blocking read), and
   SIGTERM ends that korch kernel promptly. */
TEST_T(secfiles_docker_fifo_kernel_json_never_blocks, 240)
{
    char instance[64], kid[64];
    snprintf(instance, sizeof instance, "korch-test-fifo-%d", (int)getpid());
    snprintf(kid, sizeof kid, "fifo-%d-%ld", (int)getpid(), (long)time(NULL));
    int pfd[2];
    if (!CHECK_EQ(pipe(pfd), 0))
        return;
    pid_t pid = fork();
    if (pid == 0) {
        close(pfd[0]);
        korch_launcher_t *l = s_docker(instance, NULL, false);
        fx_t f;
        char ok = 'n';
        if (l && fx_start(&f, &(korch_kernel_opts_t){.launcher = l, .kernel_id = kid})) {
            korch_exec_t *ex = fx_run(&f,
                                      "import os\nos.remove('/run/korch/kernel.json')\n"
                                      "os.mkfifo('/run/korch/kernel.json')\n",
                                      30000);
            if (korch_exec_result(ex)->status == KORCH_EXEC_OK)
                ok = 'y';
        }
        if (write(pfd[1], &ok, 1) != 1)
            _exit(3);
        _exit(0); /* as korch killed with -9: the container stays */
    }
    close(pfd[1]);
    char ok = 0;
    CHECK_EQ(read(pfd[0], &ok, 1), 1);
    close(pfd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (!CHECK_EQ(ok, 'y'))
        return;
    korch_launcher_t *l = s_docker(instance, NULL, false);
    if (!l)
        return;
    korch_err_t err = {0};
    korch_proc_t *p = NULL;
    int64_t t0 = korch_now_ms();
    CHECK_EQ(korch_launcher_adopt_wait(l, kid, &p, &err), KORCH_E_INVALID);
    CHECK_LT(korch_now_ms() - t0, 5000);
    CHECK_CONTAINS(err.msg, "is not a regular file");
    CHECK(p == NULL);

    /* korch kernel of that instance: re-adoption fails, a new kernel. */
    const char *kargv[] = {korch_test_korch_bin(), "kernel", "--launcher", "docker", "--instance", instance, NULL};
    char line[PATH_MAX];
    int fd = -1;
    int kp = korch_test_spawn_line(kargv, line, sizeof line, 90, &fd);
    if (CHECK_GT(kp, 0)) {
        CHECK_CONTAINS(line, ".json");
        t0 = korch_now_ms();
        kill(kp, SIGTERM);
        int ws = 0;
        pid_t w = 0;
        while ((w = waitpid(kp, &ws, WNOHANG)) == 0 && korch_now_ms() - t0 < 15000)
            usleep(20000);
        int64_t took = korch_now_ms() - t0;
        fprintf(stderr, "  korch kernel ended %lld ms after SIGTERM\n", (long long)took);
        CHECK_EQ(w, kp);
        CHECK_LT(took, 5000);
        if (w != kp) {
            kill(kp, SIGKILL);
            waitpid(kp, NULL, 0);
        }
        if (fd >= 0)
            close(fd);
    }

    /* Once more a FIFO left behind, this time swept by another korch. */
    snprintf(kid, sizeof kid, "f2-%d-%ld", (int)getpid(), (long)time(NULL));
    pid = fork();
    if (pid == 0) {
        korch_launcher_t *cl = s_docker(instance, NULL, false);
        fx_t f;
        if (cl && fx_start(&f, &(korch_kernel_opts_t){.launcher = cl, .kernel_id = kid})) {
            korch_exec_t *ex = fx_run(&f,
                                      "import os\nos.remove('/run/korch/kernel.json')\n"
                                      "os.mkfifo('/run/korch/kernel.json')\n",
                                      30000);
            _exit(korch_exec_result(ex)->status == KORCH_EXEC_OK ? 0 : 1);
        }
        _exit(2);
    }
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    const char *eargv[] = {korch_test_korch_bin(), "exec", "--launcher", "docker", "-q", "-c", "print('swept')", NULL};
    char *out = NULL, *errs = NULL;
    t0 = korch_now_ms();
    CHECK_EQ(korch_test_run(eargv, NULL, &out, &errs, 60), 0);
    CHECK_LT(korch_now_ms() - t0, 30000);
    CHECK_CONTAINS(out, "swept");
    CHECK_CONTAINS(errs, "left by korch instance 'korch-test-fifo-");
    free(out);
    free(errs);
    json_t *left = korch_launcher_list(l, instance, &err);
    CHECK(left && json_array_size(left) == 0);
    json_decref(left);
    korch_launcher_remove_all(l, instance, NULL);
    korch_launcher_destroy(&l);
}

/* A local kernel plants a FIFO as its log and dies: the restart fails
   with a clear reason (or works), it never hangs korch, and the log tail
   never blocks. */
TEST_T(secfiles_local_fifo_kernel_log_never_blocks, 90)
{
    fx_t f;
    if (!fx_start(&f, NULL))
        return;
    const char *out = s_ok(&f, "import os, ipykernel.connect\n"
                               "d = os.path.dirname(ipykernel.connect.get_connection_file())\n"
                               "os.remove(os.path.join(d, 'kernel.log'))\n"
                               "os.mkfifo(os.path.join(d, 'kernel.log'))\nprint('planted')\n");
    CHECK_STREQ(out, "planted\n");
    int64_t t0 = korch_now_ms();
    CHECK_EQ(korch_proc_log_tail(korch_kernel_proc(f.k))[0], 0);
    CHECK_LT(korch_now_ms() - t0, 1000);
    korch_exec_t *ex = fx_run(&f, "import os; os._exit(1)", 30000);
    CHECK_EQ(korch_exec_result(ex)->status, KORCH_EXEC_DIED);
    korch_exec_destroy(&ex);
    korch_err_t err = {0};
    t0 = korch_now_ms();
    korch_rc_t rc = korch_kernel_wait_ready(f.k, &err);
    fprintf(stderr, "  restart after the FIFO: %s (%lld ms)\n", rc ? err.msg : "ok", (long long)(korch_now_ms() - t0));
    CHECK_LT(korch_now_ms() - t0, 20000);
    if (rc)
        CHECK_CONTAINS(err.msg, "kernel.log' is not a regular file");
    fx_stop(&f);
}
