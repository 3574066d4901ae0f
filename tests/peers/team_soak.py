#!/usr/bin/python3
"""A team's korch serve over many turns (issue 26): is its memory flat, is
the day's use kept across a restart? Clients as in team_check.py.

    team_soak.py --url URL --tokens u0=T,... --pid PID flat --sessions 2 --warm 30 --turns 80
    team_soak.py --url URL --tokens carol=T turn        one turn of each user, then GET /api/me

flat: every user's --sessions agent sessions run --warm turns back to back,
then wait for each other; korch serve's RSS is read while all are idle;
then --turns more each, wait, RSS again. Every answer must carry its own
turn's tag and number (scenario "owner"). Prints the two RSS figures, the
turns between them and the growth per turn.

turn: each user's one agent session runs one turn (or gets its 429), then
the user's GET /api/me; prints the statuses and what /api/me said.

fair: the first user of --tokens runs --sessions agent sessions turning
back to back, the second user one session; once all are turning, the
second runs --turns turns one after another while the first's keep going
(scenario "ratelimited": the model's key is over its budget the whole
time). Prints each one's turn latencies, the turns that failed or went to
the wrong owner, and what each user's /metrics says of the model gate.

Prints one JSON line {"scenario", "ok", "failures", "details"}; exit 0 when it held.
"""
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from team_check import X, Sse, _done, _text, run_main  # noqa: E402


def _rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _quiet_rss(pid):
    """The RSS once the server is idle: the least of a few reads 0.3 s apart."""
    time.sleep(1.0)
    return min(_rss_kb(pid) for _ in range(5) if time.sleep(0.3) is None)


def flat(args, users):
    fail, lock = [], threading.Lock()
    wrong, turns = [], [0, 0]
    n = len(users) * args.sessions
    at_warm, at_end = threading.Barrier(n + 1), threading.Barrier(n + 1)

    def run(u, k, sid, first, count, phase):
        for t in range(first, first + count):
            tag = "%s_s%d_t%d" % (u.name, k, t)
            text, done = _done(Sse(X(u), sid, "TAG=" + tag).all())
            with lock:
                turns[phase] += 1
                if not text or not text.startswith("ANSWER %s " % tag) or \
                        text.split()[-1] != str(sum(range(len(tag) + 10))):
                    wrong.append("%s: %r" % (tag, text))

    def one(u, k):
        sid = None
        try:
            st, m = u.req("POST", "api/agent/sessions", {}, timeout=300)
            if st != 201:
                raise RuntimeError("session: %s %r" % (st, m))
            sid = m["id"]
            run(u, k, sid, 1, args.warm, 0)
        except Exception as e:  # noqa: BLE001
            with lock:
                fail.append("%s session %d: %r" % (u.name, k, e))
        at_warm.wait()
        try:
            if sid:
                run(u, k, sid, args.warm + 1, args.turns, 1)
        except Exception as e:  # noqa: BLE001
            with lock:
                fail.append("%s session %d: %r" % (u.name, k, e))
        at_end.wait()
        if sid:
            u.req("DELETE", "api/agent/sessions/" + sid, timeout=120)

    t0 = time.monotonic()
    threads = [threading.Thread(target=one, args=(u, k)) for u in users.values() for k in range(args.sessions)]
    for t in threads:
        t.start()
    at_warm.wait()
    warm_kb, t_warm = _quiet_rss(args.pid), time.monotonic()
    at_warm_done = time.monotonic()
    at_end.wait()
    end_kb = _quiet_rss(args.pid)
    for t in threads:
        t.join()
    measured = turns[1]
    fail += wrong[:20]
    if measured < n * args.turns:
        fail.append("only %d of %d turns after the warm-up" % (measured, n * args.turns))
    details = {"sessions": n, "warm_turns": turns[0], "turns": measured, "wrong_answers": len(wrong),
               "rss_warm_kb": warm_kb, "rss_end_kb": end_kb,
               "growth_per_turn_bytes": round((end_kb - warm_kb) * 1024 / measured) if measured else None,
               "seconds_warm": round(t_warm - t0, 1), "seconds_measured": round(time.monotonic() - at_warm_done, 1)}
    return fail, details


