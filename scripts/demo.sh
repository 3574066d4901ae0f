#!/bin/sh
# The main job, end to end on a fresh Debian 12 machine: install what is
# needed, build korch, run a notebook-style analysis of a shipped CSV in a
# real ipykernel and save its chart as PNG. Safe to run again.
set -eu
cd "$(dirname "$0")/.."
scripts/setup.sh
make --no-print-directory -s build/korch
out="${KORCH_DEMO_OUT:-$PWD/out/demo}"
mkdir -p "$out"
cp scripts/demo/sales.csv "$out/"
build/korch exec --cwd "$out" --out "$out" --timeout 120 scripts/demo/analysis.py
echo "korch demo: chart and data in $out"
ls -l "$out"/*.png
