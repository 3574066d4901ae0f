/*  A guard against a library that closes a file descriptor twice.
 *
 *  Why: libwebsockets 4.1 (Debian 12's 4.1.6; warmcat/libwebsockets#2873,
 *  fixed upstream in 2024), on a libuv loop, closes its cancel pipe's
 *  eventfd in lws_context_destroy and the same number again from libuv's
 *  close callback, in the uv_run that follows. Between the two, any
 *  thread may be given that number (ZeroMQ's I/O thread reconnecting to a
 *  kernel that is shutting down is), and the second close takes it from
 *  under it: libzmq aborted ("Bad file descriptor
 *  (src/stream_connecter_base.cpp:155)"), and korch serve with it.
 *  korch_server_destroy holds lws's teardown in this guard.
 *
 *  What: between korch_close_hold() and korch_close_second(), on the
 *  calling thread only, close() is not done but remembered, so each number
 *  stays its owner's. After korch_close_second(), the same number closed
 *  again on that thread (the library's second close) is closed, once.
 *  korch_close_release() ends the guard and closes what is still
 *  remembered (what no second close came for, as with a fixed library).
 *  Other threads, and this one outside the guard, close as usual. At most
 *  64 numbers are remembered; past that a close is done at once.
 *
 *  How: closeguard.c defines close(), which the dynamic linker gives every
 *  library in the process instead of libc's; outside a guard it is the
 *  close system call and nothing else.
 *
 *  Threading: the guard is thread-local; all three calls on one thread.
 */
#ifndef KORCH_CLOSEGUARD_H
#define KORCH_CLOSEGUARD_H

void korch_close_hold(void);
void korch_close_second(void);
void korch_close_release(void);

#endif
