"""The Python client (src/python/korch_client) against a live korch serve
with real kernels: code, structured outputs, interrupt / restart /
shutdown, HTTP errors, and the kernel as the attacker (malformed messages,
bad base64, floods, oversized messages, a death).

    pyclient_kernel.py --url 'http://127.0.0.1:PORT/?token=T' [--src DIR]

--src DIR puts DIR (src/python) first on sys.path; without it korch_client
must be installed (tests/test_pyclient.c runs it from a venv it pip-installed
the package into). Prints {"ok", "failures", "details"} as its last line.
"""
import base64
import os
import sys
import threading
import time

from pyclient_harness import DETAILS, FAIL, check, run


def raises(exc, fn, what):
    """fn() raised exc; the exception (or None)."""
    try:
        got = fn()
    except exc as e:  # noqa: BLE001
        return e
    except Exception as e:  # noqa: BLE001
        FAIL.append("%s: raised %s %s, expected %s" % (what, type(e).__name__, e, exc.__name__))
        return None
    FAIL.append("%s: did not raise %s (returned %.300r)" % (what, exc.__name__, got))
    return None


def codec(kc):
    """The websocket codec and the SSE parser on hostile bytes, no server."""
    from korch_client import _wire, sse
    good = _wire.encode("iopub", {"msg_type": "stream", "msg_id": "1"}, {}, {}, {"name": "stdout", "text": "x"}, [b"B"])
    m = _wire.decode(good)
    check(m["channel"] == "iopub" and m["content"]["text"] == "x" and m["buffers"] == [b"B"], "v1 round trip: %r" % m)
    bad = {"short": good[:5], "count": b"\xff" * 8 + good[8:], "offsets": good[:8] + good[16:24] + good[8:16] + good[24:],
           "notjson": good.replace(b'"x"', b"'x'"), "text": "a text frame",
           "list": _wire.encode("iopub", {"msg_type": "s"}, {}, {}, {}).replace(b"{}", b"[]", 1),
           "notype": _wire.encode("iopub", {"msg_id": "1"}, {}, {}, {})}
    for name, data in bad.items():
        e = raises(kc.ProtocolError, lambda d=data: _wire.decode(d), "decode(%s)" % name)
        check(e is None or len(str(e)) < 300, "decode(%s): a long message" % name)
    p = sse.SseParser(max_event_bytes=1000)
    stream = b'id: 1\r\nevent: text\r\ndata: {"event":"text",\r\ndata: "text":"a"}\r\n\r\n: keepalive\n\nid: 2\revent: done\rdata: {"event":"done"}\r\r: end\n'
    evs = [e for i in range(len(stream)) for e in p.feed(stream[i:i + 1])]
    check([(e.id, e.event, e.text) for e in evs] == [(1, "text", "a"), (2, "done", None)], "SSE split byte by byte: %r" % evs)
    raises(kc.ProtocolError, lambda: list(sse.SseParser(100).feed(b"data: " + b"x" * 200 + b"\n")), "SSE over the bound")
    raises(kc.ProtocolError, lambda: list(sse.SseParser(100).feed(b"data: " + b"x" * 200)), "SSE line over the bound")
    raises(kc.ProtocolError, lambda: list(sse.SseParser().feed(b"event: text\ndata: nope\n\n")), "SSE data not JSON")
    raises(kc.ProtocolError, lambda: list(sse.SseParser().feed(b'event: done\ndata: {"event":"text"}\n\n')),
           "SSE data naming another event")


