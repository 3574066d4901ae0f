#!/usr/bin/env node
// JupyterLab 4 (Debian trixie's jupyterlab, in the chroot that
// scripts/jupyterlab-chroot.sh makes) with korch serve as its gateway, driven
// in Debian's Chromium (./browser.js) the way a user works: a notebook from
// the launcher, cells run with Shift+Enter, interrupt and restart from the
// toolbar, a page reload, a kernel culled while the notebook is open.
// jupyter-lab runs in the chroot (it shares the host's network) with its own
// config, data, settings, runtime and notebook dirs and a token of its own:
//
//   chroot ROOT jupyter-lab --no-browser --gateway-url=KORCH --GatewayClient.auth_token=T ...
//
// korch serve must run with --cull-idle-timeout CULL_S --cull-interval 1
// --cull-connected (the last step waits for the cull). Screenshots go to
// SHOTDIR/jupyterlab-LABEL-NN-STEP.png. Prints one JSON line {ok, failures,
// details, seconds}.
//
//   node jupyterlab_ui.js 'http://127.0.0.1:PORT/?token=T' SHOTDIR LABEL CULL_S CHROOT
'use strict';
const fs = require('fs');
const path = require('path');
const { launch } = require('./browser');
const { uiRun } = require('./ui_run');

const [korchLine, shotDir, label = 'local', cullArg = '12', chrootDir = '/var/cache/korch/trixie-jlab'] = process.argv.slice(2);
const CULL_S = Number(cullArg);
const EXT_WHEEL = process.env.KORCH_JLAB_WHEEL || '';   // set: the agent panel's steps instead
const t0 = Date.now();
let page;
const { result, log, sleep, check, failures, details, shot, step } = uiRun(`jupyterlab-${label}`, shotDir, () => page);

const { startLab, NB, runCell, waitCell, waitStatus, cellText, cellNodes, scrollTo, waitNotebook } =
  require('./jlab').jlab({ chrootDir, extWheel: EXT_WHEEL, details, sleep });

const consoleLines = [];

