#include "agent_int.h"

#include "korch/buf.h"
#include "korch/feedback.h"
#include "korch/log.h"
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ------------------------------------------------------------ prompts */

json_t *agent_tools(korch_agent_t *a)
{
    char desc[512], pdesc[128];
    snprintf(desc, sizeof desc,
             "Run %s code in the user's persistent Jupyter kernel (%s). Variables, imports and files persist "
             "between calls. Returns stdout/stderr, the value of the last expression, errors with tracebacks, "
             "and charts.",
             a->lang, a->lang_label);
    snprintf(pdesc, sizeof pdesc, "The %s code to run", a->lang);
    return json_pack("[{s:s, s:s, s:{s:s, s:{s:{s:s, s:s}}, s:[s]}}]", "name", a->tool_name, "description", desc,
                     "parameters", "type", "object", "properties", "code", "type", "string", "description", pdesc,
                     "required", "code");
}

/* Is a fence's info string ("python", "r", "{r}") the kernel's language?
   An untagged fence counts only when untagged is true (fence mode: the model
   was asked for code blocks; elsewhere it is usually output or prose). */
static bool s_fence_lang(korch_agent_t *a, const char *tag, size_t len, bool untagged)
{
    while (len && (tag[len - 1] == ' ' || tag[len - 1] == '\r' || tag[len - 1] == '\t'))
        len--;
    if (len >= 2 && tag[0] == '{' && tag[len - 1] == '}') { /* R Markdown style ```{r} */
        tag++;
        len -= 2;
    }
    if (len == 0)
        return untagged;
    const char *names[6] = {a->lang, json_string_value(json_object_get(a->language_info, "pygments_lexer")),
                            json_string_value(json_object_get(a->language_info, "file_extension")), NULL, NULL, NULL};
    if (a->python) {
        names[3] = "py";
        names[4] = "python3";
        names[5] = "ipython";
    }
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        const char *n = names[i];
        if (n && *n == '.')
            n++;
        if (n && strlen(n) == len && strncasecmp(n, tag, len) == 0)
            return true;
    }
    return false;
}

