/*  What korch run / korch chat show of a turn (agent.c runs it): the
 *  agent's events on stderr as they happen (the step, the model's text and
 *  code as it writes them, live outputs, what the step waits on), or one
 *  JSON line each with --json; the turn's end (answer, receipts, ledger).
 *  Everything the model or the kernel wrote passes termsafe.h first.
 */
#include "agent_cli.h"

int64_t cli_agent_t0;

/* One event of the one schema (docs/events.schema.json) per line, with
   t_ms since korch started. Steals ev. */
static void s_json_print(json_t *ev)
{
    if (!ev)
        return;
    json_object_set_new(ev, "t_ms", json_integer(korch_now_ms() - cli_agent_t0));
    json_dumpf(ev, stdout, JSON_COMPACT | JSON_ENSURE_ASCII);
    putchar('\n');
    fflush(stdout);
    json_decref(ev);
}

/* Everything shown on stderr goes through here: a status line on the
   screen is cleared first, and where the cursor is is tracked. */
static void s_out(run_ctx_t *c, const char *s, size_t n)
{
    if (!n)
        return;
    if (c->status_shown) {
        fputs("\r\033[K", stderr);
        c->status_shown = false;
    }
    fwrite(s, 1, n, stderr);
    c->col0 = s[n - 1] == '\n';
}

