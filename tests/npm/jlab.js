// JupyterLab 4 in the trixie chroot, for the browser tests (jupyterlab_ui.js,
// jupyterlab_untrusted.js): jupyter-lab started as a user starts it with
// --gateway-url (its own dirs and token), korch's extension's wheel
// installed when asked, and the notebook page's helpers (run a cell, wait for
// it, read its outputs).
//
//   const { startLab, NB, runCell, ... } = require('./jlab').jlab({ chrootDir, extWheel, details, sleep });
'use strict';
const fs = require('fs');
const path = require('path');
const crypto = require('crypto');
const { spawn } = require('child_process');
const { freePort } = require('./ui_run');

// chrootDir: the chroot; extWheel: korch-jupyterlab's wheel to install ('' for
// none); details: the run's details (timings go there); sleep(ms).
function jlab({ chrootDir, extWheel = '', details, sleep }) {
  // jupyter-lab in the chroot, as a user starts it with --gateway-url. Its dirs
  // live under CHROOT/tmp; `inside` is the same path as jupyter-lab sees it.
  // korch null: no gateway (local kernels); ext: the extension installed by a first startLab.
  async function startLab(korch, extEnv = null) {
    const host = fs.mkdtempSync(path.join(chrootDir, 'tmp', 'korch-jlab-'));
    const inside = '/' + path.relative(chrootDir, host);
    const dirs = {};
    for (const d of ['config', 'data', 'runtime', 'notebooks', 'settings', 'workspaces'])
      fs.mkdirSync(path.join(host, d));
    for (const d of ['config', 'data', 'runtime', 'notebooks', 'settings', 'workspaces'])
      dirs[d] = path.join(inside, d);
    // no news or update questions popping over the notebook
    const notif = path.join(host, 'settings', '@jupyterlab', 'apputils-extension');
    fs.mkdirSync(notif, { recursive: true });
    fs.writeFileSync(path.join(notif, 'notification.jupyterlab-settings'),
      JSON.stringify({ fetchNews: 'false', checkForUpdates: false }));
    const ext = extEnv || (extWheel ? installExtension(host, inside) : null);
    const port = await freePort();
    const token = crypto.randomBytes(16).toString('hex');
    const args = [chrootDir, '/usr/bin/env', `HOME=${inside}`, 'PATH=/usr/local/bin:/usr/bin:/bin',
      'LANG=C.UTF-8', `JUPYTER_CONFIG_DIR=${dirs.config}`, `JUPYTER_DATA_DIR=${dirs.data}`,
      `JUPYTER_RUNTIME_DIR=${dirs.runtime}`, `JUPYTERLAB_SETTINGS_DIR=${dirs.settings}`,
      `JUPYTERLAB_WORKSPACES_DIR=${dirs.workspaces}`,
      ...(ext || []),
      'jupyter-lab', '--no-browser', '--allow-root', '--ip=127.0.0.1', `--port=${port}`,
      '--port-retries=0', `--ServerApp.token=${token}`, `--ServerApp.root_dir=${dirs.notebooks}`,
      '--LabApp.expose_app_in_browser=True', '--LabApp.news_url=',
      ...(korch ? [`--gateway-url=${korch.base}`, `--GatewayClient.auth_token=${korch.token}`,
        '--GatewayClient.request_timeout=120'] : [])];
    const logFile = path.join(host, 'jupyterlab.log');
    const out = fs.openSync(logFile, 'w');
    const proc = spawn('/usr/sbin/chroot', args, { stdio: ['ignore', out, out] });
    const url = `http://127.0.0.1:${port}/`;
    const tStart = Date.now();
    for (let i = 0; i < 300; i++) {
      try {
        const r = await fetch(`${url}api/status?token=${token}`);
        if (r.ok) {
          details.server_start_s = (Date.now() - tStart) / 1000;
          return { proc, url, token, host, logFile, ext };
        }
      } catch (e) { /* not up yet */ }
      if (proc.exitCode !== null) break;
      await sleep(200);
    }
    throw new Error(`jupyter-lab did not answer: ${fs.readFileSync(logFile, 'utf8').slice(-2000)}`);
  }

  // korch's extension as a user installs it: the wheel built on the host
  // (`make jupyterlab-wheel`: dist/korch_jupyterlab-*.whl, KORCH_JLAB_WHEEL)
  // copied under the run's dir and pip-installed in the chroot, offline
  // (--no-index --no-deps: JupyterLab is the chroot's own), with --prefix into
  // the run's dir, so the shared chroot stays as it is: the server extension
  // enabled by the wheel's jupyter_server_config.d file, the labextension from
  // its share/jupyter, nothing built. -> the env jupyter-lab needs to see that prefix.
  function installExtension(host, inside) {
    const { spawnSync } = require('child_process');
    const t = Date.now();
    const name = path.basename(extWheel);
    fs.mkdirSync(path.join(host, 'wheel'));
    fs.copyFileSync(extWheel, path.join(host, 'wheel', name));
    details.wheel = { name, kib: Math.round(fs.statSync(extWheel).size / 1024) };
    const sh = `set -e
      python3 -m pip install -q --root-user-action=ignore --no-deps --no-index --prefix=${inside}/prefix ${inside}/wheel/${name}
      # where this pip put them (Debian's pip adds local/ under a prefix)
      dirname "$(find ${inside}/prefix -path '*-packages/korch_jupyterlab' -type d)"
      dirname "$(find ${inside}/prefix -path '*/share/jupyter/labextensions' -type d)"
      dirname "$(find ${inside}/prefix -path '*/etc/jupyter/jupyter_server_config.d' -type d)"`;
    const r = spawnSync('/usr/sbin/chroot', [chrootDir, '/bin/sh', '-c', sh], { encoding: 'utf8' });
    if (r.status !== 0)
      throw new Error(`the extension's wheel did not install: ${(r.stdout + r.stderr).slice(-1500)}`);
    details.wheel_install_s = (Date.now() - t) / 1000;
    const [site, share, etc] = r.stdout.trim().split('\n').slice(-3);
    details.installed = { site, share, etc };
    return [`PYTHONPATH=${site}`, `JUPYTER_PATH=${share}`, `JUPYTER_CONFIG_PATH=${etc}`];
  }

  // ------------------------------------------------------------ the lab page

  // In the page: the open notebook panel (window.jupyterapp: expose_app_in_browser).
  const NB = `(() => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
    return w && w.content && w.sessionContext ? w : null; })()`;

  // Put code in a new cell at the bottom (the first, empty one the first time),
  // select it and press Shift+Enter. -> the cell's index.
  async function runCell(page, code) {
    const idx = await page.evaluate(([nbExpr, code]) => {
      const panel = eval(nbExpr);
      const nb = panel.content;
      const cells = nb.model.sharedModel;
      let i = nb.widgets.length - 1;
      const last = nb.widgets[i];
      if (last.model.type !== 'code' || last.model.sharedModel.getSource() !== '' || last.model.executionCount != null) {
        cells.insertCell(nb.widgets.length, { cell_type: 'code', source: '' });
        i = nb.widgets.length - 1;
      }
      nb.widgets[i].model.sharedModel.setSource(code);
      nb.activeCellIndex = i;
      nb.mode = 'command';
      nb.node.focus();
      nb.widgets[i].node.scrollIntoView();
      return i;
    }, [NB, code]);
    await page.keyboard.press('Shift+Enter');
    return idx;
  }

  // Wait until cell idx has its execution count (its execute_reply came) and the kernel is idle.
  async function waitCell(page, idx, timeoutMs = 60000) {
    await page.waitForFunction(([nbExpr, i]) => {
      const c = eval(nbExpr).content.widgets[i];
      return c && typeof c.model.executionCount === 'number';
    }, [NB, idx], { timeout: timeoutMs, polling: 100 });
    await waitStatus(page, 'idle', timeoutMs);
  }

  async function waitStatus(page, want, timeoutMs = 60000) {
    await page.waitForFunction(([nbExpr, want]) => {
      const p = eval(nbExpr);
      return p && p.sessionContext.kernelDisplayStatus === want;
    }, [NB, want], { timeout: timeoutMs, polling: 100 });
  }

  // The text of a cell's outputs (streams, text/plain, tracebacks), as the model holds it.
  async function cellText(page, idx) {
    return page.evaluate(([nbExpr, i]) => eval(nbExpr).content.widgets[i].model.outputs.toJSON().map(o =>
      [].concat(o.text || (o.data && o.data['text/plain']) || (o.traceback ? o.ename + ': ' + o.evalue : '')).join('')).join(''),
    [NB, idx]);
  }

  async function cellNodes(page, idx, sel) {
    return page.evaluate(([nbExpr, i, sel]) => {
      const el = eval(nbExpr).content.widgets[i].node;
      return Array.from(el.querySelectorAll(sel)).map(e => ({
        tag: e.tagName, w: e.naturalWidth || e.offsetWidth, h: e.naturalHeight || e.offsetHeight,
        text: (e.innerText || '').slice(0, 300)
      }));
    }, [NB, idx, sel]);
  }

  async function scrollTo(page, idx) {
    await page.evaluate(([nbExpr, i]) => eval(nbExpr).content.widgets[i].node.scrollIntoView(), [NB, idx]);
  }

  async function waitNotebook(page, timeoutMs = 60000) {
    await page.waitForFunction(nbExpr => {
      const p = eval(nbExpr);
      return p && p.context.isReady && p.sessionContext.session && p.sessionContext.session.kernel &&
        p.sessionContext.kernelDisplayStatus === 'idle';
    }, NB, { timeout: timeoutMs, polling: 100 });
  }

  return { startLab, installExtension, NB, runCell, waitCell, waitStatus, cellText, cellNodes, scrollTo, waitNotebook };
}

module.exports = { jlab };
