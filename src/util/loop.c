/*  korch_loop: zmq_poll over sockets and fds, plus timers with absolute
 *  deadlines. Entries are marked dead on removal and swept after each round,
 *  so any handler may add or remove anything, itself included. */
#include "korch/loop.h"
#include "korch/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    zsock_t *sock;          /* reader, or NULL for an fd poller */
    int fd;
    short events;           /* ZMQ_POLLIN / ZMQ_POLLOUT */
    korch_reader_fn *on_sock;
    korch_poller_fn *on_fd;
    korch_poller_ev_fn *on_ev; /* instead of on_fd: told what is ready */
    void *arg;
    bool dead;
} s_item_t;

typedef struct {
    int id;
    int64_t when;           /* absolute deadline, ms */
    int delay;
    size_t times;           /* 0 = forever */
    korch_timer_fn *handler;
    void *arg;
    bool dead;
} s_timer_t;

struct korch_loop {
    s_item_t *items;
    size_t nitems, cap_items;
    s_timer_t *timers;
    size_t ntimers, cap_timers;
    zmq_pollitem_t *pollset;    /* pollset[i] is items[i] during a round */
    size_t cap_pollset;
    int next_id;
    bool broken;
    bool running;           /* inside korch_loop_run: re-entry aborts */
    int64_t stall_ms;       /* $KORCH_LOOP_STALL_MS: report handlers slower than this; 0 off */
    int sched_fd;           /* with stall_ms: the running thread's /proc schedstat, -1 before / without */
};

/* With $KORCH_LOOP_STALL_MS, where the time of a slow stretch went: on a
   CPU, runnable but waiting for one (the kernel's run_delay), or neither
   (blocked in a system call). Linux's /proc/thread-self/schedstat: "time
   on the cpu, time spent waiting on a runqueue, timeslices" in ns. */
typedef struct {
    int64_t wall_us, cpu_us, wait_us;
} s_sample_t;

int64_t korch_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

korch_loop_t *korch_loop_new(void)
{
    korch_loop_t *loop = calloc(1, sizeof(korch_loop_t));
    const char *stall = getenv("KORCH_LOOP_STALL_MS");
    if (loop) {
        loop->sched_fd = -1;
        if (stall)
            loop->stall_ms = strtol(stall, NULL, 10);
    }
    return loop;
}

static s_sample_t s_sample(korch_loop_t *loop)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    s_sample_t x = {.wall_us = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000, .cpu_us = -1, .wait_us = -1};
    if (loop->sched_fd < 0) /* opened by the thread that runs the loop */
        loop->sched_fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
    char b[96];
    ssize_t n = loop->sched_fd >= 0 ? pread(loop->sched_fd, b, sizeof b - 1, 0) : -1;
    long long cpu, wait;
    if (n > 0 && (b[n] = 0, sscanf(b, "%lld %lld", &cpu, &wait) == 2))
        x.cpu_us = cpu / 1000, x.wait_us = wait / 1000;
    return x;
}

/* "N ms (on a cpu C, waiting for one W)": what happened between a and b. */
static void s_span(char *out, size_t len, s_sample_t a, s_sample_t b)
{
    if (a.cpu_us < 0 || b.cpu_us < 0)
        snprintf(out, len, "%lld ms", (long long)(b.wall_us - a.wall_us) / 1000);
    else
        snprintf(out, len, "%lld ms (on a cpu %lld, runnable waiting for a cpu %lld)",
                 (long long)(b.wall_us - a.wall_us) / 1000, (long long)(b.cpu_us - a.cpu_us) / 1000,
                 (long long)(b.wait_us - a.wait_us) / 1000);
}

/* A handler that held the loop longer than $KORCH_LOOP_STALL_MS (a
   diagnostic for benchmarks: which handler blocks). */
static void s_stall(korch_loop_t *loop, s_sample_t t0, const char *what, int fd, const void *fn)
{
    s_sample_t t1 = s_sample(loop);
    if (t1.wall_us - t0.wall_us >= loop->stall_ms * 1000) {
        char sym[48], span[96]; /* relative to korch_loop_new: nm gives the handler's name */
        snprintf(sym, sizeof sym, "korch_loop_new%+td", (const char *)fn - (const char *)(void *)korch_loop_new);
        s_span(span, sizeof span, t0, t1);
        korch_warn("loop: a %s handler (fd %d, %s) ran %s", what, fd, sym, span);
    }
}

void korch_loop_destroy(korch_loop_t **loop)
{
    if (!loop || !*loop)
        return;
    free((*loop)->items);
    free((*loop)->timers);
    free((*loop)->pollset);
    if ((*loop)->sched_fd >= 0)
        close((*loop)->sched_fd);
    free(*loop);
    *loop = NULL;
}

