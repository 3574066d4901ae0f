#!/usr/bin/python3
"""jupyter_server (Debian's 1.23) as a gateway CLIENT: start it with
`--gateway-url` pointed at a kernel gateway (korch serve), then use
jupyter_server's own REST + WebSocket, as JupyterLab would, and check that the
gateway did the kernel work. Prints one JSON line {"ok", "failures", "details"}
and exits 0 when everything held.

    gateway_check.py --gateway 'http://127.0.0.1:PORT/?token=T'   (korch serve's first line)
    gateway_check.py --gateway-url URL [--gateway-token T]
    gateway_check.py --self-test     # the gateway is a second, real jupyter_server

What jupyter_server 1.23 does as a gateway client: GET /api/kernelspecs on the
gateway at start and per request, POST/GET/DELETE /api/kernels, POST
.../interrupt|restart, and one WebSocket per browser socket to the gateway's
/api/kernels/{id}/channels (no session_id, legacy JSON frames, header
`Authorization: token T`); towards its own clients it offers only the legacy
protocol (no v1 subprotocol).
"""
import argparse
import json
import os
import sys
import time
import traceback
import urllib.parse
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_peer  # noqa: E402
import ws_client as wc  # noqa: E402


def check_through(front, gw, failures, details, kernel_name):
    def check(ok, what):
        if not ok:
            failures.append(what)
        return ok

    t0 = time.monotonic()
    st, specs = front.req("GET", "api/kernelspecs")
    check(st == 200 and isinstance(specs, dict) and kernel_name in (specs.get("kernelspecs") or {}),
          "front GET /api/kernelspecs -> %s %r" % (st, str(specs)[:300]))
    st, model = front.req("POST", "api/kernels", {"name": kernel_name}, timeout=120)
    details["start_kernel_s"] = round(time.monotonic() - t0, 3)
    if not check(st == 201 and isinstance(model, dict) and "id" in model,
                 "front POST /api/kernels -> %s %r" % (st, str(model)[:300])):
        return
    kid = model["id"]
    try:
        st, gmodel = gw.req("GET", "api/kernels/" + kid)
        check(st == 200 and isinstance(gmodel, dict) and gmodel.get("id") == kid,
              "the gateway does not know the kernel the front started: %s %r" % (st, gmodel))
        st, lst = front.req("GET", "api/kernels")
        check(st == 200 and any(k.get("id") == kid for k in lst or []), "front GET /api/kernels lacks it")

        c = wc.Conn(front.base, front.token, kid, "legacy")
        try:
            t = time.monotonic()
            info = c.kernel_info(60, retry=2)
            details["kernel_info_s"] = round(time.monotonic() - t, 3)
            check(info["content"].get("status") == "ok", "kernel_info_reply %r" % str(info["content"])[:200])
            r = c.execute("print(6*7)", 60)
            check(r.stdout() == "42\n", "print(6*7) through the gateway -> %r" % r.stdout())
            check(r.reply["content"].get("status") == "ok", "execute_reply %r" % r.reply["content"])
            r = c.execute("import os; os.getpid()", 60)
            details["kernel_pid"] = r.result_text()
            # round trip through two servers
            rtts = []
            for _ in range(5):
                t = time.monotonic()
                c.execute("pass", 30)
                rtts.append(time.monotonic() - t)
            details["rtt_ms_p50"] = round(1000 * sorted(rtts)[2], 1)
            # interrupt through the front
            mid = c.send("execute_request", {"code": "while True:\n    pass", "silent": False,
                                             "store_history": True, "user_expressions": {},
                                             "allow_stdin": False, "stop_on_error": True})
            first = c.collect(lambda m: m["header"]["msg_type"] == "execute_input"
                              and m["parent_header"].get("msg_id") == mid, 30, "execute_input")
            time.sleep(0.3)
            st, _ = front.req("POST", "api/kernels/%s/interrupt" % kid)
            check(st == 204, "front POST interrupt -> %s" % st)
            r = c.wait_execution(mid, 30, first)
            check(r.reply["content"].get("ename") == "KeyboardInterrupt",
                  "interrupt through the gateway: %r" % str(r.reply["content"])[:200])
            # restart through the front: state is gone
            c.execute("a = 1", 30)
            st, _ = front.req("POST", "api/kernels/%s/restart" % kid, timeout=120)
            check(st == 200, "front POST restart -> %s" % st)
            c.nudge(60)
            r = c.execute("print('a' in dir())", 60)
            check(r.stdout() == "False\n", "state after restart through the gateway: %r" % r.stdout())
        finally:
            c.close()
    finally:
        st, _ = front.req("DELETE", "api/kernels/" + kid, timeout=60)
        check(st == 204, "front DELETE -> %s" % st)
        st, _ = gw.req("GET", "api/kernels/" + kid)
        check(st == 404, "the gateway still has the kernel after the front deleted it: %s" % st)

    # /api/sessions, as JupyterLab opens a notebook
    st, sess = front.req("POST", "api/sessions", {"path": "korch-check.ipynb", "name": "korch-check.ipynb",
                                                  "type": "notebook", "kernel": {"name": kernel_name}},
                         timeout=120)
    if check(st == 201 and isinstance(sess, dict) and isinstance(sess.get("kernel"), dict),
             "front POST /api/sessions -> %s %r" % (st, str(sess)[:300])):
        kid = sess["kernel"]["id"]
        st, _ = gw.req("GET", "api/kernels/" + kid)
        check(st == 200, "the session's kernel is not on the gateway: %s" % st)
        c = wc.Conn(front.base, front.token, kid, "legacy", session_id=uuid.uuid4().hex)
        try:
            c.kernel_info(60, retry=2)
            r = c.execute("print('session ok')", 60)
            check(r.stdout() == "session ok\n", "execute in the session's kernel: %r" % r.stdout())
        finally:
            c.close()
        st, _ = front.req("DELETE", "api/sessions/" + sess["id"], timeout=60)
        check(st == 204, "front DELETE /api/sessions/{id} -> %s" % st)
        st, _ = gw.req("GET", "api/kernels/" + kid)
        check(st == 404, "the session's kernel survived the session's deletion on the gateway: %s" % st)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gateway", help="the gateway's URL line, http://HOST:PORT/?token=T")
    ap.add_argument("--gateway-url")
    ap.add_argument("--gateway-token")
    ap.add_argument("--self-test", action="store_true", help="use a second jupyter_server as the gateway")
    ap.add_argument("--kernel-name", default="python3")
    a = ap.parse_args()
    failures, details = [], {}
    backend = front_proc = None
    t0 = time.monotonic()
    try:
        if a.self_test:
            backend, url, tok = serve_peer.start_jupyter_server(stderr=sys.stderr)
            a.gateway_url, a.gateway_token = url, tok
            details["gateway"] = "jupyter_server " + url
        elif a.gateway:
            u = urllib.parse.urlsplit(a.gateway.strip())
            a.gateway_url = "%s://%s/" % (u.scheme, u.netloc)
            a.gateway_token = a.gateway_token or (urllib.parse.parse_qs(u.query).get("token") or [""])[0]
        if not a.gateway_url:
            ap.error("give --gateway, --gateway-url or --self-test")
        gw = wc.Http(a.gateway_url, a.gateway_token or "")
        front_proc, furl, ftok = serve_peer.start_jupyter_server(
            gateway_url=a.gateway_url.rstrip("/"), gateway_token=a.gateway_token, stderr=sys.stderr)
        details["front_start_s"] = round(time.monotonic() - t0, 2)
        front = wc.Http(furl, ftok)
        check_through(front, gw, failures, details, a.kernel_name)
    except Exception as e:  # noqa: BLE001
        failures.append("%s: %s | %s" % (type(e).__name__, e, traceback.format_exc(limit=4).replace("\n", " ")))
    finally:
        if front_proc:
            serve_peer.stop_jupyter_server(front_proc)
        if backend:
            serve_peer.stop_jupyter_server(backend)
    print(json.dumps({"ok": not failures, "failures": failures, "details": details,
                      "seconds": round(time.monotonic() - t0, 2)}), flush=True)
    sys.exit(0 if not failures else 1)


if __name__ == "__main__":
    main()