static char *s_system_prompt(korch_agent_t *a)
{
    size_t cap = 16384 + (a->system_replace ? strlen(a->system_replace) : 0) +
                 (a->system_append ? strlen(a->system_append) : 0) + (a->resume_note ? strlen(a->resume_note) : 0);
    char *p = malloc(cap);
    if (!p)
        return NULL;
    size_t n = 0;
    bool fence = korch_llm_fence_mode(a->o.llm);
    bool vision = korch_llm_vision(a->o.llm);
    if (a->system_replace) {
        n += (size_t)snprintf(p + n, cap - n, "%s", a->system_replace);
        goto resume_note;
    }
    if (a->python)
        n += (size_t)snprintf(p + n, cap - n,
                              "You are a careful data analyst working in a persistent Jupyter kernel (%s with "
                              "pandas, numpy and matplotlib). Write Python code only: no other language runs here. ",
                              a->lang_label);
    else
        n += (size_t)snprintf(p + n, cap - n,
                              "You are a careful data analyst working in a persistent Jupyter kernel running %s "
                              "(%s). Write %s code only. ",
                              a->lang, a->lang_label, a->lang);
    if (fence)
        n += (size_t)snprintf(p + n, cap - n,
                              "To run code, reply with exactly one ```%s fenced code block; the next message "
                              "will show you its output. ",
                              a->python ? "python" : a->lang);
    else
        n += (size_t)snprintf(p + n, cap - n, "Run code with the %s tool. ", a->tool_name);
    n += (size_t)snprintf(p + n, cap - n,
                          "The kernel keeps its state: variables, imports and loaded data persist between code runs "
                          "and across the user's questions.\n");
    if (json_array_size(a->file_info)) {
        n += (size_t)snprintf(p + n, cap - n,
                              "The user's files are in the kernel's working directory (the current directory), under "
                              "these names:\n");
        size_t i;
        json_t *f;
        json_array_foreach(a->file_info, i, f) {
            if (n + 600 > cap)
                break;
            n += (size_t)snprintf(p + n, cap - n, "- %s (%lld bytes)", json_string_value(json_object_get(f, "name")),
                                  (long long)json_integer_value(json_object_get(f, "bytes")));
            json_t *rows = json_object_get(f, "rows");
            if (json_is_integer(rows))
                n += (size_t)snprintf(p + n, cap - n, ", %lld rows", (long long)json_integer_value(rows));
            json_t *cols = json_object_get(f, "columns");
            if (json_object_size(cols)) {
                n += (size_t)snprintf(p + n, cap - n, "; columns:");
                const char *c;
                json_t *t;
                json_object_foreach(cols, c, t) {
                    if (n + 200 > cap)
                        break;
                    n += (size_t)snprintf(p + n, cap - n, " %s (%s),", c, json_string_value(t));
                }
                p[n - 1] = ' ';
            }
            n += (size_t)snprintf(p + n, cap - n, "\n");
        }
    }
    if (a->python)
        n += (size_t)snprintf(p + n, cap - n,
                              "Charts made with matplotlib are captured automatically when you call plt.show() (no "
                              "savefig needed); ");
    else
        n += (size_t)snprintf(p + n, cap - n, "Plots the kernel displays are captured automatically; ");
    n += (size_t)snprintf(p + n, cap - n,
                          "%s Files your code writes in the working directory are listed after each run (images "
                          "saved as .png, .jpg or .svg count as charts). "
                          "Print concise results: long outputs are cut to about %zu characters. Work in small steps "
                          "and check intermediate results; if code fails, read the error and fix it. "
                          "When you have the answer, reply to the user in plain text without %s.",
                          vision ? "you will see each chart as an image." : "you will be told each chart's file name.",
                          a->o.max_result_chars, fence ? "a code block" : "calling the tool");
    if (a->system_append && n + 64 < cap)
        n += (size_t)snprintf(p + n, cap - n, "\n\n%s", a->system_append);
resume_note:
    if (a->resume_note && n + 64 < cap)
        n += (size_t)snprintf(p + n, cap - n, "\n\n%s", a->resume_note);
    return p;
}

/* ------------------------------------------------------- the requests */

static size_t s_msg_chars(json_t *m)
{
    size_t n = json_string_length(json_object_get(m, "content")) + 32;
    json_t *calls = json_object_get(m, "tool_calls");
    size_t i;
    json_t *c;
    json_array_foreach(calls, i, c) {
        char *s = json_dumps(json_object_get(c, "arguments"), JSON_COMPACT);
        n += s ? strlen(s) : 0;
        free(s);
    }
    n += json_array_size(json_object_get(m, "images")) * 1500; /* roughly what an image costs */
    return n;
}

/* Keep a->messages within what a request can send, for good: only the two
   most recent messages with images keep them, then (over the context
   budget) older tool outputs are cut to 600 characters, then the oldest
   turns go. What goes was sent before and stays in the transcript on disk;
   a later request would have dropped it again, so the conversation in
   memory is bounded by o.context_chars (plus two messages' images) however
   many turns the session runs. */