def outputs(kc, k):
    ex = k.run_code("import sys\nprint('out', 1)\nprint('err', file=sys.stderr)\n6 * 7")
    check(ex.ok and ex.stdout == "out 1\n" and ex.stderr == "err\n" and ex.text == "42", "streams and value: %r" % ex)
    check(isinstance(ex.execution_count, int) and ex.outputs[-1]["output_type"] == "execute_result",
          "execution_count / outputs: %r" % ex.outputs)
    ex = k.run_code("x = 41")
    check(ex.ok and ex.text is None and not ex.results, "no value: %r" % ex)
    check(k.run_code("x + 1").text == "42", "state persists between calls")
    ex = k.run_code("def f():\n    raise ValueError('bad %d' % x)\nf()")
    check(ex.status == "error" and ex.error and ex.error.ename == "ValueError" and ex.error.evalue == "bad 41",
          "error: %r" % (ex.error,))
    check(ex.error and "\x1b" not in ex.error.traceback_text and "f()" in ex.error.traceback_text, "traceback_text")
    # ipykernel aborts, unrun, what is queued behind an error with
    # stop_on_error (here another client's request on the same socket): the
    # client sends it again, so the call runs
    for i in range(3):
        k._channels().send("shell", "execute_request", {"code": "import time; time.sleep(0.3); 1/0", "silent": False,
                                                         "store_history": False, "stop_on_error": True})
        ex = k.run_code("'after %d'" % i)
        check(ex.ok and ex.text == "'after %d'" % i, "the call queued behind a stop_on_error error: %s" % ex.status)
    e = raises(kc.CodeError, lambda: k.run_code("1/0", raise_on_error=True), "raise_on_error")
    check(e is None or e.ename == "ZeroDivisionError", "CodeError.ename")
    # rich results by MIME; a real matplotlib chart as PNG bytes
    ex = k.run_code("from IPython.display import display, HTML, Markdown, JSON\n"
                    "display(HTML('<b>h</b>')); display(Markdown('*m*')); display(JSON({'a': [1, 2]}))\n"
                    "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2]); plt.show()")
    kinds = [r.formats() for r in ex.results]
    check(len(ex.results) == 4 and ex.results[0].html == "<b>h</b>" and ex.results[1].markdown == "*m*"
          and ex.results[2].json == {"a": [1, 2]}, "HTML / Markdown / JSON results: %r" % kinds)
    png = ex.results[3].png if len(ex.results) == 4 else None
    check(png and png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 1000, "PNG bytes: %r" % (png[:16] if png else png))
    DETAILS["png_bytes"] = len(png or b"")
    # display updates and clear_output
    ex = k.run_code("from IPython.display import display, clear_output\nh = display('one', display_id=True)\n"
                    "h.update('two')\nprint('gone'); clear_output(); print('kept')")
    check(ex.results and ex.results[0].text == "'two'", "update_display_data: %r" % ex.results)
    check([o.get("text") for o in ex.outputs] == ["kept\n"] and ex.stdout == "gone\nkept\n", "clear_output: %r" % ex.outputs)
    # live callbacks, input()
    seen = []
    ex = k.run_code("import time\nfor i in range(3):\n    print('tick', i, flush=True); time.sleep(0.2)",
                    on_stdout=lambda t: seen.append((time.monotonic(), t)))
    check(len(seen) >= 2 and seen[-1][0] - seen[0][0] > 0.2, "on_stdout live: %r" % seen)
    prompts = []
    ex = k.run_code("print('got', input('name? '))", on_input=lambda p, pw: prompts.append(p) or "ada")
    check(prompts == ["name? "] and ex.stdout.endswith("got ada\n"), "input(): %r %r" % (prompts, ex.stdout))
    # never evaluated: a value whose repr is code stays text
    mark = "/tmp/korch-pyclient-eval-%d" % os.getpid()
    ex = k.run_code("class R:\n    def __repr__(self): return \"__import__('os').system('touch %s')\"\nR()" % mark)
    check(ex.text and ex.text.startswith("__import__") and not os.path.exists(mark), "a repr is never evaluated")


