"""Scenarios of agent_api_client.py for issue 23 in korch serve: POST
/api/agent/sessions/{id}/verify (the clean notebook re-run in a fresh
kernel, its events in the one schema - agent_api_client's reader checks
each -, the result in the notebook's metadata and the transcript, the fresh
kernel gone after) and the ledger (each step's CPU seconds and peak memory
from the kernel's cgroup in the result events, the transcript and the
notebook; unknown where the launcher cannot say).

scenarios(Sse, _of) gives them, on agent_api_client's stream reader."""
import http.client
import os
import time
import urllib.parse

SALES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                     "scripts", "demo", "sales.csv")


def scenarios(Sse, _of):
    class Verify(Sse):
        """POST .../verify read as a turn's stream is (every event checked)."""

        def __init__(self, x, sid):  # noqa: D107 (the reader's fields, another request)
            u = urllib.parse.urlsplit(x.base)
            self.conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
            self.conn.request("POST", "/api/agent/sessions/%s/verify" % sid, body=b"",
                              headers={"Authorization": "token " + x.token})
            self.resp = self.conn.getresponse()
            self.status = self.resp.status
            self.events = []
            self.ids = []

    def _kernels_settle(x, keep, timeout=20):
        """The kernels listed, once only `keep` are (the verification's is shut down after)."""
        deadline = time.monotonic() + timeout
        ids = None
        while time.monotonic() < deadline:
            st, ks = x.http.req("GET", "api/kernels")
            ids = sorted(k["id"] for k in ks) if st == 200 else None
            if ids == sorted(keep):
                return ids
            time.sleep(0.2)
        return ids

    def _turn(x, m, question):
        t0 = time.monotonic()
        events = Sse(x, m["id"], question).all()
        secs = time.monotonic() - t0
        x.check(_of(events, "final"), "the turn has no answer: %r" % [n for n, _ in events])
        return events, secs

    def _verify(x, sid):
        t0 = time.monotonic()
        v = Verify(x, sid)
        x.check(v.status == 200, "POST .../verify -> %s %r" % (v.status, v.resp.read()[:300] if v.status != 200 else ""))
        if v.status != 200:
            return None, []
        first = v.next()
        x.check(first and first[0] == "notice" and "fresh python3 kernel" in first[1].get("text", ""),
                "the verification's first event: %r" % (first,))
        # while it runs the session is busy: another verification and a message wait
        st, b = x.http.req("POST", "api/agent/sessions/%s/verify" % sid)
        x.check(st == 409 and "running" in b.get("message", ""), "a second verify meanwhile -> %s %r" % (st, b))
        st, b = x.http.req("POST", "api/agent/sessions/%s/messages" % sid, {"content": "again"})
        x.check(st == 409, "a message during the verification -> %s %r" % (st, b))
        events = v.all()
        x.details["verify_wall_s"] = round(time.monotonic() - t0, 2)
        vs = _of(events, "verify")
        done = _of(events, "done")
        x.check(len(vs) == 1, "verify events: %r" % [n for n, _ in events])
        x.check(done and done[-1]["status"] == "ok" and done[-1]["steps"] == 0
                and done[-1]["tokens"]["turn"] == {"input": 0, "output": 0, "calls": 0},
                "the verification's done: %r" % done)
        return (vs[0]["verify"] if vs else None), events

    def _recorded(x, sid, res):
        """The result as korch run --verify records it: the notebook's metadata, a transcript record."""
        st, nb = x.http.req("GET", "api/agent/sessions/%s/notebook" % sid)
        md = nb.get("metadata", {}).get("korch", {}) if st == 200 else {}
        x.check(md.get("verify") == res, "metadata.korch.verify: %r" % md.get("verify"))
        st, full = x.http.req("GET", "api/agent/sessions/" + sid)
        recs = [r for r in full.get("transcript", []) if r.get("type") == "verify"]
        x.check(recs and recs[-1].get("verify") == res, "the transcript's verify record: %r" % recs[-1:])
        x.check(full.get("state") == "idle", "the session after its verification: %r" % full.get("state"))

    def sc_verify(x):
        """A clean session (its dead end left out) reproduces in a fresh kernel."""
        st, b = x.http.req("POST", "api/agent/sessions/00000000-0000-4000-8000-000000000000/verify")
        x.check(st == 404, "verify of no session -> %s %r" % (st, b))
        m = x.session()
        st, b = x.http.req("POST", "api/agent/sessions/%s/verify" % m["id"])
        x.check(st == 409 and "nothing to verify yet" in b.get("message", ""), "verify before an answer -> %s %r" % (st, b))
        own = m["kernel_id"]
        _, turn_s = _turn(x, m, "What is the total?")
        res, _ = _verify(x, m["id"])
        x.details["turn_wall_s"] = round(turn_s, 2)
        if not res:
            return
        x.details["verify"] = {k: res.get(k) for k in ("status", "cells", "compared", "seconds", "turn_seconds")}
        x.check(res["status"] == "reproduced" and res["cells"] == 2 and res["compared"] == 5 and res["differences"] == []
                and res["kernel"] == "python3", "the result: %r" % res)
        x.check(res["seconds"] > 0 and res["turn_seconds"] > 0, "its seconds: %r" % res)
        _recorded(x, m["id"], res)
        left = _kernels_settle(x, [own])
        x.check(left == [own], "kernels after the verification: %r (the session's is %s)" % (left, own))
        # the session goes on as before
        events = Sse(x, m["id"], "What is the total?").all()
        x.check(_of(events, "final"), "a turn after the verification: %r" % [n for n, _ in events][-4:])

    def sc_verify_drift(x):
        """An answer quoting an unseeded random number: the fresh kernel prints
        another, and verify says which number differed and what it printed now."""
        m = x.session()
        events, _ = _turn(x, m, "Draw a number")
        drawn = _of(events, "final")[0]["text"].split()[-1].rstrip(".") if _of(events, "final") else ""
        res, _ = _verify(x, m["id"])
        if not res:
            return
        d = res.get("differences") or [{}]
        x.details["verify"] = res
        x.check(res["status"] == "differed" and res["compared"] == 1 and len(res["differences"]) == 1,
                "the result: %r" % res)
        x.check(d[0].get("printed") == drawn and d[0].get("now", "").startswith("R ") and drawn not in d[0].get("now", ""),
                "the difference: %r (the answer quoted %s)" % (d, drawn))
        _recorded(x, m["id"], res)
        left = _kernels_settle(x, [m["kernel_id"]])
        x.check(left == [m["kernel_id"]], "kernels after the verification: %r" % left)

    def sc_verify_inputs(x):
        """The CSV analysis (its code reads the upload sales.csv): the fresh
        kernel gets the session's uploads, so the clean notebook re-runs."""
        csv = open(SALES).read()
        m = x.session(files=[{"name": "sales.csv", "content": csv}])
        _, turn_s = _turn(x, m, "Which region sells most?")
        res, _ = _verify(x, m["id"])
        x.details["turn_wall_s"] = round(turn_s, 2)
        if not res:
            return
        x.details["verify"] = {k: res.get(k) for k in ("status", "cells", "compared", "message", "seconds", "turn_seconds")}
        x.check(res["status"] == "reproduced" and res["compared"] >= 1, "the result: %r" % res)
        left = _kernels_settle(x, [m["kernel_id"]])
        x.check(left == [m["kernel_id"]], "kernels after the verification: %r" % left)

    def sc_verify_limit(x):
        """korch serve --max-kernels 1: the verification's fresh kernel counts, so it is refused (403)."""
        m = x.session()
        _turn(x, m, "What is the total?")
        st, b = x.http.req("POST", "api/agent/sessions/%s/verify" % m["id"])
        x.check(st == 403 and "kernel limit (1)" in b.get("message", ""), "verify at the kernel limit -> %s %r" % (st, b))
        st, full = x.http.req("GET", "api/agent/sessions/" + m["id"])
        x.check(full.get("state") == "idle" and not [r for r in full.get("transcript", []) if r.get("type") == "verify"],
                "the session after a refused verification: %r" % {k: full.get(k) for k in ("state",)})

    def _ledger(x, known):
        """The `usage` LLM scenario: a step burning 0.6 s of CPU, one touching 200 MiB, a quiet one."""
        m = x.session()
        events = Sse(x, m["id"], "measure it").all()
        use = [d.get("usage", "absent") for d in _of(events, "result")]
        x.details["usage"] = use
        st, full = x.http.req("GET", "api/agent/sessions/" + m["id"])
        recs = [r.get("usage", "absent") for r in full.get("transcript", []) if r.get("type") == "execution"]
        st, nb = x.http.req("GET", "api/agent/sessions/%s/notebook" % m["id"])
        kl = nb.get("metadata", {}).get("korch", {}).get("ledger", {}).get("kernel") if st == 200 else None
        x.details["ledger"] = kl
        x.check(len(use) == 3 and recs == use, "the results' usage %r against the transcript's %r" % (use, recs))
        done = _of(events, "done")
        dk = done[-1].get("kernel") if done else None
        x.details["done_kernel"] = dk
        if len(use) != 3:
            return
        if not known:  # unknown is unknown: null, never zero
            x.check(use == [None, None, None], "a launcher without counters: %r" % use)
            x.check(dk == {"turn": {"cpu_s": None, "mem_peak_bytes": None}, "session": {"cpu_s": None, "mem_peak_bytes": None}},
                    "done.kernel unknown: %r" % dk)
            return
        x.check(isinstance(dk, dict) and (dk["turn"]["cpu_s"] or 0) >= 0.5 and (dk["turn"]["mem_peak_bytes"] or 0) >= 200 << 20
                and dk["session"] == dk["turn"], "done.kernel, the turn's sums: %r" % dk)
        cpu = [u.get("cpu_s") if isinstance(u, dict) else None for u in use]
        peak = [u.get("mem_peak_bytes") if isinstance(u, dict) else None for u in use]
        x.check(all(isinstance(c, (int, float)) for c in cpu) and all(isinstance(p, int) for p in peak),
                "every step measured: %r" % use)
        if not all(isinstance(c, (int, float)) for c in cpu) or not all(isinstance(p, int) for p in peak):
            return
        x.check(0.5 <= cpu[0] < 5 and cpu[2] < 0.4 and cpu[0] > cpu[2], "CPU seconds: %r" % cpu)
        x.check(peak[1] >= 200 << 20, "the 200 MiB step's peak: %r" % peak)
        if use[1].get("peak_of") == "step":  # cgroup v1: each step's own peak
            x.check(peak[2] < peak[1] - (150 << 20), "the quiet step's own peak: %r" % peak)
        x.check(isinstance(kl, dict) and kl.get("cpu_s", 0) >= 0.5 and kl.get("mem_peak_bytes", 0) >= 200 << 20,
                "the notebook's ledger: %r" % kl)

    def sc_ledger(x):
        """The ledger in korch serve, with a launcher whose kernels have a cgroup (docker, sandbox)."""
        _ledger(x, True)

    def sc_ledger_unknown(x):
        """The same with local kernels: no counters, each step's usage null."""
        _ledger(x, False)

    return {"verify": sc_verify, "verify_drift": sc_verify_drift, "verify_limit": sc_verify_limit,
            "verify_inputs": sc_verify_inputs,
            "ledger": sc_ledger, "ledger_unknown": sc_ledger_unknown}

