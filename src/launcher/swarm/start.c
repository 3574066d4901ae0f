/*  The swarm launcher's start: the secret, the service, then the poll
 *  waits for its task. */
#include "swarm_int.h"
#include "../container.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------- start */

/* The kernel's command: the kernelspec's argv (argv[0] by basename, the
   connection file in /tmp), run after copying the secret there. Given as
   Args, so the image's entrypoint still runs first. */
static json_t *s_args(const korch_kernelspec_t *spec, const char *workdir)
{
    /* "$0" is the work dir, made in /tmp's tmpfs (see s_service_spec). */
    json_t *a = json_pack("[s, s, s, s]", "/bin/sh", "-c",
                          "cp " SW_SECRET_AT " " SW_CONN_IN " && mkdir -p \"$0\" && cd \"$0\" && exec \"$@\"", workdir);
    if (a && !korch_container_argv(a, spec, SW_CONN_IN)) {
        json_decref(a);
        a = NULL;
    }
    return a;
}

/* Append comma-separated constraints from s to arr. */
static void s_add_constraints(json_t *arr, const char *s)
{
    while (s && *s) {
        size_t n = strcspn(s, ",");
        size_t b = 0;
        while (b < n && s[b] == ' ')
            b++;
        size_t e = n;
        while (e > b && s[e - 1] == ' ')
            e--;
        if (e > b)
            json_array_append_new(arr, json_stringn(s + b, e - b));
        s += n;
        if (*s == ',')
            s++;
    }
}

/* The request's KERNEL_PLACEMENT, or NULL. */
static const char *s_req_placement(const korch_launch_t *req)
{
    for (const char *const *e = req->env; e && *e; e++)
        if (!strncmp(*e, "KERNEL_PLACEMENT=", 17))
            return *e + 17;
    return NULL;
}

static json_t *s_service_spec(swarm_proc_t *p, const korch_launch_t *req, const char *image)
{
    swarm_launcher_t *l = p->l;
    const korch_swarm_opts_t *o = &l->o;
    char uid[16], gid[16];
    char user[40];
    snprintf(uid, sizeof uid, "%u", (unsigned)p->uid);
    snprintf(gid, sizeof gid, "%u", (unsigned)p->gid);
    snprintf(user, sizeof user, "%s:%s", uid, gid);
    char **ev = korch_env_build(req, false, NULL);
    json_t *env = json_array();
    for (char **e = ev; env && e && *e; e++)
        json_array_append_new(env, json_string(*e));
    korch_env_free(ev);
    json_t *args = s_args(req->spec, o->workdir_mount);
    json_t *cons = json_array();
    s_add_constraints(cons, o->constraints);
    json_t *meta = json_object_get(json_object_get(req->spec->json, "metadata"), "korch");
    if (json_is_string(json_object_get(meta, "constraints")))
        s_add_constraints(cons, json_string_value(json_object_get(meta, "constraints")));
    s_add_constraints(cons, s_req_placement(req));
    json_t *labels = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "korch.kernel_id", req->kernel_id, "korch.instance",
                               o->instance ? o->instance : "default", "korch.kernelspec",
                               req->spec->name ? req->spec->name : "", "korch.runtime_dir", req->runtime_dir,
                               "korch.secret", p->secret, "korch.scope", p->l->scope);
    /* One tmpfs, /tmp, holding the work dir too: Engine 20.10's swarm
       executor ignores TmpfsOptions.Mode (and `--mount tmpfs-mode`), so a
       tmpfs gets root as owner and the mode of the image's directory under
       it; only /tmp (1777 in any image) is writable by the kernel's uid. */
    int64_t tmp_bytes = (o->tmp_size > 0 ? o->tmp_size : 0) + (o->workdir_size > 0 ? o->workdir_size : 0);
    json_t *tmp = json_pack("{s:s, s:s, s:{s:I}}", "Type", "tmpfs", "Target", "/tmp", "TmpfsOptions", "SizeBytes",
                            (json_int_t)tmp_bytes);
    json_t *secret = json_pack("{s:{s:s, s:s, s:s, s:i}, s:s, s:s}", "File", "Name", "kernel.json", "UID", uid, "GID",
                               gid, "Mode", 0400, "SecretID", p->secret, "SecretName", p->name);
    json_t *limits = json_object();
    if (o->memory > 0)
        json_object_set_new(limits, "MemoryBytes", json_integer(o->memory));
    if (o->nano_cpus > 0)
        json_object_set_new(limits, "NanoCPUs", json_integer(o->nano_cpus));
    if (o->pids_limit > 0)
        json_object_set_new(limits, "Pids", json_integer(o->pids_limit));
    json_t *cs = json_pack("{s:s, s:o, s:o, s:s, s:s, s:b, s:b, s:[s], s:[o], s:[o], s:I, s:o}", "Image", image,
                           "Args", args, "Env", env, "User", user, "Dir", "/tmp", "ReadOnly", 1, "Init",
                           1, "CapabilityDrop", "ALL", "Mounts", tmp, "Secrets", secret, "StopGracePeriod",
                           (json_int_t)o->stop_grace_ms * 1000000, "Labels",
                           json_pack("{s:s, s:s}", "korch.kernel_id", req->kernel_id, "korch.scope", p->l->scope));
    if (cs && o->nofile > 0)
        json_object_set_new(cs, "Ulimits", json_pack("[{s:s, s:I, s:I}]", "Name", "nofile", "Soft",
                                                     (json_int_t)o->nofile, "Hard", (json_int_t)o->nofile));
    json_t *spec = json_pack("{s:s, s:o, s:{s:o, s:{s:o}, s:{s:s}, s:{s:o}, s:[{s:s}]}, s:{s:{s:i}}, s:{s:s}}",
                             "Name", p->name, "Labels", labels, "TaskTemplate", "ContainerSpec", cs, "Resources",
                             "Limits", limits, "RestartPolicy", "Condition", "none", "Placement", "Constraints", cons,
                             "Networks", "Target", l->network_id, "Mode", "Replicated", "Replicas", 1,
                             "EndpointSpec", "Mode", "dnsrr");
    return spec;
}

