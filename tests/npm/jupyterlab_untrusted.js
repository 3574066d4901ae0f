#!/usr/bin/env node
// The model and the kernel as the attacker of a person's JupyterLab 4 (issue
// 21 item 1), korch serve as the gateway, WITHOUT korch's extension: what
// holds is korch's relay. In Debian's Chromium (./browser.js), one session:
//
//   1. before anything tainted the kernel, a cell's HTML with a <script>
//      runs (window flag set, a file created through the contents API): the
//      canary works, so the checks below can fail;
//   2. the agent (korch's agent API, kernel_id of the notebook's kernel, the
//      scripted LLM's "taint_hook") registers an IPython post_run_cell hook
//      that displays HTML with a script doing a contents-API PUT;
//   3. the person's next cell, then a table of variants, each a cell the
//      person runs (JupyterLab trusts those outputs): display_pub and
//      displayhook replaced, a thread displaying later, IPython's Javascript,
//      HTML as an execute_result, update_display_data on the person's own
//      display id, an ipywidgets HTML widget, %%javascript, %%html, markdown
//      and SVG with script. The canary: no window flag, no file via
//      /api/contents; korch's note is shown; a DataFrame's table and a PNG
//      chart still render;
//   4. a restart lifts it: script runs again.
//
//   node jupyterlab_untrusted.js 'http://127.0.0.1:PORT/?token=T' SHOTDIR CHROOT
// Prints one JSON line {ok, failures, details, seconds}.
'use strict';
const fs = require('fs');
const { launch } = require('./browser');
const { uiRun } = require('./ui_run');

const [korchLine, shotDir, chrootDir = '/var/cache/korch/trixie-jlab'] = process.argv.slice(2);
const t0 = Date.now();
let page;
const { result, log, sleep, check, failures, details, shot, step } =
  uiRun(process.env.KORCH_JLAB_WHEEL ? 'jupyterlab-untrusted-ext' : 'jupyterlab-untrusted', shotDir, () => page);
// KORCH_JLAB_WHEEL set: korch's extension's wheel installed too; its badge is checked as well
const EXT_WHEEL = process.env.KORCH_JLAB_WHEEL || '';
const { startLab, NB, runCell, waitCell, waitStatus } = require('./jlab').jlab({ chrootDir, extWheel: EXT_WHEEL, details, sleep });

async function badge() {
  return page.evaluate(nbExpr => {
    const b = eval(nbExpr).node.querySelector('.korch-untrusted-badge');
    return b ? { shown: !b.classList.contains('lm-mod-hidden') && b.offsetWidth > 0, text: b.textContent } : null;
  }, NB);
}

const { HELPERS, VARIANTS, korchJson } = require('./attacks');

