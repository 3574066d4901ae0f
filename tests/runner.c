/*  The test runner: one forked child per test, a timeout per test, and the
 *  closing line "N passed, N failed".
 *  Usage: korch-test [--unit] [-jN] [--list] [SUBSTRING | ~SUBSTRING ...]
 *  (the tests whose names hold any SUBSTRING, or all, but none holding a
 *  ~SUBSTRING)
 *
 *  -jN (or KORCH_TEST_JOBS=N) runs up to N tests at once, each in a runtime
 *  dir of its lane (KORCH_RUNTIME_DIR/jK), its output held until it ends and
 *  then printed whole with its line. The "solo" tests run after the others:
 *  the docker and swarm ones (one engine, one swarm, instance-wide sweeps),
 *  those named by TEST_SOLO_T, the files that count host-wide things, and
 *  the browser ones (JupyterLab, Notebook, Chromium: each takes a core of
 *  its own and has timeouts sized for that). Each holds what it needs alone
 *  (s_holds): the engine, the swarm, a browser's core, or the whole machine.
 *  Two solo tests run side by side only when they hold nothing in common
 *  and their pair is one of s_beside (KORCH_TEST_BESIDE=none runs them one
 *  at a time, as before); each kind keeps its registered order.
 *
 *  KORCH_TEST_CHECKS=FILE: each test that ends appends "NAME CHECKS FAILED"
 *  to FILE, the checks it made (so a reshaped test can be shown to check
 *  as much as before).
 */
#include "test.h"
#include "korch/korch.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <dirent.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_TESTS 2048

typedef struct {
    const char *name;
    const char *file;
    korch_test_fn fn;
    int timeout_s;
    const char *launcher;   /* run with KORCH_TEST_LAUNCHER=this ("docker", "sandbox"), NULL = unset */
    bool unit;              /* needs no kernel, docker or browser: run by --unit (make check) */
    bool solo;              /* runs with no other test beside it (see the top) */
} test_t;

static test_t s_tests[MAX_TESTS];
static int s_ntests;
static int s_failed_checks;
static long s_checks; /* made by the running test */

void korch_test_register(const char *name, const char *file, korch_test_fn fn, int timeout_s)
{
    if (s_ntests < MAX_TESTS)
        s_tests[s_ntests++] = (test_t){name, file, fn, timeout_s, NULL, false, false};
}

void korch_test_register_solo(const char *name, const char *file, korch_test_fn fn, int timeout_s)
{
    if (s_ntests < MAX_TESTS)
        s_tests[s_ntests++] = (test_t){name, file, fn, timeout_s, NULL, false, true};
}

void korch_test_register_unit(const char *name, const char *file, korch_test_fn fn, int timeout_s)
{
    if (s_ntests < MAX_TESTS)
        s_tests[s_ntests++] = (test_t){name, file, fn, timeout_s, NULL, true, false};
}

/* Register fn as "LAUNCHER:NAME", run with KORCH_TEST_LAUNCHER=launcher. */
static void s_register_variant(const char *launcher, const char *name, const char *file, korch_test_fn fn,
                               int timeout_s)
{
    size_t len = strlen(launcher) + strlen(name) + 2;
    char *full = malloc(len);
    if (!full || s_ntests >= MAX_TESTS)
        return;
    snprintf(full, len, "%s:%s", launcher, name);
    s_tests[s_ntests++] = (test_t){full, file, fn, timeout_s, launcher, false, false};
}

void korch_test_register_docker(const char *name, const char *file, korch_test_fn fn, int timeout_s)
{
    s_register_variant("docker", name, file, fn, timeout_s);
}

void korch_test_register_sandbox(const char *name, const char *file, korch_test_fn fn, int timeout_s)
{
    s_register_variant("sandbox", name, file, fn, timeout_s);
}

int korch_test_failures(void)
{
    return s_failed_checks;
}

bool korch_test_check(bool ok, const char *file, int line, const char *expr)
{
    s_checks++;
    if (!ok) {
        s_failed_checks++;
        fprintf(stderr, "  %s:%d: check failed: %s\n", file, line, expr);
    }
    return ok;
}

