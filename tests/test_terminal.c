/*  What a person's terminal receives from korch run and korch exec when the
 *  model and the kernel attack it (tests/peers/attack_scenarios.py): OSC
 *  52 clipboard writes, ESC[2J, window titles, OSC 8 links, DCS/APC, C1
 *  controls, RLO, a file name full of escapes.
 *
 *  korch runs in a real terminal emulator: tmux (with set-clipboard on, so
 *  an OSC 52 that reached it would become a paste buffer, and a title would
 *  become the pane's title), inside `script`, whose typescript holds the
 *  exact bytes korch wrote to the tty. Asserted: those bytes hold no escape
 *  but SGR colours and korch's own erase-line, are valid UTF-8 without C1
 *  or bidi controls; tmux has no buffer, the pane's title is its own, the
 *  screen still shows korch's first line (never cleared), the kernel's red
 *  text is red, the RLO shows as <U+202E>. Through pipes nothing but text
 *  goes out.
 */
#include "llm_fixture.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct {
    llm_server_t llm;
    char dir[64];   /* the test's files: the session, the typescript, tmux's socket */
    char sock[128];
} term_t;

static bool s_begin(term_t *t)
{
    memset(t, 0, sizeof *t);
    snprintf(t->dir, sizeof t->dir, "/tmp/korch-term-XXXXXX");
    if (!CHECK(mkdtemp(t->dir) != NULL))
        return false;
    snprintf(t->sock, sizeof t->sock, "%s/tmux.sock", t->dir);
    if (!llm_server_start(&t->llm))
        return false;
    llm_server_env(&t->llm, "escapes");
    return true;
}

static int s_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int s_sh(const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    return system(cmd);
}

static void s_end(term_t *t)
{
    if (t->sock[0])
        s_sh("tmux -S '%s' kill-server 2>/dev/null", t->sock);
    llm_server_stop(&t->llm);
    if (t->dir[0])
        s_sh("rm -rf '%s'", t->dir);
}

static char *s_slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    size_t n = 0;
    FILE *m = open_memstream(&buf, &n);
    char tmp[65536];
    size_t got;
    while ((got = fread(tmp, 1, sizeof tmp, f)) > 0)
        fwrite(tmp, 1, got, m);
    fclose(f);
    fclose(m);
    if (len)
        *len = n;
    return buf;
}

/* The output of a shell command, a new string. */
static char *s_capture(const char *cmd)
{
    const char *argv[] = {"/bin/sh", "-c", cmd, NULL};
    char *out = NULL;
    korch_test_run(argv, NULL, &out, NULL, 20);
    return out ? out : strdup("");
}

/* Run the command line in script(1) in a fresh tmux server with
   set-clipboard on; wait for it to end. The typescript is DIR/ts. */
static bool s_in_terminal(term_t *t, const char *cmdline)
{
    char path[256];
    snprintf(path, sizeof path, "%s/tmux.conf", t->dir);
    FILE *f = fopen(path, "w");
    if (!CHECK(f != NULL))
        return false;
    /* an OSC 52 that reaches tmux becomes a paste buffer; the pane stays after the command */
    fputs("set -g set-clipboard on\nset -g remain-on-exit on\nset -g history-limit 10000\n", f);
    fclose(f);
    snprintf(path, sizeof path, "%s/run.sh", t->dir);
    f = fopen(path, "w");
    if (!CHECK(f != NULL))
        return false;
    fprintf(f, "#!/bin/sh\nexport OPENAI_BASE_URL=http://127.0.0.1:%d/s/escapes/v1 OPENAI_API_KEY=sk-test\n"
               "unset KORCH_LLM\ncd '%s'\nexec %s\n",
            t->llm.port, t->dir, cmdline);
    fclose(f);
    chmod(path, 0755);
    /* script -e: its status is the command's; -f: the typescript is written as it goes */
    CHECK_EQ(s_sh("tmux -S '%s' -f '%s/tmux.conf' new-session -d -x 200 -y 120 "
                  "\"script -q -e -f -c '%s/run.sh' '%s/ts'; echo \\$? > '%s/rc'\"",
                  t->sock, t->dir, t->dir, t->dir, t->dir),
             0);
    snprintf(path, sizeof path, "%s/rc", t->dir);
    for (int i = 0; i < 1500; i++) {
        struct stat st;
        if (stat(path, &st) == 0 && st.st_size > 0)
            return true;
        usleep(100 * 1000);
    }
    return CHECK(!"the command ended in the terminal");
}

