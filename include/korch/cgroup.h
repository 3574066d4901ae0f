/*  A cgroup per kernel: memory, pids and CPU limits, and a way to find and
 *  kill everything a kernel started, wherever it went.
 *
 *  Where: korch/{scope}/{instance}/{name}. cgroups are machine-wide, but
 *  whether a korch instance is alive is known only from the locks in its
 *  runtime base (instance.h): two korchs with different KORCH_RUNTIME_DIRs
 *  cannot judge each other's instances. The scope names the runtime base
 *  (korch_cgroup_scope = korch_runtime_scope), so a sweep only ever acts on instances whose locks
 *  it can read. All names come from korch, never from a kernel.
 *
 *  Both layouts are supported:
 *  - v2 (unified, /sys/fs/cgroup/cgroup.controllers exists): one directory
 *    {mount}/korch/{scope}/{instance}/{name} with memory.max (memory.swap.max 0),
 *    pids.max, cpu.max; the OOM killer is read from memory.events oom_kill.
 *  - v1 (a mount per controller, /sys/fs/cgroup/{memory,pids,cpu}): the
 *    same path under each controller, below the cgroup korch itself is in
 *    (so the limits of whoever runs korch still apply), with
 *    memory.limit_in_bytes (+ memory.memsw.limit_in_bytes: no swap),
 *    pids.max, cpu.cfs_quota_us; OOM from memory.oom_control oom_kill
 *    (memory.failcnt where the kernel lacks that line).
 *
 *  A process joins by writing its pid to the cgroup.procs files whose fds
 *  korch_cgroup_procs_fds gives (the spawn helper does it in the child
 *  before exec, so nothing the kernel forks escapes). Creating cgroups
 *  needs root (or a delegated v2 subtree, not supported yet).
 *
 *  Not thread-safe per object; distinct objects may be used from distinct
 *  threads.
 */
#ifndef KORCH_CGROUP_H
#define KORCH_CGROUP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "korch/error.h"
#include "korch/launcher.h"

typedef struct korch_cgroup korch_cgroup_t;

/* A limit <= 0 means none. */
typedef struct {
    int64_t memory;     /* bytes, swap not allowed */
    int64_t nano_cpus;  /* 1e9 per CPU */
    int64_t pids;       /* tasks (threads count) */
} korch_cgroup_limits_t;

/* The cgroup version korch can use here: 2, 1, or 0 with the reason in why. */
int korch_cgroup_available(char *why, size_t whylen);

/* The scope of a runtime base: korch_runtime_scope's ("rt-" and 16 hex
   digits, kept in the base), the same one the korch.scope labels carry.
   cgroups are machine-local, so the base's own id is enough here too.
   buf holds at least 20 bytes. Fails when the dir cannot be used. */
korch_rc_t korch_cgroup_scope(const char *runtime_base, char *buf, size_t len, korch_err_t *err);

/* Create korch/{scope}/{instance}/{name} (instance and name: letters,
   digits, - _ . only; scope from korch_cgroup_scope) with the limits.
   Fails when a limit cannot be applied. */
korch_cgroup_t *korch_cgroup_new(const char *scope, const char *instance, const char *name,
                                 const korch_cgroup_limits_t *lim, korch_err_t *err);

/* Open cgroup.procs files, -1-terminated (borrowed): for korch_spawn_t.cgroup_fds. */
const int *korch_cgroup_procs_fds(const korch_cgroup_t *cg);

/* 1 or 2. */
int korch_cgroup_version(const korch_cgroup_t *cg);

/* Has the OOM killer killed a process in this cgroup? */
bool korch_cgroup_oom_killed(const korch_cgroup_t *cg);

/* What its processes used: CPU time so far (v2: cpu.stat usage_usec; v1:
   cpuacct.usage where cpuacct shares the cpu hierarchy, else the utime +
   stime of the processes in it now, from /proc) and the peak of memory
   (v1: memory.max_usage_in_bytes since the last korch_cgroup_peak_reset;
   v2: memory.peak, since the cgroup was made). -1 each when unknown. */
void korch_cgroup_usage(const korch_cgroup_t *cg, int64_t *cpu_ns, int64_t *mem_peak);

/* Start a new memory peak (v1); false where it cannot be reset (v2). */
bool korch_cgroup_peak_reset(korch_cgroup_t *cg);
/* Where cg's counters are (korch_proc_usage_src's, for any thread). */
bool korch_cgroup_usage_src(const korch_cgroup_t *cg, korch_usage_src_t *src);

/* A container's cgroup (a docker container with that full id), on this
   host's cgroupfs mounted at root ("/sys/fs/cgroup"): v2 when root is a
   cgroup2 mount (root/cgroup.controllers), else v1's memory and cpuacct
   hierarchies (cpuacct alone, or cpu,cpuacct). Both drivers' layouts:
   cgroupfs (docker/ID) and systemd (system.slice/docker-ID.scope). False
   when none holds it (an engine on another host, another cgroup parent). */
bool korch_cgroup_of_container(const char *root, const char *id, korch_usage_src_t *src);

/* How many processes are in it now (-1 when it cannot be read). */
int korch_cgroup_count(const korch_cgroup_t *cg);

/* SIGKILL everything in it until it is empty (at most about 2 s); true when empty.
   Blocking: not on a loop. */
bool korch_cgroup_kill(korch_cgroup_t *cg);

/* SIGKILL everything in it once, without waiting; true when it is empty
   already (processes being killed leave it a moment later: call it again).
   NULL is empty. */
bool korch_cgroup_kill_now(korch_cgroup_t *cg);

/* Kill what is left, remove the cgroup (and the instance's and scope's,
   once empty). Blocks (korch_cgroup_kill) unless it is empty already. */
void korch_cgroup_destroy(korch_cgroup_t **cg);

/* Kill and remove the cgroups of korch instances of scope that are gone:
   every korch/{scope}/{instance} except mine and "default" for which
   alive(instance) (a lock in that scope's runtime base) is false;
   gone(instance) (may be NULL) is told of each. Other scopes are never
   touched. The layout before scopes, korch/{instance}/{name}: its owner's
   runtime base is unknown, so nothing there is killed; kernel cgroups
   empty for a minute are removed, one with processes is left with a
   notice. Returns
   how many kernel cgroups of scope were removed. */
int korch_cgroup_sweep(const char *scope, const char *mine, bool (*alive)(const char *instance),
                       void (*gone)(const char *instance));

#endif
