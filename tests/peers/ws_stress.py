"""The scenarios of ws_client.py that push korch serve at its bounds: REST
errors and abuse, 1000 rapid connects, a client that never reads while its
kernel floods (another kernel's client keeps its round trip), 33 MB of
output accounted byte for byte, the relay's rate, malformed and oversized
messages. Each is sc_NAME(x), x a ws_client.Ctx; ws_scenarios.SCENARIOS
names them."""
import os
import socket
import sys
import time
import urllib.parse
import uuid

import websocket

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ws_client import V1, _big_post, _ws_status  # noqa: E402


def sc_rest_errors(x):
    h = x.http
    got = {}

    def expect(name, status, want, body=None, json_message=True):
        got[name] = status
        ok = status in want if isinstance(want, (tuple, list, set)) else status == want
        x.check(ok, "%s -> %s (expected %s) %r" % (name, status, want, str(body)[:200]))
        if ok and json_message and isinstance(status, int) and status >= 400:
            x.check(isinstance(body, dict) and isinstance(body.get("message"), str),
                    "%s: error body is not JSON with a message: %r" % (name, str(body)[:200]))

    st, b = h.req("GET", "api/kernels", token=False)
    expect("no token GET /api/kernels", st, 403, b, json_message=False)
    st, b = h.req("POST", "api/kernels", {"name": x.args.kernel_name}, token=False)
    expect("no token POST /api/kernels", st, 403, b, json_message=False)
    st, b = h.req("GET", "api/kernels", token="wrong" + x.token)
    expect("wrong token (header)", st, 403, b, json_message=False)
    st, b = h.req("GET", "api/kernels?token=wrong" + x.token, token=False)
    expect("wrong token (?token=)", st, 403, b, json_message=False)
    st, b = h.req("GET", "api/kernels?token=" + urllib.parse.quote(x.token), token=False)
    expect("right token (?token=)", st, 200, b)
    unknown = str(uuid.uuid4())
    st, b = h.req("GET", "api/kernels/" + unknown)
    expect("GET unknown kernel", st, 404, b)
    st, b = h.req("DELETE", "api/kernels/" + unknown)
    expect("DELETE unknown kernel", st, 404, b)
    st, b = h.req("POST", "api/kernels/%s/interrupt" % unknown)
    expect("interrupt unknown kernel", st, 404, b)
    st, b = h.req("POST", "api/kernels/%s/restart" % unknown)
    expect("restart unknown kernel", st, (404, 500) if x.reference == "jupyter_server" else 404, b,
           json_message=True)
    st = _ws_status(x.base, "api/kernels/%s/channels" % unknown, ["Authorization: token " + x.token])
    expect("websocket to unknown kernel", st, 404, None, json_message=False)
    st = _ws_status(x.base, "api/kernels/%s/channels" % unknown, [])
    expect("websocket without token", st, 403, None, json_message=False)
    st, b = h.req("POST", "api/kernels", raw=b'{"name": "python3",', token=True)
    expect("malformed JSON body", st, 400, b)
    before = {k["id"] for k in (h.req("GET", "api/kernels")[1] or [])}
    st, b, sent_all = _big_post(x.base, "api/kernels", x.token, 10 * 1024 * 1024)
    x.details["10MB_sent_completely"] = sent_all
    if x.reference == "jupyter_server":
        # max_body_size is 512 MiB there: a valid 10 MB body starts a kernel
        expect("10 MB body", st, (201, 413), b)
    else:
        expect("10 MB body", st, 413, b)
    after = {k["id"] for k in (h.req("GET", "api/kernels")[1] or [])}
    for kid in after - before:
        x.kernels.append(kid)  # cleaned up at the end
    x.details["statuses"] = got
    st, b = h.req("GET", "api")
    x.check(st == 200, "server no longer answers after the abuse: %s" % st)


