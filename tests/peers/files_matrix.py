#!/usr/bin/python3
"""The file listing of korch serve's agent API, every way a file arrives or
leaves, on whichever launcher the server runs (tests/test_server_files.c
runs it once per launcher: local, sandbox, docker, swarm).

    files_matrix.py --url 'http://127.0.0.1:PORT/?token=T' --agent-dir DIR before|after

The LLM is tests/peers/llm_server.py's "usercode" scenario: a question
"RUN:<code>" makes the model run that code and quote its output, so a step
can write, overwrite or remove a file, or print the kernel's own view of its
work dir. After every way the peer compares three things: what it expects
(names and sizes it knows from what it did), GET .../files, and - whenever
the kernel runs - what the kernel itself sees (os.walk in its cwd). "before"
does every way and saves what it expects in DIR/matrix.json; the server is
restarted; "after" checks the stopped session's listing, a reload, a PUT and
a DELETE while stopped, then a turn (the session resumes in a new kernel on
docker and sandbox) and the kernel's view again.

Prints one JSON line {"ok", "failures", "details"}; exit status 0 when all held.
"""
import argparse
import json
import os
import shutil
import sys
import tempfile
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agent_api_client as aac  # noqa: E402
import ws_client  # noqa: E402

# what the kernel sees of its work dir, as "path:size" sorted, on one line
_VIEW = ("import os, json\n"
         "_v = sorted('%s:%d' % (os.path.relpath(os.path.join(d, f)), os.path.getsize(os.path.join(d, f)))\n"
         "            for d, ds, fs in os.walk('.') for f in fs if not os.path.islink(os.path.join(d, f))\n"
         "            and not any(p.startswith('.') for p in os.path.relpath(os.path.join(d, f)).split(os.sep)))\n"
         "print('VIEW=' + json.dumps(_v))\n"
         "del _v\n")


class M:
    def __init__(self, x, sid):
        self.x, self.sid, self.expect = x, sid, {}
        self.p = "/api/agent/sessions/%s" % sid

    def listing(self, http=None):
        st, fs = (http or self.x.http).req("GET", "api/agent/sessions/%s/files" % self.sid)
        if st != 200 or not isinstance(fs, list):
            raise ws_client.Failure("GET files -> %s %r" % (st, fs))
        return {f["path"]: f["size"] for f in fs}

    def check(self, way, http=None):
        got = self.listing(http)
        self.x.details.setdefault("ways", []).append(way)
        return self.x.check(got == self.expect, "%s: listing %r, expected %r" % (way, got, self.expect))

    def run(self, code):
        """A turn that runs code; its final answer (the model quotes the output)."""
        sse = aac.Sse(self.x, self.sid, "RUN:" + code)
        if sse.status != 200:
            raise ws_client.Failure("messages -> %s" % sse.status)
        events = sse.all()
        sse.close()
        final = aac._of(events, "final")
        done = aac._of(events, "done")
        if not final or not done or done[0].get("status") != "ok":
            raise ws_client.Failure("turn %r: %r" % (code[:60], [n for n, _ in events]))
        return final[0]["text"]

    def kernel_view(self, way):
        text = self.run(_VIEW)
        marker = text.find("VIEW=")
        view = json.loads(text[marker + 5:].strip().splitlines()[0]) if marker >= 0 else None
        want = sorted("%s:%d" % kv for kv in self.expect.items())
        return self.x.check(view == want, "%s: the kernel sees %r, expected %r" % (way, view, want))

    def put(self, path, data, status):
        st, b = aac._raw(self.x, "PUT", self.p + "/files/" + path, data)
        if self.x.check(st == status, "PUT %s -> %s %r (expected %s)" % (path, st, b, status)):
            self.expect[path] = len(data)
        st, got = aac._raw(self.x, "GET", self.p + "/files/" + path)
        self.x.check(st == 200 and got == data or (isinstance(got, (dict, list)) and
                                                   json.dumps(got).encode() == data),
                     "GET %s after its PUT -> %s %r" % (path, st, got if st != 200 else "(other bytes)"))

    def delete(self, path):
        st, b = aac._raw(self.x, "DELETE", self.p + "/files/" + path)
        if self.x.check(st == 204, "DELETE %s -> %s %r" % (path, st, b)):
            self.expect.pop(path, None)
        st, _ = aac._raw(self.x, "GET", self.p + "/files/" + path)
        self.x.check(st == 404, "GET %s after its DELETE -> %s" % (path, st))


def _save(x, m):
    with open(os.path.join(x.agent_dir, "matrix.json"), "w") as f:
        json.dump({"sid": m.sid, "expect": m.expect}, f)


