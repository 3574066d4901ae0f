"""korch_client: the Python client of ``korch serve``.

Kernels, code and their outputs as data; agent sessions with a live
iterator of events; files (a session's, or a Python kernel's through the
kernel). See docs/python.md::

    from korch_client import Client
    with Client("http://127.0.0.1:8888/?token=T") as c, c.start_kernel() as k:
        ex = k.run_code("import sys; print(sys.version); 6 * 7")
        ex.stdout, ex.text          # ('3.11.2 ...\\n', '42')

Depends on requests and websocket-client only (Debian 12: python3-requests,
python3-websocket). A kernel's outputs are untrusted data: they are parsed
as JSON, bounded, and never evaluated.
"""
from .agent import AgentSession, FileInfo, Turn
from .client import Client, Sandbox
from .errors import (AuthError, CodeError, ConnectError, ExecutionTimeout, HTTPError, KernelDiedError,
                     KernelGoneError, KorchError, KorchUsage, NotFoundError, ProtocolError)
from .kernel import Kernel
from .kfiles import KernelFiles
from .outputs import Execution, ExecutionError, Result, strip_ansi
from .sse import Event

__version__ = "0.1.0"

__all__ = [
    "AgentSession", "AuthError", "Client", "CodeError", "ConnectError", "Event", "Execution", "ExecutionError",
    "ExecutionTimeout", "FileInfo", "HTTPError", "Kernel", "KernelDiedError", "KernelFiles", "KernelGoneError", "KorchError",
    "KorchUsage", "NotFoundError", "ProtocolError", "Result", "Sandbox", "Turn", "strip_ansi",
]
