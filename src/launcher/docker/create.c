/*  The docker launcher: a kernel's container as POST /containers/create
 *  describes it (command, environment, mounts, limits, labels). */
#include "docker_int.h"
#include "../container.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Env: what the user passed explicitly, the kernelspec's, the request's
   (env.h). The host's environ is not passed: the container is its own
   world, and korch's secrets stay out of it. */
static json_t *s_env(const korch_launch_t *req)
{
    char **v = korch_env_build(req, false, NULL);
    json_t *env = v ? json_array() : NULL;
    for (char **p = v; env && p && *p; p++)
        if (json_array_append_new(env, json_string(*p))) {
            json_decref(env);
            env = NULL;
        }
    korch_env_free(v);
    return env;
}

bool dk_valid_name(const char *s)
{
    if (!s || !*s || strlen(s) > 100)
        return false;
    for (const char *p = s; *p; p++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-", *p))
            return false;
    return true;
}

/* POST /containers/create's body. */
json_t *dk_create_body(docker_launcher_t *l, const korch_launch_t *req, const char *image, const char *user,
                             uid_t uid, gid_t gid, const char *workdir, const char *conn_in)
{
    const korch_docker_opts_t *o = &l->o;
    char opt[256];
    json_t *cmd = json_array();
    if (cmd && !korch_container_argv(cmd, req->spec, conn_in)) {
        json_decref(cmd);
        cmd = NULL;
    }
    json_t *env = s_env(req);
    json_t *tmpfs = json_object();
    json_t *mounts = json_array();
    json_t *labels = json_object();
    json_t *host = json_object();
    json_t *body = json_object();
    if (!cmd || !env || !tmpfs || !mounts || !labels || !host || !body) {
        json_decref(cmd);
        json_decref(env);
        json_decref(tmpfs);
        json_decref(mounts);
        json_decref(labels);
        json_decref(host);
        json_decref(body);
        return NULL;
    }
    json_object_set_new(labels, "korch.kernel_id", json_string(req->kernel_id ? req->kernel_id : ""));
    json_object_set_new(labels, "korch.instance", json_string(o->instance ? o->instance : "default"));
    json_object_set_new(labels, "korch.kernelspec", json_string(req->spec->name ? req->spec->name : ""));
    json_object_set_new(labels, "korch.runtime_dir", json_string(req->runtime_dir));
    json_object_set_new(labels, "korch.scope", json_string(l->scope));

    snprintf(opt, sizeof opt, "rw,nosuid,nodev,mode=1777%s", "");
    if (o->tmp_size > 0)
        snprintf(opt, sizeof opt, "rw,nosuid,nodev,mode=1777,size=%lld", (long long)o->tmp_size);
    json_object_set_new(tmpfs, "/tmp", json_string(opt));
    json_array_append_new(mounts, json_pack("{s:s, s:s, s:s, s:b}", "Type", "bind", "Source", req->runtime_dir,
                                            "Target", o->runtime_mount, "ReadOnly", 0));
    if (workdir) {
        json_array_append_new(mounts, json_pack("{s:s, s:s, s:s, s:b}", "Type", "bind", "Source", workdir, "Target",
                                                o->workdir_mount, "ReadOnly", 0));
    } else {
        /* A tmpfs, but as an anonymous volume of the local driver rather than
           HostConfig.Tmpfs: dockerd mounts it in its own namespace too, so the
           archive endpoints (put_file, get_file) see its files, and a
           read-only root filesystem does not stop them. Removing the
           container with v=1 removes the volume. */
        int n = snprintf(opt, sizeof opt, "nosuid,nodev,mode=0755,uid=%u,gid=%u", (unsigned)uid, (unsigned)gid);
        if (o->workdir_size > 0 && n > 0 && (size_t)n < sizeof opt)
            snprintf(opt + n, sizeof opt - (size_t)n, ",size=%lld", (long long)o->workdir_size);
        json_array_append_new(mounts, json_pack("{s:s, s:s, s:b, s:{s:b, s:{s:s, s:{s:s, s:s, s:s}}}}", "Type",
                                                "volume", "Target", o->workdir_mount, "ReadOnly", 0,
                                                "VolumeOptions", "NoCopy", 1, "DriverConfig", "Name", "local",
                                                "Options", "type", "tmpfs", "device", "tmpfs", "o", opt));
    }

    /* The operator's wheelhouse, read-only (korch/packages.h). */
    const char *wheels = korch_pkgs_wheelhouse(&l->base);
    if (wheels)
        json_array_append_new(mounts, json_pack("{s:s, s:s, s:s, s:b}", "Type", "bind", "Source", wheels, "Target",
                                                KORCH_PACKAGES_WHEELHOUSE, "ReadOnly", 1));

    json_object_set_new(host, "NetworkMode", json_string(o->network ? o->network : "none"));
    json_object_set_new(host, "ReadonlyRootfs", json_boolean(o->readonly_rootfs));
    json_object_set_new(host, "Tmpfs", tmpfs);
    json_object_set_new(host, "Mounts", mounts);
    if (o->memory > 0) {
        json_object_set_new(host, "Memory", json_integer(o->memory));
        json_object_set_new(host, "MemorySwap", json_integer(o->memory)); /* = Memory: no swap */
    }
    if (o->nano_cpus > 0)
        json_object_set_new(host, "NanoCpus", json_integer(o->nano_cpus));
    if (o->pids_limit > 0)
        json_object_set_new(host, "PidsLimit", json_integer(o->pids_limit));
    if (o->cap_drop_all)
        json_object_set_new(host, "CapDrop", json_pack("[s]", "ALL"));
    if (o->no_new_privileges)
        json_object_set_new(host, "SecurityOpt", json_pack("[s]", "no-new-privileges"));
    if (o->nofile > 0)
        json_object_set_new(host, "Ulimits", json_pack("[{s:s, s:I, s:I}]", "Name", "nofile", "Soft",
                                                       (json_int_t)o->nofile, "Hard", (json_int_t)o->nofile));
    json_object_set_new(host, "Init", json_boolean(o->init));
    if (o->runtime)
        json_object_set_new(host, "Runtime", json_string(o->runtime));
    json_object_set_new(host, "IpcMode", json_string("private"));
    json_object_set_new(host, "RestartPolicy", json_pack("{s:s}", "Name", "no"));
    /* A bounded log on disk, and one the logs endpoint can always read. */
    json_object_set_new(host, "LogConfig", json_pack("{s:s, s:{s:s, s:s}}", "Type", "json-file", "Config",
                                                     "max-size", "1m", "max-file", "1"));

    json_object_set_new(body, "Image", json_string(image));
    json_object_set_new(body, "Cmd", cmd);
    json_object_set_new(body, "Env", env);
    json_object_set_new(body, "User", json_string(user));
    json_object_set_new(body, "WorkingDir", json_string(o->workdir_mount));
    json_object_set_new(body, "Labels", labels);
    json_object_set_new(body, "AttachStdin", json_false());
    json_object_set_new(body, "AttachStdout", json_false());
    json_object_set_new(body, "AttachStderr", json_false());
    json_object_set_new(body, "Tty", json_false());
    json_object_set_new(body, "OpenStdin", json_false());
    json_object_set_new(body, "HostConfig", host);
    return body;
}

