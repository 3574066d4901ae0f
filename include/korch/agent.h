/*  The agent: a multi-step LLM loop over one stateful kernel.
 *
 *  The model writes code (a tool call - run_python for Python kernels,
 *  run_code for the others - or a fenced block in the kernel's language),
 *  korch runs it in the persistent kernel, shows the
 *  model what happened (text cut to size, errors without colours, charts as
 *  images or as a line naming the file) and loops until the model answers
 *  without code, or a step/token/time budget ends the turn (then one last
 *  request without tools asks for the answer).
 *
 *  A session lives in a directory:
 *    transcript.jsonl   append-only, one record per line, flushed per record
 *    files/             the user's files; the kernel's working directory
 *    figures/           every chart as fig-N.png (and images the code saved)
 *    notebook.ipynb     nbformat 4.5, rewritten after every step
 *    snapshot.json      Python kernels: the picklable user variables after
 *                       the latest step (bounded), to resume from
 *    snapshots/         the same after each step, exec-N.json (N: executions
 *                       so far), the latest 32 within 64 MiB: to branch from
 *  The language comes from the kernel's kernel_info_reply (language_info):
 *  tool name and description, prompt, fence language, notebook metadata.
 *  After each step the work dir is compared with before it (korch_workdir):
 *  files the code created, changed or deleted are told to the model, sent
 *  as a FILES event, and saved images become figures.
 *  Opening a directory that has a transcript resumes it: the conversation is
 *  reloaded and the kernel's state rebuilt from the snapshot (variables
 *  restored, nothing re-run) plus the cells that ran after it, or, without a
 *  snapshot, by re-running the successful code cells. The user and the model
 *  are told which, and what may differ. A session resumed in the very kernel
 *  it ran in (opts.resume_live) rebuilds nothing.
 *
 *  Not thread-safe; callbacks run on the caller's thread. Blocking: ask()
 *  returns when the turn is over.
 */
#ifndef KORCH_AGENT_H
#define KORCH_AGENT_H

#include <stdbool.h>
#include <stdint.h>
#include <jansson.h>
#include "korch/error.h"
#include "korch/launcher.h"
#include "korch/ledger.h"
#include "korch/llm.h"
#include "korch/loop.h"

typedef struct korch_agent korch_agent_t;

typedef enum {
    KORCH_AGENT_STEP,       /* a model call begins: step */
    KORCH_AGENT_TEXT,       /* assistant text as it streams: text */
    KORCH_AGENT_CODE,       /* code about to run: text */
    KORCH_AGENT_OUTPUT,     /* an nbformat output as it arrives: data, index, append */
    KORCH_AGENT_RESULT,     /* an execution finished: data {status, execution_count, elapsed_ms}, text = what the model gets */
    KORCH_AGENT_FINAL,      /* the answer: text */
    KORCH_AGENT_ERROR,      /* something failed: text */
    KORCH_AGENT_NOTICE,     /* for the user: text (resumed, kernel restarted, replay, budget) */
    KORCH_AGENT_CODE_DELTA, /* code as the model writes it: text to append; index = the call's place in the reply */
    KORCH_AGENT_STATUS,     /* what the step waits on: data {phase: "model"|"retry"|"executing", elapsed_ms,
                               attempt?, retry_in_ms?, http_status?}; when the phase changes and about every second */
    KORCH_AGENT_FILES,      /* the step changed the work dir: data {files: [{path, size, change, mime}],
                               total, truncated}, text = one line for people */
    KORCH_AGENT_USAGE,      /* a model call's tokens and cost: data {tokens: korch_usage_json, cost} */
    KORCH_AGENT_VERIFY,     /* the clean notebook re-run (korch_agent_verify): data = its result, text = status */
    KORCH_AGENT_BRANCH,     /* a branch's kernel rebuilt (korch_agent_branch): data {session, parent, llm, state}, text = for people */
} korch_agent_event_type_t;

typedef struct {
    korch_agent_event_type_t type;
    int step;
    const char *text;       /* borrowed, may be NULL */
    size_t text_len;
    json_t *data;           /* borrowed, may be NULL */
    long index;             /* OUTPUT: the output's index in its execution */
    bool append;            /* OUTPUT: data is a stream chunk to append to the output at index */
} korch_agent_event_t;

