"""Agent sessions of korch serve (``korch serve --llm PROVIDER:MODEL``): a
conversation with a model that runs code in the session's kernel, each turn
a live stream of events; the session's files, figures and notebook."""
from __future__ import annotations

import json
import os
import urllib.parse
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Union

from ._http import MAX_DOWNLOAD_BYTES
from .errors import KorchUsage, NotFoundError, ProtocolError
from .sse import MAX_EVENT_BYTES, Event, SseParser

if TYPE_CHECKING:
    import requests

    from .client import Client
    from .kernel import Kernel

#: an upload's content: bytes, text (sent as UTF-8) or a binary file object
Data = Union[bytes, bytearray, memoryview, str, IO[bytes]]


@dataclass
class FileInfo:
    """A file in a session's work dir, as korch lists it."""

    path: str
    size: Optional[int] = None
    mime: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict)


def _quote(path: str) -> str:
    if not isinstance(path, str) or not path or path.startswith("/") or "\0" in path:
        raise KorchUsage("%r is not a relative path inside the session's work dir" % (path,))
    return urllib.parse.quote(path, safe="/")


class Turn:
    """One turn of the conversation as it happens: iterate for its
    :class:`Event` objects, live, up to and including ``done``. Closing it
    (or leaving its ``with`` block) before the end closes the stream, which
    cancels the turn unless it was sent with ``detach=True``."""

    def __init__(self, session: "AgentSession", resp: "requests.Response", max_event_bytes: int) -> None:
        self.session = session
        self._r = resp
        self._p = SseParser(max_event_bytes)
        self.done: Optional[Event] = None   #: the done event, once seen
        self.final: Optional[str] = None    #: the final answer's text, once seen
        self.events: List[Event] = []       #: every event so far
        self._closed = False

    def __iter__(self) -> Iterator[Event]:
        try:
            for chunk in self.session.client.http.iter_body(self._r, 1 << 14):
                for ev in self._p.feed(chunk):
                    self.events.append(ev)
                    if ev.event == "final":
                        self.final = ev.text
                    if ev.event == "done":
                        self.done = ev
                    yield ev
                    if self.done is not None:
                        return
            if self.done is None:
                raise ProtocolError("the turn's event stream ended without a done event (korch serve stopped?)")
        finally:
            self.close()

    def wait(self) -> "Turn":
        """Read the turn to its end; self."""
        for _ in self:
            pass
        return self

    @property
    def status(self) -> Optional[str]:
        """done's status: ``ok``, ``interrupted`` or ``error`` (None before done)."""
        if self.done is None:
            return None
        s = self.done.data.get("status")
        return s if isinstance(s, str) else None

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._r.close()

    def __enter__(self) -> "Turn":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class AgentSession:
    """An agent session on korch serve. Get one from
    :meth:`Client.create_session` or :meth:`Client.session`. As a context
    manager it deletes the session at the end when this object created it::

        with client.create_session(files={"sales.csv": data}) as s:
            for ev in s.chat("Which region sells most? Chart it."):
                print(ev.event, ev.text or "")
    """

    def __init__(self, client: "Client", model: Dict[str, Any], owned: bool = True) -> None:
        sid = model.get("id") if isinstance(model, dict) else None
        if not isinstance(sid, str) or not sid or "/" in sid:
            raise ProtocolError("korch serve answered a session without a usable id: %.200r" % (model,))
        self.client = client
        self.id: str = sid
        self.model: Dict[str, Any] = model
        self.owned = owned
        self.max_event_bytes = MAX_EVENT_BYTES

    @property
    def _p(self) -> str:
        return "api/agent/sessions/" + self.id

    @property
    def kernel_id(self) -> Optional[str]:
        k = self.model.get("kernel_id")
        return k if isinstance(k, str) else None

    @property
    def state(self) -> Optional[str]:
        s = self.model.get("state")
        return s if isinstance(s, str) else None

    def info(self) -> Dict[str, Any]:
        """The session as the server has it now, with its transcript records."""
        self.model = self.client.http.json("GET", self._p)
        return self.model

    # ---------------------------------------------------------------- turns

    def _stream(self, method: str, path: str, body: Any) -> "requests.Response":
        # the read timeout outlasts korch's 15 s keepalive comments
        return self.client.http.request(method, path, json_body=body, stream=True,
                                        timeout=(self.client.timeout, max(60.0, self.client.timeout)),  # type: ignore[arg-type]
                                        headers={"Accept": "text/event-stream"})

    def chat(self, content: str, *, detach: bool = False) -> Turn:
        """Send a message; the turn it starts as a live :class:`Turn` (iterate
        it for the events). 409 (HTTPError) while another turn runs."""
        if not isinstance(content, str) or not content:
            raise KorchUsage("a message must be a non-empty str")
        body: Dict[str, Any] = {"content": content}
        if detach:
            body["detach"] = True
        return Turn(self, self._stream("POST", self._p + "/messages", body), self.max_event_bytes)

    def ask(self, content: str) -> Turn:
        """chat() read to its end: the Turn, with ``final``, ``status`` and ``events``."""
        return self.chat(content).wait()

    def follow(self, after: Optional[int] = None) -> Optional[Turn]:
        """Follow the running turn (from its start, or after event id
        ``after``); None when no turn runs."""
        path = self._p + "/events" + ("?after=%d" % after if after is not None else "")
        r = self._stream("GET", path, None)
        if r.status_code == 204:
            r.close()
            return None
        return Turn(self, r, self.max_event_bytes)

    def interrupt(self) -> None:
        """Stop the running step (the kernel is interrupted; the session stays)."""
        self.client.http.json("POST", self._p + "/interrupt")

    def notebook(self) -> Dict[str, Any]:
        """The session as an nbformat 4.5 notebook (a dict; json.dump it to save)."""
        nb = self.client.http.json("GET", self._p + "/notebook")
        if not isinstance(nb, dict):
            raise ProtocolError("the session's notebook is not a JSON object")
        return nb

    def kernel(self) -> "Kernel":
        """The session's kernel, to run code in it yourself (not shut down
        when closed: it belongs to the session)."""
        if not self.kernel_id:
            self.info()
        if not self.kernel_id:
            raise KorchUsage("session %s has no kernel now (it is %s; its next message starts one)"
                             % (self.id, self.state))
        return self.client.kernel(self.kernel_id)

    # ---------------------------------------------------------------- files

    def upload(self, path: str, data: Data) -> Dict[str, Any]:
        """Put a file into the session's work dir (as ``path``, relative);
        korch's answer ``{name, size, replaced, ...}``."""
        if isinstance(data, str):
            data = data.encode("utf-8")
        r = self.client.http.request("PUT", self._p + "/files/" + _quote(path), data=data,
                                     headers={"Content-Type": "application/octet-stream"})
        raw = self.client.http.read(r, 1 << 20)
        try:
            out = json.loads(raw) if raw else {}
        except ValueError:
            raise ProtocolError("the upload's answer is not JSON: %r" % raw[:200]) from None
        return out if isinstance(out, dict) else {}

    def upload_file(self, local: "Union[str, os.PathLike[str]]", path: Optional[str] = None) -> Dict[str, Any]:
        """Upload a local file (under its own name unless ``path``)."""
        with open(local, "rb") as f:
            return self.upload(path or os.path.basename(os.fspath(local)), f)

    def files(self) -> List[FileInfo]:
        """Every file in the work dir (uploads and what the code wrote)."""
        j = self.client.http.json("GET", self._p + "/files")
        items = j.get("files") if isinstance(j, dict) else j
        if not isinstance(items, list):
            raise ProtocolError("the session's file list is not a list: %.200r" % (j,))
        out = []
        for it in items:
            if isinstance(it, dict) and isinstance(it.get("path") or it.get("name"), str):
                size = it.get("size")
                mime = it.get("mime")
                out.append(FileInfo(path=it.get("path") or it["name"],
                                    size=size if isinstance(size, int) and not isinstance(size, bool) else None,
                                    mime=mime if isinstance(mime, str) else None, raw=it))
        return out

    def download(self, path: str, max_bytes: int = MAX_DOWNLOAD_BYTES) -> bytes:
        """A file of the work dir, as bytes (ProtocolError over max_bytes)."""
        r = self.client.http.request("GET", self._p + "/files/" + _quote(path))
        return self.client.http.read(r, max_bytes)

    def download_to(self, path: str, dest: "Union[str, os.PathLike[str]]",
                    max_bytes: Optional[int] = None) -> int:
        """Stream a file of the work dir into the local file dest; its size."""
        r = self.client.http.request("GET", self._p + "/files/" + _quote(path))
        n = 0
        try:
            with open(dest, "wb") as f:
                for c in self.client.http.iter_body(r):
                    n += len(c)
                    if max_bytes is not None and n > max_bytes:
                        raise ProtocolError("%s is larger than max_bytes=%d" % (path, max_bytes))
                    f.write(c)
        finally:
            r.close()
        return n

    def remove(self, path: str) -> None:
        """Delete a file of the work dir."""
        self.client.http.json("DELETE", self._p + "/files/" + _quote(path))

    def figure(self, name: str, max_bytes: int = 256 << 20) -> bytes:
        """A chart of the session by name (``fig-1.png``, from a result event's figures)."""
        r = self.client.http.request("GET", self._p + "/figures/" + _quote(name))
        return self.client.http.read(r, max_bytes)

    # ---------------------------------------------------------------- end

    def delete(self) -> None:
        """Delete the session (its directory, and its kernel when it started one)."""
        try:
            self.client.http.json("DELETE", self._p)
        except NotFoundError:
            pass

    def close(self) -> None:
        if self.owned:
            self.delete()

    def __enter__(self) -> "AgentSession":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return "AgentSession(id=%r, kernel_id=%r)" % (self.id, self.kernel_id)
