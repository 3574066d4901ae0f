// The classic Notebook 6.4 (Debian's python3-notebook) for the browser tests
// (notebook_ui.js, notebook_untrusted.js): the server started as a user
// starts it with --gateway-url (its own dirs and token), and the page's
// helpers (run a cell, wait for it, read its outputs).
//
//   const { startNotebook, runCell, ... } = require('./nb').nb({ sleep });
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');
const { spawn } = require('child_process');
const { freePort } = require('./ui_run');

function nb({ sleep }) {
  // The notebook server, as a user starts it with --gateway-url.
  async function startNotebook(korch) {
    const base = fs.mkdtempSync(path.join(os.tmpdir(), 'korch-nb-'));
    const dirs = {};
    for (const d of ['config', 'data', 'runtime', 'notebooks']) fs.mkdirSync(dirs[d] = path.join(base, d));
    const port = await freePort();
    const token = require('crypto').randomBytes(16).toString('hex');
    const env = Object.assign({}, process.env, {
      JUPYTER_CONFIG_DIR: dirs.config, JUPYTER_DATA_DIR: dirs.data, JUPYTER_RUNTIME_DIR: dirs.runtime,
      HOME: base
    });
    const args = ['-m', 'notebook', '--no-browser', '--allow-root', '--ip=127.0.0.1', `--port=${port}`,
      '--port-retries=0', `--NotebookApp.token=${token}`, `--notebook-dir=${dirs.notebooks}`,
      `--gateway-url=${korch.base}`, `--GatewayClient.auth_token=${korch.token}`,
      '--GatewayClient.request_timeout=120'];
    const logFile = path.join(base, 'notebook.log');
    const out = fs.openSync(logFile, 'w');
    const proc = spawn('/usr/bin/python3', args, { env, stdio: ['ignore', out, out] });
    const url = `http://127.0.0.1:${port}/`;
    for (let i = 0; i < 150; i++) {
      try {
        const r = await fetch(`${url}api/status?token=${token}`);
        if (r.ok) return { proc, url, token, base, logFile, dirs };
      } catch (e) { /* not up yet */ }
      if (proc.exitCode !== null) break;
      await sleep(200);
    }
    throw new Error(`the notebook server did not answer: ${fs.readFileSync(logFile, 'utf8').slice(-2000)}`);
  }

  // ------------------------------------------------------------ the notebook page

  // Put code in a new cell at the bottom (the first, empty one the first time)
  // and press the toolbar's Run button. -> the cell's index.
  async function runCell(page, code) {
    const idx = await page.evaluate(code => {
      const nb = Jupyter.notebook;
      let cell = nb.get_cell(nb.ncells() - 1);
      if (cell.cell_type !== 'code' || cell.get_text() !== '' || cell.input_prompt_number != null)
        cell = nb.insert_cell_at_bottom('code');
      const i = nb.find_cell_index(cell);
      nb.select(i);
      cell.set_text(code);
      cell.element[0].scrollIntoView();
      return i;
    }, code);
    await page.click('button[data-jupyter-action="jupyter-notebook:run-cell-and-select-next"]');
    return idx;
  }

  // Wait until cell idx has its execution count (its execute_reply came).
  async function waitCell(page, idx, timeoutMs = 60000) {
    await page.waitForFunction(i => {
      const c = Jupyter.notebook.get_cell(i);
      return typeof c.input_prompt_number === 'number';
    }, idx, { timeout: timeoutMs, polling: 100 });
    await waitIdle(page, timeoutMs);
  }

  async function waitIdle(page, timeoutMs = 60000) {
    await page.waitForFunction(() => document.querySelector('#kernel_indicator_icon.kernel_idle_icon') !== null,
      null, { timeout: timeoutMs, polling: 100 });
  }

  // The text of a cell's outputs (streams, text/plain, tracebacks), as the model holds it.
  async function cellText(page, idx) {
    return page.evaluate(i => Jupyter.notebook.get_cell(i).output_area.outputs.map(o =>
      o.text || (o.data && o.data['text/plain']) || (o.traceback ? o.ename + ': ' + o.evalue : '')).join(''), idx);
  }

  async function cellHtml(page, idx, sel, fn) {
    return page.evaluate(([i, sel]) => {
      const el = Jupyter.notebook.get_cell(i).element[0];
      return Array.from(el.querySelectorAll(sel)).map(e => ({
        tag: e.tagName, w: e.naturalWidth || e.offsetWidth, h: e.naturalHeight || e.offsetHeight,
        text: (e.innerText || '').slice(0, 300)
      }));
    }, [idx, sel]);
  }

  return { startNotebook, runCell, waitCell, waitIdle, cellText, cellHtml };
}

module.exports = { nb };
