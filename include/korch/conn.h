/*  Kernel connection info: the five channels, the transport and the key.
 *
 *  The same fields as Jupyter's connection file (jupyter_client
 *  connect.write_connection_file). With transport "ipc" the "ports" are small
 *  integers and the endpoint is ipc://{ip}-{port}, {ip} being a path prefix.
 *  The key is the ASCII text of 32 random bytes in hex; the HMAC uses those
 *  ASCII bytes as its key, as Jupyter does with its uuid keys.
 */
#ifndef KORCH_CONN_H
#define KORCH_CONN_H

#include <limits.h>
#include <stdbool.h>
#include <sys/types.h>

#include <jansson.h>
#include "korch/error.h"

typedef enum { KORCH_CH_SHELL, KORCH_CH_IOPUB, KORCH_CH_STDIN, KORCH_CH_CONTROL, KORCH_CH_HB, KORCH_CH__COUNT } korch_channel_t;

typedef struct {
    char transport[8];          /* "tcp" or "ipc" */
    char ip[PATH_MAX];          /* tcp: address; ipc: path prefix */
    int port[KORCH_CH__COUNT];  /* indexed by korch_channel_t */
    char key[256];              /* HMAC key text; "" = unsigned messages */
    char signature_scheme[32];  /* "hmac-sha256" */
    char kernel_name[128];      /* informational */
} korch_conn_t;

/* Name of a channel as Jupyter spells it ("shell", "iopub", ...). */
const char *korch_channel_name(korch_channel_t ch);

/* Fill conn with a fresh random key and tcp ports that are free on ip now. */
korch_rc_t korch_conn_init_tcp(korch_conn_t *conn, const char *ip, korch_err_t *err);

/* Fill conn with a fresh random key and ipc endpoints {prefix}-1 .. -5. */
korch_rc_t korch_conn_init_ipc(korch_conn_t *conn, const char *prefix, korch_err_t *err);

/* Read a connection file written by Jupyter or by korch: a regular file of
   at most 64 KiB, opened without blocking (a FIFO is an error, not a hang). */
korch_rc_t korch_conn_load(korch_conn_t *conn, const char *path, korch_err_t *err);

/* The same, refusing a symlink as the last component: for files in a
   directory a kernel can write (a container's runtime dir). */
korch_rc_t korch_conn_load_nofollow(korch_conn_t *conn, const char *path, korch_err_t *err);

/* Write conn as a Jupyter connection file, mode 0600, atomically, safe in a
   directory a kernel can write (fsutil.h: never through a planted link). */
korch_rc_t korch_conn_save(const korch_conn_t *conn, const char *path, korch_err_t *err);

/* The same, the file given to uid:gid (on the fd) when give. */
korch_rc_t korch_conn_save_as(const korch_conn_t *conn, const char *path, bool give, uid_t uid, gid_t gid,
                              korch_err_t *err);

/* conn as the JSON of a connection file (new reference; NULL on ENOMEM):
   for writing it somewhere other than a path, e.g. an fd. */
json_t *korch_conn_json(const korch_conn_t *conn);

/* "tcp://127.0.0.1:5555" or "ipc:///run/x/kernel-1" into buf. */
void korch_conn_endpoint(const korch_conn_t *conn, korch_channel_t ch, char *buf, size_t len);

#endif
