/*  A kernel's stdout and stderr through a pipe into a bounded ring, instead
 *  of a file on the host it could grow without end (private to
 *  src/launcher).
 *
 *  korch_logpipe_new makes the pipe: the write end goes to the kernel (the
 *  spawn's out_fd; close korch's copy after the spawn), the read end is
 *  read on the loop into a ring of the last `max` bytes; what came before
 *  is dropped and counted. Reading never blocks (O_NONBLOCK); a kernel that
 *  writes faster than korch reads only waits on its own full pipe.
 *
 *  One thread (the loop's).
 */
#ifndef KORCH_LAUNCHER_LOGPIPE_H
#define KORCH_LAUNCHER_LOGPIPE_H

#include <stddef.h>
#include <stdint.h>
#include "korch/error.h"
#include "korch/loop.h"

typedef struct korch_logpipe korch_logpipe_t;

/* A new pipe and ring of max bytes (> 0); *write_fd the kernel's end
   (O_CLOEXEC: the spawn dup2s it). NULL with err. */
korch_logpipe_t *korch_logpipe_new(size_t max, int *write_fd, korch_err_t *err);

/* Read on loop from now on (once). */
void korch_logpipe_watch(korch_logpipe_t *lp, korch_loop_t *loop);

/* Read what is in the pipe now, without waiting (at the kernel's end,
   before its log is shown). */
void korch_logpipe_drain(korch_logpipe_t *lp);

/* The last bytes of the log, at most len - 1, NUL-terminated into buf
   (a log of binary junk comes back as it is, cut at a NUL). */
void korch_logpipe_tail(const korch_logpipe_t *lp, char *buf, size_t len);

/* Bytes written to the pipe in all, and those dropped from the ring. */
uint64_t korch_logpipe_total(const korch_logpipe_t *lp);
uint64_t korch_logpipe_dropped(const korch_logpipe_t *lp);

void korch_logpipe_destroy(korch_logpipe_t **plp);

#endif
