#!/usr/bin/python3
"""A client of korch serve's agent API (/api/agent/...), the way a JupyterLab
extension uses it: REST with the token, turns read as server-sent events
over HTTP/1.1 chunked transfer, and a notebook attached to the agent's
kernel over the channels websocket (tests/peers/ws_client.py's Conn, v1).

    agent_api_client.py --url 'http://127.0.0.1:PORT/?token=T' --llm-port P SCENARIO...

The LLM behind korch is tests/peers/llm_server.py on port P (scenarios in
agent_scenarios.py); korch serve was started with --llm openai:... and
OPENAI_BASE_URL=http://127.0.0.1:P/s/<scenario>/v1 for the scenario's name,
so one korch serve runs one LLM scenario. Prints one JSON line per scenario
({"scenario", "ok", "failures", "details"}); exit status 0 when all held.
"""
import argparse
import base64
import http.client
import json
import os
import sys
import threading
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ws_client  # noqa: E402
import events_schema  # noqa: E402
import sse  # noqa: E402

SCHEMA_ERRORS = []      # events that did not match docs/events.schema.json (every scenario fails on one)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SALES = os.path.join(ROOT, "scripts", "demo", "sales.csv")


class Sse:
    """One POST .../messages (or, with follow=N, GET .../events?after=N):
    the response read event by event; ids[i] is events[i]'s SSE id."""

    def __init__(self, x, sid, content, detach=False, follow=None):
        u = urllib.parse.urlsplit(x.base)
        self.conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
        headers = {"Authorization": "token " + x.token, "Content-Type": "application/json"}
        if follow is not None:
            self.conn.request("GET", "/api/agent/sessions/%s/events?after=%s" % (sid, follow), headers=headers)
        else:
            body = {"content": content, "detach": True} if detach else {"content": content}
            self.conn.request("POST", "/api/agent/sessions/%s/messages" % sid, body=json.dumps(body).encode(),
                              headers=headers)
        self.resp = self.conn.getresponse()
        self.status = self.resp.status
        self.events = []
        self.ids = []

    def next(self):
        """(event, data) or None at the end of the stream."""
        got = sse.read_event(self.resp)
        if got is None:
            if self.events and self.events[-1][0] != "done":
                SCHEMA_ERRORS.append("a stream ended with %r, not done" % self.events[-1][0])
            return None
        ev, eid = got[:2], got[2]
        bad = events_schema.check_event(*ev)
        if bad:
            SCHEMA_ERRORS.append(bad)
        self.events.append(ev)
        self.ids.append(eid)
        return ev

    def all(self):
        while self.next():
            pass
        return self.events

    def close(self):
        self.resp.close()
        self.conn.close()


class Ctx(ws_client.Ctx):
    def __init__(self, args):
        super().__init__(args)
        self.sessions = []
        self.agent_dir = args.agent_dir

    def session(self, **body):
        st, m = self.http.req("POST", "api/agent/sessions", body)
        if st != 201 or not isinstance(m, dict):
            raise ws_client.Failure("POST /api/agent/sessions -> %s %r" % (st, m))
        self.sessions.append(m["id"])
        return m

    def cleanup(self):
        for sid in self.sessions:
            st, m = self.http.req("GET", "api/agent/sessions/" + sid)  # its transcript, in the one schema
            for rec in (m.get("transcript") or m.get("records") or []) if st == 200 and isinstance(m, dict) else []:
                bad = events_schema.check_record(rec)
                if bad:
                    SCHEMA_ERRORS.append("transcript record " + bad)
            self.http.req("DELETE", "api/agent/sessions/" + sid)
        super().cleanup()


def _of(events, name):
    return [d for n, d in events if n == name]


def _wait_state(x, sid, state, timeout):
    deadline = time.monotonic() + timeout
    m = None
    while time.monotonic() < deadline:
        st, m = x.http.req("GET", "api/agent/sessions/" + sid)
        if st == 200 and m.get("state") == state:
            return m
        time.sleep(0.2)
    raise ws_client.Failure("session never became %s: %r" % (state, m and {k: m.get(k) for k in ("state", "error")}))


# ------------------------------------------------------------------ scenarios

