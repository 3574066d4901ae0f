/*  The swarm launcher's parts (src/launcher/swarm/): private to them.
 *
 *  One launcher (swarm_launcher_t) and its procs (swarm_proc_t) share one
 *  Engine API client to the manager: everything here runs on the
 *  launcher's loop thread, but for the blocking calls of list.c and the
 *  constructor (a command's set-up, before the loop runs).
 */
#ifndef KORCH_LAUNCHER_SWARM_INT_H
#define KORCH_LAUNCHER_SWARM_INT_H

#include "korch/swarm.h"
#include "korch/docker_api.h"
#include "korch/env.h"
#include "korch/instance.h"
#include "korch/log.h"
#include "korch/loop.h"
#include "korch/media.h"
#include "korch/msg.h"
#include "korch/session.h"
#include "../backend.h"
#include "../spawn.h"
#include "../kuid.h"

#include <czmq.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define SW_GIB (1024LL * 1024 * 1024)
#define SW_MIB (1024LL * 1024)
#define SW_CONN_FILE "kernel.json"
#define SW_CONN_IN "/tmp/kernel.json"
#define SW_SECRET_AT "/run/secrets/kernel.json"
#define SW_TAIL_MAX 4096
#define SW_PORT0 50001             /* the kernel's five ports: each task has its own address */
#define SW_FILE_MAX (16u << 20)    /* files through the kernel: base64 in one message */

typedef enum {
    ST_SECRET,      /* POST /secrets/create in flight */
    ST_SERVICE,     /* POST /services/create (or the adopt's GET) in flight */
    ST_SCHEDULE,    /* waiting for the task to run with an address */
    ST_RUNNING,
    ST_ENDING,      /* the end seen: its log lines on the way */
    ST_DEAD,
} sw_state_t;

typedef struct swarm_launcher swarm_launcher_t;
typedef struct swarm_proc swarm_proc_t;
typedef struct sw_fileq sw_fileq_t;

struct swarm_launcher {
    korch_launcher_t base;
    korch_docker_t *api;
    korch_swarm_opts_t o;
    char *strs[8];
    char network_id[80];
    uid_t uid;                  /* opts.user's, or korch's own when not root */
    gid_t gid;
    bool dynamic;               /* a kernel uid per kernel (kuid.h) instead */
    swarm_proc_t *procs;        /* procs being started or running, for the poll */
    int timer;                  /* the poll */
    korch_op_t *poll_call;      /* GET /nodes or GET /tasks in flight */
    json_t *nodes;              /* the last GET /nodes */
    char tasks_path[512];
    char scope[KORCH_SCOPE_LEN]; /* korch_runtime_scope: the korch.scope label of what it makes */
};

struct swarm_proc {
    korch_proc_t base;          /* conn (as korch connects: the task's address), runtime_dir */
    swarm_launcher_t *l;
    swarm_proc_t *next;         /* in l->procs */
    sw_state_t st;
    bool linked;
    bool adopting;
    bool given;                 /* the caller has it (its start finished) */
    char kernel_id[80];
    korch_kuid_t *kuid;         /* its claim on the kernel uid (dynamic), released with the proc */
    uid_t uid;                  /* what the kernel runs as */
    gid_t gid;
    char name[80];              /* service and secret name */
    char service[80];           /* ids */
    char secret[80];
    char node[80];              /* the task's node id */
    char conn_file[PATH_MAX];   /* korch's copy of the connection file */
    bool python;                /* files can go through the kernel */
    int64_t sched_began;
    korch_rc_t fail_rc;         /* why a start ends (ST_ENDING before running) */
    korch_op_t *call;           /* the proc's own Engine API call in flight */
    korch_op_t *start_op;       /* the start or adopt */
    json_t *spec;               /* the service's, while its secret is made */
    char why[512]; /* room for every message below at its %.Ns bounds */
    /* the launcher's own socket to the kernel (files; kernelio.c) */
    korch_session_t *session;
    zsock_t *shell;
    korch_op_t *file_op;        /* one file operation at a time in the kernel */
    sw_fileq_t *fileq;           /* the ones waiting for it, oldest first */
    bool file_get;
    size_t file_max;
    char file_msg_id[64];
    int file_timer;
    char tail[SW_TAIL_MAX + 1];
};

