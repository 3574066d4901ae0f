#!/usr/bin/python3
"""Does kernel churn stall the server's loop? (issue 13's goal)

One `korch serve --launcher docker` (BENCH_LOOP_LAUNCHER). A websocket client
(v1 protocol) loops `pass` round trips on one kernel (A), alternating each
with a round trip to a second kernel (B) of the same server that does NOT go
through korch: raw pyzmq + jupyter_client's Session on B's connection file
(the reference, measured in the same run and the same instants):
  quiet: nothing else happens on the server;
  churn: meanwhile 5 (BENCH_LOOP_KERNELS) other kernels are each started,
         restarted and deleted through REST, BENCH_LOOP_CYCLES times, in
         parallel (one thread per kernel).
Goal: churn max through korch within 20 ms. What korch itself adds is the
korch figure against the reference's; a reference that spikes as high says
the time goes to the machine (CPU), not to korch.

Attribution (BENCH_LOOP_TRACE=1, the default; 0 = a plain run): korch runs
with $KORCH_TRACE_WS (src/server/trace.h: when each request and its answers
passed through the relay) and $KORCH_LOOP_STALL_MS (BENCH_LOOP_STALL_MS,
default 10: loop handlers, rounds and wake-ups that slow, split into time on
a CPU and time runnable waiting for one). The slow round trips (>= 20 ms)
are split into: client -> korch (websocket), korch's relay, korch -> kernel
(until the kernel started executing, execute_reply's metadata.started),
the kernel, kernel -> korch (zmq), korch's websocket queue, korch ->
client; and each process's time runnable-but-waiting-for-a-CPU during the
churn (/proc/PID/task/*/schedstat) says who waited for the machine.

Prints one line per phase, the ratios and a JSON summary (BENCH_OUT=FILE
keeps it).
  Usage: tests/bench/loop_bench.py KORCH_BINARY
"""
import datetime
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import server_bench as sb  # noqa: E402  (its Server and WsClient, the same client code)
import jc_bench  # noqa: E402  (RawClient: the reference, no server in the path)

LAUNCHER = os.environ.get("BENCH_LOOP_LAUNCHER", "docker")
KERNELS = int(os.environ.get("BENCH_LOOP_KERNELS", "5"))
CYCLES = int(os.environ.get("BENCH_LOOP_CYCLES", "2"))
QUIET_N = int(os.environ.get("BENCH_LOOP_QUIET", "400"))
TRACE = os.environ.get("BENCH_LOOP_TRACE", "1") != "0"
STALL_MS = os.environ.get("BENCH_LOOP_STALL_MS", "10")
GOAL_MS = 20.0
SEGMENTS = ("client->korch", "korch relay", "korch->kernel", "kernel", "kernel->korch", "korch ws queue",
            "korch->client")


def log(*a):
    print("bench-loop:", *a, file=sys.stderr, flush=True)


def iso_us(s):
    """A Jupyter header date (ISO 8601, UTC) as epoch microseconds."""
    if isinstance(s, datetime.datetime):
        d = s
    else:
        d = datetime.datetime.fromisoformat(s.replace("Z", "+00:00"))
    if d.tzinfo is None:
        d = d.replace(tzinfo=datetime.timezone.utc)
    return int(d.timestamp() * 1e6)


def korch_rtt(c):
    """One `pass` through korch: the round trip in ms and, for attribution,
    when (epoch us) it was sent and each answer arrived, with the kernel's
    own dates."""
    t0, w0 = time.perf_counter(), int(time.time() * 1e6)
    mid = c.send("execute_request", {"code": "pass", "silent": False, "store_history": False,
                                     "user_expressions": {}, "allow_stdin": False, "stop_on_error": True})
    rec = {"id": mid, "sent": w0}
    while "reply" not in rec or "idle" not in rec:
        m = c.recv()
        if m["parent_header"].get("msg_id") != mid:
            continue
        t = m["header"]["msg_type"]
        if t == "execute_reply":
            rec["reply"] = int(time.time() * 1e6)
            rec["reply_date"] = m["header"]["date"]
            rec["started"] = m["metadata"].get("started")
        elif t == "status" and m["content"].get("execution_state") == "idle":
            rec["idle"] = int(time.time() * 1e6)
            rec["idle_date"] = m["header"]["date"]
    rec["ms"] = (time.perf_counter() - t0) * 1e3
    return rec


