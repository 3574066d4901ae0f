/*  srv_fjournal: what korch serve itself did to a confined session's work
 *  dir (uploads, deletes), laid over the agent's latest listing of it.
 *
 *  A container's or a sandbox's work dir is not walked by the server: the
 *  session's agent lists it from inside the kernel after each step and
 *  keeps that listing in the session dir (workdir.json, stamped with the
 *  time its walk began, korch_workdir_clock_ms). The files a client PUTs or
 *  DELETEs between two such walks would be missing from (or still in) the
 *  listing until the next step, so the server notes each of them here with
 *  the time it was done. The listing a client gets is the agent's with
 *  every note newer than that walk laid over it; a note older than the
 *  walk is what the walk saw already and is dropped. The notes are kept in
 *  the session dir too (fjournal.json, korch's, not the kernel's) so a
 *  restarted server lists the same.
 *
 *  Bounded: at most SRV_FJOURNAL_MAX notes (the oldest go first), the files
 *  read at most a few MiB. Main thread only; one owner.
 */
#ifndef KORCH_SRV_FJOURNAL_H
#define KORCH_SRV_FJOURNAL_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#define SRV_FJOURNAL_MAX 2000

typedef struct srv_fjournal srv_fjournal_t;

/* The journal of the session in dir (copied), loaded from its
   fjournal.json when there is one (a damaged file is an empty journal).
   NULL only when out of memory. */
srv_fjournal_t *srv_fjournal_new(const char *dir);
void srv_fjournal_destroy(srv_fjournal_t **j);

/* path (a checked relative path) was written with size bytes, or removed,
   now: noted and saved. */
void srv_fjournal_put(srv_fjournal_t *j, const char *path, int64_t size);
void srv_fjournal_delete(srv_fjournal_t *j, const char *path);

/* The work dir as the agent last listed it (workdir.json; none yet: empty)
   with the newer notes laid over it: a new array [{path, size}] sorted by
   path. Notes the listing made stale are forgotten. */
json_t *srv_fjournal_listing(srv_fjournal_t *j);

#endif
