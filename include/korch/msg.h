/*  A Jupyter message (messaging spec 5.3).
 *
 *  On the wire (spec, "The Wire Protocol"):
 *      [identities..., b'<IDS|MSG>', signature, header, parent_header,
 *       metadata, content, buffers...]
 *  IOPub messages carry their topic as the only identity frame.
 *
 *  The four JSON parts are owned by the message; identities and buffers are
 *  czmq frames in zmsg_t lists owned by the message. Build one with
 *  korch_msg_new, send it with korch_session_send (which consumes it).
 */
#ifndef KORCH_MSG_H
#define KORCH_MSG_H

#include <czmq.h>
#include <jansson.h>

typedef struct {
    zmsg_t *identities;     /* routing frames before the delimiter; may be empty, never NULL */
    json_t *header;         /* object: msg_id, session, username, date, msg_type, version */
    json_t *parent_header;  /* object, {} when none */
    json_t *metadata;       /* object */
    json_t *content;        /* object */
    zmsg_t *buffers;        /* extra binary frames; may be empty, never NULL */
} korch_msg_t;

/* A new message of msg_type with the given content (stolen, even on failure;
   NULL = {}). The header is filled by korch_session_send; parent may be NULL. */
korch_msg_t *korch_msg_new(const char *msg_type, json_t *content);

/* A message whose parent_header is a copy of parent's header. */
korch_msg_t *korch_msg_new_reply(const korch_msg_t *parent, const char *msg_type, json_t *content);

void korch_msg_destroy(korch_msg_t **msg);

/* Borrowed strings from the header / parent header ("" when absent). */
const char *korch_msg_type(const korch_msg_t *msg);
const char *korch_msg_id(const korch_msg_t *msg);
const char *korch_msg_parent_id(const korch_msg_t *msg);

#endif
