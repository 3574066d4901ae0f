#!/usr/bin/python3
"""Start to kernel_info for the three launchers, in one run.

usage: sandbox.py KORCH     (scripts/bench-sandbox.sh runs it)

`korch exec --launcher local|sandbox|docker -c pass`, rotating the order,
BENCH_STARTS times each (default 10), after one warm-up each: korch's
"kernel ready in N ms" (korch_kernel_new to the kernel_info handshake: for
the sandbox, cgroup + bwrap + kernel boot; for docker, create + start + boot)
and the wall time from exec() of korch to that line. Prints p50s and the
ratios to local; the issue's goal is sandbox / local <= 1.2.

With BENCH_REF_KORCH=PATH (another korch binary, e.g. one built before a
change) its sandbox starts are measured in the same rotation, and the
ratio of this korch's sandbox start to that one's is printed.
"""
import os
import json
import subprocess
import sys
import time

import containers  # start_once, p50, log: the same measurement as bench-containers
from containers import log, p50, start_once

REF = os.environ.get("BENCH_REF_KORCH") or None
LAUNCHERS = ("local", "sandbox", "docker") + (("sandbox-ref",) if REF else ())


def start(k):
    """start_once, for the reference korch's sandbox too."""
    if k != "sandbox-ref":
        return start_once(k)
    saved, containers.KORCH = containers.KORCH, REF
    try:
        return start_once("sandbox")
    finally:
        containers.KORCH = saved


# The namespaces and mounts of a kernel's sandbox around /usr/bin/true: what
# the sandbox adds to a start, without the kernel's own noisy boot.
BWRAP_TRUE = ["bwrap", "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent", "--new-session",
              "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib",
              "--symlink", "usr/lib64", "/lib64", "--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache",
              "--proc", "/proc", "--dev", "/dev", "--size", "268435456", "--tmpfs", "/tmp", "--tmpfs", "/home",
              "--remount-ro", "/home", "--remount-ro", "/", "--", "/usr/bin/true"]


def run_ms(argv, n=20):
    v = []
    for _ in range(n):
        t0 = time.monotonic()
        subprocess.run(argv, check=True)
        v.append((time.monotonic() - t0) * 1000)
    return p50(v)


def main():
    n = containers.STARTS
    log("bench-sandbox: start to ready, %d each (rotating) ..." % n)
    res = {k: ([], []) for k in LAUNCHERS}
    for k in LAUNCHERS:
        start(k)  # warm the page cache
    for i in range(n):
        order = LAUNCHERS[i % len(LAUNCHERS):] + LAUNCHERS[:i % len(LAUNCHERS)]
        for k in order:
            r, w = start(k)
            res[k][0].append(r)
            res[k][1].append(w)
    local_r, local_w = p50(res["local"][0]), p50(res["local"][1])
    bare, boxed = run_ms(["/usr/bin/true"]), run_ms(BWRAP_TRUE)
    print("%-40s %9s %9s %9s" % ("", "local", "sandbox", "docker"))
    print("%-40s %9.0f %9.0f %9.0f" % (("start -> kernel_info p50, korch (ms)",) +
                                       tuple(p50(res[k][0]) for k in LAUNCHERS[:3])))
    print("%-40s %9.0f %9.0f %9.0f" % (("start -> kernel_info p50, wall (ms)",) +
                                       tuple(p50(res[k][1]) for k in LAUNCHERS[:3])))
    print("%-40s %9.2f %9.2f %9.2f   goal: sandbox <= 1.2" % (("ratio to local, korch",) +
                                                             tuple(p50(res[k][0]) / local_r for k in LAUNCHERS[:3])))
    print("%-40s %9.2f %9.2f %9.2f" % (("ratio to local, wall",) + tuple(p50(res[k][1]) / local_w for k in LAUNCHERS[:3])))
    print("%-40s %9.1f %9.1f %9s   (p50 of 20: the sandbox's own cost)" %
          ("/usr/bin/true alone vs in bwrap (ms)", bare, boxed, "-"))
    print("%-40s %9.0f %9.0f %9.0f" % (("start -> kernel_info min, korch (ms)",) +
                                       tuple(min(res[k][0]) for k in LAUNCHERS[:3])))
    if REF:
        ref_r, ref_w = p50(res["sandbox-ref"][0]), p50(res["sandbox-ref"][1])
        print("%-40s %9.0f %9.0f   (korch, wall; %s)" % ("sandbox start, reference korch p50 (ms)", ref_r, ref_w, REF))
        print("%-40s %9.2f %9.2f   (this korch's sandbox / the reference's)" %
              ("sandbox ratio to the reference", p50(res["sandbox"][0]) / ref_r, p50(res["sandbox"][1]) / ref_w))
    print("raw: " + json.dumps({k: {"reported_ms": v[0], "wall_ms": [round(x, 1) for x in v[1]]}
                                for k, v in res.items()}))


if __name__ == "__main__":
    try:
        main()
    finally:
        for p in list(containers.children):
            containers.stop(p)
