// What the page tests of korch serve share (webapp_verify.js,
// webapp_receipts.js, webapp_differed.js, webapp_branch.js): the checks and
// the one JSON line they end with, Chromium on the printed URL, a session
// made and asked through the page, the API beside it with the same token,
// a screenshot.
//
//   const { pageRun } = require('./webpage');
//   pageRun('webapp_x', async ({ check, details, open, ask, api, shot }) => { ... });
'use strict';
const fs = require('fs');
const path = require('path');
const { result } = require('./common');
const { launch } = require('./browser');

/* Run body with a browser on argv[2] (the URL korch serve printed) and the
   screenshot dir argv[3]; print {scenario, ok, checks, failures, details}
   and exit 1 on any failure (a throw is one). */
function pageRun(scenario, body) {
  const line = (process.argv[2] || '').trim();
  const shots = process.argv[3];
  const checks = [];
  const failures = [];
  const details = {};
  const check = (ok, what, detail) => {
    checks.push({ ok: !!ok, what });
    if (!ok) failures.push(what + (detail !== undefined ? `: ${JSON.stringify(detail).slice(0, 400)}` : ''));
    return !!ok;
  };
  const u = new URL(line || 'http://127.0.0.1/');
  const base = `${u.protocol}//${u.host}`;
  const token = u.searchParams.get('token') || '';
  /* korch's agent API with the page's token: the parsed JSON (null on 204), or {status, error} */
  const api = async (method, p, body) => {
    const r = await fetch(base + p, {
      method, headers: { Authorization: `token ${token}`, ...(body !== undefined ? { 'Content-Type': 'application/json' } : {}) },
      body: body !== undefined ? JSON.stringify(body) : undefined,
    });
    if (!r.ok) return { status: r.status, error: await r.text() };
    return r.status === 204 ? null : r.json();
  };
  (async () => {
    const { context, close } = await launch();
    try {
      /* the page, opened on the printed URL and ready */
      const open = async () => {
        const page = await context.newPage();
        page.setDefaultTimeout(60000);
        await page.goto(line);
        await page.waitForSelector('body[data-ready="1"]');
        return page;
      };
      /* New session, then the question: the last turn (a locator) once its answer is in and the turn is over */
      const ask = async (page, question) => {
        const was = await page.evaluate(() => location.hash);
        await page.getByRole('button', { name: 'Create a new agent session' }).click();
        // the new one open (not the session that was open before) and idle
        await page.waitForFunction((was) => location.hash.length > 1 && location.hash !== was &&
          document.querySelector('.k-chat-bar .k-state-idle'), was, { timeout: 90000 });
        const box = page.getByRole('textbox', { name: 'Message' });
        await box.fill(question);
        await box.press('Enter');
        const last = page.locator('.k-turn').last();
        await last.locator('.k-final').waitFor({ timeout: 120000 });
        await page.waitForFunction(() => document.querySelector('.k-turn:last-of-type')?.dataset.status === 'ok');
        return last;
      };
      const shot = async (page, name) => {
        if (!shots) return;
        fs.mkdirSync(shots, { recursive: true });
        await page.screenshot({ path: path.join(shots, `${name}.png`), fullPage: true });
      };
      await body({ check, details, open, ask, api, shot });
    } finally {
      await close();
    }
  })().catch((e) => failures.push(`${e.name}: ${e.message}`)).finally(() => {
    result(JSON.stringify({ scenario, ok: failures.length === 0, checks: checks.length, failures, details }));
    process.exit(failures.length ? 1 : 0);
  });
}

/* A notebook the page downloads when button (a locator) is clicked, parsed; its suggested name in .name */
async function download(page, button) {
  const [dl] = await Promise.all([page.waitForEvent('download'), button.click()]);
  const nb = JSON.parse(fs.readFileSync(await dl.path(), 'utf8'));
  Object.defineProperty(nb, 'name', { value: dl.suggestedFilename(), enumerable: false });
  return nb;
}

module.exports = { pageRun, download };
