/*  Files in and out of a container kernel's work dir (put_file / get_file
 *  over the archive endpoints) and re-adoption of a container whose korch
 *  died, against the real dockerd and the kernel image.
 */
#include "kernel_fixture.h"
#include "korch/docker.h"
#include "korch/instance.h"
#include "korch/launcher.h"

#include <openssl/evp.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static korch_launcher_t *s_docker(const char *instance, const char *workdir)
{
    korch_docker_opts_t o;
    korch_docker_opts_init(&o);
    o.instance = instance;
    o.workdir = workdir;
    korch_err_t err = {0};
    korch_launcher_t *l = korch_launcher_docker_new(fx_loop(), &o, &err);
    if (!CHECK(l))
        fprintf(stderr, "  %s\n", err.msg);
    return l;
}

static void s_sha256_hex(const void *data, size_t len, char hex[65])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned mdlen = 0;
    EVP_Digest(data, len, md, &mdlen, EVP_sha256(), NULL);
    for (unsigned i = 0; i < mdlen && i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", md[i]);
    hex[64] = 0;
}

/* Run code, expect status ok, return its stdout (leaked: short-lived child). */
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

TEST_T(docker_files_csv_in_png_out, 120)
{
    korch_launcher_t *l = s_docker(NULL, NULL);
    fx_t f;
    if (!fx_start_on(&f, &l))
        return;
    korch_proc_t *p = korch_kernel_proc(f.k);
    korch_err_t err = {0};
    char *data = NULL;
    size_t len = 0;

    /* A CSV in a directory that does not exist yet, read by pandas. */
    const char csv[] = "a,b\n1,2\n3,4\n5,6\n";
    if (!CHECK_EQ(korch_proc_put_file_wait(p, "data/in.csv", csv, strlen(csv), &err), KORCH_OK))
        fprintf(stderr, "  %s\n", err.msg);
    const char *out = s_ok(&f, "import os, pandas as pd\n"
                               "df = pd.read_csv('data/in.csv')\n"
                               "print('sum', int(df.a.sum() * df.b.sum()), 'rows', len(df))\n"
                               "st = os.stat('data/in.csv')\n"
                               "print('owner', st.st_uid == os.getuid(), st.st_gid == os.getgid(), oct(st.st_mode & 0o777))\n"
                               "open('data/in.csv', 'a').write('7,8\\n')\n"
                               "print('rows now', len(pd.read_csv('data/in.csv')))\n");
    CHECK_CONTAINS(out, "sum 108 rows 3\n"); /* (1+3+5) * (2+4+6) */
    CHECK_CONTAINS(out, "owner True True 0o644\n");
    CHECK_CONTAINS(out, "rows now 4\n");

    /* Overwrite: the new content replaces the old. */
    const char csv2[] = "a,b\n10,20\n";
    CHECK_EQ(korch_proc_put_file_wait(p, "data/in.csv", csv2, strlen(csv2), &err), KORCH_OK);
    out = s_ok(&f, "print('sum', int(pd.read_csv('data/in.csv').a.sum()))");
    CHECK_STREQ(out, "sum 10\n");

    /* A PNG the kernel saves comes back byte-identical: compare digests. */
    out = s_ok(&f, "import hashlib, matplotlib.pyplot as plt\n"
                   "os.makedirs('out', exist_ok=True)\n"
                   "fig, ax = plt.subplots()\n"
                   "ax.plot([1, 3, 2]); ax.set_title('korch')\n"
                   "fig.savefig('out/plot.png'); plt.close(fig)\n"
                   "b = open('out/plot.png', 'rb').read()\n"
                   "print(hashlib.sha256(b).hexdigest(), len(b))\n");
    char want[65] = "", got[65] = "";
    long want_len = 0;
    CHECK_EQ(sscanf(out, "%64s %ld", want, &want_len), 2);
    if (CHECK_EQ(korch_proc_get_file_wait(p, "out/plot.png", 10 << 20, &data, &len, &err), KORCH_OK)) {
        s_sha256_hex(data, len, got);
        CHECK_EQ(len, want_len);
        CHECK_STREQ(got, want);
        CHECK(len > 8 && memcmp(data, "\x89PNG\r\n\x1a\n", 8) == 0);
        CHECK_EQ(data[len], 0); /* NUL-terminated for convenience */
    } else {
        fprintf(stderr, "  %s\n", err.msg);
    }
    free(data);

    /* Bounded: a file larger than max is refused, not truncated. */
    korch_err_clear(&err);
    CHECK_EQ(korch_proc_get_file_wait(p, "out/plot.png", 100, &data, &len, &err), KORCH_E_TOOBIG);
    CHECK_STREQ(err.msg, "file 'out/plot.png' in the kernel's work dir is larger than 100 bytes");
    CHECK(data == NULL);
    korch_err_clear(&err);
    CHECK_EQ(korch_proc_get_file_wait(p, "out/nope.png", 100, &data, &len, &err), KORCH_E_NOTFOUND);
    CHECK_STREQ(err.msg, "no file 'out/nope.png' in the kernel's work dir");
    korch_err_clear(&err);
    CHECK_EQ(korch_proc_get_file_wait(p, "nodir/nope.png", 100, &data, &len, &err), KORCH_E_NOTFOUND);
    korch_err_clear(&err);
    CHECK_EQ(korch_proc_get_file_wait(p, "out", 1 << 20, &data, &len, &err), KORCH_E_INVALID);
    CHECK_STREQ(err.msg, "'out' in the kernel's work dir is not a regular file");

    /* Binary with NULs and a name longer than ustar's 100 bytes (pax). */
    size_t blen = 300 * 1000 + 17;
    unsigned char *bin = malloc(blen);
    for (size_t i = 0; i < blen; i++)
        bin[i] = (unsigned char)((i * 2654435761u) >> 13);
    char longname[300];
    snprintf(longname, sizeof longname, "deep/%0150d/file.bin", 7);
    korch_err_clear(&err);
    if (!CHECK_EQ(korch_proc_put_file_wait(p, longname, bin, blen, &err), KORCH_OK))
        fprintf(stderr, "  %s\n", err.msg);
    char code[600];
    snprintf(code, sizeof code, "print(os.path.getsize('%s'))", longname);
    out = s_ok(&f, code);
    CHECK_EQ(strtol(out, NULL, 10), (long)blen);
    if (CHECK_EQ(korch_proc_get_file_wait(p, longname, blen, &data, &len, &err), KORCH_OK)) {
        CHECK_EQ(len, blen);
        CHECK(len == blen && memcmp(data, bin, blen) == 0);
    }
    free(data);
    free(bin);

    /* Names that leave the work dir, directly or through a symlink the
       kernel planted, are refused. */
    korch_err_clear(&err);
    CHECK_EQ(korch_proc_put_file_wait(p, "../escape", "x", 1, &err), KORCH_E_INVALID);
    CHECK_EQ(korch_proc_get_file_wait(p, "/etc/passwd", 100, &data, &len, &err), KORCH_E_INVALID);
    s_ok(&f, "os.symlink('/etc', 'etc_link'); os.symlink('/etc/passwd', 'pw'); os.symlink('/etc', 'data/up')");
    korch_err_clear(&err);
    CHECK_EQ(korch_proc_get_file_wait(p, "etc_link/passwd", 1 << 20, &data, &len, &err), KORCH_E_INVALID);
    CHECK_STREQ(err.msg, "'etc_link' in the kernel's work dir is a symbolic link: refusing to follow it");
    korch_err_clear(&err);
    CHECK_EQ(korch_proc_get_file_wait(p, "data/up/shadow", 1 << 20, &data, &len, &err), KORCH_E_INVALID);
    CHECK_STREQ(err.msg, "'data/up' in the kernel's work dir is a symbolic link: refusing to follow it");
    korch_err_clear(&err);
    CHECK_EQ(korch_proc_get_file_wait(p, "pw", 1 << 20, &data, &len, &err), KORCH_E_INVALID);
    CHECK_STREQ(err.msg, "'pw' in the kernel's work dir is a link: refusing to follow it");
    korch_err_clear(&err);
    CHECK_EQ(korch_proc_put_file_wait(p, "etc_link/evil", "x", 1, &err), KORCH_E_INVALID);
    /* Putting onto a symlink replaces the link, never writes through it. */
    korch_err_clear(&err);
    CHECK_EQ(korch_proc_put_file_wait(p, "pw", "mine\n", 5, &err), KORCH_OK);
    out = s_ok(&f, "print(os.path.islink('pw'), open('pw').read().strip(), open('/etc/passwd').read().count('mine'))");
    CHECK_STREQ(out, "False mine 0\n");
    /* A directory is not replaced by a file. */
    korch_err_clear(&err);
    CHECK_EQ(korch_proc_put_file_wait(p, "out", "x", 1, &err), KORCH_E_DOCKER);
    out = s_ok(&f, "print(os.path.isdir('out'), os.listdir('out'))");
    CHECK_STREQ(out, "True ['plot.png']\n");
    free(data);
    fx_stop(&f);
    korch_launcher_destroy(&l);
}

