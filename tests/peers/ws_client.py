#!/usr/bin/python3
"""A real Jupyter kernel WebSocket client (python3-websocket + urllib) that runs
named scenarios against a Jupyter-Server-compatible server (korch serve, or the
real jupyter_server started by serve_peer.py) and prints one JSON line per
scenario:

    {"scenario": NAME, "protocol": "v1"|"legacy", "ok": true|false,
     "failures": [...], "details": {...}, "seconds": S}

    ws_client.py --url 'http://127.0.0.1:PORT/?token=T' [--token T]
                 [--protocol v1|legacy] [--reference jupyter_server]
                 [--kernel-name python3] [--local-pids] SCENARIO...

SCENARIO: all, or any of ws_scenarios.SCENARIOS (ws_scenarios.py: the
protocol's; ws_stress.py: REST errors, churn, slow readers, floods). Exit
status 0 when every scenario held. `--reference jupyter_server` switches the few expectations where
jupyter_server 1.23 answers differently from korch's contract (issue 5:
10 MB body -> 413; a REST restart sends no `restarting` on either since issue 10).
`--local-pids` (the server runs kernels on this host) additionally checks that
a deleted kernel's process is gone; every scenario reports the kernel pids it
saw in details.kernel_pids so the caller can check none outlive the server.

Wire formats:
  legacy: JSON text frames carrying a "channel" key; binary frames (messages
          with buffers) = big-endian u32 nbufs, nbufs u32 offsets, JSON, buffers.
  v1:     subprotocol v1.kernel.websocket.jupyter.org, binary frames =
          little-endian u64 offset count N, N u64 offsets, then channel,
          header, parent_header, metadata, content, buffers...; offsets[0] is
          where the channel starts, the last offset is the total length
          (jupyter_server's serialize_msg_to_ws_v1 / deserialize_msg_from_ws_v1).

The client itself (Http, Conn, Result, Ctx, the codecs) is this file, which
the other peers import; the scenarios are ws_scenarios.py and ws_stress.py.
"""
import argparse
import http.client
import json
import os
import socket
import struct
import sys
import time
import traceback
import urllib.error
import urllib.parse
import urllib.request
import uuid

import websocket

V1 = "v1.kernel.websocket.jupyter.org"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


# --------------------------------------------------------------------------- codecs

def _dumps(obj):
    return json.dumps(obj, separators=(",", ":"), default=str).encode("utf-8")


def v1_encode(channel, msg):
    """msg: dict with header, parent_header, metadata, content, buffers (opt)."""
    parts = [_dumps(msg.get("header", {})), _dumps(msg.get("parent_header", {})),
             _dumps(msg.get("metadata", {})), _dumps(msg.get("content", {}))]
    parts += [bytes(b) for b in msg.get("buffers", []) or []]
    return v1_encode_parts(channel, parts)


def v1_encode_parts(channel, parts):
    ch = channel.encode("utf-8")
    n = 1 + 1 + len(parts)  # channel start, each part's start, the end
    offsets = [8 * (1 + n)]
    offsets.append(offsets[-1] + len(ch))
    for p in parts:
        offsets.append(offsets[-1] + len(p))
    return struct.pack("<Q", n) + struct.pack("<%dQ" % n, *offsets) + ch + b"".join(parts)


def v1_decode_parts(data):
    if len(data) < 8:
        raise ValueError("v1 frame shorter than its offset count")
    (n,) = struct.unpack_from("<Q", data, 0)
    if n < 2 or 8 * (1 + n) > len(data):
        raise ValueError("v1 frame: bad offset count %d for %d bytes" % (n, len(data)))
    offsets = struct.unpack_from("<%dQ" % n, data, 8)
    if offsets[0] != 8 * (1 + n):
        raise ValueError("v1 frame: first offset %d, expected %d" % (offsets[0], 8 * (1 + n)))
    if list(offsets) != sorted(offsets) or offsets[-1] != len(data):
        raise ValueError("v1 frame: offsets %r not ascending to the length %d" % (offsets, len(data)))
    channel = data[offsets[0]:offsets[1]].decode("utf-8")
    parts = [data[offsets[i]:offsets[i + 1]] for i in range(1, n - 1)]
    return channel, parts


