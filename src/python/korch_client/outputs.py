"""What an execution produced, as structured data.

A kernel's outputs are untrusted: they are kept as the data they are (text,
MIME bundles, base64 images decoded to bytes on request), never evaluated,
and bounded: an :class:`Execution` holds at most ``max_output_bytes`` of
output and ``max_outputs`` items, and says ``truncated`` when it dropped
more."""
from __future__ import annotations

import base64
import binascii
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional

from .errors import CodeError, ProtocolError

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
IMAGE_MIMES = ("image/png", "image/jpeg", "image/gif", "image/webp")


def strip_ansi(text: str) -> str:
    """text without terminal escape sequences (IPython colours its tracebacks)."""
    return _ANSI.sub("", text)


@dataclass
class Result:
    """One rich output: an ``execute_result`` (the cell's value,
    ``is_main_result``) or a ``display_data`` (a chart, a table, ...).

    ``data`` maps MIME types to the values as the kernel sent them: text
    types as str, images as base64 str, ``application/json`` as parsed JSON."""

    data: Dict[str, Any]
    metadata: Dict[str, Any] = field(default_factory=dict)
    is_main_result: bool = False
    execution_count: Optional[int] = None
    display_id: Optional[str] = None

    def formats(self) -> List[str]:
        """The MIME types this result has."""
        return list(self.data)

    def _str(self, mime: str) -> Optional[str]:
        v = self.data.get(mime)
        if v is None:
            return None
        if isinstance(v, list) and all(isinstance(x, str) for x in v):  # nbformat's multiline strings
            return "".join(v)
        if not isinstance(v, str):
            raise ProtocolError("the kernel's %s is a %s, not text" % (mime, type(v).__name__))
        return v

    @property
    def text(self) -> Optional[str]:
        """text/plain: the repr the kernel made (only text: it is never evaluated)."""
        return self._str("text/plain")

    @property
    def html(self) -> Optional[str]:
        """text/html, as the kernel sent it: untrusted markup (sanitize before showing it in a page)."""
        return self._str("text/html")

    @property
    def markdown(self) -> Optional[str]:
        return self._str("text/markdown")

    @property
    def latex(self) -> Optional[str]:
        return self._str("text/latex")

    @property
    def svg(self) -> Optional[str]:
        """image/svg+xml: untrusted markup (an SVG can carry script)."""
        return self._str("image/svg+xml")

    @property
    def json(self) -> Any:
        """application/json, already parsed (None when absent)."""
        return self.data.get("application/json")

    def image(self, mime: str = "image/png") -> Optional[bytes]:
        """The image of type mime as bytes (base64-decoded), None when absent;
        ProtocolError when the kernel's base64 is not valid."""
        v = self._str(mime)
        if v is None:
            return None
        try:
            return base64.b64decode("".join(v.split()), validate=True)
        except (binascii.Error, ValueError) as e:
            raise ProtocolError("the kernel's %s is not valid base64 (%s)" % (mime, e)) from e

    @property
    def png(self) -> Optional[bytes]:
        """image/png as bytes."""
        return self.image("image/png")

    @property
    def jpeg(self) -> Optional[bytes]:
        return self.image("image/jpeg")

    @property
    def images(self) -> Dict[str, bytes]:
        """Every raster image of this result, by MIME type, as bytes."""
        out = {}
        for m in IMAGE_MIMES:
            b = self.image(m)
            if b is not None:
                out[m] = b
        return out

    def __repr__(self) -> str:
        t = self.data.get("text/plain")
        short = (t[:60] + "...") if isinstance(t, str) and len(t) > 60 else t
        return "Result(%s%s)" % (", ".join(self.data), ", text=%r" % short if short is not None else "")


@dataclass
class ExecutionError:
    """The exception the code raised: name, value and traceback as the kernel
    sent them (``traceback`` lines may hold ANSI colours; ``traceback_text``
    is the same without them)."""

    ename: str
    evalue: str
    traceback: List[str] = field(default_factory=list)

    @property
    def traceback_text(self) -> str:
        return strip_ansi("\n".join(self.traceback))

    def exception(self) -> CodeError:
        return CodeError(self.ename, self.evalue, self.traceback)


@dataclass
class Execution:
    """Everything one ``run_code`` produced.

    - ``stdout`` / ``stderr``: the streams' text, joined.
    - ``results``: rich outputs in order (the cell's value has ``is_main_result``).
    - ``error``: the exception the code raised, or None.
    - ``outputs``: every output in order, as nbformat v4 output dicts (streams
      merged), ready for a notebook's cell.
    - ``status``: the kernel's execute_reply status, ``ok``, ``error`` or
      ``aborted``; ``execution_count`` its counter.
    - ``truncated``: outputs were dropped (over the client's bounds).
    """

    code: str
    msg_id: str = ""
    status: str = ""
    execution_count: Optional[int] = None
    stdout: str = ""
    stderr: str = ""
    results: List[Result] = field(default_factory=list)
    error: Optional[ExecutionError] = None
    outputs: List[Dict[str, Any]] = field(default_factory=list)
    truncated: bool = False
    dropped_messages: int = 0
    elapsed: float = 0.0

    @property
    def text(self) -> Optional[str]:
        """The text/plain of the cell's value (the last expression), or None."""
        for r in self.results:
            if r.is_main_result:
                return r.text
        return None

    @property
    def ok(self) -> bool:
        return self.status == "ok" and self.error is None

    def raise_for_error(self) -> "Execution":
        """Raise CodeError when the code raised; else return self."""
        if self.error is not None:
            raise self.error.exception()
        return self