async function main() {
  const ku = new URL(korchLine.trim());
  const korch = { base: `${ku.protocol}//${ku.host}`, token: ku.searchParams.get('token') || '' };
  fs.mkdirSync(shotDir, { recursive: true });
  const lab = await startLab(korch);
  const { context, close } = await launch({ viewport: { width: 1280, height: 800 } });
  try {
    page = await context.newPage();
    page.on('console', m => consoleLines.push(m.text()));
    // 1. a notebook from the launcher's card (the kernelspecs are korch's)
    const ok = await step('open_notebook', async () => {
      const t = Date.now();
      await page.goto(`${lab.url}lab?token=${lab.token}`);
      const card = page.locator('.jp-LauncherCard[data-category="Notebook"]').first();
      await card.waitFor({ timeout: 60000 });
      details.launcher_s = (Date.now() - t) / 1000;
      details.kernel_card = await card.getAttribute('title');
      const t2 = Date.now();
      await card.click();
      await waitNotebook(page);
      details.open_notebook_s = (Date.now() - t2) / 1000;
      details.kernel = await page.evaluate(nbExpr => {
        const k = eval(nbExpr).sessionContext.session.kernel;
        return { id: k.id, name: k.name };
      }, NB);
    });
    if (!ok) throw new Error('no notebook');
    await shot(page, 'open');

    if (!EXT_WHEEL) {
      // 2. state across cells
      await step('state', async () => {
        await waitCell(page, await runCell(page, 'x = 21'));
        const t = Date.now();
        const i = await runCell(page, 'print(x * 2)');
        await waitCell(page, i);
        details.run_to_output_s = (Date.now() - t) / 1000;
        const txt = await cellText(page, i);
        check(txt === '42\n', `print(x * 2) shows ${JSON.stringify(txt)}`);
        const shown = await cellNodes(page, i, '.jp-OutputArea-output');
        check(shown.length === 1 && shown[0].text.trim() === '42', `the page shows ${JSON.stringify(shown)}`);
      });

      // 3. a matplotlib chart, rendered
      await step('matplotlib', async () => {
        const i = await runCell(page, '%matplotlib inline\nimport matplotlib.pyplot as plt\n' +
          'plt.figure(figsize=(5, 3)); plt.plot([1, 2, 3, 4], [1, 4, 9, 16], "o-"); plt.title("korch"); plt.show()');
        await waitCell(page, i, 90000);
        await page.waitForFunction(([nbExpr, i]) => {
          const img = eval(nbExpr).content.widgets[i].node.querySelector('.jp-OutputArea-output img');
          return img && img.complete && img.naturalWidth > 0;
        }, [NB, i], { timeout: 10000 });
        const imgs = await cellNodes(page, i, '.jp-OutputArea-output img');
        details.chart = imgs[0];
        check(imgs.length === 1 && imgs[0].w > 100 && imgs[0].h > 50, `chart image ${JSON.stringify(imgs)}`);
        await scrollTo(page, i);
        await shot(page, 'chart');
      });

      // 4. interrupt from the toolbar keeps the kernel's state
      await step('interrupt', async () => {
        await waitCell(page, await runCell(page, 'kept = "still here"'));
        const i = await runCell(page, 'import time\ntime.sleep(30)');
        await waitStatus(page, 'busy', 10000);
        await sleep(300);
        const t = Date.now();
        await page.click('.jp-NotebookPanel-toolbar [data-command="notebook:interrupt-kernel"]');
        await waitCell(page, i, 15000);
        details.interrupt_s = (Date.now() - t) / 1000;
        const out = await cellText(page, i);
        check(out.includes('KeyboardInterrupt'), `interrupted cell shows ${JSON.stringify(out.slice(0, 200))}`);
        const j = await runCell(page, 'print(kept)');
        await waitCell(page, j);
        check((await cellText(page, j)) === 'still here\n', 'the state did not survive the interrupt');
        await scrollTo(page, j);
        await shot(page, 'interrupt');
      });

      // 5. an ipywidgets slider, shown again after a page reload (the widget
      //    manager finds the kernel's comms with comm_info_request)
      await step('widget_reload', async () => {
        const i = await runCell(page, 'import ipywidgets as w\nslider = w.IntSlider(value=7, min=0, max=10, description="korch")\nslider');
        await waitCell(page, i, 60000);
        await page.waitForFunction(([nbExpr, i]) => eval(nbExpr).content.widgets[i].node.querySelector('.widget-slider, .widget-hslider'),
          [NB, i], { timeout: 20000 });
        await scrollTo(page, i);
        await shot(page, 'widget');
        // Ctrl+S; JupyterLab offers to rename an Untitled notebook first: keep its name
        await page.keyboard.press('Control+s');
        const keep = page.locator('.jp-Dialog .jp-Dialog-button.jp-mod-reject');
        await keep.waitFor({ timeout: 5000 }).then(() => keep.click()).catch(() => {});
        await page.waitForFunction(nbExpr => !eval(nbExpr).context.model.dirty, NB, { timeout: 15000 });
        const kernelBefore = details.kernel.id;
        const t = Date.now();
        await page.reload();
        await waitNotebook(page);
        const kernelAfter = await page.evaluate(nbExpr => eval(nbExpr).sessionContext.session.kernel.id, NB);
        check(kernelAfter === kernelBefore, `after the reload the notebook has kernel ${kernelAfter}, not ${kernelBefore}`);
        await page.waitForFunction(([nbExpr, i]) => {
          const c = eval(nbExpr).content.widgets[i];
          return c && c.node.querySelector('.widget-slider, .widget-hslider');
        }, [NB, i], { timeout: 30000 });
        details.widget_after_reload_s = (Date.now() - t) / 1000;
        const val = await page.evaluate(([nbExpr, i]) => {
          const r = eval(nbExpr).content.widgets[i].node.querySelector('.widget-readout');
          return r ? (r.innerText || r.value || '').trim() : null;
        }, [NB, i]);
        check(val === '7', `the slider after the reload reads ${JSON.stringify(val)}`);
        // it is live: the kernel's change shows in it
        await waitCell(page, await runCell(page, 'slider.value = 9'));
        await page.waitForFunction(([nbExpr, i]) => {
          const r = eval(nbExpr).content.widgets[i].node.querySelector('.widget-readout');
          return r && (r.innerText || r.value || '').trim() === '9';
        }, [NB, i], { timeout: 10000 });
        await scrollTo(page, i);
        await shot(page, 'widget-after-reload');
      });

      // 6. restart of a busy kernel from the toolbar (its dialog accepted): state gone
      await step('restart', async () => {
        await runCell(page, 'import time\ntime.sleep(60)');
        await waitStatus(page, 'busy', 10000);
        await sleep(300);
        await page.click('.jp-NotebookPanel-toolbar [data-command="notebook:restart-kernel"]');
        const btn = page.locator('.jp-Dialog .jp-Dialog-button.jp-mod-accept');
        await btn.waitFor({ timeout: 10000 });
        await shot(page, 'restart-dialog');
        const t = Date.now();
        await btn.click();
        await waitStatus(page, 'idle', 30000);
        details.restart_busy_s = (Date.now() - t) / 1000;
        const j = await runCell(page, 'print("kept" in dir())');
        await waitCell(page, j);
        check((await cellText(page, j)) === 'False\n', 'a variable survived the restart');
        await scrollTo(page, j);
        await shot(page, 'restart');
      });

    } else {
    // The panel is korch's chat component (src/web) inside JupyterLab: its
    // parts under .korch-agent (.k-input, .k-send, .k-stop, .k-turn, .k-final ...).
    const P = '.korch-agent';
    const idle = () => page.waitForFunction(p => {
      const b = document.querySelector(p + ' .k-send');
      return b && !b.disabled && document.querySelector(p + ' .k-chat').dataset.busy !== '1';
    }, P, { timeout: 60000, polling: 100 });
    const agentCells = () => page.evaluate(nbExpr => eval(nbExpr).content.widgets.map((c, i) => ({
      i, korch: c.model.getMetadata('korch') || null, src: c.model.sharedModel.getSource(),
      out: c.model.outputs ? c.model.outputs.toJSON().map(o => [].concat(o.text || (o.data ? (o.data['text/plain'] || Object.keys(o.data).join(',')) : o.ename || o.output_type)).join('')).join('|') : '',
      img: Array.from(c.node.querySelectorAll('.jp-OutputArea-output img')).map(im => im.naturalWidth),
      html: (c.node.querySelector('.jp-OutputArea') || { innerHTML: '' }).innerHTML,
      // what could run, counted in the DOM (markdown shown as its source has
      // the words "onerror=" and "javascript:" as text, which runs nothing)
      live: Array.from(c.node.querySelectorAll('.jp-OutputArea *')).filter(e => e.tagName.toLowerCase() === 'script' ||
        Array.from(e.attributes).some(a => /^on/i.test(a.name) || (/^(href|src|xlink:href|action|formaction)$/i.test(a.name) && /^\s*javascript:/i.test(a.value)))).length
    })).filter(c => c.korch && c.korch.agent), NB);

    // A. a DataFrame defined by hand; the panel asked about it: the agent works in
    //    this kernel, its answer quotes a number only that DataFrame gives, its
    //    code steps are new cells below, marked as the agent's, with a chart
    //    rendered by JupyterLab; the panel shows the model and the turn's tokens
    await step('agent_ask', async () => {
      await waitCell(page, await runCell(page,
        'import pandas as pd\ndf = pd.DataFrame({"region": ["north", "south", "east"], "units": [1200, 2000, 1042]})\ndf'));
      const active = await page.evaluate(nbExpr => eval(nbExpr).content.activeCellIndex, NB);
      const tOpen = Date.now();
      await page.click('.jp-SideBar .lm-TabBar-tab[data-id="korch-agent"]');
      const input = page.locator(`${P} .k-input`);
      await input.waitFor({ timeout: 10000 });
      await page.waitForFunction(p => !document.querySelector(p + ' .k-input').disabled, P, { timeout: 10000 });
      details.panel_ready_s = (Date.now() - tOpen) / 1000;
      details.panel_status = (await page.locator('.korch-agent-status').innerText()).trim();
      await input.fill('How many units in total? Chart them by region.');
      const t = Date.now();
      await page.click(`${P} .k-send`);
      await page.waitForFunction(p => { const x = document.querySelector(p + ' .k-turn .k-text'); return x && x.textContent.trim().length > 0; },
        P, { timeout: 60000, polling: 20 });
      details.first_token_s = (Date.now() - t) / 1000;
      details.panel_open_to_first_token_s = (Date.now() - tOpen) / 1000;
      const answer = page.locator(`${P} .k-turn .k-final`);
      await answer.waitFor({ timeout: 60000 });
      details.agent_answer = (await answer.innerText()).trim();
      details.agent_turn_s = (Date.now() - t) / 1000;
      check(/4242/.test(details.agent_answer), `the answer: ${JSON.stringify(details.agent_answer)}`);
      await idle();
      const said = await page.locator(`${P} .k-log`).innerText();
      const times = said.split(details.agent_answer).length - 1;
      check(times === 1, `the answer is in the panel ${times} times: ${JSON.stringify(said.slice(0, 400))}`);
      details.panel_model = (await page.locator(`${P} .k-model`).innerText()).trim();
      details.panel_turn_tokens = (await page.locator(`${P} .k-turn-foot`).last().innerText()).trim();
      check(details.panel_model === 'openai:gpt-4o-mini', `the panel's model: ${JSON.stringify(details.panel_model)}`);
      check(/\d+ tokens in · \d+ out/.test(details.panel_turn_tokens), `the turn's tokens: ${JSON.stringify(details.panel_turn_tokens)}`);
      const steps = await page.locator(`${P} .k-step`).count();
      check(steps >= 2, `the panel shows ${steps} steps`);
      const mine = await agentCells();
      details.agent_cells = mine.map(c => ({ i: c.i, korch: c.korch, src: c.src.slice(0, 60), out: c.out.slice(0, 80), img: c.img }));
      check(mine.length === 2 && mine[0].i === active + 1 && mine[1].i === active + 2,
        `the agent's cells (the active cell was ${active}): ${JSON.stringify(details.agent_cells)}`);
      check(mine.length > 0 && /TOTAL=4242/.test(mine[0].out), 'the first agent cell lacks its output TOTAL=4242');
      check(mine.length > 1 && mine[0].korch.turn === 1 && mine[0].korch.step === 1 && mine[1].korch.step === 2 &&
        typeof mine[0].korch.session === 'string', `the first cell's metadata ${JSON.stringify(mine[0] && mine[0].korch)}`);
      check(mine.length > 1 && mine[1].img.length === 1 && mine[1].img[0] > 100, 'the chart is not rendered in the second agent cell');
      // the chat does not render the outputs itself: JupyterLab does, in the cells
      const inPanel = await page.locator(`${P} .k-outputs img, ${P} .k-outputs pre`).count();
      check(inPanel === 0, `the panel rendered ${inPanel} outputs itself`);
      if (mine.length > 1) await scrollTo(page, mine[1].i);
      await shot(page, 'agent-answer');
    });

    // A1. Verify in the panel: the session's clean notebook re-run in a fresh
    //     kernel of the same kernelspec (POST .../verify through the server
    //     extension). Its cells read the DataFrame the user made by hand, which
    //     no agent cell defines: the result says it did not re-run and why, as
    //     the person given the notebook would meet it. No cell is added (and
    //     the notebook's kernel still has the DataFrame: step D prints it).
    await step('agent_verify', async () => {
      const before = (await agentCells()).length;
      const btn = page.locator(`${P} .k-verify-btn`);
      await page.waitForFunction(p => { const b = document.querySelector(p + ' .k-verify-btn'); return b && !b.disabled; }, P, { timeout: 20000 });
      const t = Date.now();
      await btn.click();
      const box = page.locator(`${P} .k-turn .k-verify:not([data-status=running])`);
      await box.waitFor({ timeout: 120000 });
      details.panel_verify_s = (Date.now() - t) / 1000;
      details.panel_verify = { status: await box.getAttribute('data-status'), text: (await box.innerText()).trim() };
      check(details.panel_verify.status === 'failed' && /^Did not re-run: .*NameError.*'df'/s.test(details.panel_verify.text),
        `the panel's Verify: ${JSON.stringify(details.panel_verify)}`);
      await idle();
      const after = await agentCells();
      check(after.length === before, `Verify added cells to the notebook: ${before} -> ${after.length}`);
      await shot(page, 'agent-verify');
    });

    // A2. a second notebook opened beside the first: the panel follows the
    //     active one (its own session in its own kernel: the same question is
    //     answered from that notebook's DataFrame, the agent's cells land in
    //     that notebook only), then back to the first (its history again)
    await step('agent_switch', async () => {
      const me = nbExpr => { const p = eval(nbExpr); return { id: p.id, path: p.context.path, kernel: p.sessionContext.session.kernel.id }; };
      const first = await page.evaluate(me, NB);
      // the panel bound to that notebook: its path in the status line, its session's
      // history in the log (SAYS: a text its answer has, '' for none), Send enabled
      const panelShows = (who, turns, says) => page.waitForFunction(([p, path, turns, says]) => {
        const st = document.querySelector('.korch-agent-status');
        const inp = document.querySelector(p + ' .k-input');
        const finals = Array.from(document.querySelectorAll(p + ' .k-final'), e => e.textContent);
        return st && st.textContent.startsWith(path + ' ') && inp && !inp.disabled &&
          document.querySelectorAll(p + ' .k-turn').length === turns && finals.length === turns &&
          finals.every(f => f.includes(says));
      }, [P, who.path, turns, says], { timeout: 20000, polling: 50 });
      const t = Date.now();
      await page.evaluate(() => window.jupyterapp.commands.execute('notebook:create-new', { kernelName: 'python3' }));
      await page.waitForFunction(id => { const w = window.jupyterapp.shell.currentWidget; return w && w.id !== id && w.sessionContext; },
        first.id, { timeout: 30000, polling: 100 });
      await waitNotebook(page);
      const second = await page.evaluate(me, NB);
      details.second_notebook = { path: second.path, open_s: (Date.now() - t) / 1000 };
      check(second.kernel !== first.kernel, 'the second notebook has the first one\'s kernel');
      const t2 = Date.now();
      await panelShows(second, 0, '');
      details.switch_to_second_s = (Date.now() - t2) / 1000;
      details.panel_status_second = (await page.locator('.korch-agent-status').innerText()).trim();
      check(details.panel_status_second.includes(second.kernel.slice(0, 8)), `the panel on the second notebook: ${details.panel_status_second}`);
      await waitCell(page, await runCell(page,
        'import pandas as pd\ndf = pd.DataFrame({"region": ["west", "north"], "units": [300, 77]})'));
      await page.locator(`${P} .k-input`).fill('How many units in total? Chart them by region.');
      await page.click(`${P} .k-send`);
      await page.locator(`${P} .k-turn .k-final`).waitFor({ timeout: 60000 });
      await idle();
      details.agent_answer_second = (await page.locator(`${P} .k-turn .k-final`).innerText()).trim();
      check(/\b377\b/.test(details.agent_answer_second), `the second notebook's answer: ${JSON.stringify(details.agent_answer_second)}`);
      const cellsOf = id => page.evaluate(id => {
        const w = Array.from(window.jupyterapp.shell.widgets('main')).find(w => w.id === id);
        return w.content.widgets.filter(c => (c.model.getMetadata('korch') || {}).agent).map(c =>
          ({ turn: c.model.getMetadata('korch').turn, out: c.model.outputs.toJSON().map(o => [].concat(o.text || '').join('')).join('') }));
      }, id);
      const inSecond = await cellsOf(second.id), inFirst = await cellsOf(first.id);
      details.switch_cells = { first: inFirst.map(c => c.out.slice(0, 30)), second: inSecond.map(c => c.out.slice(0, 30)) };
      check(inSecond.length === 2 && /TOTAL=377/.test(inSecond[0].out), `the second notebook's agent cells: ${JSON.stringify(details.switch_cells)}`);
      check(inFirst.length === 2 && !inFirst.some(c => /377/.test(c.out)), `the first notebook's agent cells: ${JSON.stringify(details.switch_cells)}`);
      await shot(page, 'agent-switch-second');
      // back to the first: its session's history, not the second's
      const t3 = Date.now();
      await page.evaluate(id => window.jupyterapp.shell.activateById(id), first.id);
      await panelShows(first, 1, '4242');
      details.switch_back_s = (Date.now() - t3) / 1000;
      const hist = await page.locator(`${P} .k-log`).innerText();
      check(/4242/.test(hist) && !/\b377\b/.test(hist), `the panel back on the first notebook: ${JSON.stringify(hist.slice(0, 300))}`);
      await shot(page, 'agent-switch-back');
      // the second notebook closed, its kernel shut down (korch ends with none)
      await page.evaluate(async id => {
        const w = Array.from(window.jupyterapp.shell.widgets('main')).find(w => w.id === id);
        await w.sessionContext.shutdown();
        w.dispose();
      }, second.id);
      await page.evaluate(id => window.jupyterapp.shell.activateById(id), first.id);
      await panelShows(first, 1, '4242');
    });

    // A3. JupyterLab's dark theme: the panel's code highlighted in the colours a
    //     notebook cell gives the same tokens, every token readable on the
    //     code's background (contrast at least 3:1; the light highlight.js
    //     theme's strings, #032f62, are about 1.4:1 there)
    await step('agent_dark', async () => {
      await page.evaluate(() => window.jupyterapp.commands.execute('apputils:change-theme', { theme: 'JupyterLab Dark' }));
      await page.waitForFunction(() => document.body.dataset.jpThemeLight === 'false', null, { timeout: 20000, polling: 100 });
      await sleep(800);
      await page.evaluate(p => document.querySelectorAll(p + ' details.k-code').forEach(d => { d.open = true; }), P);
      await sleep(200);
      const seen = await page.evaluate(p => {
        const rgb = c => (c.match(/[\d.]+/g) || []).map(Number);
        const lum = ([r, g, b]) => { const f = v => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
          return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b); };
        const bgOf = e => { for (; e; e = e.parentElement) { const c = rgb(getComputedStyle(e).backgroundColor); if (c.length >= 3 && (c.length < 4 || c[3] > 0.5)) return c; } return [255, 255, 255]; };
        const out = [];
        for (const span of document.querySelectorAll(p + ' code.hljs [class^="hljs-"]')) {
          const fg = rgb(getComputedStyle(span).color), bg = bgOf(span);
          const [a, b] = [lum(fg), lum(bg)].sort((x, y) => y - x);
          out.push({ cls: span.className, text: span.textContent.slice(0, 20), fg: fg.slice(0, 3).join(','), bg: bg.slice(0, 3).join(','),
            contrast: Math.round((a + 0.05) / (b + 0.05) * 10) / 10 });
        }
        return out;
      }, P);
      const byClass = {};
      for (const x of seen) if (!byClass[x.cls] || x.contrast < byClass[x.cls].contrast) byClass[x.cls] = x;
      details.dark_tokens = Object.values(byClass);
      check(seen.length >= 3, `the panel's code has ${seen.length} highlighted tokens`);
      const low = seen.filter(x => x.contrast < 3);
      check(low.length === 0, `tokens hard to read in the dark theme: ${JSON.stringify(low.slice(0, 5))}`);
      await page.locator(`${P} details.k-code`).first().scrollIntoViewIfNeeded();
      await shot(page, 'agent-dark');
      await page.evaluate(p => document.querySelectorAll(p + ' details.k-code').forEach(d => { d.open = false; }), P);
      await page.evaluate(() => window.jupyterapp.commands.execute('apputils:change-theme', { theme: 'JupyterLab Light' }));
      await page.waitForFunction(() => document.body.dataset.jpThemeLight === 'true', null, { timeout: 20000, polling: 100 });
    });

    // B. hostile output: the model's narration and answer and the kernel's
    //    outputs carry script (<script>, onerror, javascript: links, an SVG's
    //    onload); nothing runs, in the panel (DOMPurify) or in the cell
    //    (JupyterLab's sanitizer: the agent's outputs are untrusted)
    await step('agent_hostile', async () => {
      await page.evaluate(() => { delete window.__xss; });
      await page.locator(`${P} .k-input`).fill('Show me something hostile.');
      await page.click(`${P} .k-send`);
      await page.locator(`${P} .k-turn:last-child .k-final`).waitFor({ timeout: 60000 });
      await idle();
      await sleep(500);
      const xss = await page.evaluate(() => window.__xss);
      check(xss === undefined, `a payload ran: window.__xss = ${JSON.stringify(xss)}`);
      const dom = await page.evaluate(p => {
        const root = document.querySelector(p);
        return { scripts: root.querySelectorAll('script').length,
          handlers: Array.from(root.querySelectorAll('*')).filter(e => Array.from(e.attributes).some(a => /^on/i.test(a.name))).length,
          jsLinks: Array.from(root.querySelectorAll('a[href]')).filter(a => /^\s*javascript:/i.test(a.getAttribute('href'))).length,
          final: root.querySelector('.k-turn:last-child .k-final').innerText.trim(),
          narration: (root.querySelector('.k-turn:last-child .k-text') || { innerText: '' }).innerText.trim() };
      }, P);
      details.hostile_panel = dom;
      check(dom.scripts === 0 && dom.handlers === 0 && dom.jsLinks === 0, `the panel's DOM keeps script: ${JSON.stringify(dom)}`);
      check(/HOSTILE done/.test(dom.final) && /bold/.test(dom.narration), `the hostile turn's text is not shown: ${JSON.stringify(dom)}`);
      const all = await agentCells();
      check(all.length === 3 && all.some(c => /TOTAL=4242/.test(c.out) && c.korch.turn === 1),
        `the first turn's cells are not kept beside the new one: ${JSON.stringify(all.map(c => ({ i: c.i, korch: c.korch, out: c.out.slice(0, 40) })))}`);
      const cell = all.filter(c => /XSS-SENT/.test(c.out)).pop();
      check(!!cell, 'no agent cell with the hostile outputs');
      if (cell) {
        check(/html ok/.test(cell.html) && cell.live === 0,
          `the hostile cell's rendered outputs keep ${cell.live} elements with script: ${JSON.stringify(cell.html.slice(0, 3000))}`);
        await scrollTo(page, cell.i);
      }
      await shot(page, 'agent-hostile');
    });

    // C. a reload keeps the notebook (the agent's cells saved with it) and the
    //    panel's history (the chat component rebuilds it from the transcript)
    await step('agent_reload', async () => {
      await page.keyboard.press('Control+s');
      const keep = page.locator('.jp-Dialog .jp-Dialog-button.jp-mod-reject');
      await keep.waitFor({ timeout: 5000 }).then(() => keep.click()).catch(() => {});
      await page.waitForFunction(nbExpr => !eval(nbExpr).context.model.dirty, NB, { timeout: 15000 });
      await page.reload();
      await waitNotebook(page);
      const tab = page.locator('.jp-SideBar .lm-TabBar-tab[data-id="korch-agent"]');
      await tab.waitFor({ timeout: 20000 });
      if (!(await page.locator(`${P} .k-input`).isVisible())) await tab.click();
      await page.waitForFunction(p => document.querySelectorAll(p + ' .k-final').length >= 2, P, { timeout: 20000 });
      const hist = await page.locator(`${P} .k-log`).innerText();
      check(/How many units/.test(hist) && /4242/.test(hist) && /HOSTILE done/.test(hist), `the panel after the reload: ${JSON.stringify(hist.slice(0, 300))}`);
      const verified = await page.locator(`${P} .k-turn >> nth=0`).locator('.k-verify[data-status=failed]').count();
      check(verified === 1, `the first turn's Verify result after the reload: ${verified}`);
      const steps = await page.locator(`${P} .k-step`).count();
      check(steps >= 3, `${steps} steps in the rebuilt history`);
      check((await page.evaluate(() => window.__xss)) === undefined, 'a payload ran after the reload');
      const n = (await agentCells()).length;
      check(n === 3, `${n} agent cells after the reload`);
      // the rebuilt history's "Output: in the notebook cell" shows that cell (turn 1, step 2: the chart)
      await page.locator(`${P} .k-turn >> nth=0`).locator('.k-step[data-step="2"] .k-elsewhere').click();
      await sleep(300);
      const act = await page.evaluate(nbExpr => { const nb = eval(nbExpr).content; const c = nb.widgets[nb.activeCellIndex];
        return c.model.getMetadata('korch') || null; }, NB);
      check(act && act.turn === 1 && act.step === 2, `the revealed cell: ${JSON.stringify(act)}`);
      await shot(page, 'agent-reload');
    });

    // D. A reload in the middle of a long step (the notebook saved with the step's
    //    cell): the panel follows the running turn again (GET .../events) and finds
    //    that cell by its metadata instead of adding it twice; then Stop: the
    //    step's cell shows the interrupt, the turn ends "Stopped", the kernel
    //    keeps the user's DataFrame
    await step('agent_stop', async () => {
      await page.locator(`${P} .k-input`).fill('Now sleep for a minute.');
      await page.click(`${P} .k-send`);
      const sleeping = () => page.waitForFunction(nbExpr => eval(nbExpr).content.widgets.some(c =>
        (c.model.getMetadata('korch') || {}).agent && c.node.innerText.includes('SLEEPING')), NB, { timeout: 30000, polling: 100 });
      await sleeping();
      await page.keyboard.press('Control+s');
      await page.waitForFunction(nbExpr => !eval(nbExpr).context.model.dirty, NB, { timeout: 15000 });
      const tr = Date.now();
      await page.reload();
      await page.waitForFunction(nbExpr => { const p = eval(nbExpr);  // the kernel is busy: not idle
        return p && p.context.isReady && p.sessionContext.session && p.sessionContext.session.kernel; }, NB, { timeout: 60000, polling: 100 });
      const tab = page.locator('.jp-SideBar .lm-TabBar-tab[data-id="korch-agent"]');
      await tab.waitFor({ timeout: 20000 });
      if (!(await page.locator(`${P} .k-input`).isVisible())) await tab.click();
      await page.waitForFunction(p => document.querySelector(p + ' .k-chat').dataset.busy === '1', P, { timeout: 20000, polling: 100 });
      await sleeping();
      details.agent_follow_after_reload_s = (Date.now() - tr) / 1000;
      await sleep(300);
      const gap = await page.evaluate(p => { const l = document.querySelector(p + ' .k-log'); return l.scrollHeight - l.scrollTop - l.clientHeight; }, P);
      check(gap < 5, `the panel opened after the reload is not at the running turn (${gap} px above the end)`);
      const sl = (await agentCells()).filter(c => /SLEEPING/.test(c.src));
      check(sl.length === 1, `after the reload mid-step ${sl.length} agent cells hold the step: ${JSON.stringify(sl.map(c => c.korch))}`);
      await sleep(500);
      const t = Date.now();
      await page.click(`${P} .k-stop`);
      await idle();
      details.agent_stop_s = (Date.now() - t) / 1000;
      await page.waitForFunction(p => document.querySelector(p + ' .k-chat-bar .k-badge').textContent !== 'running', P, { timeout: 5000 })
        .catch(() => {});
      details.agent_stop_badge = await page.locator(`${P} .k-chat-bar .k-badge`).innerText();
      check(details.agent_stop_badge !== 'running', 'the panel still says running after the Stop');
      const last = page.locator(`${P} .k-turn`).last();
      details.agent_stop_turn = { status: await last.getAttribute('data-status'), foot: (await last.locator('.k-turn-foot').innerText()).trim(),
        phase: (await last.locator('.k-step-phase').last().innerText()).trim() };
      check(details.agent_stop_turn.status === 'interrupted' && /Stopped/.test(details.agent_stop_turn.foot) && details.agent_stop_turn.phase === 'stopped',
        `after Stop the turn: ${JSON.stringify(details.agent_stop_turn)}`);
      const out = await page.evaluate(nbExpr => {
        const c = eval(nbExpr).content.widgets.filter(c => c.node.innerText.includes('SLEEPING')).pop();
        c.node.scrollIntoView();
        return c.model.outputs.toJSON().map(o => o.text || o.ename || '').join('');
      }, NB);
      check(/KeyboardInterrupt/.test(out) && !/WOKE/.test(out), `the stopped step's cell shows ${JSON.stringify(out.slice(0, 200))}`);
      await shot(page, 'agent-stop');
      const j = await runCell(page, 'print(df["units"].sum())');
      await waitCell(page, j);
      check((await cellText(page, j)) === '4242\n', 'the DataFrame did not survive the Stop');
    });

    // E. the panel at a phone's width (JupyterLab's own narrow layout)
    await step('agent_phone', async () => {
      await page.setViewportSize({ width: 390, height: 844 });
      await sleep(800);
      // as a user on a phone does: the file browser closed, the room for the panel
      const left = page.locator('.jp-SideBar.jp-mod-left .lm-TabBar-tab.lm-mod-current');
      if (await left.count()) await left.first().click();
      await sleep(500);
      const tab = page.locator('.jp-SideBar .lm-TabBar-tab[data-id="korch-agent"]');
      if (!(await page.locator(`${P} .k-input`).isVisible())) await tab.click().catch(() => {});
      await sleep(500);
      const box = await page.evaluate(p => {
        const r = s => { const e = document.querySelector(p + ' ' + s); if (!e) return null; const b = e.getBoundingClientRect(); return { x: Math.round(b.x), w: Math.round(b.width), h: Math.round(b.height) }; };
        return { panel: r('.k-chat'), input: r('.k-input'), send: r('.k-send'), stop: r('.k-stop'), vw: innerWidth };
      }, P);
      details.phone = box;
      check(box.send && box.send.x + box.send.w <= box.vw + 1 && box.stop && box.stop.x + box.stop.w <= box.vw + 1,
        `at 390 px the panel's buttons are off screen: ${JSON.stringify(box)}`);
      await shot(page, 'agent-phone');
      await page.setViewportSize({ width: 1280, height: 800 });
      await sleep(500);
    });

    }
    // 7. the kernel culled by korch while the notebook is open: the kernel's
    //    last status is "dead" (korch sends it before closing the channels), and
    //    the page says the notebook has lost its kernel
    await step('culled', async () => {
      await page.evaluate(nbExpr => {
        const k = eval(nbExpr).sessionContext.session.kernel;
        window.__korchStatuses = [];
        k.statusChanged.connect((_, st) => window.__korchStatuses.push(st));
      }, NB);
      const t = Date.now();
      await page.waitForFunction(nbExpr => {
        const p = eval(nbExpr);
        return window.__korchStatuses.includes('dead') || !p.sessionContext.session || !p.sessionContext.session.kernel;
      }, NB, { timeout: (CULL_S + 20) * 1000, polling: 200 });
      details.culled_after_s = (Date.now() - t) / 1000;
      await sleep(1500);
      details.dead_shown = await page.evaluate(nbExpr => {
        const p = eval(nbExpr);
        const name = p.node.querySelector('.jp-KernelName, .jp-Toolbar-kernelName');
        const bar = document.querySelector('#jp-main-statusbar');
        return { statuses: window.__korchStatuses, display: p.sessionContext.kernelDisplayStatus,
          toolbar: name ? name.innerText.trim() : null, statusbar: bar ? bar.innerText.replace(/\s+/g, ' ').slice(0, 200) : null };
      }, NB);
      const d = details.dead_shown;
      check(d.statuses.includes('dead'), `the kernel's statuses after the cull: ${JSON.stringify(d.statuses)}`);
      // JupyterLab 4.0 shows a dead gateway kernel as "| Disconnected" in the status bar
      // (its websocket is closed after the dead status) and the toolbar's circle crossed
      check(d.display !== 'idle' && /\| (Disconnected|Dead|Unknown)/.test(d.statusbar || ''),
        `the page does not say the kernel is gone: ${JSON.stringify(d)}`);
      await shot(page, 'culled');
    });
    // 8. the panel without a gateway (jupyter-lab on its own local kernels): it says
    //    what to configure (the server extension's 503, shown in the status line)
    if (EXT_WHEEL) {
      await step('agent_no_gateway', async () => {
        const plain = await startLab(null, lab.ext);
        try {
          await page.goto(`${plain.url}lab?token=${plain.token}`);
          const card = page.locator('.jp-LauncherCard[data-category="Notebook"]').first();
          await card.waitFor({ timeout: 60000 });
          await card.click();
          await waitNotebook(page, 90000);
          const tab = page.locator('.jp-SideBar .lm-TabBar-tab[data-id="korch-agent"]');
          if (!(await page.locator('.korch-agent .k-input').isVisible())) await tab.click();
          await page.waitForFunction(() => /gateway/.test((document.querySelector('.korch-agent-status') || {}).textContent || ''),
            null, { timeout: 20000 });
          details.no_gateway_status = (await page.locator('.korch-agent-status').innerText()).trim();
          check(/--gateway-url=http:\/\/HOST:PORT/.test(details.no_gateway_status) && /auth_token/.test(details.no_gateway_status),
            `without a gateway the panel says ${JSON.stringify(details.no_gateway_status)}`);
          check(await page.locator('.korch-agent .k-input').isDisabled() && await page.locator('.korch-agent .k-send').isDisabled(),
            'without a gateway the panel still takes a question');
          await shot(page, 'no-gateway');
        } finally {
          plain.proc.kill('SIGTERM');
          await new Promise(r => { if (plain.proc.exitCode !== null) r(); else { plain.proc.on('exit', r); setTimeout(r, 8000); } });
          fs.rmSync(plain.host, { recursive: true, force: true });
        }
      });
    }
  } catch (e) {
    failures.push(`${e.message.split('\n').slice(0, 6).join(' | ')}`);
    if (page) await shot(page, 'failure').catch(() => {});
  } finally {
    details.console_errors = consoleLines.filter(l => /error/i.test(l)).slice(0, 10);
    // the wheel's shared packages (^4.0.0 ...) satisfied by this JupyterLab's: webpack
    // warns "Unsatisfied version X from P of shared singleton module M (required R)"
    // otherwise. (Debian's JupyterLab 4.0.11 warns so about its own react, react-dom
    // and @jupyter/ydoc: not ours.)
    const unsatisfied = consoleLines.filter(l => /Unsatisfied version/i.test(l));
    details.shared_version_warnings = unsatisfied.map(l => l.replace(/^.*shared singleton module /, ''));
    const ours = unsatisfied.filter(l => / module (@jupyterlab\/(application|notebook|cells|services|rendermime)|@lumino\/widgets) /.test(l));
    if (EXT_WHEEL) check(ours.length === 0, `korch-jupyterlab's shared packages: ${JSON.stringify(ours.slice(0, 3))}`);
    await close();
    lab.proc.kill('SIGTERM');
    await new Promise(r => { if (lab.proc.exitCode !== null) r(); else { lab.proc.on('exit', r); setTimeout(r, 8000); } });
    if (failures.length)
      details.jupyterlab_log_tail = fs.readFileSync(lab.logFile, 'utf8').slice(-1500);
    fs.rmSync(lab.host, { recursive: true, force: true });
  }
}

main().catch(e => failures.push(`${e.message}`)).finally(() => {
  result(JSON.stringify({ scenario: `jupyterlab_ui_${label}`, ok: failures.length === 0, failures, details,
    seconds: (Date.now() - t0) / 1000 }));
  process.exit(failures.length ? 1 : 0);
});