def kernel_files(kc, k):
    """Kernel.files: through the kernel itself, in a temp dir of its own; the kernel lying about a file."""
    k.run_code("import os, tempfile; os.chdir(tempfile.mkdtemp(prefix='korch-pyclient-'))", raise_on_error=True)
    blob = os.urandom(5 << 20)  # two chunks
    check(k.files.upload("sub/b.bin", blob) == len(blob), "kernel files: upload")
    check(k.files.download("sub/b.bin") == blob, "kernel files: download")
    k.files.upload("t.txt", "h\u00e9")
    listed = {f.path: f.size for f in k.files.list()}
    check(listed == {"sub/b.bin": len(blob), "t.txt": 3}, "kernel files: list %r" % listed)
    k.files.remove("sub/b.bin")
    e = raises(kc.CodeError, lambda: k.files.download("sub/b.bin"), "kernel files: a removed file")
    check(e is None or e.ename == "FileNotFoundError", "kernel files: FileNotFoundError")
    k.run_code("import IPython.display as _d\n_orig = _d.publish_display_data\n"
               "_d.publish_display_data = lambda data, **kw: _orig({m: {'size': 3, 'data': 'QUJDREVG'} for m in data})")
    e = raises(kc.ProtocolError, lambda: k.files.download("t.txt"), "kernel files: a kernel that lies")
    check(e is None or "more" in str(e), "kernel files: the lie named: %s" % e)
    raises(kc.ProtocolError, lambda: k.files.download("t.txt", max_bytes=2), "kernel files: over max_bytes")
    k.run_code("_d.publish_display_data = _orig\nimport shutil; shutil.rmtree(os.getcwd()); os.chdir('/')")


def control(kc, k):
    # interrupt from another thread while the code runs
    t = threading.Timer(0.8, k.interrupt)
    t.start()
    t0 = time.monotonic()
    ex = k.run_code("import time\nprint('sleeping', flush=True)\ntime.sleep(30)")
    t.join()
    DETAILS["interrupt_s"] = round(time.monotonic() - t0, 2)
    check(ex.error and ex.error.ename == "KeyboardInterrupt" and time.monotonic() - t0 < 10, "interrupt: %r" % ex.error)
    # a timeout interrupts and leaves the kernel usable
    e = raises(kc.ExecutionTimeout, lambda: k.run_code("import time; time.sleep(30)", timeout=1), "timeout")
    check(e is None or e.interrupted, "the timed-out code was interrupted")
    ex = k.run_code("x")
    check(ex.text == "41", "usable after a timeout, state kept: %r %r" % (ex, ex.error))
    # restart: a new process
    t0 = time.monotonic()
    k.restart()
    DETAILS["restart_s"] = round(time.monotonic() - t0, 2)
    ex = k.run_code("x")
    check(ex.error and ex.error.ename == "NameError", "restart clears the state: %r" % ex.error)
    # the kernel dies mid-execution: korch restarts it
    e = raises(kc.KernelDiedError, lambda: k.run_code("import os\nx = 1\nos._exit(1)"), "death")
    check(e is None or e.restarted, "restarted after death")
    ex = k.run_code("print('alive')", timeout=60)
    check(ex.stdout == "alive\n", "usable after its death: %r" % ex)
    info = k.kernel_info()
    check(info.get("language_info", {}).get("name") == "python" and k.language == "python", "kernel_info")


