/*  The launcher options every command takes (src/cli/launch.c) and the
 *  launcher calls that name no backend (launcher.h): no kernel is started.
 */
#define KORCH_TEST_UNIT
#include "test.h"
#include "korch/launcher.h"
#include "korch/loop.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Every command that starts kernels lists every launcher korch knows, each
   with what it does, and the limits; `korch serve --help` and `korch exec
   --help` once left swarm out. */
TEST(cli_help_lists_every_launcher)
{
    static const char *const cmds[] = {"exec", "kernel", "serve", "run", "chat"};
    const korch_launcher_about_t *a = korch_launcher_catalog();
    int n = 0;
    while (a[n].name)
        n++;
    CHECK_GE(n, 5);
    for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) {
        const char *argv[] = {korch_test_korch_bin(), cmds[i], "--help", NULL};
        char *out = NULL;
        CHECK_EQ(korch_test_run(argv, NULL, &out, NULL, 30), 0);
        CHECK_CONTAINS(out, "--launcher NAME");
        CHECK_CONTAINS(out, "--memory MB");
        CHECK_CONTAINS(out, "--pids N");
        for (int j = 0; out && j < n; j++) {
            char want[64];
            snprintf(want, sizeof want, " %s: ", a[j].name);
            if (!CHECK(strstr(out, want) != NULL))
                fprintf(stderr, "  korch %s --help does not list launcher '%s'\n", cmds[i], a[j].name);
        }
        free(out);
    }
}

/* A launcher name korch does not know is refused with the names it does,
   before anything starts; each command parses the option the same way. */
TEST(cli_unknown_launcher_names_the_known_ones)
{
    static const char *const cmds[] = {"exec", "kernel", "serve"};
    for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) {
        const char *argv[] = {korch_test_korch_bin(), cmds[i], "--launcher", "nonsense", NULL, NULL, NULL};
        if (!strcmp(cmds[i], "exec")) {
            argv[4] = "-c";
            argv[5] = "1";
        }
        char *out = NULL, *err = NULL;
        CHECK_NE(korch_test_run(argv, NULL, &out, &err, 30), 0);
        CHECK_CONTAINS(err, "unknown launcher 'nonsense' (use auto, docker, sandbox, swarm or local)");
        free(out);
        free(err);
    }
}

/* What a launcher leaves behind is the backend's to list and remove: one
   whose kernels die with korch says so, and needs no instance. */
TEST(cli_launcher_list_on_local_says_nothing_outlives_korch)
{
    korch_loop_t *loop = korch_loop_new();
    korch_err_t err = {0};
    korch_launcher_t *l = korch_launcher_local_new(loop, &err);
    CHECK(l != NULL);
    CHECK(korch_launcher_kind(l) == NULL);
    CHECK(korch_launcher_list(l, NULL, &err) == NULL);
    CHECK_EQ(err.rc, KORCH_E_STATE);
    CHECK_CONTAINS(err.msg, "die with korch");
    korch_err_clear(&err);
    CHECK_EQ(korch_launcher_remove_all(l, "x", &err), -1);
    CHECK_EQ(err.rc, KORCH_E_STATE);
    CHECK(!korch_launcher_needs_instance("local"));
    CHECK(korch_launcher_needs_instance("docker"));
    CHECK(korch_launcher_needs_instance("swarm"));
    CHECK(korch_launcher_needs_instance("auto"));
    korch_launcher_destroy(&l);
    korch_loop_destroy(&loop);
}
