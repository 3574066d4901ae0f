#!/usr/bin/python3
"""The agent's own cost, against the scripted LLM server answering at once.

  agent_bench.py KORCH STEPS SESSIONS SESSION_STEPS

1. One session of STEPS steps (each runs `print(...)`): per step, the wall
   time between one model call starting and the next, minus the kernel's
   execution time = korch's orchestration + the scripted server's reply.
2. SESSIONS concurrent `korch run` processes of SESSION_STEPS steps each
   (each with its own local kernel): wall time, and each korch's peak RSS.
3. The same SESSIONS sessions through ONE `korch serve` (the agent API: one
   actor thread per session, turns read as server-sent events): wall time,
   time from POST .../messages to the first event, and korch serve's RSS
   per session (its kernels are separate processes, not counted).
Prints one JSON object.
"""
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

from procfs import status_kib  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def start_server():
    p = subprocess.Popen(["/usr/bin/python3", os.path.join(ROOT, "tests/peers/llm_server.py")],
                         stdout=subprocess.PIPE, text=True)
    port = int(p.stdout.readline())
    return p, port


def env_for(port, scenario):
    e = dict(os.environ)
    e["OPENAI_BASE_URL"] = "http://127.0.0.1:%d/s/%s/v1" % (port, scenario)
    e["OPENAI_API_KEY"] = "bench"
    return e


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if xs else None


def one_session(korch, port, steps, tmp):
    cmd = [korch, "run", "--launcher", "local", "--llm", "openai:gpt-4o-mini", "--json", "--max-steps", str(steps),
           "--session", os.path.join(tmp, "one"), "loop"]
    out = subprocess.run(cmd, env=env_for(port, "forever"), capture_output=True, text=True, timeout=600).stdout
    events = [json.loads(l) for l in out.splitlines() if l.strip()]
    step_t = [e["t_ms"] for e in events if e["event"] == "step"]
    exec_ms = [e["result"]["elapsed_ms"] for e in events if e["event"] == "result"]
    per_step = []
    for i in range(len(exec_ms)):
        if i + 1 < len(step_t):
            per_step.append(step_t[i + 1] - step_t[i] - exec_ms[i])
    return {"steps": len(exec_ms), "orchestration_ms_p50": median(per_step),
            "orchestration_ms_max": max(per_step) if per_step else None,
            "kernel_exec_ms_p50": median(exec_ms)}


def concurrent(korch, port, n, steps, tmp):
    t0 = time.monotonic()
    procs = []
    for i in range(n):
        cmd = [korch, "run", "--launcher", "local", "--llm", "openai:gpt-4o-mini", "--quiet", "--max-steps",
               str(steps), "--session", os.path.join(tmp, "c%d" % i), "loop"]
        procs.append(subprocess.Popen(cmd, env=env_for(port, "forever"), stdout=subprocess.DEVNULL,
                                      stderr=subprocess.PIPE, text=True))
    hwm = {p.pid: 0 for p in procs}
    while any(p.poll() is None for p in procs):
        for p in procs:
            v = status_kib(p.pid, "VmHWM") if p.returncode is None else None
            if v:
                hwm[p.pid] = max(hwm[p.pid], v)
        time.sleep(0.05)
    ok, errors = 0, []
    for p in procs:
        err = p.stderr.read()
        if p.returncode == 0:
            ok += 1
        else:
            errors.append(err.strip().splitlines()[-3:])
    rss = [v for v in hwm.values() if v]
    return {"sessions": n, "ok": ok, "steps_each": steps, "wall_s": round(time.monotonic() - t0, 2),
            "korch_peak_rss_kib_p50": median(rss), "korch_peak_rss_kib_max": max(rss) if rss else 0,
            "errors": errors}


def served(korch, port, n, steps, tmp):
    """n agent sessions at once through one korch serve."""
    import http.client
    import threading
    import urllib.parse
    env = env_for(port, "forever")
    srv = subprocess.Popen([korch, "serve", "--port", "0", "--launcher", "local", "--no-access-log",
                            "--llm", "openai:gpt-4o-mini", "--max-steps", str(steps),
                            "--agent-dir", os.path.join(tmp, "served")],
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = srv.stdout.readline().strip()
    u = urllib.parse.urlsplit(line)
    token = urllib.parse.parse_qs(u.query)["token"][0]
    hdr = {"Authorization": "token " + token, "Content-Type": "application/json"}
    rss0 = (status_kib(srv.pid, "VmRSS") or 0)
    first, ok, errors = [], [0], []
    lock = threading.Lock()

    def session():
        try:
            c = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
            c.request("POST", "/api/agent/sessions", body="{}", headers=hdr)
            r = c.getresponse()
            sid = json.loads(r.read())["id"]
            t0 = time.monotonic()
            c.request("POST", "/api/agent/sessions/%s/messages" % sid, body=json.dumps({"content": "loop"}),
                      headers=hdr)
            r = c.getresponse()
            got_first, status = False, None
            for raw in r:
                if raw.startswith(b"event:") and not got_first:
                    got_first = True
                    with lock:
                        first.append((time.monotonic() - t0) * 1000)
                if raw.startswith(b"data:") and b'"status"' in raw and b'"tokens"' in raw:
                    status = json.loads(raw[5:]).get("status")
            with lock:
                if status == "ok":
                    ok[0] += 1
                else:
                    errors.append(["status %r" % status])
        except Exception as e:  # noqa: BLE001
            with lock:
                errors.append([str(e)])

    t0 = time.monotonic()
    threads = [threading.Thread(target=session) for _ in range(n)]
    for t in threads:
        t.start()
    peak = 0
    while any(t.is_alive() for t in threads):
        peak = max(peak, (status_kib(srv.pid, "VmRSS") or 0))
        time.sleep(0.05)
    wall = time.monotonic() - t0
    rss_end = (status_kib(srv.pid, "VmRSS") or 0)
    srv.terminate()
    srv.wait(timeout=60)
    return {"sessions": n, "ok": ok[0], "steps_each": steps, "wall_s": round(wall, 2),
            "first_event_ms_p50": round(median(first), 1) if first else None,
            "serve_rss_kib_idle": rss0, "serve_rss_kib_peak": peak,
            "serve_rss_kib_per_session": round((rss_end - rss0) / n) if n else 0, "errors": errors}


def main():
    korch, steps, n, session_steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    srv, port = start_server()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            res = {"one_session": one_session(korch, port, steps, tmp),
                   "concurrent": concurrent(korch, port, n, session_steps, tmp),
                   "served": served(korch, port, n, session_steps, tmp)}
    finally:
        srv.terminate()
        srv.wait()
    print(json.dumps(res))


if __name__ == "__main__":
    main()
