/*  korch run's copy-back with a docker kernel as the attacker (issue 22,
 *  point 6): the session's files/ is covered by a tmpfs of --workdir-mb
 *  while the kernel runs, and brought home after as a bounded sync.
 *
 *  - The kernel leaves keep/result.txt beside a 100 GiB sparse file, a
 *    symlink to /etc/passwd and a FIFO: the result is back, the others are
 *    skipped with a note naming them (before, the sparse file aborted the
 *    copy-back and the result was lost).
 *  - It deletes files it was given (an upload, what it wrote in an earlier
 *    run): gone on the host too. A host file korch never copied in (larger
 *    than the work dir) is never deleted.
 *  - Two resumes that each delete their junk and write new junk do not grow
 *    the host dir (before, each resume could add up to --workdir-mb).
 */
#include "test.h"
#include "korch/fsutil.h"

#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* korch run (docker, --workdir-mb 32) with a replay model that runs code, then answers "done". */
static bool s_run(const char *dir, const char *session, const char *code, const char *upload, char **errs)
{
    char rec[600], spec[620];
    static int n;
    snprintf(rec, sizeof rec, "%s/replay-%d.json", dir, ++n);
    snprintf(spec, sizeof spec, "replay:%s", rec);
    json_t *r = json_pack("{s:[{s:[{s:s, s:{s:s}}]}, {s:s}]}", "replies", "tool_calls", "name", "run_python",
                          "arguments", "code", code, "text", "done");
    if (!CHECK(r && json_dump_file(r, rec, 0) == 0))
        return false;
    json_decref(r);
    const char *argv[20] = {korch_test_korch_bin(), "run", "--launcher", "docker", "--workdir-mb", "32", "--llm",
                            spec, "--session", session};
    int a = 10;
    if (upload) {
        argv[a++] = "--file";
        argv[a++] = upload;
    }
    argv[a++] = "go";
    argv[a] = NULL;
    char *out = NULL;
    int rc = korch_test_run(argv, NULL, &out, errs, 150);
    free(out);
    if (rc != 0)
        fprintf(stderr, "  korch run: %d\n%.3000s\n", rc, *errs ? *errs : "");
    return CHECK_EQ(rc, 0);
}

static bool s_exists(const char *files, const char *name)
{
    char p[700];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", files, name);
    return lstat(p, &st) == 0;
}

/* Bytes of the regular files in dir (one level of subdirectories). */
static long long s_bytes(const char *dir, int depth)
{
    long long n = 0;
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        char p[1200];
        struct stat st;
        if (de->d_name[0] == '.' && (!de->d_name[1] || de->d_name[1] == '.'))
            continue;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        if (lstat(p, &st) != 0)
            continue;
        if (S_ISREG(st.st_mode))
            n += (long long)st.st_blocks * 512;
        else if (S_ISDIR(st.st_mode) && depth < 3)
            n += s_bytes(p, depth + 1);
    }
    if (d)
        closedir(d);
    return n;
}

TEST_T(docker_run_copyback_is_a_bounded_sync, 420)
{
    char dir[] = "/tmp/korch-copyback.XXXXXX", session[200], files[220], csv[200], p[400];
    char *errs = NULL;
    if (!CHECK(mkdtemp(dir)))
        return;
    snprintf(session, sizeof session, "%s/session", dir);
    snprintf(files, sizeof files, "%s/files", session);
    snprintf(csv, sizeof csv, "%s/data.csv", dir);
    CHECK_EQ(korch_write_file(csv, "a,b\n1,2\n", 8, NULL), KORCH_OK);
    /* 1: the result beside what cannot come back */
    const char *code1 = "import os\n"
                        "os.makedirs('keep', exist_ok=True)\n"
                        "with open('huge.sparse', 'wb') as f:\n    f.truncate(100 << 30)\n"
                        "open('gone.txt', 'w').write('to be deleted')\n"
                        "os.symlink('/etc/passwd', 'link')\n"
                        "os.mkfifo('pipe')\n"
                        "open('keep/result.txt', 'w').write('kept')\n"
                        "print('written', os.path.getsize('huge.sparse') >> 30)\n";
    if (!s_run(dir, session, code1, csv, &errs))
        goto out;
    CHECK_CONTAINS(errs, "written 100");
    snprintf(p, sizeof p, "%s/keep/result.txt", files);
    char *kept = korch_fs_read(p, 100, true, NULL, NULL);
    CHECK_STREQ(kept ? kept : "(missing)", "kept");
    free(kept);
    CHECK(s_exists(files, "gone.txt"));
    CHECK(s_exists(files, "data.csv"));
    CHECK(!s_exists(files, "huge.sparse"));
    CHECK(!s_exists(files, "link"));
    CHECK(!s_exists(files, "pipe"));
    CHECK_CONTAINS(errs, "'huge.sparse' (102400.0 MiB) not copied back: sparse, larger than what is left to copy");
    CHECK_CONTAINS(errs, "'link' (");
    CHECK_CONTAINS(errs, "a symbolic link");
    CHECK_CONTAINS(errs, "'pipe' (");
    free(errs);
    errs = NULL;
    /* a host file too big to copy in: the kernel never sees it, korch never deletes it */
    snprintf(p, sizeof p, "%s/host-only.bin", files);
    FILE *f = fopen(p, "wb");
    if (!CHECK(f) || !CHECK_EQ(ftruncate(fileno(f), 40 << 20), 0))
        goto out;
    fclose(f);
    /* 2, 3: resumes that delete what they were given and write new junk each time */
    const char *code2 = "import glob, os, uuid\n"
                        "for name in glob.glob('junk-*') + ['gone.txt', 'data.csv']:\n"
                        "    if os.path.exists(name): os.remove(name)\n"
                        "open('junk-%s.bin' % uuid.uuid4().hex, 'wb').write(b'j' * (8 << 20))\n"
                        "print('host-only there:', os.path.exists('host-only.bin'))\n";
    long long size[2] = {0, 0};
    for (int i = 0; i < 2; i++) {
        if (!s_run(dir, session, code2, NULL, &errs))
            goto out;
        CHECK_CONTAINS(errs, "host-only there: False");
        CHECK_CONTAINS(errs, "'host-only.bin' (40.0 MiB) not copied into the kernel's work dir");
        size[i] = s_bytes(files, 0);
        free(errs);
        errs = NULL;
        CHECK(!s_exists(files, "gone.txt"));
        CHECK(!s_exists(files, "data.csv"));
        CHECK(s_exists(files, "host-only.bin"));
        snprintf(p, sizeof p, "%s/keep/result.txt", files);
        CHECK(s_exists(files, "keep/result.txt"));
    }
    fprintf(stderr, "  files/ after the first resume %.1f MiB, after the second %.1f MiB\n",
            (double)size[0] / (1 << 20), (double)size[1] / (1 << 20));
    CHECK_EQ(size[1], size[0]);
    CHECK_LT(size[1], 10 << 20); /* one junk file of 8 MiB, the rest small (host-only.bin is sparse) */
out:
    free(errs);
    korch_fs_rm_tree(dir);
}
