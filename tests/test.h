/*  A small test harness: tests register themselves, the runner forks one
 *  child per test (a crash or hang fails that test only) and ends with the
 *  line "N passed, N failed".
 *
 *  CHECK* macros report both sides on failure and return whether they held,
 *  so a test can stop early: if (!CHECK(k)) goto out;
 */
#ifndef KORCH_TEST_H
#define KORCH_TEST_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

typedef void (*korch_test_fn)(void);

void korch_test_register(const char *name, const char *file, korch_test_fn fn, int timeout_s);
/* Register fn a second time as "docker:NAME", run with KORCH_TEST_LAUNCHER=docker. */
void korch_test_register_docker(const char *name, const char *file, korch_test_fn fn, int timeout_s);
/* The same as "sandbox:NAME", run with KORCH_TEST_LAUNCHER=sandbox. */
void korch_test_register_sandbox(const char *name, const char *file, korch_test_fn fn, int timeout_s);
bool korch_test_check(bool ok, const char *file, int line, const char *expr);
bool korch_test_check_int(long long a, long long b, const char *op, bool ok, const char *file, int line,
                          const char *ea, const char *eb);
bool korch_test_check_str(const char *a, const char *b, bool want_equal, const char *file, int line,
                          const char *ea, const char *eb);
bool korch_test_check_contains(const char *hay, const char *needle, const char *file, int line,
                               const char *eh, const char *en);

/* Where the repository is (the runner's cwd must be its root or KORCH_ROOT set). */
const char *korch_test_root(void);

/* Run argv (NULL-terminated) with the given stdin text (may be NULL); capture
   stdout (and stderr when err is non-NULL) as new malloc'd strings. Returns the
   exit status (>=0), or -1 when it could not be run / was killed by a signal. */
int korch_test_run(const char *const *argv, const char *input, char **out, char **err, int timeout_s);
/* A fresh dir from mkdtemp(TEMPLATE), the caller's to free with
   korch_test_rmdir (which removes it and all in it); NULL on failure. */
char *korch_test_mkdir(const char *template_);
void korch_test_rmdir(char *dir);

/* Start argv (NULL-terminated) in the background, its stdout on a pipe, and
   read its first line (without the newline) into line, waiting at most
   timeout_s. *out_fd keeps the pipe's read end (NULL: closed). Returns the
   pid, or -1 when it printed no line in time (it is killed then). */
int korch_test_spawn_line(const char *const *argv, char *line, size_t len, int timeout_s, int *out_fd);

/* /proc/PID/cmdline into buf, its NULs as spaces (tests/testproc.c);
   false when there is no such process. */
bool korch_test_cmdline(pid_t pid, char *buf, size_t len);
/* The first process of uid whose command line holds needle ("ipykernel"),
   0 when there is none. */
pid_t korch_test_pid_of_uid(uid_t uid, const char *needle);
/* As uid:gid (a forked child), attack the kernel of host pid kpid through
   /proc/KPID/root: read files[0] (1), read files[1] (2), create files[2]
   (4), signal it (8), read its environ (16). The exit code: a bit per
   attack that worked, 255 when the child could not become uid:gid. */
int korch_test_attack_as(uid_t uid, gid_t gid, pid_t kpid, const char *const files[3]);

/* How many checks of the running test have failed so far. */
int korch_test_failures(void);

/* The runner sets KORCH_TEST_NEXT in each test's environment to the name of
   the next test it will run ("" after the last): a test may leave a costly
   setup up for that one (tests/swarm_fixture.h: s_swarm_done). */

/* tests/SUBDIR's npm packages installed: `npm ci` from its committed
   package-lock.json unless every path of marks (relative to its
   node_modules) is there. One install at a time on the machine (an flock),
   so two lanes never run npm ci into one dir; a failure is a check failed,
   with npm's output. */
bool korch_test_npm_ready(const char *subdir, const char *const *marks, int timeout_s);

/* Path of the korch binary under test (build dir beside the test binary). */
const char *korch_test_korch_bin(void);

/* A unit test needs no kernel, docker or browser (peers such as the scripted
   LLM server are fine): `korch-test --unit` and `make check` run only these.
   A file whose tests all are defines KORCH_TEST_UNIT before including this. */
void korch_test_register_unit(const char *name, const char *file, korch_test_fn fn, int timeout_s);
#ifdef KORCH_TEST_UNIT
#define KORCH_TEST_REGISTER_ korch_test_register_unit
#else
#define KORCH_TEST_REGISTER_ korch_test_register
#endif

#define TEST_T(name, timeout_s)                                                             \
    static void test_##name(void);                                                           \
    __attribute__((constructor)) static void test_register_##name(void)                      \
    { KORCH_TEST_REGISTER_(#name, __FILE__, test_##name, timeout_s); }                       \
    static void test_##name(void)
#define TEST(name) TEST_T(name, 60)

/* A test that must have the machine to itself under `korch-test -jN`: it
   counts every kernel of the runtime dir or of the host, measures time
   against a bound, or takes a lot of one resource (see tests/runner.c). */
void korch_test_register_solo(const char *name, const char *file, korch_test_fn fn, int timeout_s);
#define TEST_SOLO_T(name, timeout_s)                                                        \
    static void test_##name(void);                                                           \
    __attribute__((constructor)) static void test_register_##name(void)                      \
    { korch_test_register_solo(#name, __FILE__, test_##name, timeout_s); }                   \
    static void test_##name(void)

/* A kernel test that must pass with every launcher: registered as NAME
   (local), docker:NAME (the fixture starts the kernel in a container) and
   sandbox:NAME (in bubblewrap and a cgroup). */
#define TEST_BOTH_T(name, timeout_s)                                                        \
    static void test_##name(void);                                                           \
    __attribute__((constructor)) static void test_register_##name(void)                      \
    {                                                                                        \
        korch_test_register(#name, __FILE__, test_##name, timeout_s);                        \
        korch_test_register_docker(#name, __FILE__, test_##name, timeout_s);                 \
        korch_test_register_sandbox(#name, __FILE__, test_##name, timeout_s);                \
    }                                                                                        \
    static void test_##name(void)
#define TEST_BOTH(name) TEST_BOTH_T(name, 60)

#define CHECK(c) korch_test_check(!!(c), __FILE__, __LINE__, #c)
#define CHECK_INT_(a, op, b) ({ long long a_ = (long long)(a), b_ = (long long)(b); \
    korch_test_check_int(a_, b_, #op, a_ op b_, __FILE__, __LINE__, #a, #b); })
#define CHECK_EQ(a, b) CHECK_INT_(a, ==, b)
#define CHECK_NE(a, b) CHECK_INT_(a, !=, b)
#define CHECK_LT(a, b) CHECK_INT_(a, <, b)
#define CHECK_LE(a, b) CHECK_INT_(a, <=, b)
#define CHECK_GT(a, b) CHECK_INT_(a, >, b)
#define CHECK_GE(a, b) CHECK_INT_(a, >=, b)
#define CHECK_STREQ(a, b) korch_test_check_str((a), (b), true, __FILE__, __LINE__, #a, #b)
#define CHECK_STRNE(a, b) korch_test_check_str((a), (b), false, __FILE__, __LINE__, #a, #b)
#define CHECK_CONTAINS(h, n) korch_test_check_contains((h), (n), __FILE__, __LINE__, #h, #n)

#endif
