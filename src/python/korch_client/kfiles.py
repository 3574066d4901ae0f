"""Files of a plain kernel, moved through the kernel itself.

korch serve has file routes for agent sessions only (AgentSession.upload /
download / files); a kernel started with /api/kernels has none. For a
Python kernel, :attr:`Kernel.files` moves files by running small, silent
executions in it (base64 in chunks of 4 MiB), relative to the kernel's
working directory, with what the kernel itself may read and write. What
comes back is the kernel's word: checked (JSON shapes, base64, sizes) and
bounded like any output, never evaluated."""
from __future__ import annotations

import base64
import binascii
from typing import TYPE_CHECKING, Any, Dict, List, Optional

from .agent import Data, FileInfo
from .errors import KorchUsage, ProtocolError

if TYPE_CHECKING:
    from .kernel import Kernel

CHUNK = 4 << 20
MIME = "application/x-korch-file+json"

_READ = """\
def _korch_read(p, off, n):
    import base64, os
    from IPython.display import publish_display_data
    with open(p, 'rb') as f:
        size = os.fstat(f.fileno()).st_size
        f.seek(off)
        b = f.read(n)
    publish_display_data({%r: {'size': size, 'data': base64.b64encode(b).decode()}})
_korch_read(%r, %d, %d)
del _korch_read
"""

_LIST = """\
def _korch_list(top, limit):
    import os
    from IPython.display import publish_display_data
    out = []
    for d, dirs, files in os.walk(top):
        dirs.sort()
        for n in sorted(files):
            p = os.path.join(d, n)
            try:
                st = os.lstat(p)
            except OSError:
                continue
            out.append({'path': os.path.relpath(p, top), 'size': st.st_size, 'link': os.path.islink(p)})
            if len(out) >= limit:
                break
        if len(out) >= limit:
            break
    publish_display_data({%r: {'files': out}})
_korch_list(%r, %d)
del _korch_list
"""


class KernelFiles:
    """``kernel.files``: upload, download, list and remove files of a Python
    kernel's working directory, through the kernel (see the module)."""

    def __init__(self, kernel: "Kernel") -> None:
        self.k = kernel

    def _run(self, code: str, timeout: float) -> Optional[Dict[str, Any]]:
        if self.k.language != "python":
            raise KorchUsage("files through a kernel need a Python kernel (this one is %r); an agent session "
                             "has file routes for any kernel" % self.k.language)
        ex = self.k.run_code(code, silent=True, store_history=False, timeout=timeout,
                             max_output_bytes=2 * CHUNK + (1 << 20), raise_on_error=True)
        for r in ex.results:
            v = r.data.get(MIME)
            if v is not None:
                if not isinstance(v, dict):
                    raise ProtocolError("the kernel's file answer is not an object")
                return v
        return None

    def upload(self, path: str, data: Data, timeout: float = 120.0) -> int:
        """Write data to path (relative to the kernel's working directory,
        parent dirs made); the bytes written. CodeError when the kernel cannot."""
        if not isinstance(path, str) or not path or "\0" in path:
            raise KorchUsage("%r is not a file path" % (path,))
        if isinstance(data, str):
            data = data.encode("utf-8")
        raw = data.read() if hasattr(data, "read") else bytes(data)
        if not isinstance(raw, bytes):
            raise KorchUsage("upload data must be bytes, str or a binary file")
        first = True
        for off in range(0, max(len(raw), 1), CHUNK):
            b64 = base64.b64encode(raw[off:off + CHUNK]).decode()
            self._run("import base64 as _b, os as _o\n"
                      "_o.makedirs(_o.path.dirname(%r) or '.', exist_ok=True)\n"
                      "with open(%r, %r) as _f: _f.write(_b.b64decode(%r))\ndel _b, _o, _f\n"
                      % (path, path, "wb" if first else "ab", b64), timeout)
            first = False
        return len(raw)

    def download(self, path: str, max_bytes: int = 1 << 30, timeout: float = 120.0) -> bytes:
        """A file's bytes (ProtocolError past max_bytes or on a bad answer)."""
        out = bytearray()
        size: Optional[int] = None
        while size is None or len(out) < size:
            v = self._run(_READ % (MIME, path, len(out), CHUNK), timeout) or {}
            s, d = v.get("size"), v.get("data")
            if not isinstance(s, int) or isinstance(s, bool) or s < 0 or not isinstance(d, str):
                raise ProtocolError("the kernel's answer for %r has no size and data" % path)
            if s > max_bytes:
                raise ProtocolError("%s is %d bytes, more than max_bytes=%d" % (path, s, max_bytes))
            try:
                chunk = base64.b64decode(d, validate=True)
            except (binascii.Error, ValueError) as e:
                raise ProtocolError("the kernel's data for %r is not base64" % path) from e
            if len(chunk) > CHUNK or len(out) + len(chunk) > s:
                raise ProtocolError("the kernel sent more of %r than it said it had" % path)
            size = s
            out += chunk
            if not chunk and len(out) < size:
                raise ProtocolError("%r shrank while it was read" % path)
        return bytes(out)

    def list(self, path: str = ".", limit: int = 10000, timeout: float = 60.0) -> List[FileInfo]:
        """Files under path (recursive, symlinks listed not followed), at most limit."""
        v = self._run(_LIST % (MIME, path, limit), timeout) or {}
        items = v.get("files")
        if not isinstance(items, list):
            raise ProtocolError("the kernel's file list is not a list")
        out = []
        for it in items[:limit]:
            if isinstance(it, dict) and isinstance(it.get("path"), str):
                size = it.get("size")
                out.append(FileInfo(path=it["path"], size=size if isinstance(size, int) and not isinstance(size, bool)
                                    else None, raw=it))
        return out

    def remove(self, path: str, timeout: float = 60.0) -> None:
        """Delete a file (CodeError with FileNotFoundError when it is not there)."""
        self._run("import os as _o\n_o.remove(%r)\ndel _o\n" % (path,), timeout)
