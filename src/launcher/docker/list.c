/*  The docker launcher: containers by label, for adoption lists, removal
 *  of this korch's own and the CLI's start-up sweep (blocking calls: a
 *  command's set-up, before the loop runs). */
#include "docker_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- listing */

/* A label's value, "" when missing. */
const char *dk_label(json_t *labels, const char *key)
{
    const char *v = json_string_value(json_object_get(labels, key));
    return v ? v : "";
}

/* Does a container's korch.scope label name this korch's lock domain? */
bool dk_ours(const docker_launcher_t *l, json_t *labels)
{
    return strcmp(dk_label(labels, "korch.scope"), l->scope) == 0;
}

/* GET /containers/json?all=1 filtered by one label ("k" or "k=v"): the
   engine's array, new reference; NULL + err on failure. */
/* "/containers/json?all=1&filters=..." for one label ("k" or "k=v"); new, NULL on ENOMEM. */
char *dk_labelled_path(docker_launcher_t *l, const char *label)
{
    json_t *filters = json_pack("{s:[s]}", "label", label);
    char *fjson = filters ? json_dumps(filters, JSON_COMPACT) : NULL;
    char *fesc = fjson ? korch_docker_escape(l->api, fjson) : NULL;
    size_t plen = fesc ? strlen(fesc) + 64 : 0;
    char *path = fesc ? malloc(plen) : NULL;
    if (path)
        snprintf(path, plen, "/containers/json?all=1&filters=%s", fesc);
    json_decref(filters);
    free(fjson);
    free(fesc);
    return path;
}

/* GET /containers/json?all=1 filtered by one label: the engine's array, new
   reference; NULL + err on failure. Blocking (listing and cleanup). */
json_t *dk_find_labelled(docker_launcher_t *l, const char *label, korch_err_t *err)
{
    char *path = dk_labelled_path(l, label);
    json_t *list = NULL;
    korch_docker_reply_t r = {0};
    if (!path) {
        korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        return NULL;
    }
    if (korch_docker_request(l->api, "GET", path, NULL, &r, err) == KORCH_OK) {
        if (r.status != 200 || !json_is_array(r.json))
            korch_err_set(err, KORCH_E_DOCKER, "cannot list korch containers: %s", korch_docker_reply_message(&r));
        else
            list = json_incref(r.json);
    }
    korch_docker_reply_clear(&r);
    free(path);
    return list;
}

/* Where a container has runtime_dir bind-mounted (its Destination), or NULL
   when it has not: a korch.runtime_dir label alone is not trusted, since
   adopt connects to what is in that dir and cleanup deletes from it. Works
   on GET /containers/json entries and on inspect replies alike. */
const char *dk_runtime_target(json_t *c, const char *runtime_dir)
{
    size_t i;
    json_t *m;
    if (!runtime_dir || runtime_dir[0] != '/')
        return NULL;
    json_array_foreach(json_object_get(c, "Mounts"), i, m) {
        const char *type = json_string_value(json_object_get(m, "Type"));
        const char *src = json_string_value(json_object_get(m, "Source"));
        const char *dst = json_string_value(json_object_get(m, "Destination"));
        if (type && src && dst && strcmp(type, "bind") == 0 && strcmp(src, runtime_dir) == 0 && dst[0] == '/')
            return dst;
    }
    return NULL;
}

/* ------------------------------------------------------- adoption lists */

json_t *dk_list_mine(korch_launcher_t *self, korch_err_t *err)
{
    docker_launcher_t *l = (docker_launcher_t *)self;
    const char *mine = l->o.instance ? l->o.instance : "default";
    json_t *all = dk_list(self, mine, err);
    json_t *out = korch_backend_mine(all, "container(s)", mine, l->scope, err);
    json_decref(all);
    return out;
}

/* One container of ours, by id: inspected first (its labels must name this
   instance; a runtime dir is cleaned only where the container really
   bind-mounts it), then removed with its volume. */