/* helpers.c: names, filters, the manager's answers */
bool sw_valid_name(const char *s);
bool sw_filter_path(swarm_launcher_t *l, const char *what, const char *key, const char *value, char *buf, size_t len);
const char *sw_str(json_t *j, const char *a, const char *b);
bool sw_task_addr(swarm_launcher_t *l, json_t *t, char *buf, size_t len);
void sw_node_name(swarm_launcher_t *l, const char *id, char *buf, size_t len);
const char *sw_node_state(swarm_launcher_t *l, const char *id);
json_t *sw_get_sync(swarm_launcher_t *l, const char *path, korch_err_t *err);

/* poll.c: the poll of nodes and tasks */
json_t *sw_task_of(json_t *tasks, const char *service);
void sw_poll_now(swarm_launcher_t *l);
int sw_on_poll_timer(korch_loop_t *loop, int id, void *arg);
void sw_proc_link(swarm_proc_t *p);
void sw_proc_unlink(swarm_proc_t *p);

/* end.c: a kernel's end and what it leaves on the manager */
void sw_describe(swarm_proc_t *p, json_t *t);
void sw_start_fail(swarm_proc_t *p, korch_rc_t rc);
void sw_dead(swarm_proc_t *p);
void sw_ended(swarm_proc_t *p, korch_rc_t rc);
void sw_reap(swarm_launcher_t *l, const char *service, const char *secret);
bool sw_delete_sync(swarm_launcher_t *l, const char *what, const char *id);

/* start.c: secret, service, task */
swarm_proc_t *sw_proc_new(swarm_launcher_t *l, const korch_launch_t *req, korch_op_t *op);
korch_rc_t sw_start(korch_launcher_t *self, const korch_launch_t *req, korch_op_t *op, korch_err_t *err);

/* kernelio.c: the launcher's own socket to the kernel (files) */
/* Its sockets, session, timer and waiting file ops (theirs were cancelled). */
void sw_kernelio_release(swarm_proc_t *p);
korch_rc_t sw_file_op(swarm_proc_t *p, const char *name, bool get, const void *data, size_t len, size_t max,
                      korch_op_t *op, korch_err_t *err);

/* proc.c: the proc ops and adopt */
korch_rc_t sw_kill(korch_proc_t *proc, korch_op_t *op, korch_err_t *err);
korch_rc_t sw_signal(korch_proc_t *proc, int sig, korch_op_t *op, korch_err_t *err);
korch_rc_t sw_put_file(korch_proc_t *proc, const char *name, const void *data, size_t len, korch_op_t *op,
                       korch_err_t *err);
korch_rc_t sw_get_file(korch_proc_t *proc, const char *name, size_t max, korch_op_t *op, korch_err_t *err);
void sw_proc_release(swarm_proc_t *p);
void sw_adopt_uid(swarm_proc_t *p, const char *user);
const char *sw_log_tail(korch_proc_t *proc);
void sw_proc_free(korch_proc_t *proc);
korch_rc_t sw_adopt(korch_launcher_t *self, const char *kernel_id, korch_op_t *op, korch_err_t *err);

/* list.c: this instance's services (blocking: start-up only) */
/* korch_launcher_list / korch_launcher_remove_all (launcher.h): services
   labelled korch.instance=instance (NULL = every korch service) as {"id",
   "name", "kernel_id", "instance", "kernelspec", "runtime_dir", "secret",
   "scope", "state" (its task's), "node"}; removal with its secret, and
   every secret of that instance and scope no service uses. */
json_t *sw_list(korch_launcher_t *self, const char *instance, korch_err_t *err);
int sw_remove_all(korch_launcher_t *self, const char *instance, korch_err_t *err);
json_t *sw_list_mine(korch_launcher_t *self, korch_err_t *err);
korch_rc_t sw_remove_mine(korch_launcher_t *self, const char *id, korch_err_t *err);

#endif
