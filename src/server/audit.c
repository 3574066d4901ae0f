/*  The audit log (audit.h). */
#include "audit.h"
#include "korch/log.h"
#include "korch/uuid.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct srv_audit {
    int fd;
    bool with_code;
    uint64_t failed;
    char path[512];
};

srv_audit_t *srv_audit_new(const char *path, bool with_code, korch_err_t *err)
{
    srv_audit_t *a = calloc(1, sizeof *a);
    if (!a) {
        korch_err_set(err, KORCH_E_NOMEM, "out of memory");
        return NULL;
    }
    a->fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    struct stat st;
    if (a->fd < 0 || fstat(a->fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        korch_err_set(err, KORCH_E_IO, "cannot append to the audit log '%s': %s", path,
                      a->fd < 0 ? strerror(errno) : "not a regular file");
        srv_audit_destroy(&a);
        return NULL;
    }
    a->with_code = with_code;
    snprintf(a->path, sizeof a->path, "%s", path);
    return a;
}

void srv_audit_destroy(srv_audit_t **pa)
{
    srv_audit_t *a = pa ? *pa : NULL;
    if (!a)
        return;
    if (a->fd >= 0)
        close(a->fd);
    free(a);
    *pa = NULL;
}

void srv_audit(srv_audit_t *a, const srv_user_t *u, const char *action, const char *kind, const char *id,
               json_t *detail)
{
    if (!a) {
        json_decref(detail);
        return;
    }
    char now[32];
    korch_iso8601_now(now);
    json_t *line = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "time", now, "user", u ? u->name : "", "role",
                             srv_role_name(u ? u->role : SRV_ROLE_NONE), "action", action, "kind", kind, "id",
                             id ? id : "");
    if (line && json_is_object(detail))
        json_object_update_missing(line, detail);
    json_decref(detail);
    char *text = line ? json_dumps(line, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENSURE_ASCII) : NULL;
    json_decref(line);
    size_t n = text ? strlen(text) : 0;
    bool ok = false;
    if (text) {
        text[n] = '\n'; /* json_dumps's NUL becomes the newline: one write() per line */
        ok = write(a->fd, text, n + 1) == (ssize_t)(n + 1);
    }
    free(text);
    if (!ok && a->failed++ == 0)
        korch_error("cannot write to the audit log '%s': %s (counted in korch_audit_failed_total)", a->path,
                    strerror(errno));
}

void srv_audit_code(srv_audit_t *a, const srv_user_t *u, const char *action, const char *kind, const char *id,
                    const char *code, size_t len)
{
    if (!a)
        return;
    unsigned char h[32];
    unsigned int hl = 32;
    char hex[65];
    EVP_Digest(code, len, h, &hl, EVP_sha256(), NULL);
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", h[i]);
    json_t *d = json_pack("{s:s, s:I}", "code_sha256", hex, "code_bytes", (json_int_t)len);
    if (d && a->with_code) {
        json_t *c = json_stringn(code, len); /* NULL when not UTF-8 */
        json_object_set_new(d, "code", c ? c : json_string("(not UTF-8: see code_sha256)"));
    }
    srv_audit(a, u, action, kind, id, d);
}

uint64_t srv_audit_failed(const srv_audit_t *a) { return a ? a->failed : 0; }
