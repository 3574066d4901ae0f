/*  What the container backends (docker/, swarm/) share: a kernelspec's
 *  argv as a container's command, the kernel's image, and the engine's
 *  multiplexed log stream. Private to src/launcher; no state, any thread.
 */
#ifndef KORCH_LAUNCHER_CONTAINER_H
#define KORCH_LAUNCHER_CONTAINER_H

#include <jansson.h>
#include <stddef.h>
#include "korch/kernelspec.h"

/* Append the kernelspec's argv to cmd (borrowed) as a container runs it:
   argv[0] by basename (the host's interpreter path means nothing in the
   image, whose PATH finds it), every "{connection_file}" replaced by
   conn_in. false on no memory (cmd then holds part of it). */
bool korch_container_argv(json_t *cmd, const korch_kernelspec_t *spec, const char *conn_in);

/* The image into buf: opt when given, else the kernelspec's
   metadata.korch.image, else the convention korch-kernel-<name>:latest. */
void korch_container_image(const char *opt, const korch_kernelspec_t *spec, char *buf, size_t len);

/* The last cap bytes of a container's log as text into out (not
   terminated): docker multiplexes a non-tty container's output as frames
   of an 8-byte header {stream, 0, 0, 0, size as big-endian uint32} and
   size bytes; an unframed stream is taken as it is. Returns the length. */
size_t korch_container_demux(const unsigned char *in, size_t len, char *out, size_t cap);

#endif