def direct_rtt(r):
    """One `pass` on the reference kernel, straight to its sockets (ms)."""
    t0 = time.perf_counter()
    msg = r.session.send(r.shell, "execute_request", {"code": "pass", "silent": False, "store_history": False,
                                                      "user_expressions": {}, "allow_stdin": False,
                                                      "stop_on_error": True})
    mid = msg["header"]["msg_id"]
    reply = idle = False
    deadline = time.monotonic() + 120
    while not (reply and idle):
        if time.monotonic() > deadline:
            raise RuntimeError("reference: no reply + idle within 120 s")
        for sock, _ in r.poller.poll(1000):
            m = r.recv(sock)
            if m["parent_header"].get("msg_id") != mid:
                continue
            if sock is r.shell and m["msg_type"] == "execute_reply":
                reply = True
            elif m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
                idle = True
    return (time.perf_counter() - t0) * 1e3


def rtts(c, r, stop=None, n=None):
    """Alternating: one through korch, one direct, the same instants."""
    ko, ref = [], []
    while (n is None or len(ko) < n) and (stop is None or not stop.is_set()):
        ko.append(korch_rtt(c))
        ref.append(direct_rtt(r))
    return ko, ref


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


# ------------------------------------------------------------ where time went

def kernel_pids(kid):
    """Host pids of a docker kernel's container (its first process and
    descendants), by the runtime-dir label korch gives it; [] for others."""
    rt = os.path.join(os.environ["KORCH_RUNTIME_DIR"], kid[:12])
    try:
        cid = subprocess.run(["docker", "ps", "-q", "--filter", "label=korch.runtime_dir=" + rt],
                             capture_output=True, text=True, timeout=30).stdout.split()
        pid = int(subprocess.run(["docker", "inspect", "-f", "{{.State.Pid}}", cid[0]], capture_output=True,
                                 text=True, timeout=30).stdout.strip()) if cid else 0
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return []
    out, todo = [], [pid] if pid > 0 else []
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(sb.children(p))
    return out


def run_wait_ms(pids):
    """Time the threads of pids spent runnable, waiting for a CPU (ms; the
    second field of /proc/PID/task/TID/schedstat)."""
    total = 0
    for p in pids:
        for f in glob.glob("/proc/%d/task/*/schedstat" % p):
            try:
                with open(f) as fh:
                    total += int(fh.read().split()[1])
            except (OSError, IndexError, ValueError):
                pass
    return total / 1e6


def conn_file(kid, tdir):
    """The connection file korch wrote for kernel kid (in its runtime dir),
    copied with the sockets' host path: a docker kernel's names the mount
    inside its container (/run/korch)."""
    rt = os.path.join(os.environ["KORCH_RUNTIME_DIR"], kid[:12])
    with open(os.path.join(rt, "kernel.json")) as f:
        info = json.load(f)
    if info.get("transport") == "ipc" and not os.path.exists("%s-%s" % (info["ip"], info["shell_port"])):
        info["ip"] = os.path.join(rt, os.path.basename(info["ip"]))
    path = os.path.join(tdir, "reference-kernel.json")
    with open(path, "w") as f:
        json.dump(info, f)
    return path


def read_trace(path):
    rx, q, w = {}, {}, {}
    try:
        with open(path) as f:
            for line in f:
                p = line.split()
                if p[0] == "rx" and len(p) == 5:
                    rx[p[2]] = (int(p[3]), int(p[4]))
                elif p[0] == "q" and len(p) == 6:
                    q[(p[3], p[4])] = (p[1], int(p[2]), int(p[5]))
                elif p[0] == "w" and len(p) == 4:
                    w[(p[1], int(p[2]))] = int(p[3])
    except OSError:
        pass
    return rx, q, w


def attribute(recs, trace):
    """Each round trip's critical path (to whichever answer came last) in ms
    per segment; None where the trace lacks a point."""
    rx, q, w = trace
    out = []
    for r in recs:
        last = "idle" if r["idle"] >= r["reply"] else "reply"
        key = (r["id"], "execute_reply" if last == "reply" else "status/idle")
        try:
            t_rx, t_sent = rx[r["id"]]
            ws, n, t_q = q[key]
            t_w = w[(ws, n)]
            started = iso_us(r["started"])
            date = iso_us(r[last + "_date"])
        except (KeyError, TypeError, ValueError):
            out.append(None)
            continue
        pts = (r["sent"], t_rx, t_sent, started, date, t_q, t_w, r[last])
        out.append({"ms": r["ms"], "last": last,
                    "seg": {s: (pts[i + 1] - pts[i]) / 1e3 for i, s in enumerate(SEGMENTS)}})
    return out


