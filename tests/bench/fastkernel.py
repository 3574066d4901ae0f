#!/usr/bin/python3
"""A ready data kernel: forked from a template vs a plain start vs the pool (issue 28).

usage: fastkernel.py KORCH      (scripts/bench-fastkernel.sh runs it; prints a table)

Four `korch serve --launcher sandbox` in the same run: plain, --pool 1, --fork,
and --fork with KORCH_FORK_KEEP_SHELL=0 ("fork0": each fork makes its own IPython
shell, as before the template kept one: the before of the same run).
BENCH_PARTS (default ready,memory,burst,run) picks what is measured.

  ready    POST /api/kernels -> kernel_info over the websocket (usable) -> an
           execute of `import numpy, pandas, matplotlib.pyplot` done (a ready
           data kernel), BENCH_STARTS each (default 20), rotating; the fork
           server's template is made by one warm-up start first (and the pool
           refilled between its starts). Ratios to the plain start.
  memory   PSS of BENCH_RSS_KERNELS idle kernels (default 10) with the data
           stack imported, per kernel: all the processes of a kernel's
           sandbox (bwrap x2 + ipykernel; fork: A, B and the ipykernel), the
           template's own shown apart; and their private pages alone (USS)
  burst    BENCH_BURST kernels (default 50) asked for at once from the fork
           server: time until every one answered kernel_info and ran
           `import pandas`; the plain start's burst of BENCH_BURST_PLAIN
           (default 10) beside it
  run      `korch run` (the demo's replayed session on sales.csv): exec to the
           end of its first step, plain and --fork, BENCH_RUNS each (default 5)
"""
import os
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import server_bench as sb  # noqa: E402  (its Server, WsClient, children)
from procfs import pss_kib  # noqa: E402

KORCH = sys.argv[1] if len(sys.argv) > 1 else "build/korch"
sb.KORCH = KORCH
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
STARTS = int(os.environ.get("BENCH_STARTS", "20"))
RSS_KERNELS = int(os.environ.get("BENCH_RSS_KERNELS", "10"))
BURST = int(os.environ.get("BENCH_BURST", "50"))
BURST_PLAIN = int(os.environ.get("BENCH_BURST_PLAIN", "10"))
RUNS = int(os.environ.get("BENCH_RUNS", "5"))
PARTS = os.environ.get("BENCH_PARTS", "ready,memory,burst,run").split(",")
DATA = "import numpy, pandas, matplotlib.pyplot"


def log(*a):
    print("bench-fastkernel:", *a, file=sys.stderr, flush=True)


def p50(v):
    return statistics.median(v) if v else float("nan")


def ready_once(srv):
    """ms to usable (kernel_info) and to a data kernel (the imports done)."""
    t0 = time.perf_counter()
    model, _ = srv.post_kernel({"name": "python3"})
    c = sb.WsClient(srv, model["id"], "v1")
    c.kernel_info()
    usable = (time.perf_counter() - t0) * 1e3
    c.execute(DATA)
    data = (time.perf_counter() - t0) * 1e3
    c.close()
    return model["id"], usable, data


def uss_kib(pid):
    """A process's own pages (Private_Clean + Private_Dirty): what it alone holds."""
    n = 0
    try:
        with open("/proc/%d/smaps_rollup" % pid) as f:
            for line in f:
                if line.startswith("Private_"):
                    n += int(line.split()[1])
    except OSError:
        pass
    return n


def descendants(pid):
    out, todo = [], [pid]
    while todo:
        kids = sb.children(todo.pop())
        out += kids
        todo += kids
    return out


def template_pid(srv):
    for p in sb.children(srv.pid):
        try:
            if b"korch-template" in open("/proc/%d/cmdline" % p, "rb").read():
                return p
        except OSError:
            pass
    return None


def bench_ready(servers):
    res = {k: ([], []) for k in servers}
    for k, srv in servers.items():  # warm: the page cache, the fork server's template
        kid, _, _ = ready_once(srv)
        srv.delete_kernel(kid)
    names = list(servers)
    for i in range(STARTS):
        for k in names[i % len(names):] + names[:i % len(names)]:
            srv = servers[k]
            if k == "pool":
                srv.wait_pool(1)
            kid, usable, data = ready_once(srv)
            res[k][0].append(usable)
            res[k][1].append(data)
            srv.delete_kernel(kid)
        if (i + 1) % 5 == 0:
            log("ready: %d/%d" % (i + 1, STARTS))
    return res


def bench_memory(srv, fork):
    before = set(descendants(srv.pid))
    kids = []
    for _ in range(RSS_KERNELS):
        kid, _, _ = ready_once(srv)  # the data stack imported in every one
        kids.append(kid)
    time.sleep(2)
    tpl = template_pid(srv) if fork else None
    procs = [p for p in descendants(srv.pid) if p not in before and p != tpl]
    total = sum(pss_kib(p) for p in procs)
    own = sum(uss_kib(p) for p in procs)
    out = {"per_kernel_mib": total / RSS_KERNELS / 1024, "procs": len(procs), "own_mib": own / RSS_KERNELS / 1024,
           "template_mib": pss_kib(tpl) / 1024 if tpl else 0.0}
    for kid in kids:
        srv.delete_kernel(kid)
    return out


