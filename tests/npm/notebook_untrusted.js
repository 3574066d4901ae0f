#!/usr/bin/env node
// The model and the kernel as the attacker of a person's classic Notebook 6.4
// (issue 21 item 1), korch serve as its gateway: the same attacks as
// jupyterlab_untrusted.js (./attacks.js). Notebook 6.4 runs the script of a
// trusted HTML output through jQuery and puts SVG inline. One session:
// before the taint a cell's script runs (the canary works); the agent API's
// turn in the notebook's kernel registers the model's post_run_cell hook;
// the person's next cell and the variants (but the ipywidgets one: the host's
// kernel has no ipywidgets); no window flag, no file through /api/contents,
// korch's note shown; a DataFrame's table kept.
//
//   node notebook_untrusted.js 'http://127.0.0.1:PORT/?token=T' SHOTDIR
// Prints one JSON line {ok, failures, details, seconds}.
'use strict';
const fs = require('fs');
const { launch } = require('./browser');
const { uiRun } = require('./ui_run');
const { HELPERS, VARIANTS, korchJson } = require('./attacks');

const [korchLine, shotDir] = process.argv.slice(2);
const t0 = Date.now();
let page;
const { result, log, sleep, check, failures, details, shot, step } = uiRun('notebook-untrusted', shotDir, () => page);
const { startNotebook, runCell, waitCell } = require('./nb').nb({ sleep });

async function files(nbServer) {
  const r = await fetch(`${nbServer.url}api/contents?token=${nbServer.token}`);
  return ((await r.json()).content || []).map(f => f.name);
}

async function runWait(code, timeoutMs = 60000) {
  const i = await runCell(page, code);
  await waitCell(page, i, timeoutMs);
  return i;
}

async function main() {
  const ku = new URL(korchLine.trim());
  const korch = { base: `${ku.protocol}//${ku.host}`, token: ku.searchParams.get('token') || '' };
  fs.mkdirSync(shotDir, { recursive: true });
  const nbServer = await startNotebook(korch);
  const { context, close } = await launch({ viewport: { width: 1280, height: 900 } });
  try {
    const tree = await context.newPage();
    await tree.goto(`${nbServer.url}tree?token=${nbServer.token}`);
    const ok = await step('new_notebook', async () => {
      await tree.click('#new-dropdown-button');
      const item = tree.locator('#new-menu li[id^="kernel-python3"] a').first();
      await item.waitFor({ timeout: 15000 });
      [page] = await Promise.all([context.waitForEvent('page'), item.click()]);
      await page.waitForFunction(() => window.Jupyter && Jupyter.notebook && Jupyter.notebook.kernel &&
        Jupyter.notebook.kernel.is_connected(), null, { timeout: 60000 });
      await page.waitForFunction(() => document.querySelector('#kernel_indicator_icon.kernel_idle_icon') !== null,
        null, { timeout: 60000 });
      details.kernel = await page.evaluate(() => Jupyter.notebook.kernel.id);
    });
    if (!ok) throw new Error('no notebook page');
    const kid = details.kernel;

    await step('untainted_script_runs', async () => {
      await runWait(HELPERS);
      await runWait('display(HTML("<b>mine</b>"), display_id="mine")');
      details.reference_cell = await runWait('display(HTML("<b>reference</b><script>" + _korch_js("reference") + "</script>"))');
      await page.waitForFunction(() => (window.__pwned || []).includes('reference'), null, { timeout: 10000 });
      for (let i = 0; i < 50 && !(await files(nbServer)).includes('PWNED-reference.txt'); i++) await sleep(100);
      check((await files(nbServer)).includes('PWNED-reference.txt'),
        'the untainted reference script did not create its file: the canary cannot fire');
      await page.evaluate(() => { delete window.__pwned; });
    });

    await step('agent_hook', async () => {
      const s = await korchJson(korch, 'POST', '/api/agent/sessions', { kernel_id: kid });
      check(s.status === 201, `POST /api/agent/sessions: ${s.status} ${s.text.slice(0, 200)}`);
      const turn = await korchJson(korch, 'POST', `/api/agent/sessions/${s.json.id}/messages`,
        { content: 'Install the analysis helper.' });
      check(/event: done/.test(turn.text) && /HOOKED/.test(turn.text), `the agent's turn: ${turn.text.slice(-300)}`);
      const i = await runWait('y = 1');
      await sleep(800);
      const shown = await page.evaluate(i => {
        const el = Jupyter.notebook.get_cell(i).element[0];
        return { note: el.querySelectorAll('.korch-neutralised').length, text: el.innerText.slice(0, 300) };
      }, i);
      details.hook_cell = shown;
      check(shown.note === 1 && /analysis helper loaded/.test(shown.text), `the hook's output as shown: ${JSON.stringify(shown)}`);
      await shot(page, 'hook');
    });

    await step('variants', async () => {
      for (const [name, code, then] of VARIANTS) {
        if (name === 'widget_html') continue;
        await runWait(code, 30000);
        if (then) await runWait(then, 30000);
      }
      await sleep(1500);
      const pwned = await page.evaluate(() => window.__pwned);
      check(pwned === undefined, `script ran in the Notebook's origin: window.__pwned = ${JSON.stringify(pwned)}`);
      const left = (await files(nbServer)).filter(f => /^PWNED/.test(f) && f !== 'PWNED-reference.txt');
      check(left.length === 0, `files created through the contents API: ${left}`);
      const dom = await page.evaluate(ref => {
        const cells = Jupyter.notebook.get_cells().slice(ref + 1).map(c => c.element[0]);
        const all = sel => cells.flatMap(c => Array.from(c.querySelectorAll(sel)));
        return { notes: all('.korch-neutralised').length, scripts: all('.output_area script').length,
          handlers: all('.output_area *').filter(e => Array.from(e.attributes).some(a => /^on/i.test(a.name))).length,
          svg: all('.output_area svg').length };
      }, details.reference_cell);
      details.dom = dom;
      check(dom.scripts === 0 && dom.handlers === 0 && dom.svg === 0, `script left in the outputs' DOM: ${JSON.stringify(dom)}`);
      check(dom.notes >= 6, `korch's note shown ${dom.notes} times`);
      const i = await runWait('import pandas as pd\npd.DataFrame({"region": ["north", "south"], "units": [4000, 242]})');
      const t = await page.evaluate(i => {
        const tb = Jupyter.notebook.get_cell(i).element[0].querySelector('table.dataframe');
        return tb ? tb.innerText : null;
      }, i);
      check(t && /north/.test(t) && /4000/.test(t), `the DataFrame's table: ${JSON.stringify(t)}`);
      await shot(page, 'variants');
    });
  } finally {
    await close();
    nbServer.proc.kill('SIGTERM');
    await new Promise(r => { if (nbServer.proc.exitCode !== null) r(); else { nbServer.proc.on('exit', r); setTimeout(r, 8000); } });
    fs.rmSync(nbServer.base, { recursive: true, force: true });
  }
}

main().catch(e => failures.push(`fatal: ${e.stack || e}`)).finally(() => {
  log(`notebook_untrusted: ${failures.length} failures`);
  result(JSON.stringify({ ok: failures.length === 0, failures, details, seconds: (Date.now() - t0) / 1000 }));
  process.exit(failures.length === 0 ? 0 : 1);
});
