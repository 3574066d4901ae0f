/*  Level-checked logging to stderr: "korch: warn: ...". */
#include "korch/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

korch_log_level_t korch_log_level = KORCH_LOG_WARN;

void korch_log_init(void)
{
    const char *v = getenv("KORCH_LOG");
    if (!v)
        return;
    static const char *const names[] = {"debug", "info", "warn", "error", "off"};
    for (int i = 0; i <= KORCH_LOG_OFF; i++)
        if (strcmp(v, names[i]) == 0)
            korch_log_level = (korch_log_level_t)i;
}

void korch_log_write(korch_log_level_t level, const char *fmt, ...)
{
    static const char *const tags[] = {"debug", "info", "warn", "error", ""};
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "korch: %s: %s\n", tags[level], line);
}
