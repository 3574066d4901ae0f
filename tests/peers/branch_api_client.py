#!/usr/bin/python3
"""Branching an agent session from a step through korch serve's API (issue 23
item 3; tests/test_branch_serve.c), as two users of a team's server.

    branch_api_client.py --url 'http://127.0.0.1:PORT/' --agent-dir DIR --tokens alice=T,bob=T

alice's session runs the parent's three steps (a, an unseeded random r, b:
tests/peers/branch_scenarios.py); she branches it from step 2 with another
model (anthropic) and a question; the branch's stream begins with a `branch`
event naming the new session, its state says the re-run differed at step 2
and the snapshot was restored, and its answer (the model asked the kernel)
has a and the parent's very r but not b. The parent's dir is the same byte for
byte afterwards. Bad inputs get 400 naming the range, bob gets 404 for
alice's session and cannot see her branch. Every event and transcript record
is checked against docs/events.schema.json. One JSON line on stdout.
"""
import argparse
import hashlib
import http.client
import json
import os
import re
import sys
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import events_schema  # noqa: E402
import sse  # noqa: E402
import ws_client  # noqa: E402

FAIL = []
DETAILS = {}
SCHEMA = []


def check(ok, what, detail=None):
    if not ok:
        FAIL.append(what + ("" if detail is None else ": " + json.dumps(detail, default=str)[:600]))
    return ok


