/*  A small Docker Engine API client: one HTTP request, a JSON body in, a
 *  status and a JSON reply out, over libcurl.
 *
 *  Where the engine is: $DOCKER_HOST as the docker CLI reads it
 *  (unix:///path, tcp://host:port), default unix:///var/run/docker.sock.
 *  With tcp://, TLS is used when DOCKER_TLS_VERIFY is non-empty (the server
 *  is verified against $DOCKER_CERT_PATH/ca.pem) or DOCKER_CERT_PATH is set
 *  (client certificate cert.pem + key.pem from that directory).
 *
 *  Paths are unversioned ("/containers/json"): the engine answers with its
 *  own API version, and korch only uses fields that exist since API 1.25.
 *
 *  Two ways to call, one client:
 *  - korch_docker_request*: blocking, for the CLI's one-shot use and tests
 *    (never from a loop handler). One curl easy handle, so the connection is
 *    reused. Blocks for at most the timeout.
 *  - korch_docker_request*_async: on one libcurl multi handle whose sockets
 *    and timer live on the korch_loop given to korch_docker_new. Nothing
 *    blocks; done is called once, on the loop, never from inside the call
 *    that started the request and never after korch_op_cancel. Long waits
 *    (POST /containers/{id}/wait) are ordinary requests: timeout_ms 0 in
 *    korch_docker_async_opts_t means none.
 *  Not thread-safe: a client belongs to the thread running its loop.
 */
#ifndef KORCH_DOCKER_API_H
#define KORCH_DOCKER_API_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include "korch/error.h"
#include "korch/op.h"
#include "korch/loop.h"

typedef struct korch_docker korch_docker_t;

/* One answer from the engine. Owned by the caller; release with
   korch_docker_reply_clear. */
typedef struct {
    long status;        /* HTTP status (200, 404, ...) */
    json_t *json;       /* the body parsed as JSON, new reference; NULL if not JSON or empty */
    char *body;         /* the raw body, NUL-terminated, malloc'd (never NULL after a reply) */
    size_t body_len;
    json_t *path_stat;  /* the archive endpoints' X-Docker-Container-Path-Stat header, decoded
                           ({"name", "size", "mode" (Go os.FileMode), "mtime", "linkTarget"});
                           new reference, NULL when absent */
} korch_docker_reply_t;

#define KORCH_DOCKER_DEFAULT_HOST "unix:///var/run/docker.sock"
#define KORCH_DOCKER_MAX_REPLY (8u << 20)   /* default reply bound, bytes */

/* A client for host (NULL = $DOCKER_HOST, else the default socket) whose
   asynchronous requests run on loop (NULL: blocking requests only). Does not
   connect yet. NULL + err for an unsupported or malformed host (ssh://).
   Destroying it cancels its pending requests (their done is not called). */
korch_docker_t *korch_docker_new(korch_loop_t *loop, const char *host, korch_err_t *err);

void korch_docker_destroy(korch_docker_t **d);

/* Where the engine is, for messages: "/var/run/docker.sock" or "tcp://h:2376". */
const char *korch_docker_where(const korch_docker_t *d);

/* The unix socket path when the engine is on one, else NULL (tcp). */
const char *korch_docker_socket_path(const korch_docker_t *d);

/* Limits for later requests: whole-request timeout (default 30000 ms) and
   the largest reply kept (default KORCH_DOCKER_MAX_REPLY). */
void korch_docker_set_timeout_ms(korch_docker_t *d, long timeout_ms);
void korch_docker_set_max_reply(korch_docker_t *d, size_t max_bytes);

/* Send method path (with its query string) and body (borrowed; NULL = no
   body). Returns KORCH_OK whenever the engine answered, whatever the HTTP
   status: look at reply->status. Fails with KORCH_E_DOCKER when the engine
   cannot be reached ("cannot reach docker at '/var/run/docker.sock':
   connection refused (is dockerd running?)"), KORCH_E_TIMEOUT, or
   KORCH_E_TOOBIG when the reply exceeds the bound. reply is cleared first
   and is empty on failure. */
korch_rc_t korch_docker_request(korch_docker_t *d, const char *method, const char *path, const json_t *body,
                                korch_docker_reply_t *reply, korch_err_t *err);

/* The same with a raw body of len bytes (borrowed) sent as content_type, for
   the archive endpoints (PUT /containers/{id}/archive takes a tar). method
   "HEAD" asks for the headers only. */
korch_rc_t korch_docker_request_raw(korch_docker_t *d, const char *method, const char *path,
                                    const char *content_type, const void *data, size_t len,
                                    korch_docker_reply_t *reply, korch_err_t *err);

void korch_docker_reply_clear(korch_docker_reply_t *reply);

/* ------------------------------------------------------------ asynchronous */

/* The engine answered (rc KORCH_OK, whatever the HTTP status: look at
   reply->status) or not (KORCH_E_DOCKER, KORCH_E_TIMEOUT, KORCH_E_TOOBIG;
   reply empty). reply is the callee's: it is cleared after done returns
   (take reply->json with json_incref, or steal reply->body and set it NULL). */
typedef void(korch_docker_done_fn)(korch_rc_t rc, const korch_err_t *err, korch_docker_reply_t *reply, void *arg);

typedef struct {
    long timeout_ms;            /* whole request; 0 = none (POST /wait), < 0 = the client's default */
    size_t max_reply;           /* 0 = the client's bound */
    bool take;                  /* raw: data is malloc'd and becomes the request's, even when the
                                   call fails (no copy of a 64 MiB archive) */
} korch_docker_async_opts_t;

/* Send method path with a JSON body (copied; NULL = none). NULL + err when
   it cannot even be started (no loop, out of memory). opts may be NULL. */
korch_op_t *korch_docker_request_async(korch_docker_t *d, const char *method, const char *path, const json_t *body,
                                       const korch_docker_async_opts_t *opts, korch_docker_done_fn *done, void *arg,
                                       korch_err_t *err);

/* The same with a raw body of len bytes (copied, then streamed: archive
   uploads up to 64 MiB never stall the loop) sent as content_type; method
   "HEAD" asks for the headers only. */
korch_op_t *korch_docker_request_raw_async(korch_docker_t *d, const char *method, const char *path,
                                           const char *content_type, const void *data, size_t len,
                                           const korch_docker_async_opts_t *opts, korch_docker_done_fn *done,
                                           void *arg, korch_err_t *err);

/* Never destroy the client from inside a done callback (korch_docker_destroy
   cancels what is pending: call it outside handlers, at exit). */

/* How many asynchronous requests are in flight (for tests and metrics). */
size_t korch_docker_pending(const korch_docker_t *d);

/* The engine's own error text for a failed reply ({"message": ...}), else
   the body, else "HTTP <status>". Borrowed from reply. */
const char *korch_docker_reply_message(const korch_docker_reply_t *reply);

/* GET /_ping: KORCH_OK when the engine answers "OK". */
korch_rc_t korch_docker_ping(korch_docker_t *d, korch_err_t *err);

/* GET /version as a new object ({"Version": "20.10.24", "ApiVersion": ...}). */
json_t *korch_docker_version(korch_docker_t *d, korch_err_t *err);

/* Inspect an image (GET /images/{name}/json) as a new object. A missing image
   is KORCH_E_NOTFOUND: "image 'X' not found (build it with: make image)". */
json_t *korch_docker_image_inspect(korch_docker_t *d, const char *image, korch_err_t *err);

/* Percent-encode s for a query string into a new string (NULL on ENOMEM). */
char *korch_docker_escape(korch_docker_t *d, const char *s);

#endif
