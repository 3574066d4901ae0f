/*  The korch command line, run as a user would. */
#include "test.h"
#include "korch/media.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static int s_korch(const char *const *args, char **out, char **err)
{
    const char *argv[32] = {korch_test_korch_bin()};
    int n = 1;
    for (; args[n - 1] && n < 31; n++)
        argv[n] = args[n - 1];
    argv[n] = NULL;
    return korch_test_run(argv, NULL, out, err, 120);
}

TEST(cli_version_and_help)
{
    char *out = NULL;
    CHECK_EQ(s_korch((const char *[]){"--version", NULL}, &out, NULL), 0);
    CHECK_CONTAINS(out, "korch 0.");
    free(out);
    CHECK_EQ(s_korch((const char *[]){"exec", "--help", NULL}, &out, NULL), 0);
    CHECK_CONTAINS(out, "usage: korch exec");
    free(out);
    CHECK_EQ(s_korch((const char *[]){"nonsense", NULL}, NULL, NULL), 2);
}

TEST(cli_exec_json_state_persists_and_nbformat_validates)
{
    const char *cells[] = {"x = 41", "x += 1; print(x)", "import pandas as pd\npd.DataFrame({'v': [x]})",
                           "import matplotlib.pyplot as plt\nplt.plot([1, 2]); plt.show()"};
    char *out = NULL;
    int rc = s_korch((const char *[]){"exec", "--json", "-c", cells[0], "-c", cells[1], "-c", cells[2], "-c", cells[3],
                                      NULL},
                     &out, NULL);
    CHECK_EQ(rc, 0);
    json_error_t jerr;
    char *save = NULL, *copy = strdup(out);
    int lines = 0;
    for (char *l = strtok_r(copy, "\n", &save); l; l = strtok_r(NULL, "\n", &save), lines++) {
        json_t *j = json_loads(l, 0, &jerr);
        if (!CHECK(j))
            continue;
        CHECK_STREQ(json_string_value(json_object_get(j, "status")), "ok");
        CHECK(json_is_integer(json_object_get(j, "elapsed_ms")));
        CHECK_EQ(json_integer_value(json_object_get(j, "execution_count")), lines + 1);
        if (lines == 1)
            CHECK_STREQ(json_string_value(json_object_get(json_array_get(json_object_get(j, "outputs"), 0), "text")),
                        "42\n");
        json_decref(j);
    }
    CHECK_EQ(lines, 4);
    free(copy);
    char *v = NULL;
    const char *argv[] = {"/usr/bin/python3", "tests/peers/nb_validate.py", cells[0], cells[1], cells[2], cells[3], NULL};
    CHECK_EQ(korch_test_run(argv, out, &v, NULL, 60), 0);
    CHECK_CONTAINS(v, "valid");
    CHECK_STRNE(v, "valid 0\n");
    free(v);
    free(out);
}

TEST(cli_exec_saves_png)
{
    char dir[] = "/tmp/korch-out-XXXXXX";
    if (!CHECK(mkdtemp(dir)))
        return;
    char *out = NULL;
    int rc = s_korch((const char *[]){"exec", "--out", dir, "-c",
                                      "import matplotlib.pyplot as plt\nplt.figure(figsize=(6.4, 4.8), dpi=100)\n"
                                      "plt.bar(['a', 'b'], [3, 5]); plt.show()",
                                      NULL},
                     &out, NULL);
    CHECK_EQ(rc, 0);
    char want[300], path[256];
    snprintf(path, sizeof path, "%s/fig-1.png", dir);
    snprintf(want, sizeof want, "saved to %s]", path);
    CHECK_CONTAINS(out, "[image/png ");
    CHECK_CONTAINS(out, want);
    size_t len = 0;
    char *png = korch_read_file(path, 1 << 24, &len, NULL);
    if (CHECK(png)) {
        int w = 0, h = 0;
        CHECK(korch_image_size((unsigned char *)png, len, &w, &h));
        CHECK_GT(w, 300);
        char dims[64];
        snprintf(dims, sizeof dims, "[image/png %dx%d saved", w, h);
        CHECK_CONTAINS(out, dims);
    }
    free(png);
    free(out);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK_EQ(system(cmd), 0);
}

TEST(cli_exec_error_stops_unless_keep_going)
{
    char *out = NULL;
    CHECK_EQ(s_korch((const char *[]){"exec", "-c", "1/0", "-c", "print('second')", NULL}, &out, NULL), 1);
    CHECK_CONTAINS(out, "ZeroDivisionError");
    CHECK(strstr(out, "second") == NULL);
    CHECK(strstr(out, "\x1b[") == NULL); /* not a terminal: no colour codes */
    free(out);
    CHECK_EQ(s_korch((const char *[]){"exec", "--keep-going", "-c", "1/0", "-c", "print('second')", NULL}, &out, NULL),
             1);
    CHECK_CONTAINS(out, "second");
    free(out);
}

TEST(cli_exec_file_split_into_cells)
{
    char path[] = "/tmp/korch-cells-XXXXXX";
    int fd = mkstemp(path);
    if (!CHECK_GE(fd, 0))
        return;
    const char *src = "a = 1\n# %% second cell\nb = a + 1\nprint(b)\n# %%\nb * 10\n";
    CHECK_EQ(write(fd, src, strlen(src)), (ssize_t)strlen(src));
    close(fd);
    char *out = NULL;
    CHECK_EQ(s_korch((const char *[]){"exec", "--json", path, NULL}, &out, NULL), 0);
    CHECK_CONTAINS(out, "\"execution_count\":3");
    CHECK_CONTAINS(out, "\"text\":\"2\\n\"");
    CHECK_CONTAINS(out, "\"text/plain\":\"20\"");
    free(out);
    unlink(path);
}

