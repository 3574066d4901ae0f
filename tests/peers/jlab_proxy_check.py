#!/usr/bin/python3
"""korch_jupyterlab's server extension judged in a real jupyter_server 2
(Debian trixie's, run in the JupyterLab chroot): /api/agent/... of the Jupyter
server proxied to korch serve with the gateway's credentials.

    python3 jlab_proxy_check.py KORCH_LINE EXT_DIR

KORCH_LINE is what korch serve printed (http://127.0.0.1:PORT/?token=T); it
runs the scripted LLM's "chunks" scenario (output in four stream messages
0.3 s apart). EXT_DIR holds the korch_jupyterlab package. Checks:

  - without a gateway: 503 whose message says what to configure;
  - without the Jupyter token: refused (403), korch never asked;
  - with it: a session created (201) through the proxy; korch's token appears
    in no answer; a turn's server-sent events arrive as korch sends them
    (the first output well before `done`), in order, ending in done ok;
  - GET, DELETE through the proxy;
  - nothing but the agent API is reached (issue 21): .. in every spelling
    (%2e%2e, %2E%2E, raw), encoded slashes and backslashes, double slashes,
    double encoding, routes and methods the panel does not use: each is
    404/405 and nothing of korch's (metrics, kernels) comes back;
  - @authorized: an authorizer that refuses "korch_agent" gets 403 on the
    agent API; one that refuses "execute" on "kernels" may list sessions but
    not create one.

Prints one JSON line {ok, failures, details}.
"""
import http.client
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse

failures = []
details = {}


def check(ok, what):
    if not ok:
        failures.append(what)
    return ok


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def start_server(ext_dir, gateway=None, authorizer=None):
    base = tempfile.mkdtemp(prefix="korch-jproxy-")
    for d in ("config", "data", "runtime", "root"):
        os.mkdir(os.path.join(base, d))
    port, token = free_port(), secrets.token_hex(16)
    env = dict(os.environ, HOME=base, PYTHONPATH=ext_dir, JUPYTER_CONFIG_DIR=base + "/config",
               JUPYTER_DATA_DIR=base + "/data", JUPYTER_RUNTIME_DIR=base + "/runtime")
    for k in list(env):
        if k.startswith("JUPYTER_GATEWAY"):
            del env[k]
    args = [sys.executable, "-m", "jupyter_server", "--no-browser", "--allow-root", "--ip=127.0.0.1", "--port=%d" % port,
            "--port-retries=0", "--ServerApp.token=" + token, "--ServerApp.root_dir=" + base + "/root",
            "--ServerApp.jpserver_extensions={'korch_jupyterlab': True}"]
    if gateway:
        args += ["--gateway-url=" + gateway["base"], "--GatewayClient.auth_token=" + gateway["token"]]
    if authorizer:
        args += ["--ServerApp.authorizer_class=korch_test_authz." + authorizer]
    log = open(os.path.join(base, "server.log"), "w")
    proc = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT)
    for _ in range(300):
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", "/api/status", headers={"Authorization": "token " + token})
            if c.getresponse().status == 200:
                return {"proc": proc, "port": port, "token": token, "base": base}
        except OSError:
            pass
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    raise RuntimeError("jupyter-server did not answer: " + open(base + "/server.log").read()[-2000:])


def stop_server(s):
    s["proc"].terminate()
    try:
        s["proc"].wait(10)
    except subprocess.TimeoutExpired:
        s["proc"].kill()
    if failures:
        details.setdefault("server_logs", []).append(open(s["base"] + "/server.log").read()[-1500:])
    shutil.rmtree(s["base"], ignore_errors=True)


AUTHZ = '''from jupyter_server.auth import Authorizer


class NoAgent(Authorizer):
    def is_authorized(self, handler, user, action, resource):
        return resource != "korch_agent"


class NoExecute(Authorizer):
    def is_authorized(self, handler, user, action, resource):
        return not (resource == "kernels" and action == "execute")
'''

# What must never come back through the proxy: korch's metrics and kernels.
LEAKS = ("korch_", "# TYPE", "# HELP", "execution_state", "kernelspecs")

