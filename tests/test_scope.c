/*  korch_runtime_scope (instance.h): the identity of a runtime base's lock
 *  domain, which the korch.scope labels and the cgroup directories carry. */
#include "test.h"
#include "korch/cgroup.h"
#include "korch/instance.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static bool s_is_id(const char *s)
{
    if (strlen(s) != KORCH_SCOPE_LEN - 1 || strncmp(s, "rt-", 3) != 0)
        return false;
    for (s += 3; *s; s++)
        if (!strchr("0123456789abcdef", *s))
            return false;
    return true;
}

static void s_write(const char *path, const char *text, mode_t mode)
{
    unlink(path);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, mode);
    if (CHECK(fd >= 0)) {
        CHECK_EQ(write(fd, text, strlen(text)), (ssize_t)strlen(text));
        fchmod(fd, mode);
        close(fd);
    }
}

/* Made once, kept, the same by any path to the directory and for the
   cgroups; another base has another; 16 racing korchs agree on one. */
TEST_T(scope_made_once_kept_and_shared, 30)
{
    char a[] = "/tmp/korch-scope-a-XXXXXX", b[] = "/tmp/korch-scope-b-XXXXXX";
    char sa[KORCH_SCOPE_LEN], sa2[KORCH_SCOPE_LEN], sb[KORCH_SCOPE_LEN], cg[32], path[PATH_MAX], link[PATH_MAX];
    korch_err_t err = {0};
    struct stat st;
    if (!CHECK(mkdtemp(a)) || !CHECK(mkdtemp(b)))
        return;
    CHECK_EQ(korch_runtime_scope(a, sa, sizeof sa, &err), KORCH_OK);
    CHECK(s_is_id(sa));
    snprintf(path, sizeof path, "%s/scope", a);
    if (CHECK_EQ(lstat(path, &st), 0)) {
        CHECK(S_ISREG(st.st_mode));
        CHECK_EQ(st.st_mode & 0777, 0600);
    }
    CHECK_EQ(korch_runtime_scope(a, sa2, sizeof sa2, &err), KORCH_OK);
    CHECK_STREQ(sa2, sa);
    /* the same dir by another path (a link to it) is the same domain */
    snprintf(link, sizeof link, "%s-link", a);
    unlink(link);
    CHECK_EQ(symlink(a, link), 0);
    CHECK_EQ(korch_runtime_scope(link, sa2, sizeof sa2, &err), KORCH_OK);
    CHECK_STREQ(sa2, sa);
    unlink(link);
    /* one helper: the cgroups' scope is the same id */
    CHECK_EQ(korch_cgroup_scope(a, cg, sizeof cg, &err), KORCH_OK);
    CHECK_STREQ(cg, sa);
    CHECK_EQ(korch_runtime_scope(b, sb, sizeof sb, &err), KORCH_OK);
    CHECK(s_is_id(sb));
    CHECK_STRNE(sb, sa);
    /* the NULL base is korch_runtime_base's */
    char saved[PATH_MAX] = "";
    const char *rt = getenv("KORCH_RUNTIME_DIR");
    if (rt)
        snprintf(saved, sizeof saved, "%s", rt);
    setenv("KORCH_RUNTIME_DIR", b, 1);
    CHECK_EQ(korch_runtime_scope(NULL, sa2, sizeof sa2, &err), KORCH_OK);
    CHECK_STREQ(sa2, sb);
    if (saved[0])
        setenv("KORCH_RUNTIME_DIR", saved, 1);
    else
        unsetenv("KORCH_RUNTIME_DIR");
    CHECK_EQ(korch_runtime_scope(a, sa2, 8, &err), KORCH_E_TOOBIG);

    /* 16 korchs starting at once in a fresh base agree on one id */
    snprintf(path, sizeof path, "%s/scope", b);
    unlink(path);
    int fds[2];
    CHECK_EQ(pipe(fds), 0);
    pid_t kids[16];
    for (int i = 0; i < 16; i++) {
        kids[i] = fork();
        if (kids[i] == 0) {
            char s[KORCH_SCOPE_LEN] = "";
            char line[KORCH_SCOPE_LEN + 1];
            korch_runtime_scope(b, s, sizeof s, NULL);
            snprintf(line, sizeof line, "%-19s\n", s);
            ssize_t w = write(fds[1], line, KORCH_SCOPE_LEN);
            _exit(w == KORCH_SCOPE_LEN ? 0 : 1);
        }
    }
    close(fds[1]);
    for (int i = 0; i < 16; i++) {
        int ws = 0;
        waitpid(kids[i], &ws, 0);
        CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
    }
    char all[16 * KORCH_SCOPE_LEN + 1];
    size_t got = 0;
    ssize_t r;
    while (got < sizeof all - 1 && (r = read(fds[0], all + got, sizeof all - 1 - got)) > 0)
        got += (size_t)r;
    close(fds[0]);
    all[got] = 0;
    CHECK_EQ(got, 16 * KORCH_SCOPE_LEN);
    CHECK_EQ(korch_runtime_scope(b, sb, sizeof sb, &err), KORCH_OK);
    for (size_t off = 0; off + KORCH_SCOPE_LEN <= got; off += KORCH_SCOPE_LEN)
        CHECK_EQ(strncmp(all + off, sb, KORCH_SCOPE_LEN - 1), 0);
    char tmpl[PATH_MAX + 32];
    snprintf(tmpl, sizeof tmpl, "rm -rf '%s' '%s'", a, b);
    CHECK_EQ(system(tmpl), 0);
}

