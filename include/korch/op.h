/*  A pending asynchronous operation, as launchers and the Docker Engine
 *  client hand them out: a handle whose only use is cancelling.
 *
 *  The promise every op keeps (libuv's): its completion callback is called
 *  exactly once, on the loop, never from inside the call that started it,
 *  never after korch_op_cancel. The handle is invalid once the callback has
 *  run: callers NULL their stored handle inside it.
 */
#ifndef KORCH_OP_H
#define KORCH_OP_H

typedef struct korch_op korch_op_t;

/* For implementers only: embed as the first member; cancel aborts the work
   and frees the op (its callback is never called). */
struct korch_op {
    void (*cancel)(korch_op_t *op);
};

/* Cancel *op (NULL is fine) and set it to NULL. Safe from any handler. */
void korch_op_cancel(korch_op_t **op);

#endif
