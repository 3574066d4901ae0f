/*  The double-close guard of korch/closeguard.h: a close() of our own. */
#include "korch/closeguard.h"

#include <errno.h>
#include <sys/syscall.h>
#include <unistd.h>

#define S_MAX 64 /* numbers remembered at most */

typedef enum { S_OFF, S_HOLD, S_SECOND } s_phase_t;

static _Thread_local struct {
    s_phase_t phase;
    int fd[S_MAX];
    int n;
} s_guard;

static int s_close(int fd) { return (int)syscall(SYS_close, fd); }

/* Every close() of the process comes here (libc's is preempted). */
int close(int fd)
{
    if (s_guard.phase == S_OFF || fd < 0)
        return s_close(fd);
    for (int i = 0; i < s_guard.n; i++)
        if (s_guard.fd[i] == fd) {
            if (s_guard.phase == S_HOLD)
                return 0; /* twice while held: still one close, later */
            s_guard.fd[i] = s_guard.fd[--s_guard.n];
            return s_close(fd); /* the second close: the real one */
        }
    if (s_guard.phase == S_HOLD && s_guard.n < S_MAX) {
        s_guard.fd[s_guard.n++] = fd;
        return 0;
    }
    return s_close(fd);
}

void korch_close_hold(void)
{
    s_guard.phase = S_HOLD;
    s_guard.n = 0;
}

void korch_close_second(void)
{
    if (s_guard.phase == S_HOLD)
        s_guard.phase = S_SECOND;
}

void korch_close_release(void)
{
    s_guard.phase = S_OFF;
    int saved = errno;
    while (s_guard.n > 0)
        s_close(s_guard.fd[--s_guard.n]);
    errno = saved;
}