def _s(content: Dict[str, Any], key: str, what: str) -> str:
    v = content.get(key)
    if not isinstance(v, str):
        raise ProtocolError("the kernel's %s message has a %s that is not a string: %.200r" % (what, key, v))
    return v


def _bundle(content: Dict[str, Any], what: str) -> Dict[str, Any]:
    data = content.get("data")
    if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
        raise ProtocolError("the kernel's %s message has no MIME bundle (data is %.100r)" % (what, data))
    return data


def _dict(v: Any) -> Dict[str, Any]:
    return v if isinstance(v, dict) else {}


class Collector:
    """Builds an Execution from the IOPub messages of one request, within
    bounds. ``add`` raises ProtocolError for a message of the wrong shape."""

    def __init__(self, ex: Execution, max_bytes: int, max_outputs: int,
                 on_stdout: Optional[Callable[[str], None]] = None,
                 on_stderr: Optional[Callable[[str], None]] = None,
                 on_result: Optional[Callable[[Result], None]] = None,
                 on_error: Optional[Callable[[ExecutionError], None]] = None) -> None:
        self.ex = ex
        self.max_bytes = max_bytes
        self.max_outputs = max_outputs
        self.used = 0
        self.clear_pending = False
        self.t0 = time.monotonic()
        self.cb = (on_stdout, on_stderr, on_result, on_error)
        self._stdout: List[str] = []
        self._stderr: List[str] = []

    def _room(self, n: int) -> bool:
        if self.used + n > self.max_bytes or len(self.ex.outputs) >= self.max_outputs:
            self.ex.truncated = True
            return False
        self.used += n
        return True

    def _clear_if_pending(self) -> None:
        if self.clear_pending:
            self.clear_pending = False
            self.ex.outputs.clear()

    def add(self, msg_type: str, content: Dict[str, Any], size: int) -> None:
        ex = self.ex
        if msg_type == "stream":
            name, text = _s(content, "name", "stream"), _s(content, "text", "stream")
            if name not in ("stdout", "stderr"):
                raise ProtocolError("the kernel's stream message names stream %.50r (stdout or stderr)" % name)
            self._clear_if_pending()
            if not self._room(len(text)):
                return
            (self._stdout if name == "stdout" else self._stderr).append(text)
            last = ex.outputs[-1] if ex.outputs else None
            if last and last.get("output_type") == "stream" and last.get("name") == name:
                last["text"] += text
            else:
                ex.outputs.append({"output_type": "stream", "name": name, "text": text})
            cb = self.cb[0] if name == "stdout" else self.cb[1]
            if cb:
                cb(text)
        elif msg_type in ("execute_result", "display_data"):
            data = _bundle(content, msg_type)
            self._clear_if_pending()
            if not self._room(size):
                return
            md = _dict(content.get("metadata"))
            tr = _dict(content.get("transient"))
            did = tr.get("display_id") if isinstance(tr.get("display_id"), str) else None
            count = content.get("execution_count") if isinstance(content.get("execution_count"), int) else None
            r = Result(data=dict(data), metadata=md, is_main_result=msg_type == "execute_result",
                       execution_count=count, display_id=did)
            ex.results.append(r)
            out: Dict[str, Any] = {"output_type": msg_type, "data": dict(data), "metadata": md}
            if msg_type == "execute_result":
                out["execution_count"] = count
            ex.outputs.append(out)
            if self.cb[2]:
                self.cb[2](r)
        elif msg_type == "update_display_data":
            data = _bundle(content, msg_type)
            did = _dict(content.get("transient")).get("display_id")
            for r in ex.results:
                if did is not None and r.display_id == did:
                    if not self._room(size):
                        return
                    r.data = dict(data)
                    r.metadata = _dict(content.get("metadata"))
        elif msg_type == "error":
            tb = content.get("traceback", [])
            if not isinstance(tb, list) or not all(isinstance(x, str) for x in tb):
                raise ProtocolError("the kernel's error message has a traceback that is not a list of strings")
            e = ExecutionError(_s(content, "ename", "error"), _s(content, "evalue", "error"), list(tb))
            self._clear_if_pending()
            if not self._room(size):
                e = ExecutionError(e.ename[:1000], e.evalue[:10000], [])
            ex.error = e
            ex.outputs.append({"output_type": "error", "ename": e.ename, "evalue": e.evalue, "traceback": e.traceback})
            if self.cb[3]:
                self.cb[3](e)
        elif msg_type == "clear_output":
            if content.get("wait"):
                self.clear_pending = True
            else:
                ex.outputs.clear()

    def reply(self, content: Dict[str, Any]) -> None:
        st = content.get("status")
        if not isinstance(st, str):
            raise ProtocolError("the kernel's execute_reply has no status")
        self.ex.status = st
        n = content.get("execution_count")
        self.ex.execution_count = n if isinstance(n, int) and not isinstance(n, bool) else None
        if st == "error" and self.ex.error is None and isinstance(content.get("ename"), str):
            tb = content.get("traceback")
            self.ex.error = ExecutionError(content["ename"], str(content.get("evalue", "")),
                                           [x for x in tb if isinstance(x, str)] if isinstance(tb, list) else [])

    def finish(self) -> Execution:
        self.ex.stdout = "".join(self._stdout)
        self.ex.stderr = "".join(self._stderr)
        self.ex.elapsed = time.monotonic() - self.t0
        return self.ex
