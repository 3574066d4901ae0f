/*  Random identifiers and wall-clock timestamps (the Jupyter header's
 *  msg_id, session and date; kernel and session ids). Thread-safe.
 */
#ifndef KORCH_UUID_H
#define KORCH_UUID_H

#include "korch/error.h"

/* A random uuid4 string (36 chars + NUL) into buf[37], from OpenSSL's CSPRNG
   (getrandom when that fails). When no random bytes can be had, buf is ""
   and the result KORCH_E_IO: never a predictable id. */
korch_rc_t korch_uuid(char buf[37]);

/* ISO 8601 UTC with microseconds and Z, e.g. 2026-11-29T17:13:39.123456Z. */
void korch_iso8601_now(char buf[32]);

#endif