bool korch_test_check_int(long long a, long long b, const char *op, bool ok, const char *file, int line,
                          const char *ea, const char *eb)
{
    s_checks++;
    if (!ok) {
        s_failed_checks++;
        fprintf(stderr, "  %s:%d: check failed: %s %s %s (%lld vs %lld)\n", file, line, ea, op, eb, a, b);
    }
    return ok;
}

bool korch_test_check_str(const char *a, const char *b, bool want_equal, const char *file, int line,
                          const char *ea, const char *eb)
{
    s_checks++;
    bool eq = (a && b) ? strcmp(a, b) == 0 : a == b;
    if (eq != want_equal) {
        s_failed_checks++;
        fprintf(stderr, "  %s:%d: check failed: %s %s %s\n    left:  \"%.400s\"\n    right: \"%.400s\"\n", file, line,
                ea, want_equal ? "==" : "!=", eb, a ? a : "(null)", b ? b : "(null)");
    }
    return eq == want_equal;
}

bool korch_test_check_contains(const char *hay, const char *needle, const char *file, int line,
                               const char *eh, const char *en)
{
    s_checks++;
    bool ok = hay && needle && strstr(hay, needle);
    if (!ok) {
        s_failed_checks++;
        fprintf(stderr, "  %s:%d: check failed: %s contains %s\n    haystack: \"%.600s\"\n    needle:   \"%s\"\n",
                file, line, eh, en, hay ? hay : "(null)", needle ? needle : "(null)");
    }
    return ok;
}

const char *korch_test_root(void)
{
    const char *r = getenv("KORCH_ROOT");
    return r && *r ? r : ".";
}

