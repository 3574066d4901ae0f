"""The kernel websocket of korch serve, /api/kernels/{id}/channels, in the
``v1.kernel.websocket.jupyter.org`` format (jupyter_server's
serialize_msg_to_ws_v1): a binary frame is a little-endian u64 offset count
N, N u64 offsets, then the channel name, header, parent_header, metadata,
content and buffers, the first offset being where the channel starts and
the last one the frame's length.

Everything that arrives is checked before it is used: the offsets, that the
four JSON parts are objects, and the size of every websocket message (a
message over the bound is read off the socket and dropped, never held, so
the connection stays in step)."""
from __future__ import annotations

import json
import select
import socket
import struct
import time
import uuid
from typing import Any, Dict, List, Optional

import websocket

from .errors import KernelGoneError, ProtocolError

V1 = "v1.kernel.websocket.jupyter.org"
MAX_PARTS = 1 << 16


def dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode("utf-8")


def encode(channel: str, header: Dict[str, Any], parent: Dict[str, Any], metadata: Dict[str, Any],
           content: Dict[str, Any], buffers: List[bytes] = ()) -> bytes:  # type: ignore[assignment]
    parts = [dumps(header), dumps(parent), dumps(metadata), dumps(content)] + [bytes(b) for b in buffers]
    ch = channel.encode("utf-8")
    n = 2 + len(parts)
    offsets = [8 * (1 + n), 8 * (1 + n) + len(ch)]
    for p in parts:
        offsets.append(offsets[-1] + len(p))
    return struct.pack("<Q", n) + struct.pack("<%dQ" % n, *offsets) + ch + b"".join(parts)


def decode(data: bytes) -> Dict[str, Any]:
    """A frame -> {channel, header, parent_header, metadata, content, buffers};
    ProtocolError when it is not a well-formed v1 message."""
    if not isinstance(data, (bytes, bytearray)):
        raise ProtocolError("a text frame on a v1 kernel websocket (expected binary)")
    if len(data) < 8:
        raise ProtocolError("kernel websocket frame of %d bytes: shorter than its offset count" % len(data))
    (n,) = struct.unpack_from("<Q", data, 0)
    if n < 6 or n > MAX_PARTS or 8 * (1 + n) > len(data):
        raise ProtocolError("kernel websocket frame: %d offsets for %d bytes" % (n, len(data)))
    offs = struct.unpack_from("<%dQ" % n, data, 8)
    if offs[0] != 8 * (1 + n) or offs[-1] != len(data) or any(a > b for a, b in zip(offs, offs[1:])):
        raise ProtocolError("kernel websocket frame: offsets not ascending from %d to its length %d"
                            % (8 * (1 + n), len(data)))
    try:
        channel = bytes(data[offs[0]:offs[1]]).decode("utf-8")
        parts = [json.loads(bytes(data[offs[i]:offs[i + 1]])) for i in range(1, 5)]
    except ValueError as e:
        raise ProtocolError("kernel websocket frame: a part that is not UTF-8 JSON (%s)" % e) from e
    names = ("header", "parent_header", "metadata", "content")
    for name, p in zip(names, parts):
        if not isinstance(p, dict):
            raise ProtocolError("kernel message: %s is a %s, not an object" % (name, type(p).__name__))
    if not isinstance(parts[0].get("msg_type"), str):
        raise ProtocolError("kernel message without a msg_type in its header")
    msg: Dict[str, Any] = dict(zip(names, parts))
    msg["channel"] = channel
    msg["buffers"] = [bytes(data[offs[i]:offs[i + 1]]) for i in range(5, n - 1)]
    return msg


class _Oversize:
    """A websocket message that was over the bound: its length only."""

    def __init__(self, length: int) -> None:
        self.length = length


def _bounded_frame_buffer(fb: Any, limit: int) -> Any:
    """websocket-client's frame reader, made to drop a message over limit
    bytes (read off the socket in pieces and thrown away) instead of holding
    it. Returns None when this websocket-client has no such reader (the
    bound is then checked after the message arrived)."""
    base = getattr(getattr(websocket, "_abnf", None), "frame_buffer", None)
    if base is None or not isinstance(fb, base) or not hasattr(fb, "recv_strict"):
        return None
    ABNF = websocket.ABNF

    class Bounded(base):  # type: ignore[misc, valid-type]
        over: Optional[int] = None   # the dropped message's length, once its last frame is read
        _msg = 0                     # bytes of the message so far (fragments)
        _dropping = False

        def recv_frame(self):  # type: ignore[no-untyped-def]
            with self.lock:
                if self.has_received_header():
                    self.recv_header()
                (fin, rsv1, rsv2, rsv3, opcode, has_mask, _) = self.header
                if self.has_received_length():
                    self.recv_length()
                length = self.length
                if self.has_received_mask():
                    self.recv_mask()
                mask = self.mask
                data_frame = opcode in (ABNF.OPCODE_TEXT, ABNF.OPCODE_BINARY, ABNF.OPCODE_CONT)
                if data_frame:
                    if opcode != ABNF.OPCODE_CONT:
                        self._msg, self._dropping = 0, False
                    self._msg += length
                    if self._msg > limit:
                        self._dropping = True
                if data_frame and self._dropping:
                    left = length
                    while left > 0:
                        step = min(left, 1 << 20)
                        self.recv_strict(step)
                        left -= step
                    payload = b""
                    if fin:
                        self.over = self._msg
                else:
                    payload = self.recv_strict(length)
                    if has_mask:
                        payload = ABNF.mask(mask, payload)
                self.clear()
                frame = ABNF(fin, rsv1, rsv2, rsv3, opcode, has_mask and not self._dropping, payload)
                frame.validate(self.skip_utf8_validation)
            return frame

    b = Bounded.__new__(Bounded)
    b.__dict__.update(fb.__dict__)
    return b


