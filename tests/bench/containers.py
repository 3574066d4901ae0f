#!/usr/bin/python3
"""Container kernels next to local ones, measured through korch's own binaries.

usage: containers.py KORCH [KORCH_BENCH]     (scripts/bench-containers.sh runs it)

  start    `korch exec --launcher docker|local -c pass`, alternating, BENCH_STARTS
           times each (default 10): korch's "kernel ready in N ms" (from
           korch_kernel_new to the ready handshake: container create + start +
           kernel boot) and the wall time from exec() of korch to that line
  memory   an idle kernel: the container's cgroup (memory.current, and anon from
           memory.stat), docker's stats (usage - inactive_file, what `docker
           stats` shows), and the PSS of the kernel's processes, next to the PSS
           of a local ipykernel
  rtt      execute `pass` (reply + idle) on a running kernel: `korch kernel
           --launcher docker` (ipc through the bind mount) vs `korch kernel
           --launcher local` (tcp on 127.0.0.1), BENCH_N runs each (default 300)
           in BENCH_ROUNDS alternating blocks (default 3), with korch-bench's
           roundtrip when it is built, else `korch exec --json` (whole ms)

Every process it starts is ended (by pid) before it exits, and the kernels'
containers with them.
"""
import http.client
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse

from procfs import pss_kib  # noqa: E402

