/*  korch_loop: czmq's zloop with a break flag and a done() condition. */
#include "korch/loop.h"

#include <errno.h>
#include <time.h>

struct korch_loop {
    zloop_t *zloop;
    bool broken;        /* korch_loop_break was called since the last run */
    bool timed_out;     /* the run's own timer fired */
};

korch_loop_t *korch_loop_new(void)
{
    korch_loop_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->zloop = zloop_new();
    if (!self->zloop) {
        free(self);
        return NULL;
    }
    /* We decide when to stop; czmq's SIGINT flag must not end our loop. */
    zloop_set_nonstop(self->zloop, true);
    return self;
}

void korch_loop_destroy(korch_loop_t **loop)
{
    if (!loop || !*loop)
        return;
    zloop_destroy(&(*loop)->zloop);
    free(*loop);
    *loop = NULL;
}

zloop_t *korch_loop_zloop(korch_loop_t *loop) { return loop->zloop; }

void korch_loop_break(korch_loop_t *loop) { loop->broken = true; }

int korch_loop_rc(korch_loop_t *loop) { return loop->broken ? -1 : 0; }

static int s_on_deadline(zloop_t *z, int timer_id, void *arg)
{
    korch_loop_t *self = arg;
    self->timed_out = true;
    self->broken = true;
    return -1;
}

int64_t korch_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

bool korch_loop_run(korch_loop_t *loop, bool (*done)(void *arg), void *arg, int timeout_ms)
{
    if (done && done(arg))
        return true;
    loop->timed_out = false;
    int timer = -1;
    if (timeout_ms >= 0)
        timer = zloop_timer(loop->zloop, (size_t)(timeout_ms > 0 ? timeout_ms : 1), 1, s_on_deadline, loop);
    bool ok = false;
    for (;;) {
        loop->broken = false;
        int rc = zloop_start(loop->zloop);
        loop->broken = false;
        if (done && done(arg)) {
            ok = true;
            break;
        }
        if (loop->timed_out)
            break;
        if (!done && rc != 0)
            break;
        /* rc 0: zmq_poll was interrupted by a signal (EINTR); signals that
           matter to korch arrive through a self-pipe, so just go on. */
        if (rc == 0 && zmq_errno() == ETERM)
            break;
    }
    if (timer >= 0 && !loop->timed_out)
        zloop_timer_end(loop->zloop, timer);
    loop->timed_out = false;
    return ok;
}
