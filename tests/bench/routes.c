/*  korch-bench routes N: the router's cost. N rounds over a mix of request
 *  paths (one per route of the table, built from its pattern, plus paths
 *  that are 404 and 405), matched two ways in the same run:
 *    table   srv_route_match (src/server/routes.c), with its parameters,
 *            as server.c calls it once per request;
 *    strcmp  the chains it replaced (the web app's paths, the open GET /api,
 *            the upload test, then api.c's strtok_r split and strcmp chain
 *            down into agents.c's), reproduced here deciding the same route.
 *  Prints {"bench": "routes", matches_per_s for both, "ratio": table/strcmp}.
 */
#include "../../src/server/routes.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int bench_routes(int n);

static double s_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

#define MAX_SEGS 8

/* The old dispatch's decision for method + path, as a small number (the
   route it reached, 0 = an error answer), without calling any handler. */
static int s_old(const char *method, const char *rpath)
{
    static const char *const web[] = {"/", "/static/korch.js", "/static/korch.css"};
    if (strcmp(method, "GET") == 0)
        for (int i = 0; i < 3; i++)
            if (strcmp(rpath, web[i]) == 0)
                return 1 + i;
    bool open = strcmp(method, "GET") == 0 && strcmp(rpath, "/api") == 0;
    bool upload = strcmp(method, "PUT") == 0 && strncmp(rpath, "/api/agent/sessions/", 20) == 0 &&
                  strstr(rpath + 20, "/files/") != NULL;
    char path[1024];
    snprintf(path, sizeof path, "%s", rpath);
    size_t plen = strlen(path);
    if (plen > 1 && path[plen - 1] == '/')
        path[plen - 1] = 0;
    char *seg[MAX_SEGS];
    int nseg = 0;
    for (char *save = NULL, *p = strtok_r(path, "/", &save); p; p = strtok_r(NULL, "/", &save)) {
        if (nseg == MAX_SEGS)
            return 0;
        seg[nseg++] = p;
    }
    const char *m = method;
    if (nseg == 1 && strcmp(seg[0], "metrics") == 0)
        return strcmp(m, "GET") == 0 ? 10 : 0;
    if (nseg == 3 && strcmp(seg[0], "kernelspecs") == 0)
        return strcmp(m, "GET") == 0 ? 11 : 0;
    if (nseg == 0 || strcmp(seg[0], "api") != 0)
        return 0;
    if (nseg >= 2 && strcmp(seg[1], "agent") == 0) {
        if (nseg < 3 || strcmp(seg[2], "sessions") != 0)
            return 0;
        if (nseg == 3)
            return strcmp(m, "GET") == 0 ? 40 : strcmp(m, "POST") == 0 ? 41 : 0;
        const char *sub = nseg >= 5 ? seg[4] : "";
        if (nseg == 4 && strcmp(m, "GET") == 0)
            return 42;
        if (nseg == 4 && strcmp(m, "DELETE") == 0)
            return 43;
        if (nseg == 5 && strcmp(sub, "messages") == 0 && strcmp(m, "POST") == 0)
            return 44;
        if (nseg == 5 && strcmp(sub, "interrupt") == 0 && strcmp(m, "POST") == 0)
            return 45;
        if (nseg == 5 && strcmp(sub, "notebook") == 0 && strcmp(m, "GET") == 0)
            return 46;
        if (nseg == 5 && strcmp(sub, "events") == 0 && strcmp(m, "GET") == 0)
            return 47;
        if (strcmp(sub, "files") == 0) {
            if (nseg == 5)
                return strcmp(m, "GET") == 0 ? 48 : 0;
            char rel[1024]; /* s_join */
            size_t o = 0;
            for (int i = 5; i < nseg; i++)
                o += (size_t)snprintf(rel + o, sizeof rel - o, "%s%s", i > 5 ? "/" : "", seg[i]);
            return !rel[0] ? 0 : strcmp(m, "PUT") == 0 ? 49 + upload : strcmp(m, "GET") == 0 ? 51 : 0;
        }
        if (strcmp(sub, "figures") == 0)
            return strcmp(m, "GET") == 0 && nseg == 6 ? 52 : 0;
        return 0;
    }
    if (nseg == 1)
        return strcmp(m, "GET") == 0 ? 20 + open : 0;
    if (strcmp(seg[1], "status") == 0 && nseg == 2)
        return 22;
    if (strcmp(seg[1], "kernelspecs") == 0)
        return strcmp(m, "GET") != 0 ? 0 : nseg == 2 ? 23 : nseg == 3 ? 24 : 0;
    if (strcmp(seg[1], "kernels") == 0) {
        if (nseg == 2)
            return strcmp(m, "GET") == 0 ? 25 : strcmp(m, "POST") == 0 ? 26 : 0;
        if (nseg == 3)
            return strcmp(m, "GET") == 0 ? 27 : strcmp(m, "DELETE") == 0 ? 28 : 0;
        if (nseg != 4 || strcmp(m, "POST") != 0)
            return 0;
        return strcmp(seg[3], "interrupt") == 0 ? 29 : strcmp(seg[3], "restart") == 0 ? 30 : 0;
    }
    if (strcmp(seg[1], "sessions") == 0) {
        if (nseg == 2)
            return strcmp(m, "GET") == 0 ? 31 : strcmp(m, "POST") == 0 ? 32 : 0;
        if (nseg != 3)
            return 0;
        return strcmp(m, "GET") == 0 ? 33 : strcmp(m, "PATCH") == 0 ? 34 : strcmp(m, "DELETE") == 0 ? 35 : 0;
    }
    return 0;
}

