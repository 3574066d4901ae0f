/*  Kernelspecs, found the way Jupyter finds them.
 *
 *  Search order: $KORCH_KERNELSPEC_PATH (colon separated), korch's own
 *  kernelspec/ (beside the binary: ../kernelspec, ../share/korch/kernelspec),
 *  then each $JUPYTER_PATH entry + /kernels, $JUPYTER_DATA_DIR/kernels,
 *  ~/.local/share/jupyter/kernels, /usr/local/share/jupyter/kernels,
 *  /usr/share/jupyter/kernels. A kernelspec is a directory named after the
 *  kernel holding kernel.json. The first directory that has the name wins.
 */
#ifndef KORCH_KERNELSPEC_H
#define KORCH_KERNELSPEC_H

#include <stdbool.h>
#include <jansson.h>
#include "korch/error.h"

typedef struct {
    char *name;             /* directory name, e.g. "python3" */
    char *dir;              /* absolute directory holding kernel.json */
    char **argv;            /* NULL-terminated, with "{connection_file}" unexpanded */
    char *display_name;
    char *language;
    bool interrupt_message; /* interrupt_mode "message" (else "signal") */
    json_t *env;            /* object of strings, owned; may be empty */
    json_t *json;           /* the whole kernel.json, owned */
} korch_kernelspec_t;

/* Find a kernelspec by name along the search path. NULL + err when absent. */
korch_kernelspec_t *korch_kernelspec_find(const char *name, korch_err_t *err);

/* Load the kernelspec in dir (which holds kernel.json). */
korch_kernelspec_t *korch_kernelspec_load(const char *dir, const char *name, korch_err_t *err);

/* All kernelspecs on the search path: a new object {name: {name, spec, resources}}
   in the shape of Jupyter Server's GET /api/kernelspecs. */
json_t *korch_kernelspec_list(void);

/* Directories searched, in order, as a new array of strings. */
json_t *korch_kernelspec_path(void);

/* Its resources as jupyter_server lists them (kernel.js, kernel.css,
   logo-*: {"logo-32x32": "/kernelspecs/NAME/logo-32x32.png", ...}), new. */
json_t *korch_kernelspec_resources(const korch_kernelspec_t *spec);

/* Whether file may be one of a kernelspec's resources (by its name). */
bool korch_kernelspec_resource_name_ok(const char *file);

/* Read a resource (a regular file of the spec's dir, no symlink, at most
   max bytes) into *data (new, free() it), its length in *len.
   KORCH_E_NOTFOUND when there is no such resource. */
korch_rc_t korch_kernelspec_resource_read(const korch_kernelspec_t *spec, const char *file, size_t max, char **data,
                                          size_t *len, korch_err_t *err);

void korch_kernelspec_destroy(korch_kernelspec_t **spec);

#endif