def sc_analysis(x):
    """The CSV analysis over SSE, while a notebook on the same kernel watches."""
    csv = open(SALES).read()
    # with a warm pool, wait until a kernel is ready in it: the session takes that one
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        st, status = x.http.req("GET", "api/status")
        pools = (status or {}).get("pool") or {}
        if not pools or all(p.get("ready", 0) >= 1 for p in pools.values()):
            break
        time.sleep(0.2)
    t0 = time.monotonic()
    m = x.session(files=[{"name": "sales.csv", "content": csv}])
    x.details["create_s"] = round(time.monotonic() - t0, 2)
    x.check(m["state"] == "idle" and m["owns_kernel"] is True and m["files"] == ["sales.csv"],
            "session model: %r" % m)
    kid = m["kernel_id"]
    st, kernels = x.http.req("GET", "api/kernels")
    x.check(any(k["id"] == kid for k in kernels), "the agent's kernel is not in /api/kernels")
    # the notebook: attached before the turn, it must see the agent's executions live
    nb = x.conn(kid)
    nb.kernel_info()
    seen = []
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            try:
                msg = nb.recv(0.5)
            except ws_client.Closed:
                return
            if msg and msg.get("channel") == "iopub":
                seen.append(msg)
    t = threading.Thread(target=watch)
    t.start()
    sse = Sse(x, m["id"], "What is the total revenue?")
    x.check(sse.resp.status == 200, "messages -> %s" % sse.resp.status)
    x.check(sse.resp.getheader("Content-Type", "").startswith("text/event-stream"), "content type")
    events = sse.all()
    sse.close()
    time.sleep(0.5)
    stop.set()
    t.join()
    names = [n for n, _ in events]
    x.details["events"] = {n: names.count(n) for n in set(names)}
    x.check(names and names[0] == "step" and names[-1] == "done", "first/last events: %r" % names[:3])
    x.check(len(_of(events, "done")) == 1 and _of(events, "done")[0]["status"] == "ok"
            and "message" not in _of(events, "done")[0], "done: %r" % _of(events, "done"))
    final = _of(events, "final")
    x.check(final and "Total revenue is 28607.50 from 3695 units" in final[0]["text"],
            "final answer: %r" % final)
    x.check(len(_of(events, "code")) == 4, "4 code events: %r" % names)
    x.check(any(r["status"] == "error" for r in _of(events, "result")), "the KeyError step is a result error")
    outs = [d["output"] for d in _of(events, "output")]
    pngs = [o["data"]["image/png"] for o in outs if "image/png" in o.get("data", {})]
    x.check(len(pngs) == 1 and base64.b64decode(pngs[0])[:4] == b"\x89PNG", "one inline PNG output")
    x.check(any("UNITS=3695" in o.get("text", "") for o in outs), "stdout of step 1 streamed")
    x.check(any(o.get("ename") == "KeyError" for o in outs), "the error output streamed")
    # what the notebook saw: every execution of the agent, with its outputs
    inputs = [mm["content"]["code"] for mm in seen if mm["header"]["msg_type"] == "execute_input"]
    x.details["notebook_saw"] = len(seen)
    x.check(any("read_csv('sales.csv')" in c for c in inputs), "notebook saw the agent's code: %r" % inputs[:3])
    x.check(any(mm["header"]["msg_type"] == "stream" and "UNITS=3695" in mm["content"]["text"] for mm in seen),
            "notebook saw the agent's stdout")
    x.check(any(mm["header"]["msg_type"] == "display_data" and "image/png" in mm["content"]["data"]
                for mm in seen), "notebook saw the chart")
    # the session afterwards: transcript, notebook, files
    st, full = x.http.req("GET", "api/agent/sessions/" + m["id"])
    types = [r.get("type") for r in full.get("transcript", [])]
    x.check(st == 200 and full["turns"] == 1 and full["state"] == "idle", "session after: %r" % full.get("state"))
    x.check("execution" in types and types[-1] == "final", "transcript types: %r" % types)
    st, nbtext = x.http.req("GET", "api/agent/sessions/%s/notebook" % m["id"])
    import nbformat
    book = nbformat.reads(json.dumps(nbtext), as_version=4)
    nbformat.validate(book)
    x.check(sum(1 for c in book.cells if c.cell_type == "code") == 4, "notebook has the 4 code cells")
    with urllib.request.urlopen(urllib.request.Request(
            x.base + "api/agent/sessions/%s/files/sales.csv" % m["id"],
            headers={"Authorization": "token " + x.token})) as r:
        x.check(r.read() == csv.encode(), "GET files/sales.csv is the uploaded file")
    # the chart by URL (result.figures), never a host path
    figs = [f for r in _of(events, "result") for f in r.get("figures", [])]
    x.check(len(figs) == 1 and figs[0]["url"] == "/api/agent/sessions/%s/figures/fig-1.png" % m["id"],
            "result.figures: %r" % figs)
    x.check(not any("saved" in r for r in _of(events, "result")), "no host paths in results")
    if figs:
        st, png = _raw(x, "GET", figs[0]["url"])
        x.check(st == 200 and png[:4] == b"\x89PNG", "GET %s -> %s" % (figs[0]["url"], st))
    st, _ = x.http.req("DELETE", "api/agent/sessions/" + m["id"])
    x.sessions.remove(m["id"])
    x.check(st == 204, "DELETE -> %s" % st)
    st, kernels = x.http.req("GET", "api/kernels")
    x.check(not any(k["id"] == kid for k in kernels), "the session's kernel is shut down with it")


def sc_turns(x):
    """Two turns, one kernel: turn 2 uses what turn 1 made."""
    m = x.session()
    ev1 = Sse(x, m["id"], "remember a number").all()
    ev2 = Sse(x, m["id"], "now use it").all()
    x.check(_of(ev1, "final") and _of(ev1, "final")[0]["text"] == "Stored.", "turn 1: %r" % _of(ev1, "final"))
    x.check(_of(ev2, "final") and "The answer is 43." in _of(ev2, "final")[0]["text"],
            "turn 2: %r" % _of(ev2, "final"))
    st, full = x.http.req("GET", "api/agent/sessions/" + m["id"])
    x.check(full["turns"] == 2, "turns: %r" % full.get("turns"))
    # /metrics, read with prometheus_client's own parser
    from prometheus_client.parser import text_string_to_metric_families
    with urllib.request.urlopen(urllib.request.Request(x.base + "metrics",
                                                       headers={"Authorization": "token " + x.token})) as r:
        text = r.read().decode()
    samples = {(smp.name, tuple(sorted(smp.labels.items()))): smp.value
               for fam in text_string_to_metric_families(text) for smp in fam.samples}
    x.check(samples.get(("korch_agent_turns_total", (("status", "ok"),))) == 2,
            "metrics: agent turns ok = %r" % samples.get(("korch_agent_turns_total", (("status", "ok"),))))
    x.check(samples.get(("korch_agent_sessions", (("state", "idle"),))) == 1, "metrics: one idle agent session")