typedef struct {
    korch_llm_t *llm;               /* borrowed, required */
    korch_loop_t *loop;             /* borrowed, required */
    korch_launcher_t *launcher;     /* borrowed; NULL = local */
    const char *kernelspec;         /* default python3 */
    /* Attach to this kernel (a connection file) instead of starting one: its
       owner (korch serve) starts, restarts and shuts it down, and tells the
       agent each time its process goes (korch_agent_kernel_gone); the agent
       only runs code in it, in the kernel's own working directory. */
    const char *existing;
    /* With existing, resuming (the session dir has a transcript): that kernel
       is the one the session ran in before and it kept running (korch serve
       re-adopted it after its own restart), so its variables are live: the
       conversation and notebook are reloaded, nothing is restored or re-run,
       and the user and the model are told so. */
    bool resume_live;
    const char *session_dir;        /* required; created, or resumed when it has a transcript */
    int max_steps;                  /* per turn, default 20 */
    size_t max_result_chars;        /* per execution result, default 4000 */
    int64_t max_tokens;             /* per turn (input + output), 0 = no budget */
    int max_seconds;                /* per turn, 0 = no budget */
    double max_cost;                /* per turn, in the price table's currency; 0 = no budget (needs prices) */
    const korch_prices_t *prices;   /* borrowed, may be NULL: tokens into cost (korch/ledger.h) */
    int exec_timeout_s;             /* per execution, default 300 */
    size_t context_chars;           /* what is sent per request, roughly; default 120000 */
    /* Code interpreter behaviour: a reply with a fenced block in the kernel's
       language and no tool call is run. true: such a reply is the answer. */
    bool no_fence_run;
    const char *system_append;      /* added to korch's system prompt (copied) */
    const char *system_replace;     /* instead of korch's system prompt (copied) */
    /* The kernel's work dir on this host, watched for the files the code
       writes. NULL: files/ when the agent starts the kernel itself; not
       watched when it attaches to an existing one. */
    const char *workdir;
    /* No workdir on this host (a container's volume): list it from inside the
       kernel after each step instead (Python kernels), and keep the latest
       listing in workdir.json in the session dir. */
    bool workdir_in_kernel;
    long snapshot_bytes;            /* Python: pickled variables kept per snapshot (default 4 MiB; < 0 = none) */
    /* The session's output budget: transcript, notebook and figures on disk
       together, across kernel restarts and resumes (default 256 MiB). Near
       it, outputs are not kept and the turn ends (agent_budget.c). */
    uint64_t max_session_bytes;
    /* The counters of a kernel it attaches to (existing: korch serve's, read
       with korch_usage_read from the agent's thread): each step's CPU seconds
       and peak memory. NULL: unknown there (a kernel of its own is asked
       through its launcher). Borrowed; outlives the agent. */
    const korch_usage_src_t *usage_src;
    void (*on_event)(const korch_agent_event_t *ev, void *arg);
    /* Polled during model calls: true abandons the call (e.g. Ctrl-C seen). */
    bool (*cancelled)(void *arg);
    /* existing: the agent is being ended (korch serve stops or deletes the
       session; its kernel may be shut down under it without a word): the
       kernel counts as gone for good once this is true, so no wait on it
       outlasts a second. May be NULL. */
    bool (*ended)(void *arg);
    void *arg;                      /* for on_event, cancelled and ended */
} korch_agent_opts_t;

korch_agent_t *korch_agent_new(const korch_agent_opts_t *opts, korch_err_t *err);
void korch_agent_destroy(korch_agent_t **agent);

/* Copy a file into the session (files/) where the kernel sees it by its base
   name. A different file of that name already there is kept: this one gets
   a free name (sales-2.csv), a NOTICE says so, and *stored (may be NULL;
   new string) is the name used. The same bytes again are not copied twice. */
korch_rc_t korch_agent_add_file(korch_agent_t *agent, const char *path, char **stored, korch_err_t *err);

/* The kernel's working directory changed behind the agent's back (files
   were uploaded into it): describe its files to the model again at the next
   turn. */
void korch_agent_files_changed(korch_agent_t *agent);

/* Remove rel (a path as korch_agent_files lists it) from the kernel's work
   dir - from inside the kernel when that dir is not on this host - and
   korch's copy of it in the session's files/, never following a link on
   the way; recorded in the transcript, the listing walked again.
   KORCH_E_NOTFOUND when neither had it, KORCH_E_INVALID for a path that is
   not plain or names a directory. Between turns only. */
korch_rc_t korch_agent_remove_file(korch_agent_t *agent, const char *rel, korch_err_t *err);

/* One user turn. *answer (new string) is the model's final text. A failed
   model call returns its error; everything said before it is saved. */
korch_rc_t korch_agent_ask(korch_agent_t *agent, const char *question, char **answer, korch_err_t *err);

/* Stop the running step (interrupt the kernel, abandon the model call); the
   session stays. Safe from a signal-driven loop handler. */
void korch_agent_interrupt(korch_agent_t *agent);
/* From the owner of the kernel it attached to (opts.existing), on the
   agent's loop: that kernel's process went at died_ms (korch_now_ms) and
   comes back on the same connection (restarted) or not. A step sent to the
   process that went ends then, told the kernel restarted, instead of
   waiting for its timeout (korch_kernel_gone). */
void korch_agent_kernel_gone(korch_agent_t *agent, bool restarted, int64_t died_ms, const char *why);

const char *korch_agent_session_dir(const korch_agent_t *agent);
/* Token usage so far (whole session). */
int64_t korch_agent_tokens(const korch_agent_t *agent);

