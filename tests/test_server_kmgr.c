/*  src/server/kmgr.c on its own, with real ipykernels (local processes):
 *  the kernel manager's promises. A start returns at once; listeners hear
 *  STARTED, READY, DELETED, GONE in that order; a ready closure runs once,
 *  never inside the call that made it (not even for a kernel that is ready
 *  already: a loop round later), never after its cancel (from inside
 *  another closure too); a delete fails pending ready closures and makes
 *  none for a doomed kernel; a gone closure runs once the kernel is torn
 *  down, with its id. (Through the REST API: tests/test_server_core.c.) */
#include "test.h"
#include "../src/server/kmgr.h"

#include <stdio.h>
#include <string.h>

#define MAX_EVENTS 32

typedef struct {
    srv_kev_t ev[MAX_EVENTS];
    char id[MAX_EVENTS][40];
    int n;
} s_heard_t;

static void s_listen(srv_kernel_t *mk, srv_kev_t ev, const char *detail, void *arg)
{
    s_heard_t *h = arg;
    if (h->n < MAX_EVENTS) {
        snprintf(h->id[h->n], sizeof h->id[0], "%s", mk->id);
        h->ev[h->n++] = ev;
    }
}

/* A closure's record: how often it ran, with what. */
typedef struct {
    int calls;
    bool failed;
    char error[256];
    char gone_id[40];
    bool inside;                /* set while the call that made it runs */
    bool ran_inside;
    srv_kwait_t **cancel;       /* a closure to cancel when this one runs */
} s_closure_t;

static void s_on_ready(srv_kernel_t *mk, const char *error, void *arg)
{
    s_closure_t *c = arg;
    c->calls++;
    c->ran_inside = c->ran_inside || c->inside;
    c->failed = error != NULL;
    snprintf(c->error, sizeof c->error, "%s", error ? error : "");
    if (c->cancel)
        srv_kwait_cancel(c->cancel);
}

static void s_on_gone(const char *id, void *arg)
{
    s_closure_t *c = arg;
    c->calls++;
    snprintf(c->gone_id, sizeof c->gone_id, "%s", id);
}

static bool s_called(void *arg) { return ((s_closure_t *)arg)->calls > 0; }

static int s_count(const s_heard_t *h, srv_kev_t ev)
{
    int n = 0;
    for (int i = 0; i < h->n; i++)
        n += h->ev[i] == ev;
    return n;
}

static srv_kmgr_t *s_mgr(korch_loop_t *loop, s_heard_t *heard)
{
    korch_err_t err = {0};
    srv_kmgr_t *m = srv_kmgr_new(&(srv_kmgr_opts_t){.loop = loop, .start_timeout_ms = 60000}, &err);
    CHECK(m);
    if (m)
        srv_kmgr_listen(m, s_listen, heard);
    return m;
}

TEST_T(server_kmgr_ready_closures_run_once_later_and_never_after_cancel, 120)
{
    korch_loop_t *loop = korch_loop_new();
    s_heard_t heard = {0};
    srv_kmgr_t *m = s_mgr(loop, &heard);
    korch_err_t err = {0};
    int64_t t0 = korch_now_ms();
    srv_kernel_t *mk = srv_kmgr_start(m, &(srv_kstart_t){.name = "python3"}, &err);
    CHECK(mk);
    if (!mk)
        goto out;
    CHECK_LT(korch_now_ms() - t0, 2000); /* returns at once: readiness comes later */
    CHECK(!srv_kernel_ready(mk));
    CHECK_EQ(heard.n, 1);
    CHECK_EQ(heard.ev[0], SRV_KEV_STARTED);
    CHECK(srv_kmgr_find(m, mk->id) == mk);
    CHECK_EQ(srv_kmgr_count(m), 1);

    /* a closure, one cancelled at once, one cancelled by the first */
    s_closure_t first = {0}, cancelled = {0}, victim = {0};
    first.inside = true;
    srv_kwait_t *w1 = srv_kernel_when_ready(mk, s_on_ready, &first);
    first.inside = false;
    srv_kwait_t *w2 = srv_kernel_when_ready(mk, s_on_ready, &cancelled);
    srv_kwait_t *w3 = srv_kernel_when_ready(mk, s_on_ready, &victim);
    first.cancel = &w3;
    CHECK(w1 && w2 && w3);
    srv_kwait_cancel(&w2);
    CHECK(w2 == NULL);
    srv_kwait_cancel(&w2); /* NULL: nothing */
    CHECK(korch_loop_run(loop, s_called, &first, 60000));
    CHECK_EQ(first.calls, 1);
    CHECK(!first.failed);
    CHECK(!first.ran_inside);
    CHECK(w3 == NULL); /* cancelled from inside the first one */
    CHECK(srv_kernel_ready(mk));
    CHECK_EQ(s_count(&heard, SRV_KEV_READY), 1);
    CHECK_EQ(mk->readies, 1);

    /* ready already: not inside the call, but a round later */
    s_closure_t again = {0};
    again.inside = true;
    srv_kwait_t *w4 = srv_kernel_when_ready(mk, s_on_ready, &again);
    again.inside = false;
    CHECK(w4);
    CHECK_EQ(again.calls, 0);
    CHECK(korch_loop_run(loop, s_called, &again, 5000));
    CHECK_EQ(again.calls, 1);
    CHECK(!again.failed);
    CHECK(!again.ran_inside);

    /* one made and cancelled before its round comes: never runs */
    s_closure_t never = {0}, probe = {0};
    srv_kwait_t *w5 = srv_kernel_when_ready(mk, s_on_ready, &never);
    srv_kwait_cancel(&w5);
    CHECK(srv_kernel_when_ready(mk, s_on_ready, &probe));
    CHECK(korch_loop_run(loop, s_called, &probe, 5000));
    korch_loop_run(loop, NULL, NULL, 200); /* a few more rounds */
    CHECK_EQ(never.calls, 0);
    CHECK_EQ(cancelled.calls, 0);
    CHECK_EQ(victim.calls, 0);
    CHECK_EQ(first.calls, 1);
out:
    srv_kmgr_destroy(&m);
    CHECK(m == NULL);
    korch_loop_destroy(&loop);
}

