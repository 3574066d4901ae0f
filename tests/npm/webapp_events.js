// The page's turn view (src/web/src/turn.ts) fed the events of the agent
// event contract (CONTRACT: code_delta, status, files, result.figures,
// done.tokens) and some it does not know, in Debian's Chromium: each is
// rendered, script in any of them stays inert. Built here with the page's
// own esbuild (src/web/node_modules, which `make` installs). One JSON
// result line on stdout.
'use strict';
const path = require('path');
const { result, withTimeout } = require('./common');
const { launch } = require('./browser');

const web = path.join(__dirname, '..', '..', 'src', 'web');
const failures = [];
let checks = 0;
const check = (ok, what, detail) => { checks++; if (!ok) failures.push(what + (detail !== undefined ? `: ${JSON.stringify(detail).slice(0, 300)}` : '')); };

// a 2x1 PNG
const PNG = 'iVBORw0KGgoAAAANSUhEUgAAAAIAAAABCAYAAAD0In+KAAAAEUlEQVR42mP8z8DwnwEJMAIAHiYC/0ZL1EEAAAAASUVORK5CYII=';

async function main() {
  const { build } = require(path.join(web, 'node_modules', 'esbuild'));
  const out = await build({
    stdin: { contents: "import { TurnView } from './src/turn'; import './src/chat.css'; window.TurnView = TurnView;", resolveDir: web, loader: 'ts', sourcefile: 'harness.ts' },
    bundle: true, write: false, outdir: path.join(web, 'harness-out'), format: 'iife', logLevel: 'error',
  });
  const js = out.outputFiles.find((f) => f.path.endsWith('.js')).text;
  const css = out.outputFiles.find((f) => f.path.endsWith('.css')).text;
  const { context, close } = await launch();
  try {
    const page = await context.newPage();
    const dialogs = [];
    page.on('dialog', (d) => { dialogs.push(d.message()); d.dismiss().catch(() => {}); });
    await page.setContent('<!doctype html><html><body><div id="log" class="k-log"></div></body></html>');
    await page.addStyleTag({ content: css });
    await page.addScriptTag({ content: js });
    const r = await page.evaluate(async (png) => {
      const files = [];
      const pngBlob = async () => new Blob([Uint8Array.from(atob(png), (c) => c.charCodeAt(0))], { type: 'image/png' });
      const t = new window.TurnView('a <b>question</b>', { save() {}, nextFigure: (() => { let n = 0; return () => ++n; })(), onFiles: (f) => files.push(...f), download() {}, blob: pngBlob }, true);
      document.getElementById('log').appendChild(t.root);
      const frame = () => new Promise((res) => requestAnimationFrame(() => requestAnimationFrame(res)));
      const q = (s) => t.root.querySelector(s);
      const seen = {};
      const ev = async (name, data) => { t.onEvent(name, data); await frame(); };
      await ev('step', { step: 1 });
      await ev('status', { step: 1, phase: 'model', elapsed_ms: 1200 });
      seen.model = q('.k-step-phase').textContent + ' | ' + q('.k-step-clock').textContent;
      await ev('status', { step: 1, phase: 'retry', attempt: 2, retry_in_ms: 3000, http_status: 429, elapsed_ms: 2500 });
      seen.retry = q('.k-step-phase').textContent;
      await ev('text', { step: 1, text: 'Plan: ' });
      await ev('text', { step: 1, text: '**go** <img src=x onerror="window.__xss=1"> [x](javascript:window.__xss=2)' });
      seen.text = q('.k-text').innerHTML;
      await ev('code_delta', { step: 1, text: 'import pandas as pd\n' });
      seen.partialCode = q('.k-code code').textContent;
      seen.writing = q('.k-step-phase').textContent;
      await ev('code_delta', { step: 1, text: "print('<script>window.__xss=3</script>')" });
      seen.deltaCode = q('.k-code code').textContent;
      await ev('code', { step: 1, text: "import pandas as pd\nprint('full')", language: 'python' });
      seen.code = q('.k-code code').textContent;
      seen.codeLabel = q('.k-code-summary').textContent;
      await ev('status', { step: 1, phase: 'executing', elapsed_ms: 50 });
      seen.executing = q('.k-step-phase').textContent;
      await ev('output', { step: 1, index: 0, append: false, output: { output_type: 'stream', name: 'stdout', text: 'progress 10%\r' } });
      await ev('output', { step: 1, index: 0, append: true, output: { output_type: 'stream', name: 'stdout', text: 'progress 100%\n\u001b[31mred\u001b[0m\nab\bc\n' } });
      seen.stream = q('.k-stream').textContent;
      seen.red = !!q('.k-stream .ansi-red-fg');
      await ev('output', { step: 1, index: 1, append: false, output: { output_type: 'display_data', data: { 'image/png': png, 'text/plain': '<Figure>' }, metadata: {} } });
      await new Promise((res) => setTimeout(res, 200));
      seen.img = q('.k-figure img') && q('.k-figure img').naturalWidth;
      await ev('output', { step: 1, index: 2, append: false, output: { output_type: 'display_data', data: { 'application/javascript': 'window.__xss=4' } } });
      seen.js = q('.k-outputs').lastChild.textContent;
      await ev('output', { step: 1, index: 3, append: false, output: { output_type: 'execute_result', data: { 'application/json': { a: [1, 2] } }, execution_count: 3 } });
      seen.json = q('.k-json') && q('.k-json').textContent;
      await ev('result', { step: 1, status: 'ok', execution_count: 3, elapsed_ms: 1234, text: 'ok', figures: [{ name: 'figure-1.png', url: '/api/agent/sessions/s/figures/figure-1.png' }] });
      seen.result = q('.k-step-phase').textContent + ' | ' + q('.k-step-clock').textContent;
      await ev('files', { step: 1, files: [{ path: 'out/<b>x</b>.csv', size: 10, change: 'created', url: '/api/agent/sessions/s/files/out/x.csv', mime: 'text/csv' }, { path: 'gone.txt', change: 'deleted' }, { path: 'plot.png', size: 70, change: 'created', url: '/u', mime: 'image/png', figure: 'fig-2.png', figure_url: '/api/agent/sessions/s/figures/fig-2.png' }] });
      await new Promise((res) => setTimeout(res, 200));
      seen.saved = [...t.root.querySelectorAll('.k-saved img')].map((i) => i.naturalWidth);
      seen.files = q('.k-files-note').textContent;
      seen.filesHook = files.map((f) => f.path);
      await ev('future_event', { step: 1, anything: true });
      // two tool calls in one step: each its code and its outputs
      await ev('step', { step: 2 });
      await ev('code_delta', { step: 2, text: 'print("A")', index: 0 });
      await ev('code_delta', { step: 2, text: 'print("B")', index: 1 });
      await ev('code', { step: 2, code: 'print("A")\n', language: 'python' });
      await ev('output', { step: 2, index: 0, append: false, output: { output_type: 'stream', name: 'stdout', text: 'A\n' } });
      await ev('result', { step: 2, status: 'ok', execution_count: 4, elapsed_ms: 5 });
      await ev('code', { step: 2, code: 'print("B")\n', language: 'python' });
      await ev('output', { step: 2, index: 0, append: false, output: { output_type: 'stream', name: 'stdout', text: 'B\n' } });
      await ev('result', { step: 2, status: 'ok', execution_count: 5, elapsed_ms: 6 });
      seen.cells = [...t.root.querySelectorAll('.k-step[data-step="2"] .k-cell')].map((c) => [c.querySelector('code').textContent, c.querySelector('.k-outputs').textContent]);
      await ev('step', { step: 3 });
      await ev('text', { step: 3, text: 'The answer is 42.' });
      await ev('final', { step: 3, text: 'The answer is 42.' });
      seen.final = q('.k-final').textContent.trim();
      seen.step2Hidden = t.root.querySelector('.k-step[data-step="3"]').hidden;
      await ev('done', { status: 'ok', tokens: { turn: { input: 1234, output: 56 }, session: { input: 5000, output: 100 } } });
      seen.foot = q('.k-turn-foot').textContent;
      seen.status = t.root.dataset.status;
      seen.question = q('.k-user-text').textContent;
      seen.scripts = document.querySelectorAll('#log script, #log [onerror], #log [onload]').length;
      seen.jsHref = [...document.querySelectorAll('#log a[href]')].map((a) => a.getAttribute('href')).filter((h) => /javascript:/i.test(h)).length;
      // a host showing the code steps itself (the JupyterLab panel's CellSink): each
      // call's code, outputs and result reach it with its step and call; the chat
      // renders no output, folds the code and links to the host's cell
      const calls = [];
      const sink = {
        code: (st, k, code, lang) => calls.push(['code', st, k, code, lang]),
        output: (st, k, i, app, o) => calls.push(['output', st, k, i, app, o.text]),
        result: (st, k, r) => calls.push(['result', st, k, r.execution_count]),
        reveal: (n, st, k) => { calls.push(['reveal', n, st, k]); return true; },
      };
      const h = new window.TurnView('in the notebook', { save() {}, nextFigure: () => 1, onFiles() {}, download() {}, blob: pngBlob, cells: sink }, true);
      h.n = 7;
      document.getElementById('log').appendChild(h.root);
      const hv = async (name, data) => { h.onEvent(name, data); await frame(); };
      await hv('step', { step: 1 });
      await hv('code', { step: 1, code: 'print("A")\n', language: 'python' });
      await hv('output', { step: 1, index: 0, append: false, output: { output_type: 'stream', name: 'stdout', text: 'A' } });
      await hv('output', { step: 1, index: 0, append: true, output: { output_type: 'stream', name: 'stdout', text: '<script>window.__xss=5</script>\n' } });
      await hv('result', { step: 1, status: 'ok', execution_count: 8, elapsed_ms: 3 });
      await hv('code', { step: 1, code: 'print("B")\n', language: 'python' });
      await hv('result', { step: 1, status: 'ok', execution_count: 9, elapsed_ms: 3 });
      seen.hostOutputs = h.root.querySelectorAll('.k-outputs pre, .k-outputs .k-mime').length;
      seen.hostFolded = [...h.root.querySelectorAll('details.k-code')].map((d) => d.open);
      const link = h.root.querySelector('.k-elsewhere');
      seen.hostLink = link && link.tagName + ' ' + link.textContent;
      if (link) link.click();
      seen.hostCalls = calls;
      await new Promise((res) => setTimeout(res, 300));
      seen.xss = window.__xss;
      return seen;
    }, PNG);
    check(r.model === 'thinking… | 1.2 s', 'status model: phase and elapsed', r.model);
    check(/model busy \(429\): retry 2 in 3\.0 s/.test(r.retry), 'status retry', r.retry);
    check(/<strong>go<\/strong>/.test(r.text) && !/onerror|javascript:/.test(r.text), 'text deltas as sanitized markdown', r.text);
    check(r.partialCode === 'import pandas as pd\n' && r.writing === 'writing code…', 'code_delta shows the code as it is written', r);
    check(r.deltaCode.includes("print('<script>window.__xss=3</script>')"), 'code is text, not markup', r.deltaCode);
    check(r.code === "import pandas as pd\nprint('full')" && r.codeLabel === 'Code (python)', 'code replaces the deltas, with its language', r);
    check(r.executing === 'running…', 'status executing', r.executing);
    check(r.stream === 'progress 100%\nred\nac\n' && r.red, 'stream append with \\r and ANSI colours', r.stream);
    check(r.img === 2, 'an image/png output is rendered', r.img);
    check(/never run/.test(r.js), 'application/javascript is shown as not run', r.js);
    check(r.json && r.json.includes('"a"'), 'application/json is shown', r.json);
    check(r.result === 'ran | 1.2 s · [3]', 'result: status, elapsed, execution count', r.result);
    check(r.files.includes('out/<b>x</b>.csv (created)') && r.files.includes('gone.txt (deleted)'), 'files event listed (names as text)', r.files);
    check(JSON.stringify(r.saved) === '[2]', 'a saved chart of a files event is shown', r.saved);
    check(r.filesHook.length === 3, 'files event reaches the files panel', r.filesHook);
    check(JSON.stringify(r.cells) === JSON.stringify([['print("A")\n', 'A\n'], ['print("B")\n', 'B\n']]), 'two calls in a step: each its code and outputs', r.cells);
    check(r.final === 'The answer is 42.' && r.step2Hidden, 'final replaces the streamed text of its step', r);
    check(r.foot.startsWith('1,234 tokens in · 56 out') && r.status === 'ok', 'done.tokens of the turn', r.foot);
    check(r.question === 'a <b>question</b>', 'the question is text', r.question);
    check(JSON.stringify(r.hostCalls) === JSON.stringify([['code', 1, 0, 'print("A")\n', 'python'], ['output', 1, 0, 0, false, 'A'],
      ['output', 1, 0, 0, true, '<script>window.__xss=5</script>\n'], ['result', 1, 0, 8], ['code', 1, 1, 'print("B")\n', 'python'],
      ['result', 1, 1, 9], ['reveal', 7, 1, 0]]), 'a host\'s cells get each call\'s code, outputs and result, and the link', r.hostCalls);
    check(r.hostOutputs === 0 && JSON.stringify(r.hostFolded) === '[false,false]' && r.hostLink === 'BUTTON Output: in the notebook cell',
      'with a host\'s cells the chat renders no output, folds the code, links to the cell', { o: r.hostOutputs, f: r.hostFolded, l: r.hostLink });
    check(r.scripts === 0 && r.jsHref === 0 && r.xss === undefined && dialogs.length === 0, 'nothing ran', { scripts: r.scripts, jsHref: r.jsHref, xss: r.xss, dialogs });
  } finally {
    await close();
  }
}

withTimeout(main(), 90000, 'the event rendering')
  .then(() => result(JSON.stringify({ ok: failures.length === 0, checks, failures })))
  .catch((e) => result(JSON.stringify({ ok: false, checks, failures: [...failures, String(e && e.stack || e)] })));
