/*  The audit log (korch serve --audit FILE): who did what to what, when,
 *  as JSON lines appended to FILE (0600, O_APPEND: one write per line, so
 *  lines of two writers never interleave). Not a public API.
 *
 *  A line: {"time": ISO 8601, "user": NAME, "role": "user"|"admin",
 *  "action": A, "kind": "kernel"|"session"|"file", "id": ID, ...details}.
 *  Actions:
 *    kernel.start {name}, kernel.delete, kernel.execute {code_sha256,
 *      code_bytes, code (only with --audit-code)}, kernel.connect (a
 *      websocket opened);
 *    session.create {kernel}, session.delete, session.message
 *      {question_sha256, question (with --audit-code)}, session.execute
 *      (the agent's code: {code_sha256, code_bytes, code?});
 *    file.upload {path, size}, file.download {path}, file.delete {path}.
 *  A request refused (404 of another user's, 429 over a quota) writes no
 *  line: the access log has it.
 *
 *  The write is a small append to a local file on the loop, as the access
 *  log's line to stderr is. A failed write is said once in the log and
 *  counted (korch_audit_failed_total in /metrics); serving goes on.
 *
 *  Threading: the loop thread only.
 */
#ifndef KORCH_SRV_AUDIT_H
#define KORCH_SRV_AUDIT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ident.h"
#include "korch/error.h"

typedef struct srv_audit srv_audit_t;

/* Append to path (created 0600, never through a symlink); with_code: the
   code of each execution goes into its line, not only its hash. NULL + err. */
srv_audit_t *srv_audit_new(const char *path, bool with_code, korch_err_t *err);
void srv_audit_destroy(srv_audit_t **pa);

/* One line: u did action to kind/id; detail (stolen, may be NULL) is merged
   into it. a NULL (no --audit): nothing, detail freed. */
void srv_audit(srv_audit_t *a, const srv_user_t *u, const char *action, const char *kind, const char *id,
               json_t *detail);
/* An execution's line: its code's SHA-256 and size, the code itself
   with_code (kind "kernel" or "session"). */
void srv_audit_code(srv_audit_t *a, const srv_user_t *u, const char *action, const char *kind, const char *id,
                    const char *code, size_t len);
/* Lines that could not be written. */
uint64_t srv_audit_failed(const srv_audit_t *a);

#endif
