#!/usr/bin/python3
"""Write tests/data/wire/vectors.json: signed messages made by jupyter_client's Session.

Each vector: the key, the wire frames after the delimiter (signature, header,
parent_header, metadata, content, buffers...) as jupyter_client serialized
them, base64-encoded. korch must verify and parse every one of them, and
compute the same signature over the same bytes.

Run: /usr/bin/python3 tests/peers/make_vectors.py > tests/data/wire/vectors.json
"""
import base64
import json
import sys

from jupyter_client.session import Session


def b64(b):
    return base64.b64encode(b).decode()


def vector(name, key, msg_type, content, parent=None, metadata=None, buffers=None):
    s = Session(key=key, username="vectors", session="0b1e4b5e-1c3e-4f0a-9c1d-2b2f1e3a4d5c")
    msg = s.msg(msg_type, content=content, parent=parent, metadata=metadata)
    frames = s.serialize(msg)  # [b'<IDS|MSG>', sig, h, p, m, c]
    i = frames.index(b"<IDS|MSG>")
    wire = frames[i + 1:] + list(buffers or [])
    return {
        "name": name,
        "key": key.decode(),
        "msg_type": msg_type,
        "msg_id": msg["header"]["msg_id"],
        "frames": [b64(f) for f in wire],
        "signature": wire[0].decode(),
    }


def main():
    key = b"8f4c0b1d-5f0e-4a57-b1a6-0e8a3c4f9d21"
    hexkey = b"2d2c3b8e0f1a4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5"
    first = vector("execute_request", key, "execute_request",
                   {"code": "x = 41\nprint(x + 1)", "silent": False, "store_history": True,
                    "user_expressions": {}, "allow_stdin": False, "stop_on_error": True})
    vecs = [
        first,
        vector("stream_unicode", key, "stream", {"name": "stdout", "text": "h\u00e9llo \u2603 \U0001f600\n"}),
        vector("reply_with_parent", key, "execute_reply",
               {"status": "ok", "execution_count": 3, "user_expressions": {}},
               parent={"msg_id": first["msg_id"], "msg_type": "execute_request", "session": "s",
                       "username": "u", "date": "2026-01-01T00:00:00.000000Z", "version": "5.3"}),
        vector("metadata_and_nested", key, "display_data",
               {"data": {"text/plain": "<Figure>", "image/png": "iVBORw0KGgo="}, "metadata": {"image/png": {"width": 640}},
                "transient": {"display_id": "abc"}}, metadata={"started": "2026-01-01T00:00:00Z"}),
        vector("with_buffers", key, "comm_msg", {"comm_id": "c1", "data": {"x": 1}},
               buffers=[b"\x00\x01\x02binary", b""]),
        vector("hex_key", hexkey, "kernel_info_request", {}),
        vector("unsigned", b"", "kernel_info_request", {}),
        vector("escapes", key, "stream", {"name": "stderr", "text": "tab\there \"quoted\" back\\slash \u0000nul\n"}),
    ]
    json.dump({"generator": "jupyter_client " + __import__("jupyter_client").__version__, "vectors": vecs},
              sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