static bool s_grow(void **arr, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return true;
    size_t ncap = *cap ? *cap * 2 : 16;
    while (ncap < need)
        ncap *= 2;
    void *n = realloc(*arr, ncap * size);
    if (!n)
        return false;
    *arr = n;
    *cap = ncap;
    return true;
}

static int s_add_item(korch_loop_t *loop, s_item_t item)
{
    if (!s_grow((void **)&loop->items, &loop->cap_items, loop->nitems + 1, sizeof item))
        return -1;
    loop->items[loop->nitems++] = item;
    return 0;
}

int korch_loop_reader(korch_loop_t *loop, zsock_t *sock, korch_reader_fn *handler, void *arg)
{
    korch_loop_reader_end(loop, sock);
    return s_add_item(loop, (s_item_t){.sock = sock, .fd = -1, .events = ZMQ_POLLIN, .on_sock = handler, .arg = arg});
}

void korch_loop_reader_end(korch_loop_t *loop, zsock_t *sock)
{
    for (size_t i = 0; i < loop->nitems; i++)
        if (loop->items[i].sock == sock)
            loop->items[i].dead = true;
}

int korch_loop_poller(korch_loop_t *loop, int fd, korch_poller_fn *handler, void *arg)
{
    korch_loop_poller_end(loop, fd);
    return s_add_item(loop, (s_item_t){.fd = fd, .events = ZMQ_POLLIN, .on_fd = handler, .arg = arg});
}

int korch_loop_poller_ev(korch_loop_t *loop, int fd, unsigned events, korch_poller_ev_fn *handler, void *arg)
{
    short ev = (short)((events & KORCH_POLL_IN ? ZMQ_POLLIN : 0) | (events & KORCH_POLL_OUT ? ZMQ_POLLOUT : 0));
    /* the same live entry: change it in place, so a round in progress sees
       the new interest from the next poll on and no duplicate appears */
    for (size_t i = 0; i < loop->nitems; i++) {
        s_item_t *it = &loop->items[i];
        if (!it->sock && it->fd == fd && !it->dead && it->on_ev == handler && it->arg == arg) {
            it->events = ev;
            return 0;
        }
    }
    korch_loop_poller_end(loop, fd);
    return s_add_item(loop, (s_item_t){.fd = fd, .events = ev, .on_ev = handler, .arg = arg});
}

void korch_loop_poller_end(korch_loop_t *loop, int fd)
{
    for (size_t i = 0; i < loop->nitems; i++)
        if (!loop->items[i].sock && loop->items[i].fd == fd)
            loop->items[i].dead = true;
}

int korch_loop_timer(korch_loop_t *loop, int delay_ms, size_t times, korch_timer_fn *handler, void *arg)
{
    if (!s_grow((void **)&loop->timers, &loop->cap_timers, loop->ntimers + 1, sizeof(s_timer_t)))
        return -1;
    if (delay_ms < 0)
        delay_ms = 0;
    if (++loop->next_id <= 0)
        loop->next_id = 1;
    loop->timers[loop->ntimers++] = (s_timer_t){
        .id = loop->next_id, .when = korch_now_ms() + delay_ms, .delay = delay_ms, .times = times,
        .handler = handler, .arg = arg};
    return loop->next_id;
}

void korch_loop_timer_end(korch_loop_t *loop, int timer_id)
{
    for (size_t i = 0; i < loop->ntimers; i++)
        if (loop->timers[i].id == timer_id)
            loop->timers[i].dead = true;
}

void korch_loop_break(korch_loop_t *loop) { loop->broken = true; }

int korch_loop_rc(korch_loop_t *loop) { return loop->broken ? -1 : 0; }

static void s_sweep(korch_loop_t *loop)
{
    size_t w = 0;
    for (size_t i = 0; i < loop->nitems; i++)
        if (!loop->items[i].dead)
            loop->items[w++] = loop->items[i];
    loop->nitems = w;
    w = 0;
    for (size_t i = 0; i < loop->ntimers; i++)
        if (!loop->timers[i].dead)
            loop->timers[w++] = loop->timers[i];
    loop->ntimers = w;
}

/* One round: wait up to max_wait ms (or the next timer), run what is due.
   Returns -1 when polling fails for good (the ZeroMQ context is gone). */