def bench_burst(srv, n):
    done, errs = [], []

    def one():
        try:
            kid, _, data = ready_once(srv)
            done.append((kid, data))
        except Exception as e:  # noqa: BLE001
            errs.append(repr(e))
    threads = [threading.Thread(target=one) for _ in range(n)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = (time.perf_counter() - t0) * 1e3
    for kid, _ in done:
        srv.delete_kernel(kid)
    return {"n": n, "ok": len(done), "all_ms": wall, "p50_ms": p50([d for _, d in done]), "errors": errs[:3]}


def run_first_step(fork):
    """exec of korch run to the end of its first step (its '(ok, N s)' line)."""
    sess = os.path.join(sb.TMP, "run-%d-%d" % (fork, time.monotonic_ns()))
    argv = [KORCH, "run", "--llm", "replay:" + os.path.join(ROOT, "scripts/demo/replay.json"), "--launcher",
            "sandbox", "--file", os.path.join(ROOT, "scripts/demo/sales.csv"), "--session", sess,
            "Which region brings the most revenue? Show a chart."] + (["--fork"] if fork else [])
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    first = None
    for line in p.stdout:
        if first is None and line.lstrip().startswith(b"(ok,"):
            first = (time.perf_counter() - t0) * 1e3
    p.wait()
    total = (time.perf_counter() - t0) * 1e3
    if p.returncode != 0 or first is None:
        raise RuntimeError("korch run%s failed (exit %s)" % (" --fork" if fork else "", p.returncode))
    return first, total


def start_fork0():
    os.environ["KORCH_FORK_KEEP_SHELL"] = "0"
    try:
        return sb.start_korch("--launcher", "sandbox", "--fork")
    finally:
        del os.environ["KORCH_FORK_KEEP_SHELL"]


def main():
    servers = {}
    R, M, B = {}, {}, {}
    try:
        servers["plain"] = sb.start_korch("--launcher", "sandbox")
        servers["pool"] = sb.start_korch("--launcher", "sandbox", "--pool", "1")
        servers["fork"] = sb.start_korch("--launcher", "sandbox", "--fork")
        servers["fork0"] = start_fork0()
        servers["pool"].wait_pool(1)
        if "ready" in PARTS:
            log("ready data kernel, %d each (rotating) ..." % STARTS)
            R = bench_ready(servers)
        if "memory" in PARTS:
            log("memory of %d idle data kernels ..." % RSS_KERNELS)
            M = {k: bench_memory(servers[k], k.startswith("fork")) for k in ("plain", "fork", "fork0")}
        if "burst" in PARTS:
            log("burst of %d (fork) and %d (plain) ..." % (BURST, BURST_PLAIN))
            B = {"fork": bench_burst(servers["fork"], BURST), "plain": bench_burst(servers["plain"], BURST_PLAIN)}
    finally:
        for srv in servers.values():
            srv.stop()
    runs = {False: [], True: []}
    if "run" in PARTS:
        log("korch run to its first step, %d each ..." % RUNS)
        for i in range(RUNS):
            for fork in ((False, True) if i % 2 == 0 else (True, False)):
                runs[fork].append(run_first_step(fork))
    report(R, M, B, runs)


def report(R, M, B, runs):
    cols = ("plain", "pool", "fork", "fork0")
    print("%-50s %9s %9s %9s %9s" % (("", ) + cols))
    if R:
        plain_u, plain_d = p50(R["plain"][0]), p50(R["plain"][1])
        print("%-50s %9.0f %9.0f %9.0f %9.0f" % (("POST -> kernel_info p50 (ms)",) + tuple(p50(R[k][0]) for k in cols)))
        print("%-50s %9.0f %9.0f %9.0f %9.0f   goal: fork <= 150" % (("POST -> data stack imported p50 (ms)",) +
                                                                     tuple(p50(R[k][1]) for k in cols)))
        print("%-50s %9.2f %9.2f %9.2f %9.2f" % (("ratio to plain, kernel_info",) +
                                                 tuple(p50(R[k][0]) / plain_u for k in cols)))
        print("%-50s %9.2f %9.2f %9.2f %9.2f" % (("ratio to plain, data kernel",) +
                                                 tuple(p50(R[k][1]) / plain_d for k in cols)))
    if M:
        print("%-50s %9.1f %9s %9.1f %9.1f   goal: fork <= 15" % (
            "PSS per idle data kernel (MiB)", M["plain"]["per_kernel_mib"], "(plain)", M["fork"]["per_kernel_mib"],
            M["fork0"]["per_kernel_mib"]))
        print("%-50s %9.1f %9s %9.1f %9.1f" % ("own (private) memory per idle data kernel (MiB)",
                                               M["plain"]["own_mib"], "", M["fork"]["own_mib"],
                                               M["fork0"]["own_mib"]))
        print("%-50s %9s %9s %9.1f %9.1f" % ("the template's own PSS (MiB, once per kernelspec)", "", "",
                                             M["fork"]["template_mib"], M["fork0"]["template_mib"]))
    for k in B:
        b = B[k]
        print("%-50s %9.0f ms for all, p50 %.0f ms%s" % ("burst of %d (%s): %d ready in" % (b["n"], k, b["ok"]),
                                                         b["all_ms"], b["p50_ms"],
                                                         "   goal: 50 in <= 5000" if k == "fork" else ""))
        if b["errors"]:
            print("    errors: %s" % "; ".join(b["errors"]))
    if runs[False]:
        rp, rf = p50([r[0] for r in runs[False]]), p50([r[0] for r in runs[True]])
        print("%-50s %9.0f %9s %9.0f   ratio %.2f" % ("korch run: exec -> first step done p50 (ms)", rp, "", rf,
                                                       rf / rp))
        print("%-50s %9.0f %9s %9.0f" % ("korch run: whole replayed session p50 (ms)",
                                         p50([r[1] for r in runs[False]]), "", p50([r[1] for r in runs[True]])))
    print("load after: %s" % " ".join(open("/proc/loadavg").read().split()[:3]))


if __name__ == "__main__":
    main()