def v1_decode(data):
    channel, parts = v1_decode_parts(data)
    if len(parts) < 4:
        raise ValueError("v1 frame with %d parts (< 4)" % len(parts))
    msg = {"channel": channel,
           "header": json.loads(parts[0]), "parent_header": json.loads(parts[1]),
           "metadata": json.loads(parts[2]), "content": json.loads(parts[3]),
           "buffers": [bytes(p) for p in parts[4:]]}
    return msg


def legacy_binary_encode(msg):
    """jupyter_server's serialize_binary_message: big-endian u32 count + offsets."""
    msg = dict(msg)
    buffers = [bytes(b) for b in msg.pop("buffers", [])]
    bmsg = json.dumps(msg, default=str).encode("utf-8")
    buffers.insert(0, bmsg)
    nbufs = len(buffers)
    offsets = [4 * (nbufs + 1)]
    for buf in buffers[:-1]:
        offsets.append(offsets[-1] + len(buf))
    return struct.pack("!" + "I" * (1 + nbufs), nbufs, *offsets) + b"".join(buffers)


def legacy_binary_decode(data):
    (nbufs,) = struct.unpack_from("!I", data, 0)
    offsets = list(struct.unpack_from("!" + "I" * nbufs, data, 4))
    offsets.append(None)
    bufs = [data[offsets[i]:offsets[i + 1]] for i in range(nbufs)]
    msg = json.loads(bufs[0].decode("utf-8"))
    msg["buffers"] = bufs[1:]
    return msg


# --------------------------------------------------------------------------- REST

class Http:
    def __init__(self, base, token):
        self.base = base.rstrip("/") + "/"
        self.token = token

    def req(self, method, path, body=None, token=True, raw=None, headers=None, timeout=60):
        """-> (status, parsed JSON body or text or None)."""
        url = self.base + path.lstrip("/")
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        h = {"Content-Type": "application/json"} if data is not None else {}
        if token is True:
            h["Authorization"] = "token " + self.token
        elif isinstance(token, str):
            h["Authorization"] = "token " + token
        h.update(headers or {})
        if method == "POST" and data is None:
            data = b""
        r = urllib.request.Request(url, data=data, method=method, headers=h)
        try:
            with urllib.request.urlopen(r, timeout=timeout) as resp:
                return resp.status, _parse(resp.read())
        except urllib.error.HTTPError as e:
            return e.code, _parse(e.read())

    def start_kernel(self, name):
        st, model = self.req("POST", "api/kernels", {"name": name})
        if st != 201 or not isinstance(model, dict) or "id" not in model:
            raise Failure("POST /api/kernels -> %s %r" % (st, model))
        return model

    def delete_kernel(self, kid, tries=5):
        """DELETE, retried while the answer is neither 204 nor 404 (jupyter_server
        1.23 answers 500 for a kernel that is still starting or was auto-restarted)."""
        st = None
        for i in range(tries):
            try:
                st = self.req("DELETE", "api/kernels/" + kid)[0]
            except Exception:  # noqa: BLE001
                st = None
            if st in (204, 404):
                break
            time.sleep(1)
        return st


def _parse(b):
    if not b:
        return None
    try:
        return json.loads(b)
    except Exception:
        return b[:300].decode("utf-8", "replace")


class Failure(Exception):
    pass


# --------------------------------------------------------------------------- WebSocket

class Closed(Exception):
    pass


