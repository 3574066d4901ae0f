/*  The package forwarder: the one way out a confined kernel has, to the
 *  package hosts the operator allows (docs/files.md "Packages").
 *
 *  A unix socket in the kernel's runtime dir (korch-pkg.sock, which the
 *  kernel sees at its runtime mount), served by a thread of its own: it
 *  speaks the HTTP proxy protocol pip speaks (RFC 9110 9.3.6 CONNECT
 *  host:port for https, an absolute-form GET/HEAD for http, RFC 9112 3.2.2)
 *  and passes a request on only when its host is on the allow-list; any
 *  other host, method or form is answered 403 with a reason phrase that
 *  says which hosts are allowed and who sets them (pip prints the reason
 *  phrase). The kernel's side (its bootstrap, packages.c) relays pip's
 *  proxy on its own 127.0.0.1 to this socket: the kernel has no route of
 *  its own, only this filter.
 *
 *  Bounded: a request head of at most 16 KiB, max_bytes each way per
 *  connection, 30 s without a byte ends a connection; one connection at a
 *  time (a kernel that holds one only delays its own installs).
 *
 *  Threading: new and destroy on the owner's thread (the launcher's loop);
 *  never blocking there: the thread binds the socket, resolves names and
 *  connects. destroy only tells the thread to end; it ends by itself
 *  within a poll round (or a name lookup) and frees what it holds.
 */
#ifndef KORCH_LAUNCHER_PKGFWD_H
#define KORCH_LAUNCHER_PKGFWD_H

#include <stddef.h>
#include <stdint.h>
#include "korch/error.h"

#define KORCH_PKGFWD_SOCK "korch-pkg.sock"

typedef struct korch_pkgfwd korch_pkgfwd_t;

/* Serve dir/KORCH_PKGFWD_SOCK (dir: a runtime dir korch made; a name
   already there is replaced, never followed) for the hosts of the
   comma-separated list hosts ("host" any port, "host:port" that one; case
   does not matter). NULL + err when the thread cannot start. */
korch_pkgfwd_t *korch_pkgfwd_new(const char *dir, const char *hosts, int64_t max_bytes, korch_err_t *err);
void korch_pkgfwd_destroy(korch_pkgfwd_t **f);

/* Is host:port allowed by the comma-separated list hosts? (the rule above) */
int korch_pkgfwd_allowed(const char *hosts, const char *host, int port);

#endif
