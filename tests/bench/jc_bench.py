#!/usr/bin/python3
"""jupyter_client's side of korch's benchmarks; one JSON object per result on stdout.

Run with Debian's /usr/bin/python3 (python3-jupyter-client 7.4.9, python3-ipykernel).

  jc_bench.py serve INFO_FILE              start ONE kernel with KernelManager, write
                                           {"connection_file", "pid"} to INFO_FILE, keep it
                                           until SIGTERM / SIGINT (or our parent exits), then
                                           shut it down
  jc_bench.py roundtrip CONNFILE N [MODE,...]  N executions of `pass` per mode:
        minimal      execute(), get_shell_msg until the reply, get_iopub_msg until
                     status idle with our parent (the fair equivalent of korch's wait)
        interactive  execute_interactive() (what users call)
        rawzmq       plain blocking pyzmq sockets + jupyter_client.session.Session:
                     a floor for any client on this kernel
  jc_bench.py stream CONNFILE MB           print MB MiB of stdout, MB/s (minimal loop)
  jc_bench.py start N                      N x (start_kernel + wait_for_ready), shutdown after each

With KORCH_BENCH_SAMPLES=PREFIX, samples (ms) are appended to PREFIX-<mode>.txt.
"""
import json
import os
import resource
import signal
import sys
import time

import zmq
from jupyter_client import BlockingKernelClient, KernelManager
from jupyter_client.session import Session

WARMUP = 50
TIMEOUT = 30


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def mem():
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "Threads"):
                out[k] = int(v.split()[0])
    return out


