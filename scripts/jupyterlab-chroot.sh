#!/bin/sh
# A Debian trixie chroot with JupyterLab 4 (and what korch's JupyterLab tests
# need inside it), made once and kept: nothing to do when DIR has it already;
# when the package list grew, only the new packages are installed into DIR.
#
#   scripts/jupyterlab-chroot.sh [DIR]      (default /var/cache/korch/trixie-jlab)
#
# debootstrap --variant=minbase from the mirror apt uses on this machine, then
# apt-get install --no-install-recommends of PKGS with /proc, /dev, /sys bound
# for the install only. Built in DIR.new and renamed, so a DIR is always whole.
# The chroot shares the host's network: a jupyter-lab in it reaches a korch
# serve on 127.0.0.1. Run things in it with:  chroot DIR jupyter-lab ...
set -eu

cd "$(dirname "$0")/.."
ROOT=$(pwd)
DIR=${1:-/var/cache/korch/trixie-jlab}
SUITE=trixie
PKGS="jupyterlab python3-ipykernel python3-ipywidgets python3-matplotlib python3-pandas
      nodejs node-find-root python3-hatchling python3-hatch-jupyter-builder python3-pip ca-certificates"
STAMP=.korch-jupyterlab
want=$(echo $PKGS)

say() { echo "jupyterlab-chroot: $*"; }
die() { echo "jupyterlab-chroot: error: $*" >&2; exit 1; }
now() { date +%s; }

if [ -f "$DIR/$STAMP" ] && [ "$(sed -n 1p "$DIR/$STAMP")" = "$want" ]; then
    say "'$DIR' has JupyterLab already ($(sed -n 2p "$DIR/$STAMP")); nothing to do"
    exit 0
fi
[ "$(id -u)" = 0 ] || die "needs root (debootstrap, chroot, mount)"
command -v debootstrap >/dev/null 2>&1 || die "debootstrap missing (apt-get install debootstrap)"
[ -f /usr/share/debootstrap/scripts/$SUITE ] || die "this debootstrap does not know '$SUITE' (a newer debootstrap is needed)"

mounted=""
unmount_in() {
    for m in $mounted; do umount "$1/$m" 2>/dev/null || umount -l "$1/$m" 2>/dev/null || true; done
    mounted=""
}
# apt-get install $want in the chroot $1, /proc /dev /sys bound meanwhile; log to $2.
install_in() {
    cp /etc/resolv.conf "$1/etc/resolv.conf" 2>/dev/null || true
    for m in proc dev sys; do
        mount --bind "/$m" "$1/$m" && mounted="$m $mounted"
    done
    say "apt-get install --no-install-recommends $want"
    rc=0
    chroot "$1" env DEBIAN_FRONTEND=noninteractive sh -c \
        "apt-get update -q && apt-get install -y -q --no-install-recommends $want && apt-get clean" \
        >>"$2" 2>&1 || rc=$?
    unmount_in "$1"
    [ "$rc" = 0 ] || { tail -n 30 "$2" >&2; die "apt-get install failed (log: $2)"; }
}

if [ -f "$DIR/$STAMP" ] && [ -x "$DIR/usr/bin/jupyter-lab" ]; then
    t0=$(now)
    trap 'unmount_in "$DIR"' EXIT INT TERM
    install_in "$DIR" "$DIR.log"
    trap - EXIT INT TERM
    ver=$(chroot "$DIR" jupyter-lab --version 2>/dev/null || echo "?")
    printf '%s\nJupyterLab %s, packages added in %s s\n' "$want" "$ver" "$(($(now) - t0))" >"$DIR/$STAMP"
    rm -f "$DIR.log"
    say "added packages to '$DIR' in $(($(now) - t0)) s"
    exit 0
fi

. "$ROOT/scripts/lib/mirror.sh"
host_suite=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
MIRROR=$(mirror_for "$host_suite" | head -n 1)
[ -n "$MIRROR" ] || MIRROR=http://deb.debian.org/debian

new=$DIR.new
cleanup() { unmount_in "$new"; }
# Never rm -rf through a bind mount of the host's /dev, /proc or /sys.
discard() {
    cleanup
    if grep -q " $new/" /proc/self/mounts 2>/dev/null; then
        echo "jupyterlab-chroot: '$new' still has mounts; left in place" >&2
    else
        rm -rf "$new"
    fi
}
trap discard EXIT INT TERM
mkdir -p "$(dirname "$DIR")"
discard

t0=$(now)
say "debootstrap --variant=minbase $SUITE from $MIRROR into '$new' (log: $new.log)"
debootstrap --variant=minbase "$SUITE" "$new" "$MIRROR" >"$new.log" 2>&1 ||
    { tail -n 20 "$new.log" >&2; die "debootstrap failed (log: $new.log)"; }
t1=$(now)
say "debootstrap took $((t1 - t0)) s"

install_in "$new" "$new.log"
t2=$(now)
ver=$(chroot "$new" jupyter-lab --version 2>/dev/null || echo "?")
[ "$ver" != "?" ] || die "jupyter-lab does not run in '$new' (log: $new.log)"
say "apt-get install took $((t2 - t1)) s (JupyterLab $ver)"
printf '%s\nJupyterLab %s, made in %s s (debootstrap %s s, apt %s s)\n' \
    "$want" "$ver" "$((t2 - t0))" "$((t1 - t0))" "$((t2 - t1))" >"$new/$STAMP"
rm -rf "$DIR" "$new.log"
mv "$new" "$DIR"
trap - EXIT INT TERM
say "made '$DIR' in $((t2 - t0)) s"
