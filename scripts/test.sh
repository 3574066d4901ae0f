#!/bin/sh
# Run korch's test suite from the repository root: scripts/test.sh BUILD_DIR [FILTER...]
set -eu
build="${1:-build}"
[ $# -gt 0 ] && shift
cd "$(dirname "$0")/.."
export KORCH_ROOT="$PWD"
# Tests make their own kernels; keep their runtime dirs apart from the user's.
export KORCH_RUNTIME_DIR="${KORCH_RUNTIME_DIR:-/tmp/korch-test-$(id -u)}"
mkdir -p -m 0700 "$KORCH_RUNTIME_DIR"
exec "$build/korch-test" "$@"
