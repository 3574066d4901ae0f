#!/usr/bin/python3
"""The agent API's side of tests/test_server_adopt_agent.c: sessions whose korch
serve is killed with -9 and started again with the same --instance.

    resume_peer.py URL TOKEN new                 a session (its model)
    resume_peer.py URL TOKEN turn SID QUESTION   one turn, read as server-sent events
    resume_peer.py URL TOKEN get SID             the session's model and the kernels listed
    resume_peer.py URL TOKEN delete SID          DELETE it, then the kernels listed

Prints one JSON line: {"ok", ...}; "kernels" is GET /api/kernels' ids.
"""
import http.client
import json
import sys
import time
import urllib.parse

import sse


def main():
    url, token, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    u = urllib.parse.urlsplit(url)
    headers = {"Authorization": "token " + token, "Content-Type": "application/json"}

    def req(method, path, body=None, timeout=60):
        c = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
        c.request(method, "/" + path, body=json.dumps(body).encode() if body is not None else None, headers=headers)
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, json.loads(data) if data else None

    def kernels():
        st, ks = req("GET", "api/kernels")
        return [k["id"] for k in ks] if st == 200 else None

    out = {"ok": False}
    if mode == "new":
        st, m = req("POST", "api/agent/sessions", {}, timeout=180)
        out = {"ok": st == 201, "status": st, "session": m}
    elif mode == "turn":
        sid, question = sys.argv[4], sys.argv[5]
        c = http.client.HTTPConnection(u.hostname, u.port, timeout=240)
        c.request("POST", "/api/agent/sessions/%s/messages" % sid, body=json.dumps({"content": question}).encode(),
                  headers=headers)
        r = c.getresponse()
        events = []
        while (got := sse.read_event(r)) is not None:
            events.append(got[:2])
        c.close()
        finals = [d["text"] for n, d in events if n == "final"]
        done = [d for n, d in events if n == "done"]
        out = {"ok": r.status == 200 and bool(finals) and bool(done) and done[-1].get("status") == "ok",
               "status": r.status, "final": finals[-1] if finals else None,
               "notices": [d["text"] for n, d in events if n == "notice"],
               "errors": [d.get("message") for n, d in events if n == "error"],
               "events": [n for n, _ in events]}
    elif mode == "get":
        sid = sys.argv[4]
        deadline = time.monotonic() + 60
        while True:  # settled: not starting any more
            st, m = req("GET", "api/agent/sessions/" + sid)
            if st != 200 or m.get("state") != "starting" or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        if isinstance(m, dict):
            m.pop("transcript", None)
        out = {"ok": st == 200, "status": st, "session": m, "kernels": kernels()}
    elif mode == "delete":
        st, _ = req("DELETE", "api/agent/sessions/" + sys.argv[4])
        out = {"ok": st == 204, "status": st, "kernels": kernels()}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
