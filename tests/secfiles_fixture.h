/*  Test fixture of the kernel-as-attacker file tests (test_security_files.c,
 *  test_security_bounds.c): a docker launcher with a work dir, code that must
 *  run, a text file written. Header-only: include it from one test file each. */
#ifndef KORCH_SECFILES_FIXTURE_H
#define KORCH_SECFILES_FIXTURE_H

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

/* A docker launcher of instance, its work dir workdir (given to the kernel
   when give). */
static inline korch_launcher_t *s_docker(const char *instance, const char *workdir, bool give)
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

/* Run code in f's kernel: it must end ok; its stdout. */
static inline const char *s_ok(fx_t *f, const char *code)
{
    korch_exec_t *ex = fx_run(f, code, 60000);
    if (!CHECK_EQ(korch_exec_result(ex)->status, KORCH_EXEC_OK))
        fprintf(stderr, "  code: %s\n  detail: %s\n  stderr: %s\n", code, korch_exec_result(ex)->detail,
                fx_stream(ex, "stderr"));
    const char *out = fx_stream(ex, "stdout");
    korch_exec_destroy(&ex);
    return out;
}

/* text written to path (a new file). */
static inline bool s_write_text(const char *path, const char *text)
{
    FILE *fp = fopen(path, "w");
    if (!CHECK(fp))
        return false;
    fputs(text, fp);
    fclose(fp);
    return true;
}

#endif
