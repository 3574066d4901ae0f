/*  The swarm launcher's helpers: names, filter paths, the manager's answers. */
#include "swarm_int.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---------------------------------------------------------------- helpers */

bool sw_valid_name(const char *s)
{
    if (!s || !*s || strlen(s) > 64)
        return false;
    for (const char *p = s; *p; p++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-", *p))
            return false;
    return true;
}

/* A "GET path?filters={key:[value]}" path into buf; false when too long. */
bool sw_filter_path(swarm_launcher_t *l, const char *what, const char *key, const char *value, char *buf,
                          size_t len)
{
    json_t *f = json_pack("{s:[s]}", key, value);
    char *fs = f ? json_dumps(f, JSON_COMPACT) : NULL;
    char *esc = fs ? korch_docker_escape(l->api, fs) : NULL;
    int n = esc ? snprintf(buf, len, "/%s?filters=%s", what, esc) : -1;
    free(esc);
    free(fs);
    json_decref(f);
    return n > 0 && (size_t)n < len;
}

const char *sw_str(json_t *j, const char *a, const char *b)
{
    json_t *v = json_object_get(j, a);
    if (b)
        v = json_object_get(v, b);
    return json_is_string(v) ? json_string_value(v) : "";
}

/* The task's address on our network ("10.234.1.5", no prefix length). */
bool sw_task_addr(swarm_launcher_t *l, json_t *t, char *buf, size_t len)
{
    size_t i;
    json_t *a;
    json_array_foreach(json_object_get(t, "NetworksAttachments"), i, a) {
        const char *id = sw_str(json_object_get(a, "Network"), "ID", NULL);
        const char *ad = json_string_value(json_array_get(json_object_get(a, "Addresses"), 0));
        if (ad && !strcmp(id, l->network_id)) {
            snprintf(buf, len, "%s", ad);
            buf[strcspn(buf, "/")] = 0;
            return buf[0] != 0;
        }
    }
    return false;
}

/* "node2 (10.231.0.12)" for messages: its korch.node label or hostname. */
void sw_node_name(swarm_launcher_t *l, const char *id, char *buf, size_t len)
{
    size_t i;
    json_t *n;
    snprintf(buf, len, "%.12s", id);
    json_array_foreach(l->nodes, i, n) {
        if (strcmp(sw_str(n, "ID", NULL), id))
            continue;
        const char *label = sw_str(json_object_get(n, "Spec"), "Labels", NULL);
        json_t *labels = json_object_get(json_object_get(n, "Spec"), "Labels");
        label = json_is_string(json_object_get(labels, "korch.node"))
                    ? json_string_value(json_object_get(labels, "korch.node"))
                    : sw_str(n, "Description", "Hostname");
        snprintf(buf, len, "%s (%s)", *label ? label : id, sw_str(n, "Status", "Addr"));
    }
}

/* The node's state ("ready", "down", "unknown", "disconnected"), "" unknown. */
const char *sw_node_state(swarm_launcher_t *l, const char *id)
{
    size_t i;
    json_t *n;
    json_array_foreach(l->nodes, i, n) if (!strcmp(sw_str(n, "ID", NULL), id)) return sw_str(n, "Status", "State");
    return "";
}

json_t *sw_get_sync(swarm_launcher_t *l, const char *path, korch_err_t *err)
{
    korch_docker_reply_t r = {0};
    json_t *j = NULL;
    if (korch_docker_request(l->api, "GET", path, NULL, &r, err) != KORCH_OK)
        return NULL;
    if (r.status == 200 && r.json)
        j = json_incref(r.json);
    else
        korch_err_set(err, KORCH_E_DOCKER, "GET %s: %s", path, korch_docker_reply_message(&r));
    korch_docker_reply_clear(&r);
    return j;
}

