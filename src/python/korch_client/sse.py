"""Server-sent events (WHATWG HTML, "9.2 Server-sent events"), as korch
serve writes an agent turn: ``id: N``, ``event: NAME``, ``data: JSON`` and a
blank line; comment lines (``: keepalive``) every 15 s.

The parser accepts LF, CRLF and CR line ends and events split anywhere
across reads, and bounds what it holds: a line or an event over
``max_event_bytes`` is a ProtocolError, as is data that is not a JSON
object naming its own event."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, Iterator, List, Optional

from .errors import ProtocolError

#: the default bound on one event (an output event carries its images inline)
MAX_EVENT_BYTES = 64 << 20


@dataclass
class Event:
    """One event of an agent turn (docs/events.md, docs/events.schema.json).

    ``event`` is its kind (``step``, ``status``, ``text``, ``code_delta``,
    ``code``, ``output``, ``result``, ``files``, ``usage``, ``notice``,
    ``error``, ``final``, ``verify``, ``done``), ``data`` the whole object as
    the server sent it, ``id`` its number in the turn (for ``after=``)."""

    event: str
    data: Dict[str, Any] = field(default_factory=dict)
    id: Optional[int] = None

    @property
    def step(self) -> Optional[int]:
        s = self.data.get("step")
        return s if isinstance(s, int) and not isinstance(s, bool) else None

    @property
    def text(self) -> Optional[str]:
        """The text of a text / notice / final event, the fragment of a code_delta."""
        t = self.data.get("text")
        return t if isinstance(t, str) else None

    @property
    def code(self) -> Optional[str]:
        """The code of a code event."""
        c = self.data.get("code")
        return c if isinstance(c, str) else None

    @property
    def output(self) -> Optional[Dict[str, Any]]:
        """The nbformat output of an output event (images inline, base64)."""
        o = self.data.get("output")
        return o if isinstance(o, dict) else None

    @property
    def is_done(self) -> bool:
        return self.event == "done"

    def __repr__(self) -> str:
        short = json.dumps(self.data)[:100]
        return "Event(%s, %s)" % (self.event, short)


class SseParser:
    """Feed bytes, get events. Bounded: see the module's docstring."""

    def __init__(self, max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        self.max = max_event_bytes
        self.buf = b""
        self.data: List[bytes] = []
        self.size = 0
        self.name = "message"
        self.id: Optional[int] = None
        self.last_id: Optional[int] = None

    def feed(self, chunk: bytes) -> Iterator[Event]:
        self.buf += chunk
        while True:
            i_n, i_r = self.buf.find(b"\n"), self.buf.find(b"\r")
            ends = [i for i in (i_n, i_r) if i >= 0]
            if not ends:
                break
            i = min(ends)
            if self.buf[i:i + 1] == b"\r" and i + 1 == len(self.buf):
                break  # a CR at the end: wait, an LF may follow
            line = self.buf[:i]
            self.buf = self.buf[i + (2 if self.buf[i:i + 2] == b"\r\n" else 1):]
            ev = self._line(line)
            if ev is not None:
                yield ev
        if len(self.buf) > self.max:
            raise ProtocolError("a server-sent event line over %d bytes" % self.max)

    def _line(self, line: bytes) -> Optional[Event]:
        if not line:
            return self._dispatch()
        if line.startswith(b":"):
            return None
        field_, _, value = line.partition(b":")
        if value.startswith(b" "):
            value = value[1:]
        if field_ == b"data":
            self.size += len(value) + 1
            if self.size > self.max:
                raise ProtocolError("a server-sent event over %d bytes" % self.max)
            self.data.append(value)
        elif field_ == b"event":
            self.name = value.decode("utf-8", "replace")[:100]
        elif field_ == b"id":
            self.id = int(value) if value.isdigit() and len(value) < 19 else None
        return None

    def _dispatch(self) -> Optional[Event]:
        data, name, eid = self.data, self.name, self.id
        self.data, self.size, self.name, self.id = [], 0, "message", None
        if not data:
            return None
        raw = b"\n".join(data)
        try:
            obj = json.loads(raw)
        except ValueError as e:
            raise ProtocolError("server-sent event %r whose data is not JSON: %r" % (name, raw[:200])) from e
        if not isinstance(obj, dict):
            raise ProtocolError("server-sent event %r whose data is not an object" % name)
        kind = obj.get("event")
        if not isinstance(kind, str) or kind != name:
            raise ProtocolError("server-sent event %r whose data names event %.50r" % (name, kind))
        if eid is not None:
            self.last_id = eid
        return Event(event=name, data=obj, id=eid)


def parse(chunks: Iterable[bytes], max_event_bytes: int = MAX_EVENT_BYTES) -> Iterator[Event]:
    """Events from an iterable of byte chunks."""
    p = SseParser(max_event_bytes)
    for c in chunks:
        yield from p.feed(c)