TRAVERSALS = [
    ("GET", "/api/agent/%2e%2e/%2e%2e/metrics"),
    ("GET", "/api/agent/%2e%2e/kernels"),
    ("GET", "/api/agent/%2E%2E/kernels"),
    ("GET", "/api/agent/.%2e/kernels"),
    ("GET", "/api/agent/../kernels"),
    ("GET", "/api/agent/..%2fkernels"),
    ("GET", "/api/agent/..%2Fmetrics"),
    ("GET", "/api/agent/%2e%2e%2f%2e%2e%2fmetrics"),
    ("GET", "/api/agent/sessions/..%2F..%2F..%2Fmetrics"),
    ("GET", "/api/agent/sessions/%2e%2e/%2e%2e/%2e%2e/metrics"),
    ("GET", "/api/agent/sessions/x/files/..%2f..%2f..%2f..%2fmetrics"),
    ("GET", "/api/agent/sessions/x/files/%2e%2e/%2e%2e/%2e%2e/%2e%2e/metrics"),
    ("GET", "/api/agent/sessions/x/files/%2e%2e%5c%2e%2e%5cmetrics"),
    ("GET", "/api/agent/sessions/x/files/..\\..\\metrics"),
    ("GET", "/api/agent/sessions/x/files/%252e%252e/%252e%252e/%252e%252e/%252e%252e/metrics"),
    ("GET", "/api/agent//metrics"),
    ("GET", "/api/agent/sessions//..//..//metrics"),
    ("GET", "/api/agent/metrics"),
    ("GET", "/api/agent/%6d%65%74%72%69%63%73"),
    ("GET", "/api/agent/sessions/x/files/%00/../../metrics"),
    ("POST", "/api/agent/%2e%2e/kernels"),
    ("DELETE", "/api/agent/sessions"),
    ("PUT", "/api/agent/sessions/x/notebook"),
]


def call(s, method, path, body=None, token=True):
    c = http.client.HTTPConnection("127.0.0.1", s["port"], timeout=60)
    h = {"Content-Type": "application/json"}
    if token:
        h["Authorization"] = "token " + s["token"]
    c.request(method, path, body=json.dumps(body) if body is not None else None, headers=h)
    r = c.getresponse()
    data = r.read().decode("utf-8", "replace")
    return r.status, data, dict(r.getheaders())


def sse(s, path, body):
    """POST and read the answer as server-sent events: [(t, event, data)]."""
    c = http.client.HTTPConnection("127.0.0.1", s["port"], timeout=120)
    c.request("POST", path, body=json.dumps(body),
              headers={"Authorization": "token " + s["token"], "Content-Type": "application/json",
                       "Accept": "text/event-stream"})
    t0 = time.monotonic()
    r = c.getresponse()
    details["sse_status"] = r.status
    details["sse_content_type"] = r.getheader("Content-Type")
    events, ev, data = [], None, []
    while True:
        line = r.readline()
        if not line:
            break
        line = line.decode("utf-8").rstrip("\r\n")
        if line.startswith("event:"):
            ev = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].strip())
        elif line == "" and ev:
            events.append((time.monotonic() - t0, ev, json.loads("\n".join(data)) if data else None))
            if ev == "done":
                break
            ev, data = None, []
    c.close()
    return events


