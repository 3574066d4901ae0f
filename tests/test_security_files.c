/*  The kernel as the attacker of the host, through korch (issue 9, points
 *  1-4, 7, 8): each attack run for real, by code in a real kernel (a docker
 *  container where the boundary is), against the real korch.
 */
#include "kernel_fixture.h"
#include "korch/docker.h"
#include "korch/env.h"
#include "korch/fsutil.h"
#include "korch/instance.h"
#include "korch/launcher.h"
#include "korch/loop.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <linux/magic.h>
#include <sys/resource.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

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

static korch_launcher_t *s_docker(const char *instance, const char *workdir, bool give)
{
    korch_docker_opts_t o;
    korch_docker_opts_init(&o);
    o.instance = instance;
    o.workdir = workdir;
    o.workdir_give = give;
    korch_err_t err = {0};
    korch_launcher_t *l = korch_launcher_docker_new(fx_loop(), &o, &err);
    if (!CHECK(l))
        fprintf(stderr, "  %s\n", err.msg);
    return l;
}

static const char *s_ok(fx_t *f, const char *code)
{
    korch_exec_t *ex = fx_run(f, code, 60000);
    if (!CHECK_EQ(korch_exec_result(ex)->status, KORCH_EXEC_OK))
        fprintf(stderr, "  code: %s\n  detail: %s\n  stderr: %s\n", code, korch_exec_result(ex)->detail,
                fx_stream(ex, "stderr"));
    const char *out = fx_stream(ex, "stdout");
    korch_exec_destroy(&ex);
    return out;
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

static bool s_write_text(const char *path, const char *text)
{
    FILE *fp = fopen(path, "w");
    if (!CHECK(fp))
        return false;
    fputs(text, fp);
    fclose(fp);
    return true;
}

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

/* ------------------------------------------------ 8. the environment */

/* korch's own secrets never reach model code; an allow-list and what the
   user passes explicitly do. Local and docker. */
TEST_BOTH_T(secfiles_kernel_env_has_no_api_keys, 120)
{
    setenv("OPENAI_API_KEY", "sk-korch-secret", 1);
    setenv("ANTHROPIC_API_KEY", "sk-ant-korch-secret", 1);
    setenv("KORCH_SECFILES_NAMED", "named-value", 1);
    setenv("LANG", "C.UTF-8", 1);
    korch_env_pass_clear();
    korch_err_t err = {0};
    CHECK_EQ(korch_env_pass("KORCH_SECFILES_GIVEN=given", &err), KORCH_OK);
    CHECK_EQ(korch_env_pass("KORCH_SECFILES_NAMED", &err), KORCH_OK);
    CHECK_EQ(korch_env_pass("BAD NAME=x", &err), KORCH_E_INVALID);
    fx_t f;
    if (!fx_start(&f, NULL))
        return;
    const char *out = s_ok(&f, "import os\n"
                               "print(os.environ.get('OPENAI_API_KEY'), os.environ.get('ANTHROPIC_API_KEY'))\n"
                               "print(os.environ.get('KORCH_SECFILES_GIVEN'), os.environ.get('KORCH_SECFILES_NAMED'))\n"
                               "print(sorted(k for k in os.environ if 'KEY' in k or 'TOKEN' in k))\n"
                               "print('PATH' in os.environ)\n");
    CHECK_STREQ(out, "None None\ngiven named-value\n[]\nTrue\n");
    fx_stop(&f);
    korch_env_pass_clear();
}

/* The same through the command line: --env, and nothing else of korch's. */
TEST_T(secfiles_cli_env_flag_and_no_keys, 90)
{
    setenv("OPENAI_API_KEY", "sk-korch-secret", 1);
    setenv("KORCH_SECFILES_NAMED", "from-korch", 1);
    const char *launchers[] = {"local", "docker", "sandbox"};
    for (int i = 0; i < 3; i++) {
        const char *argv[] = {korch_test_korch_bin(), "exec", "--launcher", launchers[i], "-q", "--env",
                              "KORCH_SECFILES_GIVEN=given", "--env", "KORCH_SECFILES_NAMED", "-c",
                              "import os; print(os.environ.get('OPENAI_API_KEY'), "
                              "os.environ.get('KORCH_SECFILES_GIVEN'), os.environ.get('KORCH_SECFILES_NAMED'))",
                              NULL};
        char *out = NULL, *errs = NULL;
        CHECK_EQ(korch_test_run(argv, NULL, &out, &errs, 60), 0);
        if (!CHECK_STREQ(out, "None given from-korch\n"))
            fprintf(stderr, "  %s: %s\n", launchers[i], errs);
        free(out);
        free(errs);
    }
    const char *bad[] = {korch_test_korch_bin(), "exec", "--env", "1BAD", "-c", "1", NULL};
    char *out = NULL, *errs = NULL;
    CHECK_EQ(korch_test_run(bad, NULL, &out, &errs, 30), 2);
    CHECK_CONTAINS(errs, "--env '1BAD': not NAME or NAME=VALUE");
    free(out);
    free(errs);
}

/* ---------------------------------------------------- 4. output floods */

/* ASan's shadow memory and quarantine (256 MiB of freed blocks) inflate RSS:
   the bounds are looser there, not gone. */
#if defined(__SANITIZE_ADDRESS__)
#define S_RSS_SLACK_KIB (512L * 1024)
#else
#define S_RSS_SLACK_KIB 0L
#endif

/* Run argv, stdout and stderr into new strings, its peak RSS (KiB, of
   korch alone: docker kernels are not its children) into *rss_kib. */
static int s_run_rss(const char *const *argv, char **out, char **errs, int timeout_s, long *rss_kib)
{
    char o[] = "/tmp/korch-secfiles-out.XXXXXX", e[] = "/tmp/korch-secfiles-err.XXXXXX";
    int ofd = mkstemp(o), efd = mkstemp(e);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(ofd, 1);
        dup2(efd, 2);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    int st = -1;
    struct rusage ru = {0};
    int64_t t0 = korch_now_ms();
    pid_t w = 0;
    while ((w = wait4(pid, &st, WNOHANG, &ru)) == 0 && korch_now_ms() - t0 < timeout_s * 1000LL)
        usleep(50000);
    if (w == 0) {
        kill(pid, SIGKILL);
        wait4(pid, &st, 0, &ru);
        st = -1;
    }
    *rss_kib = ru.ru_maxrss;
    size_t len;
    *out = korch_fs_read(o, 64u << 20, false, &len, NULL);
    *errs = korch_fs_read(e, 64u << 20, false, &len, NULL);
    close(ofd);
    close(efd);
    unlink(o);
    unlink(e);
    return st >= 0 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static size_t s_count(const char *hay, const char *needle)
{
    size_t n = 0;
    for (const char *p = hay ? strstr(hay, needle) : NULL; p; p = strstr(p + 1, needle))
        n++;
    return n;
}

/* The case: korch exec, six display_data of 150 MiB each (1.19 GiB
   peak before). korch keeps none of them, says so for each, and its peak
   stays near one message's size. */
TEST_T(secfiles_docker_exec_six_150mib_display_data_bounded, 240)
{
    const char *argv[] = {korch_test_korch_bin(), "exec", "--launcher", "docker", "-q", "--json", "-c",
                          "from IPython.display import display\ns = 'A' * (150 << 20)\n"
                          "for i in range(6):\n    display({'image/png': s}, raw=True)\nprint('sent')\n",
                          NULL};
    char *out = NULL, *errs = NULL;
    long rss = 0;
    CHECK_EQ(s_run_rss(argv, &out, &errs, 200, &rss), 0);
    fprintf(stderr, "  korch exec peak RSS %ld MiB\n", rss / 1024);
    CHECK_LT(rss, 320L * 1024 + S_RSS_SLACK_KIB);
    CHECK_LT(strlen(out ? out : ""), 64 * 1024);
    CHECK_EQ(s_count(out, "[korch: display_data output of 150.0 MiB dropped"), 6);
    CHECK_CONTAINS(out, "\"status\":\"ok\"");
    CHECK_CONTAINS(out, "sent\\n");
    free(out);
    free(errs);
}

/* The agent's case: one step, 20 images of 10 MiB (201 MB of figures, 267
   MB of transcript and notebook, ~820 MiB peak before). What is kept is
   bounded, and what was dropped is said to the model (its tool result),
   the user (the terminal) and the notebook. */
TEST_T(secfiles_docker_agent_20_images_of_10mib_bounded, 240)
{
    char dir[] = "/tmp/korch-secfiles-img.XXXXXX", rec[PATH_MAX], session[PATH_MAX], spec[PATH_MAX + 16];
    if (!CHECK(mkdtemp(dir)))
        return;
    snprintf(rec, sizeof rec, "%s/replay.json", dir);
    snprintf(session, sizeof session, "%s/session", dir);
    snprintf(spec, sizeof spec, "replay:%s", rec);
    const char *code = "import base64, os\nfrom IPython.display import display\n"
                       "for i in range(20):\n"
                       "    png = b'\\x89PNG\\r\\n\\x1a\\n\\0\\0\\0\\rIHDR\\0\\0\\x01\\0\\0\\0\\x01\\0\\x08\\x02\\0\\0\\0'"
                       " + os.urandom(10 << 20)\n"
                       "    display({'image/png': base64.b64encode(png).decode()}, raw=True)\n"
                       "print('sent 20')\n";
    json_t *r = json_pack("{s:[{s:[{s:s, s:{s:s}}]}, {s:s}]}", "replies", "tool_calls", "name", "run_python",
                          "arguments", "code", code, "text", "done");
    CHECK_EQ(json_dump_file(r, rec, 0), 0);
    json_decref(r);
    const char *argv[] = {korch_test_korch_bin(), "run", "--launcher", "docker", "--llm", spec, "--session",
                          session, "flood the host", NULL};
    char *out = NULL, *errs = NULL;
    long rss = 0;
    CHECK_EQ(s_run_rss(argv, &out, &errs, 200, &rss), 0);
    fprintf(stderr, "  korch run peak RSS %ld MiB\n", rss / 1024);
    CHECK_LT(rss, 256L * 1024 + S_RSS_SLACK_KIB);
    /* the user */
    CHECK_EQ(s_count(errs, "[korch: display_data output of 13.3 MiB (image/png) dropped"), 18);
    /* the host */
    char p[PATH_MAX + 32];
    struct stat st;
    long long figs = 0;
    for (int i = 1; i <= 40; i++) {
        snprintf(p, sizeof p, "%s/figures/fig-%d.png", session, i);
        if (stat(p, &st) == 0)
            figs += st.st_size;
    }
    fprintf(stderr, "  figures %lld MiB\n", figs >> 20);
    CHECK_LE(figs, 32LL << 20);
    CHECK_GT(figs, 10LL << 20); /* the two that fit were kept */
    snprintf(p, sizeof p, "%s/notebook.ipynb", session);
    size_t len = 0;
    char *nb = korch_fs_read(p, 256u << 20, false, &len, NULL);
    fprintf(stderr, "  notebook %zu MiB\n", len >> 20);
    CHECK_LT(len, 48u << 20);
    /* the notebook */
    CHECK_EQ(s_count(nb, "[korch: display_data output of 13.3 MiB (image/png) dropped"), 18);
    free(nb);
    snprintf(p, sizeof p, "%s/transcript.jsonl", session);
    char *tr = korch_fs_read(p, 256u << 20, false, &len, NULL);
    fprintf(stderr, "  transcript %zu MiB\n", len >> 20);
    CHECK_LT(len, 48u << 20);
    /* the model: its tool result says it too */
    const char *tool = tr ? strstr(tr, "{\"type\": \"tool\"") : NULL;
    if (!tool && tr)
        tool = strstr(tr, "\"type\":\"tool\"");
    CHECK(tool != NULL);
    CHECK_GE(s_count(tool, "dropped: korch keeps 32.0 MiB of images/HTML/rich output per execution"), 1);
    free(tr);
    free(out);
    free(errs);
    korch_fs_rm_tree(dir);
}

/* Every output kind has a budget, per execution and per session; what is
   dropped leaves a note in its place. */
TEST(secfiles_outputs_rich_budgets_per_execution_and_session)
{
    korch_outputs_limits_t lim = {.max_rich_bytes = 1000, .session = true, .session_stream_left = 5,
                                  .session_rich_left = 100000};
    korch_outputs_t *o = korch_outputs_new_limits(&lim);
    json_t *out;
    size_t idx;
    char big[801];
    memset(big, 'A', 800);
    big[800] = 0;
    json_t *c = json_pack("{s:{s:s}, s:{}, s:{s:s}}", "data", "image/png", big, "metadata", "transient", "display_id",
                          "d1");
    CHECK_EQ(korch_outputs_apply(o, "display_data", c, &out, &idx), KORCH_OUTPUT_NEW);
    CHECK(json_object_get(json_object_get(out, "data"), "image/png") != NULL);
    /* the second does not fit the 1000 bytes of this execution */
    CHECK_EQ(korch_outputs_apply(o, "execute_result", c, &out, &idx), KORCH_OUTPUT_NEW);
    CHECK_CONTAINS(json_string_value(json_object_get(json_object_get(out, "data"), "text/plain")),
                   "[korch: execute_result output of 825 bytes (image/png) dropped: korch keeps 1000 bytes of "
                   "images/HTML/rich output per execution]");
    CHECK_EQ(korch_outputs_dropped_rich(o), 1);
    /* an update that does not fit replaces the display with the note */
    json_t *u = json_pack("{s:{s:s, s:s}, s:{}, s:{s:s}}", "data", "image/png", big, "text/html", big, "metadata",
                          "transient", "display_id", "d1");
    CHECK_EQ(korch_outputs_apply(o, "update_display_data", u, &out, &idx), KORCH_OUTPUT_UPDATE);
    CHECK_CONTAINS(json_string_value(json_object_get(json_object_get(out, "data"), "text/plain")),
                   "update_display_data output of");
    /* what the wire layer left out (too big to parse) is said too */
    json_t *w = json_pack("{s:{}, s:{}, s:I}", "data", "metadata", "korch_dropped", (json_int_t)(150 << 20));
    CHECK_EQ(korch_outputs_apply(o, "display_data", w, &out, &idx), KORCH_OUTPUT_NEW);
    CHECK_CONTAINS(json_string_value(json_object_get(json_object_get(out, "data"), "text/plain")),
                   "display_data output of 150.0 MiB dropped");
    /* streams: the session had 5 bytes left */
    json_t *s = json_pack("{s:s, s:s}", "name", "stdout", "text", "0123456789");
    korch_outputs_apply(o, "stream", s, &out, &idx);
    korch_outputs_finish(o);
    json_t *all = korch_outputs_json(o);
    const char *last = json_string_value(json_object_get(json_array_get(all, json_array_size(all) - 1), "text"));
    CHECK_CONTAINS(last, "5 more bytes of stream output dropped (korch keeps 5 bytes per session)");
    CHECK_EQ(korch_outputs_kept_stream_bytes(o), 5);
    CHECK_EQ(korch_outputs_dropped_rich(o), 4); /* the update hit both outputs showing d1 */
    json_decref(c);
    json_decref(u);
    json_decref(w);
    json_decref(s);
    korch_outputs_destroy(&o);
    /* the session's rich budget nearly spent: the note names the session */
    lim = (korch_outputs_limits_t){.session = true, .session_stream_left = 100, .session_rich_left = 10};
    o = korch_outputs_new_limits(&lim);
    c = json_pack("{s:{s:s}, s:{}}", "data", "text/html", "<b>more than ten bytes</b>", "metadata");
    korch_outputs_apply(o, "display_data", c, &out, &idx);
    CHECK_CONTAINS(json_string_value(json_object_get(json_object_get(out, "data"), "text/plain")),
                   "per session (the rest of this session's budget)");
    json_decref(c);
    korch_outputs_destroy(&o);
}

/* ----------------------------------------------------- 3. disk fills */

static bool s_mounted(const char *dir)
{
    size_t len = 0;
    char *mi = korch_fs_read("/proc/self/mountinfo", 8u << 20, false, &len, NULL);
    char needle[PATH_MAX + 4];
    snprintf(needle, sizeof needle, " %s ", dir);
    bool on = mi && strstr(mi, needle);
    free(mi);
    return on;
}

/* Kernel code fills its runtime dir: ENOSPC at 1 MiB (a tmpfs korch
   mounted), not the host's disk; the kernel and korch go on; the mount
   goes with the kernel. */
TEST_T(secfiles_docker_runtime_dir_fill_is_bounded, 120)
{
    korch_launcher_t *l = s_docker(NULL, NULL, false);
    fx_t f;
    if (!l || !fx_start(&f, &(korch_kernel_opts_t){.launcher = l})) {
        korch_launcher_destroy(&l);
        return;
    }
    const char *out = s_ok(&f, "import errno\nn = 0\ntry:\n"
                               "    with open('/run/korch/fill', 'wb') as fh:\n"
                               "        for i in range(256):\n            fh.write(b'x' * (1 << 20)); n += 1\n"
                               "except OSError as e:\n    print('full', errno.errorcode[e.errno], n <= 1)\n");
    CHECK_STREQ(out, "full ENOSPC True\n");
    char rdir[PATH_MAX];
    snprintf(rdir, sizeof rdir, "%s", korch_kernel_conn(f.k)->ip);
    *strrchr(rdir, '/') = 0;
    struct statfs sf;
    if (CHECK_EQ(statfs(rdir, &sf), 0)) {
        CHECK_EQ(sf.f_type, TMPFS_MAGIC);
        CHECK_LE((long long)sf.f_blocks * sf.f_bsize, 1LL << 20);
    }
    CHECK(s_mounted(rdir));
    CHECK_STREQ(s_ok(&f, "import os; os.remove('/run/korch/fill'); print('alive')"), "alive\n");
    fx_stop(&f);
    /* unmounted, then removed, in that order on the launcher's worker */
    CHECK(korch_launcher_settle(l, 10000));
    CHECK(!s_mounted(rdir));
    CHECK_EQ(access(rdir, F_OK), -1);
    korch_launcher_destroy(&l);
}

/* korch run with a docker kernel: the session's files/ is the work dir. A
   kernel writing without end gets ENOSPC at --workdir-mb; what it wrote
   comes back to files/ (bounded), the upload and its results too. */
TEST_T(secfiles_docker_run_workdir_fill_is_bounded, 180)
{
    char dir[] = "/tmp/korch-secfiles-fill.XXXXXX", rec[PATH_MAX], session[PATH_MAX], spec[PATH_MAX + 16],
         csv[PATH_MAX], p[PATH_MAX + 32];
    if (!CHECK(mkdtemp(dir)))
        return;
    snprintf(rec, sizeof rec, "%s/replay.json", dir);
    snprintf(session, sizeof session, "%s/session", dir);
    snprintf(spec, sizeof spec, "replay:%s", rec);
    snprintf(csv, sizeof csv, "%s/data.csv", dir);
    s_write_text(csv, "a,b\n1,2\n");
    const char *code = "import errno\nprint(open('data.csv').read().split()[1])\nn = 0\ntry:\n"
                       "    with open('big', 'wb') as fh:\n"
                       "        for i in range(4096):\n            fh.write(b'x' * (1 << 20)); fh.flush(); n += 1\n"
                       "except OSError as e:\n    print('full', errno.errorcode[e.errno], n < 32)\n"
                       "import os; os.remove('big')\n"
                       "with open('big', 'wb') as fh:\n    fh.write(b'y' * (8 << 20))\n"
                       "open('result.txt', 'w').write('kept')\n";
    json_t *r = json_pack("{s:[{s:[{s:s, s:{s:s}}]}, {s:[{s:s, s:{s:s}}]}, {s:s}]}", "replies", "tool_calls", "name",
                          "run_python", "arguments", "code", code, "tool_calls", "name", "run_python", "arguments",
                          "code", "print('alive')", "text", "done");
    CHECK_EQ(json_dump_file(r, rec, 0), 0);
    json_decref(r);
    const char *argv[] = {korch_test_korch_bin(), "run", "--launcher", "docker", "--workdir-mb", "32", "--llm", spec,
                          "--session", session, "--file", csv, "fill the disk", NULL};
    char *out = NULL, *errs = NULL;
    CHECK_EQ(korch_test_run(argv, NULL, &out, &errs, 150), 0);
    CHECK_CONTAINS(errs, "1,2");
    CHECK_CONTAINS(errs, "full ENOSPC True");
    CHECK_CONTAINS(errs, "alive");
    char files[PATH_MAX + 16];
    snprintf(files, sizeof files, "%s/files", session);
    CHECK(!s_mounted(files));
    struct stat st;
    snprintf(p, sizeof p, "%s/big", files);
    if (CHECK_EQ(stat(p, &st), 0))
        CHECK_EQ(st.st_size, 8 << 20);
    snprintf(p, sizeof p, "%s/result.txt", files);
    size_t len = 0;
    char *kept = korch_fs_read(p, 100, true, &len, NULL);
    CHECK_STREQ(kept, "kept");
    free(kept);
    snprintf(p, sizeof p, "%s/data.csv", files);
    CHECK_EQ(stat(p, &st), 0);
    free(out);
    free(errs);
    korch_fs_rm_tree(dir);
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

/* korch in a mount namespace of its own (as in a privileged container
   without shared propagation): the engine cannot see korch's tmpfs, korch
   notices before the kernel starts, says so, and uses the dirs underneath;
   normally the kernel's /run/korch is korch's tmpfs. */
TEST_T(secfiles_docker_bounds_fall_back_when_the_engine_cannot_see_them, 90)
{
    const char *code = "print([l.split()[2] for l in open('/proc/mounts') if ' /run/korch ' in l])";
    const char *plain[] = {korch_test_korch_bin(), "exec", "--launcher", "docker", "-q", "-c", code, NULL};
    char *out = NULL, *errs = NULL;
    CHECK_EQ(korch_test_run(plain, NULL, &out, &errs, 60), 0);
    CHECK_STREQ(out, "['tmpfs']\n");
    free(out);
    free(errs);
    const char *apart[] = {"/usr/bin/unshare", "-m", "--propagation", "private", korch_test_korch_bin(), "exec",
                           "--launcher", "docker", "-q", "-c", code, NULL};
    out = errs = NULL;
    CHECK_EQ(korch_test_run(apart, NULL, &out, &errs, 60), 0);
    char base[PATH_MAX];
    struct statfs sf;
    korch_err_t err = {0};
    /* the dir underneath: whatever the runtime base is on */
    if (CHECK_EQ(korch_runtime_base(base, sizeof base, &err), KORCH_OK) && CHECK_EQ(statfs(base, &sf), 0) &&
        sf.f_type != TMPFS_MAGIC)
        CHECK(out && strncmp(out, "['", 2) == 0 && !strstr(out, "tmpfs"));
    CHECK_CONTAINS(errs, "the docker engine does not see the tmpfs korch mounted on");
    free(out);
    free(errs);
}