typedef struct {
    const char *method;
    char path[160];
} s_case_t;

int bench_routes(int n)
{
    size_t nr;
    const srv_route_t *t = srv_routes(&nr);
    s_case_t cases[64];
    size_t nc = 0;
    for (size_t i = 0; i < nr && nc < 60; i++) {
        /* {x} -> a uuid-sized id, {x*} -> a two-level file path */
        size_t o = 0;
        for (const char *c = t[i].pattern; *c && o < 120;) {
            if (*c == '{') {
                const char *end = strchr(c, '}');
                o += (size_t)snprintf(cases[nc].path + o, sizeof cases[nc].path - o, "%s",
                                      end[-1] == '*' ? "data/q1/sales.csv" : "4f0c8a1e-9b2d-4c6e-8f3a-1d2e3f4a5b6c");
                c = end + 1;
            } else
                cases[nc].path[o++] = *c++;
        }
        cases[nc].path[o] = 0;
        cases[nc++].method = t[i].method;
    }
    static const s_case_t extra[] = {{"GET", "/api/nothing"}, {"PUT", "/api/kernels"}, {"GET", "/favicon.ico"},
                                     {"DELETE", "/api/sessions"}};
    for (size_t i = 0; i < sizeof extra / sizeof *extra; i++)
        cases[nc++] = extra[i];
    /* both ways, alternating blocks so noise falls on both */
    double t_new = 0, t_old = 0;
    unsigned long sink = 0;
    srv_params_t p;
    const srv_route_t *r;
    char allow[48];
    for (int round = 0; round < 4; round++) {
        double t0 = s_now_s();
        for (int k = 0; k < n / 4; k++)
            for (size_t i = 0; i < nc; i++)
                sink += (unsigned long)srv_route_match(cases[i].method, cases[i].path, strlen(cases[i].path), &r, &p,
                                                       allow, sizeof allow);
        double t1 = s_now_s();
        for (int k = 0; k < n / 4; k++)
            for (size_t i = 0; i < nc; i++)
                sink += (unsigned long)s_old(cases[i].method, cases[i].path);
        double t2 = s_now_s();
        t_new += t1 - t0;
        t_old += t2 - t1;
    }
    double matches = (double)(n / 4 * 4) * (double)nc;
    json_t *o = json_pack("{s:s, s:i, s:i, s:f, s:f, s:f, s:f, s:f}", "bench", "routes", "paths", (int)nc, "rounds",
                          n / 4 * 4, "table_matches_per_s", matches / t_new, "strcmp_matches_per_s", matches / t_old,
                          "table_ns_per_match", t_new / matches * 1e9, "strcmp_ns_per_match", t_old / matches * 1e9,
                          "ratio", (matches / t_new) / (matches / t_old));
    char *s = json_dumps(o, JSON_COMPACT);
    printf("%s\n", s ? s : "{}");
    free(s);
    json_decref(o);
    fprintf(stderr, "routes: sink %lu\n", sink & 1); /* keeps both loops from being optimised away */
    return 0;
}