/* The typescript of the last s_in_terminal, a new string (NULL: none). */
static char *s_typescript(const term_t *t, size_t *n)
{
    char path[256];
    snprintf(path, sizeof path, "%s/ts", t->dir);
    char *ts = s_slurp(path, n);
    CHECK(ts != NULL);
    return ts;
}

/* Every ESC in b is SGR (ESC [ digits ; : m) or korch's own erase-line
   (ESC [ K); the text is valid UTF-8 with no C0 but \n \r \t, no C1
   (U+0080-U+009F) and no bidi control. Fails with where and what. */
static bool s_bytes_safe(const char *b, size_t n, const char *what)
{
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)b[i];
        if (c == 0x1b) {
            size_t j = i + 1;
            if (j < n && b[j] == '[') {
                j++;
                while (j < n && ((b[j] >= '0' && b[j] <= '9') || b[j] == ';' || b[j] == ':'))
                    j++;
                if (j < n && (b[j] == 'm' || (b[j] == 'K' && j == i + 2))) {
                    i = j + 1;
                    continue;
                }
            }
            fprintf(stderr, "  %s: an escape that is not a colour at byte %zu: '%.24s'\n", what, i, b + i);
            return false;
        }
        if ((c < 0x20 && c != '\n' && c != '\r' && c != '\t') || c == 0x7f) {
            fprintf(stderr, "  %s: control 0x%02x at byte %zu\n", what, c, i);
            return false;
        }
        if (c < 0x80) {
            i++;
            continue;
        }
        int need = c >= 0xf0 && c <= 0xf4 ? 4 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xc2 && c <= 0xdf ? 2 : 0;
        unsigned cp = need == 2 ? (c & 0x1fu) : need == 3 ? (c & 0x0fu) : (c & 0x07u);
        for (int k = 1; need && k < need; k++) {
            unsigned char d = i + (size_t)k < n ? (unsigned char)b[i + (size_t)k] : 0;
            if ((d & 0xc0) != 0x80)
                need = 0;
            cp = cp << 6 | (d & 0x3fu);
        }
        if (!need) {
            fprintf(stderr, "  %s: a byte that is not UTF-8 (0x%02x) at byte %zu\n", what, c, i);
            return false;
        }
        if ((cp >= 0x80 && cp <= 0x9f) || cp == 0x61c || cp == 0x200e || cp == 0x200f ||
            (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069)) {
            fprintf(stderr, "  %s: U+%04X at byte %zu\n", what, cp, i);
            return false;
        }
        i += (size_t)need;
    }
    return true;
}

/* What the person sees of tmux: no paste buffer (no clipboard write
   reached it), its own pane title, an early line still on the screen (an
   ESC[2J would have moved it off: tmux keeps a cleared screen in its
   history, so the visible screen alone is asked). */
static void s_check_tmux(term_t *t, const char *first_line)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "tmux -S '%s' list-buffers", t->sock);
    char *buffers = s_capture(cmd);
    if (!CHECK_STREQ(buffers, ""))
        fprintf(stderr, "  a clipboard write reached the terminal\n");
    free(buffers);
    snprintf(cmd, sizeof cmd, "tmux -S '%s' display -p '#{pane_title}'", t->sock);
    char *title = s_capture(cmd);
    CHECK(!strstr(title, "TITLE"));
    free(title);
    snprintf(cmd, sizeof cmd, "tmux -S '%s' capture-pane -p", t->sock); /* the visible screen only */
    char *screen = s_capture(cmd);
    if (!CHECK(strstr(screen, first_line) != NULL))
        fprintf(stderr, "  the screen begins: '%.200s'\n", screen);
    free(screen);
}

/* korch run on a terminal: the model's text and code, the kernel's output,
   a result, an error, the files line and the answer, all full of escapes. */
