#include "korch/neutralise.h"
#include "agent_int.h"

#include "korch/feedback.h"
#include "korch/log.h"
#include "korch/media.h"
#include "korch/path.h"
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------ running code */

static bool s_exec_done(void *arg) { return korch_exec_done(arg); }

static int s_exec_tick(korch_loop_t *loop, int timer_id, void *arg)
{
    agent_status(arg);
    return 0;
}

/* The kernel restarted (died, or was replaced): the packages the session
   had installed go into the new one (a container's work dir, and with it
   .korch-env, is new), and a markdown cell in the notebook says so,
   recorded so a resumed notebook shows it too. */
static void s_mark_restart(korch_agent_t *a, const char *why)
{
    char pkmsg[1024], pkline[1100] = "";
    int pk = agent_packages_install(a, a->k, json_object_get(json_object_get(korch_notebook_meta(a->nb), "korch"),
                                                             "packages"),
                                    pkmsg, sizeof pkmsg);
    if (pk > 0)
        snprintf(pkline, sizeof pkline, " The %d package(s) the session had installed were installed again.", pk);
    else if (pk < 0)
        snprintf(pkline, sizeof pkline, " NOT restored: %s.", pkmsg);
    if (pk)
        agent_emit(a, KORCH_AGENT_NOTICE, pkline + 1, NULL);
    char *md = agent_add_md(a, "*korch: the kernel restarted here (%s); the variables defined above are gone.%s*",
                        why && *why ? why : "it died", pkline);
    if (md)
        agent_record(a, json_pack("{s:s, s:s, s:s}", "type", "kernel", "event", "restarted", "content", md), NULL);
    free(md);
}

static void s_human_size(char *buf, size_t len, json_int_t n)
{
    if (n < 10000)
        snprintf(buf, len, "%lld bytes", (long long)n);
    else if (n < 10000000)
        snprintf(buf, len, "%.1f kB", (double)n / 1e3);
    else
        snprintf(buf, len, "%.1f MB", (double)n / 1e6);
}

/* After a step: what the code did to the work dir. Returns NULL when
   nothing changed, else a new {files: [{path, size, change, mime}], total,
   truncated, line}: at most MAX_FILES_LISTED entries; images it saved are
   copied to figures/ (their names appended to figures) and, for a vision
   model, PNG and JPEG ones attached (images); *text (what the model reads)
   gets a bounded list of the changes with sizes. */
static json_t *s_files_step(korch_agent_t *a, json_t *figures, json_t *images, char **text)
{
    if (!a->wd)
        return NULL;
    json_t *scan = agent_wd_scan(a);
    json_t *ch = json_object_get(scan, "changes");
    if (!json_array_size(ch)) {
        json_decref(scan);
        return NULL;
    }
    json_t *files = json_array();
    size_t total = json_array_size(ch), i, copied = 0;
    size_t cap = 256 + MAX_FILES_TOLD * 320;
    char *list = malloc(cap);
    size_t n = 0;
    if (list)
        list[0] = 0;
    json_t *c;
    json_array_foreach(ch, i, c) {
        const char *path = json_string_value(json_object_get(c, "path"));
        const char *change = json_string_value(json_object_get(c, "change"));
        json_int_t size = json_integer_value(json_object_get(c, "size"));
        const char *mime = korch_mime_for(path);
        bool gone = strcmp(change, "deleted") == 0;
        json_t *e = json_deep_copy(c);
        json_object_set_new(e, "mime", json_string(mime));
        /* an image the code saved is a figure like a displayed one */
        const char *ext = strncmp(mime, "image/", 6) == 0 ? korch_image_ext(mime) : NULL;
        if (ext && !gone && copied < MAX_FIGURE_FILES) {
            size_t len = 0;
            char *data = agent_wd_read(a, path, a->wd_in_kernel ? MAX_FIGURE_FILE / 4 : MAX_FIGURE_FILE, &len);
            char name[64], dst[PATH_MAX + 80];
            snprintf(name, sizeof name, "fig-%d.%s", a->figures + 1, ext);
            if (data && !agent_budget_take(a, len)) {
                json_object_set_new(e, "not_kept", json_string("the session's output budget is used up"));
            } else if (data && korch_path_join(dst, sizeof dst, a->figures_dir, name, NULL) == KORCH_OK &&
                       korch_write_file(dst, data, len, NULL) == KORCH_OK) {
                a->figures++;
                copied++;
                json_array_append_new(figures, json_pack("{s:s, s:s}", "name", name, "source", path));
                json_object_set_new(e, "figure", json_string(name));
                if (korch_llm_vision(a->o.llm) && images && strcmp(ext, "svg") != 0 && len <= (5u << 20)) {
                    char *b64 = korch_b64_encode((const unsigned char *)data, len);
                    if (b64)
                        json_array_append_new(images, json_pack("{s:s, s:s, s:s}", "mime", mime, "data", b64, "name",
                                                                name));
                    free(b64);
                }
            }
            free(data);
        }
        if (i < MAX_FILES_LISTED)
            json_array_append(files, e);
        char hs[32];
        s_human_size(hs, sizeof hs, size);
        if (list && i < MAX_FILES_TOLD)
            n += (size_t)snprintf(list + n, cap - n, "%s%s %.200s%s%s%s%s%s", i ? "; " : "", change, path,
                                  gone ? "" : " (", gone ? "" : hs, gone ? "" : ")",
                                  json_object_get(e, "figure") ? ", kept as figure " : "",
                                  json_object_get(e, "figure") ? json_string_value(json_object_get(e, "figure")) : "");
        json_decref(e);
    }
    if (list && total > MAX_FILES_TOLD)
        n += (size_t)snprintf(list + n, cap - n, "; and %zu more", total - MAX_FILES_TOLD);
    if (list && json_is_true(json_object_get(scan, "truncated")))
        n += (size_t)snprintf(list + n, cap - n, " (the directory is too large to watch entirely)");
    if (list) {
        const char *head = "\n[files in the working directory changed by this code: ";
        size_t tl = *text ? strlen(*text) : 0;
        char *nt = realloc(*text, tl + strlen(head) + n + 2);
        if (nt) {
            snprintf(nt + tl, strlen(head) + n + 2, "%s%s]", head, list);
            *text = nt;
        }
    }
    json_t *out = json_pack("{s:o, s:I, s:O, s:s}", "files", files, "total", (json_int_t)total, "truncated",
                            json_object_get(scan, "truncated"), "line", list ? list : "");
    free(list);
    json_decref(scan);
    agent_wd_save(a);
    return out;
}

