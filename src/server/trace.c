/*  The relay's diagnostic trace (trace.h). */
#include "trace.h"
#include "korch/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <time.h>

bool srv_trace_on;
static FILE *s_out;

void srv_trace_open(void)
{
    const char *path = getenv("KORCH_TRACE_WS");
    if (!path || !*path || s_out)
        return;
    if (!(s_out = fopen(path, "ae"))) {
        korch_warn("cannot open the trace file '%s' ($KORCH_TRACE_WS): %s", path, strerror(errno));
        return;
    }
    setvbuf(s_out, NULL, _IOFBF, 1 << 16);
    srv_trace_on = true;
}

void srv_trace_close(void)
{
    if (s_out)
        fclose(s_out);
    s_out = NULL;
    srv_trace_on = false;
}

int64_t srv_trace_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void srv_trace(const char *fmt, ...)
{
    if (!s_out)
        return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(s_out, fmt, ap);
    va_end(ap);
    fputc('\n', s_out);
}
