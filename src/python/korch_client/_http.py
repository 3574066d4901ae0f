"""HTTP to korch serve: one requests.Session, the token in a header, korch's
error answers turned into exceptions, every body read with a bound."""
from __future__ import annotations

import json
import os
import urllib.parse
from typing import Any, Dict, Iterator, Optional, Tuple

import requests

from .errors import AuthError, ConnectError, HTTPError, KorchUsage, NotFoundError, ProtocolError

#: the default bound on a JSON answer (kernel lists, transcripts)
MAX_JSON_BYTES = 32 << 20
#: the default bound on a downloaded file held in memory
MAX_DOWNLOAD_BYTES = 1 << 30


def split_url(url: Optional[str], token: Optional[str]) -> Tuple[str, str]:
    """The base URL (ending in /) and the token, from what the user gave.

    ``url`` may be the line korch serve prints, ``http://HOST:PORT/?token=T``:
    the token is then taken from it unless ``token`` is given. Without a URL,
    ``KORCH_URL`` is read; without a token, ``KORCH_TOKEN``."""
    url = url or os.environ.get("KORCH_URL") or ""
    if not url:
        raise KorchUsage("no korch serve URL: pass url= or set KORCH_URL (korch serve prints it: "
                         "http://HOST:PORT/?token=TOKEN)")
    p = urllib.parse.urlsplit(url)
    if p.scheme not in ("http", "https") or not p.netloc:
        raise KorchUsage("%r is not an http(s) URL of korch serve" % url)
    q = urllib.parse.parse_qs(p.query)
    if token is None:
        token = (q.get("token") or [""])[0] or os.environ.get("KORCH_TOKEN") or ""
    path = p.path if p.path.endswith("/") else p.path + "/"
    return urllib.parse.urlunsplit((p.scheme, p.netloc, path, "", "")), token


def _message(r: requests.Response) -> str:
    """korch's error message ({"message": ...}), else the status line."""
    try:
        body = r.raw.read(65536, decode_content=True) if r.raw is not None else b""
        j = json.loads(body)
        m = j.get("message") if isinstance(j, dict) else None
        if isinstance(m, str):
            return m[:4000]
    except Exception:  # noqa: BLE001 - not JSON: the reason phrase says it
        pass
    return r.reason or "HTTP error"


class Http:
    """The client's HTTP side. Not thread-safe (one requests.Session)."""

    def __init__(self, base: str, token: str, timeout: float, verify: Any = True,
                 max_json_bytes: int = MAX_JSON_BYTES) -> None:
        self.base = base
        self.token = token
        self.timeout = timeout
        self.max_json_bytes = max_json_bytes
        self.s = requests.Session()
        self.s.verify = verify
        self.s.trust_env = True
        if token:
            self.s.headers["Authorization"] = "token " + token

    def url(self, path: str) -> str:
        return self.base + path.lstrip("/")

    def ws_url(self, path: str) -> str:
        u = self.url(path)
        return "wss" + u[5:] if u.startswith("https") else "ws" + u[4:]

    def request(self, method: str, path: str, *, json_body: Any = None, data: Any = None,
                headers: Optional[Dict[str, str]] = None, stream: bool = True,
                timeout: Optional[float] = None, ok: Tuple[int, ...] = ()) -> requests.Response:
        """Send; an error status raises (unless listed in ok). The body is not
        read yet (stream=True): the caller reads it with a bound."""
        h = dict(headers or {})
        if json_body is not None:
            data = json.dumps(json_body).encode()
            h["Content-Type"] = "application/json"
        elif method == "POST" and data is None:
            data = b""
        try:
            r = self.s.request(method, self.url(path), data=data, headers=h, stream=stream,
                               timeout=self.timeout if timeout is None else timeout, allow_redirects=False)
        except requests.exceptions.RequestException as e:
            raise ConnectError("cannot reach korch serve at %s: %s" % (self.base, e)) from e
        if r.status_code >= 400 and r.status_code not in ok:
            msg = _message(r)
            r.close()
            cls = AuthError if r.status_code in (401, 403) else NotFoundError if r.status_code == 404 else HTTPError
            raise cls(r.status_code, msg, method, "/" + path.lstrip("/"))
        return r

    def read(self, r: requests.Response, limit: int) -> bytes:
        """The whole body, or ProtocolError when it is longer than limit."""
        try:
            n = r.headers.get("Content-Length")
            if n is not None and n.isdigit() and int(n) > limit:
                raise ProtocolError("%s answered %s bytes, more than the %d this client accepts"
                                    % (r.url, n, limit))
            out = bytearray()
            for chunk in r.iter_content(1 << 16):
                out += chunk
                if len(out) > limit:
                    raise ProtocolError("%s answered more than the %d bytes this client accepts" % (r.url, limit))
            return bytes(out)
        except requests.exceptions.RequestException as e:
            raise ConnectError("the answer of %s was cut: %s" % (r.url, e)) from e
        finally:
            r.close()

    def json(self, method: str, path: str, body: Any = None, *, timeout: Optional[float] = None,
             ok: Tuple[int, ...] = ()) -> Any:
        """Send and parse the JSON answer (None for 204 / an empty body)."""
        r = self.request(method, path, json_body=body, timeout=timeout, ok=ok)
        raw = self.read(r, self.max_json_bytes)
        if r.status_code == 204 or not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError as e:
            raise ProtocolError("%s %s answered something that is not JSON: %r" % (method, path, raw[:200])) from e

    def iter_body(self, r: requests.Response, chunk: int = 1 << 16) -> Iterator[bytes]:
        try:
            for c in r.iter_content(chunk):
                yield c
        except requests.exceptions.RequestException as e:
            raise ConnectError("the stream of %s was cut: %s" % (r.url, e)) from e

    def close(self) -> None:
        self.s.close()
