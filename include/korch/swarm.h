/*  The Docker Swarm launcher: each kernel a swarm service on a cluster's
 *  internal overlay network, driven through the manager's Engine API.
 *
 *  One kernel = one service (one replica, restart condition none: korch
 *  decides what happens when a kernel ends) with the connection file as a
 *  swarm secret (never in the environment or a label), placed by the
 *  scheduler across the nodes within the placement constraints (the
 *  launcher's, the kernelspec's metadata.korch.constraints and the
 *  request's KERNEL_PLACEMENT, all of which must hold), hardened as the
 *  docker launcher's containers. The kernel binds tcp on every address of
 *  its task (the overlay's is its only one); korch connects to the task's
 *  address, so korch must itself be on that network (a service of the same
 *  stack, see docker-compose.yml). Endpoint mode dnsrr: no virtual IP.
 *
 *  Every Engine API call goes to one engine, the manager ($DOCKER_HOST as
 *  docker_api.h reads it: unix socket, or tcp with TLS), asynchronously on
 *  the loop. See src/launcher/swarm.c for what each operation does and why.
 */
#ifndef KORCH_SWARM_H
#define KORCH_SWARM_H

#include <stdbool.h>
#include <stdint.h>
#include "korch/error.h"
#include "korch/launcher.h"

/* Every knob; korch_swarm_opts_init fills the defaults. Strings are
   borrowed (the launcher copies them). A limit <= 0 means no limit. */
typedef struct {
    const char *host;           /* the manager: NULL = $DOCKER_HOST, else the default socket */
    const char *image;          /* NULL = metadata.korch.image, else korch-kernel-<spec>:latest
                                   (as the nodes pull it: a registry's name in a real cluster) */
    const char *instance;       /* this korch's id, label korch.instance; NULL = "default" */
    const char *network;        /* the kernels' overlay: "korch-kernels"; made (internal,
                                   attachable) when missing */
    bool encrypted;             /* a network korch makes is encrypted (IPsec): true.
                                   $KORCH_SWARM_ENCRYPTED=0 turns it off (see the README:
                                   it needs the kernel's ESP and GCM support on every node) */
    const char *constraints;    /* the deployer's placement constraints, comma-separated
                                   ("node.labels.kernels==yes,node.role==worker"); NULL = none */
    const char *user;           /* "uid:gid" every kernel runs as; NULL = a kernel uid of
                                   KORCH_KERNEL_UIDS per kernel when korch is root (no
                                   account of korch's host has it), korch's own uid else */
    int64_t memory;             /* bytes: 1 GiB */
    int64_t nano_cpus;          /* 1e9 per CPU: 1 CPU */
    int64_t pids_limit;         /* 256 */
    int64_t nofile;             /* RLIMIT_NOFILE: 4096 */
    int64_t tmp_size;           /* /tmp bytes: 256 MiB */
    int64_t workdir_size;       /* the work dir's bytes: 512 MiB (one tmpfs holds /tmp and the work
                                   dir, tmp_size + workdir_size: see swarm.c) */
    const char *workdir_mount;  /* the kernel's cwd, made at start: "/tmp/work" (under /tmp) */
    int poll_ms;                /* how often tasks and nodes are read: 500 */
    int schedule_timeout_ms;    /* a task not running by then fails the start: 120000 */
    int stop_grace_ms;          /* SIGTERM to SIGKILL when a service goes: 2000 */
    long api_timeout_ms;        /* per Engine API call: 30000 */
} korch_swarm_opts_t;

/* The defaults above, with $KORCH_SWARM_NETWORK, $KORCH_SWARM_ENCRYPTED and
   $KORCH_SWARM_CONSTRAINTS read when set. */
void korch_swarm_opts_init(korch_swarm_opts_t *opts);

/* A swarm launcher on loop (opts NULL = defaults). Blocks for a few Engine
   API calls (it runs before the loop serves): the engine must be a swarm
   manager, and the network is found or made. NULL + err otherwise, saying
   what to do ("cannot reach docker at ...", "... is not a swarm manager"). */
korch_launcher_t *korch_launcher_swarm_new(korch_loop_t *loop, const korch_swarm_opts_t *opts, korch_err_t *err);

#endif