def stream(base, token, path, body):
    """POST path with body; (status, [(event, data)] or the error body)."""
    u = urllib.parse.urlsplit(base)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=180)
    conn.request("POST", path, body=json.dumps(body).encode(),
                 headers={"Authorization": "token " + token, "Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        text = resp.read().decode()
        conn.close()
        try:
            return resp.status, json.loads(text)
        except ValueError:
            return resp.status, text
    events = []
    while True:
        got = sse.read_event(resp)
        if got is None:
            break
        ev = got[:2]
        bad = events_schema.check_event(*ev)
        if bad:
            SCHEMA.append(bad)
        events.append(ev)
        if ev[0] == "done":
            break
    conn.close()
    if events and events[-1][0] != "done":
        SCHEMA.append("a stream ended with %r, not done" % events[-1][0])
    return 200, events


def tree(d):
    """Every file below d: its path, size and SHA-256 (the parent untouched, byte for byte)."""
    out = {}
    for root, dirs, files in os.walk(d):
        dirs.sort()
        for f in sorted(files):
            p = os.path.join(root, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, d)] = hashlib.sha256(fh.read()).hexdigest()
    return out


def of(events, name):
    return [d for n, d in events if n == name]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--agent-dir", required=True)
    ap.add_argument("--tokens", required=True)
    args = ap.parse_args()
    base = args.url.strip().split("?")[0].rstrip("/") + "/"
    toks = dict(kv.split("=", 1) for kv in args.tokens.split(","))
    alice, bob = ws_client.Http(base, toks["alice"]), ws_client.Http(base, toks["bob"])
    made = []
    try:
        st, m = alice.req("POST", "api/agent/sessions", {})
        if not check(st == 201, "alice's session", [st, m]):
            return
        pid = m["id"]
        made.append(pid)
        t0 = time.monotonic()
        st, ev = stream(base, toks["alice"], "/api/agent/sessions/%s/messages" % pid, {"content": "Build it"})
        parent_s = time.monotonic() - t0
        final = of(ev, "final")
        check(st == 200 and final and final[0]["text"].startswith("model=gpt-4o-mini A=42"), "the parent's turn", final)
        r_parent = re.search(r"R=(\d+)", final[0]["text"]).group(1) if final else None
        DETAILS["parent_turn_s"] = round(of(ev, "done")[0]["elapsed_ms"] / 1000.0, 3) if of(ev, "done") else None
        DETAILS["parent_request_s"] = round(parent_s, 3)
        pdir = os.path.join(args.agent_dir, pid)
        before = tree(pdir)
        st, pm = alice.req("GET", "api/agent/sessions/" + pid)
        before_records = pm.get("transcript") if isinstance(pm, dict) else None

        # the branch: step 2, another model, alice's question
        t0 = time.monotonic()
        st, ev = stream(base, toks["alice"], "/api/agent/sessions/%s/branch" % pid,
                        {"step": 2, "content": "BRANCHQ which names are there?", "llm": "anthropic:claude-sonnet-4-5"})
        branch_s = time.monotonic() - t0
        DETAILS["branch_request_s"] = round(branch_s, 3)
        if not check(st == 200 and ev and ev[0][0] == "branch", "the branch's stream begins with a branch event",
                     [st, ev[:2] if isinstance(ev, list) else ev]):
            return
        bid = ev[0][1]["session"]
        made.append(bid)
        check(ev[0][1]["parent"]["session"] == pid and ev[0][1]["parent"]["step"] == 2 and
              ev[0][1]["llm"] == "anthropic:claude-sonnet-4-5", "the first event names parent, step and model", ev[0])
        states = [d for d in of(ev, "branch") if "state" in d]
        state = states[0]["state"] if states else {}
        DETAILS["state"] = {k: state.get(k) for k in ("status", "rerun", "same", "restored", "seconds")}
        check(state.get("status") == "differed" and state.get("restored") is True and state.get("rerun") == 2 and
              state.get("differences") and state["differences"][0].get("step") == 2,
              "the rebuild says step 2's random number differed and the snapshot was restored", state)
        final = of(ev, "final")
        want = "model=claude-sonnet-4-5 have=a,r r=%s" % r_parent
        check(final and final[0]["text"] == want, "the branch has a and the parent's r, not b (asked of its kernel)",
              [final, want])
        done = of(ev, "done")
        check(done and done[0]["status"] == "ok", "the branch's turn ends ok", done)
        # alice's branch: in her list, not in bob's; its transcript names its parent and model
        st, lst = alice.req("GET", "api/agent/sessions")
        check(bid in {s["id"] for s in lst}, "the branch is in alice's list")
        st, lst = bob.req("GET", "api/agent/sessions")
        check(bid not in {s["id"] for s in lst} and pid not in {s["id"] for s in lst}, "bob lists neither")
        st, _ = bob.req("GET", "api/agent/sessions/" + bid)
        check(st == 404, "bob gets 404 for alice's branch", st)
        st, bm = alice.req("GET", "api/agent/sessions/" + bid)
        recs = bm.get("transcript", []) if isinstance(bm, dict) else []
        for r in recs:
            bad = events_schema.check_record(r)
            if bad:
                SCHEMA.append("transcript record " + bad)
        check(recs and recs[0].get("llm") == "anthropic:claude-sonnet-4-5", "the branch's transcript names its model",
              recs[:1])
        brecs = [r for r in recs if r.get("type") == "branch"]
        check(len(brecs) == 2 and all(r["parent"]["session"] == pid and r["parent"]["step"] == 2 for r in brecs),
              "its transcript records its parent and step", brecs)
        check(bm.get("llm") == "anthropic:claude-sonnet-4-5", "the branch's model", bm.get("llm"))

        # bad inputs
        P = "/api/agent/sessions/%s/branch" % pid
        for body, status, says in (
                ({"step": 0, "content": "q"}, 400, "'step' must be a whole number from 1"),
                ({"step": 9, "content": "q"}, 400, "step 9 is out of range: the session has 3 steps that ran code (1 to 3)"),
                ({"step": "2", "content": "q"}, 400, "'step' must be a whole number"),
                ({"step": 1, "turn": 2, "content": "q"}, 400, "turn 2 has no step 1 that ran code"),
                ({"step": 1}, 400, "needs a non-empty string 'content'"),
                ({"step": 1, "content": "q", "llm": "replay:/etc/passwd"}, 400, "cannot be chosen by a client")):
            st, e = stream(base, toks["alice"], P, body)
            check(st == status and says in json.dumps(e), "%r -> %d %s" % (body, status, says), [st, e])
        st, e = stream(base, toks["bob"], P, {"step": 1, "content": "q"})
        check(st == 404 and "no agent session" in json.dumps(e), "bob branching alice's session: 404", [st, e])
        st, v = bob.req("POST", "api/agent/sessions/%s/verify" % pid)  # verify is hers alone too (agents_verify.c)
        check(st == 404 and "no agent session" in json.dumps(v), "bob verifying alice's session: 404", [st, v])
        st, e = stream(base, toks["alice"], "/api/agent/sessions/00000000-0000-0000-0000-000000000000/branch",
                       {"step": 1, "content": "q"})
        check(st == 404, "a session that is not there: 404", [st, e])
        st, lst = alice.req("GET", "api/agent/sessions")
        check(len(lst) == 2, "no session was made by a refused branch", [s["id"] for s in lst])

        # the parent untouched
        after = tree(pdir)
        check(after == before, "the parent's dir is the same byte for byte",
              {k: (before.get(k), after.get(k)) for k in set(before) | set(after) if before.get(k) != after.get(k)})
        st, pm = alice.req("GET", "api/agent/sessions/" + pid)
        check(pm.get("transcript") == before_records, "the parent's transcript over the API is the same")
    finally:
        for sid in made:
            alice.req("DELETE", "api/agent/sessions/" + sid)
    st, ks = alice.req("GET", "api/kernels")
    check(st == 200 and ks == [], "no kernel left after the sessions went", [st, ks])
    check(not SCHEMA, "every event and record matches docs/events.schema.json", SCHEMA[:5])


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # noqa: BLE001
        FAIL.append("%s: %s" % (type(e).__name__, e))
    print(json.dumps({"scenario": "branch_api", "ok": not FAIL, "failures": FAIL, "details": DETAILS}))
    sys.exit(1 if FAIL else 0)
