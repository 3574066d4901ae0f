/*  The swarm launcher: this instance's services, for adoption lists,
 *  removal and the CLI's start-up sweep (blocking: a command's set-up). */
#include "swarm_int.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

json_t *sw_list(korch_launcher_t *self, const char *instance, korch_err_t *err)
{
    swarm_launcher_t *l = (swarm_launcher_t *)self;
    char label[200], path[600];
    if (instance)
        snprintf(label, sizeof label, "korch.instance=%s", instance);
    else
        snprintf(label, sizeof label, "korch.instance");
    if (!sw_filter_path(l, "services", "label", label, path, sizeof path)) {
        korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        return NULL;
    }
    json_t *svcs = sw_get_sync(l, path, err);
    sw_filter_path(l, "tasks", "label", label, path, sizeof path);
    json_t *tasks = svcs ? sw_get_sync(l, path, err) : NULL;
    json_t *out = tasks ? json_array() : NULL;
    size_t i;
    json_t *s;
    json_array_foreach(svcs, i, s) {
        if (!out)
            break;
        json_t *lb = json_object_get(json_object_get(s, "Spec"), "Labels");
        json_t *t = sw_task_of(tasks, sw_str(s, "ID", NULL));
        json_array_append_new(out, json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:s}", "id",
                                             sw_str(s, "ID", NULL), "name", sw_str(json_object_get(s, "Spec"), "Name", NULL),
                                             "kernel_id", sw_str(lb, "korch.kernel_id", NULL), "instance",
                                             sw_str(lb, "korch.instance", NULL), "kernelspec",
                                             sw_str(lb, "korch.kernelspec", NULL), "runtime_dir",
                                             sw_str(lb, "korch.runtime_dir", NULL), "secret",
                                             sw_str(lb, "korch.secret", NULL), "scope",
                                             sw_str(lb, "korch.scope", NULL), "state",
                                             t ? sw_str(t, "Status", "State") : "", "node",
                                             t ? sw_str(t, "NodeID", NULL) : ""));
    }
    json_decref(svcs);
    json_decref(tasks);
    return out;
}

int sw_remove_all(korch_launcher_t *self, const char *instance, korch_err_t *err)
{
    swarm_launcher_t *l = (swarm_launcher_t *)self;
    json_t *all = sw_list(self, instance, err);
    if (!all)
        return -1;
    int n = 0;
    size_t i;
    json_t *s;
    json_array_foreach(all, i, s) {
        if (strcmp(sw_str(s, "scope", NULL), l->scope))
            continue; /* another lock domain's, or an older korch's: never removed from here */
        if (sw_delete_sync(l, "services", sw_str(s, "id", NULL)))
            n++;
        if (*sw_str(s, "secret", NULL))
            sw_delete_sync(l, "secrets", sw_str(s, "secret", NULL));
    }
    json_decref(all);
    /* Secrets of the instance that no service uses any more (a korch that
       died between the secret and the service). */
    char label[200], path[600];
    snprintf(label, sizeof label, instance ? "korch.instance=%s" : "korch.instance", instance);
    json_t *secrets = sw_filter_path(l, "secrets", "label", label, path, sizeof path) ? sw_get_sync(l, path, NULL) : NULL;
    json_array_foreach(secrets, i, s) {
        korch_docker_reply_t r = {0};
        if (strcmp(sw_str(json_object_get(json_object_get(s, "Spec"), "Labels"), "korch.scope", NULL), l->scope))
            continue; /* another lock domain's, or an older korch's */
        snprintf(path, sizeof path, "/secrets/%s", sw_str(s, "ID", NULL));
        if (korch_docker_request(l->api, "DELETE", path, NULL, &r, NULL) == KORCH_OK && r.status != 204 &&
            r.status != 404)
            korch_debug("swarm: secret %s kept: %s", sw_str(json_object_get(s, "Spec"), "Name", NULL),
                        korch_docker_reply_message(&r));
        korch_docker_reply_clear(&r);
    }
    json_decref(secrets);
    return n;
}

/* ------------------------------------------------------- adoption lists */