static void s_printf(run_ctx_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void s_printf(run_ctx_t *c, const char *fmt, ...)
{
    char buf[4096];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n > 0)
        s_out(c, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
}

/* Text from the model or the kernel through its sanitizer t (termsafe.h);
   n == SIZE_MAX finishes t (what is pending, a colour left on). */
static void s_out_safe(run_ctx_t *c, korch_termsafe_t *t, const char *s, size_t n)
{
    korch_buf_t b = KORCH_BUF_INIT(8 * 1024 + 16);
    if (n == SIZE_MAX) {
        if (korch_termsafe_finish(t, &b, NULL) == KORCH_OK)
            s_out(c, b.p, b.len);
    }
    for (size_t off = 0; s && n != SIZE_MAX && off < n; off += 1024) {
        korch_buf_reset(&b);
        if (korch_termsafe_feed(t, s + off, n - off < 1024 ? n - off : 1024, &b, NULL) == KORCH_OK)
            s_out(c, b.p, b.len);
    }
    korch_buf_free(&b);
}

/* One value from the model or the kernel (a name, a result) between korch's
   own prefix and suffix; KORCH_TERMSAFE_LINE for what must stay one line. */
void cli_agent_out_value(run_ctx_t *c, const char *prefix, const char *value, unsigned flags, const char *suffix)
{
    char *v = korch_termsafe_str(value, flags | (c->tty && !(flags & KORCH_TERMSAFE_LINE) ? KORCH_TERMSAFE_SGR : 0));
    s_out(c, prefix, strlen(prefix));
    if (v)
        s_out(c, v, strlen(v));
    s_out(c, suffix, strlen(suffix));
    free(v);
}

/* Whatever streamed (text, code) ends its line before something else is shown. */
void cli_agent_end_text(run_ctx_t *c)
{
    s_out_safe(c, c->ts_model, NULL, SIZE_MAX);
    if (!c->col0)
        s_out(c, "\n", 1);
    c->in_text = false;
    c->in_stream = false;
    c->code_index = -1;
}

/* What the step waits on. A terminal gets one line redrawn in place (only
   while nothing else is mid-line); otherwise a plain line when a back-off
   begins and every 10 s of waiting. */
static void s_status(run_ctx_t *c, const korch_agent_event_t *ev)
{
    const char *phase = json_string_value(json_object_get(ev->data, "phase"));
    double elapsed = (double)json_integer_value(json_object_get(ev->data, "elapsed_ms")) / 1e3;
    if (!phase)
        return;
    char line[256];
    if (strcmp(phase, "retry") == 0) {
        long status = (long)json_integer_value(json_object_get(ev->data, "http_status"));
        char what[32] = "no connection";
        if (status)
            snprintf(what, sizeof what, "HTTP %ld", status);
        snprintf(line, sizeof line, "… the model answered %s: retry %d in %.1f s (%.1f s since the request)", what,
                 (int)json_integer_value(json_object_get(ev->data, "attempt")),
                 (double)json_integer_value(json_object_get(ev->data, "retry_in_ms")) / 1e3, elapsed);
    } else if (strcmp(phase, "executing") == 0)
        snprintf(line, sizeof line, "… running: %.0f s", elapsed);
    else
        snprintf(line, sizeof line, "… waiting for the model: %.0f s", elapsed);
    bool changed = !c->last_phase || strcmp(c->last_phase, phase) != 0;
    c->last_phase = strcmp(phase, "retry") == 0 ? "retry" : strcmp(phase, "executing") == 0 ? "executing" : "model";
    if (c->tty) {
        if (c->col0 && (elapsed >= 1.0 || strcmp(phase, "retry") == 0)) {
            fprintf(stderr, "\r\033[K%s", line);
            c->status_shown = true;
        }
        return;
    }
    int64_t now = korch_now_ms();
    bool retry_begins = changed && strcmp(phase, "retry") == 0;
    if (c->col0 && (retry_begins || (elapsed >= 10 && now - c->plain_status_at >= 10000))) {
        c->plain_status_at = now;
        s_printf(c, "  %s\n", line);
    }
}

/* Code as the model writes it, indented like the code block it becomes. */
static void s_code_delta(run_ctx_t *c, const korch_agent_event_t *ev)
{
    if (c->code_index != (int)ev->index) {
        cli_agent_end_text(c);
        s_out(c, "▶ code:\n", strlen("▶ code:\n"));
        c->code_index = (int)ev->index;
        c->code_bol = true;
        c->codes_streamed++;
    }
    for (size_t i = 0; i < ev->text_len; i++) {
        if (c->code_bol)
            s_out(c, "    ", 4);
        s_out_safe(c, c->ts_model, ev->text + i, 1);
        c->code_bol = ev->text[i] == '\n';
    }
}

void cli_agent_on_event(const korch_agent_event_t *ev, void *arg)
{
    run_ctx_t *c = arg;
    if (ev->type == KORCH_AGENT_FINAL) { /* its receipts, shown under the answer */
        json_decref(c->receipts);
        c->receipts = json_incref(json_object_get(ev->data, "receipts"));
    }
    if (c->json) {
        s_json_print(korch_agent_event_json(ev));
        return;
    }
    if (c->quiet && ev->type != KORCH_AGENT_ERROR)
        return;
    switch (ev->type) {
    case KORCH_AGENT_STEP:
        cli_agent_end_text(c);
        c->step_t0 = korch_now_ms();
        c->codes_streamed = c->codes_shown = 0;
        c->text_streamed = false;
        c->last_phase = NULL;
        c->steps++;
        s_printf(c, "\n── step %d ──\n", ev->step);
        break;
    case KORCH_AGENT_TEXT:
        if (c->code_index >= 0)
            cli_agent_end_text(c);
        s_out_safe(c, c->ts_model, ev->text, ev->text_len);
        c->in_text = true;
        c->text_streamed = true;
        break;
    case KORCH_AGENT_CODE_DELTA: s_code_delta(c, ev); break;
    case KORCH_AGENT_CODE: {
        cli_agent_end_text(c);
        if (c->codes_shown++ < c->codes_streamed)
            break; /* it was shown as it was written */
        const char *source = json_string_value(json_object_get(ev->data, "source"));
        if (c->text_streamed && source && strcmp(source, "tool") != 0)
            break; /* a fence of the reply's text: shown as it streamed */
        s_out(c, "▶ code:\n", strlen("▶ code:\n"));
        const char *p = ev->text;
        while (*p) {
            size_t n = strcspn(p, "\n");
            s_out(c, "    ", 4);
            s_out_safe(c, c->ts_model, p, n);
            s_out_safe(c, c->ts_model, "\n", 1);
            p += n + (p[n] == '\n');
        }
        s_out_safe(c, c->ts_model, NULL, SIZE_MAX);
        break;
    }
    case KORCH_AGENT_OUTPUT: {
        const char *type = json_string_value(json_object_get(ev->data, "output_type"));
        if (!type)
            break;
        if (strcmp(type, "stream") == 0) {
            json_t *t = json_object_get(ev->data, "text");
            const char *name = json_string_value(json_object_get(ev->data, "name"));
            if (!c->in_stream)
                cli_agent_end_text(c); /* a stream starts its own line: its \r redraws only its own */
            s_out_safe(c, c->ts_stream[name && strcmp(name, "stderr") == 0], json_string_value(t),
                       json_string_length(t));
            c->in_stream = true;
        } else if (strcmp(type, "error") == 0) {
            cli_agent_end_text(c);
            cli_agent_out_value(c, "", json_string_value(json_object_get(ev->data, "ename")), KORCH_TERMSAFE_LINE, ": ");
            cli_agent_out_value(c, "", json_string_value(json_object_get(ev->data, "evalue")), 0, "\n");
        } else {
            json_t *data = json_object_get(ev->data, "data");
            cli_agent_end_text(c);
            if (json_object_get(data, "image/png"))
                s_printf(c, "[image/png]\n");
            else if (json_is_string(json_object_get(data, "text/plain")))
                cli_agent_out_value(c, "", json_string_value(json_object_get(data, "text/plain")), 0, "\n");
        }
        break;
    }
    case KORCH_AGENT_RESULT: {
        for (int k = 0; k < 2; k++)
            s_out_safe(c, c->ts_stream[k], NULL, SIZE_MAX); /* the execution's streams end */
        cli_agent_end_text(c);
        json_t *saved = json_object_get(ev->data, "saved");
        size_t i;
        json_t *p;
        json_array_foreach(saved, i, p) cli_agent_out_value(c, "[chart saved to ", json_string_value(p), KORCH_TERMSAFE_LINE, "]\n");
        s_printf(c, "  (%s, %.2f s)\n", json_string_value(json_object_get(ev->data, "status")),
                 (double)json_integer_value(json_object_get(ev->data, "elapsed_ms")) / 1e3);
        break;
    }
    case KORCH_AGENT_FINAL: cli_agent_end_text(c); break;
    case KORCH_AGENT_ERROR:
    case KORCH_AGENT_NOTICE:
    case KORCH_AGENT_BRANCH: /* how the branch's kernel was rebuilt, in words */
        cli_agent_end_text(c);
        cli_agent_out_value(c, "korch: ", ev->text, 0, "\n"); /* it may quote the model or the kernel */
        break;
    case KORCH_AGENT_STATUS: s_status(c, ev); break;
    case KORCH_AGENT_FILES:
        cli_agent_end_text(c);
        cli_agent_out_value(c, "[files: ", ev->text, KORCH_TERMSAFE_LINE, "]\n"); /* the kernel names them */
        break;
    case KORCH_AGENT_USAGE: break; /* the turn's line says it */
    case KORCH_AGENT_VERIFY: {
        cli_agent_end_text(c);
        char *t = korch_cli_verify_text(ev->data);
        cli_agent_out_value(c, "", t, 0, ""); /* it quotes what the kernel printed */
        free(t);
        break;
    }
    }
    fflush(stderr);
}

/* Do stdout and stderr go to the same place (one terminal, one pipe, one
   file)? Then an answer that streamed on stderr has been seen already. */
static bool s_same_output(void)
{
    struct stat a, b;
    if (fstat(STDOUT_FILENO, &a) != 0 || fstat(STDERR_FILENO, &b) != 0)
        return false;
    return a.st_dev == b.st_dev && a.st_ino == b.st_ino && a.st_rdev == b.st_rdev;
}

/* A turn is over (rc from ask): the answer to stdout, unless it has just
   streamed to the same place; its receipts; the clean notebook if asked;
   the ledger line (or, with --json, the `done` record). */
void cli_agent_turn_end(run_ctx_t *c, korch_rc_t rc, const char *answer, const char *msg)
{
    if (c->verify && rc == KORCH_OK) {
        korch_err_t verr = {0};
        if (korch_agent_verify(c->agent, NULL, &verr) != KORCH_OK)
            fprintf(stderr, "korch: cannot verify: %s\n", verr.msg);
    }
    bool shown = c->text_streamed && !c->quiet && answer && *answer && s_same_output();
    if (!c->json && rc == KORCH_OK && answer && !shown) {
        if (c->chat)
            putchar('\n');
        korch_termsafe_fputs(answer, korch_termsafe_flags_for(STDOUT_FILENO, false), stdout);
        putchar('\n');
        fflush(stdout);
    }
    if (c->clean_notebook) {
        char path[4200];
        korch_err_t err = {0};
        if (korch_path_join(path, sizeof path, korch_agent_session_dir(c->agent), "notebook-clean.ipynb", &err) ||
            korch_agent_save_clean_notebook(c->agent, path, &err))
            fprintf(stderr, "korch: %s\n", err.msg);
        else if (!c->json && !c->quiet)
            fprintf(stderr, "korch: clean notebook (without the failed attempts) %s\n", path);
    }
    json_t *done = korch_agent_done_json(c->agent, rc, msg);
    if (c->json) {
        s_json_print(done);
        return;
    }
    if (c->quiet) {
        json_decref(done);
        return;
    }
    cli_agent_end_text(c);
    char *t = rc == KORCH_OK ? korch_cli_receipts_text(c->receipts) : NULL;
    if (t)
        cli_agent_out_value(c, "", t, 0, ""); /* the answer's words, what the kernel printed */
    free(t);
    t = korch_cli_ledger_text(c->agent, c->prices, done);
    s_out(c, t, t ? strlen(t) : 0);
    free(t);
    json_decref(done);
    fflush(stderr);
}
