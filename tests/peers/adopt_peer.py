#!/usr/bin/python3
"""Clients of a korch serve that is killed and started again, for
tests/test_server_adopt.c and tests/test_swarm_launcher.c.

    adopt_peer.py front GW_URL GW_TOKEN
        jupyter_server (Debian's 1.23) as a gateway client of korch serve,
        kept running across korch's restart: prints {"ready": true} once it
        answers, then reads commands on stdin, one JSON line out for each:
          start N          N kernels through jupyter_server, `v = 'adopt-I'`
                           in kernel I over its websocket -> {"ok", "kernels"}
          check KID VALUE  through jupyter_server's websocket: print(v) is
                           VALUE -> {"ok", "stdout"}
          delete KID       DELETE through jupyter_server -> {"ok", "status"}
        and stops jupyter_server at EOF.
    adopt_peer.py new URL TOKEN VALUE
        POST /api/kernels, then `v = VALUE` over korch's websocket (v1)
        -> {"ok", "kernel"}.
    adopt_peer.py set URL TOKEN KID VALUE
        `v = VALUE` in the kernel over korch's own websocket (v1 protocol).
    adopt_peer.py direct URL TOKEN KID VALUE
        korch's REST and websocket (v1): GET /api/kernels lists KID; print(v)
        is VALUE; a time.sleep(30) interrupted by POST .../interrupt
        (KeyboardInterrupt) and v still there.
    adopt_peer.py restart URL TOKEN KID
        POST .../restart: 200, then v is gone and the kernel works.

Every mode prints one JSON line {"ok", "failures", ...} and exits 0 when
everything held.
"""
import json
import os
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_peer  # noqa: E402
import ws_client as wc  # noqa: E402


def out(d):
    print(json.dumps(d), flush=True)


def conn(base, token, kid, protocol, timeout=90):
    """jupyter_server's gateway client (legacy) forwards only once its upstream
    socket is up: retry there. Straight to korch (v1) one kernel_info_request
    must do, even for a kernel still being re-adopted (korch holds it)."""
    c = wc.Conn(base, token, kid, protocol, timeout=60, url_session=protocol == "v1")
    c.kernel_info(timeout, retry=2 if protocol == "legacy" else None)
    return c


def front(gw_url, gw_token):
    proc = None
    try:
        proc, furl, ftok = serve_peer.start_jupyter_server(gateway_url=gw_url.rstrip("/"), gateway_token=gw_token,
                                                           stderr=sys.stderr)
        api = wc.Http(furl, ftok)
        out({"ready": True, "url": furl})
        for line in sys.stdin:
            words = line.split()
            if not words:
                continue
            res = {"ok": False, "failures": []}
            try:
                if words[0] == "start":
                    kids = []
                    for i in range(int(words[1])):
                        st, model = api.req("POST", "api/kernels", {"name": "python3"}, timeout=120)
                        if st != 201:
                            raise RuntimeError("POST /api/kernels through jupyter_server -> %s %r" % (st, model))
                        c = conn(api.base, ftok, model["id"], "legacy")
                        r = c.execute("v = 'adopt-%d'\nprint(v)" % i, 60)
                        c.close()
                        if r.stdout() != "adopt-%d\n" % i:
                            raise RuntimeError("setting v printed %r" % r.stdout())
                        kids.append(model["id"])
                    res["kernels"] = kids
                elif words[0] == "check":
                    c = conn(api.base, ftok, words[1], "legacy")
                    r = c.execute("print(v)", 60)
                    c.close()
                    res["stdout"] = r.stdout()
                    if r.stdout() != words[2] + "\n":
                        raise RuntimeError("print(v) through jupyter_server -> %r" % r.stdout())
                elif words[0] == "delete":
                    res["status"] = api.delete_kernel(words[1])
                    if res["status"] != 204:
                        raise RuntimeError("DELETE through jupyter_server -> %s" % res["status"])
                else:
                    raise RuntimeError("unknown command %r" % words[0])
                res["ok"] = True
            except Exception as e:  # noqa: BLE001
                res["failures"].append("%s: %s | %s" % (type(e).__name__, e,
                                                        traceback.format_exc(limit=3).replace("\n", " ")))
            out(res)
    finally:
        if proc:
            serve_peer.stop_jupyter_server(proc)