/* With a host work dir the same calls land in that dir, owned by the kernel. */
TEST_T(docker_files_host_workdir, 90)
{
    char work[] = "/tmp/korch-test-files.XXXXXX";
    if (!CHECK(mkdtemp(work)))
        return;
    /* the user's own dir, left as it is: writable for the kernel's uid
       (one no account has, src/launcher/kuid.h) only by its mode */
    CHECK_EQ(chmod(work, 0777), 0);
    korch_launcher_t *l = s_docker(NULL, work);
    fx_t f;
    if (!l || !fx_start(&f, &(korch_kernel_opts_t){.launcher = l})) {
        korch_launcher_destroy(&l);
        rmdir(work);
        return;
    }
    korch_proc_t *p = korch_kernel_proc(f.k);
    korch_err_t err = {0};
    CHECK_EQ(korch_proc_put_file_wait(p, "sub/hello.txt", "hello\n", 6, &err), KORCH_OK);
    char host[PATH_MAX + 32];
    snprintf(host, sizeof host, "%s/sub/hello.txt", work);
    struct stat st;
    if (CHECK_EQ(stat(host, &st), 0)) {
        CHECK_EQ(st.st_size, 6);
        if (geteuid() == 0)
            CHECK_GE((long long)st.st_uid, 2000000000LL); /* put_file writes as the kernel */
    }
    const char *out = s_ok(&f, "print(open('sub/hello.txt').read().strip(), file=open('sub/back.txt', 'w'))");
    CHECK_STREQ(out, "");
    char *data = NULL;
    size_t len = 0;
    CHECK_EQ(korch_proc_get_file_wait(p, "sub/back.txt", 100, &data, &len, &err), KORCH_OK);
    CHECK_STREQ(data, "hello\n");
    free(data);
    fx_stop(&f);
    korch_launcher_destroy(&l);
    const char *argv[] = {"rm", "-rf", work, NULL};
    korch_test_run(argv, NULL, NULL, NULL, 10);
}

