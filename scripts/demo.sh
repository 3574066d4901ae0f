#!/bin/sh
# The main job, end to end on a fresh Debian 12 machine: install what is
# needed, build korch, and run an agent session on a shipped CSV. With no LLM
# configured (KORCH_LLM unset) the model's side is a recorded conversation
# (scripts/demo/replay.json, said so on screen) while the code runs for real
# in the kernel: several steps, an error it recovers from, a chart. Leaves the
# chart (PNG) and notebook.ipynb behind and says where. Safe to run again.
#
#   KORCH_LLM=openai:gpt-4o-mini scripts/demo.sh    the same question to a real model
#   KORCH_DEMO_LAUNCHER=docker scripts/demo.sh      in a hardened container (make image first;
#                                                 auto takes docker when the image exists, else the sandbox)
set -eu
cd "$(dirname "$0")/.."
scripts/setup.sh
make --no-print-directory -s build/korch
session="${KORCH_DEMO_OUT:-$PWD/out/demo-session}"
rm -rf "$session"
llm="${KORCH_LLM:-replay:$PWD/scripts/demo/replay.json}"
build/korch run --llm "$llm" --launcher "${KORCH_DEMO_LAUNCHER:-auto}" \
    --file scripts/demo/sales.csv --session "$session" \
    "Which region brings the most revenue in sales.csv? Show a chart."
echo
echo "korch demo: chart:    $(ls "$session"/figures/*.png | head -1)"
echo "            notebook: $session/notebook.ipynb"
echo "            transcript: $session/transcript.jsonl"
