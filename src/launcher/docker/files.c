/*  The docker launcher's files: through its engine's archive endpoints
 *  (src/launcher/ctfiles.c, which the swarm launcher shares), so they work
 *  however the work dir is mounted (the tmpfs volume, a host dir) and with
 *  a remote engine. */
#include "docker_int.h"
#include "../ctfiles.h"

static korch_ctfile_at_t s_at(docker_proc_t *p)
{
    return (korch_ctfile_at_t){.api = p->l->api, .id = p->id, .workdir = p->workdir, .uid = p->uid, .gid = p->gid};
}

korch_rc_t dk_put_file(korch_proc_t *proc, const char *name, const void *data, size_t len, korch_op_t *op,
                       korch_err_t *err)
{
    korch_ctfile_at_t at = s_at((docker_proc_t *)proc);
    return korch_ctfile_put(&at, name, data, len, op, err);
}

korch_rc_t dk_get_file(korch_proc_t *proc, const char *name, size_t max, korch_op_t *op, korch_err_t *err)
{
    korch_ctfile_at_t at = s_at((docker_proc_t *)proc);
    return korch_ctfile_get(&at, name, max, op, err);
}

korch_rc_t dk_put_file_now(korch_proc_t *proc, const char *name, const void *data, size_t len, korch_err_t *err)
{
    korch_ctfile_at_t at = s_at((docker_proc_t *)proc);
    return korch_ctfile_put_now(&at, name, data, len, err);
}

korch_rc_t dk_get_file_now(korch_proc_t *proc, const char *name, size_t max, char **data, size_t *len,
                           korch_err_t *err)
{
    korch_ctfile_at_t at = s_at((docker_proc_t *)proc);
    return korch_ctfile_get_now(&at, name, max, data, len, err);
}