def _outputs(events):
    """The outputs of each step's execution, rebuilt from the output events
    the way a client does: by index, appending stream chunks."""
    steps = {}
    for d in _of(events, "output"):
        outs = steps.setdefault(d["step"], [])
        while len(outs) <= d["index"]:
            outs.append(None)
        if d["append"]:
            outs[d["index"]]["text"] += d["output"]["text"]
        else:
            outs[d["index"]] = dict(d["output"])
    return steps


def sc_chunks(x):
    """A stream output that arrives in pieces is rebuilt exactly by a client
    that applies "append", and matches what the transcript recorded."""
    m = x.session()
    ev = Sse(x, m["id"], "print in pieces").all()
    outs = _outputs(ev).get(1, [])
    x.details["outputs"] = outs
    x.check(any(d["append"] for d in _of(ev, "output")), "no chunk came as an append")
    x.check(outs and outs[0] == {"output_type": "stream", "name": "stdout",
                                 "text": "CHUNK 0\nCHUNK 1\nCHUNK 2\nCHUNK 3\n"},
            "stdout rebuilt: %r" % outs)
    st, full = x.http.req("GET", "api/agent/sessions/" + m["id"])
    execs = [r for r in full["transcript"] if r.get("type") == "execution"]
    x.check(len(execs) == 1 and execs[0]["outputs"] == outs, "the transcript's outputs %r != the events' %r"
            % (execs and execs[0]["outputs"], outs))


def sc_interrupt(x):
    """POST .../interrupt stops a running step; the session and kernel stay."""
    m = x.session()
    sse = Sse(x, m["id"], "please sleep")
    t0 = None
    while True:
        ev = sse.next()
        if ev is None:
            break
        if ev[0] == "output" and "SLEEPING" in ev[1]["output"].get("text", "") and t0 is None:
            # a second turn while this one runs is refused
            st, body = x.http.req("POST", "api/agent/sessions/%s/messages" % m["id"], {"content": "after"})
            x.check(st == 409 and "running" in body.get("message", ""), "message during a turn -> %s %r" % (st, body))
            t0 = time.monotonic()
            st, _ = x.http.req("POST", "api/agent/sessions/%s/interrupt" % m["id"])
            x.check(st == 204, "interrupt -> %s" % st)
    sse.close()
    done = _of(sse.events, "done")
    x.check(t0 is not None, "never saw SLEEPING")
    if t0 is not None:
        x.details["interrupt_s"] = round(time.monotonic() - t0, 2)
        x.check(time.monotonic() - t0 < 10, "the interrupt took %.1f s" % (time.monotonic() - t0))
    x.check(done and done[0]["status"] == "interrupted", "done: %r" % done)
    x.check(not any("WOKE" in d["output"].get("text", "") for d in _of(sse.events, "output")), "it woke up")
    ev = Sse(x, m["id"], "what about after").all()
    x.check(_of(ev, "final") and "Still alive: AFTER 42." in _of(ev, "final")[0]["text"],
            "after the interrupt: %r" % _of(ev, "final"))


def sc_follow(x):
    """GET .../events follows a running turn: the events so far with their
    ids (?after=N skips some), then the live ones until done; a detached
    POST's client may leave without cancelling the turn."""
    m = x.session()
    sid = m["id"]
    idle = Sse(x, sid, None, follow=0)
    x.check(idle.status == 204, "GET events without a turn -> %s" % idle.status)
    idle.close()
    post = Sse(x, sid, "please sleep", detach=True)
    while True:
        ev = post.next()
        if ev is None or (ev[0] == "output" and "SLEEPING" in ev[1]["output"].get("text", "")):
            break
    x.check(ev is not None, "never saw SLEEPING")
    n = len(post.ids)
    x.check(post.ids == list(range(1, n + 1)), "ids of the POST stream: %r" % post.ids)
    a = Sse(x, sid, None, follow=0)
    replay = [a.next() for _ in range(n)]
    x.check(replay == post.events and a.ids == post.ids, "the replay %r != the stream %r" % (a.ids, post.ids))
    b = Sse(x, sid, None, follow=2)
    first = b.next()
    x.check(b.ids[:1] == [3] and first == post.events[2], "after=2 starts at %r %r" % (b.ids[:1], first))
    bad = Sse(x, sid, None, follow="x")
    x.check(bad.status == 400, "after=x -> %s" % bad.status)
    bad.close()
    post.close()  # detached: the turn goes on
    time.sleep(1.5)
    st, mm = x.http.req("GET", "api/agent/sessions/" + sid)
    x.check(mm.get("state") == "running", "after the detached client left the session is %r" % mm.get("state"))
    st, _ = x.http.req("POST", "api/agent/sessions/%s/interrupt" % sid)
    x.check(st == 204, "interrupt -> %s" % st)
    a.all()
    b.all()
    for name, f in (("a", a), ("b", b)):
        done = _of(f.events, "done")
        x.check(done and done[0]["status"] == "interrupted" and f.events[-1][0] == "done",
                "follower %s ended with %r" % (name, f.events[-1:]))
    x.check(a.ids[-1] == b.ids[-1] and a.ids == list(range(1, len(a.ids) + 1)), "ids %r / %r" % (a.ids, b.ids))
    x.details["events"] = len(a.ids)
    a.close()
    b.close()
    after = Sse(x, sid, None, follow=0)
    x.check(after.status == 204, "GET events after the turn -> %s" % after.status)
    after.close()
    ev = Sse(x, sid, "what about after").all()
    x.check(_of(ev, "final") and "Still alive: AFTER 42." in _of(ev, "final")[0]["text"],
            "after the interrupt: %r" % _of(ev, "final"))


