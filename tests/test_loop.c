/*  korch_loop's guarantees (loop.h) and the launcher ops' promises
 *  (launcher.h), on real sockets, pipes and processes. */
#define KORCH_TEST_UNIT /* no kernel, docker or browser: make check runs these */
#include "test.h"
#include "korch/conn.h"
#include "korch/fsutil.h"
#include "korch/instance.h"
#include "korch/kernelspec.h"
#include "korch/launcher.h"
#include "korch/log.h"
#include "korch/loop.h"
#include "korch/path.h"

#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------ removal */

typedef struct {
    korch_loop_t *loop;
    int fds[3][2];          /* three pipes, all readable */
    zsock_t *push, *pull;   /* a reader, readable */
    int calls[3], reader_calls, timer_calls, victim_timer_calls, added_calls;
    int victim_timer, self_timer;
    bool removed;
} rm_ctx_t;

static int s_on_added(korch_loop_t *loop, int timer_id, void *arg)
{
    ((rm_ctx_t *)arg)->added_calls++;
    return 0;
}

static int s_on_victim_timer(korch_loop_t *loop, int timer_id, void *arg)
{
    ((rm_ctx_t *)arg)->victim_timer_calls++;
    return 0;
}

static int s_on_reader(korch_loop_t *loop, zsock_t *sock, void *arg)
{
    rm_ctx_t *c = arg;
    c->reader_calls++;
    zstr_free(&(char *){zstr_recv(sock)});
    return 0;
}

/* The first poller to run removes everything else, itself included, and
   adds a timer: in the same round nothing removed may run. */
static int s_on_pipe(korch_loop_t *loop, int fd, void *arg)
{
    rm_ctx_t *c = arg;
    for (int i = 0; i < 3; i++)
        if (fd == c->fds[i][0])
            c->calls[i]++;
    if (!c->removed) {
        c->removed = true;
        for (int i = 0; i < 3; i++)
            korch_loop_poller_end(loop, c->fds[i][0]);
        korch_loop_reader_end(loop, c->pull);
        korch_loop_timer_end(loop, c->victim_timer);
        korch_loop_timer(loop, 0, 1, s_on_added, c);
    }
    return 0;
}

static int s_on_self_timer(korch_loop_t *loop, int timer_id, void *arg)
{
    rm_ctx_t *c = arg;
    c->timer_calls++;
    korch_loop_timer_end(loop, timer_id); /* a repeating timer ends itself */
    return 0;
}

TEST(loop_any_handler_removes_anything_during_a_round)
{
    rm_ctx_t c = {.loop = korch_loop_new()};
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(pipe(c.fds[i]), 0);
        CHECK_EQ(write(c.fds[i][1], "x", 1), 1);
        korch_loop_poller(c.loop, c.fds[i][0], s_on_pipe, &c);
    }
    c.pull = zsock_new_pull("inproc://loop-test");
    c.push = zsock_new_push("inproc://loop-test");
    zstr_send(c.push, "hello");
    zclock_sleep(20);
    korch_loop_reader(c.loop, c.pull, s_on_reader, &c);
    c.victim_timer = korch_loop_timer(c.loop, 0, 0, s_on_victim_timer, &c);
    c.self_timer = korch_loop_timer(c.loop, 1, 0, s_on_self_timer, &c);
    korch_loop_run(c.loop, NULL, NULL, 200);
    /* exactly one poller ran, the reader and the victim timer never did */
    CHECK_EQ(c.calls[0] + c.calls[1] + c.calls[2], 1);
    CHECK_EQ(c.reader_calls, 0);
    CHECK_EQ(c.victim_timer_calls, 0);
    CHECK_EQ(c.added_calls, 1);         /* added from a handler: runs (once) */
    CHECK_EQ(c.timer_calls, 1);         /* removed itself: ran once */
    /* a removed socket may be freed at once: never polled again */
    zsock_destroy(&c.pull);
    korch_loop_run(c.loop, NULL, NULL, 50);
    /* the same fd registered again works */
    korch_loop_poller(c.loop, c.fds[0][0], s_on_pipe, &c);
    korch_loop_run(c.loop, NULL, NULL, 50);
    CHECK_GE(c.calls[0] + c.calls[1] + c.calls[2], 2);
    korch_loop_poller_end(c.loop, c.fds[0][0]);
    zsock_destroy(&c.push);
    for (int i = 0; i < 3; i++) {
        close(c.fds[i][0]);
        close(c.fds[i][1]);
    }
    korch_loop_destroy(&c.loop);
}

