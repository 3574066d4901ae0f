/*  korch_init: process-wide set-up. */
#include "korch/korch.h"
#include "korch/log.h"

#include <czmq.h>
#include <malloc.h>
#include <signal.h>

void korch_init(void)
{
    korch_log_init();
    zsys_handler_set(NULL);
    signal(SIGPIPE, SIG_IGN);
    /* A fixed threshold turns off glibc's adaptive one (which grows up to
       32 MiB after the first big free and keeps later buffers in the heap). */
    mallopt(M_MMAP_THRESHOLD, 1 << 20);
}