def stall_lines(path):
    """What KORCH_LOOP_STALL_MS reported in korch's log: late wake-ups (ms),
    and slow handlers and rounds as (ms, blocked ms, line), blocked being
    what was neither on a CPU nor waiting for one (a blocking call)."""
    woke, handlers = [], []
    try:
        with open(path) as f:
            for line in f:
                m = re.search(r"loop: woke (\d+) ms late", line)
                if m:
                    woke.append(int(m.group(1)))
                m = re.search(r"loop: (a \w+ handler .*|a round) ran (\d+) ms(?: \(on a cpu (\d+), "
                              r"runnable waiting for a cpu (\d+)\))?", line)
                if m:
                    ran = int(m.group(2))
                    blocked = ran - int(m.group(3)) - int(m.group(4)) if m.group(3) else ran
                    handlers.append((ran, blocked, line.split("loop: ", 1)[1].strip()))
    except OSError:
        pass
    return woke, sorted(handlers, reverse=True)


def report_attribution(res, recs, trace, srv):
    parts = [a for a in attribute(recs, trace) if a]
    slow = [a for a in parts if a["ms"] >= GOAL_MS]
    res["traced"] = len(parts)
    res["slow"] = len(slow)
    if slow:
        tot = {s: sum(a["seg"][s] for a in slow) for s in SEGMENTS}
        mx = {s: max(a["seg"][s] for a in slow) for s in SEGMENTS}
        allms = sum(tot.values()) or 1
        res["slow_segments_ms"] = {s: {"share": round(tot[s] / allms, 3), "max": round(mx[s], 2)} for s in SEGMENTS}
        print("bench-loop: the %d churn round trips through korch of >= %.0f ms (of %d traced), time per segment "
              "as share of their sum / max:" % (len(slow), GOAL_MS, len(parts)))
        print("bench-loop:   " + ", ".join("%s %.0f%% / %.1f ms" % (s, 100 * tot[s] / allms, mx[s]) for s in SEGMENTS))
        korch_share = (tot["korch relay"] + tot["korch ws queue"]) / allms
        print("bench-loop:   korch's own segments (relay + ws queue): %.1f%% of the slow round trips' time"
              % (100 * korch_share))
        worst = max(slow, key=lambda a: a["ms"])
        res["worst"] = worst
        print("bench-loop:   the slowest (%.1f ms, %s last): %s" % (
            worst["ms"], worst["last"], ", ".join("%s %.1f" % (s, worst["seg"][s]) for s in SEGMENTS)))
    woke, handlers = stall_lines(srv.log_path)
    blocked = max(handlers, key=lambda h: h[1]) if handlers else None
    res["loop_woke_late"] = {"count": len(woke), "max_ms": max(woke) if woke else 0}
    res["loop_slowest"] = [h[2] for h in handlers[:3]]
    res["loop_max_blocked_ms"] = blocked[1] if blocked else 0
    print("bench-loop: korch's loop (KORCH_LOOP_STALL_MS=%s): %d wake-ups >= %s ms late waiting for a CPU (max %s ms); "
          "%d slow handlers/rounds, slowest: %s" % (STALL_MS, len(woke), STALL_MS, max(woke) if woke else 0,
                                                   len(handlers), handlers[0][2] if handlers else "none"))
    print("bench-loop: korch's loop blocked (neither on a CPU nor waiting for one) at most %d ms in one handler/round%s"
          % (blocked[1] if blocked else 0, (": " + blocked[2]) if blocked and blocked[1] >= 3 else
             " (the reports are in whole ms: up to 2 ms is rounding)"))