/* ---------------------------------------------------------- deadlines */

typedef struct {
    int64_t fired_at;
    int ticks;
} dl_ctx_t;

static int s_on_long(korch_loop_t *loop, int timer_id, void *arg)
{
    ((dl_ctx_t *)arg)->fired_at = korch_now_ms();
    return 0;
}

static int s_on_tick(korch_loop_t *loop, int timer_id, void *arg)
{
    ((dl_ctx_t *)arg)->ticks++;
    return -1; /* break: the caller re-enters korch_loop_run at once */
}

TEST(loop_timers_keep_absolute_deadlines)
{
    korch_loop_t *loop = korch_loop_new();
    dl_ctx_t c = {0};
    int64_t t0 = korch_now_ms();
    korch_loop_timer(loop, 300, 1, s_on_long, &c);
    int tick = korch_loop_timer(loop, 5, 0, s_on_tick, &c);
    /* entered and left about a hundred times: zloop would restart the 300 ms each time */
    while (!c.fired_at && korch_now_ms() - t0 < 2000)
        korch_loop_run(loop, NULL, NULL, 20);
    korch_loop_timer_end(loop, tick);
    CHECK_GT(c.fired_at, 0);
    CHECK_GE(c.fired_at - t0, 300);
    CHECK_LT(c.fired_at - t0, 400);
    CHECK_GT(c.ticks, 20);
    korch_loop_destroy(&loop);
}

/* ------------------------------------------------------- write interest */

typedef struct {
    unsigned seen;
    int calls;
} ev_ctx_t;

static int s_on_ev(korch_loop_t *loop, int fd, unsigned revents, void *arg)
{
    ev_ctx_t *c = arg;
    c->seen |= revents;
    c->calls++;
    return -1;
}

TEST(loop_poller_write_interest)
{
    korch_loop_t *loop = korch_loop_new();
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    ev_ctx_t c = {0};
    /* read interest only: nothing to read, nothing happens */
    korch_loop_poller_ev(loop, sv[0], KORCH_POLL_IN, s_on_ev, &c);
    korch_loop_run(loop, NULL, NULL, 50);
    CHECK_EQ(c.calls, 0);
    /* write interest: writable at once */
    korch_loop_poller_ev(loop, sv[0], KORCH_POLL_IN | KORCH_POLL_OUT, s_on_ev, &c);
    korch_loop_run(loop, NULL, NULL, 50);
    CHECK_EQ(c.calls, 1);
    CHECK_EQ(c.seen, KORCH_POLL_OUT);
    /* back to read only, then data comes */
    c = (ev_ctx_t){0};
    korch_loop_poller_ev(loop, sv[0], KORCH_POLL_IN, s_on_ev, &c);
    korch_loop_run(loop, NULL, NULL, 30);
    CHECK_EQ(c.calls, 0);
    CHECK_EQ(write(sv[1], "x", 1), 1);
    korch_loop_run(loop, NULL, NULL, 50);
    CHECK_EQ(c.calls, 1);
    CHECK(c.seen & KORCH_POLL_IN);
    CHECK(!(c.seen & KORCH_POLL_OUT));
    korch_loop_poller_end(loop, sv[0]);
    close(sv[0]);
    close(sv[1]);
    korch_loop_destroy(&loop);
}

/* ------------------------------------------------------------ re-entry */

static int s_on_reenter(korch_loop_t *loop, int timer_id, void *arg)
{
    korch_loop_run(loop, NULL, NULL, 10); /* the bug the loop refuses */
    return 0;
}

