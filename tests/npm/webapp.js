// The web page korch serve opens on, judged in Debian's Chromium
// (browser.js): the printed URL, a session, an upload, a turn streamed
// (steps before the answer), a real image, a table, a traceback, the answer
// quoting what only the kernel computed, the notebook, Stop, a reload
// mid-turn, script in outputs kept inert, a phone-width layout, sessions
// made elsewhere. One JSON result line on stdout; screenshots in
// build/screenshots/webapp-*.png.
//
//   node webapp.js 'http://127.0.0.1:PORT/?token=T' path/to/sales.csv
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');
const { result, withTimeout } = require('./common');
const { launch } = require('./browser');

const line = process.argv[2];
const csvPath = process.argv[3];
const shots = path.join(__dirname, '..', '..', 'build', 'screenshots');
const checks = [];
const figures = {};
const failures = [];
const check = (ok, what, detail) => { checks.push({ ok: !!ok, what }); if (!ok) failures.push(what + (detail !== undefined ? `: ${JSON.stringify(detail).slice(0, 400)}` : '')); return !!ok; };

// sum(units * price) of the CSV, as the kernel prints it ('TOTAL=%.2f')
function expectedTotal(csv) {
  const [head, ...rows] = csv.trim().split('\n').map((l) => l.split(','));
  const u = head.indexOf('units'), p = head.indexOf('price');
  return rows.reduce((s, r) => s + Number(r[u]) * Number(r[p]), 0).toFixed(2);
}