async function labFiles(lab) {
  const r = await fetch(`${lab.url}api/contents?token=${lab.token}`);
  const j = await r.json();
  return (j.content || []).map(f => f.name);
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
  const lab = await startLab(korch);
  const { context, close } = await launch({ viewport: { width: 1280, height: 900 } });
  try {
    page = await context.newPage();
    const ok = await step('open_notebook', async () => {
      await page.goto(`${lab.url}lab?token=${lab.token}`);
      const card = page.locator('.jp-LauncherCard[data-category="Notebook"]').first();
      await card.waitFor({ timeout: 60000 });
      await card.click();
      await page.waitForFunction(nbExpr => {
        const p = eval(nbExpr);
        return p && p.sessionContext.session && p.sessionContext.session.kernel &&
          p.sessionContext.kernelDisplayStatus === 'idle';
      }, NB, { timeout: 90000, polling: 100 });
      details.kernel = await page.evaluate(nbExpr => eval(nbExpr).sessionContext.session.kernel.id, NB);
    });
    if (!ok) throw new Error('no notebook');
    const kid = details.kernel;

    // 1. the canary works while the kernel is untainted
    await step('untainted_script_runs', async () => {
      await runWait(HELPERS);
      await runWait('display(HTML("<b>mine</b>"), display_id="mine")');
      details.reference_cell = await runWait('display(HTML("<b>reference</b><script>" + _korch_js("reference") + "</script>"))');
      await page.waitForFunction(() => (window.__pwned || []).includes('reference'), null, { timeout: 10000 });
      for (let i = 0; i < 50 && !(await labFiles(lab)).includes('PWNED-reference.txt'); i++) await sleep(100);
      check((await labFiles(lab)).includes('PWNED-reference.txt'),
        'the untainted reference script did not create its file: the canary cannot fire');
      const m = await korchJson(korch, 'GET', `/api/kernels/${kid}`);
      check(m.json && m.json.untrusted === false, `an untainted kernel's model: ${m.text.slice(0, 200)}`);
      if (EXT_WHEEL) {
        const b = await badge();
        check(b && !b.shown, `the badge before the agent ran: ${JSON.stringify(b)}`);
      }
      await page.evaluate(() => { delete window.__pwned; });
    });

    // 2. the model's code taints the notebook's kernel (the agent API, as the panel does)
    await step('agent_hook', async () => {
      const t = Date.now();
      const s = await korchJson(korch, 'POST', '/api/agent/sessions', { kernel_id: kid });
      check(s.status === 201, `POST /api/agent/sessions: ${s.status} ${s.text.slice(0, 200)}`);
      const turn = await korchJson(korch, 'POST', `/api/agent/sessions/${s.json.id}/messages`,
        { content: 'Install the analysis helper.' });
      check(/event: done/.test(turn.text) && /HOOKED/.test(turn.text), `the agent's turn: ${turn.text.slice(-300)}`);
      details.agent_turn_s = (Date.now() - t) / 1000;
      const m = await korchJson(korch, 'GET', `/api/kernels/${kid}`);
      check(m.json && m.json.untrusted === true, `after the agent ran: ${m.text.slice(0, 200)}`);
      details.untrusted_reason = m.json && m.json.untrusted_reason;
      // the person's next cell: the hook answers it
      const i = await runWait('y = 1');
      await sleep(800);
      const shown = await page.evaluate(([nbExpr, i]) => {
        const el = eval(nbExpr).content.widgets[i].node;
        return { note: el.querySelectorAll('.korch-neutralised').length, text: el.innerText.slice(0, 400) };
      }, [NB, i]);
      details.hook_cell = shown;
      if (EXT_WHEEL) {
        await page.waitForFunction(nbExpr => {
          const b = eval(nbExpr).node.querySelector('.korch-untrusted-badge');
          return b && b.offsetWidth > 0;
        }, NB, { timeout: 10000 }).catch(() => {});
        const b = await badge();
        details.badge = b;
        check(b && b.shown && b.text === 'code from the agent ran in this kernel: outputs are shown untrusted',
          `the badge after the agent ran: ${JSON.stringify(b)}`);
        const trusted = await page.evaluate(([nbExpr, i]) =>
          eval(nbExpr).content.widgets[i].node.querySelectorAll('.jp-OutputArea-output.jp-mod-trusted, .jp-mod-trusted').length, [NB, i]);
        check(trusted === 0, `${trusted} outputs of the person's cell rendered trusted after the agent ran`);
      }
      check(shown.note === 1 && /analysis helper loaded/.test(shown.text), `the hook's output as shown: ${JSON.stringify(shown)}`);
      await shot(page, 'hook');
    });

    // 3. the variants, each a cell the person runs
    await step('variants', async () => {
      details.variants = {};
      for (const [name, code, then] of VARIANTS) {
        const t = Date.now();
        const i = await runWait(code, 30000);
        if (then) await runWait(then, 30000);
        details.variants[name] = (Date.now() - t) / 1000;
        if (name === 'widget_html')
          await page.waitForFunction(([nbExpr, i]) => eval(nbExpr).content.widgets[i].node.querySelector('.widget-html, .jupyter-widgets'),
            [NB, i], { timeout: 15000 }).catch(() => check(false, 'the HTML widget was not shown'));
      }
      await sleep(1500);
      const pwned = await page.evaluate(() => window.__pwned);
      check(pwned === undefined, `script ran in JupyterLab's origin: window.__pwned = ${JSON.stringify(pwned)}`);
      const files = (await labFiles(lab)).filter(f => /^PWNED/.test(f) && f !== 'PWNED-reference.txt');
      check(files.length === 0, `files created through the contents API: ${files}`);
      // the cells since the reference (whose script ran, untainted)
      const dom = await page.evaluate(([nbExpr, ref]) => {
        const cells = eval(nbExpr).content.widgets.slice(ref + 1).map(w => w.node);
        const all = sel => cells.flatMap(c => Array.from(c.querySelectorAll(sel)));
        return { notes: all('.korch-neutralised').length, scripts: all('.jp-OutputArea-output script').length,
          handlers: all('.jp-OutputArea-output *').filter(e => Array.from(e.attributes).some(a => /^on/i.test(a.name))).length,
          js_links: all('.jp-OutputArea-output a[href]').filter(a => /^\s*javascript:/i.test(a.getAttribute('href'))).length };
      }, [NB, details.reference_cell]);
      details.dom = dom;
      check(dom.scripts === 0 && dom.handlers === 0 && dom.js_links === 0, `script left in the outputs' DOM: ${JSON.stringify(dom)}`);
      check(dom.notes >= 6, `korch's note shown ${dom.notes} times`);
      await shot(page, 'variants');
    });

    // what a person needs still renders
    await step('tables_and_charts_kept', async () => {
      const i = await runWait('import pandas as pd\npd.DataFrame({"region": ["north", "south"], "units": [4000, 242]})');
      const t = await page.evaluate(([nbExpr, i]) => {
        const tb = eval(nbExpr).content.widgets[i].node.querySelector('.jp-OutputArea-output table.dataframe');
        return tb ? tb.innerText : null;
      }, [NB, i]);
      check(t && /north/.test(t) && /4000/.test(t), `the DataFrame's table: ${JSON.stringify(t)}`);
      const j = await runWait('%matplotlib inline\nimport matplotlib.pyplot as plt\nplt.figure(figsize=(4, 2)); plt.plot([1, 2, 3]); plt.show()', 90000);
      await page.waitForFunction(([nbExpr, i]) => {
        const img = eval(nbExpr).content.widgets[i].node.querySelector('.jp-OutputArea-output img');
        return img && img.complete && img.naturalWidth > 100;
      }, [NB, j], { timeout: 15000 }).catch(() => check(false, 'the PNG chart is not rendered'));
      await shot(page, 'kept');
    });

    // 4. a restart lifts the taint: the same script runs again
    await step('restart_clears', async () => {
      await page.evaluate(nbExpr => eval(nbExpr).sessionContext.session.kernel.restart(), NB);
      await waitStatus(page, 'idle', 60000);
      const m = await korchJson(korch, 'GET', `/api/kernels/${kid}`);
      check(m.json && m.json.untrusted === false, `after the restart: ${m.text.slice(0, 200)}`);
      await runWait(HELPERS);
      await runWait('display(HTML("<script>" + _korch_js("after_restart") + "</script>"))');
      await page.waitForFunction(() => (window.__pwned || []).includes('after_restart'), null, { timeout: 10000 })
        .catch(() => check(false, 'after the restart the script did not run'));
      if (EXT_WHEEL) {
        const b = await badge();
        check(b && !b.shown, `the badge after the restart: ${JSON.stringify(b)}`);
      }
    });
  } finally {
    await close();
    lab.proc.kill('SIGTERM');
    await new Promise(r => { if (lab.proc.exitCode !== null) r(); else { lab.proc.on('exit', r); setTimeout(r, 8000); } });
  }
}

main().catch(e => failures.push(`fatal: ${e.stack || e}`)).finally(() => {
  log(`jupyterlab_untrusted: ${failures.length} failures`);
  result(JSON.stringify({ ok: failures.length === 0, failures, details, seconds: (Date.now() - t0) / 1000 }));
  process.exit(failures.length === 0 ? 0 : 1);
});
