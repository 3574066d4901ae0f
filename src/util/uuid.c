/*  Random ids and timestamps (uuid.h). */
#include "korch/uuid.h"

#include <openssl/rand.h>
#include <stdio.h>
#include <sys/random.h>
#include <time.h>

korch_rc_t korch_uuid(char buf[37])
{
    unsigned char b[16];
    buf[0] = 0;
    /* OpenSSL's CSPRNG failing is exceptional; then the kernel's, else an error */
    if (RAND_bytes(b, sizeof b) != 1 && getrandom(b, sizeof b, 0) != (ssize_t)sizeof b)
        return KORCH_E_IO;
    b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);
    b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
    snprintf(buf, 37, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2],
             b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
    return KORCH_OK;
}

void korch_iso8601_now(char buf[32])
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char ymdhms[24];
    strftime(ymdhms, sizeof ymdhms, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf, 32, "%.19s.%06uZ", ymdhms, (unsigned)(ts.tv_nsec / 1000) % 1000000u);
}