/* A child starts a kernel and dies without cleaning up (as korch killed with
   -9 would); a new launcher of the same instance re-adopts the container
   with its variables; other instances and unknown ids are refused. */
TEST_T(docker_adopt_after_korch_died, 120)
{
    char instance[64], kid[64];
    snprintf(instance, sizeof instance, "korch-test-adopt-%d", (int)getpid());
    snprintf(kid, sizeof kid, "adopt-%d-%ld", (int)getpid(), (long)time(NULL));
    int pfd[2];
    if (!CHECK_EQ(pipe(pfd), 0))
        return;
    pid_t pid = fork();
    if (pid == 0) {
        close(pfd[0]);
        korch_launcher_t *l = s_docker(instance, NULL);
        fx_t f;
        char ok = 'n';
        if (l && fx_start(&f, &(korch_kernel_opts_t){.launcher = l, .kernel_id = kid})) {
            korch_exec_t *ex = fx_run(&f, "x = 42; import os; open('note.txt', 'w').write('kept')", 30000);
            if (korch_exec_result(ex)->status == KORCH_EXEC_OK)
                ok = 'y';
        }
        if (write(pfd[1], &ok, 1) != 1)
            _exit(3);
        _exit(0); /* no destroy: the container and runtime dir stay */
    }
    close(pfd[1]);
    char ok = 0;
    CHECK_EQ(read(pfd[0], &ok, 1), 1);
    close(pfd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (!CHECK_EQ(ok, 'y'))
        return;

    korch_launcher_t *l = s_docker(instance, NULL);
    korch_launcher_t *other = s_docker("korch-test-someone-else", NULL);
    if (!l || !other)
        goto out;
    korch_err_t err = {0};
    korch_proc_t *p = NULL;
    CHECK_EQ(korch_launcher_adopt_wait(other, kid, &p, &err), KORCH_E_STATE);
    CHECK_CONTAINS(err.msg, "belongs to korch instance 'korch-test-adopt-");
    CHECK(p == NULL);
    korch_err_clear(&err);
    CHECK_EQ(korch_launcher_adopt_wait(l, "no-such-kernel", &p, &err), KORCH_E_NOTFOUND);
    CHECK_STREQ(err.msg, "cannot re-adopt kernel 'no-such-kernel': no container has it");
    korch_err_clear(&err);
    CHECK_EQ(korch_launcher_adopt_wait(l, "bad/id", &p, &err), KORCH_E_INVALID);

    fx_t f;
    if (fx_start(&f, &(korch_kernel_opts_t){.launcher = l, .kernel_id = kid, .adopt = true})) {
        const korch_conn_t *c = korch_kernel_conn(f.k);
        CHECK_STREQ(c->transport, "ipc");
        char base[PATH_MAX];
        korch_runtime_base(base, sizeof base, &err);
        CHECK(strncmp(c->ip, base, strlen(base)) == 0); /* the host path, not /run/korch */
        korch_proc_t *ap = korch_kernel_proc(f.k);
        const char *cid = korch_proc_backend_id(ap);
        CHECK(cid && strlen(cid) == 64);
        CHECK(!korch_proc_exited(ap));
        korch_exec_t *ex = fx_run(&f, "print(x, open('note.txt').read())", 30000);
        CHECK_STREQ(fx_stream(ex, "stdout"), "42 kept\n");
        korch_exec_destroy(&ex);
        /* Files work on the adopted proc (the user comes from the container). */
        char *data = NULL;
        size_t len = 0;
        CHECK_EQ(korch_proc_get_file_wait(ap, "note.txt", 100, &data, &len, &err), KORCH_OK);
        CHECK_STREQ(data, "kept");
        free(data);
        CHECK_EQ(korch_proc_put_file_wait(ap, "again.txt", "yes", 3, &err), KORCH_OK);
        ex = fx_run(&f, "print(open('again.txt').read(), os.stat('again.txt').st_uid == os.getuid())", 30000);
        CHECK_STREQ(fx_stream(ex, "stdout"), "yes True\n");
        korch_exec_destroy(&ex);
        /* Interrupt by signal reaches the adopted kernel. */
        ex = fx_run(&f, "import time\nwhile True: time.sleep(0.1)", 1500);
        CHECK_EQ(korch_exec_result(ex)->status, KORCH_EXEC_TIMEOUT);
        CHECK(korch_exec_result(ex)->interrupted);
        CHECK(!korch_exec_result(ex)->restarted);
        korch_exec_destroy(&ex);
        ex = fx_run(&f, "print(x + 1)", 30000);
        CHECK_STREQ(fx_stream(ex, "stdout"), "43\n");
        korch_exec_destroy(&ex);
        fx_stop(&f);
    }
    /* Stopping the adopted kernel removes its container (in the background). */
    CHECK(korch_launcher_settle(l, 20000));
    json_t *left = korch_launcher_list(l, instance, &err);
    CHECK(left && json_array_size(left) == 0);
    json_decref(left);
out:
    if (l)
        korch_launcher_remove_all(l, instance, NULL);
    korch_launcher_destroy(&other);
    korch_launcher_destroy(&l);
}
