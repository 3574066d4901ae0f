#!/bin/sh
# A real Docker Swarm on this machine, for korch's swarm tests: swarm-up.sh [N]
#
# N (default 3) Docker engines, each in its own network namespace korch-nodeI,
# wired by a veth onto the host bridge korch-sw0 (10.231.0.0/24, a subnet no
# real network here uses: the host is 10.231.0.1, node I is 10.231.0.(10+I)),
# joined into one swarm (node 1 is the manager; node labels korch.node=nodeI,
# since every node has the same hostname), plus a local registry (Debian's
# docker-registry) on 10.231.0.1:5231 from which the nodes pull the kernel
# image, as a real cluster would. The nodes have no default route: only the
# namespace addresses are ever reached.
#
# Why nsenter: `ip netns exec` remounts /sys, and dockerd then fails with
# "Devices cgroup isn't mounted"; nsenter --net keeps the host's mounts.
# Bridged frames pass the host's iptables FORWARD chain (br_netfilter), whose
# policy is DROP once the host's dockerd runs: one ACCEPT rule for the bridge
# (comment "korch-swarm") goes into DOCKER-USER (FORWARD when there is none).
# The node engines program only their own namespaces' iptables.
#
# Idempotent: what exists and works is kept, what is missing is made (run it
# twice, or after a node's engine died). The daemons it starts get no file
# descriptor above 2: run under `flock /tmp/korch-swarm.lock`, they would
# otherwise inherit the lock's and hold it for as long as the swarm is up. Prints the manager's DOCKER_HOST and
# writes /run/korch-swarm/env for tests to source. scripts/swarm-down.sh
# removes everything this made. Run as root.
#
# Environment: KORCH_SWARM_IMAGE_SRC (the host engine's image to publish,
# default korch-kernel-python3:latest), KORCH_SWARM_SRC_HOST (the engine that
# holds it, default unix:///var/run/docker.sock), KORCH_SWARM_KORCH (1: also
# build the korch image, scripts/build-korch-image.sh, cached, and publish it
# as 10.231.0.1:5231/korch:latest for docker-compose.yml's stack; 0: not),
# KORCH_SWARM_KORCH_SRC (its name on the host engine, korch:latest), KORCH_SWARM_HEARTBEAT (the swarm's
# dispatcher heartbeat, default 2s: a node that goes away is seen down after
# about three of them), KORCH_SWARM_WAIT (seconds to wait for each engine, 60),
# KORCH_SWARM_NODE_SIZE (the bound of each node's tmpfs data root, 4g; the
# kernel image takes 1.5 GB of it).
set -eu

N=${1:-3}
RUN=/run/korch-swarm
LIB=/var/lib/korch-swarm
BR=korch-sw0
PREFIX=10.231.0
HOST_IP=$PREFIX.1
REG_PORT=5231
REG=$HOST_IP:$REG_PORT
IMAGE_SRC=${KORCH_SWARM_IMAGE_SRC:-korch-kernel-python3:latest}
IMAGE_NAME=korch-kernel-python3:latest
IMAGE=$REG/$IMAGE_NAME
HEARTBEAT=${KORCH_SWARM_HEARTBEAT:-2s}
WAIT_S=${KORCH_SWARM_WAIT:-60}
NODE_SIZE=${KORCH_SWARM_NODE_SIZE:-4g}
TAG=korch-swarm
KORCH_BUILD=${KORCH_SWARM_KORCH:-1}
KORCH_SRC=${KORCH_SWARM_KORCH_SRC:-korch:latest}
KORCH_NAME=korch:latest
KORCH_IMAGE_REG=$REG/$KORCH_NAME

say() { echo "swarm-up: $*" >&2; }
die() { echo "swarm-up: error: $*" >&2; exit 1; }

case "$N" in ''|*[!0-9]*) die "usage: swarm-up.sh [N] (N = number of nodes, 1..9)" ;; esac
[ "$N" -ge 1 ] && [ "$N" -le 9 ] || die "N must be 1..9, not '$N'"
[ "$(id -u)" -eq 0 ] || die "run as root (network namespaces, dockerd)"
for c in ip nsenter dockerd docker iptables curl; do
    command -v "$c" >/dev/null 2>&1 || die "'$c' not found (scripts/setup.sh, scripts/dockerd.sh)"
done
if ! command -v docker-registry >/dev/null 2>&1; then
    say "installing docker-registry"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker-registry >/dev/null ||
        die "cannot install Debian's docker-registry"
fi

