/*  Command-line helpers the commands share: the launcher options, --env
 *  and .env files. (The launcher choice itself is korch_launcher_choose,
 *  in src/launcher/choose.c.)
 */
#include "cli.h"
#include "korch/env.h"
#include "korch/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

double korch_cli_num(const char *name, const char *arg, double min, double max, bool whole, const char *what)
{
    char *end = NULL;
    errno = 0;
    double v = arg ? strtod(arg, &end) : 0;
    if (!arg || end == arg || *end || errno == ERANGE || v != v || v < min || v > max || (whole && v != (double)(long long)v)) {
        fprintf(stderr, "korch: --%s wants a%s number from %g to %g%s%s%s, not '%s'\n", name, whole ? " whole" : "",
                min, max, what ? " (" : "", what ? what : "", what ? ")" : "", arg ? arg : "");
        exit(2);
    }
    return v;
}

bool korch_cli_launcher_opt(korch_launcher_choice_t *c, int opt, const char *arg)
{
    switch (opt) {
    case KORCH_CLI_OPT_LAUNCHER: c->name = arg; return true;
    case KORCH_CLI_OPT_IMAGE: c->image = arg; return true;
    case KORCH_CLI_OPT_MEMORY: c->memory_mb = korch_cli_num("memory", arg, 16, 1 << 24, false, "MiB"); return true;
    case KORCH_CLI_OPT_CPUS: c->cpus = korch_cli_num("cpus", arg, 0.01, 1024, false, "cores"); return true;
    case KORCH_CLI_OPT_PIDS: c->pids = (long)korch_cli_num("pids", arg, 8, 1 << 22, true, "processes"); return true;
    case KORCH_CLI_OPT_WHEELHOUSE: c->packages.wheelhouse = arg; return true;
    case KORCH_CLI_OPT_PACKAGE_INDEX: c->packages.index_url = arg; return true;
    case KORCH_CLI_OPT_PACKAGE_HOSTS: c->packages.hosts = arg; return true;
    case KORCH_CLI_OPT_FORK: c->fork = true; return true;
    default: return false;
    }
}

/* text from column col to at most 100, words wrapped onto lines that start
   at col; the first line starts where the cursor is (at). */
static void s_wrapped(FILE *f, int at, int col, const char *text)
{
    const char *p = text;
    while (*p) {
        size_t n = strcspn(p, " ");
        if (at > col && at + 1 + (int)n > 100) {
            fprintf(f, "\n%*s", col, "");
            at = col;
        } else if (at > col) {
            fputc(' ', f);
            at++;
        }
        fprintf(f, "%.*s", (int)n, p);
        at += (int)n;
        p += n;
        while (*p == ' ')
            p++;
    }
    fputc('\n', f);
}

static void s_opt_line(FILE *f, int indent, int col, const char *opt, const char *text)
{
    int at = fprintf(f, "%*s%s", indent, "", opt);
    if (at >= col)
        fprintf(f, "\n%*s", col, "");
    else
        fprintf(f, "%*s", col - at, "");
    s_wrapped(f, col, col, text);
}

void korch_cli_launcher_help(FILE *f, int indent, int col, const char *dflt)
{
    char text[2048];
    size_t w = (size_t)snprintf(text, sizeof text, "where the kernel runs (default %s).", dflt);
    const korch_launcher_about_t *a = korch_launcher_catalog();
    for (size_t i = 0; a[i].name && w < sizeof text; i++)
        w += (size_t)snprintf(text + w, sizeof text - w, " %s: %s%s", a[i].name, a[i].what, a[i + 1].name ? ";" : "");
    s_opt_line(f, indent, col, "--launcher NAME", text);
    s_opt_line(f, indent, col, "--image NAME", "docker, swarm: the kernel image (default korch-kernel-<kernelspec>:latest)");
    s_opt_line(f, indent, col, "--memory MB", "docker, sandbox, swarm: memory limit in MiB, no swap (default 1024)");
    s_opt_line(f, indent, col, "--cpus N", "docker, sandbox, swarm: CPUs (default 1)");
    s_opt_line(f, indent, col, "--pids N", "docker, sandbox, swarm: process limit (default 256)");
    s_opt_line(f, indent, col, "--wheelhouse DIR", "docker, sandbox, local: Python kernels may pip install the wheels "
               "of DIR (read-only in the kernel, offline) into an environment of their own");
    s_opt_line(f, indent, col, "--package-index URL", "docker, sandbox, local: ... and from this simple index "
               "(e.g. https://pypi.org/simple), reached through korch: the kernel keeps no network of its own");
    s_opt_line(f, indent, col, "--package-hosts H,...", "the hosts korch forwards the index's requests to "
               "(default the index's host; name the file host too, e.g. pypi.org,files.pythonhosted.org)");
    s_opt_line(f, indent, col, "--fork", "sandbox: fork python3 kernels from a template that has imported numpy, "
               "pandas and matplotlib (ready in about 0.1 s; docs/fastkernel.md; also KORCH_FORK=1)");
}

bool korch_cli_env_opt(const char *cmd, const char *arg)
{
    korch_err_t err = {0};
    if (korch_env_pass(arg, &err) == KORCH_OK)
        return true;
    fprintf(stderr, "korch %s: %s\n", cmd, err.msg);
    return false;
}

static bool s_dotenv_name_ok(const char *name)
{
    static const char *prefixes[] = {"KORCH_", "OPENAI_", "ANTHROPIC_", "OLLAMA_"};
    for (const char *p = name; *p; p++)
        if (!((*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '_'))
            return false;
    for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++)
        if (strncmp(name, prefixes[i], strlen(prefixes[i])) == 0)
            return true;
    return false;
}

int korch_cli_load_dotenv(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    char line[8192];
    int n = 0, lineno = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        char *p = line;
        p[strcspn(p, "\r\n")] = 0;
        while (*p == ' ' || *p == '\t')
            p++;
        if (!*p || *p == '#')
            continue;
        if (strncmp(p, "export ", 7) == 0)
            p += 7;
        char *eq = strchr(p, '=');
        if (!eq) {
            korch_warn("%s:%d: not NAME=VALUE; ignored", path, lineno);
            continue;
        }
        char *end = eq;
        while (end > p && (end[-1] == ' ' || end[-1] == '\t'))
            end--;
        *end = 0;
        char *v = eq + 1;
        while (*v == ' ' || *v == '\t')
            v++;
        size_t vl = strlen(v);
        if (vl >= 2 && (v[0] == '"' || v[0] == '\'') && v[vl - 1] == v[0]) {
            v[vl - 1] = 0;
            v++;
        } else {
            char *hash = strstr(v, " #"); /* a trailing comment after an unquoted value */
            if (hash)
                *hash = 0;
            vl = strlen(v);
            while (vl && (v[vl - 1] == ' ' || v[vl - 1] == '\t'))
                v[--vl] = 0;
        }
        if (!s_dotenv_name_ok(p)) {
            korch_debug("%s:%d: '%s' is not a name korch reads; ignored", path, lineno, p);
            continue;
        }
        if (getenv(p))
            continue; /* the real environment wins */
        if (setenv(p, v, 0) == 0)
            n++;
    }
    fclose(f);
    return n;
}