def sc_churn(x):
    """1000 rapid WebSocket connects/disconnects, then the server still answers."""
    kid = x.kernel()["id"]
    c = x.ready(kid)
    n = x.args.churn
    t0 = time.monotonic()
    errors = 0
    first_error = None
    budget = 120.0
    done = 0
    ws_base = "ws" + x.base[len("http"):].rstrip("/") + "/"
    for i in range(n):
        if time.monotonic() - t0 > budget:
            break
        try:
            kw = {"subprotocols": [V1]} if x.protocol == "v1" else {}
            ws = websocket.create_connection(ws_base + "api/kernels/%s/channels?session_id=churn%d" % (kid, i),
                                             timeout=10, header=["Authorization: token " + x.token], **kw)
            if i % 2:
                ws.close(timeout=0.2)
            else:
                ws.sock.close()   # abrupt
        except Exception as e:  # noqa: BLE001
            errors += 1
            first_error = first_error or repr(e)
        done += 1
    el = time.monotonic() - t0
    x.details.update({"connects": done, "errors": errors, "seconds": round(el, 2),
                      "per_connect_ms": round(1000 * el / max(done, 1), 2), "first_error": first_error})
    x.check(done == n, "only %d of %d connects within %.0fs" % (done, n, budget))
    x.check(errors == 0, "%d of %d connects failed (first: %s)" % (errors, n, first_error))
    t1 = time.monotonic()
    st, b = x.http.req("GET", "api/kernels", timeout=30)
    x.details["rest_after_s"] = round(time.monotonic() - t1, 3)
    x.check(st == 200, "GET /api/kernels after the churn -> %s" % st)
    r = c.execute("print('still here')", 60)
    x.check(r.stdout() == "still here\n", "the long-lived socket after the churn: %r" % r.stdout())
    c2 = x.ready(kid)
    r = c2.execute("1+1", 60)
    x.check(r.result_text() == "2", "a new socket after the churn: %r" % r.result_text())