const char *korch_test_korch_bin(void)
{
    static char path[PATH_MAX + 8];
    if (!path[0]) {
        char self[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        if (n > 0) {
            self[n] = 0;
            char *slash = strrchr(self, '/');
            if (slash)
                *slash = 0;
            snprintf(path, sizeof path, "%s/korch", self);
        } else {
            snprintf(path, sizeof path, "build/korch");
        }
    }
    return path;
}

/* Read what a pipe has into a growing string. false on EOF. */
static bool s_drain(int fd, char **buf, size_t *len)
{
    char tmp[65536];
    ssize_t n = read(fd, tmp, sizeof tmp);
    if (n <= 0)
        return n < 0 && (errno == EINTR || errno == EAGAIN);
    char *nb = realloc(*buf, *len + (size_t)n + 1);
    if (!nb)
        return false;
    memcpy(nb + *len, tmp, (size_t)n);
    *len += (size_t)n;
    nb[*len] = 0;
    *buf = nb;
    return true;
}

int korch_test_run(const char *const *argv, const char *input, char **out, char **err, int timeout_s)
{
    int pin[2], pout[2], perr[2];
    if (pipe2(pin, O_CLOEXEC) || pipe2(pout, O_CLOEXEC) || pipe2(perr, O_CLOEXEC))
        return -1;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        dup2(pin[0], 0);
        dup2(pout[1], 1);
        dup2(err ? perr[1] : 2, 2);
        setpgid(0, 0);
        execvp(argv[0], (char *const *)argv);
        fprintf(stderr, "cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(pin[0]);
    close(pout[1]);
    close(perr[1]);
    if (input) {
        size_t left = strlen(input);
        const char *p = input;
        signal(SIGPIPE, SIG_IGN);
        while (left) {
            ssize_t n = write(pin[1], p, left);
            if (n <= 0)
                break;
            p += n;
            left -= (size_t)n;
        }
    }
    close(pin[1]);
    char *obuf = calloc(1, 1), *ebuf = calloc(1, 1);
    size_t olen = 0, elen = 0;
    bool oopen = true, eopen = true;
    time_t deadline = time(NULL) + timeout_s;
    while (oopen || eopen) {
        struct pollfd fds[2] = {{pout[0], POLLIN, 0}, {perr[0], POLLIN, 0}};
        int left_ms = (int)(deadline - time(NULL)) * 1000;
        if (left_ms <= 0)
            break;
        int n = poll(fds, 2, left_ms);
        if (n < 0 && errno != EINTR)
            break;
        if (oopen && (fds[0].revents & (POLLIN | POLLHUP)))
            oopen = s_drain(pout[0], &obuf, &olen);
        if (eopen && (fds[1].revents & (POLLIN | POLLHUP)))
            eopen = s_drain(perr[0], &ebuf, &elen);
    }
    close(pout[0]);
    close(perr[0]);
    int status = 0;
    if (oopen || eopen) {
        fprintf(stderr, "  command timed out after %d s: %s\n", timeout_s, argv[0]);
        kill(-pid, SIGKILL);
    }
    waitpid(pid, &status, 0);
    if (out)
        *out = obuf;
    else
        free(obuf);
    if (err)
        *err = ebuf;
    else
        free(ebuf);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int korch_test_spawn_line(const char *const *argv, char *line, size_t len, int timeout_s, int *out_fd)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0)
        return -1;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        dup2(p[1], 1);
        execvp(argv[0], (char *const *)argv);
        fprintf(stderr, "cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(p[1]);
    size_t n = 0;
    bool have = false;
    time_t deadline = time(NULL) + timeout_s;
    while (!have && n + 1 < len && time(NULL) < deadline) {
        struct pollfd pfd = {p[0], POLLIN, 0};
        if (poll(&pfd, 1, 500) <= 0)
            continue;
        ssize_t r = read(p[0], line + n, 1);
        if (r <= 0)
            break;
        if (line[n] == '\n')
            have = true;
        else
            n++;
    }
    line[n] = 0;
    if (!have) {
        close(p[0]);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return -1;
    }
    if (out_fd)
        *out_fd = p[0];
    else
        close(p[0]);
    return pid;
}

static double s_ms_since(struct timespec *t0)
{
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) * 1e3 + (double)(t1.tv_nsec - t0->tv_nsec) / 1e6;
}

/* Is name selected by the filters: any SUBSTRING given matches (or none is
   given) and no ~SUBSTRING does. */
static bool s_selected(const char *name, int argc, char **argv)
{
    bool any = false, hit = false;
    for (int i = 1; i < argc; i++) {
        if (argv[i][0] == '~') {
            if (strstr(name, argv[i] + 1))
                return false;
            continue;
        }
        any = true;
        hit |= strstr(name, argv[i]) != NULL;
    }
    return !any || hit;
}

/* The test swarm is one per machine (tests/swarm_fixture.h): a run that
   selects a swarm test holds /tmp/korch-swarm.lock (flock) for its whole
   run, so two runs never bring it up, use or take it down at once. A run
   started under `flock /tmp/korch-swarm.lock ...` already holds it through
   the descriptor it inherited: that one is used (a second open would wait
   on ourselves). The descriptor stays open until exit. */
#define S_SWARM_LOCK "/tmp/korch-swarm.lock"

static void s_swarm_lock(void)
{
    struct stat want, st;
    int fd = -1;
    if (stat(S_SWARM_LOCK, &want) == 0) {
        DIR *d = opendir("/proc/self/fd");
        struct dirent *e;
        while (d && fd < 0 && (e = readdir(d))) {
            int n = (int)strtol(e->d_name, NULL, 10);
            if (n > 2 && n != dirfd(d) && fstat(n, &st) == 0 && st.st_dev == want.st_dev && st.st_ino == want.st_ino)
                fd = n;
        }
        if (d)
            closedir(d);
    }
    if (fd < 0)
        fd = open(S_SWARM_LOCK, O_RDONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        fprintf(stderr, "runner: cannot open '%s': %s (the swarm tests run unlocked)\n", S_SWARM_LOCK, strerror(errno));
        return;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        fprintf(stderr, "runner: waiting for the test swarm: another run holds '%s'\n", S_SWARM_LOCK);
        while (flock(fd, LOCK_EX) != 0 && errno == EINTR)
            ;
    }
}

/* What a test holds while it runs (see the top); 0: it shares the machine. */
#define S_HOLD_DOCKER 1u  /* the host's engine: one image, engine-wide sweeps */
#define S_HOLD_SWARM 2u   /* the test swarm (tests/swarm_fixture.h) */
#define S_HOLD_BROWSER 4u /* a core for Chromium, JupyterLab or Notebook */
#define S_HOLD_ALL 7u     /* the machine: host-wide counts, time bounds */

static unsigned s_holds(const test_t *t)
{
    static const char *const browsers[] = {"chromium", "jupyterlab", "notebook_", "browser", "web_"};
    /* files whose tests count the host's sandbox mounts, cgroups or kernels, kill the fork template or take free ports by binding and releasing them (the Hub) */
    static const char *const files[] = {"tests/test_host.c", "tests/test_sandbox.c", "tests/test_isolation.c",
                                        "tests/test_fork.c", "tests/test_hub.c"};
    if (t->solo)
        return S_HOLD_ALL;
    for (size_t i = 0; i < sizeof files / sizeof *files; i++)
        if (!strcmp(t->file, files[i]))
            return S_HOLD_ALL;
    unsigned h = 0;
    if ((t->launcher && !strcmp(t->launcher, "docker")) || strstr(t->name, "docker"))
        h |= S_HOLD_DOCKER; /* swarm_stack_file_under_docker_compose: the host's engine, not the swarm */
    else if (strstr(t->name, "swarm"))
        h |= S_HOLD_SWARM;
    for (size_t i = 0; i < sizeof browsers / sizeof *browsers; i++)
        if (strstr(t->name, browsers[i]))
            h |= S_HOLD_BROWSER;
    return h;
}

/* Is t one to run in the solo phase (see the top)? */
static bool s_solo(const test_t *t)
{
    return s_holds(t) != 0;
}

/* What --list prints for what a test holds. */
static const char *s_holds_name(unsigned h)
{
    static const char *const names[] = {"", " (solo: docker)", " (solo: swarm)", " (solo: docker+swarm)",
                                        " (solo: browser)", " (solo: docker+browser)", " (solo: swarm+browser)",
                                        " (solo: alone)"};
    return names[h & S_HOLD_ALL];
}

/* The pairs of solo tests that may run side by side (the union of what
   the two hold is one of these): KORCH_TEST_BESIDE="docker+browser,..."
   or "none"; by default the list below, measured in docs/testing.md. */
#define S_BESIDE_DEFAULT "docker+browser" /* swarm+browser timed out at load 30 (session 8) */
static unsigned s_beside[8];
static int s_nbeside;

static void s_beside_parse(void)
{
    const char *v = getenv("KORCH_TEST_BESIDE");
    char buf[256];
    snprintf(buf, sizeof buf, "%s", v && *v ? v : S_BESIDE_DEFAULT);
    char *save = NULL;
    for (char *pair = strtok_r(buf, ",", &save); pair && s_nbeside < 8; pair = strtok_r(NULL, ",", &save)) {
        unsigned m = 0;
        char *save2 = NULL;
        for (char *w = strtok_r(pair, "+", &save2); w; w = strtok_r(NULL, "+", &save2))
            m |= !strcmp(w, "docker") ? S_HOLD_DOCKER : !strcmp(w, "swarm") ? S_HOLD_SWARM
               : !strcmp(w, "browser") ? S_HOLD_BROWSER : 0;
        if (m && m != S_HOLD_ALL)
            s_beside[s_nbeside++] = m;
    }
}

/* May a solo test holding h start while the running ones hold held? */
static bool s_fits(unsigned h, unsigned held)
{
    if (!held)
        return true;
    if (h & held)
        return false;
    for (int i = 0; i < s_nbeside; i++)
        if ((h | held) == ((h | held) & s_beside[i]))
            return true;
    return false;
}

typedef struct {
    int test;               /* index in s_tests, -1 = a free lane */
    pid_t pid;
    struct timespec t0;
    unsigned holds;         /* s_holds of the test (0: a shared one) */
    FILE *out;              /* the test's stdout and stderr while it runs (lanes > 1) */
} s_lane_t;

/* KORCH_TEST_CHECKS=FILE: "NAME CHECKS FAILED" appended (one write, O_APPEND). */
static void s_count_checks(const char *name)
{
    const char *path = getenv("KORCH_TEST_CHECKS");
    int fd = path && *path ? open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600) : -1;
    if (fd < 0)
        return;
    char line[512];
    int n = snprintf(line, sizeof line, "%s %ld %d\n", name, s_checks, s_failed_checks);
    if (n > 0 && n < (int)sizeof line && write(fd, line, (size_t)n) != n)
        fprintf(stderr, "KORCH_TEST_CHECKS: %s: %s\n", path, strerror(errno));
    close(fd);
}

