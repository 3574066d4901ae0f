/*  A diagnostic: when each client request and its answers passed through
 *  the relay, for benchmarks that attribute a slow round trip
 *  (tests/bench/loop_bench.py). $KORCH_TRACE_WS=FILE turns it on; off, it
 *  costs one test of srv_trace_on per message. Loop thread only.
 *
 *  Lines, times in CLOCK_REALTIME microseconds (the clock of the kernels'
 *  header dates and of a client's time.time()):
 *    rx WS ID T_RX T_SENT      a client's request ID read off websocket WS
 *                              (T_RX) and handed to the kernel's socket
 *    q WS N PARENT TYPE T      a kernel message (TYPE, or status/STATE) for
 *                              request PARENT queued as WS's N-th message
 *    w WS N T                  WS's N-th message fully written to the socket
 */
#ifndef SRV_TRACE_H
#define SRV_TRACE_H

#include <stdbool.h>
#include <stdint.h>

extern bool srv_trace_on;

/* Open $KORCH_TRACE_WS (appending) when it is set; close it (flushing). */
void srv_trace_open(void);
void srv_trace_close(void);

/* Now, CLOCK_REALTIME in microseconds. */
int64_t srv_trace_now(void);

/* One line (a newline is added); buffered, so tracing does not add a write
   per message. */
void srv_trace(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
