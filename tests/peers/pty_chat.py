#!/usr/bin/python3
"""korch chat on a terminal, the way a user sees it: run in a pseudo-terminal
(stdout and stderr both on it), one question typed, everything it writes
recorded with the time it arrived.

    pty_chat.py MODE KORCH_BINARY ARGS...

MODE narrate (LLM scenario "narrate"): the narration shows while the turn
is still going, the code appears while the model writes it (and once), the
answer streams and is on the screen exactly once, then the turn's tokens.
MODE rate (LLM scenario "live", a 429 with retry-after: 2 first): a status
line redrawn in place counts the back-off down, and is wiped before the
answer.

Prints one JSON object {"ok", "failures", "details"}; exit status 0 when ok.
"""
import json
import os
import pty
import re
import select
import sys
import time

mode, argv = sys.argv[1], sys.argv[2:]
chunks = []     # (monotonic time, bytes)
failures = []
details = {}


def check(ok, what):
    if not ok:
        failures.append(what)
    return ok


def screen():
    return b"".join(b for _, b in chunks).decode("utf-8", "replace")


def first_time(needle):
    """When needle was first complete on the screen (None: never)."""
    acc = b""
    n = needle.encode()
    for t, b in chunks:
        acc += b
        if n in acc:
            return t
    return None


def read_until(fd, pred, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r, _, _ = select.select([fd], [], [], 0.1)
        if not r:
            continue
        try:
            b = os.read(fd, 65536)
        except OSError:
            return False
        if not b:
            return False
        chunks.append((time.monotonic(), b))
        if pred():
            return True
    return False


pid, fd = pty.fork()
if pid == 0:
    os.execv(argv[0], argv)
try:
    check(read_until(fd, lambda: "you> " in screen(), 90), "no prompt: %r" % screen()[-500:])
    question = "what is it?" if mode == "narrate" else "rate limited question"
    t_ask = time.monotonic()
    os.write(fd, (question + "\n").encode())
    check(read_until(fd, lambda: re.search(r"── \d+ steps?, .* tokens: ", screen()), 90),
          "the turn did not end: %r" % screen()[-800:])
    t_end = first_time("tokens: ")
    os.write(fd, b"/quit\n")
    check(read_until(fd, lambda: "session saved in" in screen(), 30), "/quit did not end the session")
finally:
    # korch shuts its kernel down on the way out: give it the time, then make sure
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and os.waitpid(pid, os.WNOHANG) == (0, 0):
        read_until(fd, lambda: False, 0.2)
    try:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    except OSError:
        pass

out = screen()
details["screen_tail"] = out[-1500:]
if mode == "narrate":
    t_narr = first_time("Let me work")
    t_code0, t_code1 = first_time("▶ code:"), first_time("print('NARR', x)")
    t_ans0, t_ans1 = first_time("The kernel says"), first_time("so that is the answer.")
    if check(None not in (t_narr, t_code0, t_code1, t_ans0, t_ans1, t_end), "missing parts: %r" % out[-1500:]):
        details.update(narration_before_end_s=round(t_end - t_narr, 2), code_streamed_s=round(t_code1 - t_code0, 2),
                       answer_streamed_s=round(t_ans1 - t_ans0, 2))
        check(t_end - t_narr > 2.0, "the narration came only at the end")
        check(t_code1 - t_code0 > 0.5, "the code came all at once")
        check(t_ans1 - t_ans0 > 0.4, "the answer came all at once")
        check(t_narr < t_code0 < t_ans0, "out of order")
    check(out.count("so that is the answer.") == 1, "the answer is on the screen %d times" %
          out.count("so that is the answer."))
    check(out.count("x = 6 * 7") == 1, "the code is on the screen %d times" % out.count("x = 6 * 7"))
    check("NARR 42" in out, "the kernel's output is not shown")
else:
    lines = re.findall(r"\r\x1b\[K… the model answered HTTP 429: retry 1 in ([0-9.]+) s", out)
    details["countdown"] = lines
    check(len(lines) >= 2, "the back-off status was not redrawn: %r" % out[-1500:])
    check(len(set(lines)) >= 2 and float(lines[0]) > float(lines[-1]), "the countdown did not count down")
    t_ans = first_time("Waited, then answered")
    check(t_ans is not None and t_ans - t_ask >= 1.9, "the answer came before the back-off ended")
    # the status line is wiped (\r ESC [K) before the answer's text is written over it
    at = out.find("Waited, then answered")
    check(at > 0 and out.rfind("\r\x1b[K", 0, at) > out.rfind("retry 1 in", 0, at), "status line left under the answer")
    check(out.count("Waited, then answered") == 1, "the answer is on the screen %d times" %
          out.count("Waited, then answered"))
print(json.dumps({"ok": not failures, "failures": failures, "details": details}))
sys.exit(0 if not failures else 1)
