/*  The korch command line: one function per subcommand. */
#ifndef KORCH_CLI_H
#define KORCH_CLI_H

#include <stdbool.h>

int korch_cmd_exec(int argc, char **argv);
int korch_cmd_kernel(int argc, char **argv);
int korch_cmd_run(int argc, char **argv);
int korch_cmd_chat(int argc, char **argv);

/* A self-pipe that SIGINT/SIGTERM write to, so the loop sees signals as I/O.
   Returns the read end, or -1. */
int korch_cli_signal_pipe(void);
/* The last signal delivered through the pipe (0 if none), and reset it. */
int korch_cli_take_signal(void);
/* Has a signal arrived that korch_cli_take_signal has not taken yet? */
bool korch_cli_signal_pending(void);

#endif
