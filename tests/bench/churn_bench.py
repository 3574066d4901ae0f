#!/usr/bin/python3
"""Another client's round trip while container kernels churn (issue 13's goal).

usage: churn_bench.py KORCH [LAUNCHER]     (LAUNCHER default docker)

One `korch serve --launcher LAUNCHER`; one kernel, one websocket client looping
`pass` round trips (execute_reply AND status idle). First BENCH_QUIET round trips
on a quiet server; then the same client loops while BENCH_CHURN (default 5)
threads each start a kernel through REST (POST /api/kernels), restart it
(POST .../restart) and delete it (DELETE), BENCH_CYCLES times (default 1).
Prints p50 / p99 / max of both phases and the churn/quiet ratios as one JSON
line on stdout (a table on stderr). Every process it starts is stopped.
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "peers"))
sys.path.insert(0, HERE)
import server_bench as sb  # noqa: E402

KORCH = sys.argv[1] if len(sys.argv) > 1 else "build/korch"
LAUNCHER = sys.argv[2] if len(sys.argv) > 2 else "docker"
QUIET = int(os.environ.get("BENCH_QUIET", "300"))
CHURN = int(os.environ.get("BENCH_CHURN", "5"))
CYCLES = int(os.environ.get("BENCH_CYCLES", "1"))


def log(*a):
    print("bench-churn:", *a, file=sys.stderr, flush=True)


def stats(v):
    return {"n": len(v), "p50": round(sb.pct(v, 50), 2), "p99": round(sb.pct(v, 99), 2), "max": round(max(v), 2)}


def churn(srv, errors, rest_ms):
    try:
        for _ in range(CYCLES):
            t0 = time.perf_counter()
            model, _ = srv.post_kernel()
            kid = model["id"]
            st, _ = srv.http.req("POST", "api/kernels/%s/restart" % kid, {}, timeout=180)
            if st != 200:
                raise RuntimeError("restart -> %s" % st)
            srv.delete_kernel(kid)
            rest_ms.append((time.perf_counter() - t0) * 1e3)
    except Exception as e:  # noqa: BLE001
        errors.append(repr(e))


def main():
    sb.TMP = tempfile.mkdtemp(prefix="korch-churn-bench-")
    srv = sb.start_korch("--launcher", LAUNCHER)
    try:
        model, _ = srv.post_kernel()
        c = sb.WsClient(srv, model["id"], "v1")
        c.kernel_info()
        for _ in range(30):
            c.execute("pass")
        quiet = []
        for _ in range(QUIET):
            t0 = time.perf_counter()
            c.execute("pass")
            quiet.append((time.perf_counter() - t0) * 1e3)
        errors, rest_ms = [], []
        threads = [threading.Thread(target=churn, args=(srv, errors, rest_ms)) for _ in range(CHURN)]
        busy = []
        t_start = time.perf_counter()
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):
            t0 = time.perf_counter()
            c.execute("pass")
            busy.append((time.perf_counter() - t0) * 1e3)
        churn_s = time.perf_counter() - t_start
        c.close()
        if errors:
            raise RuntimeError("churn failed: %s" % "; ".join(errors))
        q, b = stats(quiet), stats(busy)
        out = {"launcher": LAUNCHER, "kernels": CHURN, "cycles": CYCLES, "quiet": q, "churn": b,
               "churn_s": round(churn_s, 1), "cycle_ms_p50": round(sb.pct(rest_ms, 50)),
               "ratio_p50": round(b["p50"] / q["p50"], 2), "ratio_max": round(b["max"] / q["max"], 2)}
        log("%d %s kernels started, restarted, deleted (%.1f s; one cycle p50 %d ms)" %
            (CHURN * CYCLES, LAUNCHER, churn_s, out["cycle_ms_p50"]))
        log("%-6s %6s %8s %8s %8s" % ("phase", "n", "p50 ms", "p99 ms", "max ms"))
        for name, s in (("quiet", q), ("churn", b)):
            log("%-6s %6d %8.2f %8.2f %8.2f" % (name, s["n"], s["p50"], s["p99"], s["max"]))
        log("ratio p50 %.2f, max %.2f; goal: churn max <= 20 ms -> %s" %
            (out["ratio_p50"], out["ratio_max"], "met" if b["max"] <= 20 else "NOT met"))
        print(json.dumps(out), flush=True)
    finally:
        srv.stop()


if __name__ == "__main__":
    try:
        main()
    finally:
        for p in sb.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(60)
                except subprocess.TimeoutExpired:
                    p.kill()
