/*  A kernel's taint: once code from the agent has run in it (or a client
 *  asked), nothing korch relays from it may run script in a client's
 *  origin (korch/neutralise.h), until it restarts. Not a public API.
 *
 *  The relay (kernels.c) owns one per kernel, filters every message the
 *  kernel sends through it and tells clients when the taint changes: an
 *  IOPub message of korch's own, msg_type "korch_untrusted", content
 *  {"untrusted": bool, "reason": "..."}, with an empty parent header (what
 *  Jupyter clients ignore; korch's JupyterLab extension shows it). Clients
 *  get it when it changes, when they attach to a tainted kernel and after
 *  each kernel_info_reply of a tainted kernel.
 *
 *  Threading: the loop's thread only.
 */
#ifndef KORCH_SRV_TAINT_H
#define KORCH_SRV_TAINT_H

#include <jansson.h>
#include <stdbool.h>

#include "korch/kernel.h"
#include "korch/msg.h"
#include "korch/neutralise.h"

typedef struct srv_taint srv_taint_t;

/* For the kernel kernel_id (named in the note that replaces what went).
   NULL when out of memory. */
srv_taint_t *srv_taint_new(const char *kernel_id);
void srv_taint_destroy(srv_taint_t **t);

/* Taint it (why: who, e.g. "agent session S"). True when it was not. */
bool srv_taint_set(srv_taint_t *t, const char *why);
/* Lift it (a restart; or the kernel's owner, deliberately). True when it was on. */
bool srv_taint_clear(srv_taint_t *t);
bool srv_taint_on(const srv_taint_t *t);

/* {"untrusted": bool, "untrusted_reason"?: str, "untrusted_since"?: date}
   merged into model (borrowed). */
void srv_taint_model(const srv_taint_t *t, json_t *model);

/* The content of the "korch_untrusted" IOPub message of its state now
   (new; NULL when out of memory). */
json_t *srv_taint_notice(const srv_taint_t *t);

/* A message of the kernel's on channel ch, before clients get it:
   KORCH_NEUT_KEEP (as it is), KORCH_NEUT_DROP (nobody gets it), or
   KORCH_NEUT_CHANGED with *out the message to send instead (new: the same
   header, parents, metadata and buffers, its content made inert). Every
   message goes through here, tainted or not (widget comms are
   remembered). msg's content may be NULL (an IOPub message korch did not
   read): it is parsed from raw's content frame when needed; a tainted
   kernel's message that cannot be checked is dropped. */
korch_neut_rc_t srv_taint_filter(srv_taint_t *t, korch_channel_t ch, const korch_msg_t *msg, korch_msg_raw_t *raw,
                                 korch_msg_t **out);

/* Messages changed or dropped so far. */
uint64_t srv_taint_neutralised(const srv_taint_t *t);

#endif
