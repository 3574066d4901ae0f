#!/usr/bin/python3
"""jupyter_client's Session as the other side of korch's wire tests.

  session_peer.py verify KEY   read lines of JSON arrays of base64 wire frames
                               (identities..., <IDS|MSG>, sig, h, p, m, c, buffers...),
                               print {"ok": true, "msg_type", "content", "buffers"} or
                               {"ok": false, "error"} per line
  session_peer.py sign KEY N   print N signed messages as JSON arrays of base64 frames
"""
import base64
import json
import sys

from jupyter_client.session import Session


def main():
    mode, key = sys.argv[1], sys.argv[2].encode()
    s = Session(key=key, username="peer")
    if mode == "verify":
        for line in sys.stdin:
            frames = [base64.b64decode(f) for f in json.loads(line)]
            try:
                idents, rest = s.feed_identities(frames, copy=True)
                msg = s.deserialize(rest, content=True, copy=True)
                out = {"ok": True, "msg_type": msg["header"]["msg_type"], "content": msg["content"],
                       "parent_msg_id": msg["parent_header"].get("msg_id", ""),
                       "buffers": [base64.b64encode(bytes(b)).decode() for b in msg["buffers"]],
                       "identities": [base64.b64encode(i).decode() for i in idents]}
            except Exception as e:  # report, never die: the test reads every line
                out = {"ok": False, "error": "%s: %s" % (type(e).__name__, e)}
            print(json.dumps(out), flush=True)
    elif mode == "sign":
        for i in range(int(sys.argv[3])):
            msg = s.msg("stream", content={"name": "stdout", "text": "line %d \u00e9\u2603\n" % i})
            frames = s.serialize(msg, ident=[b"route-%d" % i] if i % 2 else None)
            if i % 3 == 0:
                frames.append(b"\x00buffer")
            print(json.dumps([base64.b64encode(f).decode() for f in frames]), flush=True)


if __name__ == "__main__":
    main()
