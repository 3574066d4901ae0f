#!/bin/sh
# Kernel start to kernel_info with the local, sandbox (bubblewrap + a cgroup)
# and docker launchers, measured in the same run (p50 of BENCH_STARTS, default
# 10, rotating the order), with the ratios to local; the goal is sandbox /
# local <= 1.2.  Usage: scripts/bench-sandbox.sh [BUILD]  (default: build)
# BENCH_REF_KORCH=PATH adds that korch's sandbox starts to the same rotation
# (e.g. one built before a change) and the ratio of ours to it.
#
# Needs bwrap and root (for the cgroups), dockerd (scripts/dockerd.sh) and the
# kernel image (scripts/build-image.sh). Not a test: numbers, not verdicts.
set -eu
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
[ -x "$BUILD/korch" ] || { echo "bench-sandbox: '$BUILD/korch' not built (run make)" >&2; exit 2; }
"$ROOT/scripts/dockerd.sh" >/dev/null
"$ROOT/scripts/build-image.sh" >/dev/null
export KORCH_RUNTIME_DIR="${KORCH_RUNTIME_DIR:-/tmp/korch-bench-$(id -u)}"
mkdir -p -m 0700 "$KORCH_RUNTIME_DIR"
cd "$ROOT"
echo "bench-sandbox: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), $(bwrap --version 2>/dev/null || echo 'no bwrap')"
exec /usr/bin/python3 "$ROOT/tests/bench/sandbox.py" "$BUILD/korch"
