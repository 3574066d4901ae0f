/*  Test fixture: the 3-node test swarm of scripts/swarm-up.sh, as the swarm
 *  tests (test_swarm_*.c) use it: run a script,
 *  read /run/korch-swarm/env, Engine API calls to the manager or a node
 *  through korch_docker_request, and the check that swarm-down.sh left
 *  nothing of ours on the machine. Header-only, like serve_fixture.h.
 *
 *  One cluster per machine: the runner (tests/runner.c) holds
 *  `flock /tmp/korch-swarm.lock` for the whole of a run that selects a
 *  swarm test (a run already under flock(1) keeps the lock it inherited).
 *  Anything else that uses the cluster takes the same lock. */
#ifndef KORCH_SWARM_FIXTURE_H
#define KORCH_SWARM_FIXTURE_H

#include "test.h"

#include "korch/docker_api.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define S_NODES 3
#define S_RUN "/run/korch-swarm"
#define S_STOPPED_NODE 3 /* whose engine a test stops */

static inline double s_mono_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* Run a script of ours; its exit status (stderr shown on failure). */
static inline int s_script(const char *name, const char *arg, int timeout_s)
{
    char path[512];
    snprintf(path, sizeof path, "%s/scripts/%s", korch_test_root(), name);
    const char *argv[] = {path, arg, NULL};
    char *out = NULL, *err = NULL;
    int st = korch_test_run(argv, NULL, &out, &err, timeout_s);
    if (st != 0)
        fprintf(stderr, "%s %s: status %d\n%s%s", name, arg ? arg : "", st, out ? out : "", err ? err : "");
    free(out);
    free(err);
    return st;
}

/* The value of "export NAME=VALUE" in the env file, into buf. */
static inline bool s_env(const char *name, char *buf, size_t len)
{
    FILE *f = fopen(S_RUN "/env", "r");
    char line[512];
    size_t nl = strlen(name);
    bool found = false;
    while (f && !found && fgets(line, sizeof line, f)) {
        if (strncmp(line, "export ", 7) || strncmp(line + 7, name, nl) || line[7 + nl] != '=')
            continue;
        /* a value longer than buf is not cut short silently */
        size_t vl = strcspn(line + 8 + nl, "\n");
        if (vl >= len)
            break;
        memcpy(buf, line + 8 + nl, vl);
        buf[vl] = 0;
        found = true;
    }
    if (f)
        fclose(f);
    return found;
}

/* One Engine API call; the reply's JSON (new reference) when the status is
   want, else NULL with the engine's message on stderr. */
static inline json_t *s_api(korch_docker_t *d, const char *method, const char *path, json_t *body, long want)
{
    korch_err_t err = {0};
    korch_docker_reply_t r;
    json_t *j = NULL;
    if (korch_docker_request(d, method, path, body, &r, &err) != KORCH_OK) {
        fprintf(stderr, "%s %s: %s\n", method, path, err.msg);
        return NULL;
    }
    if (r.status == want)
        j = r.json ? json_incref(r.json) : json_true();
    else
        fprintf(stderr, "%s %s: HTTP %ld: %s\n", method, path, r.status, korch_docker_reply_message(&r));
    korch_docker_reply_clear(&r);
    return j;
}

/* GET path?filters={"key":[value]} as a new array (NULL on failure). */
static inline json_t *s_list(korch_docker_t *d, const char *what, const char *key, const char *value)
{
    json_t *f = json_pack("{s:[s]}", key, value);
    char *fs = f ? json_dumps(f, JSON_COMPACT) : NULL;
    char *esc = fs ? korch_docker_escape(d, fs) : NULL;
    char path[1024];
    json_t *j = NULL;
    if (esc) {
        snprintf(path, sizeof path, "/%s?filters=%s", what, esc);
        j = s_api(d, "GET", path, NULL, 200);
    }
    free(esc);
    free(fs);
    json_decref(f);
    if (j && !json_is_array(j)) {
        json_decref(j);
        j = NULL;
    }
    return j;
}

/* The one task of a service (new reference), NULL while there is none. */
static inline json_t *s_task(korch_docker_t *d, const char *service)
{
    json_t *tasks = s_list(d, "tasks", "service", service);
    json_t *t = json_array_size(tasks) > 0 ? json_incref(json_array_get(tasks, 0)) : NULL;
    json_decref(tasks);
    return t;
}

static inline const char *s_task_state(json_t *t)
{
    const char *s = json_string_value(json_object_get(json_object_get(t, "Status"), "State"));
    return s ? s : "";
}

/* The korch.node label of a node id ("node2"), "" when unknown. */
static inline const char *s_node_label(json_t *nodes, const char *id)
{
    size_t i;
    json_t *n;
    json_array_foreach(nodes, i, n) {
        if (!strcmp(json_string_value(json_object_get(n, "ID")) ?: "", id ? id : "")) {
            const char *l = json_string_value(
                json_object_get(json_object_get(json_object_get(n, "Spec"), "Labels"), "korch.node"));
            return l ? l : "";
        }
    }
    return "";
}

/* DELETE until the engine agrees (a network is busy while tasks go). */
static inline bool s_delete(korch_docker_t *d, const char *what, const char *id, int timeout_ms)
{
    char path[600];
    if (snprintf(path, sizeof path, "/%s/%s", what, id) >= (int)sizeof path)
        return false;
    double end = s_mono_ms() + timeout_ms;
    for (;;) {
        korch_err_t err = {0};
        korch_docker_reply_t r;
        long st = 0;
        if (korch_docker_request(d, "DELETE", path, NULL, &r, &err) == KORCH_OK) {
            st = r.status;
            korch_docker_reply_clear(&r);
        }
        if (st == 200 || st == 204 || st == 404)
            return true;
        if (s_mono_ms() > end) {
            fprintf(stderr, "DELETE %s: HTTP %ld\n", path, st);
            return false;
        }
        usleep(200 * 1000);
    }
}