korch_rc_t dk_remove_mine(korch_launcher_t *self, const char *id, korch_err_t *err)
{
    docker_launcher_t *l = (docker_launcher_t *)self;
    const char *mine = l->o.instance ? l->o.instance : "default";
    char path[200];
    korch_docker_reply_t r = {0};
    korch_rc_t rc;
    for (const char *c = id; *c; c++)
        if (!strchr("0123456789abcdef", *c) || c - id > 64)
            return korch_err_set(err, KORCH_E_INVALID, "'%.80s' is not a container id", id);
    snprintf(path, sizeof path, "/containers/%s/json", id);
    if ((rc = korch_docker_request(l->api, "GET", path, NULL, &r, err)))
        return rc;
    if (r.status == 404) {
        korch_docker_reply_clear(&r);
        return KORCH_OK; /* gone already */
    }
    json_t *labels = json_object_get(json_object_get(r.json, "Config"), "Labels");
    const char *owner = json_string_value(json_object_get(labels, "korch.instance"));
    const char *rdir = json_string_value(json_object_get(labels, "korch.runtime_dir"));
    if (r.status != 200)
        rc = korch_err_set(err, KORCH_E_DOCKER, "cannot inspect container %.12s: %s", id,
                           korch_docker_reply_message(&r));
    else if (!owner || strcmp(owner, mine) != 0)
        rc = korch_err_set(err, KORCH_E_STATE, "container %.12s belongs to korch instance '%.60s', not '%s'", id,
                           owner ? owner : "", mine);
    else if (!dk_ours(l, labels))
        rc = korch_err_set(err, KORCH_E_STATE, "container %.12s is of korch scope '%.40s', not this runtime dir's '%s'",
                           id, dk_label(labels, "korch.scope"), l->scope);
    else if (!dk_remove(l, id))
        rc = korch_err_set(err, KORCH_E_DOCKER, "cannot remove container %.12s", id);
    else {
        const char *target = dk_runtime_target(r.json, rdir);
        /* only a dir directly in our runtime base, which the container mounted */
        if (target && dk_rdir_in_base(rdir))
            dk_cleanup_runtime(rdir, target);
    }
    korch_docker_reply_clear(&r);
    return rc;
}

json_t *dk_list(korch_launcher_t *self, const char *instance, korch_err_t *err)
{
    docker_launcher_t *l = (docker_launcher_t *)self;
    char label[300];
    snprintf(label, sizeof label, instance ? "korch.instance=%s" : "korch.instance%s", instance ? instance : "");
    json_t *found = dk_find_labelled(l, label, err);
    if (!found)
        return NULL;
    json_t *list = json_array();
    size_t i;
    json_t *c;
    json_array_foreach(found, i, c) {
        json_t *labels = json_object_get(c, "Labels");
        json_t *names = json_object_get(c, "Names");
        const char *name = json_string_value(json_array_get(names, 0));
        json_t *item = json_pack("{s:s?, s:s?, s:s?, s:s?, s:s?, s:s?, s:s?, s:s?}", "id",
                                 json_string_value(json_object_get(c, "Id")), "name",
                                 name && name[0] == '/' ? name + 1 : name, "kernel_id",
                                 json_string_value(json_object_get(labels, "korch.kernel_id")), "instance",
                                 json_string_value(json_object_get(labels, "korch.instance")), "kernelspec",
                                 json_string_value(json_object_get(labels, "korch.kernelspec")), "state",
                                 json_string_value(json_object_get(c, "State")), "runtime_dir",
                                 json_string_value(json_object_get(labels, "korch.runtime_dir")), "scope",
                                 json_string_value(json_object_get(labels, "korch.scope")));
        if (!list || json_array_append_new(list, item)) {
            json_decref(list);
            list = NULL;
            korch_err_set(err, KORCH_E_NOMEM, "out of memory");
            break;
        }
    }
    json_decref(found);
    return list;
}

int dk_remove_all(korch_launcher_t *self, const char *instance, korch_err_t *err)
{
    docker_launcher_t *l = (docker_launcher_t *)self;
    char label[300];
    snprintf(label, sizeof label, instance ? "korch.instance=%s" : "korch.instance%s", instance ? instance : "");
    json_t *list = dk_find_labelled(l, label, err);
    if (!list)
        return -1;
    int n = 0;
    size_t i;
    json_t *c;
    json_array_foreach(list, i, c) {
        const char *id = json_string_value(json_object_get(c, "Id"));
        const char *rdir = json_string_value(json_object_get(json_object_get(c, "Labels"), "korch.runtime_dir"));
        const char *target = dk_runtime_target(c, rdir);
        if (!id || !dk_ours(l, json_object_get(c, "Labels")))
            continue; /* another lock domain's, or an older korch's: never removed from here */
        if (!dk_remove(l, id))
            continue;
        n++;
        if (target)
            dk_cleanup_runtime(rdir, target);
    }
    json_decref(list);
    return n;
}
