/*  The adoption lists' scope filter the backends share (backend.h). */
#include "backend.h"
#include "korch/log.h"

#include <stdio.h>
#include <string.h>

void korch_backend_scope_notice(const char *kind, const char *instance, const char *scope, int foreign, int legacy)
{
    bool swarm = strstr(kind, "service") != NULL;
    if (foreign > 0)
        korch_notice("left %d %s of korch instance '%s' alone: their korch.scope label is not this runtime dir's "
                     "'%s' (they belong to a korch with other instance locks: another machine's, or a runtime dir "
                     "since recreated), so they are not judged from here",
                     foreign, kind, instance, scope);
    char how[400];
    if (swarm)
        snprintf(how, sizeof how,
                 "docker service rm $(docker service ls -q --filter label=korch.instance=%s) and docker secret rm "
                 "$(docker secret ls -q --filter label=korch.instance=%s)",
                 instance, instance);
    else
        snprintf(how, sizeof how, "docker rm -f -v $(docker ps -aq --filter label=korch.instance=%s)", instance);
    if (legacy > 0)
        korch_notice("left %d %s of korch instance '%s' alone: they carry no korch.scope label (an older korch made "
                     "them), so whose they are cannot be told from here; once the korch that made them is gone, "
                     "remove them with %s",
                     legacy, kind, instance, how);
}

static const char *s_jstr(json_t *o, const char *key)
{
    const char *v = json_string_value(json_object_get(o, key));
    return v ? v : "";
}

json_t *korch_backend_mine(json_t *all, const char *kind, const char *instance, const char *scope, korch_err_t *err)
{
    if (!all)
        return NULL;
    json_t *out = json_array();
    size_t i;
    json_t *c;
    int foreign = 0, legacy = 0;
    json_array_foreach(all, i, c) {
        const char *sc = s_jstr(c, "scope");
        if (strcmp(sc, scope) != 0) {
            *(*sc ? &foreign : &legacy) += 1;
            continue;
        }
        if (out && *s_jstr(c, "id"))
            json_array_append_new(out, json_pack("{s:s, s:s, s:s, s:s}", "id", s_jstr(c, "id"), "kernel_id",
                                                 s_jstr(c, "kernel_id"), "kernelspec", s_jstr(c, "kernelspec"),
                                                 "state", s_jstr(c, "state")));
    }
    if (!out)
        korch_err_set(err, KORCH_E_NOMEM, "out of memory");
    korch_backend_scope_notice(kind, instance, scope, foreign, legacy);
    return out;
}