TEST_T(terminal_run_shows_escapes_neutralised, 150)
{
    term_t t;
    if (!s_begin(&t))
        goto out;
    char cmdline[1200];
    snprintf(cmdline, sizeof cmdline, "'%s' run --launcher local --llm openai:gpt-4o-mini --session '%s/s' 'go'",
             korch_test_korch_bin(), t.dir);
    size_t n = 0;
    char *ts = s_in_terminal(&t, cmdline) ? s_typescript(&t, &n) : NULL;
    if (!ts)
        goto out;
    CHECK(s_bytes_safe(ts, n, "korch run's typescript"));
    /* every marker reached the person, in order of the run */
    static const char *marks[] = {"LINK-MARK", "MODEL-RLO", "CODE-MARK", "K-START", "SPLIT-MARK", "RLO-MARK",
                                  "C1-MARK", "STDERR-MARK", "progress 100%", "RESULT-MARK", "EVALUE-MARK",
                                  "[files: ", "ANSWER-MARK", "quoting SPLIT-MARK"};
    const char *at = ts;
    for (size_t i = 0; i < sizeof marks / sizeof marks[0]; i++) {
        const char *m = strstr(at, marks[i]);
        if (!CHECK(m != NULL))
            fprintf(stderr, "  '%s' missing (after byte %zu)\n", marks[i], (size_t)(at - ts));
        else
            at = m;
    }
    CHECK_CONTAINS(ts, "<U+202E>RLO-MARK");    /* bidi shown, not obeyed */
    CHECK_CONTAINS(ts, "<U+009B>C1-MARK");     /* a C1 control shown */
    CHECK_CONTAINS(ts, "\x1b[31mRED-MARK\x1b[0m"); /* colours kept on a terminal */
    CHECK_CONTAINS(ts, "\rprogress 50%\rprogress 100%"); /* a progress bar redraws its line */
    /* the file's name: the OSC gone, the C1 control and the RLO shown */
    CHECK_CONTAINS(ts, "evil-<U+009B>2J<U+202E>txt.exe");
    s_check_tmux(&t, "\nkorch: session ");
    char cmd[256];
    snprintf(cmd, sizeof cmd, "tmux -S '%s' capture-pane -e -p", t.sock);
    char *screen = s_capture(cmd);
    CHECK(strstr(screen, "31mRED-MARK") != NULL); /* what tmux shows is red */
    CHECK_CONTAINS(screen, "<U+202E>RLO-MARK");
    free(screen);
    free(ts);
out:
    s_end(&t);
}

/* korch exec on a terminal: the kernel's traceback keeps IPython's colours,
   its evalue's OSC 52 and clear-screen do not reach the terminal. */
TEST_T(terminal_exec_keeps_traceback_colours_only, 90)
{
    term_t t;
    if (!s_begin(&t))
        goto out;
    char path[256];
    snprintf(path, sizeof path, "%s/cell.py", t.dir);
    FILE *f = fopen(path, "w");
    if (!CHECK(f != NULL))
        goto out;
    fputs("import base64\n"
          "print('EXEC-START')\n"
          "print('\\x1b]52;c;' + base64.b64encode(b'EXEC-CLIP').decode() + '\\x07\\x1b[2JOUT-MARK')\n"
          "raise ValueError('TB-MARK \\x1b]0;TB-TITLE\\x07\\x1b[2J\\u202e')\n",
          f);
    fclose(f);
    char cmdline[1200];
    snprintf(cmdline, sizeof cmdline, "'%s' exec --launcher local '%s'", korch_test_korch_bin(), path);
    size_t n = 0;
    char *ts = s_in_terminal(&t, cmdline) ? s_typescript(&t, &n) : NULL;
    if (!ts)
        goto out;
    CHECK(s_bytes_safe(ts, n, "korch exec's typescript"));
    CHECK_CONTAINS(ts, "OUT-MARK");
    const char *tb = strstr(ts, "ValueError");
    if (CHECK(tb != NULL)) {
        CHECK(strstr(tb, "\x1b[") != NULL); /* IPython's traceback colours reached the terminal */
        CHECK_CONTAINS(tb, "TB-MARK");
        CHECK_CONTAINS(tb, "<U+202E>");
    }
    s_check_tmux(&t, "EXEC-START\n");
    free(ts);
out:
    s_end(&t);
}

/* Through pipes (not a terminal) korch run writes text only: no colour
   either, and the answer on stdout is neutralised too. */
TEST_T(terminal_run_through_pipes_writes_text_only, 120)
{
    term_t t;
    if (!s_begin(&t))
        goto out;
    char session[128];
    snprintf(session, sizeof session, "%s/s", t.dir);
    const char *argv[] = {korch_test_korch_bin(), "run", "--launcher", "local", "--llm", "openai:gpt-4o-mini",
                          "--session", session, "go", NULL};
    char *out = NULL, *err = NULL;
    CHECK_EQ(korch_test_run(argv, NULL, &out, &err, 100), 0);
    if (CHECK(out && err)) {
        CHECK(!strchr(out, '\x1b') && !strchr(err, '\x1b'));
        CHECK(s_bytes_safe(out, strlen(out), "stdout") && s_bytes_safe(err, strlen(err), "stderr"));
        CHECK_CONTAINS(out, "ANSWER-MARK");
        CHECK_CONTAINS(out, "<U+202E>ANSWER-RLO");
        CHECK_CONTAINS(err, "RED-MARK ");
        CHECK_CONTAINS(err, "\nprogress 10%\nprogress 50%\nprogress 100%\n"); /* off a terminal each redraw is a line */
    }
    free(out);
    free(err);
out:
    s_end(&t);
}
