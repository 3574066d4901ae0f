/*  A Jupyter session: signs what korch sends and verifies what it receives.
 *
 *  Signature (spec "The Wire Protocol"): HMAC-SHA256 keyed with the
 *  connection key, over header, parent_header, metadata and content exactly
 *  as they are on the wire, in that order, as lowercase hex. An empty key
 *  means unsigned messages: the signature frame is empty and not checked.
 *
 *  Receiving verifies over the raw frames before any JSON is parsed: the
 *  signature length first, then a constant-time compare (CRYPTO_memcmp),
 *  then replay protection - a bounded history of recently seen signatures,
 *  as jupyter_client's digest_history - and only then JSON. Every rejected
 *  message is counted by reason and never crashes anything.
 */
#ifndef KORCH_SESSION_H
#define KORCH_SESSION_H

#include <stdbool.h>
#include <stdint.h>
#include <czmq.h>
#include "korch/uuid.h" /* korch_uuid, korch_iso8601_now: util now, for the headers made here */
#include "korch/error.h"
#include "korch/msg.h"

typedef struct korch_session korch_session_t;

typedef enum {
    KORCH_REJ_NO_DELIMITER,     /* no <IDS|MSG> frame */
    KORCH_REJ_SHORT,            /* fewer than the 5 frames after the delimiter */
    KORCH_REJ_UNSIGNED,         /* empty signature while a key is set */
    KORCH_REJ_BAD_SIGNATURE,    /* wrong length, not hex or wrong digest */
    KORCH_REJ_DUPLICATE,        /* signature seen before: a replay */
    KORCH_REJ_TOO_BIG,          /* a frame over its limit */
    KORCH_REJ_BAD_JSON,         /* a part is not a JSON object */
    KORCH_REJ_BAD_HEADER,       /* header lacks msg_id, msg_type or session */
    KORCH_REJ__COUNT
} korch_reject_t;

typedef struct {
    uint64_t sent;
    uint64_t received;                      /* accepted messages */
    uint64_t rejected[KORCH_REJ__COUNT];
} korch_session_stats_t;

typedef struct {
    size_t max_json_part;       /* header, parent_header, metadata (default 1 MiB) */
    size_t max_content;         /* content frame (default 256 MiB) */
    size_t max_buffers_total;   /* all binary buffers of a message (default 256 MiB) */
    size_t digest_history;      /* signatures remembered (default 65536) */
    size_t max_stream_text;     /* a larger stream message keeps this much text, the rest
                                   counted in content.korch_dropped (default 8 MiB) */
    size_t max_rich_content;    /* a display_data / execute_result / update_display_data
                                   content frame larger than this is not parsed: the content
                                   is {"data": {}, "metadata": {}, "korch_dropped": SIZE}
                                   (default 32 MiB) */
} korch_session_limits_t;

/* A session with the given HMAC key (key_len 0 = unsigned) and username
   (NULL = $USER or "korch"). Limits may be NULL for the defaults. NULL and
   err set when out of memory, without random bytes for its id, or when
   OpenSSL cannot set up HMAC-SHA256. */
korch_session_t *korch_session_new(const void *key, size_t key_len, const char *username,
                                   const korch_session_limits_t *limits, korch_err_t *err);
void korch_session_destroy(korch_session_t **self);

/* This session's id (a uuid string), put into every header it makes. */
const char *korch_session_id(const korch_session_t *self);

/* Fill msg's header (new msg_id, date, session, username, version 5.3) unless
   it already has a msg_id. Returns the msg_id (borrowed from the message). */
const char *korch_session_stamp(korch_session_t *self, korch_msg_t *msg);

/* Serialize msg to wire frames, signed. Consumes *msg (set to NULL), also on
   failure. The result is a new zmsg_t, or NULL when out of memory. */
zmsg_t *korch_session_serialize(korch_session_t *self, korch_msg_t **msg);

/* Serialize and send on sock. Consumes *msg. */
korch_rc_t korch_session_send(korch_session_t *self, zsock_t *sock, korch_msg_t **msg, korch_err_t *err);

/* Verify and parse wire frames; consumes *frames. On success *out is a new
   message. On rejection returns the reason's code, counts it and fills err. */
korch_rc_t korch_session_deserialize(korch_session_t *self, zmsg_t **frames, korch_msg_t **out,
                                     korch_reject_t *why, korch_err_t *err);

/* Does anyone need msg's content parsed? msg has its header, parent_header
   and metadata, not its content yet. */
typedef bool (korch_session_want_fn)(const korch_msg_t *msg, void *arg);

/* The same, for relays, which forward a message without serializing it
   again: on success raw[0..3] get the header, parent_header, metadata and
   content frames exactly as received - the signed bytes - and the caller
   destroys them (raw is untouched on failure). When want_content is given
   and says no, the content is neither parsed nor checked (msg->content is
   NULL): a 20 MB stream message costs its HMAC and nothing more. */
korch_rc_t korch_session_deserialize_raw(korch_session_t *self, zmsg_t **frames, korch_msg_t **out,
                                         zframe_t *raw[4], korch_session_want_fn *want_content, void *arg,
                                         korch_reject_t *why, korch_err_t *err);

/* The HMAC of the four parts as 64 lowercase hex chars + NUL into hex[65].
   With no key hex is "". */
void korch_session_sign(korch_session_t *self, const void *const parts[4], const size_t lens[4], char hex[65]);

const korch_session_stats_t *korch_session_stats(const korch_session_t *self);
const char *korch_reject_name(korch_reject_t why);

#endif