def stats(v):
    s = sorted(v)
    n = len(s)

    def pct(p):
        i = max(0, min(n - 1, -(-int(p * n) // 100) - 1))
        return s[i]

    total = sum(s)
    return {"n": n, "p50_ms": pct(50), "p99_ms": pct(99), "min_ms": s[0], "max_ms": s[-1],
            "mean_ms": total / n, "per_s": n / (total / 1e3)}


def save_samples(mode, v):
    prefix = os.environ.get("KORCH_BENCH_SAMPLES")
    if prefix:
        with open("%s-%s.txt" % (prefix, mode), "a") as f:
            f.writelines("%.4f\n" % x for x in v)


def client(connfile):
    kc = BlockingKernelClient(connection_file=connfile)
    kc.load_connection_file()
    kc.start_channels()
    kc.wait_for_ready(timeout=TIMEOUT)
    return kc


def run_minimal(kc, code, on_stream=None):
    """Execute and wait for BOTH execute_reply and status idle of our request."""
    msg_id = kc.execute(code)
    while True:
        reply = kc.get_shell_msg(timeout=TIMEOUT)
        if reply["parent_header"].get("msg_id") == msg_id:
            break
    while True:
        msg = kc.get_iopub_msg(timeout=TIMEOUT)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        t = msg["msg_type"]
        if t == "status" and msg["content"]["execution_state"] == "idle":
            break
        if t == "stream" and on_stream:
            on_stream(msg)
    return reply


def run_interactive(kc, code):
    return kc.execute_interactive(code, timeout=TIMEOUT, output_hook=lambda msg: None)


class RawClient:
    """Blocking pyzmq shell DEALER + iopub SUB, signing with jupyter_client's Session."""

    def __init__(self, connfile):
        with open(connfile) as f:
            info = json.load(f)
        self.ctx = zmq.Context()
        self.session = Session(key=info["key"].encode(), signature_scheme=info.get("signature_scheme",
                                                                                   "hmac-sha256"))
        if info.get("transport", "tcp") == "ipc":
            ep = lambda port: "ipc://%s-%s" % (info["ip"], port)  # noqa: E731
        else:
            ep = lambda port: "tcp://%s:%s" % (info["ip"], port)  # noqa: E731
        self.shell = self.ctx.socket(zmq.DEALER)
        self.shell.linger = 0
        self.shell.connect(ep(info["shell_port"]))
        self.iopub = self.ctx.socket(zmq.SUB)
        self.iopub.linger = 0
        self.iopub.setsockopt(zmq.SUBSCRIBE, b"")
        self.iopub.connect(ep(info["iopub_port"]))
        self.poller = zmq.Poller()
        self.poller.register(self.shell, zmq.POLLIN)
        self.poller.register(self.iopub, zmq.POLLIN)
        # slow joiner: ask for kernel_info until iopub delivers something
        deadline = time.monotonic() + TIMEOUT
        got_iopub = False
        while not got_iopub and time.monotonic() < deadline:
            self.session.send(self.shell, "kernel_info_request", {})
            for sock, _ in self.poller.poll(200):
                if sock is self.iopub:
                    got_iopub = True
                self.recv(sock)
        time.sleep(0.2)
        while self.poller.poll(0):
            for sock, _ in self.poller.poll(0):
                self.recv(sock)

    def recv(self, sock):
        _, frames = self.session.feed_identities(sock.recv_multipart())
        return self.session.deserialize(frames)

    def run(self, code):
        msg = self.session.send(self.shell, "execute_request",
                                {"code": code, "silent": False, "store_history": True,
                                 "user_expressions": {}, "allow_stdin": False, "stop_on_error": True})
        msg_id = msg["header"]["msg_id"]
        got_reply = got_idle = False
        while not (got_reply and got_idle):
            for sock, _ in self.poller.poll(TIMEOUT * 1000):
                m = self.recv(sock)
                if m["parent_header"].get("msg_id") != msg_id:
                    continue
                if sock is self.shell and m["msg_type"] == "execute_reply":
                    got_reply = True
                elif m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
                    got_idle = True

    def close(self):
        self.shell.close()
        self.iopub.close()
        self.ctx.term()


def cmd_roundtrip(connfile, n, modes):
    kc = None
    for mode in modes:
        if mode == "rawzmq":
            raw = RawClient(connfile)
            fn = raw.run
        else:
            kc = kc or client(connfile)
            fn = (lambda code: run_minimal(kc, code)) if mode == "minimal" else \
                (lambda code: run_interactive(kc, code))
        for _ in range(WARMUP):
            fn("pass")
        v = []
        t_all = time.perf_counter()
        for _ in range(n):
            t0 = time.perf_counter()
            fn("pass")
            v.append((time.perf_counter() - t0) * 1e3)
        t_all = time.perf_counter() - t_all
        save_samples(mode, v)
        out = {"client": "jupyter_client", "bench": "roundtrip", "mode": mode}
        out.update(stats(v))
        out["wall_per_s"] = n / t_all
        out.update(mem())
        emit(out)
        if mode == "rawzmq":
            raw.close()
    if kc:
        kc.stop_channels()


def cmd_stream(connfile, mb):
    kc = client(connfile)
    run_minimal(kc, "import sys")
    count = {"bytes": 0, "msgs": 0}

    def on_stream(msg):
        count["bytes"] += len(msg["content"]["text"])  # ASCII: chars == bytes
        count["msgs"] += 1

    code = "import sys\nfor _ in range(%d): sys.stdout.write('x' * (1 << 20))\n" % mb
    hwm0 = mem()["VmHWM"]
    t0 = time.perf_counter()
    reply = run_minimal(kc, code, on_stream)
    dt = time.perf_counter() - t0
    out = {"client": "jupyter_client", "bench": "stream", "mb": mb, "status": reply["content"]["status"],
           "received_bytes": count["bytes"], "stream_msgs": count["msgs"], "seconds": dt,
           "mb_per_s": count["bytes"] / (1 << 20) / dt, "VmHWM_before": hwm0}
    out.update(mem())
    emit(out)
    kc.stop_channels()
    return 0 if count["bytes"] == mb << 20 else 1


def cmd_start(n):
    v = []
    for _ in range(n):
        km = KernelManager(kernel_name="python3")
        t0 = time.perf_counter()
        km.start_kernel()
        kc = km.client()
        kc.start_channels()
        kc.wait_for_ready(timeout=60)
        v.append((time.perf_counter() - t0) * 1e3)
        kc.stop_channels()
        km.shutdown_kernel()
    save_samples("start", v)
    out = {"client": "jupyter_client", "bench": "start"}
    out.update(stats(v))
    emit(out)


class _Stop(Exception):
    pass


def cmd_serve(info_file):
    km = KernelManager(kernel_name="python3")
    parent = os.getppid()

    def on_signal(signum, frame):
        raise _Stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        km.start_kernel()
        kc = km.client()
        kc.start_channels()
        kc.wait_for_ready(timeout=60)
        kc.stop_channels()
        pid = getattr(km.provisioner, "pid", None)
        tmp = info_file + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"connection_file": km.connection_file, "pid": pid}, f)
        os.rename(tmp, info_file)
        # until a signal, or until whoever started us is gone
        while os.getppid() == parent:
            time.sleep(0.5)
    except _Stop:
        pass
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if km.has_kernel:
            km.shutdown_kernel(now=False)
        km.cleanup_resources()


def main(argv):
    if len(argv) >= 3 and argv[1] == "serve":
        return cmd_serve(argv[2])
    if len(argv) in (4, 5) and argv[1] == "roundtrip":
        modes = argv[4].split(",") if len(argv) == 5 else ["minimal", "interactive"]
        return cmd_roundtrip(argv[2], int(argv[3]), modes)
    if len(argv) == 4 and argv[1] == "stream":
        return cmd_stream(argv[2], int(argv[3]))
    if len(argv) == 3 and argv[1] == "start":
        return cmd_start(int(argv[2]))
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv) or 0)
