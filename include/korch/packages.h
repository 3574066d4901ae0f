/*  Packages a kernel may install, from the sources the operator allows
 *  (docs/files.md "Packages"): a wheelhouse directory, read-only in the
 *  kernel, and/or a package index reached through korch, which forwards
 *  only to allow-listed hosts (src/launcher/pkgfwd.h); the kernel keeps no
 *  network of its own.
 *
 *  With packages set, a Python kernel (ipykernel) of a launcher with
 *  KORCH_LAUNCHER_PACKAGES starts through a bootstrap (src/launcher/
 *  packages.c) that makes its own environment in the work dir
 *  (.korch-env: a venv with the system's packages visible, so PEP 668 does
 *  not apply and Debian's packages still import), points pip at the
 *  allowed sources only, and makes a failed %pip an error of its cell (so
 *  `korch exec` exits 1). Other kernels start as they are.
 *
 *  Threading: set it before the launcher starts kernels, on its thread.
 */
#ifndef KORCH_PACKAGES_H
#define KORCH_PACKAGES_H

#include "korch/error.h"

/* Where a confined kernel sees the wheelhouse. */
#define KORCH_PACKAGES_WHEELHOUSE "/korch/wheelhouse"
/* The kernel's environment, in its work dir (a hidden name: not listed). */
#define KORCH_PACKAGES_ENV ".korch-env"

/* Strings are borrowed (korch_launcher_set_packages copies them). */
typedef struct {
    const char *wheelhouse; /* host dir of wheels; NULL = none */
    const char *index_url;  /* a PEP 503 simple index, http:// or https://; NULL = none */
    const char *hosts;      /* comma-separated hosts ("host": any port, "host:port": that one) korch
                               forwards to; NULL = the index's host and port. Links of the index to
                               other hosts need them named here */
} korch_packages_t;

#endif
