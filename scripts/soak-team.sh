#!/bin/sh
# The team soak (issue 26): SOAK_USERS users (20) x SOAK_SESSIONS agent
# sessions (3) each running turns back to back for SOAK_SECONDS (300)
# against one `korch serve --users FILE --audit FILE` with the scripted LLM
# (scenario "owner": every answer carries its own turn's tag and a number
# only its kernel computed). Prints turns, latency percentiles, answers to
# the wrong owner (must be 0), korch serve's RSS over time, audit lines.
#   Usage: scripts/soak-team.sh [BUILD]      (make soak-team; not in make test)
set -eu
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
PY=/usr/bin/python3
USERS=${SOAK_USERS:-20}
SESSIONS=${SOAK_SESSIONS:-3}
SECONDS_=${SOAK_SECONDS:-300}
# SOAK_CONTEXT_CHARS: korch serve --context-chars (each conversation in memory is cut to it)
[ -x "$BUILD/korch" ] || { echo "soak-team: '$BUILD/korch' not built (run make)" >&2; exit 2; }
export KORCH_RUNTIME_DIR="${KORCH_RUNTIME_DIR:-/tmp/korch-soak-$(id -u)}"
mkdir -p -m 0700 "$KORCH_RUNTIME_DIR"
export PYDEVD_DISABLE_FILE_VALIDATION=1
DIR=$(mktemp -d /tmp/korch-soak-team-XXXXXX)
LLM_PID= SRV_PID=
cleanup() {
    [ -n "$SRV_PID" ] && kill "$SRV_PID" 2>/dev/null && wait "$SRV_PID" 2>/dev/null || true
    [ -n "$LLM_PID" ] && kill "$LLM_PID" 2>/dev/null || true
    rm -rf "$DIR"
}
trap cleanup EXIT INT TERM
TOKENS=
i=0
while [ $i -lt "$USERS" ]; do
    T=$("$BUILD/korch" user --users "$DIR/users.json" add "u$i" --quota sessions="$SESSIONS" 2>/dev/null)
    TOKENS="${TOKENS:+$TOKENS,}u$i=$T"
    i=$((i + 1))
done
$PY "$ROOT/tests/peers/llm_server.py" > "$DIR/llm.port" &
LLM_PID=$!
for _ in 1 2 3 4 5 6 7 8 9 10; do [ -s "$DIR/llm.port" ] && break; sleep 0.5; done
LLM_PORT=$(head -1 "$DIR/llm.port")
export OPENAI_BASE_URL="http://127.0.0.1:$LLM_PORT/s/owner/v1" OPENAI_API_KEY=sk-soak
unset KORCH_LLM || true
"$BUILD/korch" serve --port 0 --launcher "${SOAK_LAUNCHER:-local}" --users "$DIR/users.json" \
    --audit "$DIR/audit.jsonl" --agent-dir "$DIR/sessions" --llm openai:gpt-4o-mini --no-access-log \
    ${SOAK_CONTEXT_CHARS:+--context-chars "$SOAK_CONTEXT_CHARS"} \
    > "$DIR/serve.out" 2> "$DIR/serve.err" &
SRV_PID=$!
for _ in $(seq 1 240); do [ -s "$DIR/serve.out" ] && break; sleep 0.25; done   # up to 60 s on a busy machine
URL=$(head -1 "$DIR/serve.out")
[ -n "$URL" ] || { echo "soak-team: korch serve printed no URL within 60 s:" >&2; tail -20 "$DIR/serve.err" >&2; exit 1; }
echo "soak-team: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); $USERS users x $SESSIONS sessions for $SECONDS_ s on $URL"
$PY "$ROOT/tests/peers/team_check.py" --url "$URL" --tokens "$TOKENS" --sessions "$SESSIONS" \
    --seconds "$SECONDS_" --pid "$SRV_PID" soak | tee "$DIR/result.json"
echo "soak-team: audit lines: $(wc -l < "$DIR/audit.jsonl"); serve errors: $(grep -c 'error' "$DIR/serve.err" || true)"
$PY -c 'import json,sys; sys.exit(0 if json.load(open(sys.argv[1]))["ok"] else 1)' "$DIR/result.json"
