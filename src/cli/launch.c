/*  Choosing a launcher from the command line: auto, docker, sandbox or local.
 *
 *  auto (the default) takes docker when the engine answers and the kernel
 *  image is there, else the sandbox when bubblewrap and cgroups work, else
 *  refuses and says how to get either: it never falls back to an unconfined
 *  kernel. local says once what it means.
 */
#include "cli.h"
#include "korch/docker.h"
#include "korch/docker_api.h"
#include "korch/env.h"
#include "korch/instance.h"
#include "korch/log.h"
#include "korch/sandbox.h"

#include <limits.h>
#include <pwd.h>
#include <unistd.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The plain words --launcher local deserves, once per process. */
static void s_local_note(void)
{
    static bool said;
    if (said)
        return;
    said = true;
    struct passwd *pw = getpwuid(geteuid());
    fprintf(stderr,
            "korch: launcher local: the kernel runs unconfined as uid %u (%s) on this machine: the code it runs "
            "(the model's, with run, chat and serve) can read, change and delete what that user can, and reach "
            "the network (--launcher sandbox or docker confine it)\n",
            (unsigned)geteuid(), pw && pw->pw_name ? pw->pw_name : "?");
}

static korch_launcher_t *s_docker(const korch_cli_launcher_opts_t *o, korch_err_t *why)
{
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
    korch_launcher_t *l = korch_launcher_docker_new(&d, why);
    if (l) {
        /* docker needs the image; without it auto moves on */
        korch_docker_t *api = korch_docker_new(NULL, why);
        json_t *img = api ? korch_docker_image_inspect(api, d.image, why) : NULL;
        korch_docker_destroy(&api);
        if (!img)
            korch_launcher_destroy(&l);
        json_decref(img);
    }
    return l;
}

static korch_launcher_t *s_sandbox(const korch_cli_launcher_opts_t *o, korch_err_t *why)
{
    korch_sandbox_opts_t so;
    korch_sandbox_opts_init(&so);
    so.instance = o->instance;
    if (o->memory_mb > 0)
        so.memory = (int64_t)(o->memory_mb * 1024 * 1024);
    if (o->cpus > 0)
        so.nano_cpus = (int64_t)(o->cpus * 1e9);
    if (o->pids > 0)
        so.pids_limit = o->pids;
    so.workdir = o->workdir;
    so.workdir_from_cwd = o->workdir_from_cwd || o->workdir;
    so.workdir_give = o->give_workdir;
    return korch_launcher_sandbox_new(&so, why);
}

korch_launcher_t *korch_cli_launcher(const korch_cli_launcher_opts_t *o, korch_err_t *err)
{
    const char *name = o->name ? o->name : "auto";
    korch_err_t dwhy = {0}, swhy = {0};
    korch_launcher_t *l = NULL;
    if (strcmp(name, "local") == 0) {
        s_local_note();
        return NULL;
    }
    if (strcmp(name, "docker") == 0) {
        l = s_docker(o, &dwhy);
        if (!l)
            korch_err_set(err, dwhy.rc ? dwhy.rc : KORCH_E_DOCKER, "%s",
                          dwhy.msg[0] ? dwhy.msg : "docker is not available");
        return l;
    }
    if (strcmp(name, "sandbox") == 0) {
        l = s_sandbox(o, &swhy);
        if (!l)
            korch_err_set(err, swhy.rc ? swhy.rc : KORCH_E_LAUNCH, "%s", swhy.msg);
        return l;
    }
    if (strcmp(name, "auto") != 0) {
        korch_err_set(err, KORCH_E_INVALID, "unknown launcher '%s' (use auto, docker, sandbox or local)", name);
        return NULL;
    }
    /* auto: the strongest isolation that works here, never none */
    l = s_docker(o, &dwhy);
    if (l) {
        if (!o->quiet)
            fprintf(stderr, "korch: launcher auto picked docker\n");
        return l;
    }
    l = s_sandbox(o, &swhy);
    if (l) {
        if (!o->quiet)
            fprintf(stderr, "korch: launcher auto picked sandbox (docker: %s)\n", dwhy.msg);
        return l;
    }
    korch_err_set(err, KORCH_E_LAUNCH,
                  "no launcher that confines the kernel works here (docker: %s; %s). Start dockerd and build the "
                  "kernel image (make image), or install bubblewrap (apt-get install bubblewrap) and run korch as "
                  "root for the sandbox's cgroups; --launcher local runs the model's code unconfined as the current "
                  "user",
                  dwhy.msg, swhy.msg);
    return NULL;
}

const char *korch_cli_launcher_name(const korch_launcher_t *l) { return l ? l->ops->name : "local"; }

void korch_cli_sweep(korch_launcher_t *l, const char *mine)
{
    korch_err_t err = {0};
    char base[PATH_MAX];
    if (!l)
        return;
    /* A sandbox dies with its korch; what a dead one may leave is in its
       cgroups (whichever launcher this korch uses: a no-op without root). */
    int removed = korch_sandbox_sweep(mine, korch_instance_alive, korch_instance_forget);
    if (removed > 0)
        fprintf(stderr, "korch: removed %d sandbox cgroup(s) left by korch instances that are gone\n", removed);
    if (strcmp(l->ops->name, "docker") != 0 || korch_runtime_base(base, sizeof base, &err) != KORCH_OK)
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