class Channels:
    """One websocket to a kernel's channels. Not thread-safe."""

    def __init__(self, url: str, token: str, max_message: int, timeout: float, session: Optional[str] = None) -> None:
        self.session = session or uuid.uuid4().hex
        self.max_message = max_message
        headers = ["Authorization: token " + token] if token else []
        try:
            self.ws = websocket.create_connection(url + "?session_id=" + self.session, timeout=timeout,
                                                  header=headers, subprotocols=[V1], enable_multithread=False)
        except websocket.WebSocketBadStatusException as e:
            code = getattr(e, "status_code", 0)
            raise KernelGoneError("cannot open the kernel's websocket %s: HTTP %s" % (url, code)) from e
        except (OSError, websocket.WebSocketException) as e:
            raise KernelGoneError("cannot open the kernel's websocket %s: %s" % (url, e)) from e
        if self.ws.getsubprotocol() != V1:
            self.ws.close()
            raise ProtocolError("korch serve did not select the %s websocket protocol" % V1)
        bounded = _bounded_frame_buffer(self.ws.frame_buffer, max_message)
        self._bounded = bounded is not None
        if bounded is not None:
            self.ws.frame_buffer = bounded
        self.closed = False

    def send(self, channel: str, msg_type: str, content: Dict[str, Any], metadata: Optional[Dict[str, Any]] = None) -> str:
        """Send a request; its msg_id."""
        mid = uuid.uuid4().hex
        header = {"msg_id": mid, "msg_type": msg_type, "username": "korch_client", "session": self.session,
                  "date": time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime()), "version": "5.3"}
        try:
            self.ws.send_binary(encode(channel, header, {}, metadata or {}, content))
        except (OSError, websocket.WebSocketException) as e:
            self.closed = True
            raise KernelGoneError("the kernel's websocket closed: %s" % e) from e
        return mid

    def recv(self, timeout: float) -> Any:
        """The next message (a dict, see decode), an _Oversize, or None when
        nothing came within timeout. KernelGoneError when the socket closed;
        ProtocolError for a frame that is not a kernel message."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self.ws.settimeout(max(left, 0.001))
            try:
                # control_frame=True: a ping is returned, so a server pinging
                # more often than `timeout` cannot keep us inside recv forever
                op, data = self.ws.recv_data(control_frame=True)
            except (websocket.WebSocketTimeoutException, socket.timeout):
                return None
            except websocket.WebSocketProtocolException as e:
                self.closed = True
                raise ProtocolError("bad websocket frame from korch serve: %s" % e) from e
            except (websocket.WebSocketConnectionClosedException, OSError) as e:
                self.closed = True
                raise KernelGoneError("the kernel's websocket closed: %s" % (e or "connection lost")) from e
            if op == websocket.ABNF.OPCODE_CLOSE:
                self.closed = True
                reason = data[2:].decode("utf-8", "replace") if isinstance(data, bytes) and len(data) > 2 else ""
                raise KernelGoneError("korch serve closed the kernel's websocket%s" % (": " + reason if reason else ""))
            if op in (websocket.ABNF.OPCODE_PING, websocket.ABNF.OPCODE_PONG):
                continue
            fb = self.ws.frame_buffer
            over = getattr(fb, "over", None)
            if over is not None:
                fb.over = None
                return _Oversize(over)
            if len(data) > self.max_message:  # a websocket-client without the bounded reader
                return _Oversize(len(data))
            return decode(data)

    def pending(self) -> bool:
        """Whether something can be read without waiting."""
        if self.closed:
            return False
        if getattr(self.ws.frame_buffer, "recv_buffer", None):
            return True
        sock = self.ws.sock
        if sock is None:
            return False
        if hasattr(sock, "pending") and sock.pending():
            return True
        try:
            return bool(select.select([sock], [], [], 0)[0])
        except (OSError, ValueError):
            return True  # recv then says what is wrong

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            try:
                self.ws.close(timeout=1)
            except Exception:  # noqa: BLE001 - closing a socket that is going anyway
                pass