def before(x):
    # POST body: the session's first files
    given = "a,b\n1,2\n"
    st, s = x.http.req("POST", "api/agent/sessions", {"files": [{"name": "given.csv", "content": given}]})
    if st != 201:
        raise ws_client.Failure("POST sessions -> %s %r" % (st, s))
    m = M(x, s["id"])
    x.details["sid"] = m.sid
    m.expect["given.csv"] = len(given)
    m.check("post_body")
    # PUT: new, nested, then over itself (the answer says it replaced)
    m.put("sales.csv", b"region,units\nnorth,10\nsouth,20\n", 201)
    m.check("put")
    m.put("data/part1.csv", b"x\n1\n2\n3\n", 201)
    m.check("put_nested")
    m.put("sales.csv", b"region,units\nnorth,10\n", 200)
    m.check("put_overwrite")
    m.kernel_view("put:kernel")
    # written by code, overwritten by code, removed by code
    m.run("open('out.txt', 'w').write('x' * 123)\nprint('WROTE')")
    m.expect["out.txt"] = 123
    m.check("code_writes")
    m.run("open('given.csv', 'w').write('z' * 77)\nprint('OVERWROTE')")
    m.expect["given.csv"] = 77
    m.check("code_overwrites")
    m.run("import os\nos.remove('out.txt')\nprint('REMOVED')")
    del m.expect["out.txt"]
    m.check("code_deletes")
    # the kernel attacks: links planted where uploads and listings look (a directory outside
    # the work dir holds a file to lose: a local kernel sees it; in a container the link dangles)
    outside = tempfile.mkdtemp(prefix="korch-matrix-outside-")
    with open(os.path.join(outside, "victim.csv"), "w") as f:
        f.write("root:keep me\n")
    m.run("import os\nos.symlink('/etc/passwd', 'leak.txt')\nos.symlink(%r, 'outdir')\n"
          "os.symlink(%r, 'data/victim.csv')\nprint('PLANTED')" % (outside, os.path.join(outside, "victim.csv")))
    m.check("code_plants_links")  # never listed
    for rel in ("leak.txt", "outdir/victim.csv", "data/victim.csv"):
        st, body = aac._raw(x, "GET", m.p + "/files/" + rel)
        x.check(st != 200 and b"root:" not in (body if isinstance(body, bytes) else json.dumps(body).encode()),
                "GET %s (a link the kernel planted) -> %s" % (rel, st))
    st, b = aac._raw(x, "DELETE", m.p + "/files/outdir/victim.csv")
    x.check(st in (400, 404, 500), "DELETE through a planted link to a directory -> %s %r" % (st, b))
    aac._raw(x, "DELETE", m.p + "/files/data/victim.csv")  # the link itself may go, never what it names
    x.check(os.path.exists(os.path.join(outside, "victim.csv")), "a DELETE reached the file a planted link names")
    m.run("import os\nfor p in ('leak.txt', 'outdir', 'data/victim.csv'):\n    os.path.lexists(p) and os.remove(p)\n"
          "print('UNPLANTED')")
    shutil.rmtree(outside)
    m.check("code_removes_links")
    # DELETE (and one that is not there)
    m.delete("data/part1.csv")
    m.check("delete")
    st, b = aac._raw(x, "DELETE", m.p + "/files/nope.csv")
    x.check(st == 404 and "nope.csv" in json.dumps(b), "DELETE of no file -> %s %r" % (st, b))
    st, b = aac._raw(x, "DELETE", m.p + "/files/..%2Fsession.json")
    x.check(st in (400, 404), "DELETE outside the work dir -> %s %r" % (st, b))
    m.kernel_view("delete:kernel")
    # a page reload: another client, nothing cached
    m.check("reload", http=ws_client.Http(x.base, x.token))
    _save(x, m)


def after(x):
    with open(os.path.join(x.agent_dir, "matrix.json")) as f:
        saved = json.load(f)
    m = M(x, saved["sid"])
    m.expect = saved["expect"]
    st, s = x.http.req("GET", "api/agent/sessions/" + m.sid)
    x.check(st == 200 and s.get("state") == "stopped", "the session after the restart: %s %r" % (st, s.get("state")))
    m.check("restart")
    m.check("restart_reload", http=ws_client.Http(x.base, x.token))
    # while stopped: a PUT and a DELETE still land
    m.put("late.csv", b"n\n5\n", 201)
    m.check("put_stopped")
    m.delete("sales.csv")
    m.check("delete_stopped")
    # the next turn resumes it (a new kernel on a confined launcher): the kernel sees what is listed
    m.kernel_view("resume:kernel")
    m.check("resume")
    x.sessions.append(m.sid)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--agent-dir", required=True)
    ap.add_argument("phase", choices=["before", "after"])
    args = ap.parse_args()
    u = urllib.parse.urlsplit(args.url)
    args.base = "%s://%s/" % (u.scheme, u.netloc)
    args.token = urllib.parse.parse_qs(u.query).get("token", [""])[0]
    args.protocol = "v1"
    args.reference = None
    x = aac.Ctx(args)
    try:
        (before if args.phase == "before" else after)(x)
    except Exception as e:  # noqa: BLE001
        x.failures.append("%s: %s" % (type(e).__name__, e))
    finally:
        try:
            x.cleanup()  # "after" deletes the session; "before" keeps it for the restart
        except Exception as e:  # noqa: BLE001
            x.failures.append("cleanup: %s" % e)
    print(json.dumps({"ok": not x.failures, "failures": x.failures, "details": x.details}), flush=True)
    sys.exit(0 if not x.failures else 1)


if __name__ == "__main__":
    main()
