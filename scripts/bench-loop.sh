#!/bin/sh
# Does kernel churn stall korch serve's loop? A websocket client loops `pass`
# round trips on one kernel, first on a quiet server, then while 5 docker
# kernels are started, restarted and deleted through REST, each alternating
# with a round trip straight to another kernel's sockets (the reference, no
# korch in the path, same run); prints p50/p99/max of both, the ratios (issue
# 13's goal: churn max <= 20 ms) and where the slow round trips spent their
# time (tests/bench/loop_bench.py says how).
#   Usage: scripts/bench-loop.sh [BUILD]      (default: build)
# Knobs: BENCH_LOOP_LAUNCHER (docker), BENCH_LOOP_KERNELS (5), BENCH_LOOP_CYCLES
# (2), BENCH_LOOP_QUIET (400 round trips), BENCH_LOOP_TRACE (1; 0 runs korch
# without KORCH_TRACE_WS / KORCH_LOOP_STALL_MS), BENCH_LOOP_STALL_MS (10),
# BENCH_OUT=FILE keeps the JSON.
set -eu
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
PY=/usr/bin/python3
[ -x "$BUILD/korch" ] || { echo "bench-loop: '$BUILD/korch' not built (run make)" >&2; exit 2; }
$PY -c 'import websocket' 2>/dev/null || { echo "bench-loop: $PY lacks websocket (run scripts/setup.sh)" >&2; exit 2; }
export KORCH_RUNTIME_DIR="${KORCH_RUNTIME_DIR:-/tmp/korch-bench-$(id -u)}"
mkdir -p -m 0700 "$KORCH_RUNTIME_DIR"
export PYDEVD_DISABLE_FILE_VALIDATION=1
cd "$ROOT"
echo "bench-loop: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), $BUILD/korch"
exec $PY "$ROOT/tests/bench/loop_bench.py" "$BUILD/korch"
