#!/bin/sh
# Remove the test swarm of scripts/swarm-up.sh: swarm-down.sh [--purge]
#
# Works from what is there, not from a record, so it also cleans after a crash
# (of the script, an engine or the machine): the node engines (TERM, then KILL
# after 15 s) and every process left in their namespaces or cgroups, their
# mounts, data roots and exec roots, the namespaces korch-node*, the veths and
# the bridge korch-sw0, the iptables rules with the comment "korch-swarm",
# the registry processes and /run/korch-swarm. The registry's storage
# (/var/lib/korch-swarm/registry, the pushed kernel image) is kept as a cache
# so the next swarm-up does not push 1.4 GB again; --purge removes it too.
# Idempotent; prints nothing when there was nothing to remove. Run as root.
set -eu

RUN=/run/korch-swarm
LIB=/var/lib/korch-swarm
BR=korch-sw0
TAG=korch-swarm
PURGE=0
[ "${1:-}" = --purge ] && PURGE=1

say() { echo "swarm-down: $*" >&2; }
[ "$(id -u)" -eq 0 ] || { echo "swarm-down: error: run as root" >&2; exit 1; }

alive() { [ -n "$1" ] && kill -0 "$1" 2>/dev/null; }

# Our dockerd processes, by their exec root on the command line (not by pid
# file: after a crash its pid may belong to someone else by now).
our_dockerds() {
    for p in /proc/[0-9]*; do
        cmd=$(cat "$p/cmdline" 2>/dev/null | tr '\0' ' ')
        case "$cmd" in
            dockerd*"--exec-root $RUN/"*) echo "${p#/proc/}" ;;
        esac
    done
}

pids=$(our_dockerds | sort -u)
for p in $pids; do
    alive "$p" && { say "stopping dockerd $p"; kill -TERM "$p" 2>/dev/null || true; }
done
t=0
while [ "$t" -lt 150 ]; do
    left=""
    for p in $pids; do alive "$p" && left="$left $p"; done
    [ -z "$left" ] && break
    sleep 0.1
    t=$((t + 1))
done
for p in $pids; do alive "$p" && kill -KILL "$p" 2>/dev/null || true; done

# Whatever is left in our namespaces (containerd, shims) and in our cgroups
# (the containers' processes, which live in namespaces of their own).
kill_set() {
    for p in $1; do alive "$p" && kill -KILL "$p" 2>/dev/null || true; done
}
for d in /run/netns/korch-node*; do
    [ -e "$d" ] || continue
    kill_set "$(ip netns pids "${d#/run/netns/}" 2>/dev/null || true)"
done
for cg in /sys/fs/cgroup/*/korch-swarm-node* /sys/fs/cgroup/unified/korch-swarm-node*; do
    [ -d "$cg" ] || continue
    kill_set "$(find "$cg" -name cgroup.procs -exec cat {} + 2>/dev/null || true)"
done
sleep 0.2
for cg in /sys/fs/cgroup/*/korch-swarm-node* /sys/fs/cgroup/unified/korch-swarm-node*; do
    [ -d "$cg" ] || continue
    find "$cg" -depth -type d -exec rmdir {} + 2>/dev/null || true
done

# The registries.
for p in /proc/[0-9]*; do
    cmd=$(cat "$p/cmdline" 2>/dev/null | tr '\0' ' ')
    case "$cmd" in
        "docker-registry serve $RUN/"*) kill -TERM "${p#/proc/}" 2>/dev/null || true ;;
    esac
done

# Mounts under our roots (overlay2 layers, netns bind mounts), deepest first.
mounts() { awk -v a="$RUN" -v b="$LIB/node" '$5 ~ "^" a || $5 ~ "^" b { print $5 }' /proc/self/mountinfo | sort -r; }
for m in $(mounts); do umount -l "$m" 2>/dev/null || true; done

# Namespaces (their veth ends go with them), host veth ends, the bridge.
for d in /run/netns/korch-node*; do
    [ -e "$d" ] || continue
    say "removing namespace ${d#/run/netns/}"
    ip netns del "${d#/run/netns/}" 2>/dev/null || true
done
for l in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' | grep '^ksw-h[0-9]' || true); do
    ip link del "$l" 2>/dev/null || true
done
if ip link show "$BR" >/dev/null 2>&1; then
    say "removing bridge $BR"
    ip link del "$BR"
fi

# Our iptables rules, wherever they are.
for chain in DOCKER-USER FORWARD; do
    iptables -S "$chain" 2>/dev/null | grep -- "--comment $TAG" | while read -r rule; do
        # shellcheck disable=SC2086
        eval "iptables $(echo "$rule" | sed 's/^-A /-D /')" || true
    done
done

if [ -n "$(mounts)" ]; then
    say "warning: still mounted: $(mounts | tr '\n' ' ')"
else
    rm -rf "$RUN"
    for d in "$LIB"/node*; do [ -e "$d" ] && rm -rf "$d"; done
fi
if [ "$PURGE" -eq 1 ]; then
    rm -rf "$LIB"
fi
exit 0
