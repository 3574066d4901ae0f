#!/bin/sh
# A ready data kernel (numpy, pandas, matplotlib imported) through korch serve
# --launcher sandbox: forked from a template (--fork) vs a plain start vs the
# warm pool's acquire, in the same run; PSS per idle kernel; a burst of 50;
# `korch run` to its first step (issue 28; docs/fastkernel.md).
#   Usage: scripts/bench-fastkernel.sh [BUILD]      (default: build)
# Knobs: BENCH_STARTS (20), BENCH_RSS_KERNELS (10), BENCH_BURST (50),
# BENCH_BURST_PLAIN (10), BENCH_RUNS (5). Needs root (cgroups) and bwrap.
set -eu
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
PY=/usr/bin/python3
[ -x "$BUILD/korch" ] || { echo "bench-fastkernel: '$BUILD/korch' not built (run make)" >&2; exit 2; }
export KORCH_RUNTIME_DIR="${KORCH_RUNTIME_DIR:-/tmp/korch-bench-$(id -u)}"
mkdir -p -m 0700 "$KORCH_RUNTIME_DIR"
export PYDEVD_DISABLE_FILE_VALIDATION=1
cd "$ROOT"
echo "bench-fastkernel: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
exec $PY "$ROOT/tests/bench/fastkernel.py" "$BUILD/korch"
