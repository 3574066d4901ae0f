#!/usr/bin/python3
"""A team's korch serve (--users FILE) judged by real clients (issue 26):
REST (urllib), the channels websocket (python3-websocket, ws_client.Conn)
and the agent API (turns as server-sent events, agent_api_client.Sse), each
with a user's own token.

    team_check.py --url http://127.0.0.1:PORT/ --tokens alice=T,bob=T,carol=T,root=T two-users
    team_check.py --url ... --tokens u0=T,u1=T,... soak --sessions 3 --seconds 300

two-users: what one user makes, another cannot see, touch or join (404, not
403), an admin sees all; quotas answered 429 with used and limit; /metrics
per user. Expects bob's quota kernels=2 sessions=1, carol's tokens_per_day=1
and the LLM scenario "owner" (team_scenarios.py).

soak: every user runs --sessions agent sessions, each running turns back to
back for --seconds; every answer must carry its own turn's tag (never
another's), nothing lost; prints figures (turns, latency percentiles) and
the server's RSS over time when --pid is given.

Prints one JSON line {"scenario", "ok", "failures", "details"}; exit 0 when it held.
"""
import argparse
import json
import os
import sys
import threading
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ws_client  # noqa: E402
from agent_api_client import Sse  # noqa: E402
import websocket  # noqa: E402


class User:
    def __init__(self, base, name, token):
        self.name, self.token, self.base = name, token, base
        self.http = ws_client.Http(base, token)

    def req(self, *a, **kw):
        return self.http.req(*a, **kw)


class X:
    """What Sse needs: base and token."""

    def __init__(self, u):
        self.base, self.token = u.base, u.token


def _text(u, path):
    """GET path as text (ws_client's req cuts what is not JSON)."""
    r = urllib.request.Request(u.base + path, headers={"Authorization": "token " + u.token})
    try:
        with urllib.request.urlopen(r, timeout=30) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def _ids(listing):
    return {m["id"] for m in listing} if isinstance(listing, list) else set()


def _done(events):
    finals = [d for n, d in events if n == "final"]
    dones = [d for n, d in events if n == "done"]
    return (finals[0]["text"] if finals else None), (dones[0] if dones else None)


