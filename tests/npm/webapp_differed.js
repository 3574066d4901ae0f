// Verify's "differed" on korch's page (issue 23), judged in Debian's Chromium
// against a real korch serve whose scripted model (trust_scenarios.py
// "drift") quotes an unseeded random number its one cell printed: a fresh
// kernel draws another.
//
// Checked: "Verify" shows the result as differed, names the number of the
// answer that was not printed again, what the cell printed then and what it
// printed now (the re-run's own output, as the notebook's
// metadata.korch.verify records it), and says so again after a reload.
// One JSON line on stdout; a screenshot in build/screenshots/webapp-differed.png.
//
//   node webapp_differed.js 'http://127.0.0.1:PORT/?token=T' SCREENSHOT_DIR
'use strict';
const { pageRun, download } = require('./webpage');

pageRun('webapp_differed', async ({ check, details, open, ask, shot }) => {
  const page = await open();
  const last = await ask(page, 'Draw a random number.');
  const answer = (await last.locator('.k-final').innerText()).trim();
  const drawn = (answer.match(/drew (\d+)/) || [])[1];
  details.answer = answer;
  check(!!drawn, 'the answer quotes the number the cell printed', answer);

  await page.waitForFunction(() => !document.querySelector('.k-verify-btn')?.disabled, null, { timeout: 10000 });
  const t0 = Date.now();
  await page.getByRole('button', { name: /Verify the answer/ }).click();
  const box = last.locator('.k-verify[data-status=differed]');
  await box.waitFor({ timeout: 90000 }).catch(() => {});
  details.verify_ms = Date.now() - t0;
  const head = await box.locator('.k-verify-head').innerText().catch(() => '');
  const diffs = await box.locator('.k-verify-diffs li').allInnerTexts().catch(() => []);
  details.head = head;
  details.diffs = diffs;
  check(/^Differed in a fresh python3 kernel: 1 of 1 numbers were not printed again in \d+\.\d s/.test(head),
    'the result says it differed, and how many numbers', head);
  // "123456789: printed 123456789 at [1], now "R 987654321"" (the number as the cell printed it, then its output now)
  const m = (diffs[0] || '').match(/^(\d+): printed (\d+) at \[(\d+)\], now "R (\d+)"$/);
  check(diffs.length === 1 && m && m[1] === drawn && m[2] === drawn,
    'the number not reproduced, and what the cell printed then', diffs);
  check(m && m[4] !== drawn, 'what the cell printed instead, another number', diffs);
  await shot(page, 'webapp-differed');

  const nb = await download(page, page.getByRole('button', { name: /Jupyter notebook/ }));
  const v = nb.metadata && nb.metadata.korch && nb.metadata.korch.verify;
  details.metadata = v;
  const d0 = v && Array.isArray(v.differences) ? v.differences[0] : null;
  check(v && v.status === 'differed' && d0 && m && String(d0.now).includes(`R ${m[4]}`),
    "what the page shows is the re-run's output the notebook records", v);

  await page.reload();
  await page.waitForSelector('body[data-ready="1"]');
  const again = await page.locator('.k-turn').last().locator('.k-verify[data-status=differed] li').allInnerTexts().catch(() => []);
  check(again.length === 1 && again[0] === diffs[0], 'the same after a reload', again);
});
