#!/usr/bin/python3
"""korch serve next to jupyter_server 1.23 (Debian's), measured in the same run.

usage: server_bench.py KORCH      (scripts/bench-server.sh runs it; prints a table)

  rtt      execute `pass` round trip (execute_reply AND status idle) over the
           websocket, v1 and legacy, through korch serve and through jupyter_server,
           each in front of its own local ipykernel, and directly with
           jupyter_client (BlockingKernelClient, the minimal loop of jc_bench.py)
           and with raw pyzmq + Session, each on a kernel of its own. BENCH_N round
           trips per target (default 500) in BENCH_ROUNDS alternating blocks
           (default 4). The latency a gateway adds is its p50 minus a direct
           client's p50; the goal is judged against the raw floor (the larger
           figure for korch).
  relay    messages relayed per second: one client, the kernel runs
           `for i in range(BENCH_LINES): print(i, flush=True)` (default 20000);
           stream messages received / seconds until idle; korch, jupyter_server
           (v1) and direct, alternating, best of 2 each
  start    kernel start through REST: POST /api/kernels until 201, and until the
           kernel answers kernel_info over a websocket (usable); cold and from
           korch's warm pool (--pool 1; a cold start is forced with an env
           KERNEL_* variable, on the same server, with the pool full and idle),
           alternating, BENCH_STARTS each (default 20); jupyter_server cold for
           reference; then the same with --launcher docker (BENCH_DOCKER=0 skips it)
  memory   the server process's RSS per idle kernel (BENCH_RSS_KERNELS kernels,
           default 10) and the kernels' own PSS; RSS per open websocket (BENCH_WS,
           default 100, each after a kernel_info round trip); korch and
           jupyter_server (limit_rate off, so the relay bench measures relaying)

Every process it starts is ended before it exits (servers by SIGTERM, which
shuts their kernels down; jupyter_server also dies with us by PDEATHSIG).
"""
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "peers"))
sys.path.insert(0, HERE)
import serve_peer  # noqa: E402
import websocket  # noqa: E402
import ws_client as wc  # noqa: E402

from procfs import pss_kib  # noqa: E402

KORCH = sys.argv[1] if len(sys.argv) > 1 else "build/korch"
N = int(os.environ.get("BENCH_N", "500"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "4"))
LINES = int(os.environ.get("BENCH_LINES", "20000"))
STARTS = int(os.environ.get("BENCH_STARTS", "20"))
RSS_KERNELS = int(os.environ.get("BENCH_RSS_KERNELS", "10"))
NWS = int(os.environ.get("BENCH_WS", "100"))
DOCKER = os.environ.get("BENCH_DOCKER", "auto")
IMAGE = "korch-kernel-python3:latest"
WARMUP = 50
TMP = tempfile.mkdtemp(prefix="korch-server-bench-")
procs = []


def log(*a):
    print("bench-server:", *a, file=sys.stderr, flush=True)


