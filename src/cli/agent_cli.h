/*  korch run / korch chat (agent.c) and what they show (agent_show.c): the
 *  state of one run, shared by the two files. Private to src/cli; one
 *  thread (the CLI's).
 */
#ifndef KORCH_CLI_AGENT_H
#define KORCH_CLI_AGENT_H

#include "cli.h"
#include "korch/path.h"
#include "korch/agent.h"
#include "korch/instance.h"
#include "korch/log.h"
#include "korch/media.h"
#include "korch/receipts.h"
#include "korch/termsafe.h"

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    bool json, quiet, chat;
    const char *llm_spec, *session, *kernel_name;
    korch_launcher_choice_t lc;     /* --launcher and its limits (korch_cli_launcher_opt) */
    double workdir_mb;      /* --workdir-mb */
    int max_steps;
    long max_result;
    long long max_tokens, context_chars;
    double session_mb;      /* --session-mb */
    int max_seconds;
    int timeout_s;
    bool fence, no_fence, no_vision, vision;
    const char *system_append, *system_replace, *system_file;
    json_t *files;
    const char *prices_path;    /* --prices, else KORCH_PRICES */
    double max_cost;
    bool clean_notebook;        /* --clean-notebook: notebook-clean.ipynb after each turn */
    bool verify;                /* --verify: re-run the clean notebook in a fresh kernel after each answer */
    const char *branch;         /* --branch DIR: a new session from a step of the one in DIR */
    int from_step, from_turn;   /* --from-step N, --turn T */
    korch_prices_t *prices;
    json_t *receipts;           /* the last answer's */
    int64_t step_t0;
    bool in_text;           /* assistant text is being streamed on stderr */
    korch_agent_t *agent;
    /* the terminal display */
    bool tty;               /* stderr is a terminal: a status line redrawn in place */
    bool col0;              /* stderr's cursor is at the start of a line */
    bool status_shown;      /* the status line is on the screen (cleared before anything else) */
    bool code_bol;          /* streamed code: at the start of a code line (indent next) */
    int code_index;         /* the tool call whose code is streaming; -1 none */
    int codes_streamed, codes_shown;   /* calls of this step shown as they were written / run */
    bool text_streamed;     /* the current step's text reached stderr as it streamed */
    int64_t plain_status_at;    /* when the last plain status line was printed */
    const char *last_phase;
    int steps;              /* of the turn */
    /* what the model and the kernel write passes a sanitizer (termsafe.h):
       the model's text and code, the kernel's stdout, its stderr */
    korch_termsafe_t *ts_model, *ts_stream[2];
    bool in_stream;         /* the last thing shown was a kernel stream */
} run_ctx_t;

/* agent_show.c: when korch started (t_ms of --json events). */
extern int64_t cli_agent_t0;

/* The agent's events shown on stderr (or as JSON lines on stdout). */
void cli_agent_on_event(const korch_agent_event_t *ev, void *arg);

/* A turn is over (rc from ask): the answer to stdout unless it just
   streamed to the same place, its receipts, the ledger line. */
void cli_agent_turn_end(run_ctx_t *c, korch_rc_t rc, const char *answer, const char *msg);

/* What streamed ends its line before something else is shown. */
void cli_agent_end_text(run_ctx_t *c);

/* One value from the model or the kernel between korch's own prefix and
   suffix, through termsafe (flags: KORCH_TERMSAFE_LINE for one line). */
void cli_agent_out_value(run_ctx_t *c, const char *prefix, const char *value, unsigned flags, const char *suffix);

#endif
