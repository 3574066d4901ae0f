/*  Choosing a launcher from the command line: local, docker or auto. */
#include "cli.h"
#include "korch/docker.h"
#include "korch/docker_api.h"
#include "korch/env.h"
#include "korch/instance.h"
#include "korch/log.h"

#include <limits.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

korch_launcher_t *korch_cli_launcher(const korch_cli_launcher_opts_t *o, korch_err_t *err)
{
    const char *name = o->name ? o->name : "auto";
    if (strcmp(name, "local") != 0 && strcmp(name, "docker") != 0 && strcmp(name, "auto") != 0) {
        korch_err_set(err, KORCH_E_INVALID, "unknown launcher '%s' (use local, docker or auto)", name);
        return NULL;
    }
    if (strcmp(name, "local") == 0)
        return NULL;
    korch_docker_opts_t d;
    korch_docker_opts_init(&d);
    char image[300];
    snprintf(image, sizeof image, "korch-kernel-%s:latest", o->kernel ? o->kernel : "python3");
    d.image = o->image ? o->image : image;
    d.instance = o->instance;
    if (o->memory_mb > 0)
        d.memory = (int64_t)(o->memory_mb * 1024 * 1024);
    if (o->cpus > 0)
        d.nano_cpus = (int64_t)(o->cpus * 1e9);
    if (o->pids > 0)
        d.pids_limit = o->pids;
    d.workdir = o->workdir;
    d.workdir_from_cwd = o->workdir_from_cwd || o->workdir;
    d.workdir_give = o->give_workdir;
    if (o->workdir_mb > 0)
        d.workdir_size = (int64_t)(o->workdir_mb * 1024 * 1024);
    korch_err_t why = {0};
    korch_launcher_t *l = korch_launcher_docker_new(&d, &why);
    if (l) {
        /* both docker and auto need the image; auto falls back to local */
        korch_docker_t *api = korch_docker_new(NULL, &why);
        json_t *img = api ? korch_docker_image_inspect(api, d.image, &why) : NULL;
        korch_docker_destroy(&api);
        if (!img)
            korch_launcher_destroy(&l);
        json_decref(img);
    }
    if (!l && strcmp(name, "docker") == 0) {
        korch_err_set(err, why.rc ? why.rc : KORCH_E_DOCKER, "%s", why.msg[0] ? why.msg : "docker is not available");
        return NULL;
    }
    if (!o->quiet && strcmp(name, "auto") == 0)
        fprintf(stderr, "korch: launcher auto picked %s%s%s\n", l ? "docker" : "local", l ? "" : ": ",
                l ? "" : why.msg);
    return l;
}

void korch_cli_sweep(korch_launcher_t *l, const char *mine)
{
    korch_err_t err = {0};
    char base[PATH_MAX];
    if (!l || korch_runtime_base(base, sizeof base, &err) != KORCH_OK)
        return;
    json_t *all = korch_docker_list(l, NULL, &err);
    if (!all) {
        korch_warn("cannot list containers: %s", err.msg);
        return;
    }
    json_t *done = json_object();
    size_t i, blen = strlen(base);
    json_t *c;
    json_array_foreach(all, i, c) {
        const char *inst = json_string_value(json_object_get(c, "instance"));
        const char *rdir = json_string_value(json_object_get(c, "runtime_dir"));
        /* Only instances that live in our runtime base can be judged by its
           locks; "default" (library users without an instance) never. */
        if (!inst || !rdir || strcmp(inst, mine) == 0 || strcmp(inst, "default") == 0 ||
            strncmp(rdir, base, blen) != 0 || rdir[blen] != '/' || strchr(rdir + blen + 1, '/') ||
            json_object_get(done, inst) || korch_instance_alive(inst))
            continue;
        json_object_set_new(done, inst, json_true());
        int n = korch_docker_remove_all(l, inst, &err);
        if (n > 0)
            fprintf(stderr, "korch: removed %d container(s) left by korch instance '%s', which is gone\n", n, inst);
        korch_instance_forget(inst);
    }
    json_decref(done);
    json_decref(all);
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
