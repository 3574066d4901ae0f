"""The entry points: :class:`Client` (a korch serve) and :class:`Sandbox`
(a kernel of one, E2B's ``Sandbox().run_code(...)`` shape)."""
from __future__ import annotations

import base64
from typing import Any, Dict, List, Mapping, Optional, Union

from ._http import MAX_JSON_BYTES, Http, split_url
from .agent import AgentSession
from .errors import KorchUsage, ProtocolError
from .kernel import MAX_MESSAGE_BYTES, Kernel
from .kfiles import KernelFiles
from .outputs import Execution


class Client:
    """A connection to korch serve.

    ``url`` is the server's address, or the line ``korch serve`` prints
    (``http://127.0.0.1:8888/?token=T``: the token is taken from it);
    without it ``KORCH_URL`` is read, and without ``token`` ``KORCH_TOKEN``.
    ``timeout`` bounds each HTTP request and websocket wait (seconds), not
    how long code may run (that is ``run_code``'s own timeout)::

        with Client("http://127.0.0.1:8888/?token=T") as c:
            with c.start_kernel() as k:
                print(k.run_code("print('hi')").stdout)

    Not thread-safe: use one Client per thread."""

    def __init__(self, url: Optional[str] = None, token: Optional[str] = None, *, timeout: float = 60.0,
                 verify: Union[bool, str] = True, max_json_bytes: int = MAX_JSON_BYTES,
                 max_message_bytes: int = MAX_MESSAGE_BYTES) -> None:
        base, tok = split_url(url, token)
        self.timeout = timeout
        self.max_message_bytes = max_message_bytes
        self.http = Http(base, tok, timeout, verify, max_json_bytes)

    @property
    def url(self) -> str:
        return self.http.base

    def version(self) -> str:
        """korch serve's version (GET /api, which needs no token)."""
        j = self.http.json("GET", "api")
        v = j.get("version") if isinstance(j, dict) else None
        if not isinstance(v, str):
            raise ProtocolError("GET /api answered no version: %.200r" % (j,))
        return v

    def status(self) -> Dict[str, Any]:
        """The server's activity (GET /api/status); also checks the token."""
        return self.http.json("GET", "api/status") or {}

    def kernelspecs(self) -> Dict[str, Any]:
        """``{"default": NAME, "kernelspecs": {NAME: {...}}}`` as jupyter_server has it."""
        return self.http.json("GET", "api/kernelspecs") or {}

    # ---------------------------------------------------------------- kernels

    def kernels(self) -> List[Dict[str, Any]]:
        """The running kernels' models."""
        j = self.http.json("GET", "api/kernels")
        if not isinstance(j, list):
            raise ProtocolError("GET /api/kernels answered no list")
        return [k for k in j if isinstance(k, dict)]

    def start_kernel(self, name: Optional[str] = None, *, env: Optional[Mapping[str, str]] = None,
                     path: Optional[str] = None, timeout: Optional[float] = None) -> Kernel:
        """Start a kernel (of kernelspec ``name``, else the server's default)
        and connect to it. ``env``: variables for the kernel (korch passes
        only ``KERNEL_*`` ones, as Kernel Gateway does)."""
        body: Dict[str, Any] = {}
        if name:
            body["name"] = name
        if env:
            body["env"] = dict(env)
        if path:
            body["path"] = path
        model = self.http.json("POST", "api/kernels", body, timeout=timeout or max(self.timeout, 120))
        k = Kernel(self, model, owned=True, max_message_bytes=self.max_message_bytes)
        try:
            k._channels()
        except BaseException:
            k.shutdown()
            raise
        return k

    def kernel(self, kernel_id: str) -> Kernel:
        """A running kernel by id (not shut down when closed: you did not start it)."""
        if not isinstance(kernel_id, str) or not kernel_id or "/" in kernel_id:
            raise KorchUsage("%r is not a kernel id" % (kernel_id,))
        return Kernel(self, self.http.json("GET", "api/kernels/" + kernel_id), owned=False,
                      max_message_bytes=self.max_message_bytes)

    # ---------------------------------------------------------------- agent sessions

    def create_session(self, *, llm: Optional[str] = None, kernel_name: Optional[str] = None,
                       kernel_id: Optional[str] = None,
                       files: Optional[Mapping[str, Union[bytes, str]]] = None) -> AgentSession:
        """Create an agent session (the server needs ``--llm``, or pass ``llm``
        as ``provider:model`` among those it has keys for). ``files``: name ->
        content, put into the work dir before the first turn. ``kernel_id``:
        work in that running kernel (a notebook's) instead of a new one."""
        body: Dict[str, Any] = {}
        if llm:
            body["llm"] = llm
        if kernel_name:
            body["kernel_name"] = kernel_name
        if kernel_id:
            body["kernel_id"] = kernel_id
        if files:
            fl = []
            for name, content in files.items():
                if isinstance(content, str):
                    fl.append({"name": name, "content": content, "format": "text"})
                else:
                    fl.append({"name": name, "content": base64.b64encode(bytes(content)).decode(), "format": "base64"})
            body["files"] = fl
        model = self.http.json("POST", "api/agent/sessions", body, timeout=max(self.timeout, 120))
        return AgentSession(self, model, owned=True)

    def sessions(self) -> List[Dict[str, Any]]:
        """The agent sessions (also those a previous server left on disk)."""
        j = self.http.json("GET", "api/agent/sessions")
        items = j.get("sessions") if isinstance(j, dict) else j
        if not isinstance(items, list):
            raise ProtocolError("GET /api/agent/sessions answered no list")
        return [s for s in items if isinstance(s, dict)]

    def session(self, session_id: str) -> AgentSession:
        """An existing agent session by id (not deleted when closed)."""
        if not isinstance(session_id, str) or not session_id or "/" in session_id:
            raise KorchUsage("%r is not a session id" % (session_id,))
        return AgentSession(self, self.http.json("GET", "api/agent/sessions/" + session_id), owned=False)

    # ---------------------------------------------------------------- end

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return "Client(%r)" % self.http.base


class Sandbox:
    """A kernel of its own on korch serve, in the shape E2B's users know::

        from korch_client import Sandbox
        with Sandbox("http://127.0.0.1:8888/?token=T") as sbx:
            ex = sbx.run_code("import math; math.pi")
            print(ex.text)                      # '3.141592653589793'

    ``Sandbox()`` with no URL reads ``KORCH_URL`` / ``KORCH_TOKEN``. The
    kernel is shut down by :meth:`kill` or at the end of the ``with``."""

    def __init__(self, url: Optional[str] = None, token: Optional[str] = None, *,
                 kernel_name: Optional[str] = None, timeout: float = 60.0, **client_options: Any) -> None:
        self.client = Client(url, token, timeout=timeout, **client_options)
        try:
            self.kernel = self.client.start_kernel(kernel_name)
        except BaseException:
            self.client.close()
            raise

    @property
    def id(self) -> str:
        return self.kernel.id

    def run_code(self, code: str, **options: Any) -> Execution:
        """Kernel.run_code in this sandbox's kernel."""
        return self.kernel.run_code(code, **options)

    @property
    def files(self) -> KernelFiles:
        """The kernel's working directory: upload, download, list, remove (Kernel.files)."""
        return self.kernel.files

    def interrupt(self) -> None:
        self.kernel.interrupt()

    def restart(self) -> None:
        self.kernel.restart()

    def kill(self) -> None:
        """Shut the kernel down and close the connection."""
        try:
            self.kernel.shutdown()
        finally:
            self.client.close()

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.kill()