/* Tokens as the APIs reported them, unknown kept unknown (korch/ledger.h). */
typedef korch_usage_t korch_agent_usage_t;

/* The current (or last) turn's usage and the whole session's, either may be NULL. */
void korch_agent_usage(const korch_agent_t *agent, korch_agent_usage_t *turn, korch_agent_usage_t *session);

/* The model's name ("openai:gpt-4o-mini"). */
const char *korch_agent_llm_name(const korch_agent_t *agent);

/* The one event schema (docs/events.schema.json, docs/events.md): ev as the
   JSON object korch run --json prints and korch serve streams,
   {"event": NAME, "step": N, ...}. New object. */
json_t *korch_agent_event_json(const korch_agent_event_t *ev);
/* The event's name ("step", "code_delta", ...). */
const char *korch_agent_event_name(korch_agent_event_type_t type);
/* The record that closes every turn's stream: {"event": "done", "status":
   "ok" | "interrupted" | "error", "message"?, "steps", "elapsed_ms",
   "tokens": {"turn", "session"}, "cost": {"turn", "session"}, "stopped_by"?}
   for the turn that ask() returned rc for. New object. */
json_t *korch_agent_done_json(const korch_agent_t *agent, korch_rc_t rc, const char *message);

/* The current (or last) turn's cost and the whole session's (each call
   priced with opts.prices), either may be NULL. */
void korch_agent_cost(const korch_agent_t *agent, korch_cost_t *turn, korch_cost_t *session);

/* Write the notebook without its dead ends (korch_notebook_clean: the
   failed attempts left out) to path. */
korch_rc_t korch_agent_save_clean_notebook(korch_agent_t *agent, const char *path, korch_err_t *err);

/* Verify the last answer: the clean notebook re-run top to bottom in a
   fresh kernel of the same launcher and kernelspec, in a work dir holding
   only the session's input files, and the outputs the answer's numbers came
   from compared with the first run's. *result (new; may be NULL):
   {status: "reproduced" | "differed" | "failed", cells, compared,
   differences: [{text, printed, execution_count, now}], message?, seconds,
   turn_seconds, kernel}; also in the notebook's metadata (korch.verify),
   the transcript and a VERIFY event. Fails (KORCH_E_STATE) for an agent on
   someone else's kernel. Blocking, like ask(). */
korch_rc_t korch_agent_verify(korch_agent_t *agent, json_t **result, korch_err_t *err);
/* The same in a fresh kernel someone else started (korch serve's kernel
   manager), reached through its connection file conn_path, whose work dir
   holds the session's input files already; the caller shuts it down
   afterwards. started_ms (korch_now_ms when the kernel was asked for; 0 =
   now) is where the result's seconds count from. Blocking, like ask(). */
korch_rc_t korch_agent_verify_in(korch_agent_t *agent, const char *conn_path, int64_t started_ms, json_t **result,
                                 korch_err_t *err);

/* Branch a session from one of its code steps: a new session in o->dir
   (which must not exist) holding the parent's conversation up to and
   including that step, its input files as the parent has them (what no
   longer matches the size it was given at is said), its figures, and the
   snapshot of the kernel's variables kept after that step when there is
   one; the transcript's first record names the branch's model and a
   "branch" record ends it. The parent's dir is only read. Opening the
   branch with korch_agent_new rebuilds its kernel: the successful cells up
   to the step re-run in a fresh kernel and their outputs compared with the
   parent's, then the snapshot restored over them (a BRANCH event says how
   it went). *info (new; may be NULL): the branch record, with "steps", the
   parent's count. KORCH_E_NOTFOUND: no session in parent_dir;
   KORCH_E_INVALID: a step out of range (the message says the range), a dir
   that exists. No kernel; blocking file work (bounded: the transcript to
   256 MiB, inputs to 2 GiB, figures to 256 MiB). */
typedef struct {
    const char *parent_dir;     /* required */
    const char *dir;            /* required: the branch's, new */
    int step;                   /* >= 1: the session's N-th step that ran code, or with turn, that turn's step N */
    int turn;                   /* 0: step counts across the session */
    const char *llm;            /* the branch's model; NULL = the parent's */
    const char *parent_id;      /* the parent's name in the records (NULL: its dir's base name) */
    const char *id;             /* the branch's (NULL: its dir's base name) */
} korch_agent_branch_opts_t;
korch_rc_t korch_agent_branch(const korch_agent_branch_opts_t *o, json_t **info, korch_err_t *err);

/* Write the session's notebook (nbformat 4.5) to path as well. */
korch_rc_t korch_agent_save_notebook(korch_agent_t *agent, const char *path, korch_err_t *err);
/* The files in the kernel's work dir (files/ or opts.workdir), uploads and
   what the code wrote: a new array [{path, size}] (empty when not watched). */
json_t *korch_agent_files(korch_agent_t *agent);

/* The kernel's language (language_info.name, e.g. "python", "R"). */
const char *korch_agent_language(const korch_agent_t *agent);

#endif