class Conn:
    """One WebSocket to /api/kernels/{id}/channels, as a frontend holds it."""

    def __init__(self, base, token, kid, protocol, session_id=None, sockopt=(), timeout=30,
                 token_mode="header", url_session=True):
        """url_session=False: no ?session_id= in the URL (Notebook 6.4's and
        jupyter_server 1.x's gateway clients connect so); the session is then
        only in the messages' header.session."""
        self.protocol = protocol
        self.session = session_id or uuid.uuid4().hex
        self.kid = kid
        ws_base = "ws" + base[len("http"):].rstrip("/") + "/"
        url = ws_base + "api/kernels/%s/channels" % kid
        url += ("?session_id=%s" % self.session) if url_session else "?"
        headers = []
        if token_mode == "header" and token:
            headers.append("Authorization: token " + token)
        elif token_mode == "query" and token:
            url += "&token=" + urllib.parse.quote(token)
        kw = {}
        if protocol == "v1":
            kw["subprotocols"] = [V1]
        self.ws = websocket.create_connection(url, timeout=timeout, header=headers,
                                              sockopt=tuple(sockopt), **kw)
        if protocol == "v1" and self.ws.getsubprotocol() != V1:
            sub = self.ws.getsubprotocol()
            self.ws.close()
            raise Failure("server did not select %s (selected %r)" % (V1, sub))
        self.pending = []   # messages received while waiting for something else
        self.frames = {"text": 0, "binary": 0}

    # -- messages
    def msg(self, msg_type, content, channel="shell"):
        return {"header": {"msg_id": uuid.uuid4().hex, "msg_type": msg_type,
                           "username": "korch-test", "session": self.session,
                           "date": time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime()),
                           "version": "5.3"},
                "parent_header": {}, "metadata": {}, "content": content,
                "buffers": [], "channel": channel}

    def send(self, msg_type, content, channel="shell", buffers=()):
        m = self.msg(msg_type, content, channel)
        m["buffers"] = [bytes(b) for b in buffers]
        if self.protocol == "v1":
            self.ws.send_binary(v1_encode(channel, m))
        elif m["buffers"]:
            self.ws.send_binary(legacy_binary_encode(m))
        else:
            m.pop("buffers")
            self.ws.send(json.dumps(m))
        return m["header"]["msg_id"]

    def recv(self, timeout):
        """Next message (dict with channel, header, ...) or None on timeout."""
        if self.pending:
            return self.pending.pop(0)
        # control_frame=True: websocket-client otherwise loops inside recv_data
        # over pings, so a server pinging more often than `timeout` would
        # block us forever.
        deadline = time.monotonic() + timeout
        while True:
            self.ws.settimeout(max(deadline - time.monotonic(), 0.001))
            try:
                op, data = self.ws.recv_data(control_frame=True)
            except websocket.WebSocketTimeoutException:
                return None
            except socket.timeout:
                return None
            except (websocket.WebSocketConnectionClosedException, ConnectionError, OSError) as e:
                raise Closed(str(e))
            if op == websocket.ABNF.OPCODE_CLOSE:
                raise Closed("close frame")
            if op in (websocket.ABNF.OPCODE_PING, websocket.ABNF.OPCODE_PONG):
                if time.monotonic() >= deadline:
                    return None
                continue
            break
        if op == websocket.ABNF.OPCODE_TEXT:
            self.frames["text"] += 1
            if self.protocol == "v1":
                raise Failure("text frame on a v1 connection: %r" % data[:200])
            m = json.loads(data)
            m.setdefault("buffers", [])
            return m
        self.frames["binary"] += 1
        if self.protocol == "v1":
            return v1_decode(data)
        return legacy_binary_decode(data)

    def collect(self, until, timeout, what="messages"):
        """Receive until until(msg) is true; return every message seen."""
        seen = []
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise Failure("timed out after %.0fs waiting for %s (saw %s)"
                              % (timeout, what, summarize(seen)))
            m = self.recv(left)
            if m is None:
                continue
            seen.append(m)
            if until(m):
                return seen

    def kernel_info(self, timeout=30, retry=None):
        """What JupyterLab does after connecting: kernel_info_request, wait for
        the reply. retry=S re-sends every S seconds (needed through
        jupyter_server 1.23's gateway client, which loses messages a client
        sends before its upstream socket is connected)."""
        mids = {self.send("kernel_info_request", {})}
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise Failure("timed out after %.0fs waiting for kernel_info_reply" % timeout)
            try:
                seen = self.collect(lambda m: m["header"].get("msg_type") == "kernel_info_reply"
                                    and m["parent_header"].get("msg_id") in mids,
                                    min(left, retry or left), "kernel_info_reply")
                return seen[-1]
            except Failure:
                if not retry or time.monotonic() >= deadline:
                    raise
                mids.add(self.send("kernel_info_request", {}))

    def nudge(self, timeout=60, every=1.0):
        """What jupyter_server does toward a kernel whose IOPub may not be live
        yet (after a restart): kernel_info_request every `every` s until both
        a reply and an IOPub status for one of them have arrived."""
        mids, got_reply, got_iopub = set(), False, False
        deadline = time.monotonic() + timeout
        while not (got_reply and got_iopub):
            if time.monotonic() >= deadline:
                raise Failure("IOPub not live %.0fs after (re)start: reply=%s iopub=%s"
                              % (timeout, got_reply, got_iopub))
            mids.add(self.send("kernel_info_request", {}))
            t_next = min(deadline, time.monotonic() + every)
            while time.monotonic() < t_next and not (got_reply and got_iopub):
                m = self.recv(max(0.0, t_next - time.monotonic()))
                if m is None or m["parent_header"].get("msg_id") not in mids:
                    continue
                if m["header"].get("msg_type") == "kernel_info_reply":
                    got_reply = True
                elif m["channel"] == "iopub" and m["header"].get("msg_type") == "status":
                    got_iopub = True

    def execute(self, code, timeout=60, stop_on_error=True):
        """Execute; return Result with everything whose parent is this request."""
        mid = self.send("execute_request", {"code": code, "silent": False, "store_history": True,
                                            "user_expressions": {}, "allow_stdin": False,
                                            "stop_on_error": stop_on_error})
        return self.wait_execution(mid, timeout)

    def wait_execution(self, mid, timeout, first=()):
        r = Result(mid)
        for m in first:
            r.add(m)
        deadline = time.monotonic() + timeout
        while not r.done():
            left = deadline - time.monotonic()
            if left <= 0:
                raise Failure("execution timed out after %.0fs (reply=%s idle=%s; saw %s)"
                              % (timeout, r.reply is not None, r.idle, summarize(r.msgs)))
            m = self.recv(left)
            if m is not None:
                r.add(m)
        return r

    def close(self):
        try:
            self.ws.close(timeout=1)
        except Exception:
            pass

    def drop(self):
        """Vanish like a lost network: no close frame."""
        try:
            self.ws.sock.shutdown(socket.SHUT_RDWR)
        except Exception:
            pass
        try:
            self.ws.sock.close()
        except Exception:
            pass


