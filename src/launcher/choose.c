/*  Choosing a launcher (--launcher auto|docker|sandbox|swarm|local) and sweeping
 *  what korch instances that are gone left behind.
 *
 *  auto (the default) takes docker when the engine answers and the kernel
 *  image is there, else the sandbox when bubblewrap and cgroups work, else
 *  refuses and says how to get either: it never falls back to an unconfined
 *  kernel. local says once what it means.
 */
#include "backend.h"
#include "korch/docker.h"
#include "korch/docker_api.h"
#include "korch/instance.h"
#include "korch/log.h"
#include "korch/sandbox.h"
#include "korch/swarm.h"

#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The plain words --launcher local deserves, once per process. */
static void s_local_note(void)
{
    static bool said;
    if (said)
        return;
    said = true;
    struct passwd *pw = getpwuid(geteuid());
    korch_notice("launcher local: the kernel runs unconfined as uid %u (%s) on this machine: the code it runs "
                 "(the model's, with run, chat and serve) can read, change and delete what that user can, and reach "
                 "the network (--launcher sandbox or docker confine it)",
                 (unsigned)geteuid(), pw && pw->pw_name ? pw->pw_name : "?");
}

/* The choice's limits over a backend's defaults (a choice <= 0 keeps
   the default; workdir_size may be NULL: the backend has none). */
static void s_limits(const korch_launcher_choice_t *o, int64_t *memory, int64_t *nano_cpus, int64_t *pids,
                     int64_t *workdir_size)
{
    if (o->memory_mb > 0)
        *memory = (int64_t)(o->memory_mb * 1024 * 1024);
    if (o->cpus > 0)
        *nano_cpus = (int64_t)(o->cpus * 1e9);
    if (o->pids > 0)
        *pids = o->pids;
    if (workdir_size && o->workdir_mb > 0)
        *workdir_size = (int64_t)(o->workdir_mb * 1024 * 1024);
}

static korch_launcher_t *s_docker(korch_loop_t *loop, const korch_launcher_choice_t *o, korch_err_t *why)
{
    korch_docker_opts_t d;
    korch_docker_opts_init(&d);
    char image[300];
    snprintf(image, sizeof image, "korch-kernel-%s:latest", o->kernel ? o->kernel : "python3");
    d.image = o->image ? o->image : image;
    d.instance = o->instance;
    s_limits(o, &d.memory, &d.nano_cpus, &d.pids_limit, &d.workdir_size);
    d.workdir = o->workdir;
    d.workdir_from_cwd = o->workdir_from_cwd || o->workdir;
    d.workdir_give = o->give_workdir;
    korch_launcher_t *l = korch_launcher_docker_new(loop, &d, why);
    if (l) {
        /* docker needs the image; without it auto moves on */
        korch_docker_t *api = korch_docker_new(NULL, NULL, why);
        json_t *img = api ? korch_docker_image_inspect(api, d.image, why) : NULL;
        korch_docker_destroy(&api);
        if (!img)
            korch_launcher_destroy(&l);
        json_decref(img);
    }
    return l;
}

static korch_launcher_t *s_sandbox(korch_loop_t *loop, const korch_launcher_choice_t *o, korch_err_t *why)
{
    korch_sandbox_opts_t so;
    korch_sandbox_opts_init(&so);
    so.instance = o->instance;
    s_limits(o, &so.memory, &so.nano_cpus, &so.pids_limit, &so.workdir_size);
    so.workdir = o->workdir;
    so.workdir_from_cwd = o->workdir_from_cwd || o->workdir;
    so.workdir_give = o->give_workdir;
    so.fork = so.fork || o->fork;
    return korch_launcher_sandbox_new(loop, &so, why);
}

/* The swarm's own knobs come from KORCH_SWARM_* (swarm.h); the common ones
   from the choice. */
static korch_launcher_t *s_swarm(korch_loop_t *loop, const korch_launcher_choice_t *o, korch_err_t *err)
{
    korch_swarm_opts_t so;
    korch_swarm_opts_init(&so);
    so.image = o->image;
    so.instance = o->instance;
    s_limits(o, &so.memory, &so.nano_cpus, &so.pids_limit, &so.workdir_size);
    return korch_launcher_swarm_new(loop, &so, err);
}

