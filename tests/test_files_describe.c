/*  What the model is told about the user's files, in each kernel language
 *  the agent drives (src/agent/describe.c, read by the kernel itself):
 *  `korch run --file ...` with the scripted LLM's "sysecho" scenario, which
 *  quotes the system prompt it got. Python (ipykernel, pandas and openpyxl)
 *  and R (IRkernel, read.csv and readxl) each get a CSV and an .xlsx: rows,
 *  column names and types; a file that is not a table keeps its size. */
#include "test.h"
#include "korch/fsutil.h"

#include <jansson.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define PY "/usr/bin/python3"

/* The system prompt korch run gave the model, for kernel and files in dir. */
static char *s_prompt(const char *kernel, const char *dir, const char *const *files)
{
    char line[64], url[128], root[700], session[700];
    snprintf(root, sizeof root, "%s/tests/peers/llm_server.py", korch_test_root());
    const char *largv[] = {PY, root, NULL};
    pid_t llm = korch_test_spawn_line(largv, line, sizeof line, 10, NULL);
    if (!CHECK_GT(llm, 0))
        return NULL;
    snprintf(url, sizeof url, "http://127.0.0.1:%d/s/sysecho/v1", (int)strtol(line, NULL, 10));
    unsetenv("KORCH_LLM");
    setenv("OPENAI_BASE_URL", url, 1);
    setenv("OPENAI_API_KEY", "sk-test", 1);
    snprintf(session, sizeof session, "%s/session", dir);
    const char *argv[32] = {korch_test_korch_bin(), "run", "--launcher", "local", "--kernel", kernel,
                            "--llm", "openai:gpt-4o-mini", "--session", session};
    int n = 10;
    static char paths[8][700];
    for (int i = 0; files[i] && i < 8; i++) {
        snprintf(paths[i], sizeof paths[i], "%s/%s", dir, files[i]);
        argv[n++] = "--file";
        argv[n++] = paths[i];
    }
    argv[n++] = "describe my files";
    argv[n] = NULL;
    char *out = NULL, *err = NULL;
    int rc = korch_test_run(argv, NULL, &out, &err, 170);
    if (!CHECK_EQ(rc, 0))
        fprintf(stderr, "%s\n%s\n", out ? out : "", err ? err : "");
    free(err);
    kill(llm, SIGTERM);
    waitpid(llm, NULL, 0);
    return out;
}

static void s_spit(const char *dir, const char *name, const char *text)
{
    char path[700];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    CHECK_EQ(korch_write_file(path, text, strlen(text), NULL), KORCH_OK);
}

/* An .xlsx of 3 rows written by openpyxl (no kernel involved). */
static void s_xlsx(const char *dir, const char *name)
{
    char code[900];
    snprintf(code, sizeof code,
             "import openpyxl\nwb = openpyxl.Workbook()\nws = wb.active\nws.append(['n', 'city'])\n"
             "for r in [(1, 'Oslo'), (2, 'Lima'), (39, 'Pune')]:\n    ws.append(r)\nwb.save('%s/%s')\n",
             dir, name);
    const char *argv[] = {PY, "-c", code, NULL};
    CHECK_EQ(korch_test_run(argv, NULL, NULL, NULL, 60), 0);
}


TEST_T(files_described_to_the_model_in_python, 180)
{
    char *dir = korch_test_mkdir("/tmp/korch-describe-XXXXXX");
    if (!CHECK(dir))
        return;
    s_spit(dir, "nums.csv", "x,name\n1.5,a\n2.5,b\n4.25,c\n7,d\n");
    s_spit(dir, "notes.txt", "not a table\n");
    s_xlsx(dir, "cities.xlsx");
    char *out = s_prompt("python3", dir, (const char *const[]){"nums.csv", "notes.txt", "cities.xlsx", NULL});
    CHECK_CONTAINS(out, "- nums.csv (30 bytes), 4 rows; columns: x (float64), name (object)");
    CHECK_CONTAINS(out, "- cities.xlsx (");
    CHECK_CONTAINS(out, "bytes), 3 rows; columns: n (int64), city (object)");
    CHECK_CONTAINS(out, "- notes.txt (12 bytes)\n");
    free(out);
    korch_test_rmdir(dir);
}

/* IRkernel: Debian registers it as "ir" (test_agent.c's R test says how it is found otherwise). */
TEST_T(files_described_to_the_model_in_r, 180)
{
    struct stat st;
    if (!CHECK(stat("/usr/share/jupyter/kernels/ir/kernel.json", &st) == 0)) {
        fprintf(stderr, "  no IRkernel kernelspec 'ir' (apt-get install r-cran-irkernel)\n");
        return;
    }
    char *dir = korch_test_mkdir("/tmp/korch-describe-XXXXXX");
    if (!CHECK(dir))
        return;
    s_spit(dir, "nums.csv", "x,name\n1.5,a\n2.5,b\n4.25,c\n7,d\n");
    s_xlsx(dir, "cities.xlsx");
    char *out = s_prompt("ir", dir, (const char *const[]){"nums.csv", "cities.xlsx", NULL});
    CHECK_CONTAINS(out, "- nums.csv (30 bytes), 4 rows; columns: x (numeric), name (character)");
    CHECK_CONTAINS(out, "bytes), 3 rows; columns: n (numeric), city (character)");
    free(out);
    korch_test_rmdir(dir);
}