def sc_slow_reader(x):
    """A client that never reads while its kernel prints a lot: another client
    (on another kernel) keeps its round trip, REST keeps answering, and the
    flooding kernel is unaffected."""
    k1 = x.kernel()["id"]
    k2 = x.kernel()["id"]
    slow = x.ready(k1, sockopt=((socket.SOL_SOCKET, socket.SO_RCVBUF, 4096),))
    fast = x.ready(k2)
    base_rtt = []
    for _ in range(5):
        t = time.monotonic()
        fast.execute("pass", 30)
        base_rtt.append(time.monotonic() - t)
    flood_s = x.args.flood_seconds
    slow.send("execute_request", {"code": "import time\n_t = time.time()\n"
                                  "while time.time() - _t < %g:\n    print('y' * 1000)" % flood_s,
                                  "silent": False, "store_history": False, "user_expressions": {},
                                  "allow_stdin": False, "stop_on_error": True})
    # the slow client never reads from here on
    rtts, rest, timeline = [], [], []
    t_flood = time.monotonic()
    t_end = t_flood + flood_s + 1
    while time.monotonic() < t_end:
        t = time.monotonic()
        r = fast.execute("pass", 30)
        rtts.append(time.monotonic() - t)
        timeline.append((round(t - t_flood, 2), round(1000 * rtts[-1], 1)))
        t = time.monotonic()
        st, _ = x.http.req("GET", "api/kernels", timeout=30)
        rest.append(time.monotonic() - t)
        x.check(st == 200, "GET /api/kernels during the flood -> %s" % st)
        if not r.done():
            break
    rtts.sort()
    rest.sort()
    x.details.update({
        "baseline_rtt_ms_p50": round(1000 * sorted(base_rtt)[len(base_rtt) // 2], 1),
        "flood_rtt_ms_p50": round(1000 * rtts[len(rtts) // 2], 1) if rtts else None,
        "flood_rtt_ms_p99": round(1000 * rtts[min(len(rtts) - 1, (99 * len(rtts)) // 100)], 1) if rtts else None,
        "flood_rtt_ms_max": round(1000 * rtts[-1], 1) if rtts else None,
        "flood_rest_ms_max": round(1000 * rest[-1], 1) if rest else None,
        "round_trips_during_flood": len(rtts),
        # the slowest round trips: (seconds into the flood, ms)
        "slowest": sorted(timeline, key=lambda e: -e[1])[:3]})
    x.check(len(rtts) >= 5, "only %d round trips during %gs of flood" % (len(rtts), flood_s))
    x.check(bool(rtts) and rtts[-1] < 2.0, "another client's round trip reached %.2fs during the flood" % (rtts[-1] if rtts else -1))
    p99 = x.details["flood_rtt_ms_p99"]
    x.check(p99 is not None and p99 < x.args.rtt_bound_ms,
            "another client's p99 round trip was %s ms during the flood (bound %g ms)" % (p99, x.args.rtt_bound_ms))
    x.check(bool(rest) and rest[-1] < 2.0, "REST took up to %.2fs during the flood" % (rest[-1] if rest else -1))
    # the flooding kernel is unaffected: a new client can use it once the loop ends
    time.sleep(1)
    c = x.conn(k1)
    c.kernel_info(60)
    r = c.execute("print('ok')", 120)
    x.check(r.stdout() == "ok\n", "the flooding kernel afterwards: %r" % r.stdout())
    slow.drop()


def _cut_note(dropped):
    """The line korch writes at a cut, as a user sees it."""
    size = ("%.1f MB" % (dropped / 1e6) if dropped >= 1e6 else
            "%.1f kB" % (dropped / 1e3) if dropped >= 1e3 else "%d bytes" % dropped)
    return "\n[korch: %s of output dropped here]\n" % size


def _stream_accounting(msgs, want):
    """Stream messages against the text the kernel wrote: each one's text
    continues where the last left off, a cut one (content.korch_dropped, in
    bytes of UTF-8) says so at the cut in its text and skips what it
    dropped, and together they cover it all.
    -> (failure or None, messages cut, largest text in bytes)."""
    want_b = want.encode("utf-8")
    pos, cut, largest = 0, 0, 0
    for i, m in enumerate(msgs):
        t = m["content"].get("text", "").encode("utf-8")
        d = m["content"].get("korch_dropped", 0)
        largest = max(largest, len(t))
        if d:
            note = _cut_note(d).encode("utf-8")
            if not t.endswith(note):
                return "message %d was cut (%d bytes) without %r at the cut: ends %r" % (i, d, note, t[-80:]), cut, largest
            t = t[:-len(note)]
        if want_b[pos:pos + len(t)] != t:
            return "message %d (%d bytes) is not the text at byte %d" % (i, len(t), pos), cut, largest
        pos += len(t) + d
        cut += 1 if d else 0
    if pos != len(want_b):
        return "the messages account for %d bytes of %d" % (pos, len(want_b)), cut, largest
    return None, cut, largest


def sc_big_output(x):
    """A kernel writes 33 MB at once: ipykernel sends it as a few stream
    messages of megabytes each, which korch relays from the kernel's own
    bytes in websocket fragments, cut at 8 MiB of JSON (content.korch_dropped
    says how much went). Two clients read it: every message is the kernel's
    text, in order, intact up to its cut (quotes, backslashes and UTF-8 split
    across fragments), and the cuts account for the rest."""
    kid = x.kernel()["id"]
    a = x.ready(kid)
    b = x.ready(kid)
    n = 120000
    unit = 'x"\\\u00e9' * 40
    # lines (messages of a few MB), then 12 MB in one write (one message, cut)
    code = ("import sys\nfor i in range(%d):\n    sys.stdout.write('%%07d %%s\\n' %% (i, %r))\n"
            "sys.stdout.flush()\nsys.stdout.write(''.join('%%07d %%s\\n' %% (i, %r) for i in range(%d, %d)))"
            % (n, unit, unit, n, n + 72000))
    t0 = time.monotonic()
    mid = a.send("execute_request", {"code": code, "silent": False, "store_history": False,
                                     "user_expressions": {}, "allow_stdin": False, "stop_on_error": True})
    ra = a.wait_execution(mid, 120)
    x.details["seconds"] = round(time.monotonic() - t0, 2)
    want = "".join("%07d %s\n" % (i, unit) for i in range(n + 72000))
    fail, cut, largest = _stream_accounting(ra.of("stream"), want)
    x.details.update({"stream_messages": len(ra.of("stream")), "cut_messages": cut, "largest_text_bytes": largest})
    x.check(fail is None, "the requester: %s" % fail)
    x.check(largest > (1 << 20), "no stream message over 1 MiB: nothing big was relayed")
    x.check(largest <= (8 << 20), "a stream message of %d bytes: not cut at 8 MiB" % largest)
    x.check(cut >= 1, "12 MB written at once, yet no message was cut")
    # the other client sees the same IOPub (the reply is the requester's)
    seen = b.collect(lambda m: m["parent_header"].get("msg_id") == mid and m["header"].get("msg_type") == "status"
                     and m["content"].get("execution_state") == "idle", 120, "the execution's idle status")
    fail_b, _, _ = _stream_accounting([m for m in seen if m["parent_header"].get("msg_id") == mid
                                       and m["header"].get("msg_type") == "stream"], want)
    x.check(fail_b is None, "the second client: %s" % fail_b)


def sc_relay_rate(x):
    """Messages per second through the relay: the kernel sends many small
    stream messages straight from its session (no print batching), one
    client counts them."""
    kid = x.kernel()["id"]
    c = x.ready(kid)
    n = x.args.rate_messages
    code = ("k = get_ipython().kernel\ns = k.session\np = k.get_parent()\nimport time\n"
            "for i in range(%d):\n"
            "    s.send(k.iopub_socket, 'stream', {'name': 'stdout', 'text': '%%d\\n' %% i}, parent=p,"
            " ident=b'stream.stdout')\n"
            "    if i %% 500 == 499: time.sleep(0.002)\n" % n)
    mid = c.send("execute_request", {"code": code, "silent": False, "store_history": False,
                                     "user_expressions": {}, "allow_stdin": False, "stop_on_error": True})
    got, t_first, t_last, idle = 0, None, None, False
    deadline = time.monotonic() + 300
    while not idle and time.monotonic() < deadline:
        m = c.recv(5)
        if m is None or m["parent_header"].get("msg_id") != mid:
            continue
        t = m["header"].get("msg_type")
        if t == "stream":
            got += 1
            t_last = time.monotonic()
            t_first = t_first or t_last
        elif t == "status" and m["content"].get("execution_state") == "idle":
            idle = True
    el = (t_last - t_first) if got > 1 else 0
    x.details.update({"sent": n, "received": got, "seconds": round(el, 3),
                      "messages_per_second": round(got / el) if el else None})
    x.check(idle, "the execution did not finish")
    x.check(got >= n * 0.99, "only %d of %d messages arrived" % (got, n))


def sc_malformed_flood(x):
    """50 malformed messages from a client whose session_id and messages
    carry a newline and a forged log line; it is still served after."""
    kid = x.kernel()["id"]
    c = x.conn(kid, session_id="evil%0AINJECTED%20korch:%20forged")
    for i in range(50):
        if x.protocol == "v1":
            c.ws.send_binary(b"\x01\x00\x00\x00\x00\x00\x00\x00\nINJECTED " + bytes([i]))
        else:
            c.ws.send('{"bad\nINJECTED forged %d' % i)
    c.kernel_info()
    r = c.execute("print('still served')")
    x.check(r.stdout() == "still served\n", "after the flood: %r" % r.stdout())


def sc_big_message(x):
    """Client messages are reassembled from the websocket's fragments up to
    korch's bound (64 MiB): a 3 MB cell runs whole; one over the bound is
    dropped (and logged) and the socket is served after it."""
    kid = x.kernel()["id"]
    c = x.ready(kid)
    n = 3 * 1000 * 1000
    r = c.execute("x = '" + "a" * n + "'\nprint(len(x), x[:1], x[-1:])", 120)
    x.check(r.stdout() == "%d a a\n" % n, "a %d-byte cell: stdout %r" % (n, r.stdout()[:200]))
    t0 = time.monotonic()
    c.send("execute_request", {"code": "y = '" + "b" * (64 << 20) + "'", "silent": False, "store_history": True,
                               "user_expressions": {}, "allow_stdin": False, "stop_on_error": True})
    x.details["seconds_to_send_64_mib"] = round(time.monotonic() - t0, 2)
    r = c.execute("print('after', 'y' in globals())", 120)
    x.check(r.stdout() == "after False\n", "after the message over the bound: %r" % r.stdout())

