"""What the Python client's peers share (pyclient_kernel.py,
pyclient_agent.py): the failures and details they report, check(), and
run(): --url URL [--src DIR], korch_client imported (from DIR first when
given, else the installed package), the peer's body run, its JSON line
{"ok", "failures", "details"} printed last; the exit status."""
import argparse
import json
import os
import sys
import time
import traceback

FAIL = []
DETAILS = {}


def check(cond, what):
    if not cond:
        FAIL.append(what)
    return bool(cond)


def run(body, package=False):
    """body(kc, url); package: say where korch_client was imported from."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--src")
    a = ap.parse_args()
    if a.src:
        sys.path.insert(0, a.src)
    import korch_client as kc
    if package:
        DETAILS["package"] = os.path.dirname(kc.__file__)
    t0 = time.monotonic()
    try:
        body(kc, a.url)
    except Exception:  # noqa: BLE001
        FAIL.append("unexpected: " + traceback.format_exc()[-1500:])
    DETAILS["seconds"] = round(time.monotonic() - t0, 1)
    print(json.dumps({"ok": not FAIL, "failures": FAIL, "details": DETAILS}))
    return 0 if not FAIL else 1