json_t *sw_list_mine(korch_launcher_t *self, korch_err_t *err)
{
    swarm_launcher_t *l = (swarm_launcher_t *)self;
    const char *mine = l->o.instance ? l->o.instance : "default";
    json_t *all = sw_list(self, mine, err);
    json_t *out = korch_backend_mine(all, "swarm service(s)", mine, l->scope, err);
    json_decref(all);
    return out;
}

/* Is dir directly inside our runtime base (what korch made for a kernel)? */
static bool s_rdir_in_base(const char *dir)
{
    char base[PATH_MAX];
    size_t bl;
    return dir[0] == '/' && korch_runtime_base(base, sizeof base, NULL) == KORCH_OK &&
           strncmp(dir, base, (bl = strlen(base))) == 0 && dir[bl] == '/' && dir[bl + 1] &&
           !strchr(dir + bl + 1, '/');
}

/* One service of ours by id, its secret and korch's copy of its
   connection file (in a dir of our runtime base only, never through a
   link: unlink removes a link itself). */
korch_rc_t sw_remove_mine(korch_launcher_t *self, const char *id, korch_err_t *err)
{
    swarm_launcher_t *l = (swarm_launcher_t *)self;
    const char *mine = l->o.instance ? l->o.instance : "default";
    char path[200];
    if (!sw_valid_name(id) || strlen(id) > 80)
        return korch_err_set(err, KORCH_E_INVALID, "'%.80s' is not a service id", id);
    snprintf(path, sizeof path, "/services/%s", id);
    korch_docker_reply_t r = {0};
    korch_rc_t rc = korch_docker_request(l->api, "GET", path, NULL, &r, err);
    if (rc)
        return rc;
    json_t *labels = json_object_get(json_object_get(r.json, "Spec"), "Labels");
    if (r.status == 404)
        rc = KORCH_OK; /* gone already */
    else if (r.status != 200)
        rc = korch_err_set(err, KORCH_E_DOCKER, "GET %s: %s", path, korch_docker_reply_message(&r));
    else if (strcmp(sw_str(labels, "korch.instance", NULL), mine) != 0)
        rc = korch_err_set(err, KORCH_E_STATE, "service %.25s belongs to korch instance '%.60s', not '%s'", id,
                           sw_str(labels, "korch.instance", NULL), mine);
    else if (strcmp(sw_str(labels, "korch.scope", NULL), l->scope) != 0)
        rc = korch_err_set(err, KORCH_E_STATE, "service %.25s is of korch scope '%.20s', not this runtime dir's '%s'",
                           id, sw_str(labels, "korch.scope", NULL), l->scope);
    else if (!sw_delete_sync(l, "services", id))
        rc = korch_err_set(err, KORCH_E_DOCKER, "cannot remove service %.25s", id);
    else {
        const char *secret = sw_str(labels, "korch.secret", NULL);
        const char *rdir = sw_str(labels, "korch.runtime_dir", NULL);
        char cf[PATH_MAX + 16];
        /* the label is anyone's: the secret must be this instance's too */
        char sp[200];
        json_t *sec = NULL;
        if (*secret && sw_valid_name(secret) && strlen(secret) < 100) {
            snprintf(sp, sizeof sp, "/secrets/%s", secret);
            sec = sw_get_sync(l, sp, NULL);
        }
        json_t *slb = json_object_get(json_object_get(sec, "Spec"), "Labels");
        if (sec && !strcmp(sw_str(slb, "korch.instance", NULL), mine) && !strcmp(sw_str(slb, "korch.scope", NULL), l->scope))
            sw_delete_sync(l, "secrets", secret);
        json_decref(sec);
        if (s_rdir_in_base(rdir) && snprintf(cf, sizeof cf, "%s/%s", rdir, SW_CONN_FILE) < (int)sizeof cf) {
            unlink(cf);
            if (rmdir(rdir) != 0 && errno != ENOENT)
                korch_debug("runtime dir '%s' kept: %s", rdir, strerror(errno));
        }
    }
    korch_docker_reply_clear(&r);
    return rc;
}

