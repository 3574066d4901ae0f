#!/bin/sh
# Make sure a Docker engine answers on /var/run/docker.sock (or $DOCKER_HOST).
#
# Idempotent: installs docker.io (and debootstrap, for the offline image base,
# and docker-compose, which the tests use to validate docker-compose.yml) with
# apt when missing, starts dockerd in the background when `docker info`
# does not answer, then waits up to 60 s for the engine. Works without
# systemd (CI containers, this machine): dockerd is started directly and logs
# to /var/log/korch-dockerd.log.
set -eu

LOG=/var/log/korch-dockerd.log
SOCK=/var/run/docker.sock
WAIT_S=${KORCH_DOCKERD_WAIT:-60}

say() { echo "dockerd.sh: $*"; }
die() { echo "dockerd.sh: error: $*" >&2; exit 1; }

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null 2>&1; then sudo "$@"; else
        die "need root for: $*"; fi
}

# Any docker CLI will do for `docker info`; the one apt installs is /usr/bin/docker.
engine_answers() {
    if command -v docker >/dev/null 2>&1; then
        timeout 10 docker info >/dev/null 2>&1 && return 0
    fi
    # No CLI (or an incompatible one): ask the socket directly.
    [ -S "$SOCK" ] && command -v curl >/dev/null 2>&1 &&
        timeout 5 curl -fsS --unix-socket "$SOCK" http://localhost/_ping >/dev/null 2>&1
}

install_missing() {
    missing=""
    command -v dockerd >/dev/null 2>&1 || missing="$missing docker.io"
    command -v debootstrap >/dev/null 2>&1 || missing="$missing debootstrap"
    command -v docker-compose >/dev/null 2>&1 || missing="$missing docker-compose"
    if [ -n "$missing" ]; then
        say "installing$missing"
        export DEBIAN_FRONTEND=noninteractive
        as_root apt-get update -qq
        # shellcheck disable=SC2086
        as_root apt-get install -y -qq --no-install-recommends $missing >/dev/null
    fi
}

if engine_answers; then
    install_missing
    say "docker engine already answers"
    exit 0
fi

# A remote engine was asked for: nothing to start here.
case "${DOCKER_HOST:-}" in
    ""|unix:///var/run/docker.sock) ;;
    *) die "DOCKER_HOST='$DOCKER_HOST' does not answer; not starting a local dockerd for it" ;;
esac

install_missing
command -v dockerd >/dev/null 2>&1 || die "dockerd not found after installing docker.io"

# A dockerd of ours may be starting already (a second run right after the first).
if ! pgrep -x dockerd >/dev/null 2>&1; then
    say "starting dockerd (log: $LOG)"
    # A stale pid file from a killed dockerd makes the new one refuse to start.
    if [ -f /var/run/docker.pid ] && ! kill -0 "$(cat /var/run/docker.pid)" 2>/dev/null; then
        as_root rm -f /var/run/docker.pid
    fi
    as_root sh -c "nohup dockerd >>'$LOG' 2>&1 </dev/null &"
else
    say "dockerd is running but not answering yet; waiting"
fi

i=0
while [ "$i" -lt "$WAIT_S" ]; do
    if engine_answers; then
        say "docker engine answers after ${i} s"
        exit 0
    fi
    if ! pgrep -x dockerd >/dev/null 2>&1; then
        tail -n 20 "$LOG" >&2 || true
        die "dockerd exited (see $LOG)"
    fi
    sleep 1
    i=$((i + 1))
done
tail -n 20 "$LOG" >&2 || true
die "docker engine did not answer within ${WAIT_S} s (see $LOG)"