static int s_round(korch_loop_t *loop, int64_t max_wait)
{
    /* Removed entries may hold freed sockets: never poll them. */
    s_sweep(loop);
    int64_t now = korch_now_ms();
    int64_t wait = max_wait;
    for (size_t i = 0; i < loop->ntimers; i++) {
        int64_t d = loop->timers[i].when - now;
        if (d < wait || wait < 0)
            wait = d < 0 ? 0 : d;
    }
    size_t n = loop->nitems;
    if (!s_grow((void **)&loop->pollset, &loop->cap_pollset, n + 1, sizeof(zmq_pollitem_t)))
        return 0;
    for (size_t i = 0; i < n; i++) {
        s_item_t *it = &loop->items[i];
        loop->pollset[i] = (zmq_pollitem_t){it->sock ? zsock_resolve(it->sock) : NULL, it->sock ? 0 : it->fd,
                                            it->events, 0};
    }
    s_sample_t polled = loop->stall_ms ? s_sample(loop) : (s_sample_t){0};
    int rc = zmq_poll(loop->pollset, (int)n, (long)wait);
    s_sample_t woke = loop->stall_ms ? s_sample(loop) : (s_sample_t){0};
    if (loop->stall_ms && woke.wait_us - polled.wait_us >= loop->stall_ms * 1000)
        /* ready, but the thread was not on a CPU: the machine's scheduling */
        korch_warn("loop: woke %lld ms late (runnable, waiting for a cpu)",
                   (long long)(woke.wait_us - polled.wait_us) / 1000);
    if (rc < 0) {
        if (zmq_errno() == EINTR)
            return 0; /* signals reach korch through a self-pipe */
        return -1;
    }
    /* Handlers may add items (appended beyond n, polled next round) or mark
       any dead, which is checked before each call; nothing moves until the
       sweep at the end. */
    for (size_t i = 0; rc > 0 && i < n; i++) {
        short re = loop->pollset[i].revents;
        if (!(re & (ZMQ_POLLIN | ZMQ_POLLOUT | ZMQ_POLLERR)) || loop->items[i].dead)
            continue;
        s_item_t it = loop->items[i];
        int hrc;
        s_sample_t t0 = loop->stall_ms ? s_sample(loop) : (s_sample_t){0};
        if (it.sock)
            hrc = it.on_sock(loop, it.sock, it.arg);
        else if (it.on_ev)
            hrc = it.on_ev(loop, it.fd,
                           (re & ZMQ_POLLIN ? KORCH_POLL_IN : 0) | (re & ZMQ_POLLOUT ? KORCH_POLL_OUT : 0) |
                               (re & ZMQ_POLLERR ? KORCH_POLL_ERR : 0),
                           it.arg);
        else
            hrc = it.on_fd(loop, it.fd, it.arg);
        if (loop->stall_ms)
            s_stall(loop, t0, it.sock ? "reader" : "poller", it.fd,
                    it.sock ? (const void *)it.on_sock : it.on_ev ? (const void *)it.on_ev : (const void *)it.on_fd);
        if (hrc < 0)
            loop->broken = true;
    }
    now = korch_now_ms();
    size_t nt = loop->ntimers;
    for (size_t i = 0; i < nt; i++) {
        s_timer_t *t = &loop->timers[i];
        if (t->dead || t->when > now)
            continue;
        if (t->times && --t->times == 0)
            t->dead = true;
        else
            t->when = now + t->delay;
        int id = t->id;
        korch_timer_fn *fn = t->handler;
        void *arg = t->arg;
        /* t may move if the handler adds timers: use copies. */
        s_sample_t t0 = loop->stall_ms ? s_sample(loop) : (s_sample_t){0};
        if (fn(loop, id, arg) < 0)
            loop->broken = true;
        if (loop->stall_ms)
            s_stall(loop, t0, "timer", -1, (const void *)fn);
    }
    if (loop->stall_ms) {
        s_sample_t end = s_sample(loop);
        if (end.wall_us - woke.wall_us >= loop->stall_ms * 1000) {
            char span[96]; /* several handlers, none slow alone, or the loop's own work */
            s_span(span, sizeof span, woke, end);
            korch_warn("loop: a round ran %s", span);
        }
    }
    return 0; /* what handlers removed is swept at the start of the next round */
}

bool korch_loop_running(const korch_loop_t *loop) { return loop->running; }

static bool s_run(korch_loop_t *loop, bool (*done)(void *arg), void *arg, int timeout_ms)
{
    int64_t deadline = timeout_ms >= 0 ? korch_now_ms() + timeout_ms : -1;
    loop->broken = false;
    for (;;) {
        if (done && done(arg))
            return true;
        if (!done && loop->broken) {
            loop->broken = false;
            return false;
        }
        loop->broken = false;
        int64_t left = -1;
        if (deadline >= 0) {
            left = deadline - korch_now_ms();
            if (left <= 0)
                return done ? done(arg) : false;
        }
        if (s_round(loop, left) < 0)
            return done ? done(arg) : false;
    }
}

bool korch_loop_run(korch_loop_t *loop, bool (*done)(void *arg), void *arg, int timeout_ms)
{
    if (loop->running) {
        /* Not a log line: the process is about to end, whatever the sink. */
        fputs("korch: bug: korch_loop_run called from inside a loop handler (a *_wait call or "
              "korch_kernel_shutdown in a callback?): the loop is not reentrant; aborting\n",
              stderr);
        abort();
    }
    loop->running = true;
    bool r = s_run(loop, done, arg, timeout_ms);
    loop->running = false;
    return r;
}
