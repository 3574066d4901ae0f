#!/usr/bin/env node
// The classic Jupyter Notebook 6.4 web UI (Debian's python3-notebook) with
// korch serve as its gateway, driven in Debian's Chromium (./browser.js)
// the way a user works: new notebook from the tree page, cells run from the
// toolbar, input() answered in its box, interrupt and restart from the
// toolbar, a page reload, a websocket dropped mid-cell, a kernel culled.
// The notebook server is started here, with its own config, data, runtime
// and notebook dirs and a token of its own:
//
//   python3 -m notebook --no-browser --gateway-url=KORCH --GatewayClient.auth_token=T ...
//
// korch serve must run with --cull-idle-timeout CULL_S --cull-interval 1
// --cull-connected (the last step waits for the cull). Screenshots go to
// SHOTDIR/notebook-LABEL-NN-STEP.png. Prints one JSON line {ok, failures,
// details, seconds}.
//
//   node notebook_ui.js 'http://127.0.0.1:PORT/?token=T' SHOTDIR LABEL CULL_S
'use strict';
const fs = require('fs');
const { launch } = require('./browser');
const { uiRun } = require('./ui_run');

const [korchLine, shotDir, label = 'local', cullArg = '20'] = process.argv.slice(2);
const CULL_S = Number(cullArg);
const t0 = Date.now();
let page;
const { result, log, sleep, check, failures, details, shot, step } = uiRun(`notebook-${label}`, shotDir, () => page);

const { startNotebook, runCell, waitCell, waitIdle, cellText, cellHtml } = require('./nb').nb({ sleep });

const consoleLines = [];

