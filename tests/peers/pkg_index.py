"""A package index for tests/test_packages.c: wheels built here with the
standard library (a wheel is a zip with METADATA, WHEEL and RECORD) and a
PEP 503 simple index of them served on 127.0.0.1 by http.server.

    pkg_index.py DIR      builds DIR/wheels/*.whl and DIR/simple/, serves DIR,
                          prints the port on the first line, then a line per
                          request (the path) on stderr, until killed.
    pkg_index.py DIR --build-only   only builds (a wheelhouse for offline use)

Wheels: korch-tiny 1.0 (module korch_tiny, VALUE = "tiny-ok") and
korch-evil 1.0, whose archive has an entry ../../(...)/tmp/korch-evil-owned.py
(path traversal: pip must refuse to install it), in DIR/wheels (the
wheelhouse) and the index; korch-remote 1.0 (VALUE = "remote-ok") in the
index only (DIR/remote).
"""
import base64
import hashlib
import http.server
import os
import sys
import zipfile


def wheel(out_dir, name, version, files):
    """files: {archive path: text}; returns the wheel's file name."""
    mod = name.replace("-", "_")
    info = "%s-%s.dist-info" % (mod, version)
    files = dict(files)
    files[info + "/METADATA"] = "Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: korch test\n" % (name, version)
    files[info + "/WHEEL"] = "Wheel-Version: 1.0\nGenerator: korch-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    record = []
    for path, text in files.items():
        data = text.encode()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append("%s,sha256=%s,%d" % (path, digest, len(data)))
    record.append(info + "/RECORD,,")
    files[info + "/RECORD"] = "\n".join(record) + "\n"
    fname = "%s-%s-py3-none-any.whl" % (mod, version)
    with zipfile.ZipFile(os.path.join(out_dir, fname), "w", zipfile.ZIP_DEFLATED) as z:
        for path, text in files.items():
            z.writestr(path, text)
    return fname


def build(root):
    wheels = os.path.join(root, "wheels")
    os.makedirs(wheels, exist_ok=True)
    made = {
        "korch-tiny": wheel(wheels, "korch-tiny", "1.0", {"korch_tiny/__init__.py": "VALUE = 'tiny-ok'\n"}),
        "korch-evil": wheel(wheels, "korch-evil", "1.0", {
            "korch_evil/__init__.py": "VALUE = 'evil'\n",
            "../../../../../../../../../../tmp/korch-evil-owned.py": "print('owned')\n",
        }),
    }
    remote = os.path.join(root, "remote")
    os.makedirs(remote, exist_ok=True)
    made["korch-remote"] = wheel(remote, "korch-remote", "1.0", {"korch_remote/__init__.py": "VALUE = 'remote-ok'\n"})
    simple = os.path.join(root, "simple")
    for project, fname in made.items():
        d = os.path.join(simple, project)
        os.makedirs(d, exist_ok=True)
        sub = "remote" if project == "korch-remote" else "wheels"
        with open(os.path.join(root, sub, fname), "rb") as f:
            sha = hashlib.sha256(f.read()).hexdigest()
        with open(os.path.join(d, "index.html"), "w") as f:
            f.write('<!DOCTYPE html><html><body><a href="../../%s/%s#sha256=%s">%s</a></body></html>\n'
                    % (sub, fname, sha, fname))
    with open(os.path.join(simple, "index.html"), "w") as f:
        f.write("<!DOCTYPE html><html><body>%s</body></html>\n"
                % "".join('<a href="%s/">%s</a>' % (p, p) for p in made))


class Handler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, fmt, *args):
        sys.stderr.write("%s\n" % self.path)
        sys.stderr.flush()


def main():
    root = os.path.abspath(sys.argv[1])
    build(root)
    if "--build-only" in sys.argv:
        return
    os.chdir(root)
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(srv.server_address[1], flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