TEST_T(server_kmgr_delete_fails_ready_closures_and_gone_runs_after_teardown, 120)
{
    korch_loop_t *loop = korch_loop_new();
    s_heard_t heard = {0};
    srv_kmgr_t *m = s_mgr(loop, &heard);
    korch_err_t err = {0};
    srv_kernel_t *mk = srv_kmgr_start(m, &(srv_kstart_t){.name = "python3"}, &err);
    CHECK(mk);
    if (!mk)
        goto out;
    char id[40];
    snprintf(id, sizeof id, "%s", mk->id);
    s_closure_t ready = {0}, gone = {0};
    CHECK(srv_kernel_when_ready(mk, s_on_ready, &ready));
    CHECK(srv_kernel_when_gone(mk, s_on_gone, &gone));
    srv_kmgr_delete(mk); /* still starting */
    CHECK_EQ(ready.calls, 1);
    CHECK(ready.failed);
    CHECK_CONTAINS(ready.error, "shut down");
    CHECK(mk->doomed);
    CHECK(srv_kmgr_find(m, id) == NULL); /* unlisted at once */
    CHECK_EQ(srv_kmgr_count(m), 0);
    CHECK(srv_kmgr_has_doomed(m));
    s_closure_t late = {0};
    CHECK(srv_kernel_when_ready(mk, s_on_ready, &late) == NULL); /* doomed: no closure, never a call */
    srv_kmgr_delete(mk);                                          /* again: nothing */
    CHECK_EQ(s_count(&heard, SRV_KEV_DELETED), 1);
    CHECK_EQ(gone.calls, 0); /* not torn down yet */
    CHECK_EQ(s_count(&heard, SRV_KEV_GONE), 0);
    /* between loop rounds, as korch_server_run does */
    CHECK(srv_kmgr_reap(m));
    CHECK(!srv_kmgr_reap(m));
    CHECK_EQ(gone.calls, 1);
    CHECK_STREQ(gone.gone_id, id);
    CHECK_EQ(s_count(&heard, SRV_KEV_GONE), 1);
    CHECK_EQ(heard.ev[0], SRV_KEV_STARTED);
    CHECK_EQ(heard.ev[heard.n - 1], SRV_KEV_GONE);
    korch_loop_run(loop, NULL, NULL, 200);
    CHECK_EQ(ready.calls, 1);
    CHECK_EQ(late.calls, 0);

    /* a kernelspec that does not exist: NULL and why, no event */
    int before = heard.n;
    CHECK(srv_kmgr_start(m, &(srv_kstart_t){.name = "no-such-kernelspec"}, &err) == NULL);
    CHECK_EQ(err.rc, KORCH_E_NOTFOUND);
    CHECK_EQ(heard.n, before);
    CHECK_EQ(srv_kmgr_failed_starts(m), 0);
out:
    srv_kmgr_destroy(&m);
    korch_loop_destroy(&loop);
}

/* Re-adoption asks the launcher; one whose kernels die with korch (local)
   refuses at once, saying so, and a bad id or name is refused before: no
   event, nothing listed. (With docker: tests/test_server_adopt.c.) */
TEST_T(server_kmgr_adopt_refuses_what_cannot_be_adopted, 60)
{
    korch_loop_t *loop = korch_loop_new();
    s_heard_t heard = {0};
    korch_err_t err = {0};
    srv_kmgr_t *m = s_mgr(loop, &heard);
    if (!m)
        goto out;
    CHECK_EQ(srv_kmgr_adopt_mine(m), 0); /* no launcher that adopts: nothing to list */
    CHECK(srv_kmgr_adopt(m, "3f2b8a1c-0d4e-4f6a-9b7c-1e2d3c4b5a69", "python3", &err) == NULL);
    CHECK_EQ(err.rc, KORCH_E_STATE);
    CHECK_CONTAINS(err.msg, "cannot re-adopt");
    korch_err_clear(&err);
    CHECK(srv_kmgr_adopt(m, "", "python3", &err) == NULL);
    CHECK_EQ(err.rc, KORCH_E_INVALID);
    korch_err_clear(&err);
    char longname[200];
    memset(longname, 'a', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    CHECK(srv_kmgr_adopt(m, "3f2b8a1c-0d4e-4f6a-9b7c-1e2d3c4b5a69", longname, &err) == NULL);
    CHECK_EQ(err.rc, KORCH_E_INVALID);
    CHECK_EQ(heard.n, 0);
    CHECK_EQ(srv_kmgr_count(m), 0);
out:
    srv_kmgr_destroy(&m);
    korch_loop_destroy(&loop);
}