/* Start test i in lane l; out NULL: the test writes to ours. */
static void s_start(s_lane_t *l, int lane, int i, const char *next, const char *rt)
{
    test_t *t = &s_tests[i];
    l->test = i;
    clock_gettime(CLOCK_MONOTONIC, &l->t0);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        setpgid(0, 0);
        if (l->out) {
            dup2(fileno(l->out), 1);
            dup2(fileno(l->out), 2);
        }
        if (rt) {
            char dir[PATH_MAX];
            snprintf(dir, sizeof dir, "%s/j%d", rt, lane);
            mkdir(dir, 0700);
            setenv("KORCH_RUNTIME_DIR", dir, 1);
        }
        setenv("KORCH_TEST_NEXT", next, 1);
        if (t->launcher)
            setenv("KORCH_TEST_LAUNCHER", t->launcher, 1);
        else
            unsetenv("KORCH_TEST_LAUNCHER");
        alarm((unsigned)t->timeout_s);
        s_failed_checks = 0;
        t->fn();
        fflush(stdout);
        fflush(stderr);
        s_count_checks(t->name);
        _exit(s_failed_checks ? 1 : 0);
    }
    l->pid = pid;
}

/* Lane l's test ended with status: its output, then its line. */
static bool s_finish(s_lane_t *l, int status)
{
    test_t *t = &s_tests[l->test];
    kill(-l->pid, SIGKILL); /* anything the test left behind */
    if (l->out) {
        char buf[65536];
        size_t n;
        fflush(l->out);
        rewind(l->out);
        while ((n = fread(buf, 1, sizeof buf, l->out)) > 0)
            fwrite(buf, 1, n, stdout);
        fclose(l->out);
        l->out = NULL;
    }
    bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    double ms = s_ms_since(&l->t0);
    if (ok)
        printf("ok   %-44s %8.0f ms\n", t->name, ms);
    else if (WIFSIGNALED(status))
        printf("FAIL %-44s %8.0f ms (%s%s)\n", t->name, ms, strsignal(WTERMSIG(status)),
               WTERMSIG(status) == SIGALRM ? ": timed out" : "");
    else
        printf("FAIL %-44s %8.0f ms (%s)\n", t->name, ms, t->file);
    fflush(stdout);
    l->test = -1;
    return ok;
}