static korch_launcher_t *s_docker_named(korch_loop_t *loop, const korch_launcher_choice_t *o, korch_err_t *err)
{
    korch_err_t why = {0};
    korch_launcher_t *l = s_docker(loop, o, &why);
    if (!l)
        korch_err_set(err, why.rc ? why.rc : KORCH_E_DOCKER, "%s", why.msg[0] ? why.msg : "docker is not available");
    return l;
}

static korch_launcher_t *s_sandbox_named(korch_loop_t *loop, const korch_launcher_choice_t *o, korch_err_t *err)
{
    korch_err_t why = {0};
    korch_launcher_t *l = s_sandbox(loop, o, &why);
    if (!l)
        korch_err_set(err, why.rc ? why.rc : KORCH_E_LAUNCH, "%s", why.msg);
    return l;
}

static korch_launcher_t *s_local(korch_loop_t *loop, const korch_launcher_choice_t *o, korch_err_t *err)
{
    s_local_note();
    return korch_launcher_local_new(loop, err);
}

/* The backends by name: the one place that names them (curl's vtls.c
   keeps its table of backends the same way). auto is korch_launcher_choose's own. */
static const struct {
    korch_launcher_about_t about;
    korch_launcher_t *(*make)(korch_loop_t *loop, const korch_launcher_choice_t *o, korch_err_t *err);
    bool instance; /* what it starts outlives a korch, or leaves something behind: labelled with the instance */
} s_backends[] = {
    {{"auto", "docker when the engine answers and the kernel image exists, else sandbox, else a refusal that says "
              "how to get either (never an unconfined kernel)"},
     NULL, true},
    {{"docker", "a hardened container per kernel, no network"}, s_docker_named, true},
    {{"sandbox", "bubblewrap and a cgroup, no network"}, s_sandbox_named, true},
    {{"swarm", "a Docker Swarm service per kernel, placed by the manager DOCKER_HOST names"}, s_swarm, true},
    {{"local", "a process of yours, unconfined: for your own code"}, s_local, false},
};

const korch_launcher_about_t *korch_launcher_catalog(void)
{
    static korch_launcher_about_t list[sizeof s_backends / sizeof *s_backends + 1];
    for (size_t i = 0; i < sizeof s_backends / sizeof *s_backends; i++)
        list[i] = s_backends[i].about;
    return list;
}

bool korch_launcher_needs_instance(const char *name)
{
    for (size_t i = 0; name && i < sizeof s_backends / sizeof *s_backends; i++)
        if (strcmp(name, s_backends[i].about.name) == 0)
            return s_backends[i].instance;
    return true; /* an unknown name: korch_launcher_choose refuses it */
}

static korch_launcher_t *s_choose(korch_loop_t *loop, const korch_launcher_choice_t *o, korch_err_t *err);

korch_launcher_t *korch_launcher_choose(korch_loop_t *loop, const korch_launcher_choice_t *o, korch_err_t *err)
{
    korch_launcher_t *l = s_choose(loop, o, err);
    if (l && korch_launcher_set_packages(l, &o->packages, err) != KORCH_OK)
        korch_launcher_destroy(&l);
    return l;
}