KORCH = sys.argv[1]
KB = sys.argv[2] if len(sys.argv) > 2 and os.access(sys.argv[2], os.X_OK) else None
STARTS = int(os.environ.get("BENCH_STARTS", "10"))
N = int(os.environ.get("BENCH_N", "300"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
SOCK = "/var/run/docker.sock"
children = []


class UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("docker")
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self.path)


def docker(path):
    c = UnixHTTP(SOCK)
    c.request("GET", path)
    r = c.getresponse()
    body = r.read()
    c.close()
    if r.status != 200:
        raise RuntimeError("docker GET %s: %d %s" % (path, r.status, body[:200]))
    return json.loads(body)


def p50(v):
    return statistics.median(v) if v else float("nan")


def log(*a):
    print(*a, file=sys.stderr, flush=True)


# ------------------------------------------------------------------ start

def start_once(launcher):
    t0 = time.monotonic()
    p = subprocess.Popen([KORCH, "exec", "--launcher", launcher, "-c", "pass"], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    children.append(p)
    reported = wall = None
    err = []
    for line in p.stderr:
        err.append(line)
        m = re.search(r"ready in (\d+) ms", line)
        if m and reported is None:
            reported = int(m.group(1))
            wall = (time.monotonic() - t0) * 1000
    p.wait()
    children.remove(p)
    if p.returncode != 0 or reported is None:
        raise RuntimeError("korch exec --launcher %s failed: %s" % (launcher, "".join(err)))
    return reported, wall


def bench_start():
    res = {"docker": ([], []), "local": ([], [])}
    start_once("docker")  # warm the page cache for both
    start_once("local")
    for i in range(STARTS):
        for launcher in ("docker", "local") if i % 2 == 0 else ("local", "docker"):
            r, w = start_once(launcher)
            res[launcher][0].append(r)
            res[launcher][1].append(w)
    return res


# --------------------------------------------------------- running kernels

def korch_kernel(launcher, instance, conn):
    p = subprocess.Popen([KORCH, "kernel", "--launcher", launcher, "--instance", instance, "--connection-file", conn],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    children.append(p)
    line = p.stdout.readline()  # the connection file's path, once the kernel is ready
    if line.strip() != conn:
        raise RuntimeError("korch kernel --launcher %s: %s" % (launcher, p.stderr.read()))
    return p


def stop(p):
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    if p in children:
        children.remove(p)


def rtt_block(conn, n, samples):
    if KB:
        env = dict(os.environ, KORCH_BENCH_SAMPLES=samples)
        out = subprocess.run([KB, "roundtrip", conn, str(n)], env=env, capture_output=True, text=True, check=True)
        return json.loads(out.stdout.splitlines()[-1])
    argv = [KORCH, "exec", "--existing", conn, "--json"] + ["-c", "pass"] * n
    out = subprocess.run(argv, capture_output=True, text=True, check=True)
    with open(samples, "a") as f:
        for line in out.stdout.splitlines():
            f.write("%s\n" % json.loads(line)["elapsed_ms"])
    return {}


def read_samples(path):
    with open(path) as f:
        return [float(x) for x in f if x.strip()]


def children_of(ppid):
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                stat = f.read()
            if int(stat[stat.rindex(")") + 2:].split()[1]) == ppid:
                out.append(int(d))
        except (OSError, ValueError):
            pass
    return out


def container_memory(instance):
    filt = json.dumps({"label": ["korch.instance=" + instance]})
    cs = docker("/containers/json?filters=" + urllib.parse.quote(filt))
    cid = cs[0]["Id"]
    info = docker("/containers/%s/json" % cid)
    stats = docker("/containers/%s/stats?stream=false" % cid)
    ms = stats.get("memory_stats", {})
    st = ms.get("stats", {})
    usage = ms.get("usage", 0)
    inactive = st.get("inactive_file", st.get("total_inactive_file", 0))
    out = {"docker_stats_kib": (usage - inactive) // 1024, "limit_mib": ms.get("limit", 0) // (1 << 20)}
    pid = info["State"]["Pid"]
    # The container's memory cgroup: v2 (0::PATH) or v1 (N:memory:PATH).
    with open("/proc/%d/cgroup" % pid) as f:
        lines = [l.strip().split(":", 2) for l in f]
    v1 = [l[2] for l in lines if "memory" in l[1].split(",")]
    v2 = [l[2] for l in lines if l[0] == "0" and l[1] == ""]
    if v1:
        base, current, anon = "/sys/fs/cgroup/memory" + v1[0], "memory.usage_in_bytes", "total_rss"
    else:
        base, current, anon = "/sys/fs/cgroup" + v2[0], "memory.current", "anon"
    with open(base + "/" + current) as f:
        out["cgroup_current_kib"] = int(f.read()) // 1024
    with open(base + "/memory.stat") as f:
        kv = dict(l.split() for l in f)
    out["cgroup_anon_kib"] = int(kv.get(anon, 0)) // 1024
    out["cgroup"] = "v1" if v1 else "v2"
    with open(base + "/cgroup.procs") as f:
        pids = [int(x) for x in f.read().split()]
    out["pss_kib"] = sum(pss_kib(p) for p in pids)
    out["procs"] = len(pids)
    return out


def bench_running():
    tmp = tempfile.mkdtemp(prefix="korch-bench-containers.")
    tag = "bench-%d" % os.getpid()
    conn_d, conn_l = tmp + "/docker.json", tmp + "/local.json"
    kd = korch_kernel("docker", tag + "-docker", conn_d)
    kl = korch_kernel("local", tag + "-local", conn_l)
    try:
        sd, sl = tmp + "/docker.txt", tmp + "/local.txt"
        per = max(1, N // ROUNDS)
        for _ in range(ROUNDS):
            rtt_block(conn_d, per, sd)
            rtt_block(conn_l, per, sl)
        rtt = {"docker": read_samples(sd), "local": read_samples(sl)}
        time.sleep(3)  # idle
        mem = container_memory(tag + "-docker")
        local_kernels = children_of(kl.pid)
        mem["local_pss_kib"] = sum(pss_kib(p) for p in local_kernels)
        return rtt, mem
    finally:
        stop(kd)
        stop(kl)
        subprocess.run(["rm", "-rf", tmp])


def main():
    try:
        log("bench-containers: start to ready, %d each (alternating) ..." % STARTS)
        st = bench_start()
        log("bench-containers: round trips, %d each in %d blocks (%s) ..." %
            (N, ROUNDS, "korch-bench" if KB else "korch exec --json, whole ms"))
        rtt, mem = bench_running()
    finally:
        for p in list(children):
            stop(p)
    sd, sl = p50(st["docker"][0]), p50(st["local"][0])
    wd, wl = p50(st["docker"][1]), p50(st["local"][1])
    rd, rl = p50(rtt["docker"]), p50(rtt["local"])
    md, ml = statistics.mean(rtt["docker"]), statistics.mean(rtt["local"])
    rows = [
        ("start -> ready p50, korch (ms)", sd, sl, sd / sl, "<= 1.5"),
        ("start -> ready p50, wall from exec (ms)", wd, wl, wd / wl, ""),
        ("execute `pass` round trip p50 (ms)", rd, rl, rd / rl, "<= 1.10"),
        ("execute `pass` round trip mean (ms)", md, ml, md / ml, ""),
        ("idle kernel PSS, its processes (MiB)", mem.get("pss_kib", 0) / 1024, mem["local_pss_kib"] / 1024,
         mem.get("pss_kib", 0) / max(1, mem["local_pss_kib"]), ""),
        ("idle container cgroup usage (MiB)", mem.get("cgroup_current_kib", 0) / 1024, None, None, ""),
        ("idle container cgroup anon (MiB)", mem.get("cgroup_anon_kib", 0) / 1024, None, None, ""),
        ("idle container, docker stats (MiB)", mem["docker_stats_kib"] / 1024, None, None, ""),
    ]
    print("%-44s %10s %10s %8s  %s" % ("", "container", "local", "ratio", "goal"))
    for name, a, b, r, goal in rows:
        print("%-44s %10.2f %10s %8s  %s" % (name, a, "%.2f" % b if b is not None else "-",
                                             "%.2f" % r if r is not None else "-", goal))
    print("samples: start %d each; round trips %d / %d; container processes %s; memory limit %s MiB" %
          (len(st["docker"][0]), len(rtt["docker"]), len(rtt["local"]), mem.get("procs"), mem.get("limit_mib")))
    print("raw: " + json.dumps({"start_reported_ms": {k: v[0] for k, v in st.items()},
                                 "start_wall_ms": {k: [round(x, 1) for x in v[1]] for k, v in st.items()},
                                 "memory": mem}))


if __name__ == "__main__":
    main()
