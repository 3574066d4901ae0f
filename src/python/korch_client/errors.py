"""The exceptions of korch_client.

Every error the library raises is a :class:`KorchError`; catch that to catch
them all. The others say what went wrong and what to do about it:

- :class:`HTTPError` (and :class:`AuthError`, :class:`NotFoundError`):
  korch serve answered a request with an error status; ``status`` and the
  server's own ``message`` are kept.
- :class:`KorchUsage` (also a ValueError): a call made wrongly (no URL,
  a bad argument).
- :class:`ConnectError`: korch serve could not be reached at all.
- :class:`ProtocolError`: something from the other side did not have the
  shape it must have (a websocket frame, a kernel message, a server-sent
  event, a JSON body), or was larger than the client accepts. A kernel's
  messages are untrusted data: a kernel can send anything, and this is what
  it gets.
- :class:`KernelDiedError`: the kernel died while running your code; korch
  restarted it (its variables are gone) or gave up (``restarted`` False).
- :class:`KernelGoneError`: the kernel is not there any more (shut down,
  culled, or its connection closed).
- :class:`ExecutionTimeout`: code ran longer than the timeout you gave.
- :class:`CodeError`: your code raised (only from
  :meth:`Execution.raise_for_error` or ``run_code(..., raise_on_error=True)``;
  by default a failed execution is a result, not an exception).
"""
from __future__ import annotations

from typing import List, Optional


class KorchError(Exception):
    """Base class of every error korch_client raises."""


class KorchUsage(KorchError, ValueError):
    """A call the library cannot make as asked: no URL, a bad argument."""


class ConnectError(KorchError):
    """korch serve could not be reached (refused, DNS, TLS, timeout)."""


class HTTPError(KorchError):
    """korch serve answered with an error status.

    ``status`` is the HTTP status, ``message`` korch's own explanation (its
    JSON ``message``, else the status line), ``method`` and ``path`` the
    request."""

    def __init__(self, status: int, message: str, method: str = "", path: str = "") -> None:
        self.status = status
        self.message = message
        self.method = method
        self.path = path
        where = ("%s %s: " % (method, path)) if method else ""
        super().__init__("%s%d %s" % (where, status, message))


class AuthError(HTTPError):
    """401 / 403: the token is missing or wrong (korch serve prints the right
    one in its first line, ``http://HOST:PORT/?token=TOKEN``)."""


class NotFoundError(HTTPError):
    """404: no such kernel, session, file or route."""


class ProtocolError(KorchError):
    """Data from the server or the kernel did not have the required shape or
    size: a bad websocket frame, a malformed kernel message, an SSE event that
    is not JSON, an answer larger than the client's bound."""


class KernelGoneError(KorchError):
    """The kernel is gone: shut down, culled, or its websocket closed."""


class KernelDiedError(KorchError):
    """The kernel died while running the code.

    ``restarted`` is True when korch restarted it (the kernel is usable again,
    with none of its variables), False when korch says it is dead for good."""

    def __init__(self, message: str, restarted: bool) -> None:
        self.restarted = restarted
        super().__init__(message)


class ExecutionTimeout(KorchError):
    """The code ran longer than the timeout. ``interrupted`` says whether the
    kernel was interrupted (and answered) afterwards, so it is free again."""

    def __init__(self, message: str, interrupted: bool) -> None:
        self.interrupted = interrupted
        super().__init__(message)


class CodeError(KorchError):
    """The code raised an exception in the kernel.

    ``ename``, ``evalue`` and ``traceback`` are the kernel's (untrusted
    text; ``traceback`` lines may hold ANSI colour escapes)."""

    def __init__(self, ename: str, evalue: str, traceback: Optional[List[str]] = None) -> None:
        self.ename = ename
        self.evalue = evalue
        self.traceback = list(traceback or [])
        super().__init__("%s: %s" % (ename, evalue))