def main():
    mode = sys.argv[1]
    if mode == "front":
        front(sys.argv[2], sys.argv[3])
        return 0
    url, token, kid = sys.argv[2], sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else None
    api = wc.Http(url, token)
    failures, res = [], {}

    def check(ok, what):
        if not ok:
            failures.append(what)
        return ok

    try:
        if mode == "new":
            st, model = api.req("POST", "api/kernels", {"name": "python3"}, timeout=240)
            if st != 201:
                raise RuntimeError("POST /api/kernels -> %s %r" % (st, model))
            res["kernel"] = kid = model["id"]
            c = conn(api.base, token, kid, "v1", timeout=180)
            r = c.execute("v = %r\nprint(v)" % sys.argv[4], 60)
            c.close()
            check(r.stdout() == sys.argv[4] + "\n", "setting v printed %r" % r.stdout())
        elif mode == "set":
            c = conn(api.base, token, kid, "v1")
            r = c.execute("v = %r\nprint(v)" % sys.argv[5], 60)
            c.close()
            check(r.stdout() == sys.argv[5] + "\n", "setting v printed %r" % r.stdout())
        elif mode == "direct":
            st, lst = api.req("GET", "api/kernels")
            check(st == 200 and any(k.get("id") == kid for k in lst or []),
                  "GET /api/kernels lacks %s: %s %r" % (kid, st, lst))
            res["listed"] = [k.get("id") for k in lst or []] if st == 200 else None
            c = conn(api.base, token, kid, "v1")
            r = c.execute("print(v)", 60)
            check(r.stdout() == sys.argv[5] + "\n", "print(v) -> %r" % r.stdout())
            mid = c.send("execute_request", {"code": "import time\ntime.sleep(30)", "silent": False,
                                             "store_history": True, "user_expressions": {},
                                             "allow_stdin": False, "stop_on_error": False})
            first = c.collect(lambda m: m["header"]["msg_type"] == "execute_input"
                              and m["parent_header"].get("msg_id") == mid, 30, "execute_input")
            time.sleep(0.3)
            t = time.monotonic()
            st, _ = api.req("POST", "api/kernels/%s/interrupt" % kid)
            check(st == 204, "POST interrupt -> %s" % st)
            r = c.wait_execution(mid, 30, first)
            res["interrupt_s"] = round(time.monotonic() - t, 3)
            check(r.reply["content"].get("ename") == "KeyboardInterrupt",
                  "interrupt: %r" % str(r.reply["content"])[:200])
            # (the interrupted cell did not stop on error: ipykernel aborts nothing after it)
            r = c.execute("print(v)", 60, stop_on_error=False)
            check(r.stdout() == sys.argv[5] + "\n", "print(v) after the interrupt -> %r (%r)"
                  % (r.stdout(), r.reply["content"].get("status") if r.reply else None))
            c.close()
        elif mode == "restart":
            st, _ = api.req("POST", "api/kernels/%s/restart" % kid, timeout=120)
            check(st == 200, "POST restart -> %s" % st)
            c = conn(api.base, token, kid, "v1")
            c.nudge(60)
            r = c.execute("print('v' in dir(), 6 * 7)", 60)
            check(r.stdout() == "False 42\n", "after the restart: %r" % r.stdout())
            c.close()
        else:
            check(False, "unknown mode %r" % mode)
    except Exception as e:  # noqa: BLE001
        failures.append("%s: %s | %s" % (type(e).__name__, e, traceback.format_exc(limit=3).replace("\n", " ")))
    res["ok"] = not failures
    res["failures"] = failures
    out(res)
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
