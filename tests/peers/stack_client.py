#!/usr/bin/python3
"""A client of the korch stack for tests/test_swarm_stack.c: `korch serve
--launcher swarm` as docker-compose.yml deploys it, driven from outside the
swarm over its published port (REST and the legacy websocket protocol,
tests/peers/ws_client.py).

    stack_client.py wait URL TOKEN S       GET /api answers 200 within S seconds (the seconds it took)
    stack_client.py up URL TOKEN           start a kernel; state over two executes; a matplotlib PNG
    stack_client.py check URL TOKEN ID     kernel ID is listed, keeps its state and works
    stack_client.py files URL TOKEN        agent-API files on a swarm kernel (no model call)
    stack_client.py gone URL TOKEN ID      kernel ID is not listed (404), none is

files: a session created with a file (put into its kernel as it starts),
then PUT of a second file and of a file in a subdirectory through
.../files/{path}, and three PUTs at once; the kernel's own code reads them from its work dir,
writes one, and GET .../files/{path} returns what it wrote.

Prints one JSON line {"ok", "failures", ...}; exits 0 when everything held.
"""
import base64
import json
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

    try:
        if mode == "wait":
            t, last = time.monotonic(), None
            while time.monotonic() - t < float(sys.argv[4]):
                try:
                    st, b = api.req("GET", "api", timeout=5)
                    if st == 200 and isinstance(b, dict) and "version" in b:
                        break
                    last = "GET /api -> %s %r" % (st, b)
                except Exception as e:  # noqa: BLE001
                    last = "%s: %s" % (type(e).__name__, e)
                time.sleep(0.2)
            else:
                check(False, "korch did not answer within %s s (%s)" % (sys.argv[4], last))
            out["waited_s"] = round(time.monotonic() - t, 3)
        elif mode == "up":
            t = time.monotonic()
            model = api.start_kernel("python3")
            kid = out["kernel"] = model["id"]
            c = conn(kid)
            out["start_s"] = round(time.monotonic() - t, 3)
            r = c.execute("x = 6 * 7\nprint('set')")
            check(r.stdout() == "set\n", "first execute printed %r (%s)" % (r.stdout(), wc.summarize(r.msgs)))
            r = c.execute("print(x + 1)")
            check(r.stdout() == "43\n", "second execute printed %r: the state did not persist" % r.stdout())
            r = c.execute("import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()", timeout=90)
            pngs = [m["content"]["data"]["image/png"] for m in r.of("display_data")
                    if "image/png" in m["content"].get("data", {})]
            check(pngs and base64.b64decode(pngs[0])[:8] == PNG, "no PNG in display_data: %s" % wc.summarize(r.msgs))
            c.close()
        elif mode == "check":
            kid = sys.argv[4]
            st, lst = api.req("GET", "api/kernels")
            check(st == 200 and [k["id"] for k in lst or []] == [kid], "GET /api/kernels -> %s %r" % (st, lst))
            c = conn(kid)
            r = c.execute("print(x)")
            check(r.stdout() == "42\n", "kernel %s after korch's restart printed %r (%s)" %
                  (kid, r.stdout(), wc.summarize(r.msgs)))
            c.close()
        elif mode == "gone":
            kid = sys.argv[4]
            st, _ = api.req("GET", "api/kernels/" + kid)
            check(st == 404, "GET /api/kernels/%s -> %s" % (kid, st))
            st, lst = api.req("GET", "api/kernels")
            check(st == 200 and lst == [], "GET /api/kernels -> %s %r" % (st, lst))
        elif mode == "files":
            files(api, conn, check, out)
    except Exception as e:  # noqa: BLE001
        check(False, "%s: %s" % (type(e).__name__, e))
    out["ok"] = not failures
    out["failures"] = failures
    print(json.dumps(out))
    return 0 if not failures else 1


def files(api, conn, check, out):
    st, m = api.req("POST", "api/agent/sessions", {"files": [{"name": "sales.csv", "content": "x\n1\n2\n"}]},
                    timeout=180)
    if not check(st == 201 and isinstance(m, dict), "POST /api/agent/sessions -> %s %r" % (st, m)):
        return
    sid = m["id"]
    deadline = time.monotonic() + 180
    while m.get("state") not in ("idle", "failed", "stopped") and time.monotonic() < deadline:
        time.sleep(0.5)
        st, m = api.req("GET", "api/agent/sessions/" + sid)
    if not check(m.get("state") == "idle" and m.get("kernel_id"), "the session did not get idle: %r" % m):
        return
    out["session"], kid = sid, m["kernel_id"]
    check(m.get("files") == ["sales.csv"], "the session's files: %r" % m.get("files"))
    st, b = api.req("PUT", "api/agent/sessions/%s/files/notes.txt" % sid, raw=b"uploaded later\n",
                    headers={"Content-Type": "application/octet-stream"}, timeout=90)
    check(st == 201 and isinstance(b, dict) and b.get("replaced") is False, "PUT notes.txt -> %s %r" % (st, b))
    st, b = api.req("PUT", "api/agent/sessions/%s/files/data/more.csv" % sid, raw=b"y\n3\n",
                    headers={"Content-Type": "application/octet-stream"}, timeout=90)
    check(st == 201, "PUT data/more.csv -> %s %r" % (st, b))
    st, b = api.req("PUT", "api/agent/sessions/%s/files/sales.csv" % sid, raw=b"x\n1\n2\n3\n",
                    headers={"Content-Type": "application/octet-stream"}, timeout=90)
    check(st == 200 and isinstance(b, dict) and b.get("replaced") is True, "PUT over sales.csv -> %s %r" % (st, b))
    # Three at once: the launcher runs them one after another in the kernel.
    res = {}

    def put(i):
        res[i] = api.req("PUT", "api/agent/sessions/%s/files/c%d.txt" % (sid, i), raw=b"c%d" % i,
                         headers={"Content-Type": "application/octet-stream"}, timeout=90)[0]
    th = [threading.Thread(target=put, args=(i,)) for i in range(3)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    check(res == {0: 201, 1: 201, 2: 201}, "three PUTs at once -> %r" % res)
    c = conn(kid)
    r = c.execute("print(''.join(open('c%d.txt' % i).read() for i in range(3)))")
    check(r.stdout() == "c0c1c2\n", "the kernel read the three: %r" % r.stdout())
    r = c.execute("import os\nprint(os.getcwd())\n"
                  "print(repr(open('sales.csv').read()), repr(open('notes.txt').read()), "
                  "repr(open('data/more.csv').read()))\n"
                  "open('result.txt', 'w').write('rows: %d\\n' % (len(open('sales.csv').read().split()) - 1))")
    want = "%r %r %r\n" % ("x\n1\n2\n3\n", "uploaded later\n", "y\n3\n")
    lines = r.stdout().split("\n", 1)
    out["workdir"] = lines[0]
    check(len(lines) == 2 and lines[1] == want, "the kernel read %r (%s)" % (r.stdout(), wc.summarize(r.msgs)))
    c.close()
    st, body = api.req("GET", "api/agent/sessions/%s/files/result.txt" % sid, timeout=90)
    check(st == 200 and body == "rows: 3\n", "GET files/result.txt -> %s %r" % (st, body))
    st, body = api.req("GET", "api/agent/sessions/%s/files/nothere.txt" % sid, timeout=90)
    check(st == 404, "GET files/nothere.txt -> %s %r" % (st, body))
    st, _ = api.req("DELETE", "api/agent/sessions/" + sid, timeout=90)
    check(st == 204, "DELETE the session -> %s" % st)


if __name__ == "__main__":
    sys.exit(main())
