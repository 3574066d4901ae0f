/*  The session's output budget: what an agent session may put on disk in
 *  its directory (transcript.jsonl, notebook.ipynb, figures/), together,
 *  over the session's life.
 *
 *  It belongs to the session, not to the kernel: a kernel that kills
 *  itself comes back with fresh per-kernel counters (korch_kernel_t's),
 *  and before this a turn with five self-restarts left 141 MB of
 *  transcript, 141 MB of notebook and 106 MB of figures. What is used is
 *  measured on disk (the two files' sizes, the figures' bytes), so a
 *  resumed session starts where it stopped: the budget spans resumes too.
 *
 *  Every writer is bounded by it: an execution keeps at most a fifth of
 *  what is left of each of stream text and rich output (korch_exec_opts_t
 *  .max_output_bytes; what it keeps is written twice, to the transcript
 *  and the notebook, and its images once more to figures/, so one step
 *  stays within what is left); an image file the code saved is copied to
 *  figures/ only when it fits beside the step's outputs, which are counted
 *  as used from the moment the execution ends (agent_budget_pending: before,
 *  a 3 MB file saved by the step that printed 6 MB went to figures/ against
 *  the budget as it was before the step, and a 4 MiB session ended at 4.5). Once less than BUDGET_MIN is left the turn
 *  ends (agent.c), and the model and the user are told.
 */
#include "agent_int.h"
#include "korch/outputs.h"

#include <dirent.h>
#include <stdio.h>
#include <sys/stat.h>

#define BUDGET_DEFAULT (256ull << 20)
#define BUDGET_MIN (1ull << 20)

static uint64_t s_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) ? (uint64_t)st.st_size : 0;
}

void agent_budget_load(korch_agent_t *a)
{
    if (!a->o.max_session_bytes)
        a->o.max_session_bytes = BUDGET_DEFAULT;
    a->figure_bytes = 0;
    DIR *d = opendir(a->figures_dir);
    struct dirent *de;
    char path[PATH_MAX + 300];
    while (d && (de = readdir(d)))
        if (de->d_name[0] != '.' &&
            snprintf(path, sizeof path, "%s/%s", a->figures_dir, de->d_name) < (int)sizeof path)
            a->figure_bytes += s_size(path);
    if (d)
        closedir(d);
}

uint64_t agent_budget_used(korch_agent_t *a)
{
    return s_size(a->transcript_path) + s_size(a->notebook_path) + a->figure_bytes + a->budget_pending;
}

void agent_budget_pending(korch_agent_t *a, const json_t *outputs)
{
    /* written twice (transcript and notebook), as JSON; json_dumpb with no
       buffer only measures */
    a->budget_pending = outputs ? 2 * (uint64_t)json_dumpb(outputs, NULL, 0, JSON_COMPACT) : 0;
}

void agent_budget_written(korch_agent_t *a) { a->budget_pending = 0; }

uint64_t agent_budget_left(korch_agent_t *a)
{
    uint64_t used = agent_budget_used(a);
    return used < a->o.max_session_bytes ? a->o.max_session_bytes - used : 0;
}

size_t agent_budget_exec_bytes(korch_agent_t *a)
{
    uint64_t share = agent_budget_left(a) / 5;
    return share ? (size_t)share : 1; /* 0 would mean "no limit" */
}

bool agent_budget_take(korch_agent_t *a, uint64_t bytes)
{
    if (bytes > agent_budget_left(a))
        return false;
    a->figure_bytes += bytes;
    return true;
}

void agent_budget_charge_file(korch_agent_t *a, const char *path) { a->figure_bytes += s_size(path); }

bool agent_budget_spent(korch_agent_t *a) { return agent_budget_left(a) < BUDGET_MIN; }

const char *agent_budget_note(korch_agent_t *a, char *buf, size_t len)
{
    char max[32], used[32];
    korch_outputs_human_bytes((size_t)a->o.max_session_bytes, max, sizeof max);
    korch_outputs_human_bytes((size_t)agent_budget_used(a), used, sizeof used);
    snprintf(buf, len,
             "this session has used its output budget (%s of %s on disk: transcript, notebook and figures, across "
             "kernel restarts); the outputs of further code are not kept",
             used, max);
    return buf;
}