async function main() {
  const u = new URL(line.trim());
  const origin = u.origin, token = u.searchParams.get('token');
  const api = async (method, p, body) => {
    const r = await fetch(origin + p, { method, headers: { Authorization: 'token ' + token, 'Content-Type': 'application/json' }, body: body && JSON.stringify(body) });
    return { status: r.status, body: r.status === 204 ? null : await r.json().catch(() => null) };
  };
  fs.mkdirSync(shots, { recursive: true });
  const csv = fs.readFileSync(csvPath, 'utf8');
  const total = expectedTotal(csv);
  const big = path.join(os.tmpdir(), `korch-webapp-big-${process.pid}.bin`);
  fs.writeFileSync(big, Buffer.alloc(6 << 20, 7));
  const { context, close } = await launch({ viewport: { width: 1280, height: 800 } });
  const dialogs = [], pageErrors = [], offsite = [];
  try {
    // every page of the context: no dialog, no request leaves korch, CSP violations counted
    context.on('request', (r) => { if (!r.url().startsWith(origin) && !r.url().startsWith('data:') && !r.url().startsWith('blob:')) offsite.push(r.url()); });
    await context.addInitScript(() => {
      window.__csp = [];
      document.addEventListener('securitypolicyviolation', (e) => window.__csp.push(`${e.violatedDirective} ${e.blockedURI}`));
    });
    const page = await context.newPage();
    page.on('dialog', (d) => { dialogs.push(d.message()); d.dismiss().catch(() => {}); });
    page.on('pageerror', (e) => pageErrors.push(String(e)));
    page.setDefaultTimeout(60000);

    // ---- the printed URL opens the page; the token leaves the address bar
    const t0 = Date.now();
    await page.goto(line.trim());
    await page.waitForSelector('body[data-ready="1"]');
    figures.open_to_usable_ms = Date.now() - t0;
    figures.page_ready_ms = await page.evaluate(() => performance.getEntriesByName('korch-ready')[0]?.startTime);
    check(!page.url().includes('token'), 'the token is gone from the address bar', page.url());
    check(await page.evaluate(() => !!sessionStorage.getItem('korch-token')), 'the token is kept for the tab');
    const headers = (await (await fetch(origin + '/')).headers);
    const csp = headers.get('content-security-policy') || '';
    check(csp.includes("script-src 'self'") && csp.includes("frame-ancestors 'none'") && headers.get('x-content-type-options') === 'nosniff', 'the page has a strict CSP', csp);

    // ---- a session
    const before = ((await api('GET', '/api/agent/sessions')).body || []).map((s) => s.id);
    await page.getByRole('button', { name: 'Create a new agent session' }).click();
    await page.waitForFunction((old) => {
      const id = location.hash.slice(1);
      return id && !old.includes(id) && document.querySelector('.k-chat-title').textContent.includes(id.slice(0, 8)) &&
        document.querySelector('.k-chat-bar .k-state-idle');
    }, before, { timeout: 90000 });
    const sid = await page.evaluate(() => location.hash.slice(1));
    check(/^[0-9a-f-]{36}$/.test(sid), 'a session was created and opened', sid);

    // ---- uploads: the CSV and a big file, with progress
    await page.evaluate(() => {
      window.__progress = [];
      new MutationObserver(() => document.querySelectorAll('.k-upload progress').forEach((p) => window.__progress.push(p.value / p.max)))
        .observe(document.body, { subtree: true, childList: true, attributes: true, attributeFilter: ['value'] });
    });
    await page.locator('input[type=file]').setInputFiles([csvPath, big]);
    await page.waitForSelector('.k-file-list button:has-text("sales.csv")');
    await page.waitForSelector(`.k-file-list button:has-text("${path.basename(big)}")`);
    check(true, 'two files uploaded and listed');
    const prog = await page.evaluate(() => window.__progress);
    check(prog.length > 0, 'upload progress was shown', prog.length);

    // ---- a turn: steps stream, then the answer
    await page.evaluate(() => {
      window.__seen = {};
      const t = () => performance.now();
      new MutationObserver(() => {
        const s = window.__seen;
        if (!s.step && document.querySelector('.k-turn:last-child .k-step:not([hidden])')) s.step = t();
        if (!s.code && document.querySelector('.k-turn:last-child .k-code')) s.code = t();
        if (!s.output && document.querySelector('.k-turn:last-child .k-outputs > *')) s.output = t();
        if (!s.final && document.querySelector('.k-turn:last-child .k-final')) s.final = t();
      }).observe(document.getElementById('app'), { subtree: true, childList: true });
    });
    const box = page.getByRole('textbox', { name: 'Message' });
    await box.fill('analyse sales.csv');
    await box.press('Shift+Enter');
    await box.type('please');
    check((await box.inputValue()) === 'analyse sales.csv\nplease', 'Shift+Enter makes a new line', await box.inputValue());
    await box.press('Enter');
    const last = page.locator('.k-turn').last();
    await last.locator('.k-final').waitFor({ timeout: 120000 });
    const seen = await page.evaluate(() => window.__seen);
    check(seen.step && seen.code && seen.output && seen.step < seen.final && seen.code < seen.final && seen.output < seen.final,
      'steps, code and outputs were on screen before the answer', seen);
    const finalText = await last.locator('.k-final').innerText();
    check(finalText.includes(total), `the answer quotes the kernel's total ${total}`, finalText);
    check((await last.locator('.k-step[data-status] .k-code code.hljs span').count()) > 0, 'the code is highlighted');
    check((await last.locator('.k-html table').count()) > 0, 'a table is rendered');
    const tb = last.locator('.k-traceback');
    check((await tb.count()) > 0 && (await tb.first().innerText()).includes('KeyError'), 'a traceback is rendered');
    check((await tb.first().locator('span[class*="ansi-"]').count()) > 0, 'the traceback keeps its colours');
    const imgs = await last.locator('.k-figure img').evaluateAll((els) => els.map((i) => ({ w: i.naturalWidth, src: i.src.slice(0, 22) })));
    check(imgs.some((i) => i.w > 0 && i.src.startsWith('data:image/png')), 'the chart (PNG) is really rendered', imgs);
    check(imgs.some((i) => i.w > 0 && i.src.startsWith('data:image/svg')), 'the SVG is rendered as an image', imgs);
    const saved = await last.locator('.k-saved img').evaluateAll((els) => els.map((i) => i.naturalWidth));
    check(saved.length === 1 && saved[0] > 0, 'the chart the code saved as a file is shown (files event, figures route)', saved);
    check((await page.locator('.k-file-list button:has-text("by_region.png")').count()) === 1, 'the file the code wrote is listed');
    check((await last.locator('#html-ok').count()) === 1, 'safe HTML of an output is kept');
    check((await last.locator('.k-step-clock').first().innerText()).match(/\d/), 'a step shows its elapsed time');
    check(/tokens in/.test(await last.locator('.k-turn-foot').innerText()), 'the turn shows its tokens', await last.locator('.k-turn-foot').innerText());

    // ---- script in outputs and in the answer is inert
    const hrefs = await page.locator('a[href]').evaluateAll((as) => as.map((a) => a.getAttribute('href')));
    check(!hrefs.some((h) => /^\s*javascript:/i.test(h)), 'no javascript: link survived', hrefs);
    for (const a of await page.locator('.k-log a').all()) await a.click({ modifiers: [] }).catch(() => {});
    await page.waitForTimeout(500);
    const xss = await page.evaluate(() => window.__xss);
    check(xss === undefined, 'no payload ran (window.__xss never set)', xss);
    check((await page.locator('.k-log script').count()) === 0, 'no <script> element in the log');
    check((await page.locator('.k-log [onerror], .k-log [onload]').count()) === 0, 'no event handler attributes in the log');
    await last.locator('.k-traceback').first().scrollIntoViewIfNeeded();
    await page.screenshot({ path: path.join(shots, 'webapp-table.png') });
    await page.locator('.k-figure').first().scrollIntoViewIfNeeded();
    await page.screenshot({ path: path.join(shots, 'webapp-analysis.png') });

    await last.locator('.k-final').scrollIntoViewIfNeeded();
    await page.screenshot({ path: path.join(shots, 'webapp-answer.png') });

    // ---- the chart as PNG, the notebook
    const [figDl] = await Promise.all([page.waitForEvent('download'), last.locator('.k-figure button').first().click()]);
    const png = fs.readFileSync(await figDl.path());
    check(png.slice(0, 8).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])), 'a figure downloads as PNG', figDl.suggestedFilename());
    const [nbDl] = await Promise.all([page.waitForEvent('download'), page.getByRole('button', { name: /Jupyter notebook/ }).click()]);
    let nb = null;
    try { nb = JSON.parse(fs.readFileSync(await nbDl.path(), 'utf8')); } catch (e) { /* checked below */ }
    check(nb && nb.nbformat === 4 && nb.cells.some((c) => c.cell_type === 'code' && [].concat(c.source).join('').includes('read_csv')),
      'the notebook downloads as nbformat 4 with the code', nbDl.suggestedFilename());
    const [fileDl] = await Promise.all([page.waitForEvent('download'), page.getByRole('button', { name: 'Download sales.csv', exact: true }).click()]);
    check(fs.readFileSync(await fileDl.path(), 'utf8') === csv, 'an uploaded file downloads unchanged');

    // ---- Stop during a long step: the turn ends interrupted, the kernel keeps its state
    await box.fill('sleep please');
    await box.press('Enter');
    await page.locator('.k-turn').last().locator('.k-stream:has-text("SLEEPING")').waitFor();
    await page.screenshot({ path: path.join(shots, 'webapp-running.png') });
    const tStop = Date.now();
    await page.getByRole('button', { name: 'Stop the running step' }).click();
    await page.locator('.k-turn[data-status="interrupted"]').last().waitFor({ timeout: 30000 });
    figures.stop_to_interrupted_ms = Date.now() - tStop;
    check(true, 'Stop ended the turn as interrupted');
    await box.fill('what is kept?');
    await box.press('Enter');
    await page.locator('.k-turn').last().locator('.k-final').waitFor({ timeout: 60000 });
    const kept = await page.locator('.k-turn').last().locator('.k-final').innerText();
    check(kept.includes('KEPT is 42'), 'the kernel kept its state after Stop', kept);

    // ---- reload mid-turn: earlier steps come back, then the answer
    await box.fill('slow please');
    await box.press('Enter');
    await page.locator('.k-turn').last().locator('.k-stream:has-text("PART1")').waitFor();
    const latBefore = await page.evaluate(() => window.__korch.stats.latency.map((l) => l.ms));
    const byEvent = await page.evaluate(() => {
      const m = {};
      for (const l of window.__korch.stats.latency) (m[l.event] = m[l.event] || []).push(l.ms);
      return Object.fromEntries(Object.entries(m).map(([k, v]) => [k, [v.length, +v.sort((a, b) => a - b)[v.length >> 1].toFixed(1)]]));
    });
    figures.sse_to_render_by_event = byEvent;
    await page.reload();
    await page.waitForSelector('body[data-ready="1"]');
    const slow = page.locator('.k-turn').last();
    await slow.locator('.k-stream:has-text("PART1")').waitFor({ timeout: 10000 });
    const finalBefore = await slow.locator('.k-final').count();
    check(finalBefore === 0 && (await slow.locator('.k-code').count()) > 0, 'after the reload the running turn shows its earlier step', finalBefore);
    await slow.locator('.k-final').waitFor({ timeout: 60000 });
    check((await slow.locator('.k-final').innerText()).includes('PART2 is 42'), 'then its answer');
    check((await page.locator('.k-final').first().innerText()).includes(total), 'earlier turns come back from the transcript');
    check((await page.locator('.k-turn').count()) === 4, 'four turns after the reload', await page.locator('.k-turn').count());
    const tbAgain = await page.locator('.k-traceback').count(), figAgain = await page.locator('.k-figure img').evaluateAll((e) => e.filter((i) => i.naturalWidth > 0).length);
    check(tbAgain > 0 && figAgain >= 2, 'the rebuilt turns show the traceback and the figures', { tbAgain, figAgain });
    await page.waitForFunction(() => [...document.querySelectorAll('.k-saved img')].some((i) => i.naturalWidth > 0), null, { timeout: 10000 }).catch(() => {});
    check((await page.locator('.k-saved img').evaluateAll((e) => e.filter((i) => i.naturalWidth > 0).length)) === 1, 'the saved chart comes back from the transcript');
    check((await page.evaluate(() => window.__xss)) === undefined, 'no payload ran after the rebuild either');
    await page.screenshot({ path: path.join(shots, 'webapp-desktop.png') });

    // ---- latency: an SSE event's arrival to its rendering
    const lat = latBefore.concat(await page.evaluate(() => window.__korch.stats.latency.map((l) => l.ms))).sort((a, b) => a - b);
    figures.sse_to_render_ms = lat.length ? { n: lat.length, median: +lat[lat.length >> 1].toFixed(1), p95: +lat[Math.floor(lat.length * 0.95)].toFixed(1), max: +lat[lat.length - 1].toFixed(1) } : null;
    check(lat.length > 0, 'latencies measured');

    // ---- a session made through the API shows up; delete it from the page
    const made = await api('POST', '/api/agent/sessions', {});
    check(made.status === 201, 'a session made through the API', made.status);
    const other = made.body && made.body.id;
    await page.waitForSelector(`.k-session-open[aria-label^="Open session ${other.slice(0, 8)}"]`, { timeout: 10000 });
    check(true, 'it shows up in the list');
    const del = page.getByRole('button', { name: `Delete session ${other.slice(0, 8)}` });
    await del.click();
    await page.getByRole('button', { name: new RegExp(`Really delete session ${other.slice(0, 8)}`) }).click();
    await page.waitForSelector(`.k-session-open[aria-label^="Open session ${other.slice(0, 8)}"]`, { state: 'detached', timeout: 20000 });
    check(!(await api('GET', '/api/agent/sessions')).body.some((s) => s.id === other), 'deleted from the page, gone from the API');

    // ---- keyboard: the composer and the buttons are reachable with Tab
    await page.keyboard.press('Tab');
    const focusable = await page.evaluate(() => [...document.querySelectorAll('button, textarea, input, [tabindex]')].filter((e) => !e.disabled).every((e) => e.getAttribute('aria-label') || e.textContent.trim() || e.labels?.length));
    check(focusable, 'every control has a label');

    // ---- phone width
    const phone = await context.newPage();
    phone.on('dialog', (d) => { dialogs.push(d.message()); d.dismiss().catch(() => {}); });
    await phone.setViewportSize({ width: 390, height: 844 });
    await phone.goto(line.trim() + '#' + sid);
    await phone.waitForSelector('body[data-ready="1"]');
    await phone.locator('.k-final').last().waitFor();
    const lay = await phone.evaluate(() => {
      const r = (s) => document.querySelector(s).getBoundingClientRect();
      return { scrollW: document.documentElement.scrollWidth, composer: r('.k-composer'), input: r('.k-input'), send: r('.k-composer .k-primary'), log: r('.k-log') };
    });
    check(lay.scrollW <= 390, 'no horizontal scroll at phone width', lay.scrollW);
    check(lay.composer.bottom <= 844 && lay.send.right <= 390 && lay.input.width > 150, 'the composer fits a phone', lay);
    check(lay.log.height > 250, 'the conversation has room on a phone', lay.log.height);
    await phone.getByRole('button', { name: 'Sessions' }).click();
    check(await phone.locator('.k-sessions').isVisible(), 'the sessions unfold on a phone');
    await phone.getByRole('button', { name: 'Sessions' }).click();
    await phone.screenshot({ path: path.join(shots, 'webapp-phone.png') });

    // ---- a stopped session (its kernel shut down) resumes on its next message
    const sess = (await api('GET', `/api/agent/sessions/${sid}`)).body;
    check((await api('DELETE', `/api/kernels/${sess.kernel_id}`)).status === 204, "the session's kernel shut down");
    await page.locator('.k-chat-bar .k-state-stopped').waitFor({ timeout: 15000 });
    check(true, 'the page shows the session stopped');
    await box.fill('again please');
    await box.press('Enter');
    const again = page.locator('.k-turn').last();
    await again.locator('.k-final').waitFor({ timeout: 90000 });
    check((await again.locator('.k-notice').allInnerTexts()).some((t) => t.includes('resuming')), 'a notice says the session resumes');
    check((await again.locator('.k-final').innerText()).includes(`total is still ${total}`), 'resumed with its state rebuilt', await again.locator('.k-final').innerText());

    check(dialogs.length === 0, 'no dialog fired', dialogs);
    check(offsite.length === 0, 'no request left korch', offsite);
    check(pageErrors.length === 0, 'no page errors', pageErrors);
    figures.csp_violations = await page.evaluate(() => window.__csp);

    await api('DELETE', `/api/agent/sessions/${sid}`);
  } catch (e) {
    for (const p of context.pages()) await p.screenshot({ path: path.join(shots, `webapp-failure-${context.pages().indexOf(p)}.png`) }).catch(() => {});
    throw e;
  } finally {
    await close();
    fs.rmSync(big, { force: true });
  }
}

withTimeout(main(), 280000, 'the web app flow')
  .then(() => result(JSON.stringify({ ok: failures.length === 0, failures, checks: checks.length, figures })))
  .catch((e) => result(JSON.stringify({ ok: false, failures: [...failures, String(e && e.stack || e)], checks: checks.length, figures })));
