#!/bin/sh
# korch serve vs jupyter_server 1.23 (Debian's), on this machine, in the same run:
# websocket round trip (v1 and legacy) and the latency each adds over a direct
# client, messages relayed per second, kernel start through REST cold vs from the
# warm pool (local, and docker when the kernel image exists), and memory per idle
# kernel and per open websocket. Prints a table with the ratios and issue 5's goals.
#   Usage: scripts/bench-server.sh [BUILD]      (default: build)
# Knobs: BENCH_N (round trips per target, 500), BENCH_ROUNDS (4), BENCH_LINES
# (20000), BENCH_STARTS (20), BENCH_RSS_KERNELS (10), BENCH_WS (100), BENCH_DOCKER
# (auto | 0 | 1), BENCH_OUT=FILE keeps the raw results as JSON.
# Everything it starts is stopped before it exits (tests/bench/server_bench.py).
set -eu
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
PY=/usr/bin/python3
[ -x "$BUILD/korch" ] || { echo "bench-server: '$BUILD/korch' not built (run make)" >&2; exit 2; }
$PY -c 'import jupyter_server, jupyter_client, ipykernel, websocket' 2>/dev/null ||
    { echo "bench-server: $PY lacks jupyter_server / jupyter_client / websocket (run scripts/setup.sh)" >&2; exit 2; }
# Kernels of this run apart from the user's.
export KORCH_RUNTIME_DIR="${KORCH_RUNTIME_DIR:-/tmp/korch-bench-$(id -u)}"
mkdir -p -m 0700 "$KORCH_RUNTIME_DIR"
export PYDEVD_DISABLE_FILE_VALIDATION=1   # quiets ipykernel's debugger warning
cd "$ROOT"
echo "bench-server: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), jupyter_server $($PY -c 'import jupyter_server; print(jupyter_server.__version__)')"
exec $PY "$ROOT/tests/bench/server_bench.py" "$BUILD/korch"
