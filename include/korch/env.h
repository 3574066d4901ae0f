/*  The environment a kernel starts with: an allow-list, never korch's own.
 *
 *  korch's environment holds its secrets (OPENAI_API_KEY, ANTHROPIC_API_KEY,
 *  tokens); model code must not read them. Every launcher builds the
 *  kernel's environment here, in this order, a later NAME replacing an
 *  earlier one:
 *    1. local launchers only: the allow-listed variables of korch's own
 *       environment (korch_env_allowed: PATH, HOME, LANG, LC_*, TERM, TZ,
 *       the Python/Jupyter/matplotlib settings, KERNEL_*, ...);
 *    2. what the user passed explicitly: korch_env_pass ("--env NAME" or
 *       "--env NAME=VALUE" on the command line) and KORCH_KERNEL_ENV, a
 *       comma-separated list of the same forms;
 *    3. the kernelspec's env;
 *    4. the request's env (KERNEL_* from a gateway client, korch's own);
 *    5. what the launcher adds (JPY_PARENT_PID).
 *  A container gets steps 2-5 only: the image sets its own PATH and HOME;
 *  the sandbox steps 2-5 on top of its fixed PATH, HOME and locale.
 *
 *  Not thread-safe: call korch_env_pass at start-up, before kernels start.
 */
#ifndef KORCH_ENV_H
#define KORCH_ENV_H

#include <stdbool.h>
#include "korch/error.h"
#include "korch/launcher.h"

/* Pass a variable to every kernel started from now on: "NAME" (its value
   from korch's environment, skipped when unset) or "NAME=VALUE". */
korch_rc_t korch_env_pass(const char *spec, korch_err_t *err);

/* Forget what korch_env_pass added (tests). */
void korch_env_pass_clear(void);

/* Is NAME one a local kernel inherits from korch's environment? */
bool korch_env_allowed(const char *name);

/* The kernel's environment (see above); from_host for launchers whose
   kernel runs on the host. extra: NULL-terminated "NAME=value" the launcher
   adds last, may be NULL. New NULL-terminated array (korch_env_free), or
   NULL when out of memory. */
char **korch_env_build(const korch_launch_t *req, bool from_host, const char *const *extra);

/* The same on top of base ("NAME=value", NULL-terminated: what a launcher
   sets first, e.g. a sandbox's fixed PATH and HOME), which everything else
   may replace. */
char **korch_env_build_on(const char *const *base, const korch_launch_t *req, bool from_host,
                          const char *const *extra);

void korch_env_free(char **env);

#endif
