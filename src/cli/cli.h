/*  The korch command line: one function per subcommand. */
#ifndef KORCH_CLI_H
#define KORCH_CLI_H

#include <stdbool.h>
#include <stdio.h>

#include "korch/launcher.h"
#include "korch/loop.h"

int korch_cmd_exec(int argc, char **argv);
int korch_cmd_kernel(int argc, char **argv);
int korch_cmd_run(int argc, char **argv);
int korch_cmd_chat(int argc, char **argv);
int korch_cmd_serve(int argc, char **argv);
int korch_cmd_mcp(int argc, char **argv);
int korch_cmd_user(int argc, char **argv);

/* A self-pipe that SIGINT/SIGTERM write to, so the loop sees signals as I/O.
   Returns the read end, or -1. */
int korch_cli_signal_pipe(void);
/* The last signal delivered through the pipe (0 if none), and reset it. */
int korch_cli_take_signal(void);
/* Has a signal arrived that korch_cli_take_signal has not taken yet? */
bool korch_cli_signal_pending(void);

/* For commands that run until told to stop: SIGINT, SIGTERM or SIGHUP set
   *quit and end the running loop round. false when the pipe failed. */
bool korch_cli_stop_on_signal(korch_loop_t *loop, bool *quit);

/* The number an option was given, checked: all of arg a number (a whole
   one when whole), from min to max. A bad one ends the command: "korch:
   --NAME wants a whole number from MIN to MAX (what), not 'ARG'" on stderr
   and exit status 2, as for an unknown option. name without its dashes. */
double korch_cli_num(const char *name, const char *arg, double min, double max, bool whole, const char *what);

/* A korch_loop_run condition: the bool that flag points to. */
bool korch_cli_flag_set(void *flag);

/* Choosing a launcher: korch_launcher_choose and korch_launcher_sweep
   (launcher.h). The options that say which and with what limits are the
   same for every command that starts kernels (exec, kernel, run, chat,
   serve), parsed here, one way: their getopt_long entries, their handler
   (true when opt was one of them; the value into c: name, image,
   memory_mb, cpus, pids) and their help lines, which list every launcher
   (korch_launcher_catalog) with the command's default. */
#define KORCH_CLI_OPT_LAUNCHER 0x1e10
#define KORCH_CLI_OPT_IMAGE 0x1e11
#define KORCH_CLI_OPT_MEMORY 0x1e12
#define KORCH_CLI_OPT_CPUS 0x1e13
#define KORCH_CLI_OPT_PIDS 0x1e14
#define KORCH_CLI_OPT_WHEELHOUSE 0x1e15
#define KORCH_CLI_OPT_PACKAGE_INDEX 0x1e16
#define KORCH_CLI_OPT_PACKAGE_HOSTS 0x1e17
#define KORCH_CLI_OPT_FORK 0x1e18
#define KORCH_CLI_LAUNCHER_LONGOPTS                                                                       \
    {"launcher", required_argument, 0, KORCH_CLI_OPT_LAUNCHER},                                           \
        {"image", required_argument, 0, KORCH_CLI_OPT_IMAGE},                                             \
        {"memory", required_argument, 0, KORCH_CLI_OPT_MEMORY},                                           \
        {"cpus", required_argument, 0, KORCH_CLI_OPT_CPUS}, {"pids", required_argument, 0, KORCH_CLI_OPT_PIDS}, \
        {"wheelhouse", required_argument, 0, KORCH_CLI_OPT_WHEELHOUSE},                                   \
        {"package-index", required_argument, 0, KORCH_CLI_OPT_PACKAGE_INDEX},                             \
        {"package-hosts", required_argument, 0, KORCH_CLI_OPT_PACKAGE_HOSTS},                             \
        {"fork", no_argument, 0, KORCH_CLI_OPT_FORK}
bool korch_cli_launcher_opt(korch_launcher_choice_t *c, int opt, const char *arg);
/* The help lines of those options, each option name indent spaces in, its
   description from column col (the command's own layout), dflt the
   command's default launcher. */
void korch_cli_launcher_help(FILE *f, int indent, int col, const char *dflt);

/* --env NAME / --env NAME=VALUE: a variable every kernel gets (env.h;
   kernels never inherit korch's whole environment). The option's code in
   getopt_long tables, its help line, and its handler (false + a message
   on stderr when the argument is bad). */
#define KORCH_CLI_OPT_ENV 0x1e00
#define KORCH_CLI_OPT_WORKDIR_MB 0x1e01
#define KORCH_CLI_ENV_HELP                                                                              \
    "      --env NAME[=VALUE]  pass a variable to the kernel (repeatable); kernels get only PATH, HOME,\n" \
    "                          LANG, LC_*, TERM, TZ and the like from korch's environment, never keys\n"
bool korch_cli_env_opt(const char *cmd, const char *arg);

/* Read NAME=VALUE lines of a .env file (path) into the environment for the
   names korch reads (KORCH_*, OPENAI_*, ANTHROPIC_*, OLLAMA_*): the real
   environment wins, a name already set is left alone. "export " prefixes,
   '#' comments and quoted values are understood. Returns how many were set;
   a missing file is 0, a line it cannot read is warned about and skipped. */
int korch_cli_load_dotenv(const char *path);

/* agent_report.c: what korch run / chat print under an answer (new
   strings; NULL when there is nothing to say). */
#include <jansson.h>
#include "korch/agent.h"
/* Its numbers and where each came from (receipts of a FINAL event). */
char *korch_cli_receipts_text(json_t *receipts);
/* The clean notebook's re-run (a VERIFY event's data). */
char *korch_cli_verify_text(json_t *verify);
/* "── 3 steps, 0.6 s; tokens: ... (session: ...); cost: ... ──" from the turn's done. */
char *korch_cli_ledger_text(korch_agent_t *agent, const korch_prices_t *prices, json_t *done);

#endif