void agent_prune_messages(korch_agent_t *a)
{
    json_t *msgs = a->messages;
    size_t n = json_array_size(msgs);
    int kept = 0;
    for (size_t i = n; i-- > 0;) {
        json_t *m = json_array_get(msgs, i);
        if (json_array_size(json_object_get(m, "images")) && kept++ >= 2)
            json_object_del(m, "images");
    }
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += s_msg_chars(json_array_get(msgs, i));
    for (size_t i = 0; total > a->o.context_chars && i + 6 < n; i++) {
        json_t *m = json_array_get(msgs, i);
        const char *role = json_string_value(json_object_get(m, "role"));
        json_t *c = json_object_get(m, "content");
        if (role && strcmp(role, "tool") == 0 && json_string_length(c) > 600) {
            size_t before = s_msg_chars(m);
            char *cut = korch_truncate_middle(json_string_value(c), json_string_length(c), 600);
            json_object_set_new(m, "content", json_string(cut ? cut : ""));
            free(cut);
            json_object_del(m, "images");
            total -= before - s_msg_chars(m);
        }
    }
    /* still too much: drop whole turns (from a user message to the next) */
    while (total > a->o.context_chars) {
        size_t next = 0;
        for (size_t i = 1; i < json_array_size(msgs); i++) {
            const char *role = json_string_value(json_object_get(json_array_get(msgs, i), "role"));
            if (role && strcmp(role, "user") == 0) {
                next = i;
                break;
            }
        }
        if (next == 0)
            break;
        for (size_t i = 0; i < next; i++) {
            total -= s_msg_chars(json_array_get(msgs, 0));
            json_array_remove(msgs, 0);
        }
    }
}

/* The messages to send: system prompt first, the conversation pruned to
   the budget (agent_prune_messages). In fence mode tool calls and results
   become plain text turns. New array; its messages may be shared with
   a->messages (the providers only read them). */
static json_t *s_request_messages(korch_agent_t *a)
{
    agent_prune_messages(a);
    json_t *msgs = json_copy(a->messages);
    if (korch_llm_fence_mode(a->o.llm)) {
        json_t *plain = json_array();
        size_t i;
        json_t *m;
        json_array_foreach(msgs, i, m) {
            const char *role = json_string_value(json_object_get(m, "role"));
            if (role && strcmp(role, "tool") == 0) {
                size_t len = json_string_length(json_object_get(m, "content")) + 64;
                char *text = malloc(len);
                snprintf(text, len, "Output of your code:\n%s", json_string_value(json_object_get(m, "content")));
                json_t *u = json_pack("{s:s, s:s}", "role", "user", "content", text);
                free(text);
                if (json_object_get(m, "images"))
                    json_object_set(u, "images", json_object_get(m, "images"));
                json_array_append_new(plain, u);
            } else {
                json_t *c = json_deep_copy(m);
                json_object_del(c, "tool_calls");
                json_array_append_new(plain, c);
            }
        }
        json_decref(msgs);
        msgs = plain;
    }
    char *system = s_system_prompt(a);
    json_array_insert_new(msgs, 0, json_pack("{s:s, s:s}", "role", "system", "content", system ? system : ""));
    free(system);
    return msgs;
}

/* Fenced blocks in the kernel's language (```python, ```r) as neutral tool
   calls: a fence-mode reply's, or a tool-mode reply's that made no call. */
json_t *agent_fence_calls(korch_agent_t *a, const char *text, bool untagged)
{
    json_t *calls = json_array();
    const char *p = text;
    while ((p = strstr(p, "```"))) {
        const char *lang = p + 3;
        const char *nl = strchr(lang, '\n');
        if (!nl)
            break;
        bool ours = s_fence_lang(a, lang, (size_t)(nl - lang), untagged);
        const char *end = strstr(nl + 1, "```");
        if (!end)
            break;
        if (ours) {
            char id[32];
            snprintf(id, sizeof id, "fence_%d", ++a->fence_ids);
            json_t *code = json_stringn(nl + 1, (size_t)(end - nl - 1));
            json_array_append_new(calls, json_pack("{s:s, s:s, s:{s:o}}", "id", id, "name", a->tool_name, "arguments",
                                                   "code", code ? code : json_string("")));
        }
        p = end + 3;
    }
    return calls;
}

/* A fenced block of code in a programming language that is not the
   kernel's (```javascript in a Python kernel): its tag into lang (lang_len
   bytes), true. Output-like fences (text, json, console, sh, sql, markdown)
   are not code the model meant to run here. */
