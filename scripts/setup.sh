#!/bin/sh
# Install every Debian package korch's build, tests and runtime need.
# Idempotent and quick when everything is there. Run as root (or with sudo).
set -eu

# clang + libclang-rt-dev: `make fuzz` (libFuzzer); openapi-specification (the
# OpenAPI 3.0 JSON Schema) + python3-jsonschema + python3-yaml: the check of
# src/server/openapi.yaml. python3-prometheus-client: the reference parser of
# GET /metrics in the tests. libseccomp-dev: the sandbox kernels' seccomp filter (src/launcher/seccomp.c).
PKGS="build-essential pkg-config libzmq3-dev libczmq-dev libjansson-dev libcurl4-openssl-dev libssl-dev
python3 python3-ipykernel python3-jupyter-client python3-zmq python3-matplotlib python3-pandas
python3-nbformat valgrind libwebsockets-dev libwebsockets-evlib-uv libuv1-dev python3-jupyter-server
python3-websocket clang libclang-rt-dev python3-yaml python3-jsonschema openapi-specification
python3-prometheus-client python3-scipy python3-seaborn python3-sklearn python3-statsmodels
python3-openpyxl python3-ipywidgets python3-nbconvert bubblewrap libseccomp-dev python3-notebook chromium fonts-dejavu-core r-cran-irkernel"
# docker-registry: the local registry of the test swarm (scripts/swarm-up.sh).
PKGS="$PKGS docker-registry"
# tmux: the terminal the CLI's escape-sequence tests run korch in (tests/test_terminal.c).
PKGS="$PKGS tmux"
# r-cran-readxl: an R kernel's summary of an .xlsx (src/agent/describe.c). python3-venv,
# python3-pip: a kernel's own environment packages install into, and the pip that does it
# (--wheelhouse, --package-index: docs/files.md; a sandbox kernel uses the host's /usr).
PKGS="$PKGS r-cran-readxl python3-venv python3-pip"
# The Python client (src/python, tests/test_pyclient.c): its two dependencies, what a
# `pip install --no-build-isolation ./src/python` builds with, and mypy for its types.
PKGS="$PKGS python3-requests python3-pip python3-setuptools python3-wheel mypy"
# jupyterhub (3.0) + node-configurable-http-proxy: korch as a Hub service, two Hub users
# with single-user Notebook servers whose gateway is korch (tests/test_hub.c).
# (python3-requests, above: the test's browser-like OAuth login.)
PKGS="$PKGS jupyterhub node-configurable-http-proxy"

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

# Node.js for the @jupyterlab/services interop test (tests/npm). Any Node >= 18
# will do; a Node from elsewhere (e.g. NodeSource, with its own npm) is kept.
if ! command -v npm >/dev/null 2>&1; then
    echo "setup: installing nodejs npm"
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi
