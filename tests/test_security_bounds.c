/*  The kernel as the attacker of the host's resources, through korch (issue
 *  9, points 3, 4, 8): korch's secrets kept out of its environment, output
 *  floods and disk fills bounded, each attack run for real, by code in a
 *  real kernel (a docker container where the boundary is), against the real
 *  korch. Links, races and FIFOs are in test_security_files.c.
 */
#include "secfiles_fixture.h"

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
    if (!fx_start_on(&f, &l))
        return;
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
