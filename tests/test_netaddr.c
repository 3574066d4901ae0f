/*  Address blocks and per-client keys (korch/netaddr.h): what
 *  --trusted-proxy accepts and matches, what X-Forwarded-For items parse. */
#define KORCH_TEST_UNIT
#include "test.h"
#include "korch/netaddr.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

static bool s_in(const char *block, const char *addr)
{
    korch_cidr_t c;
    struct sockaddr_storage ss;
    return korch_cidr_parse(block, &c, NULL) == KORCH_OK && korch_addr_parse(addr, strlen(addr), &ss) &&
           korch_cidr_match(&c, (struct sockaddr *)&ss);
}

TEST(netaddr_blocks_and_keys)
{
    CHECK(s_in("10.0.0.0/8", "10.200.3.4"));
    CHECK(!s_in("10.0.0.0/8", "11.0.0.1"));
    CHECK(s_in("10.1.2.3/8", "10.9.9.9")); /* host bits ignored */
    CHECK(s_in("127.0.0.1", "127.0.0.1"));
    CHECK(!s_in("127.0.0.1", "127.0.0.2"));
    CHECK(s_in("0.0.0.0/0", "8.8.8.8"));
    CHECK(s_in("192.168.1.128/25", "192.168.1.200"));
    CHECK(!s_in("192.168.1.128/25", "192.168.1.100"));
    CHECK(s_in("fd00::/8", "fd12:3456::1"));
    CHECK(!s_in("fd00::/8", "fe80::1"));
    CHECK(s_in("::1", "[::1]"));
    /* a v4-mapped address is the IPv4 one, both ways */
    CHECK(s_in("127.0.0.0/8", "::ffff:127.0.0.5"));
    CHECK(s_in("::ffff:10.0.0.0/104", "10.3.2.1"));
    CHECK(!s_in("10.0.0.0/8", "::1"));
    korch_cidr_t c;
    korch_err_t err = {0};
    const char *bad[] = {"", "10.0.0.0/33", "::/129", "10.0.0.0/", "10.0.0.0/x", "host.example", "1.2.3.4:80",
                         "10.0.0.0/-1"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        korch_err_clear(&err);
        CHECK_EQ(korch_cidr_parse(bad[i], &c, &err), KORCH_E_INVALID);
        CHECK_CONTAINS(err.msg, "is not an address block");
    }
    struct sockaddr_storage ss;
    CHECK(korch_addr_parse("  10.1.2.3 ", 11, &ss));
    CHECK(!korch_addr_parse("10.1.2.3:80", 11, &ss));
    CHECK(!korch_addr_parse("unknown", 7, &ss));
    CHECK(!korch_addr_parse("", 0, &ss));
    char key[KORCH_ADDR_KEY_MAX], text[64];
    korch_addr_parse("2001:db8:1:2:3:4:5:6", 20, &ss);
    korch_addr_key((struct sockaddr *)&ss, key, sizeof key);
    CHECK_STREQ(key, "2001:db8:1:2::/64");
    korch_addr_text((struct sockaddr *)&ss, text, sizeof text);
    CHECK_STREQ(text, "2001:db8:1:2:3:4:5:6");
    korch_addr_parse("::ffff:1.2.3.4", 14, &ss);
    korch_addr_key((struct sockaddr *)&ss, key, sizeof key);
    CHECK_STREQ(key, "1.2.3.4");
    struct sockaddr_storage none = {.ss_family = AF_UNIX};
    korch_addr_key((struct sockaddr *)&none, key, sizeof key);
    CHECK_STREQ(key, "?");
}