class Result:
    def __init__(self, mid):
        self.mid = mid
        self.msgs = []
        self.others = []
        self.reply = None
        self.idle = False
        self.busy = False

    def add(self, m):
        if m["parent_header"].get("msg_id") != self.mid:
            self.others.append(m)
            return
        self.msgs.append(m)
        t = m["header"].get("msg_type")
        if t == "execute_reply":
            self.reply = m
        elif t == "status":
            st = m["content"].get("execution_state")
            if st == "idle":
                self.idle = True
            elif st == "busy":
                self.busy = True

    def done(self):
        return self.reply is not None and self.idle

    def of(self, t):
        return [m for m in self.msgs if m["header"].get("msg_type") == t]

    def stdout(self):
        return "".join(m["content"].get("text", "") for m in self.of("stream")
                       if m["content"].get("name") == "stdout")

    def result_text(self):
        rs = self.of("execute_result")
        return rs[0]["content"]["data"].get("text/plain") if rs else None


def summarize(msgs, n=12):
    out = []
    for m in msgs[-n:]:
        t = m["header"].get("msg_type")
        if t == "status":
            t += ":" + str(m["content"].get("execution_state"))
        out.append("%s/%s" % (m.get("channel"), t))
    return out


# --------------------------------------------------------------------------- what a scenario gets

class Ctx:
    def __init__(self, args):
        self.args = args
        self.base = args.base
        self.token = args.token
        self.http = Http(self.base, self.token)
        self.protocol = args.protocol
        self.reference = args.reference
        self.kernels = []
        self.conns = []
        self.failures = []
        self.details = {"kernel_pids": []}

    def check(self, ok, what):
        if not ok:
            self.failures.append(what)
        return ok

    def kernel(self):
        model = self.http.start_kernel(self.args.kernel_name)
        self.kernels.append(model["id"])
        return model

    def conn(self, kid, **kw):
        c = Conn(self.base, self.token, kid, self.protocol, **kw)
        self.conns.append(c)
        return c

    def ready(self, kid, **kw):
        """Connect, wait for kernel_info_reply, note the kernel's pid."""
        c = self.conn(kid, **kw)
        c.kernel_info()
        self.note_pid(c)
        return c

    def note_pid(self, c):
        r = c.execute("import os as _korch_os; print(_korch_os.getpid())", 60)
        try:
            self.details["kernel_pids"].append(int(r.stdout().strip()))
        except ValueError:
            self.failures.append("could not read the kernel pid: %r" % r.stdout())

    def cleanup(self):
        for c in self.conns:
            c.close()
        for kid in self.kernels:
            self.http.delete_kernel(kid)