/* A scope file korch did not make is refused, never rewritten nor
   followed: a link (its target untouched), the wrong mode, bad content. */
TEST_T(scope_refuses_what_is_not_korchs, 30)
{
    char a[] = "/tmp/korch-scope-c-XXXXXX", sc[KORCH_SCOPE_LEN], path[PATH_MAX], target[PATH_MAX];
    korch_err_t err = {0};
    struct stat st;
    if (!CHECK(mkdtemp(a)))
        return;
    snprintf(path, sizeof path, "%s/scope", a);
    snprintf(target, sizeof target, "%s/elsewhere", a);
    CHECK_EQ(symlink(target, path), 0);
    CHECK_EQ(korch_runtime_scope(a, sc, sizeof sc, &err), KORCH_E_INVALID);
    CHECK_CONTAINS(err.msg, "is not korch's scope file");
    CHECK_NE(lstat(target, &st), 0); /* nothing written through the link */
    unlink(path);
    err = (korch_err_t){0};
    s_write(path, "rt-0123456789abcdef\n", 0644);
    CHECK_EQ(korch_runtime_scope(a, sc, sizeof sc, &err), KORCH_E_INVALID);
    CHECK_CONTAINS(err.msg, "mode 0600");
    s_write(path, "rt-0123456789ABCDEF\n", 0600);
    CHECK_EQ(korch_runtime_scope(a, sc, sizeof sc, &err), KORCH_E_INVALID);
    s_write(path, "rt-0123456789abcdef0\n", 0600);
    CHECK_EQ(korch_runtime_scope(a, sc, sizeof sc, &err), KORCH_E_INVALID);
    /* a valid one is taken as it is (a copy of a runtime dir shares it) */
    s_write(path, "rt-0123456789abcdef\n", 0600);
    CHECK_EQ(korch_runtime_scope(a, sc, sizeof sc, &err), KORCH_OK);
    CHECK_STREQ(sc, "rt-0123456789abcdef");
    unlink(path);
    rmdir(a);
    /* a base that is not there */
    err = (korch_err_t){0};
    CHECK_EQ(korch_runtime_scope(a, sc, sizeof sc, &err), KORCH_E_IO);
    CHECK_CONTAINS(err.msg, "cannot open runtime dir");
}
