#!/bin/sh
# Container kernels vs local kernels on this machine: start to ready (p50 of
# BENCH_STARTS, default 10), memory of an idle kernel container, execute round
# trip over ipc into a container vs a local kernel (p50 of BENCH_N, default 300).
# Prints a table with the ratios and the issue's goals (start <= 1.5x local,
# round trip within 10%).  Usage: scripts/bench-containers.sh [BUILD]  (default: build)
#
# Needs dockerd (scripts/dockerd.sh) and the kernel image (scripts/build-image.sh);
# uses build/korch, and build/korch-bench for the round trips when it is built.
# Everything it starts is stopped before it exits (tests/bench/containers.py).
set -eu
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
[ -x "$BUILD/korch" ] || { echo "bench-containers: '$BUILD/korch' not built (run make)" >&2; exit 2; }
"$ROOT/scripts/dockerd.sh" >/dev/null
"$ROOT/scripts/build-image.sh" >/dev/null
# Kernels of this run apart from the user's.
export KORCH_RUNTIME_DIR="${KORCH_RUNTIME_DIR:-/tmp/korch-bench-$(id -u)}"
mkdir -p -m 0700 "$KORCH_RUNTIME_DIR"
cd "$ROOT"
echo "bench-containers: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), docker $(docker version --format '{{.Server.Version}}' 2>/dev/null || echo '?')"
exec /usr/bin/python3 "$ROOT/tests/bench/containers.py" "$BUILD/korch" "$BUILD/korch-bench"
