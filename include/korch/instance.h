/*  A korch instance: one running korch process, named, holding a lock.
 *
 *  Containers and runtime dirs are labelled with the instance that owns
 *  them. An instance is alive while its process holds an flock on
 *  {runtime base}/instances/{name}.lock; the kernel drops the lock when the
 *  process dies, however it dies (kill -9 included). A later korch can then
 *  tell the orphans of a dead instance from the kernels of a live one, and
 *  re-adopt its own (same name) or remove the others.
 *
 *  The runtime base is $KORCH_RUNTIME_DIR, else $XDG_RUNTIME_DIR/korch, else
 *  /tmp/korch-{uid}; it is private (0700) and holds a directory per kernel.
 */
#ifndef KORCH_INSTANCE_H
#define KORCH_INSTANCE_H

#include <stdbool.h>
#include <stddef.h>
#include "korch/error.h"

typedef struct korch_instance korch_instance_t;

/* Take the instance name (NULL = a new random "k-xxxxxxxx"). Fails with a
   clear error when another live korch holds that name. */
korch_instance_t *korch_instance_new(const char *name, korch_err_t *err);
void korch_instance_destroy(korch_instance_t **self);

const char *korch_instance_name(const korch_instance_t *self);

/* Is some process holding the named instance right now? */
bool korch_instance_alive(const char *name);

/* Remove the lock file of an instance that is gone (no-op if alive). */
void korch_instance_forget(const char *name);

/* The runtime base directory, created (0700) and checked to be private. */
korch_rc_t korch_runtime_base(char *buf, size_t len, korch_err_t *err);

/* The scope of a runtime base (NULL: korch_runtime_base's): the identity
   of its lock domain, "rt-" and 16 lowercase hex digits (KORCH_SCOPE_LEN
   bytes with the NUL). A random id made on first use and kept in
   {base}/scope (0600, never through a link): every korch that sees those
   instance locks sees that file, and no other does. Whatever korch makes
   outside its machine or its base carries it (the korch.scope label of
   containers, swarm services and secrets; the cgroup directory): a sweep or
   an adoption acts only on objects of its own scope, the only ones whose
   instances its locks can judge. The id follows the directory, not the
   machine: a korch rescheduled elsewhere with the same runtime volume is
   the same domain; a copy of a runtime dir shares the id (never copy one
   or bake one into an image). Fails when the base is unusable or its
   scope file is not korch's (then it says so; korch never rewrites it). */
#define KORCH_SCOPE_LEN 20
korch_rc_t korch_runtime_scope(const char *base, char *buf, size_t len, korch_err_t *err);

#endif
