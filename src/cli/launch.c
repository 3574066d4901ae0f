/*  Command-line helpers the commands share: --env and .env files. (The
 *  launcher choice is korch_launcher_choose, in src/launcher/choose.c.)
 */
#include "cli.h"
#include "korch/env.h"
#include "korch/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
