/*  Connection info and Jupyter connection files: the endpoints and key of a
 *  kernel, plain data of the wire layer (the launchers write them, the
 *  kernel client reads them). */
#include "korch/conn.h"
#include "korch/fsutil.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <netinet/in.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const s_names[KORCH_CH__COUNT] = {"shell", "iopub", "stdin", "control", "hb"};

const char *korch_channel_name(korch_channel_t ch)
{
    return (unsigned)ch < KORCH_CH__COUNT ? s_names[ch] : "?";
}

static korch_rc_t s_random_key(korch_conn_t *conn, korch_err_t *err)
{
    unsigned char raw[32];
    if (RAND_bytes(raw, sizeof raw) != 1)
        return korch_err_set(err, KORCH_E_IO, "cannot make a connection key: openssl's random generator failed");
    for (size_t i = 0; i < sizeof raw; i++)
        snprintf(conn->key + 2 * i, 3, "%02x", raw[i]);
    snprintf(conn->signature_scheme, sizeof conn->signature_scheme, "hmac-sha256");
    return KORCH_OK;
}

korch_rc_t korch_conn_init_tcp(korch_conn_t *conn, const char *ip, korch_err_t *err)
{
    memset(conn, 0, sizeof *conn);
    snprintf(conn->transport, sizeof conn->transport, "tcp");
    snprintf(conn->ip, sizeof conn->ip, "%s", ip ? ip : "127.0.0.1");
    korch_rc_t rc = s_random_key(conn, err);
    if (rc)
        return rc;
    /* Hold all five sockets open while choosing so no port is picked twice;
       like jupyter_client, the ports may still be taken before the kernel binds. */
    int fds[KORCH_CH__COUNT];
    for (int i = 0; i < KORCH_CH__COUNT; i++)
        fds[i] = -1;
    struct sockaddr_in sa = {.sin_family = AF_INET};
    if (inet_pton(AF_INET, conn->ip, &sa.sin_addr) != 1) {
        rc = korch_err_set(err, KORCH_E_INVALID, "cannot use ip '%s': not an IPv4 address", conn->ip);
        goto out;
    }
    for (int i = 0; i < KORCH_CH__COUNT; i++) {
        fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        socklen_t len = sizeof sa;
        sa.sin_port = 0;
        if (fds[i] < 0 || bind(fds[i], (struct sockaddr *)&sa, sizeof sa) != 0 ||
            getsockname(fds[i], (struct sockaddr *)&sa, &len) != 0) {
            rc = korch_err_set(err, KORCH_E_IO, "cannot find a free port on '%s': %s", conn->ip, strerror(errno));
            goto out;
        }
        conn->port[i] = ntohs(sa.sin_port);
    }
out:
    for (int i = 0; i < KORCH_CH__COUNT; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    return rc;
}

korch_rc_t korch_conn_init_ipc(korch_conn_t *conn, const char *prefix, korch_err_t *err)
{
    memset(conn, 0, sizeof *conn);
    snprintf(conn->transport, sizeof conn->transport, "ipc");
    /* Unix socket paths are limited to 107 bytes; leave room for "-N". */
    if (strlen(prefix) > 100)
        return korch_err_set(err, KORCH_E_INVALID, "ipc path prefix '%s' is too long for a unix socket", prefix);
    snprintf(conn->ip, sizeof conn->ip, "%s", prefix);
    for (int i = 0; i < KORCH_CH__COUNT; i++)
        conn->port[i] = i + 1;
    return s_random_key(conn, err);
}

static const char *const s_port_keys[KORCH_CH__COUNT] = {"shell_port", "iopub_port", "stdin_port", "control_port",
                                                         "hb_port"};

/* Connection files are small; a bigger one is not a connection file. */
#define S_CONN_MAX (64 * 1024)

static korch_rc_t s_load(korch_conn_t *conn, const char *path, bool nofollow, korch_err_t *err)
{
    memset(conn, 0, sizeof *conn);
    json_error_t jerr;
    korch_err_t rerr = {0};
    size_t len = 0;
    /* Never blocking (a FIFO of that name), never a special file. */
    char *text = korch_fs_read(path, S_CONN_MAX, nofollow, &len, &rerr);
    if (!text)
        return korch_err_set(err, rerr.rc == KORCH_E_NOTFOUND ? KORCH_E_NOTFOUND : KORCH_E_INVALID,
                             "cannot read connection file '%s': %s", path,
                             rerr.rc == KORCH_E_NOTFOUND ? strerror(ENOENT) : rerr.msg);
    json_t *j = json_loadb(text, len, 0, &jerr);
    free(text);
    if (!j)
        return korch_err_set(err, KORCH_E_INVALID, "cannot read connection file '%s': %s", path, jerr.text);
    korch_rc_t rc = KORCH_OK;
    const char *transport = json_string_value(json_object_get(j, "transport"));
    const char *ip = json_string_value(json_object_get(j, "ip"));
    const char *key = json_string_value(json_object_get(j, "key"));
    const char *scheme = json_string_value(json_object_get(j, "signature_scheme"));
    const char *name = json_string_value(json_object_get(j, "kernel_name"));
    snprintf(conn->transport, sizeof conn->transport, "%s", transport ? transport : "tcp");
    snprintf(conn->ip, sizeof conn->ip, "%s", ip ? ip : "127.0.0.1");
    snprintf(conn->signature_scheme, sizeof conn->signature_scheme, "%s", scheme ? scheme : "hmac-sha256");
    snprintf(conn->kernel_name, sizeof conn->kernel_name, "%s", name ? name : "");
    if (key && strlen(key) >= sizeof conn->key) {
        rc = korch_err_set(err, KORCH_E_INVALID, "connection file '%s': key is too long", path);
        goto out;
    }
    snprintf(conn->key, sizeof conn->key, "%s", key ? key : "");
    if (strcmp(conn->signature_scheme, "hmac-sha256") != 0) {
        rc = korch_err_set(err, KORCH_E_INVALID, "connection file '%s': signature_scheme '%s' is not supported (use hmac-sha256)",
                           path, conn->signature_scheme);
        goto out;
    }
    if (strcmp(conn->transport, "tcp") != 0 && strcmp(conn->transport, "ipc") != 0) {
        rc = korch_err_set(err, KORCH_E_INVALID, "connection file '%s': transport '%s' is not tcp or ipc", path,
                           conn->transport);
        goto out;
    }
    for (int i = 0; i < KORCH_CH__COUNT; i++) {
        json_t *p = json_object_get(j, s_port_keys[i]);
        if (!json_is_integer(p) || json_integer_value(p) <= 0 || json_integer_value(p) > 65535) {
            rc = korch_err_set(err, KORCH_E_INVALID, "connection file '%s': '%s' is missing or not a port", path,
                               s_port_keys[i]);
            goto out;
        }
        conn->port[i] = (int)json_integer_value(p);
    }
out:
    json_decref(j);
    return rc;
}

korch_rc_t korch_conn_load(korch_conn_t *conn, const char *path, korch_err_t *err)
{
    return s_load(conn, path, false, err);
}

korch_rc_t korch_conn_load_nofollow(korch_conn_t *conn, const char *path, korch_err_t *err)
{
    return s_load(conn, path, true, err);
}

korch_rc_t korch_conn_save_as(const korch_conn_t *conn, const char *path, bool give, uid_t uid, gid_t gid,
                              korch_err_t *err)
{
    json_t *j = korch_conn_json(conn);
    if (!j)
        return korch_err_set(err, KORCH_E_NOMEM, "out of memory");
    korch_rc_t rc = KORCH_OK;
    char *text = json_dumps(j, JSON_INDENT(1) | JSON_SORT_KEYS);
    json_decref(j);
    if (!text)
        return korch_err_set(err, KORCH_E_NOMEM, "out of memory");
    /* The directory may be the kernel's (a container's runtime dir): a
       random temp name, O_EXCL|O_NOFOLLOW, fchown on the fd, renameat. */
    korch_fs_opts_t o = {.mode = 0600, .chown = give, .uid = uid, .gid = gid};
    korch_err_t e = {0};
    if (korch_fs_write(path, text, strlen(text), &o, &e) != KORCH_OK)
        rc = korch_err_set(err, e.rc, "cannot write connection file '%s': %s", path, e.msg);
    free(text);
    return rc;
}

korch_rc_t korch_conn_save(const korch_conn_t *conn, const char *path, korch_err_t *err)
{
    return korch_conn_save_as(conn, path, false, 0, 0, err);
}

json_t *korch_conn_json(const korch_conn_t *conn)
{
    json_t *j = json_pack("{s:s, s:s, s:s, s:s, s:s}", "transport", conn->transport, "ip", conn->ip, "key",
                          conn->key, "signature_scheme", conn->signature_scheme[0] ? conn->signature_scheme : "hmac-sha256",
                          "kernel_name", conn->kernel_name);
    for (int i = 0; j && i < KORCH_CH__COUNT; i++)
        json_object_set_new(j, s_port_keys[i], json_integer(conn->port[i]));
    return j;
}

void korch_conn_endpoint(const korch_conn_t *conn, korch_channel_t ch, char *buf, size_t len)
{
    if (strcmp(conn->transport, "ipc") == 0)
        snprintf(buf, len, "ipc://%s-%d", conn->ip, conn->port[ch]);
    else
        snprintf(buf, len, "tcp://%s:%d", conn->ip, conn->port[ch]);
}