def two_users(args, users):
    fail = []
    details = {}

    def check(ok, what):
        if not ok:
            fail.append(what)
        return ok

    a, b, c, root = users["alice"], users["bob"], users["carol"], users["root"]
    st, me = a.req("GET", "api/me")
    check(st == 200 and me.get("name") == "alice" and me.get("role") == "user", "alice /api/me: %s %r" % (st, me))
    st, me = root.req("GET", "api/me")
    check(st == 200 and me.get("role") == "admin", "root /api/me: %s %r" % (st, me))
    # -- kernels: alice's is not there for bob
    ka = a.http.start_kernel("python3")["id"]
    check(ka in _ids(a.req("GET", "api/kernels")[1]), "alice does not list her kernel")
    check(ka not in _ids(b.req("GET", "api/kernels")[1]), "bob lists alice's kernel")
    check(ka in _ids(root.req("GET", "api/kernels")[1]), "the admin does not list alice's kernel")
    for method, path in (("GET", ""), ("POST", "/interrupt"), ("POST", "/restart"), ("POST", "/untrusted"),
                         ("DELETE", "/untrusted"), ("DELETE", "")):
        st, body = b.req(method, "api/kernels/" + ka + path)
        check(st == 404, "bob %s /api/kernels/{alice's}%s -> %s (want 404)" % (method, path, st))
    st, stat = b.req("GET", "api/status")
    check(st == 200 and stat.get("kernels") == 0, "bob's /api/status counts others' kernels: %r" % stat)
    # -- the websocket: alice joins hers, bob cannot (404)
    conn = ws_client.Conn(a.base, a.token, ka, "v1")
    conn.kernel_info()
    r = conn.execute("secret_a = 41\nprint(secret_a + 1)")
    check("42" in r.stdout(), "alice's execution: %r" % r.stdout())
    conn.close()
    for mode in ("header", "query"):
        try:
            ws_client.Conn(b.base, b.token, ka, "v1", token_mode=mode).close()
            check(False, "bob joined alice's kernel over the websocket (%s token)" % mode)
        except websocket.WebSocketBadStatusException as e:
            check(getattr(e, "status_code", None) == 404, "bob's websocket to alice's kernel: %s (want 404)" % e)
    # -- Jupyter sessions: one path, two users, two sessions
    st, sa_ = a.req("POST", "api/sessions", {"path": "team.ipynb", "type": "notebook", "kernel": {"id": ka}})
    check(st == 201, "alice POST /api/sessions -> %s %r" % (st, sa_))
    st, sb_ = b.req("POST", "api/sessions", {"path": "team.ipynb", "type": "notebook",
                                             "kernel": {"name": "python3"}})
    check(st == 201 and sb_["id"] != sa_["id"] and sb_["kernel"]["id"] != ka,
          "bob got alice's session for the same path: %s %r" % (st, sb_))
    st, _ = b.req("POST", "api/sessions", {"path": "x.ipynb", "type": "notebook", "kernel": {"id": ka}})
    check(st == 404, "bob made a session on alice's kernel: %s" % st)
    check(_ids(b.req("GET", "api/sessions")[1]) == {sb_["id"]}, "bob's sessions listing")
    check(b.req("GET", "api/sessions/" + sa_["id"])[0] == 404, "bob GET alice's session")
    check(b.req("DELETE", "api/sessions/" + sa_["id"])[0] == 404, "bob DELETE alice's session")
    # -- quotas: bob has kernels=2 (his session's is one)
    kb2 = b.http.start_kernel("python3")["id"]
    st, q = b.req("POST", "api/kernels", {"name": "python3"})
    check(st == 429 and q.get("quota") == "kernels" and q.get("used") == 2 and q.get("limit") == 2
          and "kernels" in q.get("message", ""), "bob's third kernel: %s %r" % (st, q))
    details["429_kernels"] = q
    # -- the agent API: alice's session, bob gets 404 on every route
    st, ag = a.req("POST", "api/agent/sessions", {})
    check(st == 201, "alice's agent session: %s %r" % (st, ag))
    sid = ag["id"]
    check(ag.get("owner") == "alice", "the session's owner: %r" % ag.get("owner"))
    ev = Sse(X(a), sid, "please compute TAG=alice_1").all()
    text, done = _done(ev)
    check(text and text.startswith("ANSWER alice_1 ") and text.split()[-1] == str(sum(range(17))),
          "alice's answer: %r" % text)
    st, up = a.req("PUT", "api/agent/sessions/%s/files/data/a.csv" % sid, raw=b"x,y\n1,2\n",
                   headers={"Content-Type": "application/octet-stream"})
    check(st == 201, "alice's upload: %s %r" % (st, up))
    st, got = a.req("GET", "api/agent/sessions/%s/files/data/a.csv" % sid)
    check(st == 200, "alice's download: %s" % st)
    check(sid not in _ids(b.req("GET", "api/agent/sessions")[1]), "bob lists alice's agent session")
    check(sid in _ids(root.req("GET", "api/agent/sessions")[1]), "the admin does not list alice's agent session")
    for method, path, body in (("GET", "", None), ("GET", "/notebook", None), ("GET", "/events", None),
                               ("GET", "/files", None), ("GET", "/files/data/a.csv", None),
                               ("DELETE", "/files/data/a.csv", None), ("POST", "/interrupt", None),
                               ("POST", "/messages", {"content": "TAG=bob_x"}), ("DELETE", "", None)):
        st, _ = b.req(method, "api/agent/sessions/" + sid + path, body)
        check(st == 404, "bob %s /api/agent/sessions/{alice's}%s -> %s (want 404)" % (method, path, st))
    st, _ = b.req("PUT", "api/agent/sessions/%s/files/evil.txt" % sid, raw=b"evil",
                  headers={"Content-Type": "application/octet-stream"})
    check(st == 404, "bob's upload into alice's session -> %s (want 404)" % st)
    # the admin asks in alice's session: its executions are the admin's in the audit log
    text, done = _done(Sse(X(root), sid, "TAG=root_in_alice").all())
    check(text and text.startswith("ANSWER root_in_alice "), "the admin's turn in alice's session: %r" % text)
    agk = ag.get("kernel_id")
    check(agk not in _ids(b.req("GET", "api/kernels")[1]), "bob lists alice's agent kernel")
    try:
        ws_client.Conn(b.base, b.token, agk, "v1").close()
        check(False, "bob joined alice's agent kernel")
    except websocket.WebSocketBadStatusException as e:
        check(getattr(e, "status_code", None) == 404, "bob's websocket to alice's agent kernel: %s" % e)
    st, _ = b.req("POST", "api/agent/sessions", {"kernel_id": ka})
    check(st == 404, "bob's agent session on alice's kernel -> %s (want 404)" % st)
    # bob's sessions quota (1): on his own kernel, then one more
    st, bs = b.req("POST", "api/agent/sessions", {"kernel_id": kb2})
    check(st == 201, "bob's agent session on his kernel: %s %r" % (st, bs))
    st, q = b.req("POST", "api/agent/sessions", {"kernel_id": kb2})
    check(st == 429 and q.get("quota") == "sessions" and q.get("used") == 1 and q.get("limit") == 1,
          "bob's second agent session: %s %r" % (st, q))
    # carol: tokens_per_day=1, spent by her first turn
    st, cs = c.req("POST", "api/agent/sessions", {})
    check(st == 201, "carol's agent session: %s" % st)
    text, done = _done(Sse(X(c), cs["id"], "TAG=carol_1").all())
    check(text and text.startswith("ANSWER carol_1"), "carol's first turn: %r" % text)
    s2 = Sse(X(c), cs["id"], "TAG=carol_2")
    body = s2.resp.read()
    s2.close()
    q = json.loads(body or b"{}")
    check(s2.status == 429 and q.get("quota") == "tokens_per_day" and q.get("used", 0) > 1 and q.get("limit") == 1,
          "carol's second turn: %s %r" % (s2.status, q))
    details["429_tokens"] = q
    st, me = c.req("GET", "api/me")
    check(st == 200 and me["used"]["tokens_today"] > 1 and me["quota"].get("tokens_per_day") == 1,
          "carol's /api/me: %r" % me)
    # -- /metrics per user
    st, mt = _text(a, "metrics")
    check(st == 200 and 'korch_user_kernels{user="alice"} 2' in mt and 'user="bob"' not in mt
          and "korch_kernels{" not in mt, "alice's /metrics: %r" % (mt[:600] if isinstance(mt, str) else mt))
    st, mt = _text(root, "metrics")
    check(st == 200 and 'korch_user_kernels{user="alice"} 2' in mt and 'korch_user_kernels{user="bob"} 2' in mt
          and "korch_kernels{" in mt, "the admin's /metrics: %r" % [ln for ln in str(mt).split("\n") if "user" in ln])
    # -- the admin may act on anyone's; each cleans up
    check(root.req("DELETE", "api/agent/sessions/" + bs["id"])[0] == 204, "the admin deletes bob's session")
    for u, sids in ((a, [sid]), (c, [cs["id"]])):
        for s in sids:
            check(u.req("DELETE", "api/agent/sessions/" + s)[0] == 204, "%s deletes her session" % u.name)
    check(b.req("DELETE", "api/sessions/" + sb_["id"])[0] == 204, "bob deletes his session")
    check(a.req("DELETE", "api/sessions/" + sa_["id"])[0] == 204, "alice deletes her session")
    for k in (kb2,):
        b.http.delete_kernel(k)
    left = root.req("GET", "api/kernels")[1]
    check(left == [], "kernels left: %r" % left)
    details.update({"alice_kernel": ka, "alice_session": sid, "alice_agent_kernel": agk})
    return fail, details


