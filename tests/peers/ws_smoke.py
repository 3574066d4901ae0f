#!/usr/bin/env python3
"""Smoke test of korch serve's kernel websocket (or any Jupyter Server's).

    ws_smoke.py BASE_URL TOKEN KERNEL_ID --proto v1|legacy [--bench N] [--binary]

Connects to /api/kernels/KERNEL_ID/channels with python3-websocket, in the
v1.kernel.websocket.jupyter.org subprotocol or the legacy JSON format, asks
kernel_info, executes `print(6*7)` and checks the stream, execute_reply and
status idle (both, any order). --binary sends the legacy request as a binary
frame with a buffer. --bench N then times N executions of `pass` (reply +
idle) and prints `p50_ms=.. p90_ms=..`. Exits non-zero with a reason on
stderr when anything is off. Prints `ok` on success.
"""
import argparse
import json
import struct
import sys
import time
import uuid

import websocket

V1 = "v1.kernel.websocket.jupyter.org"


def fail(msg):
    print("ws_smoke: " + msg, file=sys.stderr)
    sys.exit(1)


def v1_encode(channel, msg, buffers=()):
    parts = [json.dumps(msg[k]).encode() for k in ("header", "parent_header", "metadata", "content")]
    parts += list(buffers)
    chan = channel.encode()
    offsets = [8 * (1 + 1 + len(parts) + 1)]
    offsets.append(offsets[-1] + len(chan))
    for p in parts:
        offsets.append(offsets[-1] + len(p))
    out = len(offsets).to_bytes(8, "little") + b"".join(o.to_bytes(8, "little") for o in offsets)
    return out + chan + b"".join(parts)


def v1_decode(data):
    n = int.from_bytes(data[:8], "little")
    offs = [int.from_bytes(data[8 * (i + 1):8 * (i + 2)], "little") for i in range(n)]
    channel = data[offs[0]:offs[1]].decode()
    parts = [data[offs[i]:offs[i + 1]] for i in range(1, n - 1)]
    msg = {k: json.loads(parts[i]) for i, k in enumerate(("header", "parent_header", "metadata", "content"))}
    msg["buffers"] = parts[4:]
    msg["channel"] = channel
    return msg


def legacy_binary_encode(msg, buffers):
    body = json.dumps(msg).encode()
    bufs = [body] + list(buffers)
    offsets = [4 * (len(bufs) + 1)]
    for b in bufs[:-1]:
        offsets.append(offsets[-1] + len(b))
    return struct.pack("!" + "I" * (len(bufs) + 1), len(bufs), *offsets) + b"".join(bufs)


def legacy_binary_decode(data):
    n = struct.unpack("!I", data[:4])[0]
    offs = list(struct.unpack("!" + "I" * n, data[4:4 * (n + 1)])) + [len(data)]
    parts = [data[offs[i]:offs[i + 1]] for i in range(n)]
    msg = json.loads(parts[0])
    msg["buffers"] = parts[1:]
    return msg


