/*  src/util/closeguard.c: while held, a close on this thread leaves the
 *  number open; after korch_close_second the next close of it is the real
 *  one; the release closes what no second close came for; another thread's
 *  close is never held. */
#include "test.h"
#include "korch/closeguard.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <unistd.h>

static bool s_open(int fd) { return fcntl(fd, F_GETFD) >= 0; }

static void *s_close_other(void *arg)
{
    int *fd = arg;
    *fd = close(*fd) == 0 ? -1 : *fd;
    return NULL;
}

TEST(closeguard_holds_this_threads_closes_until_the_second_or_the_release)
{
    int twice = eventfd(0, EFD_CLOEXEC), once = eventfd(0, EFD_CLOEXEC), other = eventfd(0, EFD_CLOEXEC);
    CHECK(twice >= 0 && once >= 0 && other >= 0);
    korch_close_hold();
    CHECK_EQ(close(twice), 0);
    CHECK_EQ(close(twice), 0); /* twice while held: one close, later */
    CHECK_EQ(close(once), 0);
    CHECK(s_open(twice));
    CHECK(s_open(once));
    pthread_t th;
    int fd = other;
    CHECK_EQ(pthread_create(&th, NULL, s_close_other, &fd), 0);
    pthread_join(th, NULL);
    CHECK_EQ(fd, -1);
    CHECK(!s_open(other)); /* another thread's close is done */
    korch_close_second();
    CHECK_EQ(close(twice), 0); /* the second close: the real one */
    CHECK(!s_open(twice));
    CHECK(s_open(once));
    korch_close_release();
    CHECK(!s_open(once)); /* no second close came: closed at the release */
    int after = eventfd(0, EFD_CLOEXEC);
    CHECK(after >= 0);
    CHECK_EQ(close(after), 0);
    CHECK(!s_open(after)); /* no guard: at once */
    errno = 0;
    CHECK_EQ(close(after), -1);
    CHECK_EQ(errno, EBADF);
}
