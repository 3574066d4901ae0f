"""A Jupyter client inside the swarm, for tests/test_swarm_cluster.c.

    python3 -c "$(cat swarm_client.py)" TIMEOUT_S OUTSIDE_HOST:PORT SERVICE:SECRET_FILE...

Runs as a swarm service attached to the test's overlay network, started
before the kernels' services exist. For each SERVICE it resolves
tasks.SERVICE (the embedded DNS answers once the task has an address), loads
the connection file the kernel got as a swarm secret (/run/secrets/SECRET_FILE,
key included), points jupyter_client at the task's address over tcp, and:
waits for the first kernel_info_reply (the times the name resolved and the
reply arrived are "resolved_at" and "answered_at", on the host's clock:
containers share it), executes print(6*7) (reply and
idle both seen) and keeps its stdout, times 20 executions of `pass` and 200
heartbeat echoes (raw pyzmq REQ over the overlay). Then, once, 200 ZeroMQ
ping-pongs over ipc inside this container, as the local yardstick, and a
connection to OUTSIDE_HOST:PORT (an address the nodes reach, off the overlay):
it must fail, the network being internal.

Prints one JSON line per kernel ({"kernel", "addr", "answered_at", "stdout",
"status", "pass_ms_p50", "hb_ms_p50", ...} or {"kernel", "error"}) and one
{"ipc_ms_p50", "egress"} line; exits 0 when every kernel printed 42.
"""
import json
import os
import socket
import statistics
import struct
import sys
import threading
import time

import zmq
from jupyter_client import BlockingKernelClient


def dns_a(name, timeout=0.2):
    """One A query to the embedded DNS (127.0.0.11), the first address or None.

    Not gethostbyname: for a name that does not exist yet the embedded DNS
    stays silent and glibc waits 5 s before it asks again, which would hide
    when the task's name really appeared.
    """
    qid = os.getpid() & 0xFFFF
    q = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0)
    q += b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0"
    q += struct.pack(">HH", 1, 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(timeout)
    try:
        s.sendto(q, ("127.0.0.11", 53))
        r = s.recv(1500)
    except OSError:
        return None
    finally:
        s.close()
    rid, flags, qd, an = struct.unpack(">HHHH", r[:8])
    if rid != qid or flags & 0xF or an == 0:
        return None
    p = 12
    for _ in range(qd):  # skip the question: name, type, class
        while r[p]:
            p += r[p] + 1
        p += 5
    for _ in range(an):
        if r[p] & 0xC0 == 0xC0:
            p += 2
        else:
            while r[p]:
                p += r[p] + 1
            p += 1
        typ, _cls, _ttl, n = struct.unpack(">HHIH", r[p:p + 10])
        p += 10
        if typ == 1 and n == 4:
            return socket.inet_ntoa(r[p:p + 4])
        p += n
    return None


def resolve(name, deadline):
    while True:
        addr = dns_a(name)
        if addr:
            return addr
        if time.time() > deadline:
            raise TimeoutError("%s did not resolve" % name)
        time.sleep(0.05)


def ping_pong(sock, n):
    times = []
    for _ in range(n):
        t = time.perf_counter()
        sock.send(b"ping")
        if not sock.poll(5000):
            raise TimeoutError("no echo in 5 s")
        sock.recv()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def first_reply(res, secret, deadline):
    """Resolve the task, connect, wait for the first kernel_info_reply."""
    try:
        addr = resolve("tasks." + res["kernel"], deadline)
        res["resolved_at"] = time.time()
        res["addr"] = addr
        with open("/run/secrets/" + secret) as f:
            info = json.load(f)
        info["ip"] = addr
        kc = BlockingKernelClient()
        kc.load_connection_info(info)
        kc.start_channels()
        res["_kc"], res["_hb"] = kc, info["hb_port"]
        # A DEALER queues the request until the kernel's socket is there.
        msg_id = kc.kernel_info()
        while True:
            left = deadline - time.time()
            if left <= 0:
                raise TimeoutError("no kernel_info_reply from %s" % addr)
            try:
                reply = kc.get_shell_msg(timeout=min(left, 1.0))
            except Exception:
                continue
            if reply["parent_header"].get("msg_id") == msg_id:
                break
        res["answered_at"] = time.time()
    except Exception as e:
        res["error"] = "%s: %s" % (type(e).__name__, e)


def exercise(res, deadline):
    """print(6*7), then the round-trip figures."""
    kc = res["_kc"]
    kc.wait_for_ready(timeout=max(1.0, deadline - time.time()))
    text = []

    def hook(msg):
        if msg["header"]["msg_type"] == "stream":
            text.append(msg["content"]["text"])

    reply = kc.execute_interactive("print(6*7)", timeout=30, output_hook=hook)
    res["status"] = reply["content"]["status"]
    res["stdout"] = "".join(text)
    times = []
    for _ in range(20):
        t = time.perf_counter()
        kc.execute_interactive("pass", timeout=30, output_hook=lambda m: None)
        times.append((time.perf_counter() - t) * 1e3)
    res["pass_ms_p50"] = round(statistics.median(times), 3)
    hb = zmq.Context.instance().socket(zmq.REQ)
    hb.linger = 0
    hb.connect("tcp://%s:%d" % (res["addr"], res["_hb"]))
    try:
        res["hb_ms_p50"] = round(ping_pong(hb, 200), 3)
    finally:
        hb.close()


def ipc_yardstick():
    ctx = zmq.Context.instance()
    rep = ctx.socket(zmq.REP)
    rep.bind("ipc:///tmp/korch-yardstick")

    def echo():
        for _ in range(200):
            rep.send(rep.recv())

    t = threading.Thread(target=echo, daemon=True)
    t.start()
    req = ctx.socket(zmq.REQ)
    req.connect("ipc:///tmp/korch-yardstick")
    try:
        return round(ping_pong(req, 200), 3)
    finally:
        t.join(5)
        req.close(0)
        rep.close(0)


def egress(host, port):
    """The overlay is internal: a namespace address outside it must not answer."""
    try:
        socket.create_connection((host, port), timeout=3).close()
        return "reachable"
    except OSError as e:
        return "unreachable: %s" % (e.strerror or type(e).__name__)


def main():
    deadline = time.time() + float(sys.argv[1])
    outside = sys.argv[2].rsplit(":", 1)
    pairs = [a.split(":", 1) for a in sys.argv[3:]]
    results = [{"kernel": service} for service, _ in pairs]
    threads = [threading.Thread(target=first_reply, args=(r, secret, deadline))
               for r, (_, secret) in zip(results, pairs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ok = True
    for res in results:
        if "error" not in res:
            try:
                exercise(res, deadline)
            except Exception as e:  # report and go on with the next kernel
                res["error"] = "%s: %s" % (type(e).__name__, e)
        if "_kc" in res:
            res.pop("_kc").stop_channels()
        res.pop("_hb", None)
        ok = ok and res.get("stdout") == "42\n"
        print(json.dumps(res), flush=True)
    print(json.dumps({"ipc_ms_p50": ipc_yardstick(),
                      "egress": egress(outside[0], int(outside[1]))}), flush=True)
    sys.exit(0 if ok else 1)


main()