ns() { echo "korch-node$1"; }
addr() { echo "$PREFIX.$((10 + $1))"; }
sock() { echo "$RUN/korch-node$1.sock"; }
dk() { _dk=$1; shift; DOCKER_HOST="unix://$(sock "$_dk")" docker "$@"; }
# The host engine holds the image to publish (not $DOCKER_HOST: that may be this
# swarm's manager, from a sourced env file).
hdk() { DOCKER_HOST=${KORCH_SWARM_SRC_HOST:-unix:///var/run/docker.sock} docker "$@"; }
answers() { timeout 10 curl -fsS --unix-socket "$(sock "$1")" http://localhost/_ping >/dev/null 2>&1; }

mkdir -p -m 0711 "$RUN" "$LIB"

# A node set beyond N from an earlier, larger run would be left out of the env
# file but keep running: refuse rather than guess.
for d in /run/netns/korch-node*; do
    [ -e "$d" ] || continue
    i=${d#/run/netns/korch-node}
    [ "$i" -le "$N" ] || die "node $i of a larger swarm exists: run scripts/swarm-down.sh first"
done

# --- the bridge, its address and the FORWARD accept ---------------------------
if ! ip link show "$BR" >/dev/null 2>&1; then
    ip link add "$BR" type bridge
fi
ip addr show dev "$BR" | grep -q "inet $HOST_IP/24" || ip addr add "$HOST_IP/24" dev "$BR"
ip link set "$BR" up
CHAIN=FORWARD
iptables -n -L DOCKER-USER >/dev/null 2>&1 && CHAIN=DOCKER-USER
iptables -C "$CHAIN" -i "$BR" -o "$BR" -m comment --comment "$TAG" -j ACCEPT 2>/dev/null ||
    iptables -I "$CHAIN" 1 -i "$BR" -o "$BR" -m comment --comment "$TAG" -j ACCEPT

# --- namespaces and veths -----------------------------------------------------
i=1
while [ "$i" -le "$N" ]; do
    n=$(ns "$i")
    [ -e "/run/netns/$n" ] || ip netns add "$n"
    ip -n "$n" link set lo up
    if ! ip -n "$n" link show eth0 >/dev/null 2>&1; then
        ip link del "ksw-h$i" 2>/dev/null || true
        ip link add "ksw-h$i" type veth peer name "ksw-n$i"
        ip link set "ksw-n$i" netns "$n"
        ip -n "$n" link set "ksw-n$i" name eth0
    fi
    ip -n "$n" addr show dev eth0 | grep -q "inet $(addr "$i")/24" || ip -n "$n" addr add "$(addr "$i")/24" dev eth0
    ip -n "$n" link set eth0 up
    ip link set "ksw-h$i" master "$BR" up
    i=$((i + 1))
done

# --- the registry on the bridge address ------------------------------------------
# The host engine trusts plain HTTP only on 127.0.0.0/8, so the image is pushed
# through a second registry process on 127.0.0.1 over the same storage; the
# nodes (insecure-registries: 10.231.0.1:5231) pull from the bridge address.
reg_config() { # addr storage-cache(yes|no)
    cat <<EOF
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $LIB/registry
  delete:
    enabled: true
http:
  addr: $1
EOF
}
reg_up() { curl -fsS "http://$1/v2/" >/dev/null 2>&1; }
reg_start() { # name addr
    reg_config "$2" >"$RUN/$1.yml"
    setsid docker-registry serve "$RUN/$1.yml" >>"$RUN/$1.log" 2>&1 </dev/null 3>&- 4>&- 5>&- 6>&- 7>&- 8>&- 9>&- &
    echo $! >"$RUN/$1.pid"
    t=0
    until reg_up "$2"; do
        t=$((t + 1))
        [ "$t" -le 50 ] || die "registry on $2 did not answer (see $RUN/$1.log)"
        kill -0 "$(cat "$RUN/$1.pid")" 2>/dev/null || die "registry on $2 exited (see $RUN/$1.log)"
        sleep 0.1
    done
}
mkdir -p "$LIB/registry"
reg_up "$REG" || reg_start registry "$REG"

# publish SRC NAME: the host engine's image SRC as $REG/NAME, unless the
# registry has it already (the pushed image id is kept beside the storage).
publish() {
    _id=$(hdk image inspect -f '{{.Id}}' "$1")
    _stamp=$LIB/registry.pushed${3:-}
    [ "$_id" != "$(cat "$_stamp" 2>/dev/null || true)" ] || return 0
    say "publishing $1 as $REG/$2"
    # One left by a crashed run is reused (and swarm-down stops it).
    _started=0
    reg_up "127.0.0.1:$REG_PORT" || { reg_start registry-push "127.0.0.1:$REG_PORT"; _started=1; }
    hdk tag "$1" "127.0.0.1:$REG_PORT/$2"
    _rc=0
    hdk push -q "127.0.0.1:$REG_PORT/$2" >/dev/null || _rc=$?
    hdk rmi "127.0.0.1:$REG_PORT/$2" >/dev/null 2>&1 || true
    # Our child, not yet reaped: its pid cannot have been reused.
    [ "$_started" -eq 0 ] || kill "$(cat "$RUN/registry-push.pid")" 2>/dev/null || true
    rm -f "$RUN/registry-push.pid"
    [ "$_rc" -eq 0 ] || die "docker push of $2 to the local registry failed"
    echo "$_id" >"$_stamp"
}

hdk image inspect "$IMAGE_SRC" >/dev/null 2>&1 ||
    die "the host engine has no image '$IMAGE_SRC' (scripts/build-image.sh)"
src_id=$(hdk image inspect -f '{{.Id}}' "$IMAGE_SRC")
publish "$IMAGE_SRC" "$IMAGE_NAME"

# The korch image (docker-compose.yml's stack service), built here from
# this checkout (cached: seconds when nothing changed).
korch_id=""
if [ "$KORCH_BUILD" = 1 ]; then
    KORCH_IMAGE=$KORCH_SRC DOCKER_HOST=${KORCH_SWARM_SRC_HOST:-unix:///var/run/docker.sock} \
        "$(dirname "$0")/build-korch-image.sh" || die "the korch image did not build"
    korch_id=$(hdk image inspect -f '{{.Id}}' "$KORCH_SRC")
    publish "$KORCH_SRC" "$KORCH_NAME" .korch
fi

# --- one engine per namespace ---------------------------------------------------
i=1
while [ "$i" -le "$N" ]; do
    n=$(ns "$i")
    if ! answers "$i"; then
        d=$RUN/node$i
        mkdir -p "$d" "$LIB/node$i"
        # The data root on a tmpfs: a node's image store is ~60k files, which
        # a busy disk takes minutes to write and to remove; memory is freed
        # at once by swarm-down's umount.
        if ! mountpoint -q "$LIB/node$i"; then
            mount -t tmpfs -o "size=$NODE_SIZE,mode=0711" "korch-swarm-node$i" "$LIB/node$i"
        fi
        pid=$(cat "$d/dockerd.pid" 2>/dev/null || true)
        if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
            say "node $i: dockerd $pid is running but not answering; waiting"
        else
            rm -f "$d/dockerd.pid" "$(sock "$i")"
            cat >"$d/daemon.json" <<EOF
{
  "insecure-registries": ["$REG"],
  "default-address-pools": [{"base": "10.232.0.0/16", "size": 24}],
  "cgroup-parent": "/korch-swarm-node$i",
  "shutdown-timeout": 5,
  "log-level": "warn"
}
EOF
            say "node $i: starting dockerd in $n ($(addr "$i"))"
            env -u DOCKER_HOST nsenter --net="/run/netns/$n" setsid dockerd \
                --config-file "$d/daemon.json" \
                --data-root "$LIB/node$i" --exec-root "$d/exec" --pidfile "$d/dockerd.pid" \
                -H "unix://$(sock "$i")" --bip "10.233.$i.1/24" --iptables=true \
                >>"$d/dockerd.log" 2>&1 </dev/null 3>&- 4>&- 5>&- 6>&- 7>&- 8>&- 9>&- &
        fi
    fi
    i=$((i + 1))
done
i=1
while [ "$i" -le "$N" ]; do
    t=0
    until answers "$i"; do
        t=$((t + 1))
        [ "$t" -le "$((WAIT_S * 5))" ] || { tail -n 20 "$RUN/node$i/dockerd.log" >&2; die "node $i's engine did not answer"; }
        sleep 0.2
    done
    i=$((i + 1))
done

# --- the swarm ------------------------------------------------------------------
state() { dk "$1" info -f '{{.Swarm.LocalNodeState}}' 2>/dev/null; }
is_manager() { [ "$(dk "$1" info -f '{{.Swarm.ControlAvailable}}' 2>/dev/null)" = true ]; }
if [ "$(state 1)" != active ] || ! is_manager 1; then
    [ "$(state 1)" = inactive ] || dk 1 swarm leave --force >/dev/null 2>&1 || true
    say "node 1: swarm init on $(addr 1)"
    dk 1 swarm init --advertise-addr "$(addr 1)" --listen-addr "$(addr 1):2377" \
        --default-addr-pool 10.234.0.0/16 --default-addr-pool-mask-length 24 \
        --dispatcher-heartbeat "$HEARTBEAT" >/dev/null
fi
token=$(dk 1 swarm join-token -q worker)
i=2
while [ "$i" -le "$N" ]; do
    st=$(state "$i")
    # A node of another swarm (this one re-initialised after a crash) leaves it.
    if [ "$st" = active ] || [ "$st" = pending ] || [ "$st" = error ]; then
        id=$(dk "$i" info -f '{{.Swarm.NodeID}}' 2>/dev/null || true)
        if [ -z "$id" ] || ! dk 1 node inspect "$id" >/dev/null 2>&1; then
            dk "$i" swarm leave --force >/dev/null 2>&1 || true
            st=inactive
        fi
    fi
    if [ "$st" != active ]; then
        say "node $i: joining the swarm"
        dk "$i" swarm join --token "$token" --advertise-addr "$(addr "$i")" \
            --listen-addr "$(addr "$i"):2377" "$(addr 1):2377" >/dev/null
    fi
    i=$((i + 1))
done

# Labels by node id (all nodes share one hostname); stale entries of earlier
# incarnations (down, not one of ours now) are removed.
ids=""
i=1
while [ "$i" -le "$N" ]; do
    id=$(dk "$i" info -f '{{.Swarm.NodeID}}')
    ids="$ids $id"
    t=0
    until [ "$(dk 1 node inspect -f '{{.Status.State}}' "$id" 2>/dev/null)" = ready ]; do
        t=$((t + 1))
        [ "$t" -le "$((WAIT_S * 5))" ] || die "node $i ($id) is not ready in the swarm"
        sleep 0.2
    done
    [ "$(dk 1 node inspect -f '{{index .Spec.Labels "korch.node"}}' "$id")" = "node$i" ] ||
        dk 1 node update --label-add "korch.node=node$i" "$id" >/dev/null
    i=$((i + 1))
done
for id in $(dk 1 node ls -q); do
    case " $ids " in *" $id "*) ;; *) dk 1 node rm --force "$id" >/dev/null 2>&1 || true ;; esac
done

# --- the image on every node, pulled from the registry ----------------------------
pulls=""
i=1
while [ "$i" -le "$N" ]; do
    if [ "$(dk "$i" image inspect -f '{{.Id}}' "$IMAGE" 2>/dev/null)" != "$src_id" ]; then
        say "node $i: pulling $IMAGE"
        dk "$i" pull -q "$IMAGE" >/dev/null &
        pulls="$pulls $!"
    fi
    i=$((i + 1))
done
# The korch image on the manager, where the stack runs it.
if [ -n "$korch_id" ] && [ "$(dk 1 image inspect -f '{{.Id}}' "$KORCH_IMAGE_REG" 2>/dev/null)" != "$korch_id" ]; then
    say "node 1: pulling $KORCH_IMAGE_REG"
    dk 1 pull -q "$KORCH_IMAGE_REG" >/dev/null &
    pulls="$pulls $!"
fi
for p in $pulls; do wait "$p" || die "a node could not pull an image of $REG"; done

# --- the env file -----------------------------------------------------------------
{
    echo "# written by scripts/swarm-up.sh; source it"
    echo "export DOCKER_HOST=unix://$(sock 1)"
    echo "export KORCH_SWARM_NODES=$N"
    echo "export KORCH_SWARM_MANAGER_ADDR=$(addr 1)"
    echo "export KORCH_SWARM_REGISTRY=$REG"
    echo "export KORCH_SWARM_IMAGE=$IMAGE"
    [ -z "$korch_id" ] || echo "export KORCH_SWARM_KORCH_IMAGE=$KORCH_IMAGE_REG"
    echo "export KORCH_SWARM_MANAGER_SOCK=$(sock 1)"
    i=1
    while [ "$i" -le "$N" ]; do
        echo "export KORCH_SWARM_NODE${i}_HOST=unix://$(sock "$i")"
        echo "export KORCH_SWARM_NODE${i}_ADDR=$(addr "$i")"
        echo "export KORCH_SWARM_NODE${i}_NETNS=$(ns "$i")"
        i=$((i + 1))
    done
} >"$RUN/env.tmp"
mv "$RUN/env.tmp" "$RUN/env"
say "swarm of $N up; env in $RUN/env"
echo "DOCKER_HOST=unix://$(sock 1)"