def sc_close_cancels(x):
    """Closing the event stream cancels the running step; the session stays."""
    m = x.session()
    sse = Sse(x, m["id"], "please sleep")
    while True:
        ev = sse.next()
        if ev is None or (ev[0] == "output" and "SLEEPING" in ev[1]["output"].get("text", "")):
            break
    x.check(ev is not None, "never saw SLEEPING")
    t0 = time.monotonic()
    sse.close()
    _wait_state(x, m["id"], "idle", 15)
    x.details["cancel_s"] = round(time.monotonic() - t0, 2)
    st, full = x.http.req("GET", "api/agent/sessions/" + m["id"])
    texts = [r.get("content", "") for r in full["transcript"] if r.get("type") == "notice"]
    x.check(any("interrupted" in t for t in texts), "transcript notes the interruption: %r" % texts)
    ev = Sse(x, m["id"], "what about after").all()
    x.check(_of(ev, "final") and "Still alive: AFTER 42." in _of(ev, "final")[0]["text"],
            "after the cancel: %r" % _of(ev, "final"))


def sc_close_during_model(x):
    """Closing the stream while the model is still answering abandons the
    model call (the session is idle again within seconds, not after the
    model's 50 s)."""
    m = x.session()
    sse = Sse(x, m["id"], "think hard")
    steps = 0
    while True:
        ev = sse.next()
        if ev is None:
            break
        steps += ev[0] == "step"
        if ev[0] == "text" and steps == 2:   # the slow answer has started streaming
            break
    x.check(ev is not None, "the second model call never started: %r" % [n for n, _ in sse.events])
    t0 = time.monotonic()
    sse.close()
    _wait_state(x, m["id"], "idle", 20)
    x.details["cancel_s"] = round(time.monotonic() - t0, 2)
    x.check(time.monotonic() - t0 < 10, "the model call was not abandoned (%.1f s)" % (time.monotonic() - t0))
    st, full = x.http.req("GET", "api/agent/sessions/" + m["id"])
    x.check(full["turns"] == 1, "the turn ended: %r" % full.get("turns"))


def sc_attach(x):
    """An agent on a notebook's kernel (kernel_id): it sees the notebook's
    variables, and deleting the session leaves the kernel to the notebook."""
    k = x.kernel()
    nb = x.ready(k["id"])
    r = nb.execute("shared_value = 'tomato'", 60)
    x.check(r.reply and r.reply["content"]["status"] == "ok", "notebook execution")
    m = x.session(kernel_id=k["id"])
    x.check(m["kernel_id"] == k["id"] and m["owns_kernel"] is False, "attached model: %r" % m)
    ev = Sse(x, m["id"], "what did the notebook define?").all()
    x.check(_of(ev, "final") and "The notebook's value is tomato." in _of(ev, "final")[0]["text"],
            "final: %r" % _of(ev, "final"))
    st, _ = x.http.req("DELETE", "api/agent/sessions/" + m["id"])
    x.sessions.remove(m["id"])
    x.check(st == 204, "DELETE -> %s" % st)
    r = nb.execute("print(shared_value)", 60)
    x.check(r.stdout() == "tomato\n", "the kernel outlives the session: %r" % r.stdout())


def _raw(x, method, path, body=b"", token=True):
    u = urllib.parse.urlsplit(x.base)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    h = {"Authorization": "token " + x.token} if token else {}
    c.request(method, path, body=body, headers=h)
    r = c.getresponse()
    data = r.read()
    c.close()
    try:
        return r.status, json.loads(data)
    except ValueError:
        return r.status, data