bool agent_foreign_fence(korch_agent_t *a, const char *text, char *lang, size_t lang_len)
{
    static const char *const code_langs[] = {"javascript", "js", "node", "typescript", "ts", "java", "kotlin",
                                             "scala", "c", "cpp", "c++", "csharp", "cs", "go", "golang", "rust",
                                             "ruby", "php", "perl", "lua", "swift", "r", "julia", "python", "py",
                                             "matlab", "octave", NULL};
    const char *p = text;
    while ((p = strstr(p, "```"))) {
        const char *tag = p + 3;
        const char *nl = strchr(tag, '\n');
        const char *end = nl ? strstr(nl + 1, "```") : NULL;
        if (!end)
            return false;
        size_t len = (size_t)(nl - tag);
        while (len && (tag[len - 1] == ' ' || tag[len - 1] == '\r'))
            len--;
        if (len && !s_fence_lang(a, tag, len, false))
            for (int i = 0; code_langs[i]; i++)
                if (strlen(code_langs[i]) == len && strncasecmp(code_langs[i], tag, len) == 0) {
                    snprintf(lang, lang_len, "%.*s", (int)len, tag);
                    return true;
                }
        p = end + 3;
    }
    return false;
}

/* The tool's name, or the other one (run_code / run_python): a model that
   guessed the generic name meant this tool. */
bool agent_tool_name_ok(korch_agent_t *a, const char *name)
{
    return strcmp(name, a->tool_name) == 0 || strcmp(name, "run_code") == 0 ||
           (a->python && strcmp(name, "run_python") == 0);
}

/* Some models print the tool call instead of making it: a reply that is
   only {"name": "run_python", "arguments": {"code": ...}} (or {"code": ...}),
   maybe in a ```json fence, is taken as the call it meant to be. */