static void s_on_service(korch_rc_t rc, const korch_err_t *err, korch_docker_reply_t *r, void *arg)
{
    swarm_proc_t *p = arg;
    p->call = NULL;
    const char *id = r ? sw_str(r->json, "ID", NULL) : "";
    if (rc != KORCH_OK) {
        snprintf(p->why, sizeof p->why, "cannot create the kernel's service: %.100s", err->msg);
        sw_start_fail(p, rc);
        return;
    }
    if (r->status != 201 || !*id) {
        snprintf(p->why, sizeof p->why, "cannot create the kernel's service %s: %s", p->name,
                 korch_docker_reply_message(r));
        sw_start_fail(p, KORCH_E_DOCKER);
        return;
    }
    snprintf(p->service, sizeof p->service, "%s", id);
    json_t *w;
    size_t i;
    json_array_foreach(json_object_get(r->json, "Warnings"), i, w)
        korch_info("swarm: service %s: %s", p->name, json_string_value(w));
    p->st = ST_SCHEDULE;
    p->sched_began = korch_now_ms();
    sw_poll_now(p->l);
}

static void s_on_secret(korch_rc_t rc, const korch_err_t *err, korch_docker_reply_t *r, void *arg)
{
    swarm_proc_t *p = arg;
    json_t *spec = p->spec;
    p->spec = NULL;
    p->call = NULL;
    const char *id = r ? sw_str(r->json, "ID", NULL) : "";
    if (rc != KORCH_OK || r->status != 201 || !*id) {
        snprintf(p->why, sizeof p->why, "cannot create the kernel's secret %.100s: %.100s", p->name,
                 rc ? err->msg : korch_docker_reply_message(r));
        json_decref(spec);
        sw_start_fail(p, rc ? rc : KORCH_E_DOCKER);
        return;
    }
    snprintf(p->secret, sizeof p->secret, "%s", id);
    /* The spec names the secret by id and label. */
    json_t *ref = json_array_get(json_object_get(json_object_get(json_object_get(spec, "TaskTemplate"),
                                                                 "ContainerSpec"), "Secrets"), 0);
    json_object_set_new(ref, "SecretID", json_string(id));
    json_object_set_new(json_object_get(spec, "Labels"), "korch.secret", json_string(id));
    p->st = ST_SERVICE;
    korch_err_t e = {0};
    p->call = korch_docker_request_async(p->l->api, "POST", "/services/create", spec, NULL, s_on_service, p, &e);
    json_decref(spec);
    if (!p->call) {
        snprintf(p->why, sizeof p->why, "cannot create the kernel's service: %.100s", e.msg);
        sw_start_fail(p, e.rc ? e.rc : KORCH_E_DOCKER);
    }
}

/* The caller gave the start (or adopt) up: what was made goes. */
static void s_start_cancel(korch_op_t *op, void *arg)
{
    (void)op;
    swarm_proc_t *p = arg;
    p->start_op = NULL;
    if (p->call)
        korch_op_cancel(&p->call);
    sw_proc_unlink(p);
    sw_reap(p->l, p->service, p->secret);
    if (p->conn_file[0] && !p->adopting)
        unlink(p->conn_file);
    sw_proc_release(p);
}

swarm_proc_t *sw_proc_new(swarm_launcher_t *l, const korch_launch_t *req, korch_op_t *op)
{
    swarm_proc_t *p = korch_backend_proc_new(&l->base, sizeof *p, req);
    if (!p)
        return NULL;
    p->l = l;
    p->file_timer = -1;
    p->start_op = op;
    korch_op_on_cancel(op, s_start_cancel, p);
    return p;
}

