/*  libFuzzer target: the router (srv_route_match in src/server/routes.c).
 *
 *  Input: byte 0 chooses the method (GET, POST, PUT, PATCH, DELETE, HEAD,
 *  or the next bytes up to a space as a method of the client's); the rest
 *  is the path, NULs and all, as long as it comes.
 *
 *  Beyond "never crashes, no UB" it checks what the router promises: a
 *  match names a route of the table with that method, every parameter is
 *  non-empty and only a tail holds a '/' (and no "." or ".." segment, and
 *  no empty one); a 405 lists methods, each of which matches the same path;
 *  a 404 matches no method at all. Any broken property aborts.
 */
#include "routes.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define REQUIRE(c)                                                                                   \
    do {                                                                                             \
        if (!(c)) {                                                                                  \
            fprintf(stderr, "fuzz_routes: property failed: %s (%s:%d)\n", #c, __FILE__, __LINE__); \
            abort();                                                                                 \
        }                                                                                            \
    } while (0)

static const char *const s_methods[] = {"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    char method[16];
    const char *path = (const char *)data + 1;
    size_t len = size - 1;
    if (data[0] < 6 * 40) {
        snprintf(method, sizeof method, "%s", s_methods[data[0] % 6]);
    } else { /* a method of the client's: up to a space */
        size_t n = 0;
        while (n < len && n < sizeof method - 1 && path[n] != ' ' && path[n])
            n++;
        memcpy(method, path, n);
        method[n] = 0;
        path += n < len ? n + 1 : n;
        len -= n < len ? n + 1 : n;
    }
    const srv_route_t *r = NULL;
    srv_params_t p;
    char allow[48];
    srv_match_t m = srv_route_match(method, path, len, &r, &p, allow, sizeof allow);
    switch (m) {
    case SRV_MATCH_OK: {
        REQUIRE(r && strcmp(r->method, method) == 0);
        REQUIRE(p.n >= 0 && p.n <= SRV_ROUTE_MAX_PARAMS);
        bool tail = strstr(r->pattern, "*}") != NULL;
        for (int i = 0; i < p.n; i++) {
            const char *v = p.value[i];
            REQUIRE(v >= p.buf && v < p.buf + sizeof p.buf && *v);
            REQUIRE(strlen(v) <= len);
            bool last = i == p.n - 1;
            REQUIRE((tail && last) || !strchr(v, '/'));
            if (tail && last)
                for (const char *s = v; *s;) {
                    size_t n = strcspn(s, "/");
                    REQUIRE(n > 0 && !(n == 1 && s[0] == '.') && !(n == 2 && s[0] == '.' && s[1] == '.'));
                    s += n;
                    if (*s)
                        s++;
                }
        }
        break;
    }
    case SRV_MATCH_METHOD:
        REQUIRE(!r && *allow);
        for (const char *a = allow; *a;) {
            size_t n = strcspn(a, ",");
            char one[16];
            snprintf(one, sizeof one, "%.*s", (int)n, a);
            srv_match_t again = srv_route_match(one, path, len, &r, NULL, NULL, 0);
            REQUIRE(again == SRV_MATCH_OK || again == SRV_MATCH_BAD_PATH);
            a += n;
            while (*a == ',' || *a == ' ')
                a++;
        }
        break;
    case SRV_MATCH_NOT_FOUND:
        REQUIRE(!r);
        for (size_t i = 0; i < 5; i++)
            REQUIRE(srv_route_match(s_methods[i], path, len, &r, NULL, NULL, 0) == SRV_MATCH_NOT_FOUND);
        break;
    case SRV_MATCH_BAD_PATH:
    case SRV_MATCH_TOO_LONG:
        REQUIRE(!r);
        break;
    default:
        REQUIRE(!"an answer the router does not have");
    }
    return 0;
}