def _ws_status(base, path, headers):
    url = "ws" + base[len("http"):].rstrip("/") + "/" + path
    try:
        ws = websocket.create_connection(url, timeout=10, header=headers)
        ws.close()
        return 101
    except websocket.WebSocketBadStatusException as e:
        return e.status_code
    except Exception as e:  # noqa: BLE001
        return "error: %s" % e


def _big_post(base, path, token, size):
    """POST a valid JSON body of `size` bytes; tolerate the server answering
    (and closing) before it has read everything. -> (status, body)."""
    u = urllib.parse.urlsplit(base)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    pad = size - len('{"name":"","pad":""}') - 7
    body = ('{"name":"python3","pad":"' + "x" * pad + '"}').encode()
    conn.putrequest("POST", "/" + path)
    conn.putheader("Authorization", "token " + token)
    conn.putheader("Content-Type", "application/json")
    conn.putheader("Content-Length", str(len(body)))
    conn.endheaders()
    sent_all = True
    try:
        view = memoryview(body)
        for i in range(0, len(body), 65536):
            conn.sock.sendall(view[i:i + 65536])
    except (BrokenPipeError, ConnectionResetError):
        sent_all = False
    try:
        resp = conn.getresponse()
        return resp.status, _parse(resp.read()), sent_all
    except Exception as e:  # noqa: BLE001
        return "no response: %s" % e, None, sent_all
    finally:
        conn.close()


def wait_gone(pid, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        try:  # a zombie is gone as far as we care
            with open("/proc/%d/stat" % pid) as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except OSError:
            return True
        time.sleep(0.1)
    return False


def run(name, args):
    from ws_scenarios import SCENARIOS
    x = Ctx(args)
    t0 = time.monotonic()
    error = None
    try:
        SCENARIOS[name](x)
    except Failure as e:
        error = str(e)
    except Closed as e:
        error = "the websocket closed unexpectedly: %s" % e
    except websocket.WebSocketBadStatusException as e:
        error = "websocket handshake refused: %s" % e
    except Exception as e:  # noqa: BLE001
        error = "%s: %s | %s" % (type(e).__name__, e, traceback.format_exc(limit=3).replace("\n", " "))
    finally:
        try:
            x.cleanup()
        except Exception:  # noqa: BLE001
            pass
    fails = list(x.failures) + ([error] if error else [])
    return {"scenario": name, "protocol": args.protocol, "ok": not fails, "failures": fails,
            "details": x.details, "seconds": round(time.monotonic() - t0, 2)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True, help="base URL; a ?token=T in it is used as the token")
    ap.add_argument("--token")
    ap.add_argument("--protocol", choices=("v1", "legacy"), default="v1")
    ap.add_argument("--reference", choices=("korch", "jupyter_server"), default="korch")
    ap.add_argument("--kernel-name", default="python3")
    ap.add_argument("--local-pids", action="store_true")
    ap.add_argument("--churn", type=int, default=1000)
    ap.add_argument("--flood-seconds", type=float, default=5.0)
    ap.add_argument("--rtt-bound-ms", type=float, default=2000.0,
                    help="slow_reader: the other kernel's client's p99 round trip must stay under this")
    ap.add_argument("--rate-messages", type=int, default=20000)
    ap.add_argument("scenarios", nargs="*", default=["all"])
    a = ap.parse_args()
    u = urllib.parse.urlsplit(a.url.strip())
    q = urllib.parse.parse_qs(u.query)
    a.token = a.token or (q.get("token") or [""])[0]
    a.base = "%s://%s%s" % (u.scheme, u.netloc, u.path if u.path.endswith("/") else u.path + "/")
    from ws_scenarios import SCENARIOS
    names = list(SCENARIOS) if a.scenarios == ["all"] else a.scenarios
    bad = [n for n in names if n not in SCENARIOS]
    if bad:
        ap.error("unknown scenario(s) %s; known: %s" % (bad, " ".join(SCENARIOS)))
    ok = True
    for n in names:
        res = run(n, a)
        ok = ok and res["ok"]
        print(json.dumps(res), flush=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    # Run as a script, this file is __main__; the scenarios import it as
    # ws_client, a second copy of its classes. Run through that copy, so
    # that the Failure a scenario raises is the one run() catches.
    import ws_client
    ws_client.main()