/* Run one tool call; append the tool message. Returns false if the user
   interrupted (the rest of the turn is abandoned). */
bool agent_run_call(korch_agent_t *a, json_t *call, korch_err_t *err)
{
    const char *id = json_string_value(json_object_get(call, "id"));
    const char *name = json_string_value(json_object_get(call, "name"));
    const char *code = json_string_value(json_object_get(json_object_get(call, "arguments"), "code"));
    const char *aerr = json_string_value(json_object_get(call, "arguments_error"));
    char text_buf[1024];
    if (!name || !agent_tool_name_ok(a, name) || aerr || !code) {
        if (name && !agent_tool_name_ok(a, name))
            snprintf(text_buf, sizeof text_buf, "error: there is no tool named '%s'; use %s with {\"code\": \"...\"}",
                     name, a->tool_name);
        else if (aerr)
            snprintf(text_buf, sizeof text_buf,
                     "error: your tool call's arguments are not valid JSON (%s); call %s again with a JSON object "
                     "{\"code\": \"...\"}",
                     aerr, a->tool_name);
        else
            snprintf(text_buf, sizeof text_buf, "error: the %s call has no \"code\" string", a->tool_name);
        json_array_append_new(a->messages, json_pack("{s:s, s:s, s:s, s:s, s:b}", "role", "tool", "tool_call_id",
                                                     id ? id : "", "name", a->tool_name, "content", text_buf, "is_error", 1));
        agent_record(a,
                 json_pack("{s:s, s:s, s:s, s:b}", "type", "tool", "tool_call_id", id ? id : "", "content", text_buf,
                           "is_error", 1),
                 NULL);
        agent_emit(a, KORCH_AGENT_ERROR, text_buf, NULL);
        return true;
    }
    /* where the code came from: a tool call, or a fence / printed call in the reply's text (shown already) */
    const char *source = !id ? "tool" : strncmp(id, "fence_", 6) == 0 ? "fence" : strncmp(id, "text_", 5) == 0 ? "text" : "tool";
    json_t *lang = json_pack("{s:s, s:s}", "language", a->lang, "source", source);
    agent_emit(a, KORCH_AGENT_CODE, code, lang);
    json_decref(lang);
    if (a->wd) /* the baseline: what was there before this code ran (uploads included) */
        json_decref(agent_wd_scan(a));
    korch_exec_opts_t eo = {.timeout_ms = a->o.exec_timeout_s * 1000, .max_output_bytes = agent_budget_exec_bytes(a)};
    korch_exec_cb_t cb = {.on_output = agent_on_output, .arg = a};
    /* the kernel's cgroup before the step (a new memory peak where it can
       be reset): the step's CPU seconds and peak memory in its result */
    korch_proc_usage_t u0, u1;
    korch_proc_t *proc = a->k ? korch_kernel_proc(a->k) : NULL;
    const korch_usage_src_t *src = proc ? NULL : a->o.usage_src; /* attached: its owner's counters */
    bool have_usage = proc ? korch_proc_usage(proc, true, &u0) : src && korch_usage_read(src, true, &u0);
    /* no kernel: an earlier step's reconnect failed (the kernel was still restarting) */
    korch_exec_t *ex = a->k ? korch_kernel_execute(a->k, code, &eo, &cb, err) : NULL;
    if (!ex) {
        if (!a->k)
            korch_err_set(err, KORCH_E_DIED, "the kernel is gone");
        /* the kernel is gone for good: say so and start a fresh one */
        char msg[1200];
        snprintf(msg, sizeof msg, a->existing ? "[%s; reconnecting to the kernel: its variables may be lost]"
                                              : "[%s; starting a fresh kernel: variables are lost]",
                 err ? err->msg : "kernel error");
        korch_kernel_destroy(&a->k);
        korch_err_clear(err);
        if (agent_start_kernel(a, err) != KORCH_OK)
            return false;
        s_mark_restart(a, msg);
        json_array_append_new(a->messages, json_pack("{s:s, s:s, s:s, s:s, s:b}", "role", "tool", "tool_call_id", id,
                                                     "name", a->tool_name, "content", msg, "is_error", 1));
        agent_record(a, json_pack("{s:s, s:s, s:s, s:b}", "type", "tool", "tool_call_id", id, "content", msg, "is_error", 1),
                 NULL);
        return true;
    }
    a->running = ex;
    agent_phase(a, "executing");
    int tick = korch_loop_timer(a->o.loop, 1000, 0, s_exec_tick, a);
    korch_loop_run(a->o.loop, s_exec_done, ex, -1);
    korch_loop_timer_end(a->o.loop, tick);
    a->running = NULL;
    const korch_exec_result_t *r = korch_exec_result(ex);
    char *text = NULL;
    json_t *images = NULL, *saved = NULL;
    korch_feedback_opts_t fo = {.max_chars = a->o.max_result_chars,
                                .vision = korch_llm_vision(a->o.llm),
                                .figures_dir = a->figures_dir,
                                .figure_counter = &a->figures};
    korch_feedback_build(r, &fo, &text, &images, &saved);
    json_t *figures = json_array();
    size_t fi;
    json_t *fp;
    json_array_foreach(saved, fi, fp) {
        const char *slash = strrchr(json_string_value(fp), '/');
        agent_budget_charge_file(a, json_string_value(fp));
        json_array_append_new(figures, json_pack("{s:s}", "name", slash ? slash + 1 : json_string_value(fp)));
    }
    agent_budget_pending(a, r->outputs); /* the file copies below fit beside them */
    json_t *changes = s_files_step(a, figures, images, &text);
    agent_budget_written(a);
    bool is_error = r->status != KORCH_EXEC_OK;
    json_t *tool = json_pack("{s:s, s:s, s:s, s:s, s:b}", "role", "tool", "tool_call_id", id, "name", a->tool_name,
                             "content", text ? text : "", "is_error", is_error);
    if (json_array_size(images))
        json_object_set(tool, "images", images);
    json_array_append_new(a->messages, tool);
    /* a kernel that died or restarted took its counters along: unknown */
    json_t *usage = json_null();
    if (have_usage && r->status != KORCH_EXEC_DIED && !r->restarted && korch_kernel_proc(a->k) == proc &&
        (proc ? korch_proc_usage(proc, false, &u1) : korch_usage_read(src, false, &u1)))
        usage = json_pack("{s:o, s:o, s:s}", "cpu_s",
                          u0.cpu_ns >= 0 && u1.cpu_ns >= u0.cpu_ns ? json_real((double)(u1.cpu_ns - u0.cpu_ns) / 1e9)
                                                                  : json_null(),
                          "mem_peak_bytes", u1.mem_peak >= 0 ? json_integer(u1.mem_peak) : json_null(), "peak_of",
                          u0.peak_reset ? "step" : "kernel");
    if (json_is_number(json_object_get(usage, "cpu_s"))) {
        a->kernel_cpu_ns = (a->kernel_cpu_ns > 0 ? a->kernel_cpu_ns : 0) + (u1.cpu_ns - u0.cpu_ns);
        a->turn_cpu_ns = (a->turn_cpu_ns > 0 ? a->turn_cpu_ns : 0) + (u1.cpu_ns - u0.cpu_ns);
    }
    if (json_is_integer(json_object_get(usage, "mem_peak_bytes")) && u1.mem_peak > a->kernel_mem_peak)
        a->kernel_mem_peak = u1.mem_peak;
    if (json_is_integer(json_object_get(usage, "mem_peak_bytes")) && u1.mem_peak > a->turn_mem_peak)
        a->turn_mem_peak = u1.mem_peak;
    json_t *info = json_pack("{s:s, s:o, s:I, s:O, s:O, s:o}", "status", korch_exec_status_name(r->status),
                             "execution_count", r->execution_count >= 0 ? json_integer(r->execution_count) : json_null(),
                             "elapsed_ms", (json_int_t)r->elapsed_ms, "saved", saved, "figures", figures, "usage",
                             usage);
    agent_emit(a, KORCH_AGENT_RESULT, text, info);
    if (changes)
        agent_emit(a, KORCH_AGENT_FILES, json_string_value(json_object_get(changes, "line")), changes);
    bool died = r->status == KORCH_EXEC_DIED || r->restarted;
    char note[700] = "";
    if (died)
        snprintf(note, sizeof note, "%s", r->detail[0] ? r->detail : "the kernel died while this cell ran");
    json_t *pkgs = died ? NULL : agent_note_packages(a, code);
    json_t *rec = json_pack("{s:s, s:s, s:s, s:s, s:O, s:O, s:I, s:O, s:i, s:i}", "type", "execution", "tool_call_id",
                            id, "code", code, "status", korch_exec_status_name(r->status), "execution_count",
                            json_object_get(info, "execution_count"), "outputs", r->outputs, "elapsed_ms",
                            (json_int_t)r->elapsed_ms, "figures", figures, "turn", a->turn, "step", a->step);
    if (died)
        json_object_set_new(rec, "note", json_string(note));
    json_object_set(rec, "usage", json_object_get(info, "usage"));
    if (changes)
        json_object_set(rec, "files", json_object_get(changes, "files"));
    if (pkgs)
        json_object_set_new(rec, "packages", pkgs);
    agent_record(a, rec, NULL);
    a->executions++;
    agent_record(a,
             json_pack("{s:s, s:s, s:s, s:b, s:i}", "type", "tool", "tool_call_id", id, "content", text ? text : "",
                       "is_error", is_error, "images", (int)json_array_size(images)),
             NULL);
    /* the notebook may be opened trusted: its SVG becomes an image too */
    json_t *nb_outputs = json_deep_copy(r->outputs);
    size_t oi;
    json_t *oo;
    json_array_foreach(nb_outputs, oi, oo) korch_neutralise_bundle(json_object_get(oo, "data"), AGENT_NEUT_HINT, 0);
    korch_notebook_add_code_meta(a->nb, code, r->execution_count, nb_outputs ? nb_outputs : r->outputs,
                                 korch_notebook_cell_meta(korch_exec_status_name(r->status), died ? note : NULL,
                                                          a->turn, a->step));
    json_decref(nb_outputs);
    /* what it printed backs the numbers of the answer */
    korch_receipts_add_outputs(a->receipts, r->outputs,
                               json_pack("{s:i, s:i, s:O}", "turn", a->turn, "step", a->step, "execution_count",
                                         json_object_get(info, "execution_count")));
    if (died) {
        char told[800];
        snprintf(told, sizeof told, "%s%s", r->detail,
                 r->status == KORCH_EXEC_DIED && r->restarted ? "; the kernel was restarted: its variables are lost" : "");
        agent_emit(a, KORCH_AGENT_NOTICE, told, NULL);
        s_mark_restart(a, note);
    } else
        agent_snapshot(a);
    json_decref(info);
    json_decref(figures);
    json_decref(changes);
    json_decref(images);
    json_decref(saved);
    free(text);
    korch_exec_destroy(&ex);
    return !a->interrupted;
}

/* Answer the calls the user's interrupt left unrun: every API wants each answered. */
void agent_answer_unrun(korch_agent_t *a, json_t *calls, size_t from)
{
    for (size_t i = from; i < json_array_size(calls); i++) {
        const char *id = json_string_value(json_object_get(json_array_get(calls, i), "id"));
        const char *msg = "[not run: the user interrupted]";
        json_array_append_new(a->messages, json_pack("{s:s, s:s, s:s, s:s, s:b}", "role", "tool", "tool_call_id",
                                                     id ? id : "", "name", a->tool_name, "content", msg, "is_error", 1));
        agent_record(a, json_pack("{s:s, s:s, s:s, s:b}", "type", "tool", "tool_call_id", id ? id : "", "content", msg,
                              "is_error", 1),
                 NULL);
    }
}
