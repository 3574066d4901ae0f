/*  korch_server_destroy while other threads open and close files: the
 *  teardown never closes a number it no longer owns. libwebsockets 4.1
 *  closes its cancel pipe twice (include/korch/closeguard.h); between the two
 *  closes another thread is given that number, and the second close took
 *  it: in korch serve that thread was ZeroMQ's, which aborted. Here the
 *  other thread makes eventfds as fast as it can (the lowest free number,
 *  as the kernel hands out) and checks that each one is still its own
 *  when it closes it: a close under it would make its close fail (EBADF)
 *  or, when the number was handed out again meanwhile, its write land in
 *  somebody else's file. */
#include "test.h"
#include "korch/korch.h"
#include "korch/loop.h"
#include "korch/server.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/eventfd.h>
#include <unistd.h>

typedef struct {
    atomic_bool stop;
    long made, lost;            /* eventfds made; closed under us */
} s_churn_t;

static void *s_churn(void *arg)
{
    s_churn_t *c = arg;
    while (!atomic_load(&c->stop)) {
        int fd = eventfd(0, EFD_CLOEXEC);
        if (fd < 0)
            continue;
        c->made++;
        for (int i = 0; i < 20; i++) /* held a little: the teardown's window is short */
            sched_yield();
        uint64_t one = 1;
        /* still ours: a write works, and close says it was open */
        if (write(fd, &one, sizeof one) != (ssize_t)sizeof one || close(fd) != 0)
            c->lost++;
    }
    return NULL;
}

TEST_T(server_teardown_closes_only_its_own_numbers, 120)
{
    char dir[] = "/tmp/korch-teardown-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char agents[sizeof dir + 16];
    snprintf(agents, sizeof agents, "%s/agents", dir);
    korch_init();
    s_churn_t c = {0};
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, s_churn, &c), 0);
    int cycles = 0;
    for (int i = 0; i < 60; i++) {
        korch_loop_t *loop = korch_loop_new();
        korch_server_opts_t o = {.ip = "127.0.0.1", .port = 0, .token = "t", .no_access_log = true,
                                 .agent_dir = agents};
        korch_err_t err = {0};
        korch_server_t *srv = loop ? korch_server_new(loop, &o, &err) : NULL;
        if (!srv) {
            fprintf(stderr, "  cannot start the server: %s\n", err.msg);
            korch_loop_destroy(&loop);
            break;
        }
        korch_loop_run(loop, NULL, NULL, 5); /* a round of lws on its loop */
        korch_server_destroy(&srv);
        korch_loop_destroy(&loop);
        cycles++;
    }
    atomic_store(&c.stop, true);
    pthread_join(th, NULL);
    fprintf(stderr, "  %d servers made and destroyed beside %ld eventfds; %ld closed under their owner\n", cycles,
            c.made, c.lost);
    CHECK_EQ(cycles, 60);
    CHECK_GT(c.made, 1000);
    CHECK_EQ(c.lost, 0);
    char rm[sizeof dir + 16];
    snprintf(rm, sizeof rm, "rm -rf '%s'", dir);
    CHECK_EQ(system(rm), 0);
}