class Client:
    def __init__(self, base, token, kid, proto, session=None):
        url = base.replace("http", "ws", 1).rstrip("/") + "/api/kernels/%s/channels" % kid
        self.session = session or uuid.uuid4().hex
        url += "?session_id=" + self.session
        subs = [V1] if proto == "v1" else None
        self.ws = websocket.create_connection(url, header=["Authorization: token " + token], subprotocols=subs,
                                              timeout=30)
        got = self.ws.getsubprotocol() if hasattr(self.ws, "getsubprotocol") else None
        if proto == "v1" and got != V1:
            fail("asked for %s, server chose %r" % (V1, got))
        if proto == "legacy" and got:
            fail("no subprotocol asked, server chose %r" % got)
        self.proto = proto

    def send(self, channel, msg_type, content, buffers=(), binary=False):
        msg = {
            "header": {"msg_id": uuid.uuid4().hex, "msg_type": msg_type, "session": self.session,
                       "username": "smoke", "date": "2026-01-01T00:00:00.000000Z", "version": "5.3"},
            "parent_header": {}, "metadata": {}, "content": content,
        }
        if self.proto == "v1":
            self.ws.send(v1_encode(channel, msg, buffers), opcode=websocket.ABNF.OPCODE_BINARY)
        elif binary or buffers:
            msg["channel"] = channel
            self.ws.send(legacy_binary_encode(msg, buffers), opcode=websocket.ABNF.OPCODE_BINARY)
        else:
            msg["channel"] = channel
            self.ws.send(json.dumps(msg))
        return msg["header"]["msg_id"]

    def recv(self):
        op, data = self.ws.recv_data()
        if self.proto == "v1":
            if op != websocket.ABNF.OPCODE_BINARY:
                fail("v1: got a text frame")
            return v1_decode(data)
        if op == websocket.ABNF.OPCODE_BINARY:
            return legacy_binary_decode(data)
        return json.loads(data)

    def until_done(self, msg_id, reply_type, deadline=30):
        """Messages for msg_id until both the reply and status idle came."""
        got_reply = got_idle = False
        seen = []
        end = time.time() + deadline
        while not (got_reply and got_idle):
            if time.time() > end:
                fail("timeout waiting for %s (reply %s, idle %s)" % (reply_type, got_reply, got_idle))
            m = self.recv()
            if m.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            seen.append(m)
            t = m["header"]["msg_type"]
            if t == reply_type:
                if m["channel"] not in ("shell", "control"):
                    fail("%s on channel %s" % (t, m["channel"]))
                got_reply = True
            elif t == "status" and m["content"]["execution_state"] == "idle":
                if m["channel"] != "iopub":
                    fail("status on channel %s" % m["channel"])
                got_idle = True
        return seen


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("base")
    ap.add_argument("token")
    ap.add_argument("kernel_id")
    ap.add_argument("--proto", choices=("v1", "legacy"), default="v1")
    ap.add_argument("--bench", type=int, default=0)
    ap.add_argument("--binary", action="store_true")
    a = ap.parse_args()
    c = Client(a.base, a.token, a.kernel_id, a.proto)
    t0 = time.time()
    # jupyter_server 1.23 as a gateway client can lose a message sent right
    # after the socket opens (before its own upstream socket exists): ask
    # again, as jupyter_client's wait_for_ready does.
    seen = None
    for attempt in range(10):
        mid = c.send("shell", "kernel_info_request", {})
        c.ws.settimeout(1.0 if attempt < 9 else 30)
        try:
            seen = c.until_done(mid, "kernel_info_reply")
            break
        except websocket.WebSocketTimeoutException:
            continue
    c.ws.settimeout(30)
    if seen is None:
        fail("no kernel_info_reply")
    info = [m for m in seen if m["header"]["msg_type"] == "kernel_info_reply"][0]
    if "protocol_version" not in info["content"]:
        fail("kernel_info_reply without protocol_version")
    kinfo_ms = (time.time() - t0) * 1000
    mid = c.send("shell", "execute_request", {"code": "print(6*7)", "silent": False, "store_history": True,
                                              "user_expressions": {}, "allow_stdin": False, "stop_on_error": True},
                 buffers=[b"\x00\x01binary"] if a.binary else (), binary=a.binary)
    seen = c.until_done(mid, "execute_reply")
    text = "".join(m["content"].get("text", "") for m in seen if m["header"]["msg_type"] == "stream")
    if text != "42\n":
        fail("expected stream '42\\n', got %r" % text)
    reply = [m for m in seen if m["header"]["msg_type"] == "execute_reply"][0]
    if reply["content"]["status"] != "ok":
        fail("execute_reply status %s" % reply["content"]["status"])
    if a.bench:
        times = []
        for _ in range(a.bench):
            t = time.perf_counter()
            mid = c.send("shell", "execute_request", {"code": "pass", "silent": False, "store_history": False,
                                                      "user_expressions": {}, "allow_stdin": False,
                                                      "stop_on_error": True})
            c.until_done(mid, "execute_reply")
            times.append((time.perf_counter() - t) * 1000)
        times.sort()
        print("p50_ms=%.2f p90_ms=%.2f n=%d" % (times[len(times) // 2], times[int(len(times) * 0.9)], len(times)))
    c.ws.close()
    print("ok kernel_info_ms=%.1f" % kinfo_ms)


if __name__ == "__main__":
    main()
