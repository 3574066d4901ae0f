#!/bin/sh
# Build korch's kernel image (kernelspec/python3/Dockerfile) unless an image
# built from the same Dockerfile exists already.
#
#   scripts/build-image.sh [--force]
#
#   KORCH_IMAGE        image name (default korch-kernel-python3:latest)
#   KORCH_IMAGE_BASE   base image; skips detection. With "python:*" packages come
#                      from pip, otherwise from apt (override with KORCH_IMAGE_PKGS)
#   KORCH_DEBIAN_BASE  the offline base to debootstrap (default korch-debian-base:bookworm)
#
# Base detection: python:3.12-slim when present or pullable (short timeout),
# else a Debian bookworm made by debootstrap --variant=minbase from the mirror
# in /etc/apt/sources.list(.d), imported with `docker import` (built once).
set -eu

cd "$(dirname "$0")/.."
ROOT=$(pwd)
IMAGE=${KORCH_IMAGE:-korch-kernel-python3:latest}
DOCKERFILE=$ROOT/kernelspec/python3/Dockerfile
PY_BASE=python:3.12-slim
DEB_BASE=${KORCH_DEBIAN_BASE:-korch-debian-base:bookworm}
SUITE=bookworm
FORCE=0
[ "${1:-}" = "--force" ] && FORCE=1

say() { echo "build-image: $*"; }
die() { echo "build-image: error: $*" >&2; exit 1; }
now() { date +%s; }

[ -f "$DOCKERFILE" ] || die "no Dockerfile at '$DOCKERFILE'"
"$ROOT/scripts/dockerd.sh" >/dev/null || die "docker engine not available (see scripts/dockerd.sh)"

SHA=$(sha256sum "$DOCKERFILE" | cut -d' ' -f1)
old_id=$(docker image inspect -f '{{.Id}}' "$IMAGE" 2>/dev/null || true)
have=$(docker image inspect -f '{{index .Config.Labels "korch.dockerfile.sha256"}}' "$IMAGE" 2>/dev/null || true)
if [ "$FORCE" = 0 ] && [ "$have" = "$SHA" ]; then
    say "image '$IMAGE' is up to date (Dockerfile sha256 $(echo "$SHA" | cut -c1-12)); nothing to do"
    exit 0
fi
[ -n "$have" ] && say "image '$IMAGE' was built from another Dockerfile ($(echo "$have" | cut -c1-12)); rebuilding"

. "$ROOT/scripts/lib/mirror.sh"

t0=$(now)
if [ -n "${KORCH_IMAGE_BASE:-}" ]; then
    BASE=$KORCH_IMAGE_BASE
    case "$BASE" in python:*) PKGS=${KORCH_IMAGE_PKGS:-pip} ;; *) PKGS=${KORCH_IMAGE_PKGS:-apt} ;; esac
    say "base '$BASE' from KORCH_IMAGE_BASE (packages: $PKGS)"
elif docker image inspect "$PY_BASE" >/dev/null 2>&1; then
    BASE=$PY_BASE PKGS=pip
    say "base '$BASE' (present locally; packages: pip)"
elif timeout 30 docker pull -q "$PY_BASE" >/dev/null 2>&1; then
    BASE=$PY_BASE PKGS=pip
    say "base '$BASE' (pulled; packages: pip)"
else
    BASE=$DEB_BASE PKGS=apt
    say "no registry reachable: base '$BASE' (packages: apt)"
fi

MIRROR=""
SEC_MIRROR=""
if [ "$PKGS" = apt ]; then
    MIRROR=$(mirror_for "$SUITE" | head -n 1)
    SEC_MIRROR=$(mirror_for "$SUITE-security" | head -n 1)
    [ -n "$MIRROR" ] || MIRROR=http://deb.debian.org/debian
    say "debian mirror $MIRROR${SEC_MIRROR:+ (security: $SEC_MIRROR)}"
fi

if [ "$BASE" = "$DEB_BASE" ] && ! docker image inspect "$DEB_BASE" >/dev/null 2>&1; then
    command -v debootstrap >/dev/null 2>&1 || die "debootstrap missing (scripts/dockerd.sh installs it)"
    tb=$(now)
    dir=$(mktemp -d /var/tmp/korch-debootstrap.XXXXXX)
    trap 'rm -rf "$dir"' EXIT
    say "debootstrap --variant=minbase $SUITE from $MIRROR (log: $dir.log)"
    debootstrap --variant=minbase "$SUITE" "$dir" "$MIRROR" >"$dir.log" 2>&1 ||
        { tail -n 20 "$dir.log" >&2; die "debootstrap failed (log: $dir.log)"; }
    # Trim what a container never uses; apt lists are fetched again by the build.
    rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/* "$dir"/usr/share/doc/* \
           "$dir"/usr/share/man/* "$dir"/usr/share/info/*
    tar -C "$dir" --numeric-owner -c . |
        docker import -c 'CMD ["/bin/bash"]' -c "LABEL korch.base=debootstrap-$SUITE" - "$DEB_BASE" >/dev/null
    rm -rf "$dir" "$dir.log"
    trap - EXIT
    say "imported '$DEB_BASE' in $(($(now) - tb)) s"
fi

# The Dockerfile COPYs nothing: send it on stdin, with no build context.
tb=$(now)
log=$(mktemp /tmp/korch-build-image.XXXXXX.log)
say "docker build '$IMAGE' (log: $log)"
DOCKER_BUILDKIT=0 docker build -t "$IMAGE" \
    --build-arg BASE="$BASE" \
    --build-arg PKGS="$PKGS" \
    --build-arg DEBIAN_MIRROR="$MIRROR" \
    --build-arg DEBIAN_SECURITY_MIRROR="$SEC_MIRROR" \
    --build-arg DOCKERFILE_SHA256="$SHA" \
    - <"$DOCKERFILE" >"$log" 2>&1 || { tail -n 30 "$log" >&2; die "docker build of '$IMAGE' failed (log: $log)"; }
rm -f "$log"
# The image this one replaces would stay behind untagged; drop it unless in use.
new_id=$(docker image inspect -f '{{.Id}}' "$IMAGE")
if [ -n "$old_id" ] && [ "$old_id" != "$new_id" ]; then
    if docker image rm "$old_id" >/dev/null 2>&1; then
        say "removed the previous image $(echo "${old_id#sha256:}" | cut -c1-12)"
    fi
fi
size=$(docker image inspect -f '{{.Size}}' "$IMAGE")
say "built '$IMAGE' from '$BASE' in $(($(now) - tb)) s ($((size / 1048576)) MiB; total $(($(now) - t0)) s)"
