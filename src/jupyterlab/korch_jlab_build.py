"""Builds the korch-jupyterlab wheel (a prebuilt JupyterLab 4 labextension and
the jupyter_server extension) with Node.js 18+ and Python 3.11+'s standard
library only: no JupyterLab, no PyPI, no build backend to install.

    python3 src/jupyterlab/korch_jlab_build.py [OUTDIR]     (`make jupyterlab-wheel`: dist/)

It is also the package's PEP 517 backend (pyproject.toml: backend-path ".",
no requires), so `pip wheel src/jupyterlab` and `pip install src/jupyterlab`
do the same, offline. The steps, each one's output in build.log (a failure
raises with its tail):

1. the chat component: korch's web app's chat (../web, TypeScript) bundled by
   esbuild into chat/ (`node ../web/build.mjs --lib chat`), with DOMPurify,
   marked and highlight.js from ../web/node_modules (`npm ci` of its lock
   file). Skipped when chat/ is newer than ../web/src, or when ../web is
   absent and chat/ is there (a copied tree).
2. node_modules: `npm ci` of package-lock.json (@jupyterlab/builder, the
   @jupyterlab/* and @lumino/* packages for the types, typescript) when it is
   missing or older than the lock file.
3. tsc: src/*.ts -> lib/*.js.
4. @jupyterlab/builder's build-labextension (webpack, module federation) ->
   korch_jupyterlab/labextension. Its --core-path is a package.json written
   here that says what a JupyterLab 4 provides: every @jupyterlab/* and
   @lumino/* package of our "dependencies" is a shared singleton, not
   bundled, and the version asked of the host is that dependency's own range
   (^4.0.0, ^7.0.0 for services, ^2.0.0 for @lumino/widgets: any JupyterLab
   4). `jupyter labextension build` passes the installed JupyterLab's
   staging package.json there instead, whose ~4.x.y pins would become
   ^4.x.y: a build on JupyterLab 4.2 would then ask 4.0/4.1 hosts for a
   version they do not have.
5. the wheel, packed with zipfile: reproducible (entries sorted, times fixed
   at SOURCE_DATE_EPOCH or 1980-01-01, modes 0644).
"""
import base64
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
LABEXT = HERE / "korch_jupyterlab" / "labextension"
LOG = HERE / "build.log"


def _newest(path):
    return max((p.stat().st_mtime for p in Path(path).rglob("*") if p.is_file()), default=0.0)


def _run(cmd, cwd=HERE):
    with open(LOG, "a") as f:
        f.write("$ " + " ".join(map(str, cmd)) + "\n")
        f.flush()
        rc = subprocess.call([str(c) for c in cmd], cwd=cwd, stdout=f, stderr=subprocess.STDOUT)
    if rc != 0:
        tail = LOG.read_text(errors="replace")[-3000:]
        raise RuntimeError(f"korch-jupyterlab: '{' '.join(map(str, cmd))}' failed ({rc}):\n{tail}")


def _project():
    """[project] of pyproject.toml."""
    try:
        import tomllib
    except ImportError:
        raise RuntimeError("korch-jupyterlab: building the wheel needs Python 3.11+ (tomllib); "
                           "the wheel itself runs on 3.8+") from None
    return tomllib.loads((HERE / "pyproject.toml").read_text())["project"]