def sc_errors(x):
    """Bad requests get a clear JSON error and change nothing."""
    st, b = x.http.req("POST", "api/agent/sessions", {}, token=False)
    x.check(st == 403, "no token -> %s" % st)
    st, b = x.http.req("POST", "api/agent/sessions", raw=b"{not json")
    x.check(st == 400 and "malformed JSON" in b.get("message", ""), "malformed -> %s %r" % (st, b))
    st, b = x.http.req("POST", "api/agent/sessions", {"llm": "replay:/etc/passwd"})
    x.check(st == 400 and "cannot be chosen by a client" in b.get("message", ""), "replay llm -> %s %r" % (st, b))
    st, b = x.http.req("POST", "api/agent/sessions", {"kernel_id": "no-such-kernel"})
    x.check(st == 404, "unknown kernel_id -> %s" % st)
    st, b = x.http.req("POST", "api/agent/sessions", {"files": [{"name": "../etc/x", "content": "a"}]})
    x.check(st == 400 and "not a plain path" in b.get("message", ""), "escaping file -> %s %r" % (st, b))
    st, b = x.http.req("POST", "api/agent/sessions", {"files": [{"name": "a.bin", "content": "!!",
                                                                  "format": "base64"}]})
    x.check(st == 400 and "base64" in b.get("message", ""), "bad base64 -> %s %r" % (st, b))
    st, b = x.http.req("GET", "api/agent/sessions/nope")
    x.check(st == 404, "unknown session -> %s" % st)
    st, lst = x.http.req("GET", "api/agent/sessions")
    x.check(st == 200 and lst == [], "nothing was created by bad requests: %r" % lst)
    m = x.session()
    sid = m["id"]
    st, b = x.http.req("POST", "api/agent/sessions/%s/messages" % sid, {"content": ""})
    x.check(st == 400, "empty content -> %s" % st)
    st, b = x.http.req("POST", "api/agent/sessions/%s/messages" % sid, {"text": "hi"})
    x.check(st == 400, "no content -> %s" % st)
    # a doubled slash is collapsed by the server: the file lands inside the work dir
    st, b = _raw(x, "PUT", "/api/agent/sessions/%s/files//etc/passwd" % sid, b"x")
    x.check(st == 201 and b.get("name") == "etc/passwd", "PUT files//etc/passwd -> %s %r" % (st, b))
    x.check(open("/etc/passwd", "rb").read() != b"x", "/etc/passwd untouched")
    for bad in ("/files/../../etc/passwd", "/files/%2e%2e/x", "/files/a/%2e%2e/%2e%2e/x"):
        st, b = _raw(x, "PUT", "/api/agent/sessions/" + sid + bad, b"x")
        x.check(st in (400, 404), "PUT %s -> %s %r" % (bad, st, b))
        st, b = _raw(x, "GET", "/api/agent/sessions/" + sid + bad)
        x.check(st in (400, 404), "GET %s -> %s" % (bad, st))
    st, b = _raw(x, "GET", "/api/agent/sessions/%s/files/missing.csv" % sid)
    x.check(st == 404, "missing file -> %s" % st)
    big = b"y" * (3 << 20)   # over the JSON body limit, under the upload limit
    st, b = _raw(x, "PUT", "/api/agent/sessions/%s/files/big.bin" % sid, big)
    x.check(st == 201 and b.get("size") == len(big), "3 MiB upload -> %s %r" % (st, b))
    st, b = _raw(x, "GET", "/api/agent/sessions/%s/files/big.bin" % sid)
    x.check(st == 200 and b == big, "3 MiB download")
    st, b, _ = ws_client._big_post(x.base, "api/agent/sessions/%s/messages" % sid, x.token, 3 << 20)
    x.check(st == 413, "3 MiB message -> %s" % st)
    st, b = x.http.req("DELETE", "api/agent/sessions/" + sid)
    x.sessions.remove(sid)
    x.check(st == 204, "DELETE -> %s" % st)
    st, b = x.http.req("DELETE", "api/agent/sessions/" + sid)
    x.check(st == 404, "DELETE again -> %s" % st)


def sc_kernel_gone(x):
    """The session's kernel is shut down (DELETE, culling): the session is
    stopped, and the next message resumes it in a fresh kernel whose state
    the agent rebuilds from its snapshot (nothing re-run)."""
    m = x.session()
    ev = Sse(x, m["id"], "remember a number").all()
    x.check(_of(ev, "final") and _of(ev, "final")[0]["text"] == "Stored.", "turn 1: %r" % _of(ev, "final"))
    st, _ = x.http.req("DELETE", "api/kernels/" + m["kernel_id"])
    x.check(st == 204, "DELETE kernel -> %s" % st)
    s2 = _wait_state(x, m["id"], "stopped", 15)
    x.check(s2["kernel_id"] is None and "shut down" in s2.get("stopped_because", ""), "stopped model: %r" % s2)
    ev = Sse(x, m["id"], "now use it").all()
    notices = " ".join(d["text"] for d in _of(ev, "notice"))
    x.check("resuming" in notices and "restored 1 name(s) from the snapshot" in notices and
            "side effects did not repeat" in notices, "resume notices: %r" % notices)
    x.check(x.agent_dir not in notices, "no host path in the notices: %r" % notices)
    x.check(_of(ev, "final") and "The answer is 43." in _of(ev, "final")[0]["text"],
            "after the resume: %r" % _of(ev, "final"))
    st, s3 = x.http.req("GET", "api/agent/sessions/" + m["id"])
    x.check(s3["state"] == "idle" and s3["kernel_id"] not in (None, m["kernel_id"]), "resumed model: %r" % s3)


def sc_remember(x):
    """Turn 1 of a session that a restarted server resumes (sc_recall)."""
    m = x.session(files=[{"name": "note.txt", "content": "kept across restarts"}])
    ev = Sse(x, m["id"], "remember a number").all()
    x.check(_of(ev, "final") and _of(ev, "final")[0]["text"] == "Stored.", "turn 1: %r" % _of(ev, "final"))
    x.details["session"] = m["id"]
    x.sessions.remove(m["id"])   # it must outlive this server


def sc_recall(x):
    """A new server lists the session as stopped and resumes it on a message."""
    st, lst = x.http.req("GET", "api/agent/sessions")
    x.check(st == 200 and len(lst) == 1, "one session on disk: %r" % lst)
    if not lst:
        return
    m = lst[0]
    x.sessions.append(m["id"])
    x.check(m["state"] == "stopped" and m["turns"] == 1 and m["files"] == ["note.txt"], "listed: %r" % m)
    st, full = x.http.req("GET", "api/agent/sessions/" + m["id"])
    x.check(any(r.get("type") == "final" for r in full.get("transcript", [])), "its transcript is there")
    ev = Sse(x, m["id"], "now use it").all()
    x.check(_of(ev, "final") and "The answer is 43." in _of(ev, "final")[0]["text"],
            "after the restart: %r" % (_of(ev, "final") or [n for n, _ in ev]))
    with urllib.request.urlopen(urllib.request.Request(
            x.base + "api/agent/sessions/%s/files/note.txt" % m["id"],
            headers={"Authorization": "token " + x.token})) as r:
        x.check(r.read() == b"kept across restarts", "the uploaded file is back in the kernel's work dir")


