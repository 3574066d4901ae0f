#!/bin/sh
# MCP tools/call round trip for `1+1` (the official SDK's Client, Streamable HTTP
# to /mcp and stdio to korch mcp) against the websocket's execute round trip on
# the same korch serve, in the same run: a table with each p50's ratio.
#   Usage: scripts/bench-mcp.sh [BUILD]      (default: build)
# Knobs: BENCH_N (round trips per target, 200), BENCH_ROUNDS (4), BENCH_OUT=FILE (JSON).
# tests/npm/mcp's packages are installed first (npm ci) when missing.
set -eu
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
[ -x "$BUILD/korch" ] || { echo "bench-mcp: '$BUILD/korch' not built (run make)" >&2; exit 2; }
[ -f "$ROOT/tests/npm/mcp/node_modules/@modelcontextprotocol/sdk/package.json" ] ||
    npm ci --no-audit --no-fund --prefix "$ROOT/tests/npm/mcp" >&2
export KORCH_RUNTIME_DIR="${KORCH_RUNTIME_DIR:-/tmp/korch-bench-$(id -u)}"
mkdir -p -m 0700 "$KORCH_RUNTIME_DIR"
DIR=$(mktemp -d /tmp/korch-bench-mcp.XXXXXX)
FIFO=$DIR/out
mkfifo "$FIFO"
"$BUILD/korch" serve --port 0 --launcher local --no-access-log --agent-dir "$DIR/agents" >"$FIFO" 2>"$DIR/serve.log" &
PID=$!
trap 'kill $PID 2>/dev/null; wait $PID 2>/dev/null; rm -rf "$DIR"' EXIT INT TERM
exec 3<"$FIFO"
read -r LINE <&3
echo "bench-mcp: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), node $(node --version)"
node "$ROOT/tests/bench/mcp_bench.js" "$LINE" "$BUILD/korch"
