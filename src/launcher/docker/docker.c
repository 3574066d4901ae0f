/*  The Docker launcher: one hardened container per kernel, created and
 *  watched through the Engine API (docker_api.c); no docker CLI. This file:
 *  its ops table and constructor; the parts by concern beside it (create.c,
 *  start.c, hostdirs.c, end.c, adopt.c, list.c, files.c), and what it
 *  shares with swarm in src/launcher (container.c, ctfiles.c, cttar.c).
 *
 *  Why these choices:
 *  - ipc over a bind mount, NetworkMode none: the kernel binds its five zmq
 *    sockets as files in runtime_dir, which korch connects to from the host.
 *    No ports to allocate, nothing listening on any network.
 *  - runtime_dir stays 0700 and is chowned to the kernel's uid (when that is
 *    not korch's own) rather than made 0777: a world-writable dir would let
 *    any local user plant or replace socket files next to the kernel's. root
 *    korch still reaches the sockets (it bypasses file permissions); the
 *    owner is given back in proc_free.
 *  - Init: docker-init (tini) is PID 1. `POST /kill?signal=SIGINT` reaches
 *    PID 1, which forwards it to its child, the kernel, whose handler turns
 *    it into KeyboardInterrupt. Without it the kernel would be PID 1, and
 *    zombies of the shell commands a notebook runs would never be reaped.
 *  - exit_fd: a second connection holds POST /containers/{id}/wait. The
 *    engine sends the status line and headers at once (API >= 1.30) and the
 *    body only when the container stops, so once the headers are consumed
 *    the socket becomes readable exactly when the kernel ends.
 *  - OOM: the engine records State.OOMKilled when the memory cgroup's OOM
 *    killer fired in the container; is_alive reports it with the limit.
 */
#include "docker_int.h"
#include "korch/cgroup.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void korch_docker_opts_init(korch_docker_opts_t *o)
{
    memset(o, 0, sizeof *o);
    o->workdir_mount = "/home/korch/work";
    o->runtime_mount = "/run/korch";
    o->network = "none";
    o->memory = DK_GIB;
    o->nano_cpus = 1000000000LL;
    o->pids_limit = 256;
    o->nofile = 4096;
    o->tmp_size = 256 * DK_MIB;
    o->workdir_size = 512 * DK_MIB;
    o->runtime_size = DK_MIB;
    o->readonly_rootfs = true;
    o->cap_drop_all = true;
    o->no_new_privileges = true;
    o->init = true;
    o->use_wait_fd = true;
    o->api_timeout_ms = 30000;
}

static void s_free(korch_launcher_t *self)
{
    docker_launcher_t *l = (docker_launcher_t *)self;
    korch_docker_destroy(&l->api);
    for (size_t i = 0; i < sizeof l->strs / sizeof l->strs[0]; i++)
        free(l->strs[i]);
    free(l);
}

/* The container's cgroup on this host (an engine elsewhere: not found, unknown). */
static bool s_usage_src(korch_proc_t *proc, korch_usage_src_t *src)
{
    docker_proc_t *p = (docker_proc_t *)proc;
    return !p->dead && p->id[0] && korch_cgroup_of_container("/sys/fs/cgroup", p->id, src);
}

static const korch_launcher_ops_t s_ops = {
    .name = "docker",
    .caps = KORCH_LAUNCHER_CONFINED | KORCH_LAUNCHER_ADOPTS | KORCH_LAUNCHER_PACKAGES,
    .transport = "ipc",
    .start = dk_start,
    .signal = dk_signal,
    .kill = dk_kill,
    .log_tail = dk_log_tail,
    .usage_src = s_usage_src,
    .proc_free = dk_proc_free,
    .free = s_free,
    .adopt = dk_adopt,
    .list_mine = dk_list_mine,
    .remove_mine = dk_remove_mine,
    .list = dk_list,
    .remove_all = dk_remove_all,
    .kind = "container(s)",
    .proc_id = dk_proc_id,
    .put_file = dk_put_file,
    .get_file = dk_get_file,
    .put_file_now = dk_put_file_now,
    .get_file_now = dk_get_file_now,
};

/* Blocking: the engine's /_ping (and korch_launcher_choose's image
   inspect after it). Every caller is a command's set-up, before its loop
   runs (korch_launcher_choose from src/cli); the server never makes a
   launcher while it serves. A handler that tried would hold the loop for
   up to the API timeout: refused. */
korch_launcher_t *korch_launcher_docker_new(korch_loop_t *loop, const korch_docker_opts_t *opts, korch_err_t *err)
{
    if (loop && korch_loop_running(loop)) {
        korch_err_set(err, KORCH_E_STATE, "the docker launcher is made before the loop runs (its constructor "
                                          "blocks on the engine), not from a handler");
        return NULL;
    }
    docker_launcher_t *l = calloc(1, sizeof *l);
    if (!l) {
        korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        return NULL;
    }
    korch_backend_launcher_init(&l->base, &s_ops, loop);
    l->engine_sees = -1;
    if (opts)
        l->o = *opts;
    else
        korch_docker_opts_init(&l->o);
    korch_docker_opts_t d;
    korch_docker_opts_init(&d);
    if (!l->o.workdir_mount)
        l->o.workdir_mount = d.workdir_mount;
    if (!l->o.runtime_mount)
        l->o.runtime_mount = d.runtime_mount;
    const char **fields[] = {&l->o.host,          &l->o.image,         &l->o.instance,
                             &l->o.user,          &l->o.workdir,       &l->o.workdir_mount,
                             &l->o.runtime_mount, &l->o.network,       &l->o.runtime};
    bool ok = true;
    for (size_t i = 0; ok && i < sizeof fields / sizeof fields[0]; i++)
        ok = korch_own_str(&l->strs[i], fields[i]);
    if (!ok) {
        korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        goto fail;
    }
    if (l->o.runtime_mount[0] != '/' || l->o.workdir_mount[0] != '/') {
        korch_err_set(err, KORCH_E_INVALID, "docker mount points must be absolute ('%s', '%s')", l->o.runtime_mount,
                      l->o.workdir_mount);
        goto fail;
    }
    if (l->o.workdir || l->o.workdir_from_cwd)
        l->base.caps |= KORCH_LAUNCHER_HOST_FILES;
    if (!l->o.network || strcmp(l->o.network, "none") == 0)
        l->base.caps |= KORCH_LAUNCHER_OFFLINE;
    if (korch_runtime_scope(NULL, l->scope, sizeof l->scope, err) != KORCH_OK)
        goto fail;
    l->api = korch_docker_new(loop, l->o.host, err);
    if (!l->api)
        goto fail;
    korch_docker_set_timeout_ms(l->api, l->o.api_timeout_ms);
    if (korch_docker_ping(l->api, err))
        goto fail;
    return &l->base;
fail:
    s_free(&l->base);
    return NULL;
}
