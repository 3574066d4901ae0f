#!/usr/bin/python3
"""Relay throughput of two korch builds, alternating in the same window.

server_bench.py's relay step alone (one v1 websocket client, a local
ipykernel that runs `for i in range(BENCH_LINES): print(i, flush=True)`,
stream messages received / seconds until idle), for build A and build B in
turn, BENCH_AB_ROUNDS rounds (default 3) of 2 runs each, the order flipped
every round; a fresh `korch serve` per round and build. Prints each build's
runs, the load average and the server's RSS after each round, and the ratio B/A of the medians
and of the bests. Nothing is timed against a limit: it is a comparison.
  Usage: tests/bench/relay_ab.py KORCH_A KORCH_B     (A = old, B = new)
"""
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import server_bench as sb  # noqa: E402

ROUNDS = int(os.environ.get("BENCH_AB_ROUNDS", "3"))


def load():
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


def relay_runs(korch, runs=2):
    sb.KORCH = korch
    srv = sb.start_korch("--launcher", "local")
    c = None
    try:
        kid = srv.post_kernel()[0]["id"]
        c = sb.WsClient(srv, kid, "v1")
        c.kernel_info()
        for _ in range(20):
            c.execute("pass")
        out = []
        for _ in range(runs):
            r = sb.bench_relay({"x": c.execute})
            out.extend(r["x"]["runs"] if "x" in r else [])
        return out, sb.status_kib(srv.pid)["VmRSS"]
    finally:
        if c:
            c.close()
        srv.stop()


def main():
    a, b = sys.argv[1], sys.argv[2]
    res = {a: [], b: []}
    for i in range(ROUNDS):
        order = (a, b) if i % 2 == 0 else (b, a)
        for k in order:
            l0 = load()
            runs, rss = relay_runs(k, 1)  # bench_relay itself runs twice
            res[k].extend(runs)
            print("relay-ab: round %d %s: %s msg/s (load %s; korch serve RSS after: %d KiB)" %
                  (i + 1, "A" if k == a else "B", runs, l0, rss), flush=True)
    ma, mb = statistics.median(res[a]), statistics.median(res[b])
    print("relay-ab: A %s: median %.0f best %.0f msg/s; B %s: median %.0f best %.0f msg/s" %
          (a, ma, max(res[a]), b, mb, max(res[b])))
    print("relay-ab: B/A median %.2f, best %.2f" % (mb / ma, max(res[b]) / max(res[a])))


if __name__ == "__main__":
    main()
