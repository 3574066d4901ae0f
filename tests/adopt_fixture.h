/*  Test fixture of the re-adoption tests (test_server_adopt.c,
 *  test_server_adopt_agent.c): the engine's containers by label, a container
 *  that looks like a kernel of an instance (korch serve's log: serve_log_has).
 *  Header-only: include it from one test file each. */
#ifndef KORCH_ADOPT_FIXTURE_H
#define KORCH_ADOPT_FIXTURE_H

#include "test.h"
#include "serve_fixture.h"

#include "korch/docker_api.h"
#include "korch/fsutil.h"
#include "korch/instance.h"
#include "korch/uuid.h"
#include "korch/docker.h"
#include "korch/kernel.h"

#include <curl/curl.h>
#include <jansson.h>
#include <limits.h>
#include <sys/stat.h>

#define IMAGE "korch-kernel-python3:latest"

/* ---------------------------------------------------------- engine */

/* Containers with one label ("k=v"), running or not, as a new array. */
static inline json_t *s_containers(korch_docker_t *d, const char *label)
{
    json_t *f = json_pack("{s:[s]}", "label", label);
    char *fs = f ? json_dumps(f, JSON_COMPACT) : NULL;
    char *esc = fs ? korch_docker_escape(d, fs) : NULL;
    char path[1024];
    snprintf(path, sizeof path, "/containers/json?all=1&filters=%s", esc ? esc : "");
    korch_docker_reply_t r = {0};
    json_t *out = NULL;
    if (korch_docker_request(d, "GET", path, NULL, &r, NULL) == KORCH_OK && r.status == 200)
        out = json_incref(r.json);
    korch_docker_reply_clear(&r);
    json_decref(f);
    free(fs);
    free(esc);
    return out ? out : json_array();
}

static inline size_t s_count(korch_docker_t *d, const char *key, const char *value)
{
    char label[256];
    snprintf(label, sizeof label, "%s=%s", key, value);
    json_t *a = s_containers(d, label);
    size_t n = json_array_size(a);
    json_decref(a);
    return n;
}

/* The first container of kernel kid ("" when none). */
static inline void s_container_of(korch_docker_t *d, const char *kid, char *id, size_t len)
{
    char label[128];
    snprintf(label, sizeof label, "korch.kernel_id=%s", kid);
    json_t *a = s_containers(d, label);
    const char *s = json_string_value(json_object_get(json_array_get(a, 0), "Id"));
    snprintf(id, len, "%s", s ? s : "");
    json_decref(a);
}

static inline int s_post(korch_docker_t *d, const char *path, json_t *body, json_t **reply)
{
    korch_docker_reply_t r = {0};
    int st = korch_docker_request(d, "POST", path, body, &r, NULL) == KORCH_OK ? (int)r.status : -1;
    if (reply)
        *reply = r.json ? json_incref(r.json) : NULL;
    korch_docker_reply_clear(&r);
    return st;
}

/* A running container labelled as instance inst's kernel kid, as no korch
   made it (sleep, not a kernel); binds "" = none; of korch scope scope
   ("" = this runtime dir's, NULL = no korch.scope label, as an older korch
   made them). Its id into id. */
static inline bool s_fake_kernel(korch_docker_t *d, const char *inst, const char *kid, const char *rdir, const char *bind,
                                 const char *scope, char *id, size_t len)
{
    char mine[KORCH_SCOPE_LEN] = "";
    if (scope && !*scope && CHECK_EQ(korch_runtime_scope(NULL, mine, sizeof mine, NULL), KORCH_OK))
        scope = mine;
    json_t *body = json_pack("{s:s, s:[s,s], s:{s:s, s:s, s:s, s:s}, s:{s:s, s:[]}}", "Image", IMAGE, "Cmd",
                             "sleep", "600", "Labels", "korch.instance", inst, "korch.kernel_id", kid,
                             "korch.kernelspec", "python3", "korch.runtime_dir", rdir, "HostConfig", "NetworkMode",
                             "none", "Binds");
    if (body && scope)
        json_object_set_new(json_object_get(body, "Labels"), "korch.scope", json_string(scope));
    if (bind && *bind)
        json_array_append_new(json_object_get(json_object_get(body, "HostConfig"), "Binds"), json_string(bind));
    json_t *r = NULL;
    int st = s_post(d, "/containers/create", body, &r);
    json_decref(body);
    const char *cid = json_string_value(json_object_get(r, "Id"));
    snprintf(id, len, "%s", cid ? cid : "");
    json_decref(r);
    if (!CHECK_EQ(st, 201) || !id[0])
        return false;
    char path[200];
    snprintf(path, sizeof path, "/containers/%s/start", id);
    return CHECK_EQ(s_post(d, path, NULL, NULL), 204);
}

static inline bool s_exists(korch_docker_t *d, const char *cid)
{
    char path[320];
    snprintf(path, sizeof path, "/containers/%s/json", cid);
    korch_docker_reply_t r = {0};
    bool there = korch_docker_request(d, "GET", path, NULL, &r, NULL) == KORCH_OK && r.status == 200;
    korch_docker_reply_clear(&r);
    return there;
}

/* Wait until no container has label key=value (true) or timeout_ms passes. */
static inline bool s_wait_none(korch_docker_t *d, const char *key, const char *value, int timeout_ms)
{
    for (int t = 0; t < timeout_ms; t += 200) {
        if (s_count(d, key, value) == 0)
            return true;
        usleep(200 * 1000);
    }
    return false;
}

static inline void s_remove_label(korch_docker_t *d, const char *inst)
{
    char label[128], path[200];
    snprintf(label, sizeof label, "korch.instance=%s", inst);
    json_t *a = s_containers(d, label);
    size_t i;
    json_t *c;
    json_array_foreach(a, i, c) {
        snprintf(path, sizeof path, "/containers/%s?force=1&v=1", json_string_value(json_object_get(c, "Id")));
        korch_docker_reply_t r = {0};
        korch_docker_request(d, "DELETE", path, NULL, &r, NULL);
        korch_docker_reply_clear(&r);
    }
    json_decref(a);
}

#endif
