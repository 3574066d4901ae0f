"""Builds the labextension before hatchling packs the wheel (the
hatch-jupyter-builder hook of pyproject.toml calls build()), offline:

1. the chat component: korch's web app's chat (../web, TypeScript) bundled by
   esbuild into chat/ (`node ../web/build.mjs --lib chat`), with DOMPurify,
   marked and highlight.js from ../web/node_modules (`npm ci` of its committed
   lock file; `make` does it). Skipped when chat/ is newer than ../web/src, or
   when ../web is absent and chat/ is there (a copied tree).
2. node_modules: when missing, a symlink to the JupyterLab packages of this
   system (KORCH_JLAB_NODE_MODULES, default Debian's /usr/share/nodejs, which
   has @jupyterlab/*, @lumino/*, @jupyterlab/builder and typescript).
3. tsc: src/*.ts -> lib/*.js.
4. `jupyter labextension build .` (@jupyterlab/builder's webpack, against this
   JupyterLab's own staging packages) -> korch_jupyterlab/labextension.
Every step's output goes to build.log; a failure raises with its tail.
"""
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _newest(path):
    return max((p.stat().st_mtime for p in Path(path).rglob("*") if p.is_file()), default=0.0)


def _run(cmd, log):
    with open(log, "a") as f:
        f.write("$ " + " ".join(map(str, cmd)) + "\n")
        f.flush()
        rc = subprocess.call([str(c) for c in cmd], cwd=HERE, stdout=f, stderr=subprocess.STDOUT)
    if rc != 0:
        tail = Path(log).read_text(errors="replace")[-3000:]
        raise RuntimeError(f"korch-jupyterlab: '{' '.join(map(str, cmd))}' failed ({rc}):\n{tail}")


def build(target_name, version, **kwargs):
    log = HERE / "build.log"
    log.write_text("")
    t0 = time.time()
    web = HERE.parent / "web"
    chat = HERE / "chat" / "index.js"
    if (web / "build.mjs").exists():
        if not chat.exists() or chat.stat().st_mtime < max(_newest(web / "src"), (web / "build.mjs").stat().st_mtime):
            if not (web / "node_modules" / "esbuild").exists():
                raise RuntimeError(f"korch-jupyterlab: '{web}/node_modules' is missing: run 'npm ci' in '{web}' "
                                   "(or 'make' at the top of the repo), then build again")
            _run(["node", web / "build.mjs", "--lib", HERE / "chat"], log)
    elif not chat.exists():
        raise RuntimeError("korch-jupyterlab: no chat component: build from korch's repo (src/jupyterlab beside src/web)")
    nm = HERE / "node_modules"
    if not nm.exists():
        shared = Path(os.environ.get("KORCH_JLAB_NODE_MODULES", "/usr/share/nodejs"))
        if not (shared / "@jupyterlab" / "builder").exists():
            raise RuntimeError(f"korch-jupyterlab: no @jupyterlab/builder in '{shared}': install Debian's jupyterlab "
                               "(or set KORCH_JLAB_NODE_MODULES to a node_modules that has JupyterLab 4's packages)")
        nm.symlink_to(shared)
    _run(["node", nm / "typescript" / "bin" / "tsc", "-p", HERE], log)
    _run([sys.executable, "-m", "jupyterlab.labextensions", "build", HERE], log)
    with open(log, "a") as f:
        f.write(f"korch-jupyterlab: labextension built in {time.time() - t0:.1f} s\n")


if __name__ == "__main__":
    build("wheel", "standard")
