/*  IP addresses as korch counts and trusts them: address blocks (CIDR)
 *  and the key a client's connections count against.
 *
 *  A v4-mapped IPv6 address (::ffff:a.b.c.d) is the IPv4 address it maps,
 *  everywhere here. No allocation, no state: thread-safe.
 */
#ifndef KORCH_NETADDR_H
#define KORCH_NETADDR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include "korch/error.h"

/* An address block: 10.0.0.0/8, 127.0.0.1 (/32), fd00::/8, ::1 (/128). */
typedef struct {
    int family;                 /* AF_INET or AF_INET6 */
    uint8_t addr[16];           /* network byte order; 4 bytes used for AF_INET */
    int prefix;                 /* bits that must match */
} korch_cidr_t;

/* Room for a key: an IPv6 address and "/64". */
#define KORCH_ADDR_KEY_MAX 64

/* Parse "ADDR" or "ADDR/BITS" into *out. KORCH_E_INVALID (with a message
   naming text) when it is not one. */
korch_rc_t korch_cidr_parse(const char *text, korch_cidr_t *out, korch_err_t *err);

/* Is the address sa (AF_INET or AF_INET6) inside block c? */
bool korch_cidr_match(const korch_cidr_t *c, const struct sockaddr *sa);

/* Is sa inside any of the n blocks? */
bool korch_cidr_match_any(const korch_cidr_t *c, size_t n, const struct sockaddr *sa);

/* Parse one address as X-Forwarded-For lists it: "1.2.3.4", "::1",
   "[::1]", with spaces around (a port is not accepted: proxies do not add
   one). false when it is not an address. */
bool korch_addr_parse(const char *text, size_t len, struct sockaddr_storage *out);

/* sa's address as text into buf[len] (INET6_ADDRSTRLEN is enough), a
   v4-mapped one as IPv4; "?" when sa is no IP address. */
void korch_addr_text(const struct sockaddr *sa, char *buf, size_t len);

/* The key connections from sa count against (key[KORCH_ADDR_KEY_MAX]):
   the IPv4 address, or the /64 of an IPv6 address ("2001:db8::/64"), one
   end user's share. "?" when sa is no IP address. */
void korch_addr_key(const struct sockaddr *sa, char *key, size_t len);

#endif
