// The web page's files, judged in Debian's Chromium (browser.js) against
// korch serve with an agent dir that has no session yet: a file dropped
// before any session exists (a session is made for it), a file dropped
// right after "New session" while it is still being made (it lands in that
// session), three files at once, a 20 MB file whose progress bar is seen
// part-way (the upload throttled through the DevTools protocol), a
// preview of a CSV (its head as a table) and of a PNG, a delete, then a
// reload. Each file is checked on screen and in GET .../files. One JSON
// result line on stdout; screenshots in build/screenshots/files-*.png.
//
//   node webapp_files.js 'http://127.0.0.1:PORT/?token=T' path/to/sales.csv
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');
const { result } = require('./common');
const { launch } = require('./browser');

const line = process.argv[2];
const csvPath = process.argv[3];
const shots = path.join(__dirname, '..', '..', 'build', 'screenshots');
const checks = [];
const figures = {};
const failures = [];
const check = (ok, what, detail) => { checks.push({ ok: !!ok, what }); if (!ok) failures.push(what + (detail !== undefined ? `: ${JSON.stringify(detail).slice(0, 400)}` : '')); return !!ok; };

async function main() {
  const u = new URL(line.trim());
  const origin = u.origin, token = u.searchParams.get('token');
  const api = async (method, p) => {
    const r = await fetch(origin + p, { method, headers: { Authorization: 'token ' + token } });
    return { status: r.status, body: r.status === 204 ? null : await r.json().catch(() => null) };
  };
  const listing = async (sid) => Object.fromEntries(((await api('GET', `/api/agent/sessions/${sid}/files`)).body || []).map((f) => [f.path, f.size]));
  // a file shown in the list; on a timeout, what the page and the server had then
  const listed = async (page, name, timeout) => {
    try {
      await page.waitForSelector(`.k-file-list button:has-text("${name}")`, { timeout });
    } catch (e) {
      const ups = await page.locator('.k-uploads').innerText().catch(() => '?');
      const shown = await page.locator('.k-file-list').innerText().catch(() => '?');
      const sid = await page.evaluate(() => location.hash.slice(1)).catch(() => '');
      const server = sid ? await listing(sid).catch(() => '?') : 'no session';
      throw new Error(`${name} not listed in ${timeout} ms: uploads ${JSON.stringify(ups)}, list ${JSON.stringify(shown)}, session ${sid}, the server lists ${JSON.stringify(server)}`);
    }
  };
  fs.mkdirSync(shots, { recursive: true });
  const csv = fs.readFileSync(csvPath);
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'korch-webfiles-'));
  const three = ['a.txt', 'b.json', 'c.tsv'].map((n, i) => { const p = path.join(tmp, n); fs.writeFileSync(p, n.endsWith('.tsv') ? 'k\tv\nx\t1\n' : `file ${i}\n`.repeat(i + 1)); return p; });
  const big = path.join(tmp, 'big.bin');
  fs.writeFileSync(big, Buffer.alloc(20 << 20, 3));
  const { context, close } = await launch({ viewport: { width: 1280, height: 800 } });
  const pageErrors = [];
  try {
    const page = await context.newPage();
    page.on('pageerror', (e) => pageErrors.push(String(e)));
    page.setDefaultTimeout(60000);
    await page.goto(line.trim());
    await page.waitForSelector('body[data-ready="1"]');
    check(((await api('GET', '/api/agent/sessions')).body || []).length === 0, 'no session before the first drop');

    // a drop of files made in the page (DataTransfer), as a person's drag does it
    const drop = async (files) => {
      const dt = await page.evaluateHandle((fl) => {
        const d = new DataTransfer();
        for (const f of fl) d.items.add(new File([Uint8Array.from(atob(f.b64), (c) => c.charCodeAt(0))], f.name, { type: f.type }));
        return d;
      }, files.map((f) => ({ name: f.name, type: f.type || '', b64: Buffer.from(f.data).toString('base64') })));
      await page.dispatchEvent('.k-chat', 'drop', { dataTransfer: dt });
    };

    // ---- a file dropped before any session exists: held, shown, a session made for it
    await drop([{ name: 'sales.csv', type: 'text/csv', data: csv }]);
    const held = await page.locator('.k-upload').first().innerText().catch(() => '');
    check(/sales\.csv/.test(held), 'the file dropped before any session is shown at once', held);
    await page.screenshot({ path: path.join(shots, 'files-held.png') });
    await listed(page, 'sales.csv', 90000);
    const sid1 = await page.evaluate(() => location.hash.slice(1));
    check(/^[0-9a-f-]{36}$/.test(sid1), 'a session was made for the dropped file', sid1);
    check((await listing(sid1))['sales.csv'] === csv.length, 'the server lists the dropped file with its size', await listing(sid1));

    // ---- "New session", then a file dropped at once (the session is still being made)
    await page.getByRole('button', { name: 'Create a new agent session' }).click();
    await drop([{ name: 'early.csv', type: 'text/csv', data: 'x,y\n1,2\n' }]);
    const early = await page.locator('.k-upload').first().innerText().catch(() => '');
    await page.waitForFunction((old) => location.hash.slice(1) && location.hash.slice(1) !== old, sid1, { timeout: 90000 });
    const sid2 = await page.evaluate(() => location.hash.slice(1));
    await listed(page, 'early.csv', 90000);
    check(/early\.csv/.test(early), 'the file dropped while the session is made is shown meanwhile', early);
    check((await listing(sid2))['early.csv'] === 8, 'the file dropped right after New session is in the new session', await listing(sid2));
    check(!('early.csv' in (await listing(sid1))), 'and not in the session before it');
    check(((await api('GET', '/api/agent/sessions')).body || []).length === 2, 'one session per click, none for the drop');

    // ---- three files at once
    await page.locator('input[type=file]').setInputFiles(three);
    for (const p of three) await page.waitForSelector(`.k-file-list button:has-text("${path.basename(p)}")`);
    const l3 = await listing(sid2);
    check(three.every((p) => l3[path.basename(p)] === fs.statSync(p).size), 'three files picked at once are all listed by the server', l3);

    // ---- 20 MB with its progress bar seen part-way (uploads throttled to ~8 MB/s)
    const cdp = await context.newCDPSession(page);
    await cdp.send('Network.enable');
    await cdp.send('Network.emulateNetworkConditions', { offline: false, latency: 0, downloadThroughput: -1, uploadThroughput: 8 << 20 });
    await page.evaluate(() => {
      window.__progress = [];
      new MutationObserver(() => document.querySelectorAll('.k-upload progress').forEach((p) => window.__progress.push(p.value / p.max)))
        .observe(document.body, { subtree: true, childList: true, attributes: true, attributeFilter: ['value'] });
    });
    const t0 = Date.now();
    await page.locator('input[type=file]').setInputFiles([big]);
    await page.waitForFunction(() => window.__progress.some((v) => v > 0.05 && v < 0.95), null, { timeout: 30000 }).catch(() => {});
    await page.screenshot({ path: path.join(shots, 'files-progress.png') });
    await page.waitForSelector('.k-file-list button:has-text("big.bin")', { timeout: 120000 });
    figures.upload_20mb_ms = Date.now() - t0;
    await cdp.send('Network.emulateNetworkConditions', { offline: false, latency: 0, downloadThroughput: -1, uploadThroughput: -1 });
    const prog = await page.evaluate(() => window.__progress);
    figures.progress_updates = prog.length;
    check(prog.some((v) => v > 0.05 && v < 0.95), 'the 20 MB upload showed its progress part-way', prog.slice(0, 20));
    check((await listing(sid2))['big.bin'] === 20 << 20, 'the 20 MB file is listed with its size');

    // ---- previews: a CSV's head as a table, a PNG as an image
    await page.getByRole('button', { name: 'Preview early.csv' }).click();
    await page.waitForSelector('.k-preview table');
    const cells = await page.locator('.k-preview table').evaluate((t) => [...t.querySelectorAll('tr')].map((r) => [...r.children].map((c) => c.textContent)));
    check(JSON.stringify(cells) === JSON.stringify([['x', 'y'], ['1', '2']]), "the CSV's preview is its head as a table", cells);
    await page.screenshot({ path: path.join(shots, 'files-preview-csv.png') });
    const png = await page.screenshot({ clip: { x: 0, y: 0, width: 64, height: 48 } });
    await drop([{ name: 'shot.png', type: 'image/png', data: png }]);
    await page.waitForSelector('.k-file-list button:has-text("shot.png")');
    await page.getByRole('button', { name: 'Preview shot.png' }).click();
    await page.waitForFunction(() => { const i = document.querySelector('.k-preview img'); return i && i.complete && i.naturalWidth > 0; });
    const dims = await page.locator('.k-preview img').evaluate((i) => [i.naturalWidth, i.naturalHeight]);
    check(dims[0] === 64 && dims[1] === 48, 'the PNG is previewed as an image of its size', dims);
    await page.screenshot({ path: path.join(shots, 'files-preview.png') });

    // ---- delete (two presses), then a reload: gone on screen and on the server
    const del = page.getByRole('button', { name: 'Delete a.txt', exact: true });
    await del.click();
    await page.getByRole('button', { name: /Really delete a\.txt/ }).click();
    await page.waitForFunction(() => ![...document.querySelectorAll('.k-file-list .k-link')].some((b) => b.textContent === 'a.txt'));
    check(!('a.txt' in (await listing(sid2))), 'the deleted file is gone from the server');
    await page.reload();
    await page.waitForSelector('body[data-ready="1"]');
    await page.waitForSelector('.k-file-list button:has-text("early.csv")');
    const names = await page.locator('.k-file-list .k-link').allInnerTexts();
    check(!names.includes('a.txt') && ['b.json', 'big.bin', 'c.tsv', 'early.csv', 'shot.png'].every((n) => names.includes(n)),
      'after a reload the listing is the same, without the deleted file', names);
    await page.screenshot({ path: path.join(shots, 'files-after-reload.png') });
    check(!pageErrors.length, 'no page errors', pageErrors);
  } catch (e) {
    failures.push(`${e.name}: ${e.message}`);
    for (const p of context.pages()) await p.screenshot({ path: path.join(shots, 'files-failure.png') }).catch(() => {});
  } finally {
    await close();
    fs.rmSync(tmp, { recursive: true, force: true });
  }
  result(JSON.stringify({ ok: failures.length === 0, failures, checks: checks.length, figures }));
  process.exit(failures.length ? 1 : 0);
}

main();
