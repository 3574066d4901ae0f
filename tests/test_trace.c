/*  $KORCH_TRACE_WS (src/server/trace.h), the relay's diagnostic trace that
 *  tests/bench/loop_bench.py reads to say where a slow round trip spent its
 *  time: a real `korch serve`, a real ipykernel, ws_client.py's execute
 *  scenario over the v1 protocol; every request the client sent is in the
 *  trace with its execute_reply and its idle, each queued for the client's
 *  websocket and then written, in that order in time. */
#include "serve_fixture.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_Q 256

typedef struct {
    char ws[130], parent[130], type[64];
    unsigned long long n;
    long long t;
} trace_q_t;

TEST_T(server_trace_ws, 120)
{
    char dir[] = "/tmp/korch-test-trace-XXXXXX", path[64];
    if (!CHECK(mkdtemp(dir)))
        return;
    snprintf(path, sizeof path, "%s/trace", dir);
    setenv("KORCH_TRACE_WS", path, 1);
    serve_t s;
    bool up = serve_start(&s);
    unsetenv("KORCH_TRACE_WS");
    if (!CHECK(up))
        goto out;
    const char *argv[] = {PY, serve_peer("ws_client.py"), "--url", s.line, "--protocol", "v1", "execute", NULL};
    char *pout = NULL, *perr = NULL;
    int rc = korch_test_run(argv, NULL, &pout, &perr, 90);
    if (!CHECK_EQ(rc, 0))
        fprintf(stderr, "  ws_client execute: %s\n%s\n", pout ? pout : "", perr ? perr : "");
    free(pout);
    free(perr);
    serve_stop(&s); /* closes the trace: the buffered lines are out */
    unlink(s.log);

    FILE *f = fopen(path, "r");
    if (!CHECK(f))
        goto out;
    static trace_q_t q[MAX_Q];
    int nq = 0, nrx = 0, matched = 0;
    char rx_ids[8][130];
    long long rx_t[8][2];
    char line[600];
    while (fgets(line, sizeof line, f)) {
        trace_q_t e;
        long long a, b;
        unsigned long long n;
        char ws[130], id[130];
        if (sscanf(line, "rx %129s %129s %lld %lld", ws, id, &a, &b) == 4) {
            CHECK_LE(a, b); /* read, then handed to the kernel */
            if (nrx < 8) {
                snprintf(rx_ids[nrx], sizeof rx_ids[0], "%s", id);
                rx_t[nrx][0] = a, rx_t[nrx][1] = b;
            }
            nrx++;
        } else if (sscanf(line, "q %129s %llu %129s %63s %lld", e.ws, &e.n, e.parent, e.type, &e.t) == 5) {
            if (nq < MAX_Q)
                q[nq++] = e;
        } else if (sscanf(line, "w %129s %llu %lld", ws, &n, &a) == 3) {
            for (int i = 0; i < nq; i++)
                if (q[i].n == n && strcmp(q[i].ws, ws) == 0) {
                    CHECK_LE(q[i].t, a); /* queued, then written */
                    matched++;
                }
        } else
            CHECK(!"a trace line of no known shape");
    }
    fclose(f);
    /* the scenario's kernel_info and two executes at least */
    CHECK_GE(nrx, 3);
    CHECK_GT(nq, 0);
    CHECK_EQ(matched, nq); /* every queued message was written */
    for (int r = 0; r < nrx && r < 8; r++) {
        bool reply = false, idle = false;
        for (int i = 0; i < nq; i++) {
            if (strcmp(q[i].parent, rx_ids[r]) != 0)
                continue;
            CHECK_LE(rx_t[r][1], q[i].t); /* answered after it was sent */
            reply |= strstr(q[i].type, "_reply") != NULL;
            idle |= strcmp(q[i].type, "status/idle") == 0;
        }
        if (!CHECK(reply && idle))
            fprintf(stderr, "  request %s: reply %d idle %d in the trace\n", rx_ids[r], reply, idle);
    }
out:
    unlink(path);
    rmdir(dir);
}