TEST(loop_run_from_a_handler_aborts_with_a_message)
{
    int errp[2];
    CHECK_EQ(pipe(errp), 0);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(errp[1], 2);
        korch_loop_t *loop = korch_loop_new();
        korch_loop_timer(loop, 0, 1, s_on_reenter, NULL);
        korch_loop_run(loop, NULL, NULL, 100);
        _exit(0); /* not reached when the loop keeps its promise */
    }
    close(errp[1]);
    char text[1024] = "";
    size_t n = 0;
    ssize_t r;
    while (n + 1 < sizeof text && (r = read(errp[0], text + n, sizeof text - 1 - n)) > 0)
        n += (size_t)r;
    text[n] = 0;
    close(errp[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK(WIFSIGNALED(st));
    CHECK_EQ(WIFSIGNALED(st) ? WTERMSIG(st) : 0, SIGABRT);
    CHECK_CONTAINS(text, "korch_loop_run called from inside a loop handler");
    CHECK_CONTAINS(text, "not reentrant");
}

/* ------------------------------------------------- the launcher's promises */

static korch_kernelspec_t *s_sleep_spec(void)
{
    korch_kernelspec_t *s = calloc(1, sizeof *s);
    s->name = strdup("sleeper");
    s->dir = strdup("/nonexistent");
    /* (sleep itself would take the connection file for a time and exit 1 at
       once: sh gets it as $0) */
    s->argv = calloc(5, sizeof *s->argv);
    s->argv[0] = strdup("/bin/sh");
    s->argv[1] = strdup("-c");
    s->argv[2] = strdup("exec sleep 30");
    s->argv[3] = strdup("{connection_file}");
    s->env = json_object();
    s->json = json_object();
    return s;
}

typedef struct {
    int started, killed, exits;
    korch_rc_t rc;
    korch_proc_t *proc;
    bool in_call;           /* inside the call that started the op */
    bool early;             /* done ran inside it */
    char why[128];
    bool killed_before_exit;
} op_ctx_t;

static void s_on_start(korch_proc_t *proc, korch_rc_t rc, const korch_err_t *err, void *arg)
{
    op_ctx_t *c = arg;
    c->early |= c->in_call;
    c->started++;
    c->rc = rc;
    c->proc = proc;
}

static void s_on_exit(korch_proc_t *proc, const char *why, void *arg)
{
    op_ctx_t *c = arg;
    c->exits++;
    snprintf(c->why, sizeof c->why, "%s", why);
}

static void s_on_kill(korch_rc_t rc, const korch_err_t *err, void *arg)
{
    op_ctx_t *c = arg;
    c->early |= c->in_call;
    c->killed++;
    c->killed_before_exit = c->exits == 0;
}

static bool s_started(void *arg) { return ((op_ctx_t *)arg)->started > 0; }
static bool s_killed(void *arg) { return ((op_ctx_t *)arg)->killed > 0; }

static bool s_runtime(char *dir, size_t len, korch_conn_t *conn)
{
    char base[PATH_MAX];
    korch_err_t err = {0};
    if (korch_runtime_base(base, sizeof base, &err) != KORCH_OK)
        return false;
    char prefix[PATH_MAX];
    if (korch_path_fmt(dir, len, &err, "%s/loop-%d", base, (int)getpid()) != KORCH_OK ||
        korch_path_join(prefix, sizeof prefix, dir, "k", &err) != KORCH_OK)
        return false;
    mkdir(dir, 0700);
    return korch_conn_init_ipc(conn, prefix, &err) == KORCH_OK;
}

typedef struct {
    int64_t last, worst;        /* a 2 ms timer's ticks: the longest gap */
    int ticks;
    int puts, gets;
    korch_rc_t rc;
    char *data;
    size_t len;
} files_ctx_t;

static int s_on_files_tick(korch_loop_t *loop, int timer_id, void *arg)
{
    files_ctx_t *c = arg;
    int64_t now = korch_now_ms();
    if (c->last && now - c->last > c->worst)
        c->worst = now - c->last;
    c->last = now;
    c->ticks++;
    return 0;
}

static void s_on_put(korch_rc_t rc, const korch_err_t *err, void *arg)
{
    files_ctx_t *c = arg;
    c->puts++;
    c->rc = rc;
}

static void s_on_get(korch_rc_t rc, const korch_err_t *err, char *data, size_t len, void *arg)
{
    files_ctx_t *c = arg;
    c->gets++;
    c->rc = rc;
    free(c->data);
    c->data = data;
    c->len = len;
}

/* The loop kept ticking while the op ran: on the loop, the op's whole
   time would be one gap and no tick. (Gaps are for the record: on 2 shared
   cores a thread's turn can wait tens of ms whatever it does.) */
static void s_gap_ok(const char *what, files_ctx_t *c, int64_t total)
{
    printf("  96 MiB %s: %lld ms, %d ticks of the loop meanwhile, the longest gap %lld ms\n", what,
           (long long)total, c->ticks, (long long)c->worst);
    CHECK_GE(c->ticks, 2); /* on the loop: at most the one overdue tick after it */
    CHECK_LT(c->worst, total);
}

static bool s_put_done(void *arg) { return ((files_ctx_t *)arg)->puts > 0; }
static bool s_get_done(void *arg) { return ((files_ctx_t *)arg)->gets > 0; }

/* A host work dir's files are written and read on the launcher's file
   worker: the loop keeps ticking through a 96 MiB put (which used to hold
   it for the whole write), from memory and from a file; a proc destroyed
   while its put runs is freed once the put is back, its done never
   called. */
TEST(launcher_host_files_off_the_loop)
{
    korch_loop_t *loop = korch_loop_new();
    korch_err_t err = {0};
    korch_launcher_t *l = korch_launcher_local_new(loop, &err);
    char dir[PATH_MAX], work[PATH_MAX + 8], path[PATH_MAX + 32];
    korch_conn_t conn;
    CHECK(s_runtime(dir, sizeof dir, &conn));
    snprintf(work, sizeof work, "%s/work", dir);
    mkdir(work, 0700);
    korch_kernelspec_t *spec = s_sleep_spec();
    korch_launch_t req = {.spec = spec, .conn = &conn, .runtime_dir = dir, .kernel_id = "files-test", .cwd = work};
    korch_proc_t *p = NULL;
    size_t big = 96u << 20;
    char *data = malloc(big);
    files_ctx_t c = {0};
    if (!CHECK(data) || !CHECK_EQ(korch_launcher_start_wait(l, &req, &p, &err), KORCH_OK))
        goto out;
    memset(data, 'k', big);
    data[big - 1] = 'z';
    int tick = korch_loop_timer(loop, 2, 0, s_on_files_tick, &c);
    korch_loop_run(loop, NULL, NULL, 20);
    c.worst = 0;
    korch_op_t *op = korch_proc_put_file(p, "in/big.bin", data, big, s_on_put, &c, &err);
    snprintf(path, sizeof path, "%s/in/big.bin", work);
    struct stat st;
    CHECK(stat(path, &st) != 0); /* not written inside the call: it is the worker's */
    memset(data, 'x', big);      /* copied: what the caller does next is its own business */
    CHECK(op);
    c.last = 0; /* the gaps while the loop runs (the copy above is the caller's time) */
    c.ticks = 0;
    int64_t t0 = korch_now_ms();
    CHECK(korch_loop_run(loop, s_put_done, &c, 30000));
    CHECK_EQ(c.rc, KORCH_OK);
    s_gap_ok("put_file", &c, korch_now_ms() - t0);
    CHECK(stat(path, &st) == 0 && (size_t)st.st_size == big);
    /* back, bounded */
    c.last = c.worst = 0;
    c.ticks = 0;
    t0 = korch_now_ms();
    CHECK(korch_proc_get_file(p, "in/big.bin", big, s_on_get, &c, &err));
    CHECK(korch_loop_run(loop, s_get_done, &c, 30000));
    CHECK_EQ(c.rc, KORCH_OK);
    CHECK(c.len == big && c.data && c.data[0] == 'k' && c.data[big - 1] == 'z');
    s_gap_ok("get_file", &c, korch_now_ms() - t0);
    /* from a file (an upload spooled to disk) */
    c.puts = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    CHECK(korch_proc_put_file_fd(p, "copy.bin", fd, big, s_on_put, &c, &err));
    close(fd); /* the op keeps its own */
    c.last = c.worst = 0;
    c.ticks = 0;
    t0 = korch_now_ms();
    CHECK(korch_loop_run(loop, s_put_done, &c, 30000));
    CHECK_EQ(c.rc, KORCH_OK);
    s_gap_ok("put_file_fd", &c, korch_now_ms() - t0);
    snprintf(path, sizeof path, "%s/copy.bin", work);
    CHECK(stat(path, &st) == 0 && (size_t)st.st_size == big);
    /* destroyed while a put runs: done never, the proc freed after */
    c.puts = 0;
    CHECK(korch_proc_put_file(p, "late.bin", data, big, s_on_put, &c, &err));
    korch_proc_destroy(&p);
    CHECK(p == NULL);
    CHECK(korch_launcher_settle(l, 10000)); /* the put is back, the proc freed and reaped */
    korch_loop_run(loop, NULL, NULL, 50);
    CHECK_EQ(c.puts, 0);
    korch_loop_timer_end(loop, tick);
out:
    free(data);
    free(c.data);
    korch_launcher_destroy(&l);
    korch_kernelspec_destroy(&spec);
    korch_fs_rm_tree(dir);
    korch_loop_destroy(&loop);
}

TEST(launcher_ops_done_once_deferred_never_after_cancel)
{
    korch_loop_t *loop = korch_loop_new();
    korch_err_t err = {0};
    korch_launcher_t *l = korch_launcher_local_new(loop, &err);
    CHECK(l);
    CHECK_EQ(korch_launcher_caps(l) & KORCH_LAUNCHER_CONFINED, 0);
    CHECK_STREQ(korch_launcher_name(l), "local");
    char dir[PATH_MAX];
    korch_conn_t conn;
    CHECK(s_runtime(dir, sizeof dir, &conn));
    korch_kernelspec_t *spec = s_sleep_spec();
    korch_launch_t req = {.spec = spec, .conn = &conn, .runtime_dir = dir, .kernel_id = "loop-test"};

    /* done is deferred: not from inside korch_launcher_start */
    op_ctx_t c = {.in_call = true};
    korch_op_t *op = korch_launcher_start(l, &req, s_on_start, &c, &err);
    c.in_call = false;
    CHECK(op);
    CHECK_EQ(c.started, 0);
    CHECK(korch_loop_run(loop, s_started, &c, 5000));
    CHECK_EQ(c.started, 1);
    CHECK(!c.early);
    CHECK_EQ(c.rc, KORCH_OK);
    if (!CHECK(c.proc))
        goto out;
    CHECK_STREQ(korch_proc_runtime_dir(c.proc), dir);
    CHECK_STREQ(korch_proc_conn(c.proc)->key, conn.key);

    /* kill: the exit fn runs first, then done, each once; a signal after is refused */
    korch_proc_on_exit(c.proc, s_on_exit, &c);
    c.in_call = true;
    op = korch_proc_kill(c.proc, s_on_kill, &c, &err);
    c.in_call = false;
    CHECK(op);
    CHECK_EQ(c.killed, 0);
    CHECK(korch_loop_run(loop, s_killed, &c, 5000));
    korch_loop_run(loop, NULL, NULL, 50);
    CHECK_EQ(c.killed, 1);
    CHECK_EQ(c.exits, 1);
    CHECK(!c.killed_before_exit);
    CHECK(!c.early);
    CHECK_STREQ(c.why, "killed by signal 9 (Killed)");
    CHECK(korch_proc_signal(c.proc, SIGINT, s_on_kill, &c, &err) == NULL);
    CHECK_EQ(err.rc, KORCH_E_DIED);
    korch_err_clear(&err);
    korch_proc_destroy(&c.proc);

    /* cancelled at once: never called, and the proc it made goes too */
    op_ctx_t c2 = {0};
    op = korch_launcher_start(l, &req, s_on_start, &c2, &err);
    CHECK(op);
    korch_op_cancel(&op);
    CHECK(op == NULL);
    korch_loop_run(loop, NULL, NULL, 200);
    CHECK_EQ(c2.started, 0);

    /* a start that fails at once: NULL + err, done never called */
    korch_kernelspec_t bad = *spec;
    char *argv[] = {"/nonexistent/korch-no-such-program", NULL};
    bad.argv = argv;
    req.spec = &bad;
    op = korch_launcher_start(l, &req, s_on_start, &c2, &err);
    CHECK(op == NULL);
    CHECK_EQ(err.rc, KORCH_E_LAUNCH);
    korch_loop_run(loop, NULL, NULL, 50);
    CHECK_EQ(c2.started, 0);
out:
    korch_launcher_destroy(&l);
    CHECK(l == NULL);
    korch_kernelspec_destroy(&spec);
    korch_fs_rm_tree(dir);
    korch_loop_destroy(&loop);
}

/* ------------------------------------------------ the stall diagnostic */

typedef struct {
    char lines[8][256];
    int n;
} stall_sink_t;

static void s_stall_sink(void *arg, korch_log_level_t level, const char *line)
{
    stall_sink_t *s = arg;
    if (strstr(line, "loop: ") && strstr(line, " ran ") && s->n < 8) /* not "woke late" */
        snprintf(s->lines[s->n++], sizeof s->lines[0], "%s", line);
}

static int64_t s_thread_cpu_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int s_on_spin(korch_loop_t *loop, int id, void *arg)
{
    int64_t until = s_thread_cpu_ms() + 30; /* 30 ms on a CPU, however busy the machine */
    while (s_thread_cpu_ms() < until)
        ;
    return 0;
}

static int s_on_nap(korch_loop_t *loop, int id, void *arg)
{
    usleep(40 * 1000); /* 40 ms blocked, next to no CPU */
    return 0;
}

/* "ran N ms (on a cpu C, runnable waiting for a cpu W)" of the line that
   names what: false when there is none. */
static bool s_stall_split(const stall_sink_t *s, const char *what, long *ran, long *cpu, long *wait)
{
    for (int i = 0; i < s->n; i++) {
        const char *p = strstr(s->lines[i], what) ? strstr(s->lines[i], " ran ") : NULL;
        if (p && sscanf(p, " ran %ld ms (on a cpu %ld, runnable waiting for a cpu %ld)", ran, cpu, wait) == 3)
            return true;
    }
    return false;
}

/* KORCH_LOOP_STALL_MS names a slow handler and splits its time into time
   on a CPU, time waiting for one and the rest (blocked): that is how a
   benchmark tells a loop that blocks from a machine that is busy. */
TEST_T(loop_stall_report_splits_time, 20)
{
    stall_sink_t s = {0};
    korch_log_level_t old = korch_log_level;
    setenv("KORCH_LOOP_STALL_MS", "20", 1);
    korch_loop_t *loop = korch_loop_new();
    unsetenv("KORCH_LOOP_STALL_MS");
    korch_log_set_sink(s_stall_sink, &s);
    korch_log_level = KORCH_LOG_WARN;
    korch_loop_timer(loop, 0, 1, s_on_spin, NULL);
    korch_loop_run(loop, NULL, NULL, 100);
    long ran = -1, cpu = -1, wait = -1;
    if (CHECK(s_stall_split(&s, "timer handler", &ran, &cpu, &wait))) {
        CHECK_GE(ran, 29);
        CHECK_GE(cpu, 28); /* the spin's CPU time (schedstat counts it in ns) */
        CHECK_LE(cpu + wait, ran + 2);
    }
    s.n = 0;
    korch_loop_timer(loop, 0, 1, s_on_nap, NULL);
    korch_loop_run(loop, NULL, NULL, 150);
    if (CHECK(s_stall_split(&s, "timer handler", &ran, &cpu, &wait))) {
        CHECK_GE(ran, 39);
        CHECK_LE(cpu, 10); /* blocked, not busy: the rest of ran */
    }
    /* a quick handler is not named for its own work (on a busy machine it
       may be, for time spent waiting for a CPU) */
    s.n = 0;
    korch_loop_timer(loop, 0, 1, s_on_added, &(rm_ctx_t){0});
    korch_loop_run(loop, NULL, NULL, 50);
    if (s_stall_split(&s, "handler", &ran, &cpu, &wait))
        CHECK_LE(cpu, 5);
    korch_log_set_sink(NULL, NULL);
    korch_log_level = old;
    korch_loop_destroy(&loop);
}