async function main() {
  const ku = new URL(korchLine.trim());
  const korch = { base: `${ku.protocol}//${ku.host}`, token: ku.searchParams.get('token') || '' };
  fs.mkdirSync(shotDir, { recursive: true });
  const nbServer = await startNotebook(korch);
  const { context, close } = await launch({ viewport: { width: 1280, height: 900 } });
  try {
    const tree = await context.newPage();
    await tree.goto(`${nbServer.url}tree?token=${nbServer.token}`);
    // 1. a new notebook from the tree page's New menu (the kernelspecs are korch's)
    let ok = await step('new_notebook', async () => {
      await tree.click('#new-dropdown-button');
      const item = tree.locator('#new-menu li[id^="kernel-python3"] a').first();
      await item.waitFor({ timeout: 15000 });
      details.kernel_menu = (await item.innerText()).trim();
      [page] = await Promise.all([context.waitForEvent('page'), item.click()]);
      page.on('console', m => consoleLines.push(m.text()));
      await page.waitForFunction(() => window.Jupyter && Jupyter.notebook && Jupyter.notebook.kernel &&
        Jupyter.notebook.kernel.is_connected(), null, { timeout: 60000 });
      await waitIdle(page);
      // the kernelspec's logo, fetched through the notebook server from korch's /kernelspecs/
      const logo = await page.evaluate(() => {
        const img = document.querySelector('#kernel_logo_widget img');
        return img ? { src: img.getAttribute('src'), w: img.naturalWidth, shown: img.offsetWidth > 0 } : null;
      });
      details.logo = logo;
      check(logo && logo.w === 64 && logo.shown, `the kernel logo did not load: ${JSON.stringify(logo)}`);
    });
    if (!ok) throw new Error('no notebook page');
    await shot(page, 'new');

    // 2. state across cells
    await step('state', async () => {
      await waitCell(page, await runCell(page, 'x = 21'));
      const i = await runCell(page, 'print(x * 2)');
      await waitCell(page, i);
      const t = await cellText(page, i);
      check(t === '42\n', `print(x * 2) shows ${JSON.stringify(t)}`);
    });

    // 3. progressive streaming: lines appear while the cell still runs
    await step('streaming', async () => {
      const i = await runCell(page, 'import time\nfor i in range(5):\n    print("tick", i, flush=True)\n    time.sleep(0.6)');
      const tFirst = Date.now();
      await page.waitForFunction(i => Jupyter.notebook.get_cell(i).element[0].innerText.includes('tick 1'),
        i, { timeout: 20000, polling: 50 });
      const running = await page.evaluate(i => Jupyter.notebook.get_cell(i).input_prompt_number, i);
      details.streaming_first_lines_s = (Date.now() - tFirst) / 1000;
      check(running === '*', `the cell was already over (In [${running}]) when its second line showed`);
      await shot(page, 'streaming');
      await waitCell(page, i);
      const t = await cellText(page, i);
      check(t === [0, 1, 2, 3, 4].map(n => `tick ${n}\n`).join(''), `streamed text ${JSON.stringify(t)}`);
    });

    // 4. a matplotlib chart
    await step('matplotlib', async () => {
      const i = await runCell(page, '%matplotlib inline\nimport matplotlib.pyplot as plt\n' +
        'plt.figure(figsize=(5, 3)); plt.plot([1, 2, 3, 4], [1, 4, 9, 16], "o-"); plt.title("korch"); plt.show()');
      await waitCell(page, i, 90000);
      const imgs = await cellHtml(page, i, '.output_subarea img');
      details.chart = imgs[0];
      check(imgs.length === 1 && imgs[0].w > 100 && imgs[0].h > 50, `chart image ${JSON.stringify(imgs)}`);
      await page.evaluate(i => Jupyter.notebook.get_cell(i).element[0].scrollIntoView(), i);
      await shot(page, 'chart');
    });

    // 5. a DataFrame as an HTML table
    await step('dataframe', async () => {
      const i = await runCell(page, 'import pandas as pd\npd.DataFrame({"city": ["Oslo", "Lima", "Pune"], "temp": [4.5, 19.0, 31.2]})');
      await waitCell(page, i, 60000);
      const cells = await cellHtml(page, i, '.output_subarea table.dataframe td');
      details.dataframe_cells = cells.map(c => c.text);
      check(cells.length === 6 && cells.some(c => c.text === 'Lima') && cells.some(c => c.text === '31.2'),
        `DataFrame table cells ${JSON.stringify(details.dataframe_cells)}`);
      await shot(page, 'dataframe');
    });

    // 6. a traceback
    await step('traceback', async () => {
      const i = await runCell(page, 'def f(n):\n    return 1 / n\nf(0)');
      await waitCell(page, i);
      const err = await cellHtml(page, i, '.output_error');
      check(err.length === 1 && err[0].text.includes('ZeroDivisionError') && err[0].text.includes('----> 3'),
        `traceback shown: ${JSON.stringify(err.map(e => e.text.slice(0, 200)))}`);
      await shot(page, 'traceback');
    });

    // 7. input(): the box appears, the answer reaches the kernel
    await step('input', async () => {
      const i = await runCell(page, 'name = input("who are you? ")\nprint("hello", name)');
      const box = page.locator('.raw_input_container input.raw_input');
      await box.waitFor({ timeout: 20000 });
      await shot(page, 'input');
      await box.fill('korch');
      await box.press('Enter');
      await waitCell(page, i);
      const t = await cellText(page, i);
      check(t.includes('hello korch'), `after input(): ${JSON.stringify(t)}`);
    });

    // 8. interrupt from the toolbar keeps the kernel's state
    await step('interrupt', async () => {
      await waitCell(page, await runCell(page, 'kept = "still here"'));
      const i = await runCell(page, 'import time\ntime.sleep(30)');
      await page.waitForSelector('#kernel_indicator_icon.kernel_busy_icon', { timeout: 10000 });
      await sleep(300);
      const t = Date.now();
      await page.click('button[data-jupyter-action="jupyter-notebook:interrupt-kernel"]');
      await waitCell(page, i, 15000);
      details.interrupt_s = (Date.now() - t) / 1000;
      const out = await cellText(page, i);
      check(out.includes('KeyboardInterrupt'), `interrupted cell shows ${JSON.stringify(out.slice(0, 200))}`);
      const j = await runCell(page, 'print(kept)');
      await waitCell(page, j);
      check((await cellText(page, j)) === 'still here\n', 'the state did not survive the interrupt');
      await shot(page, 'interrupt');
    });

    // 9. an ipywidgets slider, shown again after a page reload (the widget
    //    manager finds it with comm_info_request)
    await step('widget_reload', async () => {
      const i = await runCell(page, 'import ipywidgets as w\nslider = w.IntSlider(value=7, min=0, max=10, description="korch")\nslider');
      await waitCell(page, i, 60000);
      await page.waitForFunction(i => Jupyter.notebook.get_cell(i).element[0].querySelector('.widget-slider, .widget-hslider'),
        i, { timeout: 20000 });
      await shot(page, 'widget');
      await page.evaluate(() => Jupyter.notebook.save_notebook());
      await page.waitForFunction(() => !Jupyter.notebook.dirty, null, { timeout: 15000 });
      const t = Date.now();
      const mark = consoleLines.length;
      await page.reload();
      await page.waitForFunction(() => window.Jupyter && Jupyter.notebook && Jupyter.notebook._fully_loaded &&
        Jupyter.notebook.kernel && Jupyter.notebook.kernel.is_connected(), null, { timeout: 60000 });
      await page.waitForFunction(i => {
        const c = Jupyter.notebook.get_cell(i);
        return c && c.element[0].querySelector('.widget-slider, .widget-hslider');
      }, i, { timeout: 20000 });
      details.widget_after_reload_s = (Date.now() - t) / 1000;
      const val = await page.evaluate(i => {
        const el = Jupyter.notebook.get_cell(i).element[0];
        const r = el.querySelector('.widget-readout');
        return r ? (r.innerText || r.value || '').trim() : null;
      }, i);
      check(val === '7', `the slider after the reload reads ${JSON.stringify(val)}`);
      // the widget manager's version check round trip (comm_open, comm_msg both ways) on reconnecting
      for (let k = 0; k < 50 && !consoleLines.slice(mark).some(l => /versions are compatible/.test(l)); k++)
        await sleep(100);
      check(consoleLines.slice(mark).some(l => /versions are compatible/.test(l)),
        'no "Widget backend and frontend versions are compatible" after the reload');
      // it is live: the kernel's change shows in it
      await waitCell(page, await runCell(page, 'slider.value = 9'));
      await page.waitForFunction(i => {
        const r = Jupyter.notebook.get_cell(i).element[0].querySelector('.widget-readout');
        return r && (r.innerText || r.value || '').trim() === '9';
      }, i, { timeout: 10000 });
      await page.evaluate(i => Jupyter.notebook.get_cell(i).element[0].scrollIntoView(), i);
      await shot(page, 'widget-after-reload');
    });

    // 10. the browser's websocket dropped mid-cell: nothing lost, the cell ends
    await step('ws_drop', async () => {
      // closed from the page right after a line shows: the Notebook server's
      // gateway client drops what korch still sends on the upstream socket
      // between the browser's close and its own (korch cannot know), so the
      // next line is half a second away
      const i = await runCell(page, 'import time\nfor i in range(12):\n    print("line", i, flush=True)\n    time.sleep(0.5)');
      await page.waitForFunction(i => Jupyter.notebook.get_cell(i).element[0].innerText.includes('line 2'),
        i, { timeout: 20000, polling: 50 });
      await page.evaluate(() => Jupyter.notebook.kernel.ws.close());
      await page.waitForFunction(() => !Jupyter.notebook.kernel.is_connected(), null, { timeout: 5000, polling: 20 });
      details.ws_dropped = true;
      await page.waitForFunction(() => Jupyter.notebook.kernel.is_connected(), null, { timeout: 20000 });
      await waitCell(page, i, 30000);
      const t = await cellText(page, i);
      const want = Array.from({ length: 12 }, (_, n) => `line ${n}\n`).join('');
      check(t === want, `after the drop the cell shows ${JSON.stringify(t)}`);
      await page.evaluate(i => Jupyter.notebook.get_cell(i).element[0].scrollIntoView(), i);
      await shot(page, 'ws-drop');
    });

    // 11. restart of a busy kernel from the toolbar: state gone, fast
    await step('restart', async () => {
      await runCell(page, 'import time\ntime.sleep(60)');
      await page.waitForSelector('#kernel_indicator_icon.kernel_busy_icon', { timeout: 10000 });
      await sleep(300);
      await page.click('button[data-jupyter-action="jupyter-notebook:confirm-restart-kernel"]');
      const btn = page.locator('.modal-footer button.btn-danger');
      await btn.waitFor({ timeout: 10000 });
      const t = Date.now();
      await btn.click();
      await page.waitForFunction(() => document.querySelector('#notification_kernel') &&
        /restart/i.test(document.querySelector('#notification_kernel').innerText), null, { timeout: 10000, polling: 20 })
        .catch(() => {});
      await waitIdle(page, 30000);
      details.restart_busy_s = (Date.now() - t) / 1000;
      await shot(page, 'restarted');
      const j = await runCell(page, 'print("kept" in dir())');
      await waitCell(page, j);
      check((await cellText(page, j)) === 'False\n', 'a variable survived the restart');
      await shot(page, 'restart');
    });

    // 12. 12 MB printed at once: cut at korch's 8 MiB, and the cut says so
    await step('print_12mb', async () => {
      const t = Date.now();
      const i = await runCell(page, 'print(("y" * 99 + "\\n") * 120000, end="")');
      await waitCell(page, i, 120000);
      await page.waitForFunction(i => Jupyter.notebook.get_cell(i).element[0].querySelector('.output_text'),
        i, { timeout: 60000 });
      details.print_12mb_s = (Date.now() - t) / 1000;
      const info = await page.evaluate(i => {
        const c = Jupyter.notebook.get_cell(i);
        const text = c.output_area.outputs.map(o => o.text || '').join('');
        const pres = c.element[0].querySelectorAll('.output_text pre');
        const last = pres[pres.length - 1];
        const scroller = c.element[0].querySelector('.output_scroll') || c.element[0].querySelector('.output');
        if (scroller) scroller.scrollTop = scroller.scrollHeight;
        c.element[0].scrollIntoView(false);
        return { len: text.length, tail: text.slice(-120), domTail: last ? last.innerText.slice(-120) : null };
      }, i);
      details.print_12mb = { chars: info.len, tail: info.tail };
      const note = /\[korch: [0-9.]+ MB of output dropped here\]\n$/;
      check(note.test(info.tail), `no cut note at the end of the output: ${JSON.stringify(info.tail)}`);
      check(info.domTail && /\[korch: [0-9.]+ MB of output dropped here\]/.test(info.domTail),
        `the cut note is not in the page: ${JSON.stringify(info.domTail)}`);
      check(info.len > 8e6 && info.len < 8.5e6, `the output has ${info.len} characters`);
      await sleep(300);
      await shot(page, 'print-12mb');
      // a smaller output keeps the page light for the last step
      await page.evaluate(i => Jupyter.notebook.get_cell(i).clear_output(), i);
    });

    // 13. the kernel culled by korch while the notebook is open: the dead-kernel dialog
    await step('culled', async () => {
      const t = Date.now();
      await page.waitForFunction(() => {
        const m = document.querySelector('.modal.in .modal-title, .modal.show .modal-title');
        return m && /dead kernel/i.test(m.innerText);
      }, null, { timeout: (CULL_S + 20) * 1000, polling: 200 });
      details.culled_after_s = (Date.now() - t) / 1000;
      details.dead_dialog = await page.evaluate(() => document.querySelector('.modal.in .modal-body, .modal.show .modal-body').innerText.slice(0, 200));
      await sleep(500);
      await shot(page, 'culled');
    });
  } catch (e) {
    failures.push(`${e.message.split('\n').slice(0, 6).join(' | ')}`);
    if (page) await shot(page, 'failure').catch(() => {});
  } finally {
    details.console_errors = consoleLines.filter(l => /error/i.test(l)).slice(0, 10);
    await close();
    nbServer.proc.kill('SIGTERM');
    await new Promise(r => { if (nbServer.proc.exitCode !== null) r(); else { nbServer.proc.on('exit', r); setTimeout(r, 8000); } });
    if (failures.length)
      details.notebook_log_tail = fs.readFileSync(nbServer.logFile, 'utf8').slice(-1500);
    fs.rmSync(nbServer.base, { recursive: true, force: true });
  }
}

main().catch(e => failures.push(`${e.message}`)).finally(() => {
  result(JSON.stringify({ scenario: `notebook_ui_${label}`, ok: failures.length === 0, failures, details,
    seconds: (Date.now() - t0) / 1000 }));
  process.exit(failures.length ? 1 : 0);
});