def soak(args, users):
    """Every user's sessions run turns back to back for args.seconds, from
    when all are up (created a few at a time: 60 kernels starting at once
    on a busy machine miss their 60 s)."""
    fail, lock = [], threading.Lock()
    lat, turns, wrong = [], [0], []
    n = len(users) * args.sessions
    up = threading.Barrier(n + 1)
    creating = threading.Semaphore(4)
    stop = [0.0]

    def one(u, k):
        m = None
        try:
            with creating:
                st, m = u.req("POST", "api/agent/sessions", {}, timeout=300)
            if st != 201:
                with lock:
                    fail.append("%s session %d: %s %r" % (u.name, k, st, m))
                m = None
        except Exception as e:  # noqa: BLE001
            with lock:
                fail.append("%s session %d: %r" % (u.name, k, e))
        up.wait()
        if not m:
            return
        try:
            t = 0
            while time.monotonic() < stop[0]:
                t += 1
                tag = "%s_s%d_t%d" % (u.name, k, t)
                t0 = time.monotonic()
                text, done = _done(Sse(X(u), m["id"], "TAG=" + tag).all())
                dt = time.monotonic() - t0
                with lock:
                    turns[0] += 1
                    lat.append(dt)
                    if not text or not text.startswith("ANSWER %s " % tag) or \
                            text.split()[-1] != str(sum(range(len(tag) + 10))):
                        wrong.append("%s: %r" % (tag, text))
            u.req("DELETE", "api/agent/sessions/" + m["id"], timeout=120)
        except Exception as e:  # noqa: BLE001
            with lock:
                fail.append("%s session %d: %r" % (u.name, k, e))

    rss = []

    def watch():
        while time.monotonic() < stop[0] + 5:
            try:
                with open("/proc/%d/status" % args.pid) as f:
                    for line in f:
                        if line.startswith("VmRSS:"):
                            rss.append((round(time.monotonic() - t_start), int(line.split()[1]) // 1024))
            except OSError:
                return
            time.sleep(10)

    t_start = time.monotonic()
    stop[0] = t_start + 1e9
    threads = [threading.Thread(target=one, args=(u, k)) for u in users.values() for k in range(args.sessions)]
    if args.pid:
        threading.Thread(target=watch, daemon=True).start()
    for t in threads:
        t.start()
    up.wait()
    t_up = time.monotonic()
    stop[0] = t_up + args.seconds
    for t in threads:
        t.join()
    lat.sort()
    pct = (lambda p: round(lat[min(len(lat) - 1, int(p * len(lat)))], 2)) if lat else (lambda p: None)
    fail += wrong[:20]
    details = {"users": len(users), "sessions": len(threads), "turns": turns[0], "wrong_answers": len(wrong),
               "seconds_to_start": round(t_up - t_start), "seconds": round(time.monotonic() - t_up),
               "turn_p50_s": pct(0.5), "turn_p95_s": pct(0.95),
               "turn_max_s": lat[-1] if lat else None, "rss_mb": rss}
    return fail, details


def run_main(scenarios, options):
    """The command line team_check.py and team_soak.py share: --url,
    --tokens name=token,..., options ((flag, type, default), ...) and a
    scenario name of scenarios ({name: fn(args, users) -> (failures,
    details)}); prints the one JSON line, returns the exit status."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--tokens", required=True, help="name=token,...")
    for flag, kind, default in options:
        ap.add_argument(flag, type=kind, default=default)
    ap.add_argument("scenario", choices=list(scenarios))
    args = ap.parse_args()
    users = {}
    for kv in args.tokens.split(","):
        name, tok = kv.split("=", 1)
        users[name] = User(args.url, name, tok)
    t0 = time.monotonic()
    try:
        fail, details = scenarios[args.scenario](args, users)
    except Exception as e:  # noqa: BLE001
        import traceback
        fail, details = ["raised %r: %s" % (e, traceback.format_exc()[-1500:])], {}
    print(json.dumps({"scenario": args.scenario, "ok": not fail, "failures": fail, "details": details,
                      "seconds": round(time.monotonic() - t0, 1)}))
    return 0 if not fail else 1


def main():
    return run_main({"two-users": two_users, "soak": soak},
                    (("--sessions", int, 3), ("--seconds", int, 300), ("--pid", int, 0)))

if __name__ == "__main__":
    sys.exit(main())
