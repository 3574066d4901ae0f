#!/bin/bash
# korch vs jupyter_client, on this machine.  Usage: scripts/bench.sh [BUILD]   (default: build)
#
# Starts ONE kernel with jupyter_client's KernelManager and measures both clients
# against that same kernel, alternating them (jc, korch, jc, korch) so warm-up and
# noise fall on both:
#   - execute `pass` round trip (reply AND status idle), BENCH_N runs each (default 1000)
#     in BENCH_ROUNDS alternating blocks (default 4); jupyter_client three ways: the
#     minimal execute/get_shell_msg/get_iopub_msg loop (the ratio's baseline),
#     execute_interactive, and raw pyzmq + Session (the floor any client can reach)
#   - stdout throughput, BENCH_MB MiB printed at once (default 50), twice each
#   - start-to-ready of a new local kernel, p50 of BENCH_STARTS (default 10)
# then prints a table with the ratios korch / jupyter_client and shuts the kernel
# down. Every process it starts carries KORCH_BENCH_TAG in its environment; the exit
# trap ends whichever of them is still there (by pid), so no kernel is left behind.
# Raw JSON results and samples stay in $BENCH_OUT if set (else a temp dir, removed).
set -euo pipefail

BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
PY=/usr/bin/python3
KB=$BUILD/korch-bench
JCB=$ROOT/tests/bench/jc_bench.py
N=${BENCH_N:-1000}
MB=${BENCH_MB:-50}
STARTS=${BENCH_STARTS:-10}
ROUNDS=${BENCH_ROUNDS:-4}
PER=$(( (N + ROUNDS - 1) / ROUNDS ))

[ -x "$KB" ] || { echo "bench: '$KB' not built (run make bench)" >&2; exit 2; }
$PY -c 'import jupyter_client, ipykernel' 2>/dev/null ||
    { echo "bench: $PY lacks jupyter_client / ipykernel (run scripts/setup.sh)" >&2; exit 2; }