def main():
    korch_line, ext_dir = sys.argv[1], sys.argv[2]
    u = urllib.parse.urlparse(korch_line.strip())
    korch = {"base": "%s://%s" % (u.scheme, u.netloc),
             "token": urllib.parse.parse_qs(u.query).get("token", [""])[0]}

    # 1. no gateway: a clear 503
    s = start_server(ext_dir)
    try:
        st, body, _ = call(s, "GET", "/api/agent/sessions")
        details["no_gateway"] = {"status": st, "body": body[:300]}
        check(st == 503 and "--gateway-url" in body and "auth_token" in body,
              "without a gateway: %d %s" % (st, body[:200]))
    finally:
        stop_server(s)

    # 2. korch serve as the gateway
    s = start_server(ext_dir, korch)
    try:
        st, body, _ = call(s, "GET", "/api/agent/sessions", token=False)
        check(st == 403, "without the Jupyter token the proxy answered %d" % st)
        st, body, _ = call(s, "POST", "/api/agent/sessions", {})
        check(st == 201, "POST /api/agent/sessions through the proxy: %d %s" % (st, body[:300]))
        check(korch["token"] not in body, "korch's token is in an answer")
        sess = json.loads(body) if st == 201 else {}
        sid = sess.get("id", "x")
        details["session"] = {"id": sid, "kernel_id": sess.get("kernel_id")}
        events = sse(s, "/api/agent/sessions/%s/messages" % sid, {"content": "Print some chunks."})
        names = [e[1] for e in events]
        details["events"] = [[round(t, 2), e] for t, e, _ in events][:40]
        check(details.get("sse_status") == 200 and (details.get("sse_content_type") or "").startswith("text/event-stream"),
              "the turn answered %s %s" % (details.get("sse_status"), details.get("sse_content_type")))
        check(names[:1] == ["step"] and names[-1:] == ["done"], "events %s" % names)
        done = events[-1][2] if events and events[-1][1] == "done" else {}
        check(done.get("status") == "ok", "done: %s" % done)
        outs = [(t, d) for t, e, d in events if e == "output"]
        text = "".join(d.get("output", d).get("text", "") if isinstance(d, dict) else "" for _, d in outs)
        details["output_text"] = text[:200]
        check("CHUNK 0" in text and "CHUNK 3" in text, "the outputs hold %r" % text[:200])
        if outs and events:
            gap = events[-1][0] - outs[0][0]
            details["first_output_before_done_s"] = round(gap, 2)
            # the kernel printed CHUNK 0..3 0.3 s apart: streamed through, the first
            # arrives at least ~0.9 s before the end; buffered, all at once
            check(gap > 0.6, "the first output came %.2f s before done: the proxy buffered the stream" % gap)
        final = [d for _, e, d in events if e == "final"]
        check(final and "CHUNK" in json.dumps(final[0]), "final %s" % final)
        st, body, _ = call(s, "GET", "/api/agent/sessions/%s" % sid)
        check(st == 200 and sid in body and korch["token"] not in body, "GET the session: %d" % st)
        st, body, _ = call(s, "DELETE", "/api/agent/sessions/%s" % sid)
        check(st in (200, 204), "DELETE the session: %d %s" % (st, body[:200]))
        st, body, _ = call(s, "GET", "/api/agent/sessions/%s" % sid)
        check(st == 404, "GET a deleted session: %d" % st)
        # 3. only the agent API, in every spelling of a way out
        seen = {}
        for method, path in TRAVERSALS:
            st, body, hdrs = call(s, method, path)
            seen[path if method == "GET" else method + " " + path] = st
            leaked = [w for w in LEAKS if w in body]
            check(st in (403, 404, 405) and not leaked and korch["token"] not in body,
                  "%s %s answered %d%s: %s" % (method, path, st, " with korch's " + ",".join(leaked) if leaked else "",
                                                body[:120]))
        details["traversals"] = seen
        st, _, hdrs = call(s, "DELETE", "/api/agent/sessions")
        check(st == 405 and "GET" in hdrs.get("Allow", ""), "DELETE /api/agent/sessions: %d %s" % (st, hdrs.get("Allow")))
        # the same request, allowed: reaches korch
        st, body, _ = call(s, "GET", "/api/agent/sessions")
        check(st == 200 and body.startswith("["), "GET /api/agent/sessions after the attempts: %d" % st)
    finally:
        stop_server(s)

    # 4. jupyter_server's authorization decides too
    with open(os.path.join(ext_dir, "korch_test_authz.py"), "w") as f:
        f.write(AUTHZ)
    s = start_server(ext_dir, korch, authorizer="NoAgent")
    try:
        st, body, _ = call(s, "GET", "/api/agent/sessions")
        check(st == 403 and not body.startswith("["), "an authorizer refusing korch_agent: GET answered %d" % st)
        st, body, _ = call(s, "POST", "/api/agent/sessions", {})
        check(st == 403, "an authorizer refusing korch_agent: POST answered %d" % st)
        details["authz_no_agent"] = st
    finally:
        stop_server(s)
    s = start_server(ext_dir, korch, authorizer="NoExecute")
    try:
        st, body, _ = call(s, "GET", "/api/agent/sessions")
        check(st == 200, "an authorizer refusing kernels:execute: listing answered %d" % st)
        st, body, _ = call(s, "POST", "/api/agent/sessions", {})
        check(st == 403 and "kernels" in body, "an authorizer refusing kernels:execute: create answered %d %s" %
              (st, body[:200]))
        details["authz_no_execute"] = st
    finally:
        stop_server(s)


try:
    main()
except Exception as e:  # noqa: BLE001  (reported, never swallowed)
    failures.append("%s: %s" % (type(e).__name__, e))
print(json.dumps({"scenario": "jlab_proxy", "ok": not failures, "failures": failures, "details": details}))
sys.exit(1 if failures else 0)
