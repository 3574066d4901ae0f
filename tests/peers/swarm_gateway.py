#!/usr/bin/python3
"""A gateway client for tests/test_swarm.c: `korch serve --launcher swarm`
driven over its REST API and websocket (tests/peers/ws_client.py, the
legacy Jupyter protocol, as jupyter_server's gateway client speaks it).

    swarm_gateway.py start URL TOKEN N      start N kernels at once; state in each, and more
    swarm_gateway.py time URL TOKEN N       start N kernels at once, time them, delete them
    swarm_gateway.py check URL TOKEN ID...  each kernel still has its state
    swarm_gateway.py fresh URL TOKEN ID     the kernel lost its state (restarted) and works

start: N kernels at once (one thread each, timed from POST to the first
kernel_info_reply), then in each `x = 7 * I` and print(x) (state), on the
first a matplotlib figure (a real PNG in display_data), on the second
time.sleep(60) interrupted through POST .../interrupt (KeyboardInterrupt
within seconds, and the kernel works after), on the third POST .../restart
(x is gone, the kernel works). Prints one JSON line {"ok", "failures",
"kernels": [ids], "start_s": [...], "interrupt_s", "restart_s",
"exec_ms_p50"}; exits 0 when everything held.
"""
import base64
import json
import statistics
import sys
import threading
import time

sys.path.insert(0, __import__("os").path.dirname(__import__("os").path.abspath(__file__)))
import ws_client as wc  # noqa: E402

PNG = b"\x89PNG\r\n\x1a\n"


def main():
    mode, url, token = sys.argv[1], sys.argv[2], sys.argv[3]
    api = wc.Http(url, token)
    failures, out = [], {}

    def check(ok, what):
        if not ok:
            failures.append(what)
        return ok

    def conn(kid):
        c = wc.Conn(api.base, token, kid, "legacy", timeout=60)
        c.kernel_info(90, retry=2)
        return c

    if mode in ("start", "time"):
        n = int(sys.argv[4])
        kids, starts, errors = [None] * n, [None] * n, []

        def one(i):
            t = time.monotonic()
            try:
                st, model = api.req("POST", "api/kernels", {"name": "python3"}, timeout=180)
                if st != 201:
                    raise RuntimeError("POST /api/kernels -> %s %r" % (st, model))
                kids[i] = model["id"]
                c = conn(kids[i])
                starts[i] = round(time.monotonic() - t, 3)
                r = c.execute("x = 7 * %d\nprint(x)" % i, timeout=60)
                if r.stdout() != "%d\n" % (7 * i):
                    raise RuntimeError("kernel %d printed %r" % (i, r.stdout()))
                c.close()
            except Exception as e:  # noqa: BLE001
                errors.append("kernel %d: %s" % (i, e))

        t0 = time.monotonic()
        th = [threading.Thread(target=one, args=(i,)) for i in range(n)]
        for t in th:
            t.start()
        for t in th:
            t.join()
        out["all_started_s"] = round(time.monotonic() - t0, 3)
        out["kernels"], out["start_s"] = kids, starts
        for e in errors:
            check(False, e)
        if errors:
            return finish(failures, out)

        c = conn(kids[0])
        # The round trip of a trivial execution (reply and idle), through korch.
        times = []
        for _ in range(30):
            t = time.monotonic()
            c.execute("pass", timeout=30)
            times.append((time.monotonic() - t) * 1e3)
        out["exec_ms_p50"] = round(statistics.median(times), 2)
        if mode == "time":
            c.close()
            for kid in kids:
                check(api.delete_kernel(kid) == 204, "DELETE kernel %s" % kid)
            return finish(failures, out)
        r = c.execute("print(x + 1)")
        check(r.stdout() == "1\n", "kernel 0: x + 1 printed %r" % r.stdout())
        r = c.execute("import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()", timeout=90)
        pngs = [m["content"]["data"]["image/png"] for m in r.of("display_data")
                if "image/png" in m["content"].get("data", {})]
        check(pngs and base64.b64decode(pngs[0])[:8] == PNG,
              "kernel 0: no PNG in display_data: %s" % wc.summarize(r.msgs))
        c.close()

        c = conn(kids[1])
        mid = c.send("execute_request", {"code": "import time\ntime.sleep(60)", "silent": False,
                                         "store_history": True, "user_expressions": {},
                                         "allow_stdin": False, "stop_on_error": False})
        time.sleep(1.5)
        t = time.monotonic()
        st, _ = api.req("POST", "api/kernels/%s/interrupt" % kids[1])
        check(st == 204, "interrupt -> %s" % st)
        r = c.wait_execution(mid, 20)
        out["interrupt_s"] = round(time.monotonic() - t, 3)
        check(r.reply and r.reply["content"].get("ename") == "KeyboardInterrupt",
              "kernel 1: interrupt gave %s" % wc.summarize(r.msgs))
        # ipykernel aborts what arrives just after an error for a moment
        # (stop_on_error): ask again if so.
        for _ in range(3):
            r = c.execute("print(x)")
            if r.reply and r.reply["content"].get("status") != "aborted":
                break
            time.sleep(0.5)
        check(r.stdout() == "7\n", "kernel 1 after the interrupt printed %r (%s)" % (r.stdout(), wc.summarize(r.msgs)))
        c.close()

        t = time.monotonic()
        st, _ = api.req("POST", "api/kernels/%s/restart" % kids[2], timeout=120)
        check(st == 200, "restart -> %s" % st)
        fresh(api, token, kids[2], check, conn)
        out["restart_s"] = round(time.monotonic() - t, 3)
    elif mode == "check":
        for kid in sys.argv[4:]:
            c = conn(kid)
            r = c.execute("print('x' in dir())")
            check(r.stdout() == "True\n", "kernel %s lost its state: %r" % (kid, r.stdout()))
            c.close()
    elif mode == "fresh":
        fresh(api, token, sys.argv[4], check, conn, wait_s=float(sys.argv[5]) if len(sys.argv) > 5 else 0)
    return finish(failures, out)


def fresh(api, token, kid, check, conn, wait_s=0):
    """The kernel answers and has no x: a new process (after a restart)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            c = conn(kid)
            r = c.execute("print('x' in dir(), 6 * 7)", timeout=60)
            c.close()
            if r.stdout() == "False 42\n" or time.monotonic() > deadline:
                break
        except Exception as e:  # noqa: BLE001
            if time.monotonic() > deadline:
                check(False, "kernel %s: %s" % (kid, e))
                return
        time.sleep(0.5)
    check(r.stdout() == "False 42\n", "kernel %s after its restart printed %r" % (kid, r.stdout()))


def finish(failures, out):
    out["ok"] = not failures
    out["failures"] = failures
    print(json.dumps(out))
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