def sc_nollm(x):
    """A server without a model says how to configure one."""
    st, b = x.http.req("POST", "api/agent/sessions", {})
    x.check(st == 503 and "--llm" in b.get("message", ""), "no LLM -> %s %r" % (st, b))
    st, lst = x.http.req("GET", "api/agent/sessions")
    x.check(st == 200 and lst == [], "no session left: %r" % lst)
    st, kernels = x.http.req("GET", "api/kernels")
    x.check(st == 200 and kernels == [], "no kernel left: %r" % kernels)


def sc_files(x):
    """Files the code writes: the files event with URLs, figures by URL, the
    listing of the whole work dir with sizes; same-name uploads refused;
    PUT says when it replaced; no host path anywhere."""
    st, b = x.http.req("POST", "api/agent/sessions", {"files": [{"name": "a.csv", "content": "1"},
                                                                 {"name": "a.csv", "content": "2"}]})
    x.check(st == 400 and "both named 'a.csv'" in (b or {}).get("message", ""), "same names -> %s %r" % (st, b))
    m = x.session(files=[{"name": "sales.csv", "content": "x\n1\n"}])
    sid = m["id"]
    events = Sse(x, sid, "write files").all()
    flat = json.dumps(events)
    x.check(x.agent_dir not in flat, "no host path in the events")
    fev = _of(events, "files")
    x.check(len(fev) == 2, "two files events: %r" % fev)
    if fev:
        got = {f["path"]: f for f in fev[0]["files"]}
        x.check(sorted(got) == ["out.csv", "reports/r0.txt", "reports/r1.txt", "x.png"], "created: %r" % sorted(got))
        oc = got.get("out.csv", {})
        x.check(oc.get("change") == "created" and oc.get("size", 0) > 0 and oc.get("mime") == "text/csv" and
                oc.get("url") == "/api/agent/sessions/%s/files/out.csv" % sid, "out.csv: %r" % oc)
        xp = got.get("x.png", {})
        x.check(xp.get("figure") == "fig-1.png" and xp.get("figure_url") ==
                "/api/agent/sessions/%s/figures/fig-1.png" % sid, "x.png is a figure: %r" % xp)
        x.check(fev[0]["step"] == 1 and fev[0]["total"] == 4, "step/total: %r" % {k: fev[0][k] for k in ("step", "total")})
    if len(fev) > 1:
        x.check([(f["path"], f["change"]) for f in fev[1]["files"]] == [("out.csv", "deleted")], "deleted: %r" % fev[1])
    figs = [f for r in _of(events, "result") for f in r.get("figures", [])]
    x.check([f["url"] for f in figs] == ["/api/agent/sessions/%s/figures/fig-1.png" % sid], "figures: %r" % figs)
    st, png = _raw(x, "GET", "/api/agent/sessions/%s/figures/fig-1.png" % sid)
    x.check(st == 200 and png[:4] == b"\x89PNG", "GET figures/fig-1.png -> %s" % st)
    for bad in ("fig-9.png", "..%2fsession.json", "fig-1.png.json", "x.png"):
        st, _ = _raw(x, "GET", "/api/agent/sessions/%s/figures/%s" % (sid, bad))
        x.check(st == 404, "GET figures/%s -> %s" % (bad, st))
    st, listing = x.http.req("GET", "api/agent/sessions/%s/files" % sid)
    by = {f["path"]: f for f in listing or []}
    x.check(sorted(by) == ["reports/r0.txt", "reports/r1.txt", "sales.csv", "x.png"], "listing: %r" % sorted(by))
    x.check(by.get("reports/r0.txt", {}).get("size") == 9 and by.get("sales.csv", {}).get("uploaded") is True and
            by.get("x.png", {}).get("uploaded") is False, "listing sizes/uploaded: %r" % listing)
    st, body = _raw(x, "GET", "/api/agent/sessions/%s/files/reports/r0.txt" % sid)
    x.check(st == 200 and body == b"report 0\n", "GET files/reports/r0.txt -> %s %r" % (st, body))
    st, b = _raw(x, "PUT", "/api/agent/sessions/%s/files/sales.csv" % sid, b"x\n2\n")
    x.check(st == 200 and b.get("replaced") is True, "PUT over an upload -> %s %r" % (st, b))
    st, b = _raw(x, "PUT", "/api/agent/sessions/%s/files/new.txt" % sid, b"n")
    x.check(st == 201 and b.get("replaced") is False, "PUT new -> %s %r" % (st, b))
    st, full = x.http.req("GET", "api/agent/sessions/" + sid)
    x.check(x.agent_dir not in json.dumps(full), "no host path in the session's transcript")


SCENARIOS = {f.__name__[3:]: f for f in (sc_analysis, sc_turns, sc_chunks, sc_interrupt, sc_follow, sc_close_cancels, sc_attach,
                                          sc_errors, sc_close_during_model, sc_kernel_gone, sc_remember, sc_recall, sc_nollm,
                                          sc_files)}


# ------------------------------------------------- live progress (issue 11)

def _reported():
    """What the scripted LLM server reported, per request ({input, output}
    or None for an error reply): korch serve's OPENAI_BASE_URL is ours too."""
    base = os.environ["OPENAI_BASE_URL"].rsplit("/v1", 1)[0]
    with urllib.request.urlopen(base + "/requests") as r:
        return [x.get("usage") for x in json.load(r)]


