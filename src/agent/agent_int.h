/*  Inside korch_agent: what the files of src/agent/agent*.c share. Not a
 *  public API (that is korch/agent.h).
 *
 *  The files, top to bottom; each calls only those below it:
 *
 *  agent.c         new / destroy, the user's files, accessors, the turn
 *                  (korch_agent_ask: model, tool calls, budgets, answer).
 *  agent_step.c    one tool call run in the kernel: its result, the files
 *                  it changed, figures, restarts, the transcript records.
 *  agent_resume.c  snapshots of the kernel's variables, and resuming a
 *                  session: the transcript reloaded, the kernel rebuilt.
 *  agent_kernel.c  the kernel: starting it, its language, korch's own quiet
 *                  code (work dir listing and reads, file descriptions).
 *  agent_prompt.c  what the model is sent (tools, system prompt, the
 *                  messages within the context budget), what its reply
 *                  means (tool calls, fenced or printed code), the call.
 *  agent_events.c  events to the caller, transcript records, the notebook.
 *  agent_verify.c  the clean notebook re-run in a fresh kernel (public: korch/agent.h).
 *  branch.c        a branch's session dir made from its parent's (public: korch/agent.h).
 *  agent_json.c    events as the one schema's JSON (docs/events.schema.json),
 *                  the turn's `done` record (public: korch/agent.h).
 *
 *  Not thread-safe, like korch_agent_t: everything runs on the caller's
 *  thread. A json_t argument is borrowed unless the comment says stolen.
 */
#ifndef KORCH_AGENT_INT_H
#define KORCH_AGENT_INT_H

#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <jansson.h>

#include "korch/agent.h"
#include "korch/jsonfield.h"
#include "korch/kernel.h"
#include "korch/notebook.h"
#include "korch/receipts.h"
#include "korch/workdir.h"

/* The last sentence of the note that replaces what the agent's outputs
   could not show (korch/neutralise.h). */
#define AGENT_NEUT_HINT "Run the code yourself in a kernel the agent has not used to see it in full."

#define LIVE_CALLS 8            /* tool calls of one reply whose code is shown as it is written */
#define MAX_FILES_LISTED 100      /* per FILES event */
#define MAX_FILES_TOLD 20         /* per result the model reads */
#define MAX_FIGURE_FILE (20u << 20) /* an image file the code saved, copied to figures/ */
#define MAX_FIGURE_FILES 10       /* per step */

