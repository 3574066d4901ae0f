/*  A container's files and signals through the Engine API of the engine
 *  that runs it (ctfiles.c): the container backends' put_file / get_file
 *  and signal, docker's
 *  (its one engine) and swarm's (the engine of the node that runs the
 *  kernel's task) alike, so a file reaches any kernel, whatever its
 *  language. Private to src/launcher.
 *
 *  Names are relative to the work dir (the caller checked them with
 *  korch_safe_relpath); every directory on the way is checked to be one and
 *  not a symbolic link, and a link is never followed or read.
 */
#ifndef KORCH_LAUNCHER_CTFILES_H
#define KORCH_LAUNCHER_CTFILES_H

#include <stdbool.h>
#include <stddef.h>
#include "korch/docker_api.h"
#include "korch/launcher.h"

/* Where the files go: borrowed for the call (the async ops copy id and
   workdir; api must outlive them: the launcher cancels its ops first). */
typedef struct {
    korch_docker_t *api;    /* the engine that runs the container */
    const char *id;         /* the container's id */
    const char *workdir;    /* the kernel's work dir inside it (absolute) */
    unsigned uid, gid;      /* the owner of what a put writes (the kernel's) */
} korch_ctfile_at_t;

/* On the loop: finish op (korch_op_finish / korch_op_finish_file) once the
   engine has answered; data is copied. An error now: the op is not taken. */
korch_rc_t korch_ctfile_put(const korch_ctfile_at_t *at, const char *name, const void *data, size_t len,
                            korch_op_t *op, korch_err_t *err);
korch_rc_t korch_ctfile_get(const korch_ctfile_at_t *at, const char *name, size_t max, korch_op_t *op,
                            korch_err_t *err);

/* The same, blocking (a worker thread's put_file_now / get_file_now):
   *data malloc'd and NUL-terminated. */
korch_rc_t korch_ctfile_put_now(const korch_ctfile_at_t *at, const char *name, const void *data, size_t len,
                                korch_err_t *err);
korch_rc_t korch_ctfile_get_now(const korch_ctfile_at_t *at, const char *name, size_t max, char **data,
                                size_t *len, korch_err_t *err);

/* POST /containers/{id}/kill?signal=sig on api; op finished on the answer
   (KORCH_E_DIED when the container is not running). */
korch_rc_t korch_ct_signal(korch_docker_t *api, const char *id, int sig, korch_op_t *op, korch_err_t *err);

#endif
