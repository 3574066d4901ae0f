#!/bin/sh
# The agent's own cost per step (scripted LLM answering at once, so what is
# left is korch + the kernel) and BENCH_SESSIONS (default 20) concurrent
# sessions of 5 steps each: wall time and korch's peak RSS per process; then
# the same sessions through one korch serve (the agent API).
#   Usage: scripts/bench-agent.sh [BUILD]   (default: build)
set -eu
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
[ -x "$BUILD/korch" ] || { echo "bench-agent: '$BUILD/korch' not built (run make)" >&2; exit 2; }
export KORCH_RUNTIME_DIR="${KORCH_RUNTIME_DIR:-/tmp/korch-bench-$(id -u)}"
mkdir -p -m 0700 "$KORCH_RUNTIME_DIR"
echo "bench-agent: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
/usr/bin/python3 "$ROOT/tests/bench/agent_bench.py" "$BUILD/korch" "${BENCH_STEPS:-20}" \
    "${BENCH_SESSIONS:-20}" 5 | /usr/bin/python3 -c '
import json, sys
r = json.load(sys.stdin)
o, c = r["one_session"], r["concurrent"]
print("| agent | value |")
print("|---|---|")
print("| steps in one session | %d |" % o["steps"])
print("| orchestration per step, p50 (ms): wall between model calls minus kernel time | %s |" % o["orchestration_ms_p50"])
print("| orchestration per step, max (ms) | %s |" % o["orchestration_ms_max"])
print("| kernel execution per step, p50 (ms) | %s |" % o["kernel_exec_ms_p50"])
print("| %d concurrent sessions x %d steps: wall (s) | %s (%d ok) |" % (c["sessions"], c["steps_each"], c["wall_s"], c["ok"]))
print("| korch peak RSS (VmHWM) per session process, p50 / max (MiB) | %.1f / %.1f |" % (c["korch_peak_rss_kib_p50"] / 1024, c["korch_peak_rss_kib_max"] / 1024))
v = r["served"]
print("| %d sessions x %d steps through one korch serve (agent API, SSE): wall (s) | %s (%d ok) |" % (v["sessions"], v["steps_each"], v["wall_s"], v["ok"]))
print("| POST .../messages to the first event, p50 (ms) | %s |" % v["first_event_ms_p50"])
print("| korch serve RSS: idle / peak / per session after (MiB) | %.1f / %.1f / %.2f |" % (v["serve_rss_kib_idle"] / 1024, v["serve_rss_kib_peak"] / 1024, v["serve_rss_kib_per_session"] / 1024))
for e in c["errors"] + v["errors"]:
    print("failed session:", " / ".join(e))
'