/* Containers on one node's engine (all states). -1 when it cannot be asked. */
static inline long s_containers(const char *host)
{
    korch_err_t err = {0};
    korch_docker_t *d = korch_docker_new(NULL, host, &err);
    json_t *j = d ? s_api(d, "GET", "/containers/json?all=1", NULL, 200) : NULL;
    long n = json_is_array(j) ? (long)json_array_size(j) : -1;
    json_decref(j);
    korch_docker_destroy(&d);
    return n;
}

/* Something of ours still on the machine: a description into buf, or false. */
static inline bool s_leftover(char *buf, size_t len)
{
    char *out = NULL;
    const char *ipt[] = {"iptables", "-S", NULL};
    const char *links[] = {"ip", "-o", "link", "show", NULL};
    bool found = false;
    DIR *dir = opendir("/run/netns");
    struct dirent *e;
    while (!found && dir && (e = readdir(dir)))
        if (!strncmp(e->d_name, "korch-node", 10)) {
            snprintf(buf, len, "network namespace %s", e->d_name);
            found = true;
        }
    if (dir)
        closedir(dir);
    if (!found && korch_test_run(links, NULL, &out, NULL, 10) == 0 && out &&
        (strstr(out, "korch-sw0") || strstr(out, "ksw-"))) {
        snprintf(buf, len, "a link korch-sw0 / ksw-*");
        found = true;
    }
    free(out);
    out = NULL;
    if (!found && korch_test_run(ipt, NULL, &out, NULL, 10) == 0 && out && strstr(out, "korch-swarm")) {
        snprintf(buf, len, "an iptables rule 'korch-swarm'");
        found = true;
    }
    free(out);
    if (!found && access(S_RUN, F_OK) == 0) {
        snprintf(buf, len, "%s", S_RUN);
        found = true;
    }
    for (int i = 1; !found && i <= S_NODES; i++) {
        char p[128];
        snprintf(p, sizeof p, "/var/lib/korch-swarm/node%d", i);
        if (access(p, F_OK) == 0) {
            snprintf(buf, len, "the data root %s", p);
            found = true;
        }
        snprintf(p, sizeof p, "/sys/fs/cgroup/pids/korch-swarm-node%d", i);
        if (!found && access(p, F_OK) == 0) {
            snprintf(buf, len, "the cgroup %s", p);
            found = true;
        }
    }
    /* A process of ours names /run/korch-swarm (dockerd's exec root,
       containerd's and the shims' sockets, the registry's config). */
    dir = opendir("/proc");
    while (!found && dir && (e = readdir(dir))) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        char p[300], cmd[4096];
        snprintf(p, sizeof p, "/proc/%s/cmdline", e->d_name);
        FILE *f = fopen(p, "r");
        size_t n = f ? fread(cmd, 1, sizeof cmd - 1, f) : 0;
        if (f)
            fclose(f);
        for (size_t i = 0; i < n; i++)
            if (!cmd[i])
                cmd[i] = ' ';
        cmd[n] = 0;
        if (strstr(cmd, S_RUN "/")) {
            snprintf(buf, len, "process %s: %.200s", e->d_name, cmd);
            found = true;
        }
    }
    if (dir)
        closedir(dir);
    FILE *m = fopen("/proc/self/mountinfo", "r");
    char line[1024];
    while (!found && m && fgets(line, sizeof line, m))
        if (strstr(line, " " S_RUN) || strstr(line, " /var/lib/korch-swarm/node")) {
            snprintf(buf, len, "a mount: %.300s", line);
            found = true;
        }
    if (m)
        fclose(m);
    return found;
}

/* The swarm tests share one cluster within a run of the suite, since
 *  bringing it up is most of their time (three engines pulling the 1.5 GB
 *  kernel image onto their tmpfs data roots): the first brings it up, each
 *  next one runs swarm-up.sh again (which keeps what works and restarts a
 *  node whose engine the previous test stopped), and the last one takes it
 *  down and checks that nothing of ours is left on the machine. A swarm test
 *  run alone, or one that failed, takes it down itself, so a failure never
 *  hands a broken cluster on. Every test still removes, and checks gone,
 *  what it made on the cluster. */
static const char *const s_cluster_users[] = {"swarm_cluster", "swarm_launcher", "swarm_files_listing", "swarm_stack",
                                              "swarm_kernel_uids", "swarm_packages_refused", NULL};

/* Whether the runner's next test (KORCH_TEST_NEXT) uses the cluster. */
static inline bool s_next_uses_cluster(void)
{
    const char *next = getenv("KORCH_TEST_NEXT");
    for (int i = 0; next && s_cluster_users[i]; i++)
        if (!strcmp(next, s_cluster_users[i]))
            return true;
    return false;
}

/* The end of a swarm test: the cluster kept for the next swarm test, or
   taken down (swarm-down.sh) with nothing of ours left on the machine. */
static inline void s_swarm_done(void)
{
    if (s_next_uses_cluster() && korch_test_failures() == 0) {
        fprintf(stderr, "swarm: kept up for %s (the last swarm test of the run takes it down)\n",
                getenv("KORCH_TEST_NEXT"));
        return;
    }
    double t0 = s_mono_ms();
    CHECK_EQ(s_script("swarm-down.sh", NULL, 600), 0);
    fprintf(stderr, "swarm: down %.1f s\n", (s_mono_ms() - t0) / 1e3);
    char what[512];
    if (!CHECK(!s_leftover(what, sizeof what)))
        fprintf(stderr, "left behind: %s\n", what);
}

#endif