def main():
    sb.KORCH = sys.argv[1] if len(sys.argv) > 1 else "build/korch"
    tdir = tempfile.mkdtemp(prefix="korch-bench-loop-")
    tpath = os.path.join(tdir, "trace")
    if TRACE:
        os.environ["KORCH_TRACE_WS"] = tpath
        os.environ["KORCH_LOOP_STALL_MS"] = STALL_MS
    srv = sb.start_korch("--launcher", LAUNCHER)
    c = r = None
    try:
        model, _ = srv.post_kernel({"name": "python3"})
        kid = model["id"]
        c = sb.WsClient(srv, kid, "v1")
        c.kernel_info(timeout=120)
        ref_model, _ = srv.post_kernel({"name": "python3"})
        c2 = sb.WsClient(srv, ref_model["id"], "v1")  # ready, then korch's client only
        c2.kernel_info(timeout=120)
        c2.close()
        r = jc_bench.RawClient(conn_file(ref_model["id"], tdir))
        rtts(c, r, n=50)  # warm-up
        quiet, quiet_ref = rtts(c, r, n=QUIET_N)
        watched = {"korch serve": [srv.pid], "measured kernel": kernel_pids(kid),
                   "reference kernel": kernel_pids(ref_model["id"]), "bench client": [os.getpid()]}
        wait0 = {k: run_wait_ms(v) for k, v in watched.items()}
        stop, errors, counts = threading.Event(), [], []
        threads = [threading.Thread(target=churn, args=(srv, errors, counts)) for _ in range(KERNELS)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        waiter = threading.Thread(target=lambda: ([t.join() for t in threads], stop.set()))
        waiter.start()
        busy, busy_ref = rtts(c, r, stop=stop)
        waiter.join()
        secs = time.perf_counter() - t0
        waits = {k: round(run_wait_ms(v) - wait0[k], 1) for k, v in watched.items()}
        if errors:
            log("churn errors: %s" % "; ".join(errors[:3]))
        qv, bv = [x["ms"] for x in quiet], [x["ms"] for x in busy]
        q, b = summary("quiet", qv), summary("churn", bv)
        qr, br = summary("quiet", quiet_ref), summary("churn", busy_ref)
        res = {"launcher": LAUNCHER, "kernels": KERNELS, "cycles": CYCLES, "churn_s": round(secs, 1),
               "lifecycles_done": len(counts), "errors": len(errors), "quiet": q, "churn": b,
               "reference": {"quiet": qr, "churn": br},
               "ratio_p50": round(b["p50_ms"] / q["p50_ms"], 2) if q["p50_ms"] else None,
               "ratio_max": round(b["max_ms"] / q["max_ms"], 2) if q["max_ms"] else None,
               "korch_added_p50_ms": {"quiet": round(q["p50_ms"] - qr["p50_ms"], 2),
                                      "churn": round(b["p50_ms"] - br["p50_ms"], 2)},
               "churn_max_korch_over_reference": round(b["max_ms"] / br["max_ms"], 2) if br["max_ms"] else None,
               "churn_p99_korch_over_reference": round(b["p99_ms"] / br["p99_ms"], 2) if br["p99_ms"] else None,
               "cpu_wait_ms": waits, "load": open("/proc/loadavg").read().split()[:3],
               "goal_max_ms": GOAL_MS, "goal_met": b["max_ms"] <= GOAL_MS}
        for name, p, pr in (("quiet", q, qr), ("churn", b, br)):
            print("bench-loop: %-5s %5d round trips  korch p50 %6.2f  p99 %7.2f  max %7.2f ms | direct (reference) "
                  "p50 %6.2f  p99 %7.2f  max %7.2f ms" % (name, p["n"], p["p50_ms"], p["p99_ms"], p["max_ms"],
                                                          pr["p50_ms"], pr["p99_ms"], pr["max_ms"]))
        print("bench-loop: churn (%d kernels x %d start+restart+delete, %.1f s, %d done, %d errors): korch p50 x%.2f, "
              "max x%.2f of quiet; goal max <= %.0f ms: %s" %
              (KERNELS, CYCLES, secs, len(counts), len(errors), res["ratio_p50"] or 0, res["ratio_max"] or 0,
               GOAL_MS, "met" if res["goal_met"] else "NOT met"))
        print("bench-loop: korch adds p50 %.2f ms quiet, %.2f ms churn; churn korch/reference: p99 x%.2f, max x%.2f "
              "(the reference's max is the machine's: %.1f ms)" %
              (res["korch_added_p50_ms"]["quiet"], res["korch_added_p50_ms"]["churn"],
               res["churn_p99_korch_over_reference"] or 0, res["churn_max_korch_over_reference"] or 0, br["max_ms"]))
        print("bench-loop: runnable but waiting for a CPU during the churn (schedstat): " +
              ", ".join("%s %.0f ms (%.1f%%)" % (k, v, 100 * v / 1e3 / secs) for k, v in waits.items()))
        if TRACE:
            srv.stop()  # flushes the trace
            report_attribution(res, busy, read_trace(tpath), srv)
        print(json.dumps(res))
        if os.environ.get("BENCH_OUT"):
            with open(os.environ["BENCH_OUT"], "w") as f:
                json.dump(res, f, indent=1)
    finally:
        if c:
            c.close()
        if r:
            r.close()
        srv.stop()
        shutil.rmtree(tdir, ignore_errors=True)


if __name__ == "__main__":
    main()