def _sum(usages):
    return {"input": sum(u["input"] for u in usages if u), "output": sum(u["output"] for u in usages if u),
            "calls": sum(1 for u in usages if u)}


def _live_turn(x, sid, question, session_before):
    """One turn; checks code_delta against code, status, done.tokens."""
    before = len(_reported())
    events = Sse(x, sid, question).all()
    turn = _sum(_reported()[before:])
    names = [n for n, _ in events]
    x.details.setdefault("events", []).append({n: names.count(n) for n in set(names)})
    for step in sorted({d["step"] for d in _of(events, "code")}):
        joined = "".join(d["text"] for d in _of(events, "code_delta") if d["step"] == step)
        code = [d["code"] for d in _of(events, "code") if d["step"] == step]
        x.check(joined == code[0], "step %d: code_delta joined %r, code %r" % (step, joined[:80], code[0][:80]))
        x.check(names.index("code_delta") < names.index("code"), "code_delta before code")
    for d in _of(events, "status"):
        x.check(d["phase"] in ("model", "retry", "executing") and isinstance(d["elapsed_ms"], int) and "step" in d,
                "status event: %r" % d)
    done = _of(events, "done")
    session = {k: session_before[k] + turn[k] for k in turn}
    x.check(done and done[0].get("tokens") == {"turn": turn, "session": session},
            "done.tokens %r, the server reported turn %r session %r" % (done and done[0].get("tokens"), turn, session))
    return events, session


def sc_live(x):
    """Code streamed as the model writes it (escapes cut mid-way, openai and
    anthropic), status while waiting (a 429 back-off, code running), and
    done.tokens per turn and per session, as the scripted server reported."""
    for llm in ("openai:gpt-4o-mini", "anthropic:claude-sonnet-4-5"):
        m = x.session(llm=llm)
        events, used = _live_turn(x, m["id"], "run the escapes", {"input": 0, "output": 0, "calls": 0})
        final = _of(events, "final")
        x.check(final and "LIVE 6 12 9 caf\u00e9 \U0001F600" in final[0]["text"], "%s: final %r" % (llm, final))
        x.check(any(d["phase"] == "executing" for d in _of(events, "status")), "an executing status")
        x.check(any(d["phase"] == "model" for d in _of(events, "status")), "a model status")
        events, used = _live_turn(x, m["id"], "rate limited now", used)
        retry = [d for d in _of(events, "status") if d["phase"] == "retry"]
        x.check(len(retry) >= 2 and all(d["attempt"] == 1 and d["http_status"] == 429 and "retry_in_ms" in d
                                        for d in retry), "retry status events: %r" % retry)
        x.check(retry and retry[0]["retry_in_ms"] == 2000, "the back-off the API asked for: %r" % retry[:1])
        x.check(_of(events, "final") and _of(events, "final")[0]["text"] == "Waited, then answered: rate limited now.",
                "after the back-off: %r" % _of(events, "final"))
        st, s2 = x.http.req("GET", "api/agent/sessions/" + m["id"])
        x.check(s2.get("tokens") == used["input"] + used["output"], "session tokens %r, want %r" %
                (s2.get("tokens"), used))


def sc_llm_keys(x):
    """A model the server cannot use is a 400 that says what to do; nothing is created."""
    st, b = x.http.req("POST", "api/agent/sessions", {"llm": "anthropic:claude-sonnet-4-5"})
    x.check(st == 400 and b.get("message") == "this server has no API key for 'anthropic:claude-sonnet-4-5': set "
            "ANTHROPIC_API_KEY in the environment of korch serve (or ask for another \"llm\")",
            "no key -> %s %r" % (st, b))
    st, b = x.http.req("POST", "api/agent/sessions", {"llm": "nope:model"})
    x.check(st == 400 and "unknown llm provider 'nope'" in b.get("message", ""), "unknown provider -> %s %r" % (st, b))
    st, b = x.http.req("POST", "api/agent/sessions", {"llm": "openai:"})
    x.check(st == 400 and "names no model" in b.get("message", ""), "no model -> %s %r" % (st, b))
    st, lst = x.http.req("GET", "api/agent/sessions")
    x.check(st == 200 and lst == [], "nothing was created: %r" % lst)
    st, kernels = x.http.req("GET", "api/kernels")
    x.check(st == 200 and kernels == [], "no kernel was started: %r" % kernels)
    m = x.session(llm="openai:gpt-4o-mini")     # the provider the server has a key for still works
    x.check(m["llm"] == "openai:gpt-4o-mini", "session: %r" % m)


