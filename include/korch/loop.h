/*  The event loop every korch object runs on.
 *
 *  Many kernels share one loop; nothing blocks. Readers (ZeroMQ sockets),
 *  pollers (file descriptors) and timers call their handler from
 *  korch_loop_run. Blocking convenience calls (korch_kernel_execute_wait,
 *  ...) run the loop until their own condition holds, so other kernels on
 *  the same loop keep being served meanwhile.
 *
 *  Why not czmq's zloop: zloop_start recomputes every timer from "now" each
 *  time it is entered, so a loop that is re-entered often never fires a
 *  long timer, and after its first return zloop_timer_end frees a timer
 *  even from inside that timer's own handler. Here timers keep absolute
 *  deadlines and everything may be cancelled from inside any handler.
 *
 *  Handlers return 0, or -1 to make the current korch_loop_run return (as
 *  korch_loop_break does). korch_loop_run is not reentrant: calling it (or
 *  a *_wait function, which does) from inside a handler aborts the process
 *  with a message naming the mistake, since a nested round would run
 *  handlers of the outer one again under its feet.
 *
 *  Guarantees, tested in tests/test_loop.c: any handler may add or remove
 *  any reader, poller or timer (itself and others, during a round too); a
 *  removed entry's handler is never called after its removal; timers keep
 *  absolute deadlines whatever the rest of the loop does.
 */
#ifndef KORCH_LOOP_H
#define KORCH_LOOP_H

#include <czmq.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct korch_loop korch_loop_t;

typedef int (korch_reader_fn)(korch_loop_t *loop, zsock_t *sock, void *arg);
typedef int (korch_poller_fn)(korch_loop_t *loop, int fd, void *arg);
typedef int (korch_timer_fn)(korch_loop_t *loop, int timer_id, void *arg);
/* revents: what fd is ready for (KORCH_POLL_* bits). */
typedef int (korch_poller_ev_fn)(korch_loop_t *loop, int fd, unsigned revents, void *arg);

enum { KORCH_POLL_IN = 1u << 0, KORCH_POLL_OUT = 1u << 1, KORCH_POLL_ERR = 1u << 2 };

/* A new loop; NULL only when out of memory. */
korch_loop_t *korch_loop_new(void);
void korch_loop_destroy(korch_loop_t **loop);

/* Call handler when sock is readable. One registration per socket. */
int korch_loop_reader(korch_loop_t *loop, zsock_t *sock, korch_reader_fn *handler, void *arg);
void korch_loop_reader_end(korch_loop_t *loop, zsock_t *sock);

/* Call handler when fd is readable. One registration per fd. */
int korch_loop_poller(korch_loop_t *loop, int fd, korch_poller_fn *handler, void *arg);
void korch_loop_poller_end(korch_loop_t *loop, int fd);

/* Call handler when fd is ready for events (KORCH_POLL_IN and/or
   KORCH_POLL_OUT; errors are always reported, as KORCH_POLL_ERR). Calling
   it again for the same fd replaces the interest and the handler (what
   libcurl's socket callback needs); korch_loop_poller_end removes it. */
int korch_loop_poller_ev(korch_loop_t *loop, int fd, unsigned events, korch_poller_ev_fn *handler, void *arg);

/* Call handler every delay_ms, times times (0 = until cancelled). Returns a
   timer id (> 0). Cancelling an unknown or finished id is harmless. */
int korch_loop_timer(korch_loop_t *loop, int delay_ms, size_t times, korch_timer_fn *handler, void *arg);
void korch_loop_timer_end(korch_loop_t *loop, int timer_id);

/* Make the running korch_loop_run re-check its condition (and return when
   it has none). */
void korch_loop_break(korch_loop_t *loop);

/* What handlers return: -1 after korch_loop_break, else 0. */
int korch_loop_rc(korch_loop_t *loop);

/* Run handlers until done(arg) is true (checked after every round of
   handlers), timeout_ms passes (-1 = never) or, with done NULL, until a
   handler breaks. Returns true when done(arg) held. */
bool korch_loop_run(korch_loop_t *loop, bool (*done)(void *arg), void *arg, int timeout_ms);

/* Is korch_loop_run running on this loop (so the caller is a handler)? */
bool korch_loop_running(const korch_loop_t *loop);

/* Monotonic milliseconds. */
int64_t korch_now_ms(void);

#endif
