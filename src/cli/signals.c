/*  The CLI's signals as I/O: a self-pipe SIGINT, SIGTERM and SIGHUP write
 *  to (cli.h). Its own file so the commands (exec, agent, serve, kernel)
 *  and main.c all call down into it and none calls back. */
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

static int s_sigpipe[2] = {-1, -1};
static volatile sig_atomic_t s_last_signal;

static void s_on_signal(int sig)
{
    /* A second SIGTERM before the loop took the first: korch is stuck
       somewhere; end now rather than never (the start-up sweep removes what
       is left behind). */
    if (sig == SIGTERM && s_last_signal == SIGTERM)
        _exit(128 + SIGTERM);
    int saved = errno;
    s_last_signal = sig;
    unsigned char b = (unsigned char)sig;
    if (write(s_sigpipe[1], &b, 1) < 0) { /* pipe full: a signal is pending anyway */
    }
    errno = saved;
}

int korch_cli_signal_pipe(void)
{
    if (s_sigpipe[0] >= 0)
        return s_sigpipe[0];
    if (pipe2(s_sigpipe, O_CLOEXEC | O_NONBLOCK) != 0)
        return -1;
    struct sigaction sa = {0};
    sa.sa_handler = s_on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    return s_sigpipe[0];
}

int korch_cli_take_signal(void)
{
    unsigned char b[64];
    while (s_sigpipe[0] >= 0 && read(s_sigpipe[0], b, sizeof b) > 0)
        ;
    int sig = s_last_signal;
    s_last_signal = 0;
    return sig;
}

bool korch_cli_signal_pending(void) { return s_last_signal != 0; }

static int s_on_stop_signal(korch_loop_t *loop, int fd, void *arg)
{
    *(bool *)arg = true;
    korch_cli_take_signal();
    return -1;
}

bool korch_cli_stop_on_signal(korch_loop_t *loop, bool *quit)
{
    int fd = korch_cli_signal_pipe();
    return fd >= 0 && korch_loop_poller(loop, fd, s_on_stop_signal, quit) == 0;
}

bool korch_cli_flag_set(void *flag) { return *(bool *)flag; }
