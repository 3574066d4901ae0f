#!/usr/bin/python3
"""A real ipykernel started by jupyter_client, with its IOPub behind a proxy
that replays and tampers with messages.

  tamper_proxy.py DIR CONNFILE

Writes CONNFILE (the kernel's connection info, but iopub_port = the proxy's),
touches DIR/ready once the kernel answers, and runs until DIR/stop exists;
then shuts the kernel down. Every stream message is preceded by a copy with
its content altered but the signature kept (tampering) and followed by an
unchanged copy (a replay). A correct client shows each line exactly once.
"""
import json
import os
import sys
import time

import zmq
from jupyter_client.manager import KernelManager


def main():
    d, conn_path = sys.argv[1], sys.argv[2]
    km = KernelManager(kernel_name="python3")
    km.start_kernel()
    kc = km.client()
    kc.start_channels()
    kc.wait_for_ready(timeout=60)
    kc.stop_channels()
    info = km.get_connection_info(session=False)
    info = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in info.items()}

    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect("tcp://%s:%d" % (info["ip"], info["iopub_port"]))
    pub = ctx.socket(zmq.PUB)
    port = pub.bind_to_random_port("tcp://127.0.0.1")
    info["iopub_port"] = port
    tmp = conn_path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(info, f)
    os.rename(tmp, conn_path)
    open(os.path.join(d, "ready"), "w").close()

    poller = zmq.Poller()
    poller.register(sub, zmq.POLLIN)
    stop = os.path.join(d, "stop")
    while not os.path.exists(stop):
        if not poller.poll(100):
            continue
        frames = sub.recv_multipart()
        i = frames.index(b"<IDS|MSG>")
        header = json.loads(frames[i + 2])
        stream = header.get("msg_type") == "stream"
        if stream:
            tampered = list(frames)
            tampered[i + 5] = frames[i + 5].replace(b"line", b"LINE")
            pub.send_multipart(tampered)  # tampered content, the original's signature
        pub.send_multipart(frames)
        if stream:
            pub.send_multipart(frames)  # replay
    km.shutdown_kernel(now=True)
    time.sleep(0.2)


if __name__ == "__main__":
    main()
