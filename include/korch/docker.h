/*  The Docker launcher: each kernel in its own hardened container.
 *
 *  Transport is ipc: the kernel's runtime_dir is bind-mounted into the
 *  container (at runtime_mount, default /run/korch) and the kernel creates its
 *  zmq sockets there, so the container needs no network at all. start()
 *  writes runtime_dir/kernel.json with ip rewritten to the in-container path.
 *
 *  The kernelspec's argv is the container's command, with {connection_file}
 *  replaced by the in-container path and argv[0] reduced to its basename
 *  ("/usr/bin/python3" -> "python3", found on the image's PATH). The image
 *  comes from opts.image, else the kernelspec's metadata.korch.image, else
 *  "korch-kernel-<spec name>:latest" (scripts/build-image.sh builds it).
 *
 *  Permissions: the kernel runs as opts.user. When that is not korch's own
 *  uid, korch must be root and chowns runtime_dir (still 0700) and the
 *  connection file to it for the life of the container; see docker.c.
 *
 *  The work dir (opts.workdir_mount) is a host dir when opts.workdir names
 *  one, else a tmpfs of opts.workdir_size bytes, made as an anonymous volume
 *  of the local driver (type tmpfs) so that it goes with the container and
 *  the engine's archive endpoints reach it. put_file / get_file use those
 *  endpoints (a tar korch writes and reads itself), whatever the work dir is
 *  and wherever the engine runs; symlinks on the way are refused.
 *
 *  Disk: a kernel cannot fill the host's disk through korch. runtime_dir
 *  becomes a small tmpfs (opts.runtime_size, 1 MiB: sockets and the
 *  connection file) that korch mounts on the host before the container
 *  starts. A work dir korch made for the kernel (workdir_give: a session's
 *  files/) is covered for the life of the container by a tmpfs of
 *  opts.workdir_size bytes holding a copy of it; when the container goes,
 *  what the kernel left there (regular files and directories, at most
 *  workdir_size bytes, never through a link) is copied back into the dir
 *  underneath and the tmpfs unmounted. Both need root (CAP_SYS_ADMIN);
 *  without it korch says so once and mounts the dirs as they are. A user's
 *  own directory (workdir without workdir_give) is never mounted over: it is
 *  bounded by its filesystem only. The kernel sees ENOSPC when full.
 *
 *  Re-adoption: adopt(kernel_id) finds the running container labelled
 *  korch.kernel_id=ID and korch.instance=opts.instance, checks that it
 *  bind-mounts its korch.runtime_dir label, and reads the connection file
 *  there; korch connects through the host path of the same sockets. The
 *  proc behaves as a started one (wait connection, signals, removal).
 *
 *  Asynchronous (launcher.h): every op is Engine API requests on the
 *  launcher's loop (docker_api.h's libcurl multi handle): start is POST
 *  /containers/create, (once per korch: a HEAD that tells whether the engine
 *  sees korch's tmpfs mounts), POST /start; the end is a held POST
 *  /containers/{id}/wait (no timeout), then an inspect (OOMKilled, the exit
 *  code) and the last 50 log lines, then korch_proc_on_exit's fn; signal and
 *  kill are POST /kill; put_file / get_file a HEAD per parent directory and
 *  the archive, streamed; korch_proc_destroy hands DELETE ?force=1&v=1 to the
 *  launcher (finished at korch_launcher_destroy if still pending). A
 *  restart whose previous container still holds the name korch-{kernel id}
 *  removes it (or waits for its removal) first; adopt is a list by label
 *  and an inspect. What is still blocking: korch_launcher_list and
 *  korch_launcher_remove_all (launcher.h: the CLI's start-up sweep, before
 *  any loop runs) and the constructor's ping (likewise: refused from a
 *  handler). Host work (mounting the bounded tmpfs, copying a given work
 *  dir in and out, chown, unmounting) runs on the launcher's worker thread
 *  in order (backend.h korch_backend_host), never on the loop.
 *
 *  A launcher and its procs share one API client: use them from the thread
 *  of their loop.
 */
#ifndef KORCH_DOCKER_H
#define KORCH_DOCKER_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include "korch/error.h"
#include "korch/launcher.h"

/* Every knob of a kernel container. korch_docker_opts_init fills the hardened
   defaults; strings are borrowed (the launcher copies them). A limit <= 0
   means "no limit" (the engine default). */
typedef struct {
    const char *host;           /* engine: NULL = $DOCKER_HOST, else unix:///var/run/docker.sock */
    const char *image;          /* NULL = metadata.korch.image, else korch-kernel-<spec>:latest */
    const char *instance;       /* this korch's id, label korch.instance; NULL = "default" */
    const char *user;           /* "uid:gid"; NULL = "1000:1000" when korch is root, else korch's uid:gid */
    const char *workdir;        /* host dir mounted read-write as the kernel's cwd (must be writable
                                   by the kernel's uid); NULL = a tmpfs */
    bool workdir_from_cwd;      /* mount the request's cwd when workdir is NULL (default false) */
    bool workdir_give;          /* chown the host work dir (and its contents) to the kernel's uid:
                                   for dirs korch made for the kernel, e.g. a session's files/ */
    const char *workdir_mount;  /* the cwd inside: "/home/korch/work" */
    const char *runtime_mount;  /* where runtime_dir appears: "/run/korch" */
    const char *network;        /* NetworkMode: "none" */
    const char *runtime;        /* OCI runtime, e.g. "runsc"; NULL = the engine's default (runc) */
    int64_t memory;             /* bytes, also MemorySwap (no swap): 1 GiB */
    int64_t nano_cpus;          /* 1e9 per CPU: 1 CPU */
    int64_t pids_limit;         /* 256 */
    int64_t nofile;             /* RLIMIT_NOFILE soft = hard: 4096 */
    int64_t tmp_size;           /* /tmp tmpfs bytes: 256 MiB (counts against memory) */
    int64_t workdir_size;       /* work dir tmpfs bytes (the volume, or over a given host dir): 512 MiB */
    int64_t runtime_size;       /* runtime_dir tmpfs bytes: 1 MiB; 0 = not bounded */
    bool readonly_rootfs;       /* true */
    bool cap_drop_all;          /* true: CapDrop ALL */
    bool no_new_privileges;     /* true: SecurityOpt no-new-privileges */
    bool init;                  /* true: docker-init as PID 1 forwards signals and reaps zombies */
    bool use_wait_fd;           /* ignored (the end is always seen through an asynchronous POST /wait) */
    long api_timeout_ms;        /* per Engine API call: 30000 */
} korch_docker_opts_t;

/* The hardened defaults above. */
void korch_docker_opts_init(korch_docker_opts_t *opts);

/* A Docker launcher on loop (opts NULL = defaults). Pings the engine
   (blocking, once), so a stopped dockerd is reported here: NULL + err
   ("cannot reach docker at ..."). */
korch_launcher_t *korch_launcher_docker_new(korch_loop_t *loop, const korch_docker_opts_t *opts, korch_err_t *err);

#endif