def sc_receipts(x):
    """Issue 23 over SSE: the final event's receipts (a made-up number flagged),
    the transcript's final record with them, the clean notebook (?clean=1)
    without the failed attempt, the failed cell tagged raises-exception, and a
    session's own token budget ending its turn (done.stopped_by)."""
    m = x.session()
    events = Sse(x, m["id"], "What is the total?").all()
    final = _of(events, "final")
    rec = final[0].get("receipts", []) if final else []
    x.check(len(rec) == 6 and [r.get("form") for r in rec[:5]] == ["exact", "rounded", "percent", "exact", "magnitude"],
            "receipts: %r" % rec)
    x.check(rec and rec[-1]["text"] == "17.3" and rec[-1]["found"] is False
            and rec[-1].get("note") == "not computed by the kernel", "the made-up number: %r" % rec[-1:])
    done = _of(events, "done")[0]
    x.check(done["steps"] == 4 and done["tokens"]["turn"]["calls"] == 4 and done["cost"] == {"turn": None, "session": None},
            "done: %r" % done)
    st, full = x.http.req("GET", "api/agent/sessions/" + m["id"])
    finals = [r for r in full.get("transcript", []) if r.get("type") == "final"]
    x.check(finals and finals[-1].get("receipts") == rec, "the transcript's final record: %r" % finals[-1:])
    st, nb = x.http.req("GET", "api/agent/sessions/%s/notebook" % m["id"])
    st2, clean = x.http.req("GET", "api/agent/sessions/%s/notebook?clean=1" % m["id"])
    code = [c for c in nb.get("cells", []) if c["cell_type"] == "code"] if st == 200 else []
    ccode = [c for c in clean.get("cells", []) if c["cell_type"] == "code"] if st2 == 200 else []
    x.check([c["metadata"].get("tags", []) for c in code] == [[], ["raises-exception"], []],
            "the notebook's tags: %r" % [c["metadata"] for c in code])
    x.check(len(ccode) == 2 and not any(o["output_type"] == "error" for c in ccode for o in c["outputs"])
            and clean["metadata"]["korch"]["clean"]["dropped"] == 1, "the clean notebook: %r" % ccode)
    # a session's own budget, lower than the server's none
    st, b = x.http.req("POST", "api/agent/sessions", {"budget": {"tokens": "many"}})
    x.check(st == 400 and "'budget' must be" in b.get("message", ""), "a bad budget -> %s %r" % (st, b))
    st, b = x.http.req("POST", "api/agent/sessions", {"budget": {"cost": 1}})
    x.check(st == 400 and "needs a price table" in b.get("message", ""), "a cost budget without prices -> %s %r" % (st, b))
    m2 = x.session(budget={"tokens": 10})
    x.check(m2.get("budget") == {"tokens": 10, "seconds": None, "cost": None}, "the session's budget: %r" % m2)
    events = Sse(x, m2["id"], "What is the total?").all()
    done = _of(events, "done")[0]
    x.check(done.get("stopped_by") == "tokens" and done["steps"] == 2, "stopped by its budget: %r" % done)
    x.check(any("the token budget for this question is used up after 1 step" in d["text"] for d in _of(events, "notice")),
            "the budget's notice: %r" % _of(events, "notice"))


def _session_bytes(x, sid):
    d = os.path.join(x.agent_dir, sid)
    n = sum(os.path.getsize(os.path.join(d, f)) for f in ("transcript.jsonl", "notebook.ipynb")
            if os.path.exists(os.path.join(d, f)))
    figs = os.path.join(d, "figures")
    if os.path.isdir(figs):
        n += sum(os.path.getsize(os.path.join(figs, f)) for f in os.listdir(figs))
    return n


def sc_session_budget(x):
    """korch serve --session-mb 4 (issue 22 point 4 over the API): the model
    floods 6 MB of print, a 2 MB image and a 3 MB figure per step and kills
    its kernel (restart_flood). The session's transcript, notebook and
    figures stay within 4 MiB across steps, restarts and a second turn; the
    model and the user are told, each turn ends in done."""
    m = x.session()
    bound = 4 << 20
    for turn in (1, 2):
        events = Sse(x, m["id"], "flood it").all()
        done = _of(events, "done")
        notices = " ".join(d.get("text", "") for d in _of(events, "notice"))
        final = " ".join(d.get("text", "") for d in _of(events, "final"))
        used = _session_bytes(x, m["id"])
        x.details["turn%d" % turn] = {"bytes": used, "steps": done[0].get("steps") if done else None}
        x.check(done, "turn %d ended without done: %r" % (turn, [n for n, _ in events][-5:]))
        x.check("this session has used its output budget" in notices, "turn %d: the user was not told: %r" % (turn, notices))
        x.check("budget told: True" in final, "turn %d: the model was not told: %r" % (turn, final))
        x.check(used <= bound + (256 << 10), "turn %d: %d bytes on disk against %d" % (turn, used, bound))


SCENARIOS.update({f.__name__[3:]: f for f in (sc_live, sc_llm_keys, sc_receipts, sc_session_budget)})
import agent_trust_scenarios  # noqa: E402 (verify and the ledger, issue 23, on this file's stream reader)
SCENARIOS.update(agent_trust_scenarios.scenarios(Sse, _of))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--kernel-name", default="python3")
    ap.add_argument("--agent-dir", default="/nonexistent-agent-dir")
    ap.add_argument("scenarios", nargs="+")
    args = ap.parse_args()
    u = urllib.parse.urlsplit(args.url)
    args.base = "%s://%s/" % (u.scheme, u.netloc)
    args.token = urllib.parse.parse_qs(u.query).get("token", [""])[0]
    args.protocol = "v1"
    args.reference = None
    ok_all = True
    for name in args.scenarios:
        x = Ctx(args)
        t0 = time.monotonic()
        try:
            SCENARIOS[name](x)
        except Exception as e:  # noqa: BLE001
            x.failures.append("%s: %s" % (type(e).__name__, e))
        finally:
            try:
                x.cleanup()
            except Exception as e:  # noqa: BLE001
                x.failures.append("cleanup: %s" % e)
        x.failures.extend("not in the schema: " + e for e in SCHEMA_ERRORS[:5])
        del SCHEMA_ERRORS[:]
        ok = not x.failures
        ok_all = ok_all and ok
        print(json.dumps({"scenario": name, "ok": ok, "failures": x.failures, "details": x.details,
                          "seconds": round(time.monotonic() - t0, 2)}), flush=True)
    sys.exit(0 if ok_all else 1)


if __name__ == "__main__":
    main()
