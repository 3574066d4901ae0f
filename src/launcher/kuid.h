/*  Kernel uids: a uid no account on the host has, one per kernel, and the
 *  user korch hands files back to (private to src/launcher).
 *
 *  The range is KORCH_KERNEL_UIDS ("FIRST-LAST"), by default
 *  2000000000-2000999999: above the ranges systemd documents for
 *  container uids (524288-1879048191) and below its "foreign" range
 *  (2147352576 and up) and 2^31 (tools that take uid_t for signed break
 *  above it); no distribution hands out uids there. A uid is claimed with
 *  a flock on /run/korch-uids/UID, held for as long as the claim, so two
 *  kernels on one machine (of any korch) never share one, and a korch
 *  that dies releases its claims. A uid that getpwuid or getgrgid knows
 *  is never claimed. gid = uid.
 *
 *  Root only (a non-root korch runs kernels as itself). Thread-safe.
 */
#ifndef KORCH_LAUNCHER_KUID_H
#define KORCH_LAUNCHER_KUID_H

#include <stdbool.h>
#include <sys/types.h>
#include "korch/error.h"

typedef struct korch_kuid korch_kuid_t;

/* The range in force: false with err when KORCH_KERNEL_UIDS is not
   "FIRST-LAST" with 0 < FIRST <= LAST < 2^31. */
bool korch_kuid_range(uid_t *first, uid_t *last, korch_err_t *err);

/* Claim a free uid of the range; want (when in the range, else 0 = any):
   that one (a restart's), shared when this process holds it already (the
   freed predecessor's claim lasts until its cgroup is empty), or an error
   when another process holds it. NULL with err. */
korch_kuid_t *korch_kuid_claim(uid_t want, korch_err_t *err);

uid_t korch_kuid_uid(const korch_kuid_t *k);

/* Is uid in the range (a kernel's, not a person's)? */
bool korch_kuid_is_kernel(uid_t uid);

void korch_kuid_release(korch_kuid_t **pk);

/* Who gets what korch hands back from a kernel on the host: the owner of
   dir (the session directory); when that is root and korch runs under
   sudo, SUDO_UID/SUDO_GID. */
void korch_kuid_owner(const char *dir, uid_t *uid, gid_t *gid);

#endif
