/*  An agent session's output budget with the model as the attacker (issue
 *  22, point 4): each step prints 6 MB, shows a 2 MB image, saves a 3 MB
 *  one and kills its own kernel (os.kill(os.getpid(), 9)). The budget is
 *  the session's, across the kernel's restarts and the session's resumes:
 *  transcript, notebook and figures stay within --session-mb, the model
 *  and the user are told, the turn ends, nothing crashes. Before, every
 *  restart came back with a fresh per-kernel budget (one turn with 5
 *  restarts left 388 MB against a documented 128 MiB). */
#include "test.h"
#include "llm_fixture.h"
#include "korch/fsutil.h"

#include <dirent.h>
#include <string.h>
#include <sys/stat.h>

#define BUDGET_MB 16

static long long s_fsize(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long long)st.st_size : 0;
}

/* transcript + notebook + figures/ of session */
static long long s_session_bytes(const char *session, int *nfigures)
{
    char path[700];
    snprintf(path, sizeof path, "%s/transcript.jsonl", session);
    long long n = s_fsize(path);
    snprintf(path, sizeof path, "%s/notebook.ipynb", session);
    n += s_fsize(path);
    snprintf(path, sizeof path, "%s/figures", session);
    DIR *d = opendir(path);
    struct dirent *de;
    *nfigures = 0;
    while (d && (de = readdir(d))) {
        char f[1000];
        if (de->d_name[0] == '.')
            continue;
        snprintf(f, sizeof f, "%s/%s", path, de->d_name);
        n += s_fsize(f);
        ++*nfigures;
    }
    if (d)
        closedir(d);
    return n;
}

static int s_count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; p && (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

TEST_T(agent_output_budget_survives_kernel_self_restarts, 240)
{
    llm_server_t srv = {0};
    char dir[] = "/tmp/korch-budget-XXXXXX", session[300];
    if (!CHECK(mkdtemp(dir)) || !llm_server_start(&srv))
        return;
    llm_server_env(&srv, "restart_flood");
    snprintf(session, sizeof session, "%s/s", dir);
    const long long bound = (long long)BUDGET_MB << 20;
    for (int run = 0; run < 2; run++) { /* the second run resumes the session */
        char *out = NULL, *err = NULL, mb[16];
        snprintf(mb, sizeof mb, "%d", BUDGET_MB);
        const char *argv[] = {korch_test_korch_bin(), "run", "--launcher", "local", "--llm", "openai:gpt-4o-mini",
                              "--session", session, "--session-mb", mb, "--max-steps", "8", "flood it", NULL};
        int rc = korch_test_run(argv, NULL, &out, &err, 200);
        int figs = 0;
        long long bytes = s_session_bytes(session, &figs);
        char path[400];
        snprintf(path, sizeof path, "%s/transcript.jsonl", session);
        char *t = korch_read_file(path, 1 << 28, NULL, NULL);
        int restarts = s_count(t, "\"event\":\"restarted\"");
        fprintf(stderr, "  run %d: rc %d, %d kernel restarts so far, session on disk %.1f MiB (%d figures) of %d MiB\n",
                run + 1, rc, restarts, (double)bytes / (1 << 20), figs, BUDGET_MB);
        CHECK_EQ(rc, 0);
        /* the model was told in its tool result, and answered */
        CHECK_CONTAINS(out, "budget told: True");
        /* the user too */
        CHECK_CONTAINS(err, "this session has used its output budget");
        /* the attack happened: the kernel killed itself, more than once over the runs */
        CHECK_GE(restarts, run + 1);
        /* the whole session stays within its budget (its few last records aside) */
        CHECK_LE(bytes, bound + (256 << 10));
        if (rc != 0 || bytes > bound)
            fprintf(stderr, "%.2000s\n", err ? err : "");
        free(t);
        free(out);
        free(err);
    }
    /* the notebook still validates */
    char code[900], *v = NULL;
    snprintf(code, sizeof code, "import nbformat\nnb = nbformat.read('%s/notebook.ipynb', as_version=4)\n"
                                "nbformat.validate(nb)\nprint('valid')", session);
    const char *py[] = {"/usr/bin/python3", "-c", code, NULL};
    CHECK_EQ(korch_test_run(py, NULL, &v, NULL, 60), 0);
    CHECK_STREQ(v, "valid\n");
    free(v);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK_EQ(system(cmd), 0);
    llm_server_stop(&srv);
}