def attacks(kc, client):
    """The kernel as the attacker: what it sends is data, bounded, checked."""
    small = kc.Client(client.url, client.http.token, max_message_bytes=2 << 20)
    with small.start_kernel() as k:
        # messages of the wrong shape, parented to the request: a clear
        # ProtocolError, and the kernel stays usable
        forge = ("k = get_ipython().kernel\n"
                 "k.session.send(k.iopub_socket, %r, %s, parent=k.get_parent(), ident=b'x')\n")
        for mt, content, needle in (("stream", "{'name': 'stdout', 'text': 5}", "text"),
                                    ("display_data", "{'data': [1, 2]}", "MIME bundle"),
                                    ("error", "{'ename': 'E', 'evalue': 'v', 'traceback': 'tb'}", "traceback"),
                                    ("stream", "{'name': '../../etc', 'text': 'x'}", "stream")):
            e = raises(kc.ProtocolError, lambda: k.run_code(forge % (mt, content)), "forged %s" % mt)
            check(e is None or needle in str(e), "forged %s: %s" % (mt, e))
            check(k.run_code("print('still')").stdout == "still\n", "usable after a forged %s" % mt)
        # base64 that is not: the execution is fine, the image says so
        ex = k.run_code("from IPython.display import display\ndisplay({'image/png': 'not base64 at all!'}, raw=True)")
        check(ex.ok and len(ex.results) == 1, "bad base64 execution: %r" % ex)
        if ex.results:
            raises(kc.ProtocolError, lambda: ex.results[0].png, "bad base64 image")
        # a flood: bounded by max_output_bytes
        ex = k.run_code("print('x' * 8000000)\nprint('y' * 10)", max_output_bytes=1 << 20)
        check(ex.truncated and len(ex.stdout) <= 1 << 20, "flood truncated: %d bytes kept" % len(ex.stdout))
        ex = k.run_code("for i in range(300): display(i)", max_outputs=100)
        check(ex.truncated and len(ex.outputs) == 100, "outputs bounded: %d" % len(ex.outputs))
        # one message over max_message_bytes (2 MB): dropped unread, the connection stays in step
        ex = k.run_code("import base64, os\nfrom IPython.display import display\n"
                        "display({'image/png': base64.b64encode(os.urandom(3000000)).decode()}, raw=True)\nprint('after')")
        check(ex.dropped_messages == 1 and ex.truncated and ex.stdout == "after\n" and not ex.results,
              "oversized message: dropped=%d %r" % (ex.dropped_messages, ex))
        check(k.run_code("1 + 1").text == "2", "in step after an oversized message")
        # the kernel is shut down under the client's feet, while it runs code, then again
        t = threading.Timer(0.8, lambda: client.http.json("DELETE", "api/kernels/" + k.id))
        t.start()
        e = raises(kc.KernelGoneError, lambda: k.run_code("import time; time.sleep(20)"), "deleted while running")
        t.join()
        check(e is None or "shut down" in str(e), "deleted while running, the message: %s" % e)
        e = raises(kc.KernelGoneError, lambda: k.run_code("1"), "a deleted kernel")
        check(e is None or "shut down" in str(e), "deleted kernel message: %s" % e)
    small.close()


def http_errors(kc, client):
    bad = kc.Client(client.url, "not-the-token")
    e = raises(kc.AuthError, bad.kernels, "a wrong token")
    check(e is None or e.status == 403, "wrong token status: %s" % (e and e.status))
    bad.close()
    check(client.version(), "GET /api")
    e = raises(kc.NotFoundError, lambda: client.kernel("00000000-0000-0000-0000-000000000000"), "an unknown kernel")
    e = raises(kc.HTTPError, lambda: client.start_kernel("no-such-spec"), "an unknown kernelspec")
    check(e is None or "no-such-spec" in e.message, "kernelspec error says which: %s" % e)
    raises(kc.ConnectError, lambda: kc.Client("http://127.0.0.1:9/", "t", timeout=5).status(), "nothing listening")
    raises(kc.KorchUsage, lambda: kc.Client("ftp://x/"), "not an http URL")
    check("python3" in client.kernelspecs().get("kernelspecs", {}), "kernelspecs")


def sandbox(kc, url):
    os.environ["KORCH_URL"] = url
    with kc.Sandbox() as sbx:
        ex = sbx.run_code("import math; math.pi")
        check(ex.text == "3.141592653589793", "Sandbox().run_code: %r" % ex)
        kid = sbx.id
    c = kc.Client()
    check(all(k["id"] != kid for k in c.kernels()), "the Sandbox's kernel is shut down at the end of its with")
    c.close()


def body(kc, url):
    t0 = time.monotonic()
    codec(kc)
    client = kc.Client(url)
    with client.start_kernel() as k:
        DETAILS["start_s"] = round(time.monotonic() - t0, 2)
        outputs(kc, k)
        kernel_files(kc, k)
        t1 = time.monotonic()
        for _ in range(50):
            k.run_code("pass")
        DETAILS["pass_ms"] = round((time.monotonic() - t1) * 1000 / 50, 2)
        control(kc, k)
        kid = k.id
    check(all(x["id"] != kid for x in client.kernels()), "the with block shut the kernel down")
    attacks(kc, client)
    http_errors(kc, client)
    sandbox(kc, url)
    check(client.kernels() == [], "kernels left: %r" % client.kernels())


if __name__ == "__main__":
    sys.exit(run(body, package=True))
