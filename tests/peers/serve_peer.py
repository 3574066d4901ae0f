#!/usr/bin/python3
"""Start the REAL jupyter_server (Debian's, 1.23) the way `korch serve` is
started, so the same peers (ws_client.py, gateway_check.py) can be validated
against the reference implementation:

    serve_peer.py [--token T] [--gateway-url URL [--gateway-token GT]] [-- extra args]

prints on stdout one first line `http://127.0.0.1:PORT/?token=TOKEN` once the
server answers GET /api, then runs until SIGTERM/SIGINT or stdin EOF when
--stdin-eof is given (the server and its kernels are shut down then).
jupyter_server's own log goes to stderr.

Also importable: start_jupyter_server(token, gateway_url=None, ...) -> (proc, url).

jupyter_server 1.23 cannot bind --port 0 (it keeps port 0 as its idea of its
port), so a free port is picked here and retried on collision.
"""
import argparse
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

PY = "/usr/bin/python3"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _answers(url, token, timeout=0.5):
    try:
        req = urllib.request.Request(url + "api", headers={"Authorization": "token " + token})
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status == 200 and "version" in json.loads(r.read())
    except Exception:
        return False


def _die_with_parent():
    """jupyter_server gets SIGTERM (and shuts its kernels down) when we die,
    even by SIGKILL from a test runner's timeout."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001
        pass


def start_jupyter_server(token=None, gateway_url=None, gateway_token=None, extra=(),
                         timeout=60.0, stderr=None, root_dir=None):
    """Start jupyter_server; return (Popen, base_url). base_url ends with '/'."""
    token = token or secrets.token_hex(16)
    work = tempfile.mkdtemp(prefix="korch-jps-")
    env = dict(os.environ)
    env.update({
        "JUPYTER_CONFIG_DIR": os.path.join(work, "config"),
        "JUPYTER_RUNTIME_DIR": os.path.join(work, "runtime"),
        "JUPYTER_DATA_DIR": os.path.join(work, "data"),
        "JUPYTER_PLATFORM_DIRS": "0",
        "PYDEVD_DISABLE_FILE_VALIDATION": "1",
        "MPLBACKEND": "module://matplotlib_inline.backend_inline",
    })
    env.pop("JUPYTER_PORT", None)
    last_err = None
    for _attempt in range(5):
        port = free_port()
        argv = [PY, "-m", "jupyter_server",
                "--no-browser", "--ip=127.0.0.1", f"--port={port}",
                "--ServerApp.port_retries=0",
                f"--ServerApp.token={token}",
                f"--ServerApp.root_dir={root_dir or work}",
                "--ServerApp.open_browser=False",
                ]
        if os.geteuid() == 0:
            argv.append("--allow-root")
        if gateway_url:
            argv += [f"--gateway-url={gateway_url}"]
            if gateway_token:
                argv += [f"--GatewayClient.auth_token={gateway_token}"]
            # the default 40 s request timeout / 5 s connect is fine; make kernel
            # starts through the gateway not time out on a loaded machine
            argv += ["--GatewayClient.request_timeout=60"]
        argv += list(extra)
        proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL,
                                stdout=stderr or sys.stderr, stderr=stderr or sys.stderr,
                                preexec_fn=_die_with_parent)
        proc._korch_workdir = work
        url = f"http://127.0.0.1:{port}/"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                last_err = f"jupyter_server exited with {proc.returncode}"
                break
            if _answers(url, token):
                return proc, url, token
            time.sleep(0.1)
        else:
            stop_jupyter_server(proc)
            raise RuntimeError("jupyter_server did not answer within %ss" % timeout)
    raise RuntimeError(last_err or "jupyter_server did not start")


def stop_jupyter_server(proc, timeout=15.0):
    """SIGTERM (jupyter_server shuts its kernels down), then SIGKILL."""
    if proc.poll() is None:
        try:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
    try:
        proc.wait(2)
    except subprocess.TimeoutExpired:
        pass
    shutil.rmtree(getattr(proc, "_korch_workdir", "/nonexistent"), ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--token")
    ap.add_argument("--gateway-url")
    ap.add_argument("--gateway-token")
    ap.add_argument("--stdin-eof", action="store_true", help="also stop when stdin closes")
    ap.add_argument("extra", nargs="*")
    a = ap.parse_args()
    proc, url, token = start_jupyter_server(a.token, a.gateway_url, a.gateway_token, a.extra)
    print(f"{url}?token={token}", flush=True)
    stop = {"now": False}

    def on_sig(signum, frame):
        stop["now"] = True

    signal.signal(signal.SIGTERM, on_sig)
    signal.signal(signal.SIGINT, on_sig)
    try:
        if a.stdin_eof:
            import threading

            def reader():
                sys.stdin.read()
                stop["now"] = True
            threading.Thread(target=reader, daemon=True).start()
        while not stop["now"] and proc.poll() is None:
            time.sleep(0.2)
    finally:
        stop_jupyter_server(proc)


if __name__ == "__main__":
    main()