json_t *agent_text_tool_call(korch_agent_t *a, const char *text)
{
    const char *p = text;
    while (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')
        p++;
    size_t len = strlen(p);
    while (len && (p[len - 1] == ' ' || p[len - 1] == '\n' || p[len - 1] == '\r' || p[len - 1] == '\t'))
        len--;
    if (len > 7 && strncmp(p, "```", 3) == 0 && strncmp(p + len - 3, "```", 3) == 0) {
        const char *nl = memchr(p, '\n', len);
        if (!nl)
            return NULL;
        len = (size_t)(p + len - 3 - (nl + 1));
        p = nl + 1;
    }
    if (!len || *p != '{')
        return NULL;
    json_t *j = json_loadb(p, len, 0, NULL);
    json_t *args = json_object_get(j, "arguments");
    if (!args)
        args = json_object_get(j, "parameters");
    if (json_is_string(args)) { /* arguments as a JSON string, OpenAI style */
        json_t *parsed = json_loads(json_string_value(args), 0, NULL);
        json_object_set_new(j, "arguments", parsed ? parsed : json_object());
        args = json_object_get(j, "arguments");
    }
    const char *name = json_string_value(json_object_get(j, "name"));
    const char *code = json_string_value(json_object_get(args ? args : j, "code"));
    json_t *calls = NULL;
    if (code && (!name || agent_tool_name_ok(a, name))) {
        char id[32];
        snprintf(id, sizeof id, "text_%d", ++a->fence_ids);
        calls = json_pack("[{s:s, s:s, s:{s:s}}]", "id", id, "name", a->tool_name, "arguments", "code", code);
    }
    json_decref(j);
    return calls;
}

static void s_on_llm_text(const char *delta, size_t len, void *arg)
{
    korch_agent_t *a = arg;
    if (!a->o.on_event)
        return;
    korch_agent_event_t ev = {KORCH_AGENT_TEXT, a->step, delta, len, NULL, -1, false};
    a->o.on_event(&ev, a->o.arg);
}

/* A fragment of a tool call's arguments: the "code" in it, decoded as it
   comes, is shown as it is written. */
static void s_on_llm_tool_delta(int index, const char *name, const char *json, size_t len, void *arg)
{
    korch_agent_t *a = arg;
    if (index < 0 || index >= LIVE_CALLS || (name && *name && strcmp(name, a->tool_name) != 0) || !a->o.on_event)
        return;
    if (!a->live_on[index]) {
        korch_jsonfield_init(&a->live[index], "code");
        a->live_on[index] = true;
    }
    char *out = malloc(len + KORCH_JSONFIELD_SLACK);
    size_t n = out ? korch_jsonfield_feed(&a->live[index], json, len, out) : 0;
    if (n) {
        korch_agent_event_t ev = {KORCH_AGENT_CODE_DELTA, a->step, out, n, NULL, index, true};
        a->o.on_event(&ev, a->o.arg);
    }
    free(out);
}

/* A back-off begins; elapsed_ms still counts from the model call's start. */
static void s_on_llm_retry(const korch_llm_retry_t *r, void *arg)
{
    korch_agent_t *a = arg;
    a->phase = "retry";
    a->retry_attempt = r->attempt;
    a->retry_status = r->http_status;
    a->retry_until = korch_now_ms() + r->wait_ms;
    agent_status(a);
}

/* Often during a model call: the back-off is over (the next attempt is
   made), or another second has passed. */
static void s_on_llm_tick(void *arg)
{
    korch_agent_t *a = arg;
    int64_t now = korch_now_ms();
    if (a->retry_until && now >= a->retry_until) {
        a->retry_until = 0;
        a->phase = "model";
        agent_status(a);
    } else if (now - a->status_last >= 1000)
        agent_status(a);
}

static bool s_llm_cancelled(void *arg)
{
    korch_agent_t *a = arg;
    if (!a->interrupted && a->o.cancelled && a->o.cancelled(a->o.arg))
        a->interrupted = 1;
    return a->interrupted != 0;
}

korch_rc_t agent_call_model(korch_agent_t *a, bool with_tools, korch_llm_reply_t *reply, korch_err_t *err)
{
    json_t *msgs = s_request_messages(a);
    korch_llm_request_t req = {.messages = msgs,
                               .tools = with_tools && !korch_llm_fence_mode(a->o.llm) ? a->tools : NULL,
                               .temperature = -1};
    korch_llm_cb_t cb = {.on_text = s_on_llm_text,
                         .on_tool_delta = s_on_llm_tool_delta,
                         .on_retry = s_on_llm_retry,
                         .on_tick = s_on_llm_tick,
                         .cancelled = s_llm_cancelled,
                         .arg = a};
    memset(a->live_on, 0, sizeof a->live_on);
    agent_phase(a, "model");
    korch_rc_t rc = korch_llm_chat(a->o.llm, &req, &cb, reply, err);
    json_decref(msgs);
    if (rc == KORCH_OK) {
        /* the ledger: a count the API did not give stays unknown (null), never 0 or -1 */
        korch_usage_t call = {0};
        korch_usage_add(&call, reply->input_tokens, reply->output_tokens);
        korch_usage_merge(&a->turn_usage, &call);
        korch_usage_merge(&a->session_usage, &call);
        a->tokens += (reply->input_tokens > 0 ? reply->input_tokens : 0) +
                     (reply->output_tokens > 0 ? reply->output_tokens : 0);
        const char *cur = korch_prices_currency(a->o.prices);
        double cost = korch_prices_cost(a->o.prices, korch_llm_name(a->o.llm), &call);
        korch_cost_add(&a->turn_cost, cost);
        korch_cost_add(&a->session_cost, cost);
        korch_cost_t one = {0};
        korch_cost_add(&one, cost);
        json_t *tokens = korch_usage_json(&call);
        json_t *cj = korch_cost_json(&one, cur);
        agent_record(a,
                     json_pack("{s:s, s:i, s:i, s:O, s:O, s:i, s:s}", "type", "usage", "turn", a->turn, "step", a->step,
                               "tokens", tokens, "cost", cj, "attempts", reply->attempts, "llm",
                               korch_llm_name(a->o.llm)),
                     NULL);
        json_t *ev = json_pack("{s:o, s:o}", "tokens", tokens, "cost", cj);
        agent_emit(a, KORCH_AGENT_USAGE, NULL, ev);
        json_decref(ev);
    }
    return rc;
}
