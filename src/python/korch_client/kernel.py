"""A kernel of korch serve: run code over its websocket, get structured
outputs; interrupt, restart and shut it down over REST."""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional

from . import _wire
from .errors import (ExecutionTimeout, KernelDiedError, KernelGoneError, KorchError, KorchUsage, NotFoundError,
                     ProtocolError)
from .kfiles import KernelFiles
from .outputs import Collector, Execution, ExecutionError, Result

if TYPE_CHECKING:
    from .client import Client

#: the default bound on one websocket message (korch serve's own default)
MAX_MESSAGE_BYTES = 64 << 20
#: the default bound on the outputs one execution keeps
MAX_OUTPUT_BYTES = 64 << 20
MAX_OUTPUTS = 10000


class Kernel:
    """A kernel on korch serve. Get one from :meth:`Client.start_kernel` (or
    :meth:`Client.kernel` for a running one); use it as a context manager to
    shut it down at the end::

        with client.start_kernel() as k:
            print(k.run_code("6 * 7").text)     # '42'

    A Kernel holds one websocket and is not thread-safe: use one per thread.
    """

    def __init__(self, client: "Client", model: Dict[str, Any], owned: bool = True,
                 max_message_bytes: int = MAX_MESSAGE_BYTES) -> None:
        kid = model.get("id") if isinstance(model, dict) else None
        if not isinstance(kid, str) or not kid or "/" in kid:
            raise ProtocolError("korch serve answered a kernel without a usable id: %.200r" % (model,))
        self.client = client
        self.id: str = kid
        name = model.get("name")
        self.name: str = name if isinstance(name, str) else ""
        self.model: Dict[str, Any] = model
        self.owned = owned  #: shut down by close() / the context manager's end
        self.max_message_bytes = max_message_bytes
        self._ch: Optional[_wire.Channels] = None
        self._dead = False
        self._language: Optional[str] = None
        self.restarts = 0  #: times korch restarted this kernel after it died (seen between executions)

    # ---------------------------------------------------------------- websocket

    def _channels(self) -> _wire.Channels:
        if self._dead:
            raise self._gone(KernelGoneError("kernel %s is dead (korch could not restart it)" % self.id))
        if self._ch is None or self._ch.closed:
            self._ch = _wire.Channels(self.client.http.ws_url("api/kernels/%s/channels" % self.id),
                                      self.client.http.token, self.max_message_bytes, self.client.timeout)
            self._wait_ready(self.client.timeout)
        return self._ch

    def _gone(self, e: KorchError) -> KorchError:
        """Why the websocket went: the kernel was deleted, or the connection alone."""
        try:
            self.client.http.json("GET", "api/kernels/" + self.id)
        except NotFoundError:
            return KernelGoneError("kernel %s was shut down (it is no longer on korch serve)" % self.id)
        except Exception:  # noqa: BLE001 - the original error says enough
            pass
        return e

    def _wait_ready(self, timeout: float) -> Dict[str, Any]:
        """kernel_info_request, resent every second until a reply comes (a
        kernel that just (re)started may miss the first); its content."""
        ch = self._ch
        assert ch is not None
        deadline = time.monotonic() + timeout
        mids = set()
        while time.monotonic() < deadline:
            mids.add(ch.send("shell", "kernel_info_request", {}))
            until = min(deadline, time.monotonic() + 1.0)
            while time.monotonic() < until:
                m = ch.recv(until - time.monotonic())
                if m is None or isinstance(m, _wire._Oversize):
                    continue
                if m["header"]["msg_type"] == "kernel_info_reply" and m["parent_header"].get("msg_id") in mids:
                    c: Dict[str, Any] = m["content"]
                    li = c.get("language_info")
                    if isinstance(li, dict) and isinstance(li.get("name"), str):
                        self._language = li["name"]
                    return c
        raise KernelGoneError("kernel %s did not answer kernel_info_request within %.0f s" % (self.id, timeout))

    def kernel_info(self) -> Dict[str, Any]:
        """The kernel's kernel_info_reply content (language_info, banner, ...)."""
        self._channels()
        try:
            return self._wait_ready(self.client.timeout)
        except KernelGoneError as e:
            raise self._gone(e) from e

    @property
    def language(self) -> Optional[str]:
        """The kernel's language (language_info.name), once connected."""
        if self._language is None:
            self.kernel_info()
        return self._language

    # ---------------------------------------------------------------- running code

    def run_code(self, code: str, *, timeout: Optional[float] = 300.0,
                 on_stdout: Optional[Callable[[str], None]] = None,
                 on_stderr: Optional[Callable[[str], None]] = None,
                 on_result: Optional[Callable[[Result], None]] = None,
                 on_error: Optional[Callable[[ExecutionError], None]] = None,
                 on_input: Optional[Callable[[str, bool], str]] = None,
                 raise_on_error: bool = False, interrupt_on_timeout: bool = True,
                 silent: bool = False, store_history: bool = True, stop_on_error: bool = False,
                 max_output_bytes: int = MAX_OUTPUT_BYTES, max_outputs: int = MAX_OUTPUTS) -> Execution:
        """Run code in the kernel (its state persists between calls) and
        return what it produced as an :class:`Execution`.

        The call returns when the kernel has both replied and gone idle.
        A failed execution is a result (``execution.error``), unless
        ``raise_on_error`` (then :class:`CodeError`). The ``on_*`` callbacks
        see outputs as they arrive; ``on_input(prompt, password)`` answers
        the code's ``input()`` (without it, ``input()`` fails in the kernel).

        ``timeout`` (seconds, None = none): :class:`ExecutionTimeout` when
        exceeded, after interrupting the kernel unless ``interrupt_on_timeout``
        is False. :class:`KernelDiedError` when the kernel died meanwhile,
        :class:`KernelGoneError` when it was shut down, :class:`ProtocolError`
        when a message about this execution was malformed (the kernel stays
        usable). At most ``max_output_bytes`` of output and ``max_outputs``
        outputs are kept (``truncated`` says when more came).

        ``stop_on_error`` is False by default: with True, ipykernel aborts the
        requests that reach it for a while after an error, unrun. A request
        the kernel aborted unrun (after someone else's error) is sent again,
        up to 3 times; then the Execution's status is ``aborted``."""
        if not isinstance(code, str):
            raise KorchUsage("code must be a str, not %s" % type(code).__name__)
        ch = self._channels()
        try:
            self._drain(ch)
        except KernelGoneError as e:
            raise self._gone(e) from e
        deadline = None if timeout is None else time.monotonic() + timeout
        for attempt in range(4):
            ch = self._channels()
            ex = Execution(code=code)
            col = Collector(ex, max_output_bytes, max_outputs, on_stdout, on_stderr, on_result, on_error)
            left = None if deadline is None else max(deadline - time.monotonic(), 0.001)
            try:
                ex.msg_id = ch.send("shell", "execute_request", {
                    "code": code, "silent": silent, "store_history": store_history, "user_expressions": {},
                    "allow_stdin": on_input is not None, "stop_on_error": stop_on_error})
                self._collect(ch, ex, col, left, on_input, interrupt_on_timeout)
            except KernelGoneError as e:
                raise self._gone(e) from e
            # "aborted" without a single output: ipykernel dropped the request
            # unrun, as it does for a while after an error with stop_on_error
            # (another client's, or an earlier one's); the code never ran, so
            # sending it again is safe
            if ex.status != "aborted" or ex.outputs or ex.execution_count is not None or attempt == 3:
                break
            time.sleep(0.05 * 2 ** attempt)
        col.finish()
        if raise_on_error:
            ex.raise_for_error()
        return ex

    def _drain(self, ch: _wire.Channels) -> None:
        """Read what came since the last request (late outputs, korch's
        restarting / dead notices), so that it is not taken for this one's."""
        while ch.pending():
            m = ch.recv(0.05)
            if m is None:
                return
            if isinstance(m, dict) and m["channel"] == "iopub" and m["header"]["msg_type"] == "status":
                state = m["content"].get("execution_state")
                if state == "restarting":
                    self.restarts += 1
                elif state == "dead":
                    self._dead = True
                    raise KernelGoneError("kernel %s died and korch could not restart it" % self.id)

    def _collect(self, ch: _wire.Channels, ex: Execution, col: Collector, timeout: Optional[float],
                 on_input: Optional[Callable[[str, bool], str]], interrupt_on_timeout: bool) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        replied = idle = False
        bad: Optional[ProtocolError] = None
        while not (replied and idle):
            left = 3600.0 if deadline is None else deadline - time.monotonic()
            if left <= 0:
                interrupted = interrupt_on_timeout and self._interrupt_and_wait(ch, ex.msg_id)
                raise ExecutionTimeout("the code ran longer than %g s%s%s" % (
                    timeout or 0, "; the kernel was interrupted" if interrupted else
                    "; the kernel may still be running it", (" (%d oversized messages were dropped)"
                                                             % ex.dropped_messages) if ex.dropped_messages else ""),
                    interrupted)
            m = ch.recv(min(left, 3600.0))
            if m is None:
                continue
            if isinstance(m, _wire._Oversize):
                ex.dropped_messages += 1
                ex.truncated = True
                continue
            mt = m["header"]["msg_type"]
            parent = m["parent_header"].get("msg_id")
            if m["channel"] == "iopub" and mt == "status" and parent != ex.msg_id:
                state = m["content"].get("execution_state")
                if state == "restarting":
                    self.restarts += 1
                    raise KernelDiedError("the kernel died while running this code; korch restarted it "
                                          "(its variables are gone)", restarted=True)
                if state == "dead":  # it died for good, or was shut down (DELETE, culling)
                    self._dead = True
                    raise self._gone(KernelDiedError("the kernel died while running this code and korch could "
                                                     "not restart it", restarted=False))
            if parent != ex.msg_id:
                continue  # another request's (an earlier execution's late output, another client's)
            try:
                if m["channel"] == "iopub":
                    if mt == "status":
                        if m["content"].get("execution_state") == "idle":
                            idle = True
                    else:
                        col.add(mt, m["content"], sum(len(str(v)) for v in m["content"].values()))
                elif m["channel"] == "shell" and mt == "execute_reply":
                    col.reply(m["content"])
                    replied = True
                elif m["channel"] == "stdin" and mt == "input_request":
                    c = m["content"]
                    prompt = c.get("prompt") if isinstance(c.get("prompt"), str) else ""
                    answer = on_input(prompt, bool(c.get("password"))) if on_input else ""
                    ch.send("stdin", "input_reply", {"value": str(answer)})
            except ProtocolError as e:
                bad = bad or e  # read on to the end, so the next execution starts clean
        if bad is not None:
            raise bad

    def _interrupt_and_wait(self, ch: _wire.Channels, mid: str, wait: float = 10.0) -> bool:
        """Interrupt; True when the execution then ended within wait seconds."""
        try:
            self.interrupt()
        except Exception:  # noqa: BLE001 - the timeout is the error to report
            return False
        deadline = time.monotonic() + wait
        replied = idle = False
        while time.monotonic() < deadline and not (replied and idle):
            try:
                m = ch.recv(deadline - time.monotonic())
            except (KernelGoneError, ProtocolError):
                return False
            if isinstance(m, dict) and m["parent_header"].get("msg_id") == mid:
                t = m["header"]["msg_type"]
                replied = replied or t == "execute_reply"
                idle = idle or (t == "status" and m["content"].get("execution_state") == "idle")
        return replied and idle

    @property
    def files(self) -> "KernelFiles":
        """This kernel's working directory, through the kernel (Python kernels;
        korch serve has file routes for agent sessions only): upload,
        download, list, remove."""
        return KernelFiles(self)

    # ---------------------------------------------------------------- REST

    def interrupt(self) -> None:
        """Interrupt what the kernel runs (a running run_code then returns with
        a KeyboardInterrupt error)."""
        self.client.http.json("POST", "api/kernels/%s/interrupt" % self.id, {})

    def restart(self, timeout: Optional[float] = None) -> None:
        """Restart the kernel (a new process: every variable is gone) and wait
        until it answers."""
        self.model = self.client.http.json("POST", "api/kernels/%s/restart" % self.id, {},
                                           timeout=timeout or max(self.client.timeout, 60)) or self.model
        self._dead = False
        if self._ch is not None and not self._ch.closed:
            try:
                self._wait_ready(timeout or max(self.client.timeout, 60))
            except KernelGoneError:
                self._ch.close()
        self._channels()

    def info(self) -> Dict[str, Any]:
        """The kernel's model on the server: id, name, execution_state, ..."""
        self.model = self.client.http.json("GET", "api/kernels/" + self.id)
        return self.model

    def shutdown(self) -> None:
        """Shut the kernel down on the server (idempotent)."""
        self.close_channels()
        try:
            self.client.http.json("DELETE", "api/kernels/" + self.id)
        except NotFoundError:
            pass
        self._dead = True

    def close_channels(self) -> None:
        """Close the websocket only; the kernel keeps running on the server."""
        if self._ch is not None:
            self._ch.close()
            self._ch = None

    def close(self) -> None:
        """Shut the kernel down if this object started it, else close its websocket."""
        if self.owned:
            self.shutdown()
        else:
            self.close_channels()

    def __enter__(self) -> "Kernel":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return "Kernel(id=%r, name=%r)" % (self.id, self.name)
