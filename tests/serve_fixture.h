/*  Test fixture: a `korch serve` child process, as the server tests run it.
 *
 *  serve_start_args(&s, extra) starts `build/korch serve --port 0 --launcher
 *  local EXTRA...` (a later --launcher wins), reads its first stdout line
 *  (http://127.0.0.1:PORT/?token=TOKEN) into s.url / s.token, and keeps its
 *  stderr in s.log; serve_stop(&s) sends SIGTERM and checks it exits (0)
 *  within 30 s. Header-only, like kernel_fixture.h: include it from one test file
 *  each. */
#ifndef KORCH_SERVE_FIXTURE_H
#define KORCH_SERVE_FIXTURE_H

#include "test.h"
#include "korch/fsutil.h"

#include <jansson.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PY "/usr/bin/python3"

typedef struct {
    pid_t pid;     /* korch serve */
    pid_t drain;   /* copies its later stdout into the log */
    char line[512];
    char url[256]; /* http://127.0.0.1:PORT/ */
    char token[256];
    char log[128]; /* its stderr */
} serve_t;

static inline void serve_log_tail(const serve_t *s)
{
    FILE *f = fopen(s->log, "r");
    if (!f)
        return;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, n > 4000 ? n - 4000 : 0, SEEK_SET);
    char buf[4100];
    size_t got = fread(buf, 1, sizeof buf - 1, f);
    buf[got] = 0;
    fclose(f);
    fprintf(stderr, "  --- korch serve stderr (tail) ---\n%s\n  ---\n", buf);
}

/* korch serve's log so far (new string, "" when there is none yet); *len
   its length (may be NULL). */
static inline char *serve_log_read(const serve_t *s, size_t *len)
{
    size_t n = 0;
    char *text = korch_read_file(s->log, 64u << 20, &n, NULL);
    if (!text) {
        text = strdup("");
        n = 0;
    }
    if (len)
        *len = n;
    return text;
}

/* Does korch serve's log hold needle (which may span lines: "\nINJECTED")? */
static inline bool serve_log_has(const serve_t *s, const char *needle)
{
    char *text = serve_log_read(s, NULL);
    bool has = strstr(text, needle) != NULL;
    free(text);
    return has;
}

static inline void serve_stop(serve_t *s)
{
    if (s->pid > 0) {
        kill(s->pid, SIGTERM);
        int st;
        bool gone = false;
        for (int i = 0; i < 300 && !gone; i++) { /* 30 s: its kernels shut down first */
            if (waitpid(s->pid, &st, WNOHANG) == s->pid)
                gone = true;
            else
                usleep(100000);
        }
        if (!gone) {
            CHECK(!"korch serve did not exit within 30 s of SIGTERM");
            kill(s->pid, SIGKILL);
            waitpid(s->pid, &st, 0);
        } else if (!CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
            /* a sanitizer's report, a crash or a failed shutdown */
            fprintf(stderr, "  korch serve ended with status 0x%x\n", st);
            serve_log_tail(s);
        }
        s->pid = 0;
    }
    if (s->drain > 0) {
        kill(s->drain, SIGKILL);
        waitpid(s->drain, NULL, 0);
        s->drain = 0;
    }
}