/* The launcher's part of a start: secret, service, task (see the top). */
korch_rc_t sw_start(korch_launcher_t *self, const korch_launch_t *req, korch_op_t *op, korch_err_t *err)
{
    swarm_launcher_t *l = (swarm_launcher_t *)self;
    char image[512], rnd[8];
    if (!req || !req->spec || !req->conn || !req->kernel_id || !sw_valid_name(req->kernel_id) || !req->runtime_dir)
        return korch_err_set(err, KORCH_E_INVALID, "the swarm launcher needs a kernelspec, a connection, a runtime "
                                                   "dir and a kernel id made of [A-Za-z0-9_.-]");
    swarm_proc_t *p = sw_proc_new(l, req, op);
    if (!p)
        return korch_err_set(err, KORCH_E_NOMEM, "out of memory");
    /* A name per start: the service of a kernel's previous run may still be
       on its way out when its restart begins. */
    unsigned char r[3];
    FILE *f = fopen("/dev/urandom", "rb");
    if (!f || fread(r, 1, sizeof r, f) != sizeof r)
        memset(r, 0, sizeof r);
    if (f)
        fclose(f);
    snprintf(rnd, sizeof rnd, "%02x%02x%02x", r[0], r[1], r[2]);
    snprintf(p->kernel_id, sizeof p->kernel_id, "%s", req->kernel_id);
    snprintf(p->name, sizeof p->name, "korch-%.36s-%s", req->kernel_id, rnd);
    snprintf(p->conn_file, sizeof p->conn_file, "%.*s/%s", (int)korch_dir_len(req->runtime_dir), req->runtime_dir,
             SW_CONN_FILE);
    p->python = req->spec->language && !strcmp(req->spec->language, "python");
    /* A uid no account of korch's host has, this kernel's alone (kuid.h);
       a restart's start claims a fresh one (its predecessor's service may
       still be on its way out). */
    if (l->dynamic) {
        if (!(p->kuid = korch_kuid_claim(0, err)))
            goto fail;
        p->uid = korch_kuid_uid(p->kuid);
        p->gid = (gid_t)p->uid;
    } else {
        p->uid = l->uid;
        p->gid = l->gid;
    }

    /* The kernel's file: tcp on every address of its task, fixed ports. */
    korch_conn_t *kc = &p->base.conn; /* korch's: the same, ip set once the task has its address */
    snprintf(kc->transport, sizeof kc->transport, "tcp");
    snprintf(kc->ip, sizeof kc->ip, "0.0.0.0");
    for (int i = 0; i < KORCH_CH__COUNT; i++)
        kc->port[i] = SW_PORT0 + i;
    snprintf(kc->kernel_name, sizeof kc->kernel_name, "%s", req->spec->name ? req->spec->name : "");
    json_t *cj = korch_conn_json(kc);
    char *ctext = cj ? json_dumps(cj, JSON_COMPACT) : NULL;
    char *b64 = ctext ? korch_b64_encode((const unsigned char *)ctext, strlen(ctext)) : NULL;
    json_decref(cj);
    if (ctext)
        explicit_bzero(ctext, strlen(ctext)); /* the key */
    free(ctext);
    /* korch's copy, for re-adoption (the secret cannot be read back). */
    korch_err_t e = {0};
    if (!b64 || korch_conn_save(kc, p->conn_file, &e) != KORCH_OK) {
        korch_err_set(err, e.rc ? e.rc : KORCH_E_NOMEM, "%s", e.rc ? e.msg : "out of memory");
        free(b64);
        p->conn_file[0] = 0;
        goto fail;
    }
    korch_container_image(l->o.image, req->spec, image, sizeof image);
    p->spec = s_service_spec(p, req, image);
    json_t *body = json_pack("{s:s, s:s, s:{s:s, s:s, s:s}}", "Name", p->name, "Data", b64, "Labels", "korch.instance",
                             l->o.instance ? l->o.instance : "default", "korch.kernel_id", req->kernel_id,
                             "korch.scope", l->scope);
    explicit_bzero(b64, strlen(b64));
    free(b64);
    if (!p->spec || !body) {
        json_decref(body);
        korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        goto fail;
    }
    p->call = korch_docker_request_async(l->api, "POST", "/secrets/create", body, NULL, s_on_secret, p, err);
    json_decref(body);
    if (!p->call)
        goto fail;
    p->st = ST_SECRET;
    sw_proc_link(p);
    return KORCH_OK;
fail:
    if (p->conn_file[0])
        unlink(p->conn_file);
    korch_op_on_cancel(op, NULL, NULL);
    sw_proc_release(p);
    return err && err->rc ? err->rc : KORCH_E_NOMEM;
}