def turn(args, users):
    fail, details = [], {}
    for u in users.values():
        st, m = u.req("POST", "api/agent/sessions", {}, timeout=300)
        if st != 201:
            fail.append("%s: session %s %r" % (u.name, st, m))
            continue
        tag = "%s_day" % u.name
        sse = Sse(X(u), m["id"], "TAG=" + tag)
        body = None
        if sse.status == 200:
            text, done = _done(sse.all())
        else:
            text, done, body = None, None, json.loads(sse.resp.read().decode() or "null")
        me = u.req("GET", "api/me")[1]
        details[u.name] = {"status": sse.status, "answer": text, "done": (done or {}).get("status"),
                           "refused": body, "me": me}
        u.req("DELETE", "api/agent/sessions/" + m["id"], timeout=120)
    return fail, details


def _gate_metrics(u):
    st, text = _text(u, "metrics")
    out = {}
    for line in text.splitlines() if st == 200 else []:
        for k in ("korch_user_model_calls_total", "korch_user_model_rate_limited_total",
                  "korch_user_model_wait_seconds_total"):
            if line.startswith(k + "{"):
                out[k[len("korch_user_model_"):]] = float(line.split()[-1])
    return out


def _pct(xs, q):
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(q * len(xs)))], 2) if xs else None


def fair(args, users):
    heavy, light = list(users.values())[:2]
    fail, lock, stop = [], threading.Lock(), threading.Event()
    lat = {heavy.name: [], light.name: []}
    bad = {heavy.name: [], light.name: []}
    started = threading.Barrier(args.sessions + 1)

    def turn(u, tag, sid):
        t0 = time.monotonic()
        text, done = _done(Sse(X(u), sid, "TAG=" + tag).all())
        dt = time.monotonic() - t0
        with lock:
            if (done or {}).get("status") != "ok" or not text or not text.startswith("ANSWER %s " % tag) or \
                    text.split()[-1] != str(sum(range(len(tag) + 10))):
                bad[u.name].append("%s: %s %r" % (tag, (done or {}).get("status"), (done or {}).get("error") or text))
            else:
                lat[u.name].append(dt)

    def session(u):
        st, m = u.req("POST", "api/agent/sessions", {}, timeout=300)
        if st != 201:
            raise RuntimeError("%s: session %s %r" % (u.name, st, m))
        return m["id"]

    def hv(k):
        sid = None
        try:
            sid = session(heavy)
        except Exception as e:  # noqa: BLE001
            with lock:
                fail.append(repr(e))
        started.wait()
        t = 0
        while sid and not stop.is_set():
            t += 1
            turn(heavy, "%s_s%d_t%d" % (heavy.name, k, t), sid)
        if sid:
            heavy.req("DELETE", "api/agent/sessions/" + sid, timeout=120)

    threads = [threading.Thread(target=hv, args=(k,)) for k in range(args.sessions)]
    for t in threads:
        t.start()
    sid = session(light)
    started.wait()
    time.sleep(2.0)     # the heavy user's calls fill the key's budget first
    t0 = time.monotonic()
    for t in range(1, args.turns + 1):
        turn(light, "%s_s0_t%d" % (light.name, t), sid)
    light_s = time.monotonic() - t0
    stop.set()
    for t in threads:
        t.join()
    light.req("DELETE", "api/agent/sessions/" + sid, timeout=120)
    for name in bad:
        fail += bad[name][:10]
    if len(lat[light.name]) < args.turns:
        fail.append("only %d of %s's %d turns held" % (len(lat[light.name]), light.name, args.turns))
    details = {u.name: {"turns": len(lat[u.name]), "failed": len(bad[u.name]), "p50_s": _pct(lat[u.name], 0.5),
                        "max_s": _pct(lat[u.name], 1.0), "gate": _gate_metrics(u)} for u in (heavy, light)}
    details["light_seconds"] = round(light_s, 1)
    return fail, details


def main():
    return run_main({"flat": flat, "turn": turn, "fair": fair},
                    (("--pid", int, 0), ("--sessions", int, 2), ("--warm", int, 30), ("--turns", int, 80)))

if __name__ == "__main__":
    sys.exit(main())