/* Start korch serve with extra args (NULL-terminated); false when it printed no URL line. */
static inline bool serve_start_args(serve_t *s, const char *const *extra)
{
    memset(s, 0, sizeof *s);
    snprintf(s->log, sizeof s->log, "/tmp/korch-serve-test-%d.log", (int)getpid());
    int p[2];
    if (pipe(p) != 0)
        return CHECK(!"pipe");
    const char *argv[24];
    int n = 0;
    argv[n++] = korch_test_korch_bin();
    argv[n++] = "serve";
    argv[n++] = "--port";
    argv[n++] = "0";
    argv[n++] = "--launcher";
    argv[n++] = "local";
    for (int i = 0; extra && extra[i] && n < 22; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    s->pid = fork();
    if (s->pid == 0) {
        /* stays in the test's process group: a timed-out test takes it along */
        /* O_APPEND: the drain below appends korch's stdout to the same file */
        int fd = open(s->log, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0600);
        if (fd >= 0)
            dup2(fd, 2);
        dup2(p[1], 1);
        close(p[0]);
        close(p[1]);
        int devnull = open("/dev/null", O_RDONLY);
        if (devnull >= 0)
            dup2(devnull, 0);
        execv(argv[0], (char *const *)argv);
        fprintf(stderr, "cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(p[1]);
    /* the first line, within 30 s */
    size_t len = 0;
    time_t deadline = time(NULL) + 30;
    bool have = false;
    while (!have && time(NULL) < deadline && len < sizeof s->line - 1) {
        struct pollfd pfd = {p[0], POLLIN, 0};
        if (poll(&pfd, 1, 500) <= 0)
            continue;
        ssize_t r = read(p[0], s->line + len, 1);
        if (r <= 0)
            break;
        if (s->line[len] == '\n')
            have = true;
        else
            len++;
    }
    s->line[len] = 0;
    if (!have) {
        close(p[0]);
        CHECK(!"korch serve printed no first line `http://127.0.0.1:PORT/?token=TOKEN` within 30 s");
        serve_log_tail(s);
        serve_stop(s);
        return false;
    }
    /* keep draining its stdout so later prints never block it */
    s->drain = fork();
    if (s->drain == 0) {
        char buf[4096];
        int fd = open(s->log, O_WRONLY | O_APPEND);
        ssize_t r;
        while ((r = read(p[0], buf, sizeof buf)) > 0)
            if (fd >= 0 && write(fd, buf, (size_t)r) < 0)
                break;
        _exit(0);
    }
    close(p[0]);
    const char *q = strstr(s->line, "/?token=");
    /* with --users and no --token, the users' tokens only: no token printed */
    bool users_only = !q && s->line[0] && s->line[strlen(s->line) - 1] == '/';
    for (int i = 0; users_only && extra && extra[i]; i++)
        users_only = strcmp(extra[i], "--token") != 0;
    for (int i = 0, with_users = 0; users_only && extra; i++)
        if (!extra[i]) {
            users_only = with_users;
            break;
        } else
            with_users |= strcmp(extra[i], "--users") == 0;
    if (users_only && CHECK(strncmp(s->line, "http://127.0.0.1:", 17) == 0) &&
        CHECK_LT(strlen(s->line), sizeof s->url)) {
        memcpy(s->url, s->line, strlen(s->line) + 1);
        return true;
    }
    bool ok = CHECK(strncmp(s->line, "http://127.0.0.1:", 17) == 0) && CHECK(q != NULL) && CHECK(q && q[8]);
    if (!ok) {
        fprintf(stderr, "  first line: %s\n", s->line);
        serve_stop(s);
        return false;
    }
    snprintf(s->url, sizeof s->url, "%.*s/", (int)(q - s->line), s->line);
    snprintf(s->token, sizeof s->token, "%s", q + 8);
    return true;
}

static inline bool serve_start(serve_t *s)
{
    return serve_start_args(s, NULL);
}

static inline const char *serve_peer(const char *name)
{
    static char path[4][600];
    static int i;
    i = (i + 1) % 4;
    snprintf(path[i], sizeof path[i], "%s/tests/peers/%s", korch_test_root(), name);
    return path[i];
}

/* Run a peer (argv[1] its script, argv[2] its mode); its last line that is
   a JSON object (new), NULL when it printed none. Its output goes to
   stderr when it failed, printed no JSON or did not say "ok": true. */
static inline json_t *serve_peer_json(const char *const *argv, int timeout_s)
{
    char *out = NULL, *err = NULL;
    int st = korch_test_run(argv, NULL, &out, &err, timeout_s);
    const char *line = NULL;
    for (const char *p = out; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (*p == '{')
            line = p;
    json_t *j = line ? json_loadb(line, strcspn(line, "\n"), 0, NULL) : NULL;
    if (st != 0 || !json_is_true(json_object_get(j, "ok"))) {
        const char *script = strrchr(argv[1], '/');
        fprintf(stderr, "%s %s: status %d\n%s\n%s\n", script ? script + 1 : argv[1], argv[2], st, out ? out : "",
                err ? err : "");
    }
    free(out);
    free(err);
    return j;
}

/* How many kernels GET /api/kernels lists (-1 when it does not answer). */
static inline int serve_kernel_count(const serve_t *s)
{
    const char *argv[] = {PY, "-c",
                          "import json,sys,urllib.request as u\n"
                          "r=u.urlopen(u.Request(sys.argv[1]+'api/kernels',"
                          "headers={'Authorization':'token '+sys.argv[2]}),timeout=10)\n"
                          "print(len(json.load(r)))",
                          s->url, s->token, NULL};
    char *out = NULL;
    int rc = korch_test_run(argv, NULL, &out, NULL, 30);
    int n = rc == 0 && out ? (int)strtol(out, NULL, 10) : -1;
    free(out);
    return n;
}

/* A process that exists and is not a zombie. */
static inline bool serve_pid_alive(long pid)
{
    if (kill((pid_t)pid, 0) != 0)
        return false;
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *rp = strrchr(buf, ')');
    return !(rp && rp[1] == ' ' && rp[2] == 'Z');
}

/* tests/npm installed (`npm ci` from the committed package-lock.json when
   node_modules is absent): @jupyterlab/services and ws for the Node peers. */
static inline bool serve_npm_ready(void)
{
    static const char *const marks[] = {"@jupyterlab/services/package.json", NULL};
    return korch_test_npm_ready("npm", marks, 150);
}

#endif
