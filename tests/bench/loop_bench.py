#!/usr/bin/python3
"""Does kernel churn stall the server's loop? (issue 13's goal)

One `korch serve --launcher docker` (BENCH_LOOP_LAUNCHER). A websocket client
(v1 protocol) loops `pass` round trips on one kernel:
  quiet: nothing else happens on the server;
  churn: meanwhile 5 (BENCH_LOOP_KERNELS) other kernels are each started,
         restarted and deleted through REST, BENCH_LOOP_CYCLES times, in
         parallel (one thread per kernel).
Both phases run in the same process against the same server, so the ratio
churn/quiet says what the churn costs the other client. Goal: churn max
within 20 ms. Prints one line per phase and a JSON summary (BENCH_OUT=FILE
keeps it).
  Usage: tests/bench/loop_bench.py KORCH_BINARY
"""
import json
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import server_bench as sb  # noqa: E402  (its Server and WsClient, the same client code)

LAUNCHER = os.environ.get("BENCH_LOOP_LAUNCHER", "docker")
KERNELS = int(os.environ.get("BENCH_LOOP_KERNELS", "5"))
CYCLES = int(os.environ.get("BENCH_LOOP_CYCLES", "2"))
QUIET_N = int(os.environ.get("BENCH_LOOP_QUIET", "400"))
GOAL_MS = 20.0


def log(*a):
    print("bench-loop:", *a, file=sys.stderr, flush=True)


def rtts(c, stop=None, n=None):
    out = []
    while (n is None or len(out) < n) and (stop is None or not stop.is_set()):
        t0 = time.perf_counter()
        c.execute("pass")
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def churn(srv, errors, counts):
    for _ in range(CYCLES):
        try:
            model, _ = srv.post_kernel({"name": "python3"})
            kid = model["id"]
            st, body = srv.http.req("POST", "api/kernels/%s/restart" % kid, {}, timeout=180)
            if st != 200:
                raise RuntimeError("restart -> %s %r" % (st, body))
            st = srv.http.delete_kernel(kid)
            if st not in (204, 404):
                raise RuntimeError("delete -> %s" % st)
            counts.append(1)
        except Exception as e:  # noqa: BLE001
            errors.append(str(e))


def summary(name, v):
    return {"phase": name, "n": len(v), "p50_ms": round(sb.pct(v, 50), 2), "p99_ms": round(sb.pct(v, 99), 2),
            "max_ms": round(max(v), 2) if v else float("nan")}


def main():
    sb.KORCH = sys.argv[1] if len(sys.argv) > 1 else "build/korch"
    srv = sb.start_korch("--launcher", LAUNCHER)
    c = None
    try:
        model, _ = srv.post_kernel({"name": "python3"})
        c = sb.WsClient(srv, model["id"], "v1")
        c.kernel_info(timeout=120)
        rtts(c, n=50)  # warm-up
        quiet = rtts(c, n=QUIET_N)
        stop, errors, counts = threading.Event(), [], []
        threads = [threading.Thread(target=churn, args=(srv, errors, counts)) for _ in range(KERNELS)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        busy = []
        waiter = threading.Thread(target=lambda: ([t.join() for t in threads], stop.set()))
        waiter.start()
        busy = rtts(c, stop=stop)
        waiter.join()
        secs = time.perf_counter() - t0
        if errors:
            log("churn errors: %s" % "; ".join(errors[:3]))
        q, b = summary("quiet", quiet), summary("churn", busy)
        res = {"launcher": LAUNCHER, "kernels": KERNELS, "cycles": CYCLES, "churn_s": round(secs, 1),
               "lifecycles_done": len(counts), "errors": len(errors), "quiet": q, "churn": b,
               "ratio_p50": round(b["p50_ms"] / q["p50_ms"], 2) if q["p50_ms"] else None,
               "ratio_max": round(b["max_ms"] / q["max_ms"], 2) if q["max_ms"] else None,
               "goal_max_ms": GOAL_MS, "goal_met": b["max_ms"] <= GOAL_MS}
        for p in (q, b):
            print("bench-loop: %-5s %5d round trips  p50 %6.2f ms  p99 %7.2f ms  max %7.2f ms" %
                  (p["phase"], p["n"], p["p50_ms"], p["p99_ms"], p["max_ms"]))
        print("bench-loop: churn (%d kernels x %d start+restart+delete, %.1f s, %d done, %d errors): "
              "p50 x%.2f, max x%.2f of quiet; goal max <= %.0f ms: %s" %
              (KERNELS, CYCLES, secs, len(counts), len(errors), res["ratio_p50"] or 0, res["ratio_max"] or 0,
               GOAL_MS, "met" if res["goal_met"] else "NOT met"))
        print(json.dumps(res))
        if os.environ.get("BENCH_OUT"):
            with open(os.environ["BENCH_OUT"], "w") as f:
                json.dump(res, f, indent=1)
    finally:
        if c:
            c.close()
        srv.stop()


if __name__ == "__main__":
    main()