struct korch_agent {
    korch_agent_opts_t o;
    char *kernelspec;
    char *existing;             /* attached to someone else's kernel (NULL: ours) */
    bool files_dirty;           /* describe the files again before the next turn */
    char dir[PATH_MAX], files_dir[PATH_MAX + 8], figures_dir[PATH_MAX + 8];
    char transcript_path[PATH_MAX + 24], notebook_path[PATH_MAX + 24];
    FILE *transcript;
    json_t *messages;           /* neutral, without the system message */
    json_t *tools;
    json_t *file_info;          /* what the kernel said about the user's files */
    korch_notebook_t *nb;
    korch_kernel_t *k;
    korch_exec_t *running;      /* the execution in flight, for interrupts */
    int figures;
    int fence_ids;
    int64_t tokens;
    korch_agent_usage_t turn_usage, session_usage;
    korch_cost_t turn_cost, session_cost;   /* each call priced on its own (o.prices) */
    int turn;                   /* the user's questions so far (1 = the first) */
    int turn_steps;             /* the last step of the current (or last) turn */
    int64_t turn_t0, turn_ms;   /* when it began; how long it took once over */
    char stopped_by[16];        /* the budget that ended it: "steps", "tokens", "cost", "seconds" ("" none) */
    bool budget_told;           /* a budget that cannot be applied was said this turn */
    bool fence_told;            /* the model was asked this turn to write the kernel's language */
    korch_receipts_t *receipts; /* what the kernel printed, for the numbers of an answer */
    json_t *last_receipts;      /* the last answer's (for korch_agent_verify) */
    int step;
    volatile sig_atomic_t interrupted;
    /* live progress of the running step */
    korch_jsonfield_t live[LIVE_CALLS];     /* each tool call's "code" as it streams */
    bool live_on[LIVE_CALLS];
    const char *phase;                      /* "model", "retry", "executing" */
    int64_t phase_t0, status_last, retry_until;
    int retry_attempt;
    long retry_status;
    /* the kernel's language, from its kernel_info_reply */
    json_t *language_info;
    char lang[64];              /* language_info.name as the kernel says it ("python", "R") */
    char lang_label[160];       /* for people and prompts: "Python 3.11.2" */
    char tool_name[32];         /* run_python for Python (as before), run_code for the others */
    bool python;
    char *system_append, *system_replace;
    korch_workdir_t *wd;        /* the kernel's work dir, when it is on this host */
    char snapshot_path[PATH_MAX + 24];
    int executions;             /* execution records in the transcript */
    char *resume_note;          /* how a resume rebuilt the kernel's state: told to the model */
    bool wd_in_kernel;          /* the work dir is not on this host: listed from inside the kernel */
    char *kernel_cwd;           /* its path in the kernel (wd_in_kernel) */
    int64_t wd_scanned_ms;      /* when the last walk from inside the kernel began (korch_workdir_clock_ms) */
    uint64_t figure_bytes;      /* in figures/ (agent_budget.c) */
    int64_t kernel_cpu_ns;      /* the session's steps' CPU time, from the kernel's cgroup (-1: none known) */
    int64_t kernel_mem_peak;    /* the highest peak of memory of its steps (-1: none known) */
    int64_t turn_cpu_ns, turn_mem_peak; /* the same for this turn's steps (done.kernel.turn) */
    uint64_t budget_pending;    /* a step's outputs not yet written to transcript and notebook */
    json_t *branch;             /* a branch whose kernel is not rebuilt yet: its transcript record (branch.c) */
};
/* agent_events.c */
void agent_emit(korch_agent_t *a, korch_agent_event_type_t type, const char *text, json_t *data);
/* A STATUS event: the phase, how long it lasts, a retry's details. */
void agent_status(korch_agent_t *a);
/* A new phase ("model", "retry", "executing") begins: a STATUS event. */
void agent_phase(korch_agent_t *a, const char *phase);
/* A markdown cell of printf text; returns the text (new) or NULL without memory. */
char *agent_add_md(korch_agent_t *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Append one record (stolen) to the transcript and flush it to disk. */
korch_rc_t agent_record(korch_agent_t *a, json_t *rec, korch_err_t *err);
/* Rewrite notebook.ipynb; a failure is an ERROR event. */
void agent_write_notebook(korch_agent_t *a);

/* agent_packages.c: after a step whose code ran pip install, what the
   Python kernel's own environment holds, into the notebook's
   metadata.korch.packages; the same list (new) for the step's transcript
   record, NULL when the code installed nothing or the kernel did not say. */
json_t *agent_note_packages(korch_agent_t *a, const char *code);
/* metadata.korch.packages = list (borrowed; a resumed session's from its
   transcript's latest "packages"). */
void agent_packages_set(korch_agent_t *a, json_t *list);
/* Install list ([{name, version}], borrowed) into kernel k (a->k or
   verify's fresh one) with %pip, exact versions, no dependencies (the list
   has them all), before anything else runs there. Returns how many were
   asked for (0: none, or not a Python kernel), -1 when pip failed (*msg
   says why, for people and the model). Blocks on k for up to 10 min. */
int agent_packages_install(korch_agent_t *a, korch_kernel_t *k, json_t *list, char *msg, size_t len);

/* agent_prompt.c */
/* The tool the model calls (run_python / run_code), new reference. */
json_t *agent_tools(korch_agent_t *a);
/* Fenced blocks in the kernel's language as neutral tool calls (new array). */
json_t *agent_fence_calls(korch_agent_t *a, const char *text, bool untagged);
/* A fence of code in another language than the kernel's: true, its tag in lang. */
bool agent_foreign_fence(korch_agent_t *a, const char *text, char *lang, size_t lang_len);
/* Is name the tool (or the generic name a model guessed for it)? */
bool agent_tool_name_ok(korch_agent_t *a, const char *name);
/* A reply that is only a printed tool call, as that call (new array), else NULL. */
json_t *agent_text_tool_call(korch_agent_t *a, const char *text);
/* a->messages cut for good to what a request can send (o.context_chars,
   the two latest messages' images): the rest is in the transcript. */
void agent_prune_messages(korch_agent_t *a);
/* One model request over the conversation; usage recorded. */
korch_rc_t agent_call_model(korch_agent_t *a, bool with_tools, korch_llm_reply_t *reply, korch_err_t *err);

/* agent_kernel.c */
/* The execution callback that turns outputs into OUTPUT events (arg: the agent). */
void agent_on_output(korch_exec_t *ex, korch_output_event_t ev, json_t *output, size_t index, void *arg);
/* Run code quietly (korch's own bookkeeping); returns stdout, new string. */
char *agent_run_quiet(korch_agent_t *a, const char *code);
/* Walk the work dir now (see korch_workdir_scan); NULL when it cannot be. */
json_t *agent_wd_scan(korch_agent_t *a);
/* A file of the work dir, at most max bytes (new), or NULL. */
char *agent_wd_read(korch_agent_t *a, const char *path, size_t max, size_t *len);
/* Keep the latest listing in workdir.json (work dir not on this host). */
void agent_wd_save(korch_agent_t *a);
/* Remove rel from the work dir (see korch_agent_remove_file; from inside the kernel when it is not on this host). */
korch_rc_t agent_wd_remove(korch_agent_t *a, const char *rel, korch_err_t *err);
/* What the kernel says about the user's files, into a->file_info. */
void agent_describe_files(korch_agent_t *a);
/* Start (or attach to) the kernel and wait until it is ready. */
korch_rc_t agent_start_kernel(korch_agent_t *a, korch_err_t *err);

/* agent_resume.c */
/* After a step: keep the kernel's variables in snapshot.json. */
void agent_snapshot(korch_agent_t *a);
/* A resumed session's fresh kernel: snapshot restored, later cells re-run. */
void agent_rebuild(korch_agent_t *a, json_t *replay, korch_err_t *err);
/* A branch's fresh kernel: its cells re-run and compared, the step's snapshot over them. */
void agent_rebuild_branch(korch_agent_t *a, json_t *replay, korch_err_t *err);
/* A resumed session in the kernel it ran in before: nothing rebuilt. */
void agent_resume_live(korch_agent_t *a);
/* Reload messages and the notebook from the transcript; each execution's
   code and status appended to replay. */
void agent_load_transcript(korch_agent_t *a, json_t *replay);

/* agent_verify.c: the text a cell's outputs show (stream, text/plain), at most max bytes. New string. */
#define AGENT_PRINTED_MAX (64u << 10)
char *agent_outputs_text(json_t *outputs, size_t max);

/* agent_budget.c: the session's output budget on disk (see there) */
/* At new and resume: the default, figures/ counted. */
void agent_budget_load(korch_agent_t *a);
/* Bytes used: transcript + notebook + figures. */
uint64_t agent_budget_used(korch_agent_t *a);
uint64_t agent_budget_left(korch_agent_t *a);
/* What one execution may keep, of stream text and of rich output each (never 0). */
size_t agent_budget_exec_bytes(korch_agent_t *a);
/* A figure file of bytes may be written: charged (false: it does not fit). */
bool agent_budget_take(korch_agent_t *a, uint64_t bytes);
/* A step's outputs (nbformat, borrowed) are on their way to the transcript
   and the notebook: count them as used until agent_budget_written. */
void agent_budget_pending(korch_agent_t *a, const json_t *outputs);
void agent_budget_written(korch_agent_t *a);
/* A figure korch wrote at path (its size) is charged. */
void agent_budget_charge_file(korch_agent_t *a, const char *path);
/* So little is left that the turn ends. */
bool agent_budget_spent(korch_agent_t *a);
/* "this session has used its output budget (...)" into buf. */
const char *agent_budget_note(korch_agent_t *a, char *buf, size_t len);

/* agent_step.c */
/* Run one tool call; false if the user interrupted. */
bool agent_run_call(korch_agent_t *a, json_t *call, korch_err_t *err);
/* Answer the calls of calls[from..] the user's interrupt left unrun. */
void agent_answer_unrun(korch_agent_t *a, json_t *calls, size_t from);

#endif
