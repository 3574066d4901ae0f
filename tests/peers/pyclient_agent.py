"""The Python client's agent sessions against a live korch serve whose LLM
is the scripted one (tests/peers/llm_server.py, scenario "pyclient" of
pyclient_scenarios.py): a turn as a live iterator of events, each checked
against docs/events.schema.json; files up, down, listed and removed; a
chart; interrupt; following a detached turn; the session's own kernel.

    pyclient_agent.py --url 'http://127.0.0.1:PORT/?token=T' [--src DIR]

Prints {"ok", "failures", "details"} as its last line."""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import events_schema  # noqa: E402
from pyclient_harness import DETAILS, FAIL, check, run  # noqa: E402


def schema(events):
    for ev in events:
        bad = events_schema.check_event(ev.event, ev.data)
        if bad:
            FAIL.append("schema: " + bad)


def turn_total(kc, s):
    """'total': code streamed, run, a chart, a file written, the answer quoting the kernel's number."""
    t0 = time.monotonic()
    times = []
    with s.chat("what is the total?") as turn:
        for ev in turn:
            times.append((time.monotonic() - t0, ev.event))
    schema(turn.events)
    kinds = [e.event for e in turn.events]
    DETAILS["total_events"] = len(kinds)
    check(kinds[0] == "step" and kinds[-1] == "done" and turn.status == "ok", "turn shape: %r" % kinds)
    check(turn.final == "The total is 42.", "final: %r" % turn.final)
    codes = [e.code for e in turn.events if e.event == "code"]
    deltas = "".join(e.text for e in turn.events if e.event == "code_delta" and e.data.get("step") == 1)
    check(codes and deltas == codes[0], "code_delta fragments join to the code")
    # live: the first event came well before the last
    check(times and times[-1][0] - times[0][0] > 0.05, "events arrived live: %r" % times[:3])
    ids = [e.id for e in turn.events]
    check(ids == sorted(ids) and None not in ids, "ids ascending: %r" % ids[:10])
    outs = [e.output for e in turn.events if e.event == "output"]
    check(any(o.get("output_type") == "stream" and "TOTAL=42" in o.get("text", "") for o in outs), "TOTAL output")
    figs = [f for e in turn.events if e.event == "result" for f in e.data.get("figures", [])]
    check(figs, "a figure in a result event")
    if figs:
        png = s.figure(figs[0]["name"])
        check(png.startswith(b"\x89PNG\r\n\x1a\n"), "figure bytes: %r" % png[:8])
        DETAILS["figure_bytes"] = len(png)
    files = [f for e in turn.events if e.event == "files" for f in e.data.get("files", [])]
    check(any(f.get("path") == "out/summary.txt" for f in files), "files event: %r" % files)


def files(kc, s):
    listed = {f.path: f.size for f in s.files()}
    check(listed.get("data.csv") == 9 and listed.get("out/summary.txt") == 9, "listing: %r" % listed)
    check(s.download("out/summary.txt") == b"total 42\n", "download")
    blob = bytes(range(256)) * 1000
    r = s.upload("in/blob.bin", blob)
    check(r.get("size") == len(blob) and r.get("replaced") is False, "upload answer: %r" % r)
    r = s.upload("in/blob.bin", blob)
    check(r.get("replaced") is True, "a PUT over an upload says replaced: %r" % r)
    check(s.download("in/blob.bin") == blob, "binary round trip")
    dest = "/tmp/korch-pyclient-dl-%d" % os.getpid()
    check(s.download_to("in/blob.bin", dest) == len(blob) and open(dest, "rb").read() == blob, "download_to")
    os.unlink(dest)
    e = None
    try:
        s.download("in/blob.bin", max_bytes=1000)
    except kc.ProtocolError as x:
        e = x
    check(e is not None, "download over max_bytes is refused")
    s.remove("in/blob.bin")
    check("in/blob.bin" not in {f.path for f in s.files()}, "removed")
    for bad, exc in (("../escape", kc.HTTPError), ("/etc/passwd", kc.KorchUsage), ("nope.txt", kc.NotFoundError)):
        try:
            s.download(bad)
            FAIL.append("download(%r) did not fail" % bad)
        except exc as x:
            check(len(str(x)) < 500, "a short message for %r" % bad)
        except Exception as x:  # noqa: BLE001
            FAIL.append("download(%r): %s %s, expected %s" % (bad, type(x).__name__, x, exc.__name__))


def interrupt_and_follow(kc, s):
    t0 = None
    with s.chat("now sleep") as turn:
        for ev in turn:
            if ev.event == "output" and "SLEEPING" in (ev.output or {}).get("text", "") and t0 is None:
                try:
                    s.chat("after")
                    FAIL.append("a second message during a turn was accepted")
                except kc.HTTPError as e:
                    check(e.status == 409, "409 during a turn: %s" % e)
                t0 = time.monotonic()
                s.interrupt()
    schema(turn.events)
    check(t0 is not None and turn.status == "interrupted", "interrupted: %r" % turn.status)
    if t0 is not None:
        DETAILS["interrupt_s"] = round(time.monotonic() - t0, 2)
    check(s.ask("and after?").final == "Still alive: AFTER 42.", "the session outlived its interrupt")
    # a detached turn: its client leaves, another follows it to the end
    first = s.chat("sleep again", detach=True)
    seen = []
    for ev in first:
        seen.append(ev)
        if ev.event == "output":
            break
    first.close()
    follow = s.follow(after=seen[0].id)
    check(follow is not None, "follow: a running turn")
    if follow is not None:
        evs = []
        for ev in follow:
            evs.append(ev)
            if ev.event == "output" and "SLEEPING" in (ev.output or {}).get("text", ""):
                s.interrupt()
        schema(evs)
        check(evs and evs[0].id == seen[0].id + 1 and follow.status == "interrupted",
              "followed from after=%s: %r, %s" % (seen[0].id, [e.id for e in evs[:3]], follow.status))
    check(s.follow() is None, "follow() without a running turn is None")


def body(kc, url):
    c = kc.Client(url)
    with c.create_session(files={"data.csv": "n\n1\n2\n39\n"}) as s:
        check(s.kernel_id and s.state in ("idle", "starting"), "created: %r" % s.model)
        turn_total(kc, s)
        files(kc, s)
        interrupt_and_follow(kc, s)
        k = s.kernel()
        ex = k.run_code("df['n'].sum()")
        check(ex.text == "42", "the session's kernel has the agent's df: %r" % ex)
        k.close()
        check(k.id in [x["id"] for x in c.kernels()], "closing the session's kernel object leaves it running")
        nb = s.notebook()
        check(nb.get("nbformat") == 4 and len(nb.get("cells", [])) >= 4, "notebook")
        sid = s.id
    check(sid not in [x.get("id") for x in c.sessions()], "the with block deleted the session")
    try:
        c.create_session(llm="nobody:model")
        FAIL.append("an unknown provider was accepted")
    except kc.HTTPError as e:
        check(e.status == 400 and "nobody" in e.message, "unknown provider: %s" % e)
    check(c.kernels() == [], "kernels left: %r" % c.kernels())


if __name__ == "__main__":
    sys.exit(run(body))
