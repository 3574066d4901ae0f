#!/bin/sh
# Build the web app (src/web) into OUT (default build/web): npm ci when
# src/web/node_modules is missing or older than the lock file, a type check
# (tsc --noEmit), then esbuild (src/web/build.mjs) writes index.html,
# korch.js and korch.css. Without node/npm (scripts/setup.sh installs
# them) a placeholder page saying so is written instead, so the C build
# never depends on Node.
set -eu
OUT=${1:-build/web}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WEB=$ROOT/src/web
mkdir -p "$OUT"
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    echo "build-web: node/npm not found: the web page is a placeholder (run scripts/setup.sh, then make)" >&2
    cat > "$OUT/index.html" <<'HTML'
<!doctype html><html lang="en"><meta charset="utf-8"><title>korch</title>
<p>This korch was built without Node.js, so its web app is missing.
Install <code>nodejs npm</code> (scripts/setup.sh does) and run <code>make</code> again.
The API is at <code>/api</code>.</p></html>
HTML
    : > "$OUT/korch.js"
    : > "$OUT/korch.css"
    exit 0
fi
if [ ! -f "$WEB/node_modules/.package-lock.json" ] || [ "$WEB/package-lock.json" -nt "$WEB/node_modules/.package-lock.json" ]; then
    (cd "$WEB" && npm ci --no-audit --no-fund --loglevel=error)
fi
if [ "${KORCH_WEB_TYPECHECK:-1}" = 1 ]; then
    (cd "$WEB" && ./node_modules/.bin/tsc --noEmit -p .)
fi
node "$WEB/build.mjs" "$OUT"
