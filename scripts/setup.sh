#!/bin/sh
# Install every Debian package korch's build, tests and runtime need.
# Idempotent and quick when everything is there. Run as root (or with sudo).
set -eu

PKGS="build-essential pkg-config libzmq3-dev libczmq-dev libjansson-dev libcurl4-openssl-dev libssl-dev
python3 python3-ipykernel python3-jupyter-client python3-zmq python3-matplotlib python3-pandas
python3-nbformat valgrind"

missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    echo "setup: installing:$missing"
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    # shellcheck disable=SC2086
    $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi
