/*  IP address blocks and per-client keys (see korch/netaddr.h). */
#include "korch/netaddr.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* sa's family and address bytes, a v4-mapped IPv6 address as IPv4. */
static bool s_bytes(const struct sockaddr *sa, int *family, uint8_t out[16])
{
    if (!sa)
        return false;
    if (sa->sa_family == AF_INET) {
        memcpy(out, &((const struct sockaddr_in *)sa)->sin_addr, 4);
        *family = AF_INET;
        return true;
    }
    if (sa->sa_family != AF_INET6)
        return false;
    const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(a)) {
        memcpy(out, &a->s6_addr[12], 4);
        *family = AF_INET;
    } else {
        memcpy(out, a->s6_addr, 16);
        *family = AF_INET6;
    }
    return true;
}

korch_rc_t korch_cidr_parse(const char *text, korch_cidr_t *out, korch_err_t *err)
{
    char buf[INET6_ADDRSTRLEN + 8];
    memset(out, 0, sizeof *out);
    if (!text || !*text || strlen(text) >= sizeof buf)
        goto bad;
    snprintf(buf, sizeof buf, "%s", text);
    char *slash = strchr(buf, '/');
    if (slash)
        *slash = 0;
    struct sockaddr_storage ss;
    if (!korch_addr_parse(buf, strlen(buf), &ss) || !s_bytes((struct sockaddr *)&ss, &out->family, out->addr))
        goto bad;
    /* ::ffff:10.0.0.0/104 is 10.0.0.0/8 */
    int mapped = ss.ss_family == AF_INET6 && out->family == AF_INET ? 96 : 0;
    int max = out->family == AF_INET ? 32 : 128;
    out->prefix = max;
    if (slash) {
        char *end;
        long bits = strtol(slash + 1, &end, 10);
        if (end == slash + 1 || *end || bits < mapped || bits > max + mapped)
            goto bad;
        out->prefix = (int)bits - mapped;
    }
    /* the host bits of 10.1.2.3/8 are ignored, as in routing tables */
    for (int i = 0; i < 16; i++) {
        int keep = out->prefix - 8 * i;
        out->addr[i] &= keep >= 8 ? 0xff : keep <= 0 ? 0 : (uint8_t)(0xff << (8 - keep));
    }
    return KORCH_OK;
bad:
    return korch_err_set(err, KORCH_E_INVALID,
                         "'%s' is not an address block (an IPv4 or IPv6 address, optionally with /BITS, "
                         "e.g. 10.0.0.0/8 or ::1)",
                         text ? text : "");
}

bool korch_cidr_match(const korch_cidr_t *c, const struct sockaddr *sa)
{
    int family;
    uint8_t a[16];
    if (!c || !s_bytes(sa, &family, a) || family != c->family)
        return false;
    for (int i = 0; i < 16 && 8 * i < c->prefix; i++) {
        int keep = c->prefix - 8 * i;
        uint8_t mask = keep >= 8 ? 0xff : (uint8_t)(0xff << (8 - keep));
        if ((a[i] & mask) != c->addr[i])
            return false;
    }
    return true;
}

bool korch_cidr_match_any(const korch_cidr_t *c, size_t n, const struct sockaddr *sa)
{
    for (size_t i = 0; i < n; i++)
        if (korch_cidr_match(&c[i], sa))
            return true;
    return false;
}

bool korch_addr_parse(const char *text, size_t len, struct sockaddr_storage *out)
{
    while (len && (*text == ' ' || *text == '\t'))
        text++, len--;
    while (len && (text[len - 1] == ' ' || text[len - 1] == '\t'))
        len--;
    if (len >= 2 && text[0] == '[' && text[len - 1] == ']')
        text++, len -= 2;
    char buf[INET6_ADDRSTRLEN];
    if (!len || len >= sizeof buf)
        return false;
    memcpy(buf, text, len);
    buf[len] = 0;
    memset(out, 0, sizeof *out);
    struct sockaddr_in *v4 = (struct sockaddr_in *)out;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)out;
    if (inet_pton(AF_INET, buf, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        return true;
    }
    if (inet_pton(AF_INET6, buf, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        return true;
    }
    return false;
}

void korch_addr_text(const struct sockaddr *sa, char *buf, size_t len)
{
    int family;
    uint8_t a[16];
    snprintf(buf, len, "?");
    if (s_bytes(sa, &family, a) && !inet_ntop(family, a, buf, (socklen_t)len))
        snprintf(buf, len, "?");
}

void korch_addr_key(const struct sockaddr *sa, char *key, size_t len)
{
    int family;
    uint8_t a[16];
    snprintf(key, len, "?");
    if (!s_bytes(sa, &family, a))
        return;
    char buf[INET6_ADDRSTRLEN];
    if (family == AF_INET) {
        inet_ntop(AF_INET, a, key, (socklen_t)len);
        return;
    }
    memset(a + 8, 0, 8);
    inet_ntop(AF_INET6, a, buf, sizeof buf);
    snprintf(key, len, "%s/64", buf);
}