TEST(cli_exec_clear_errors)
{
    char *err = NULL;
    CHECK_EQ(s_korch((const char *[]){"exec", "--kernel", "nope", "-c", "1", NULL}, NULL, &err), 2);
    CHECK_CONTAINS(err, "no kernelspec named 'nope'");
    free(err);
    CHECK_EQ(s_korch((const char *[]){"exec", NULL}, NULL, &err), 2);
    CHECK_CONTAINS(err, "nothing to run");
    free(err);
    CHECK_EQ(s_korch((const char *[]){"exec", "--existing", "/nonexistent.json", "-c", "1", NULL}, NULL, &err), 2);
    CHECK_CONTAINS(err, "cannot read connection file '/nonexistent.json'");
    free(err);
    CHECK_EQ(s_korch((const char *[]){"exec", "--timeout", "abc", "-c", "1", NULL}, NULL, &err), 2);
    CHECK_CONTAINS(err, "--timeout wants a positive number");
    free(err);
}

/* A number option given something else ends the command before anything
   starts, with what it wants: never a silent 0 (no limit) or a huge one. */
TEST(cli_numbers_are_checked)
{
    static const struct {
        const char *args[8];
        const char *said;
    } bad[] = {
        {{"exec", "--memory", "lots", "-c", "1"}, "--memory wants a number from 16 to"},
        {{"exec", "--memory", "-5", "-c", "1"}, "--memory wants a number"},
        {{"exec", "--pids", "2.5", "-c", "1"}, "--pids wants a whole number"},
        {{"exec", "--cpus", "0", "-c", "1"}, "--cpus wants a number from 0.01"},
        {{"exec", "--max-output", "1e99", "-c", "1"}, "--max-output wants a whole number"},
        {{"run", "--max-steps", "ten", "task"}, "--max-steps wants a whole number from 1 to 10000 (steps), not 'ten'"},
        {{"run", "--max-cost", "-1", "task"}, "--max-cost wants a number from 0"},
        {{"run", "--timeout", "5s", "task"}, "--timeout wants a whole number"},
        {{"serve", "--max-kernels", "0"}, "--max-kernels wants a whole number from 1"},
        {{"serve", "--max-body", "10k"}, "--max-body wants a whole number from 1024"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char *err = NULL;
        CHECK_EQ(s_korch(bad[i].args, NULL, &err), 2);
        if (!CHECK_CONTAINS(err, bad[i].said))
            fprintf(stderr, "  case %zu (%s %s %s)\n", i, bad[i].args[0], bad[i].args[1], bad[i].args[2]);
        free(err);
    }
}

TEST(cli_exec_timeout)
{
    char *out = NULL, *err = NULL;
    CHECK_EQ(s_korch((const char *[]){"exec", "--timeout", "1", "-c", "v = 5", "-c", "while True: pass", NULL}, &out,
                     &err),
             1);
    CHECK_CONTAINS(err, "timed out after 1.0 s and was interrupted");
    CHECK_CONTAINS(out, "KeyboardInterrupt");
    free(out);
    free(err);
}

/* The core paths under valgrind: start, ok, error, timeout + interrupt,
   death + auto-restart, shutdown. Any invalid access or definite leak fails. */
TEST_T(cli_valgrind_core_paths, 180)
{
    char *out = NULL, *err = NULL;
    const char *argv[] = {"valgrind", "--leak-check=full", "--errors-for-leak-kinds=definite", "--error-exitcode=99",
                          "-q", korch_test_korch_bin(), "exec", "--keep-going", "--timeout", "3",
                          "-c", "x = 1", "-c", "while True: pass", "-c", "print(x)", "-c", "1/0",
                          "-c", "import os; os._exit(2)", "-c", "print('after restart')", NULL};
#if defined(__SANITIZE_ADDRESS__)
    /* An ASan binary cannot run under valgrind; ASan checks the same paths. */
    int rc = korch_test_run(argv + 5, NULL, &out, &err, 170);
#else
    int rc = korch_test_run(argv, NULL, &out, &err, 170);
#endif
    CHECK_EQ(rc, 1); /* failed cells, but no valgrind error (99) */
    CHECK_CONTAINS(out, "1\n");
    CHECK_CONTAINS(out, "after restart\n");
    CHECK_CONTAINS(err, "kernel died: exited 2");
    CHECK(strstr(err, "Invalid read") == NULL && strstr(err, "definitely lost") == NULL);
    free(out);
    free(err);
}

/* Ctrl-C (SIGINT to korch) interrupts the kernel, not korch: the loop gets a
   KeyboardInterrupt, the next cell runs with the state kept. */
TEST_T(cli_exec_sigint_interrupts_the_kernel, 120)
{
    int p[2];
    if (!CHECK_EQ(pipe(p), 0))
        return;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(p[1], 1);
        dup2(p[1], 2);
        close(p[0]);
        execl(korch_test_korch_bin(), "korch", "exec", "--keep-going", "-c", "kept = 7",
              "-c", "import time\nprint('looping', flush=True)\nwhile True: time.sleep(0.01)", "-c", "print('after', kept)",
              (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    FILE *f = fdopen(p[0], "r");
    char line[4096];
    char all[65536] = "";
    bool sent = false;
    while (fgets(line, sizeof line, f)) {
        strncat(all, line, sizeof all - strlen(all) - 1);
        if (!sent && strstr(line, "looping")) {
            usleep(300000);
            kill(pid, SIGINT);
            sent = true;
        }
    }
    fclose(f);
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(sent);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 1); /* a cell failed, korch itself was fine */
    CHECK_CONTAINS(all, "interrupting the kernel");
    CHECK_CONTAINS(all, "KeyboardInterrupt");
    CHECK_CONTAINS(all, "after 7");
}
