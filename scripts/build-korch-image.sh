#!/bin/sh
# Build the korch image (scripts/Dockerfile.korch: korch serve / korch kernel
# in a container, docker-compose.yml's services) on the host's engine.
#
#   scripts/build-korch-image.sh
#
#   KORCH_IMAGE  image name (default korch:latest)
#   KORCH_BASE   base image; skips detection
#
# Base: debian:bookworm-slim when present locally; else the offline Debian
# base korch-debian-base:bookworm that scripts/build-image.sh makes with
# debootstrap (packages then come from this machine's Debian mirror); else
# debian:bookworm-slim pulled. The web app is the one `make` builds here
# (build/web; this runs `make` for it): the image's build stage has no Node.
#
# Cached: docker's layer cache keeps the package layers, and the compile
# step runs again only when the sources changed (about a minute on two
# cores; a few seconds when nothing changed).
set -eu

cd "$(dirname "$0")/.."
ROOT=$(pwd)
IMAGE=${KORCH_IMAGE:-korch:latest}
SLIM=debian:bookworm-slim
DEB_BASE=korch-debian-base:bookworm

say() { echo "build-korch-image: $*" >&2; }
die() { echo "build-korch-image: error: $*" >&2; exit 1; }

"$ROOT/scripts/dockerd.sh" >/dev/null || die "docker engine not available (see scripts/dockerd.sh)"
. "$ROOT/scripts/lib/mirror.sh"

MIRROR=""
if [ -n "${KORCH_BASE:-}" ]; then
    BASE=$KORCH_BASE
elif docker image inspect "$SLIM" >/dev/null 2>&1; then
    BASE=$SLIM
elif docker image inspect "$DEB_BASE" >/dev/null 2>&1; then
    BASE=$DEB_BASE
elif timeout 30 docker pull -q "$SLIM" >/dev/null 2>&1; then
    BASE=$SLIM
else
    die "no base image: neither $SLIM (no registry reachable) nor $DEB_BASE (scripts/build-image.sh makes it)"
fi
if [ "$BASE" = "$DEB_BASE" ]; then
    MIRROR=$(mirror_for bookworm | head -n 1)
    [ -n "$MIRROR" ] || MIRROR=http://deb.debian.org/debian
fi

make -s build/web/index.html >/dev/null || say "warning: the web app did not build: the image's page is a placeholder"

t0=$(date +%s)
say "building $IMAGE on $BASE${MIRROR:+ (mirror $MIRROR)}"
log=$(mktemp /tmp/korch-image-build.XXXXXX)
if ! docker build -q -f scripts/Dockerfile.korch --build-arg "BASE=$BASE" --build-arg "DEBIAN_MIRROR=$MIRROR" \
        -t "$IMAGE" . >"$log" 2>&1; then
    tail -n 30 "$log" >&2
    rm -f "$log"
    die "docker build failed"
fi
rm -f "$log"
say "$IMAGE built in $(($(date +%s) - t0)) s ($(docker image inspect -f '{{.Id}}' "$IMAGE" | cut -c8-19))"