static korch_launcher_t *s_choose(korch_loop_t *loop, const korch_launcher_choice_t *o, korch_err_t *err)
{
    const char *name = o->name ? o->name : "auto";
    korch_err_t dwhy = {0}, swhy = {0};
    korch_launcher_t *l = NULL;
    for (size_t i = 0; i < sizeof s_backends / sizeof *s_backends; i++)
        if (s_backends[i].make && strcmp(name, s_backends[i].about.name) == 0)
            return s_backends[i].make(loop, o, err);
    if (strcmp(name, "auto") != 0) {
        char names[200] = "";
        size_t n = sizeof s_backends / sizeof *s_backends;
        for (size_t i = 0; i < n; i++) {
            size_t at = strlen(names);
            snprintf(names + at, sizeof names - at, "%s%s", i == 0 ? "" : i + 1 == n ? " or " : ", ",
                     s_backends[i].about.name);
        }
        korch_err_set(err, KORCH_E_INVALID, "unknown launcher '%s' (use %s)", name, names);
        return NULL;
    }
    /* auto: the strongest isolation that works here, never none */
    l = s_docker(loop, o, &dwhy);
    if (l) {
        if (!o->quiet)
            korch_notice("launcher auto picked docker");
        return l;
    }
    l = s_sandbox(loop, o, &swhy);
    if (l) {
        if (!o->quiet)
            korch_notice("launcher auto picked sandbox (docker: %s)", dwhy.msg);
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

/* Containers and services are judged by their korch.scope label: only
   those of our scope (korch_runtime_scope: the lock domain of our runtime
   base) have their instance judged by our locks and, when it is gone,
   removed. Another scope is another korch's (another machine's runtime dir
   on a shared swarm or engine): never touched. No label is an older
   korch's: the runtime_dir label is no proof (the runtime base has the
   same path on every machine), so they are left too, with a notice saying
   how to remove them. */
void korch_launcher_sweep(korch_launcher_t *l, const char *mine)
{
    korch_err_t err = {0};
    char base[PATH_MAX], scope[KORCH_SCOPE_LEN];
    if (!l)
        return;
    /* A sandbox dies with its korch; what a dead one may leave is in its
       cgroups (whichever launcher this korch uses: a no-op without root). */
    int removed = korch_sandbox_sweep(mine, korch_instance_alive, korch_instance_forget);
    if (removed > 0)
        korch_notice("removed %d sandbox cgroup(s) left by korch instances that are gone", removed);
    /* What outlives a korch (containers, services) is the backend's to
       list and remove; a backend whose kernels die with korch has none. */
    const char *kind = korch_launcher_kind(l);
    if (!kind || korch_runtime_base(base, sizeof base, &err) != KORCH_OK)
        return;
    if (korch_runtime_scope(base, scope, sizeof scope, &err) != KORCH_OK) {
        korch_warn("not sweeping %s: %s", kind, err.msg);
        return;
    }
    json_t *all = korch_launcher_list(l, NULL, &err);
    if (!all) {
        korch_warn("cannot list %s: %s", kind, err.msg);
        return;
    }
    json_t *done = json_object(), *legacy = json_object();
    size_t i, blen = strlen(base);
    json_t *c;
    json_array_foreach(all, i, c) {
        const char *inst = json_string_value(json_object_get(c, "instance"));
        const char *rdir = json_string_value(json_object_get(c, "runtime_dir"));
        const char *sc = json_string_value(json_object_get(c, "scope"));
        /* Only instances that live in our runtime base can be judged by its
           locks; "default" (library users without an instance) never. */
        if (!inst || !rdir || strcmp(inst, mine) == 0 || strcmp(inst, "default") == 0 ||
            strncmp(rdir, base, blen) != 0 || rdir[blen] != '/' || strchr(rdir + blen + 1, '/') ||
            json_object_get(done, inst) || korch_instance_alive(inst))
            continue;
        if (!sc || !*sc) {
            json_object_set_new(legacy, inst, json_integer(json_integer_value(json_object_get(legacy, inst)) + 1));
            continue;
        }
        if (strcmp(sc, scope) != 0) {
            korch_debug("sweep: %s of korch instance '%s' is of scope '%.40s', not ours ('%s'): left alone", kind,
                        inst, sc, scope);
            continue; /* another korch's lock domain: its own sweep judges it */
        }
        json_object_set_new(done, inst, json_true());
        int64_t t0 = korch_now_ms();
        int n = korch_launcher_remove_all(l, inst, &err);
        if (n > 0)
            korch_notice("removed %d %s left by korch instance '%s', which is gone (%lld ms)", n, kind, inst,
                         (long long)(korch_now_ms() - t0));
        korch_instance_forget(inst);
    }
    const char *inst;
    json_t *count;
    json_object_foreach(legacy, inst, count) {
        korch_backend_scope_notice(kind, inst, scope, 0, (int)json_integer_value(count));
    }
    json_decref(legacy);
    json_decref(done);
    json_decref(all);
}