int main(int argc, char **argv)
{
    int passed = 0, failed = 0, jobs = 1;
    const char *envj = getenv("KORCH_TEST_JOBS");
    if (envj && *envj)
        jobs = (int)strtol(envj, NULL, 10);
    bool unit_only = false;
    while (argc > 1 && (strcmp(argv[1], "--unit") == 0 || strncmp(argv[1], "-j", 2) == 0)) {
        if (argv[1][1] == 'j')
            jobs = (int)strtol(argv[1] + 2, NULL, 10);
        else
            unit_only = true;
        argv[1] = argv[0];
        argv++;
        argc--;
    }
    if (jobs < 1 || jobs > 16)
        jobs = jobs < 1 ? 1 : 16;
    if (argc > 1 && strcmp(argv[1], "--list") == 0) { /* korch-test --list [FILTER...]: the names, one a line */
        for (int i = 0; i < s_ntests; i++)
            if (s_selected(s_tests[i].name, argc - 1, argv + 1))
                printf("%s%s%s\n", s_tests[i].name, s_tests[i].unit ? " (unit)" : "", s_holds_name(s_holds(&s_tests[i])));
        return 0;
    }
    korch_init();
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (int i = 0; i < s_ntests; i++)
        if (!strncmp(s_tests[i].name, "swarm_", 6) && s_selected(s_tests[i].name, argc, argv) &&
            (!unit_only || s_tests[i].unit)) {
            s_swarm_lock();
            break;
        }
    /* The order run: the selected tests, those that share the machine
       first (lanes > 1), then the solo ones, those that hold the whole
       machine first; each keeps its registered order. */
    static int order[MAX_TESTS];
    static bool started[MAX_TESTS];
    int n = 0;
    for (int pass = 0; pass < 3; pass++)
        for (int i = 0; i < s_ntests; i++) {
            test_t *t = &s_tests[i];
            if (!s_selected(t->name, argc, argv) || (unit_only && !t->unit))
                continue;
            int want = jobs == 1 ? 0 : !s_solo(t) ? 0 : s_holds(t) == S_HOLD_ALL ? 1 : 2;
            if (want == pass)
                order[n++] = i;
        }
    s_beside_parse();
    const char *rt = jobs > 1 ? getenv("KORCH_RUNTIME_DIR") : NULL;
    s_lane_t lanes[16];
    for (int l = 0; l < jobs; l++)
        lanes[l] = (s_lane_t){.test = -1};
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    int first = 0, running = 0, shared_running = 0;
    unsigned held = 0; /* what the running solo tests hold */
    while (first < n || running) {
        for (int l = 0; l < jobs && first < n; l++) {
            if (lanes[l].test >= 0)
                continue;
            /* the first test not yet started that fits: the shared ones
               while any is left, then a solo one beside what runs */
            int k = -1;
            for (int j = first; j < n && k < 0; j++) {
                if (started[j])
                    continue;
                const test_t *t = &s_tests[order[j]];
                bool solo = jobs > 1 && s_solo(t);
                if (!solo)
                    k = j;
                else if (shared_running)
                    break; /* the solo ones start when the others are done */
                else if (s_fits(s_holds(t), held))
                    k = j;
            }
            if (k < 0)
                break;
            /* The next test this run will run that holds what this one
               does: a test may leave a shared setup (the swarm cluster) up
               for it instead of tearing it down. */
            unsigned h = jobs > 1 ? s_holds(&s_tests[order[k]]) : S_HOLD_ALL;
            const char *after = "";
            for (int j = k + 1; j < n && !*after; j++)
                if (!started[j] && (!h || (s_holds(&s_tests[order[j]]) & h)))
                    after = s_tests[order[j]].name;
            started[k] = true;
            while (first < n && started[first])
                first++;
            lanes[l].out = jobs > 1 ? tmpfile() : NULL;
            lanes[l].holds = h;
            s_start(&lanes[l], l, order[k], after, h == S_HOLD_ALL ? NULL : rt);
            running++;
            if (h)
                held |= h;
            else
                shared_running++;
        }
        int status = 0;
        pid_t pid = waitpid(-1, &status, 0);
        if (pid < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        for (int l = 0; l < jobs; l++)
            if (lanes[l].test >= 0 && lanes[l].pid == pid) {
                if (lanes[l].holds)
                    held &= ~lanes[l].holds;
                else
                    shared_running--;
                if (s_finish(&lanes[l], status))
                    passed++;
                else
                    failed++;
                running--;
            }
    }
    if (jobs > 1)
        printf("%d tests in %.0f s on %d lanes\n", passed + failed, s_ms_since(&start) / 1e3, jobs);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

static bool s_npm_has(const char *dir, const char *const *marks)
{
    for (size_t i = 0; marks[i]; i++) {
        char path[2 * PATH_MAX];
        snprintf(path, sizeof path, "%s/node_modules/%s", dir, marks[i]);
        if (access(path, R_OK) != 0)
            return false;
    }
    return true;
}

bool korch_test_npm_ready(const char *subdir, const char *const *marks, int timeout_s)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/tests/%s", korch_test_root(), subdir);
    if (s_npm_has(dir, marks))
        return true;
    int fd = open("/tmp/korch-test-npm.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    while (fd >= 0 && flock(fd, LOCK_EX) != 0 && errno == EINTR)
        ;
    bool ok = s_npm_has(dir, marks); /* another lane may have installed it meanwhile */
    if (!ok) {
        const char *argv[] = {"npm", "ci", "--no-audit", "--no-fund", "--prefix", dir, NULL};
        char *out = NULL, *err = NULL;
        int rc = korch_test_run(argv, NULL, &out, &err, timeout_s);
        ok = CHECK_EQ(rc, 0) && CHECK(s_npm_has(dir, marks));
        if (!ok)
            fprintf(stderr, "  `npm ci --prefix tests/%s` failed (is the npm registry reachable?)\n%s\n%s\n", subdir,
                    out ? out : "", err ? err : "");
        free(out);
        free(err);
    }
    if (fd >= 0)
        close(fd);
    return ok;
}

char *korch_test_mkdir(const char *template_)
{
    char *d = strdup(template_);
    if (d && !mkdtemp(d)) {
        free(d);
        return NULL;
    }
    return d;
}

void korch_test_rmdir(char *dir)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK_EQ(system(cmd), 0);
    free(dir);
}