def pct(v, p):
    s = sorted(v)
    return s[max(0, min(len(s) - 1, -(-int(p * len(s)) // 100) - 1))] if s else float("nan")


# --------------------------------------------------------------------------- servers

class Server:
    """A running server: base URL, token, its pid."""

    def __init__(self, kind, base, token, proc):
        self.kind, self.base, self.token, self.proc = kind, base, token, proc
        self.http = wc.Http(base, token)

    @property
    def pid(self):
        return self.proc.pid

    def post_kernel(self, body=None):
        t0 = time.perf_counter()
        st, model = self.http.req("POST", "api/kernels", body or {"name": "python3"}, timeout=180)
        ms = (time.perf_counter() - t0) * 1e3
        if st != 201:
            raise RuntimeError("%s: POST /api/kernels -> %s %r" % (self.kind, st, model))
        return model, ms

    def delete_kernel(self, kid):
        self.http.delete_kernel(kid)

    def pool(self):
        return ((self.http.req("GET", "api/status")[1] or {}).get("pool") or {}).get("python3") or {}

    def wait_pool(self, ready=1, timeout=180):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            p = self.pool()
            if p.get("ready") == ready and p.get("starting") == 0:
                return
            time.sleep(0.05)
        raise RuntimeError("the warm pool did not fill within %d s: %r" % (timeout, self.pool()))

    def stop(self):
        if self.kind == "jupyter_server":
            serve_peer.stop_jupyter_server(self.proc, 30)
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_korch(*extra):
    errf = open(os.path.join(TMP, "korch-serve-%d.log" % len(procs)), "w")
    p = subprocess.Popen([KORCH, "serve", "--port", "0", "--no-access-log"] + list(extra),
                         stdout=subprocess.PIPE, stderr=errf, stdin=subprocess.DEVNULL, text=True)
    procs.append(p)
    line = p.stdout.readline().strip()
    if not line.startswith("http://"):
        raise RuntimeError("korch serve %s printed %r (log %s)" % (" ".join(extra), line, errf.name))
    base, _, token = line.partition("?token=")
    srv = Server("korch", base, token, p)
    srv.log_path = errf.name  # its stderr: KORCH_LOOP_STALL_MS reports land here
    return srv


def start_jupyter_server():
    errf = open(os.path.join(TMP, "jupyter-server.log"), "w")
    # limit_rate off: jupyter_server's default drops IOPub past 1000 msg/s, which
    # would make the relay bench measure its limiter, not its relay
    p, url, token = serve_peer.start_jupyter_server(stderr=errf, extra=["--ServerApp.limit_rate=False"])
    procs.append(p)
    return Server("jupyter_server", url, token, p)


def children(pid):
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/stat" % d) as f:
                    rest = f.read().rsplit(")", 1)[1].split()
                if int(rest[1]) == pid and rest[0] != "Z":
                    out.append(int(d))
            except (OSError, IndexError, ValueError):
                pass
    return out


def status_kib(pid, keys=("VmRSS", "RssAnon")):
    out = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in keys:
                out[k] = int(v.split()[0])
    return out


# --------------------------------------------------------------------------- clients

class WsClient:
    """A lean websocket client: the same code in front of both servers."""

    def __init__(self, srv, kid, protocol):
        self.protocol = protocol
        self.session = uuid.uuid4().hex
        url = "ws" + srv.base[len("http"):].rstrip("/") + "/api/kernels/%s/channels?session_id=%s" % (
            kid, self.session)
        kw = {"subprotocols": [wc.V1]} if protocol == "v1" else {}
        self.ws = websocket.create_connection(url, timeout=60, header=["Authorization: token " + srv.token], **kw)
        if protocol == "v1" and self.ws.getsubprotocol() != wc.V1:
            raise RuntimeError("%s did not select the v1 subprotocol" % srv.kind)

    def send(self, msg_type, content):
        mid = uuid.uuid4().hex
        m = {"header": {"msg_id": mid, "msg_type": msg_type, "username": "bench", "session": self.session,
                        "date": "2026-01-01T00:00:00.000000Z", "version": "5.3"},
             "parent_header": {}, "metadata": {}, "content": content, "channel": "shell"}
        if self.protocol == "v1":
            self.ws.send_binary(wc.v1_encode("shell", m))
        else:
            self.ws.send(json.dumps(m))
        return mid

    def recv(self, timeout=120):
        # control_frame=True: websocket-client otherwise answers pings inside
        # recv_data and loops, so a server that pings (jupyter_server does)
        # would keep a lost message waiting forever
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError("no message within %d s" % timeout)
            self.ws.settimeout(left)
            op, data = self.ws.recv_data(control_frame=True)
            if op in (websocket.ABNF.OPCODE_TEXT, websocket.ABNF.OPCODE_BINARY):
                break
            if op == websocket.ABNF.OPCODE_CLOSE:
                raise RuntimeError("the server closed the websocket")
        if op == websocket.ABNF.OPCODE_TEXT:
            return json.loads(data)
        return wc.v1_decode(data) if self.protocol == "v1" else wc.legacy_binary_decode(data)

    def execute(self, code, on_msg=None):
        mid = self.send("execute_request", {"code": code, "silent": False, "store_history": False,
                                            "user_expressions": {}, "allow_stdin": False, "stop_on_error": True})
        reply = idle = False
        while not (reply and idle):
            m = self.recv()
            if m["parent_header"].get("msg_id") != mid:
                continue
            t = m["header"]["msg_type"]
            if t == "execute_reply":
                reply = True
            elif t == "status" and m["content"].get("execution_state") == "idle":
                idle = True
            elif on_msg:
                on_msg(m)

    def kernel_info(self, timeout=60):
        mid = self.send("kernel_info_request", {})
        while True:
            m = self.recv(timeout)
            if m["header"]["msg_type"] == "kernel_info_reply" and m["parent_header"].get("msg_id") == mid:
                return

    def close(self):
        try:
            self.ws.close(timeout=1)
        except Exception:  # noqa: BLE001
            pass


class Direct:
    """No server: a kernel of its own (KernelManager), and either jupyter_client's
    BlockingKernelClient (the minimal loop of jc_bench.py) or, raw=True, blocking
    pyzmq sockets + jupyter_client's Session (jc_bench.RawClient: the floor any
    client reaches; one client per kernel, so neither buffers the other's IOPub)."""

    def __init__(self, raw=False):
        import jc_bench
        from jupyter_client import KernelManager
        self.jc = jc_bench
        self.km = KernelManager(kernel_name="python3")
        self.km.start_kernel()
        self.kc = self.raw = None
        if raw:
            self.raw = jc_bench.RawClient(self.km.connection_file)
        else:
            self.kc = self.km.client()
            self.kc.start_channels()
            self.kc.wait_for_ready(timeout=60)

    def execute(self, code, on_msg=None):
        if self.raw:
            self._raw_execute(code, on_msg)
        elif on_msg is None:
            self.jc.run_minimal(self.kc, code)
        else:
            self.jc.run_minimal(self.kc, code, on_stream=on_msg)

    def _raw_execute(self, code, on_msg):
        r = self.raw
        msg = r.session.send(r.shell, "execute_request", {"code": code, "silent": False, "store_history": False,
                                                          "user_expressions": {}, "allow_stdin": False,
                                                          "stop_on_error": True})
        mid = msg["header"]["msg_id"]
        reply = idle = False
        deadline = time.monotonic() + 120
        while not (reply and idle):
            if time.monotonic() > deadline:
                raise RuntimeError("raw client: no reply + idle within 120 s (messages dropped?)")
            for sock, _ in r.poller.poll(1000):
                m = r.recv(sock)
                if m["parent_header"].get("msg_id") != mid:
                    continue
                t = m["msg_type"]
                if sock is r.shell and t == "execute_reply":
                    reply = True
                elif t == "status" and m["content"]["execution_state"] == "idle":
                    idle = True
                elif on_msg:
                    on_msg(m)

    def stop(self):
        try:
            if self.raw:
                self.raw.close()
            else:
                self.kc.stop_channels()
        finally:
            self.km.shutdown_kernel(now=False)


# --------------------------------------------------------------------------- benches

def bench_rtt(targets):
    samples = {name: [] for name in targets}
    for fn in targets.values():
        for _ in range(WARMUP):
            fn("pass")
    per = max(1, (N + ROUNDS - 1) // ROUNDS)
    names = list(targets)
    for r in range(ROUNDS):
        order = names[r % len(names):] + names[:r % len(names)]
        if r % 2:
            order.reverse()
        for name in order:
            fn = targets[name]
            for _ in range(per):
                t0 = time.perf_counter()
                fn("pass")
                samples[name].append((time.perf_counter() - t0) * 1e3)
        log("rtt round %d/%d done" % (r + 1, ROUNDS))
    return samples


def bench_relay(targets):
    code = "for i in range(%d): print(i, flush=True)" % LINES
    res = {name: [] for name in targets}
    for rep in range(2):
        for name, fn in targets.items():
            count = [0]

            def on_msg(m, count=count):
                if m["header"]["msg_type"] == "stream":
                    count[0] += 1

            t0 = time.perf_counter()
            try:
                fn(code, on_msg)
            except Exception as e:  # noqa: BLE001
                log("relay through %s failed: %s" % (name, e))
                continue
            dt = time.perf_counter() - t0
            res[name].append({"msgs": count[0], "seconds": dt, "per_s": count[0] / dt})
    return {name: max(v, key=lambda x: x["per_s"]) | {"runs": [round(x["per_s"]) for x in v]}
            for name, v in res.items() if v}


def usable_ms(srv, kid, t0):
    c = WsClient(srv, kid, "v1")
    c.kernel_info()
    ms = (time.perf_counter() - t0) * 1e3
    c.close()
    return ms


def bench_start_korch(launcher):
    srv = start_korch("--launcher", launcher, "--pool", "1")
    out = {"cold_post": [], "cold_usable": [], "pool_post": [], "pool_usable": [], "pool_misses": 0}
    try:
        for i in range(STARTS):
            srv.wait_pool(1)
            for kind in (("cold", "pool") if i % 2 == 0 else ("pool", "cold")):
                body = {"name": "python3"}
                if kind == "cold":
                    # KERNEL_* in env cannot be served from the pool: a fresh start
                    body["env"] = {"KERNEL_KORCH_BENCH": "cold"}
                else:
                    srv.wait_pool(1)
                t0 = time.perf_counter()
                model, ms = srv.post_kernel(body)
                out[kind + "_post"].append(ms)
                out[kind + "_usable"].append(usable_ms(srv, model["id"], t0))
                if kind == "pool" and srv.pool().get("ready", 0) != 0:
                    out["pool_misses"] += 1
                srv.delete_kernel(model["id"])
            if (i + 1) % 5 == 0:
                log("%s starts: %d/%d" % (launcher, i + 1, STARTS))
    finally:
        srv.stop()
    return out


def bench_start_js():
    srv = start_jupyter_server()
    out = {"cold_post": [], "cold_usable": []}
    try:
        for _ in range(STARTS):
            t0 = time.perf_counter()
            model, ms = srv.post_kernel()
            out["cold_post"].append(ms)
            out["cold_usable"].append(usable_ms(srv, model["id"], t0))
            srv.delete_kernel(model["id"])
    finally:
        srv.stop()
    return out


def bench_memory(srv, keep_kid):
    """RSS of the server per idle kernel and per websocket."""
    time.sleep(1)
    base = status_kib(srv.pid)
    before = set(children(srv.pid))
    kids = []
    for _ in range(RSS_KERNELS):
        kids.append(srv.post_kernel()[0]["id"])
    for kid in kids:  # ready (jupyter_server answers POST before that), then idle
        c = WsClient(srv, kid, "v1")
        c.kernel_info()
        c.close()
    time.sleep(2)
    after = status_kib(srv.pid)
    kpids = [p for p in children(srv.pid) if p not in before]
    pss = [pss_kib(p) for p in kpids]
    per_kernel = {k: (after[k] - base[k]) / RSS_KERNELS for k in base}
    for kid in kids:
        srv.delete_kernel(kid)
    time.sleep(1)
    base_ws = status_kib(srv.pid)
    conns = []
    for _ in range(NWS):
        c = WsClient(srv, keep_kid, "v1")
        c.kernel_info()
        conns.append(c)
    time.sleep(1)
    after_ws = status_kib(srv.pid)
    per_ws = {k: (after_ws[k] - base_ws[k]) / NWS for k in base_ws}
    for c in conns:
        c.close()
    return {"server_rss_kib": base["VmRSS"], "per_kernel_kib": per_kernel,
            "kernel_pss_kib": statistics.mean(pss) if pss else float("nan"), "kernel_procs": len(kpids),
            "per_ws_kib": per_ws, "rss_with_ws_kib": after_ws["VmRSS"]}


# --------------------------------------------------------------------------- main

def docker_ok():
    if DOCKER == "0":
        return False
    r = subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True)
    if r.returncode != 0:
        if DOCKER == "1":
            raise RuntimeError("BENCH_DOCKER=1 but the image %s is missing (make image)" % IMAGE)
        log("no docker image %s: the docker start bench is skipped" % IMAGE)
        return False
    return True


def main():
    R = {}
    korch = js = direct = raw = None
    conns = []
    try:
        log("starting korch serve, jupyter_server and a jupyter_client kernel")
        korch = start_korch("--launcher", "local")
        js = start_jupyter_server()
        direct = Direct()
        raw = Direct(raw=True)
        kk = korch.post_kernel()[0]["id"]
        jk = js.post_kernel()[0]["id"]
        clients = {}
        for srv, kid in ((korch, kk), (js, jk)):
            for proto in ("v1", "legacy"):
                c = WsClient(srv, kid, proto)
                c.kernel_info()
                conns.append(c)
                clients["%s %s" % (srv.kind, proto)] = c
        # memory first, while both server processes are fresh
        log("memory: %d idle kernels and %d websockets per server" % (RSS_KERNELS, NWS))
        R["memory"] = {"korch": bench_memory(korch, kk)}
        R["memory"]["jupyter_server"] = bench_memory(js, jk)
        targets = {name: c.execute for name, c in clients.items()}
        targets["jupyter_client direct"] = direct.execute
        targets["raw pyzmq direct"] = raw.execute
        log("rtt: %d x %d per target, %d targets" % (ROUNDS, (N + ROUNDS - 1) // ROUNDS, len(targets)))
        R["rtt"] = {k: {"p50": pct(v, 50), "p99": pct(v, 99), "mean": statistics.mean(v), "n": len(v)}
                    for k, v in bench_rtt(targets).items()}

        # only the measured client on each kernel: an unread one would fill
        # its server's buffers (and jupyter_server closes it on ping timeout)
        for name in ("korch legacy", "jupyter_server legacy"):
            clients[name].close()
            conns.remove(clients[name])
        log("relay: %d printed lines, twice per target" % LINES)
        # (not jupyter_client's BlockingKernelClient: its IOPub thread falls
        # behind 20000 messages, the kernel's PUB drops past the high-water
        # mark, and the lost `idle` leaves it waiting)
        R["relay"] = bench_relay({"korch v1": clients["korch v1"].execute,
                                  "jupyter_server v1": clients["jupyter_server v1"].execute,
                                  "raw pyzmq direct": raw.execute})

        for c in conns:
            c.close()
        conns = []
        R["memory"]["korch"]["rss_after_relay_kib"] = status_kib(korch.pid)["VmRSS"]
        korch.stop()
        js.stop()
        direct.stop()
        raw.stop()
        korch = js = direct = raw = None

        log("start: %d cold and %d pooled starts, local launcher" % (STARTS, STARTS))
        R["start_local"] = bench_start_korch("local")
        log("start: %d jupyter_server starts" % STARTS)
        R["start_js"] = bench_start_js()
        if docker_ok():
            log("start: %d cold and %d pooled starts, docker launcher" % (STARTS, STARTS))
            R["start_docker"] = bench_start_korch("docker")
    finally:
        for c in conns:
            c.close()
        for s in (korch, js):
            if s:
                s.stop()
        for d in (direct, raw):
            if d:
                d.stop()
        for p in procs:
            if p.poll() is None:
                p.kill()
    report(R)


def report(R):
    out = os.environ.get("BENCH_OUT")
    if out:
        with open(out, "w") as f:
            json.dump(R, f, indent=1)
    rt = R["rtt"]
    print()
    print("korch serve vs jupyter_server 1.23, execute `pass` round trip over the websocket "
          "(one local ipykernel each; n=%d each, alternating blocks)" % rt["korch v1"]["n"])
    print("%-28s %10s %10s %10s %18s %18s" % ("", "p50 ms", "p99 ms", "mean ms", "added vs jc p50",
                                               "added vs raw p50"))
    d50, r50 = rt["jupyter_client direct"]["p50"], rt["raw pyzmq direct"]["p50"]
    for name in ("korch v1", "korch legacy", "jupyter_server v1", "jupyter_server legacy", "jupyter_client direct",
                 "raw pyzmq direct"):
        r = rt[name]
        a1 = "" if "direct" in name else "%.2f" % (r["p50"] - d50)
        a2 = "" if "direct" in name else "%.2f" % (r["p50"] - r50)
        print("%-28s %10.2f %10.2f %10.2f %18s %18s" % (name, r["p50"], r["p99"], r["mean"], a1, a2))
    print("(added = the gateway's p50 minus a direct client's p50 on a kernel of its own; the websocket client is "
          "python websocket-client, the same code for both servers)")
    for proto in ("v1", "legacy"):
        k, j = rt["korch " + proto], rt["jupyter_server " + proto]
        # against the floor (raw pyzmq): the larger, more honest figure for korch
        ka, ja = k["p50"] - r50, j["p50"] - r50
        print("%s: p50 ratio korch/jupyter_server %.3f; added latency vs raw pyzmq: korch %.2f ms, "
              "jupyter_server %.2f ms -> %s (goal: jupyter_server's >= 5x korch's: %s)"
              % (proto, k["p50"] / j["p50"], ka, ja,
                 "%.1fx" % (ja / ka) if ka > 0 else "korch adds nothing measurable",
                 "MET" if ka <= 0 or ja / ka >= 5 else "NOT MET"))
    print()
    print("messages relayed per second (one client; the kernel prints %d lines, flush each; best of 2)" % LINES)
    for name, r in R["relay"].items():
        print("%-28s %10.0f msg/s  %8.0f lines/s  (%d stream messages in %.2f s; runs %s)"
              % (name, r["per_s"], LINES / r["seconds"], r["msgs"], r["seconds"], r["runs"]))
    nan = {"per_s": float("nan")}
    rk, rj, rd = (R["relay"].get(k, nan) for k in ("korch v1", "jupyter_server v1", "raw pyzmq direct"))
    print("ratio korch/jupyter_server %.2f, korch/raw direct %.2f (the kernel's own rate bounds all of them)"
          % (rk["per_s"] / rj["per_s"], rk["per_s"] / rd["per_s"]))
    print()
    print("kernel start through REST (ms): POST until 201, and until a websocket kernel_info reply (usable)")
    print("%-34s %9s %9s %11s %11s" % ("", "POST p50", "POST p99", "usable p50", "usable p99"))

    def row(name, post, usable):
        print("%-34s %9.1f %9.1f %11.1f %11.1f" % (name, pct(post, 50), pct(post, 99), pct(usable, 50),
                                                   pct(usable, 99)))
    for key, label in (("start_local", "local"), ("start_docker", "docker")):
        s = R.get(key)
        if not s:
            continue
        row("korch %s cold (n=%d)" % (label, len(s["cold_post"])), s["cold_post"], s["cold_usable"])
        row("korch %s warm pool (n=%d)" % (label, len(s["pool_post"])), s["pool_post"], s["pool_usable"])
        print("  %s: pool p99 POST %.1f ms (goal < 50 ms: %s); cold/pool p50 %.0fx; pool misses %d"
              % (label, pct(s["pool_post"], 99), "MET" if pct(s["pool_post"], 99) < 50 else "NOT MET",
                 pct(s["cold_post"], 50) / pct(s["pool_post"], 50), s["pool_misses"]))
    s = R["start_js"]
    row("jupyter_server local (n=%d)" % len(s["cold_post"]), s["cold_post"], s["cold_usable"])
    print("  (jupyter_server 1.23 answers POST once the process is launched, before the kernel is ready)")
    print()
    print("memory (KiB): the server process, per idle kernel and per open websocket")
    print("%-16s %12s %16s %16s %14s %14s %14s" % ("", "server RSS", "RSS/kernel", "RssAnon/kernel",
                                                   "kernel PSS", "RSS/ws", "RssAnon/ws"))
    for name in ("korch", "jupyter_server"):
        m = R["memory"][name]
        print("%-16s %12d %16.1f %16.1f %14.0f %14.1f %14.1f"
              % (name, m["server_rss_kib"], m["per_kernel_kib"]["VmRSS"], m["per_kernel_kib"]["RssAnon"],
                 m["kernel_pss_kib"], m["per_ws_kib"]["VmRSS"], m["per_ws_kib"]["RssAnon"]))
    mk, mj = R["memory"]["korch"], R["memory"]["jupyter_server"]
    print("(%d kernels, %d websockets each; ratios korch/jupyter_server: server RSS %.2f, RSS per websocket %.2f)"
          % (RSS_KERNELS, NWS, mk["server_rss_kib"] / mj["server_rss_kib"],
             mk["per_ws_kib"]["VmRSS"] / mj["per_ws_kib"]["VmRSS"] if mj["per_ws_kib"]["VmRSS"] else float("nan")))
    if "rss_after_relay_kib" in mk:
        print("korch serve RSS after the round trips and the relay bench: %d KiB" % mk["rss_after_relay_kib"])


if __name__ == "__main__":
    main()