def labextension():
    """Steps 1-4: korch_jupyterlab/labextension, built from the sources."""
    t0 = time.time()
    web = HERE.parent / "web"
    chat = HERE / "chat" / "index.js"
    if (web / "build.mjs").exists():
        if not chat.exists() or chat.stat().st_mtime < max(_newest(web / "src"), (web / "build.mjs").stat().st_mtime):
            if not (web / "node_modules" / "esbuild").exists():
                _run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=web)
            _run(["node", web / "build.mjs", "--lib", HERE / "chat"])
    elif not chat.exists():
        raise RuntimeError("korch-jupyterlab: no chat component: build from korch's repo (src/jupyterlab beside src/web)")
    nm = HERE / "node_modules"
    stamp = nm / ".package-lock.json"
    if nm.is_symlink() or not stamp.exists() or stamp.stat().st_mtime < (HERE / "package-lock.json").stat().st_mtime:
        if nm.is_symlink():  # an older build's link to a system's packages
            nm.unlink()
        _run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"])
    _run(["node", nm / "typescript" / "bin" / "tsc", "-p", HERE])
    pkg = json.loads((HERE / "package.json").read_text())
    shared = {k: v for k, v in pkg["dependencies"].items() if k.startswith(("@jupyterlab/", "@lumino/"))}
    with tempfile.TemporaryDirectory(prefix="korch-jlab-core-") as core:
        (Path(core) / "package.json").write_text(json.dumps({
            "name": "korch-jupyterlab-host", "version": "4.0.0", "private": True,
            "description": "what korch-jupyterlab asks of a JupyterLab 4 host (korch_jlab_build.py)",
            "dependencies": shared, "jupyterlab": {"singletonPackages": sorted(shared)}}, indent=1))
        _run(["node", nm / "@jupyterlab" / "builder" / "lib" / "build-labextension.js", "--core-path", core, HERE])
    (LABEXT / "install.json").write_text(json.dumps({
        "packageManager": "python", "packageName": "korch-jupyterlab",
        "uninstallInstructions": "Use your Python package manager (pip) to uninstall the package korch-jupyterlab"},
        indent=2) + "\n")
    with open(LOG, "a") as f:
        f.write(f"korch-jupyterlab: labextension built in {time.time() - t0:.1f} s\n")


def _metadata(p):
    lines = ["Metadata-Version: 2.1", f"Name: {p['name']}", f"Version: {p['version']}",
             f"Summary: {p.get('description', '')}"]
    lic = p.get("license")
    if isinstance(lic, dict) and lic.get("text"):
        lines.append(f"License: {lic['text']}")
    if p.get("requires-python"):
        lines.append(f"Requires-Python: {p['requires-python']}")
    lines += [f"Requires-Dist: {d}" for d in p.get("dependencies", [])]
    lines += [f"Classifier: {c}" for c in p.get("classifiers", [])]
    return "\n".join(lines) + "\n"


def pack(outdir):
    """Step 5: the wheel from the sources and the built labextension -> its path."""
    if not (LABEXT / "package.json").exists():
        raise RuntimeError(f"korch-jupyterlab: no labextension in '{LABEXT}': build it first")
    p = _project()
    dist = re.sub(r"[-_.]+", "_", p["name"]).lower()
    name = f"{dist}-{p['version']}"
    data = f"{name}.data/data"
    files = {}  # path in the wheel -> bytes
    for f in sorted((HERE / "korch_jupyterlab").glob("*.py")):
        files[f"korch_jupyterlab/{f.name}"] = f.read_bytes()
    for f in sorted(LABEXT.rglob("*")):
        if f.is_file():
            files[f"{data}/share/jupyter/labextensions/korch-jupyterlab/{f.relative_to(LABEXT).as_posix()}"] = f.read_bytes()
    for f in sorted((HERE / "jupyter-config").rglob("*.json")):
        files[f"{data}/etc/jupyter/{f.relative_to(HERE / 'jupyter-config').as_posix()}"] = f.read_bytes()
    info = f"{name}.dist-info"
    files[f"{info}/METADATA"] = _metadata(p).encode()
    files[f"{info}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: korch_jlab_build\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    files[f"{info}/top_level.txt"] = b"korch_jupyterlab\n"
    record = []
    for path, body in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(body).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(body)}")
    record.append(f"{info}/RECORD,,")
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", "315532800"))
    stamp = time.gmtime(max(epoch, 315532800))[:6]
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    whl = outdir / f"{name}-py3-none-any.whl"
    tmp = whl.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for path, body in files.items():  # RECORD last, as written
            zi = zipfile.ZipInfo(path, stamp)
            zi.external_attr = 0o644 << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, body, compresslevel=9)
    tmp.replace(whl)
    return whl


def build(outdir):
    LOG.write_text("")
    labextension()
    return pack(outdir)


# PEP 517 (pyproject.toml's build-backend): pip wheel / pip install of this dir.
def get_requires_for_build_wheel(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return build(wheel_directory).name


if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else HERE.parent.parent / "dist")
    t0 = time.time()
    try:
        whl = build(out)
    except RuntimeError as e:
        sys.exit(str(e))
    print(f"korch-jupyterlab: {whl} ({whl.stat().st_size / 1024:.0f} KiB) in {time.time() - t0:.1f} s")