if [ -n "${BENCH_OUT:-}" ]; then
    OUT=$BENCH_OUT
    mkdir -p "$OUT"
    rm -f "$OUT"/*.txt "$OUT"/*.jsonl "$OUT"/kernel.json
    KEEP=1
else
    OUT=$(mktemp -d /tmp/korch-bench.XXXXXX)
    KEEP=0
fi
TAG=korch-bench-$$-$RANDOM
export PYDEVD_DISABLE_FILE_VALIDATION=1   # quiets ipykernel's debugger warning
SERVE_PID=""

# Pids of live processes whose environment carries our tag (ours, and only ours).
tagged_pids() {
    local p
    for p in /proc/[0-9]*; do
        p=${p#/proc/}
        [ "$p" = "$$" ] && continue
        tr '\0' '\n' 2>/dev/null <"/proc/$p/environ" | grep -qx "KORCH_BENCH_TAG=$TAG" && echo "$p"
    done
    return 0
}

cleanup() {
    local rc=$? p i
    trap - EXIT INT TERM
    if [ -n "$SERVE_PID" ] && kill -0 "$SERVE_PID" 2>/dev/null; then
        kill -TERM "$SERVE_PID" 2>/dev/null || true      # shuts its kernel down
        for i in $(seq 50); do kill -0 "$SERVE_PID" 2>/dev/null || break; sleep 0.1; done
    fi
    for p in $(tagged_pids); do kill -TERM "$p" 2>/dev/null || true; done
    sleep 0.3
    for p in $(tagged_pids); do kill -KILL "$p" 2>/dev/null || true; done
    [ "$KEEP" = 1 ] || rm -rf "$OUT"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Every step in the background under a time limit, so the traps run at once on a
# signal (bash defers them while a foreground child runs) and a hung step fails.
STEP_TIMEOUT=${BENCH_STEP_TIMEOUT:-180}
run() {
    KORCH_BENCH_TAG=$TAG timeout -k 5 "$STEP_TIMEOUT" "$@" &
    wait $!
}
say() { printf 'bench: %s\n' "$*" >&2; }

# ------------------------------------------------------------ one kernel
say "starting one kernel with jupyter_client"
KORCH_BENCH_TAG=$TAG $PY "$JCB" serve "$OUT/kernel.json" &
SERVE_PID=$!
for _ in $(seq 300); do
    [ -f "$OUT/kernel.json" ] && break
    kill -0 "$SERVE_PID" 2>/dev/null || { echo "bench: the kernel did not start" >&2; exit 1; }
    sleep 0.1
done
[ -f "$OUT/kernel.json" ] || { echo "bench: the kernel did not start within 30 s" >&2; exit 1; }
CONN=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["connection_file"])' "$OUT/kernel.json")

# ------------------------------------------------------------- round trip
# ROUNDS blocks per client, alternating which goes first and rotating
# jupyter_client's modes, so drift in the machine's load falls on everyone.
say "round trip: $ROUNDS x $PER executions per client, alternating jupyter_client / korch"
MODES=(minimal interactive rawzmq)
for ((r = 0; r < ROUNDS; r++)); do
    m=$((r % 3))
    modes="${MODES[m]},${MODES[(m + 1) % 3]},${MODES[(m + 2) % 3]}"
    jc_round() {
        run env KORCH_BENCH_SAMPLES="$OUT/rt-jc" $PY "$JCB" roundtrip "$CONN" "$PER" "$modes" >>"$OUT/jc.jsonl"
    }
    korch_round() {
        run env KORCH_BENCH_SAMPLES="$OUT/rt-korch.txt" "$KB" roundtrip "$CONN" "$PER" >>"$OUT/korch.jsonl"
    }
    if ((r % 2 == 0)); then jc_round; korch_round; else korch_round; jc_round; fi
done
run "$KB" rss "$CONN" 200 >>"$OUT/korch.jsonl"

# ------------------------------------------------------------------ stream
say "stream: $MB MiB of stdout, twice each"
for round in 1 2; do
    run $PY "$JCB" stream "$CONN" "$MB" >>"$OUT/jc.jsonl"
    run "$KB" stream "$CONN" "$MB" >>"$OUT/korch.jsonl"
done
# the same with korch's default cap (8 MiB kept per execution, the rest counted and dropped)
run "$KB" stream "$CONN" "$MB" $((8 << 20)) | sed 's/"bench":"stream"/"bench":"stream_capped"/' >>"$OUT/korch.jsonl"

# ------------------------------------------------------------------- start
say "start to ready: $STARTS local kernels each"
run env KORCH_BENCH_SAMPLES="$OUT/start-jc" $PY "$JCB" start "$STARTS" >>"$OUT/jc.jsonl"
run env KORCH_BENCH_SAMPLES="$OUT/start-korch.txt" "$KB" start "$STARTS" >>"$OUT/korch.jsonl"

# ------------------------------------------------------------------ router
say "router: the route table vs the strcmp chains it replaced, same run"
run "$KB" routes 200000 >>"$OUT/korch.jsonl"

# ------------------------------------------------------------------- table
$PY - "$OUT" <<'EOF'
import json, os, sys

out = sys.argv[1]

def lines(name):
    with open(os.path.join(out, name)) as f:
        return [json.loads(l) for l in f if l.strip()]

def samples(name):
    with open(os.path.join(out, name)) as f:
        return sorted(float(l) for l in f if l.strip())

def pct(s, p):
    return s[max(0, min(len(s) - 1, -(-int(p * len(s)) // 100) - 1))]

def st(name):
    s = samples(name)
    return {"n": len(s), "p50": pct(s, 50), "p99": pct(s, 99), "mean": sum(s) / len(s),
            "per_s": len(s) / (sum(s) / 1e3)}

jc, ko = lines("jc.jsonl"), lines("korch.jsonl")
pick = lambda rows, bench: [r for r in rows if r["bench"] == bench]
k_rt, j_rt = st("rt-korch.txt"), st("rt-jc-minimal.txt")
j_ia, j_raw = st("rt-jc-interactive.txt"), st("rt-jc-rawzmq.txt")
k_start, j_start = st("start-korch.txt"), st("start-jc-start.txt")
k_mem = pick(ko, "roundtrip")[-1]
j_mem = [r for r in pick(jc, "roundtrip") if r["mode"] == "minimal"][-1]
k_st, j_st = pick(ko, "stream"), pick(jc, "stream")
k_cap = pick(ko, "stream_capped")[0]
mean = lambda rows, key: sum(r[key] for r in rows) / len(rows)

rows = [
    ("round trip p50 (ms)", k_rt["p50"], j_rt["p50"]),
    ("round trip p99 (ms)", k_rt["p99"], j_rt["p99"]),
    ("round trip mean (ms)", k_rt["mean"], j_rt["mean"]),
    ("executions/s", k_rt["per_s"], j_rt["per_s"]),
    ("stream MiB/s", mean(k_st, "mb_per_s"), mean(j_st, "mb_per_s")),
    ("stream client VmHWM (MiB)", max(r["VmHWM"] for r in k_st) / 1024, max(r["VmHWM"] for r in j_st) / 1024),
    ("start to ready p50 (ms)", k_start["p50"], j_start["p50"]),
    ("client VmRSS after round trips (KiB)", k_mem["VmRSS"], j_mem["VmRSS"]),
    ("client VmHWM after round trips (KiB)", k_mem["VmHWM"], j_mem["VmHWM"]),
]
print()
print("korch vs jupyter_client %s, one kernel (ipykernel), n=%d round trips each"
      % (__import__("jupyter_client").__version__, k_rt["n"]))
print("%-40s %12s %16s %8s" % ("", "korch", "jupyter_client", "ratio"))
for name, k, j in rows:
    print("%-40s %12.2f %16.2f %8.2f" % (name, k, j, k / j if j else float("nan")))
print()
print("jupyter_client execute_interactive: p50 %.2f ms, p99 %.2f ms (korch/this %.2f)"
      % (j_ia["p50"], j_ia["p99"], k_rt["p50"] / j_ia["p50"]))
print("raw pyzmq + Session (a floor on this kernel): p50 %.2f ms, p99 %.2f ms (korch/this %.2f)"
      % (j_raw["p50"], j_raw["p99"], k_rt["p50"] / j_raw["p50"]))
print("stream runs (MiB/s)  korch: %s   jupyter_client: %s" % (
    ", ".join("%.1f" % r["mb_per_s"] for r in k_st), ", ".join("%.1f" % r["mb_per_s"] for r in j_st)))
print("korch stream with the default 8 MiB cap: %.1f MiB/s, kept %d MiB, dropped %d bytes, VmHWM %.1f MiB"
      % (k_cap["mb_per_s"], k_cap["max_stream_bytes"] >> 20, k_cap["dropped_bytes"], k_cap["VmHWM"] / 1024))
print("korch start: time to ready as korch reports it p50 %.0f ms" % pick(ko, "start")[0]["ready_ms_p50_korch_reported"])
rss = pick(ko, "rss")[0]
print("korch client memory by stage (VmRSS KiB / RssAnon / RssFile / threads): " + "; ".join(
    "%s %d/%d/%d/%d" % (s["stage"], s["VmRSS"], s["RssAnon"], s["RssFile"], s["Threads"]) for s in rss["stages"]))
print("korch client top mappings (KiB resident): " + ", ".join(
    "%s %d" % (m["mapping"], m["rss_kib"]) for m in rss["top_mappings"][:10]))
rt = pick(ko, "routes")[0]
print("korch router: route table %.0f ns/match (%.1f M/s), the old strcmp chains %.0f ns/match: table/strcmp %.2f"
      % (rt["table_ns_per_match"], rt["table_matches_per_s"] / 1e6, rt["strcmp_ns_per_match"], rt["ratio"]))
ratio = k_rt["p50"] / j_rt["p50"]
print()
print("goal round trip p50 <= 0.8 x jupyter_client: %.2f -> %s" % (ratio, "MET" if ratio <= 0.8 else "NOT MET"))
print("goal client RSS <= 5 MiB: VmRSS %d KiB (RssAnon %d, RssFile %d), VmHWM %d KiB -> %s"
      % (k_mem["VmRSS"], k_mem["RssAnon"], k_mem["RssFile"], k_mem["VmHWM"],
         "MET" if k_mem["VmHWM"] <= 5120 else "NOT MET"))
EOF
