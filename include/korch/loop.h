/*  The event loop every korch object runs on: czmq's zloop plus a way to
 *  stop it from inside any handler.
 *
 *  Many kernels share one loop; nothing blocks. Blocking convenience calls
 *  (korch_kernel_execute_wait, ...) run the loop until their own condition
 *  holds, so other kernels on the same loop keep being served meanwhile.
 *
 *  Handlers registered by korch objects return korch_loop_rc(loop), which is
 *  -1 (stop zloop) once korch_loop_break() was called.
 */
#ifndef KORCH_LOOP_H
#define KORCH_LOOP_H

#include <czmq.h>
#include <stdbool.h>

typedef struct korch_loop korch_loop_t;

korch_loop_t *korch_loop_new(void);
void korch_loop_destroy(korch_loop_t **loop);

/* The underlying zloop, to register readers, pollers and timers on. */
zloop_t *korch_loop_zloop(korch_loop_t *loop);

/* Make the running korch_loop_run return after the current handler. */
void korch_loop_break(korch_loop_t *loop);

/* What every handler returns: 0, or -1 after korch_loop_break. */
int korch_loop_rc(korch_loop_t *loop);

/* Run handlers until done(arg) is true, timeout_ms passes (-1 = none) or the
   process is told to stop (SIGTERM). done is checked after every break; the
   objects that can make it true call korch_loop_break. Returns true when
   done(arg) held. done may be NULL: then run until a break or the timeout. */
bool korch_loop_run(korch_loop_t *loop, bool (*done)(void *arg), void *arg, int timeout_ms);

/* Monotonic milliseconds. */
int64_t korch_now_ms(void);

#endif
