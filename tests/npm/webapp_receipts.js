// Receipts and the clean notebook on korch's page (issue 23), judged in
// Debian's Chromium against a real korch serve whose scripted model
// (agent_scenarios.py "receipts") answers with six numbers: five the kernel
// printed (exact, rounded, a percent of a printed ratio, a thousands
// separator, a magnitude) and one it never printed (17.3, made up), after
// a failed attempt.
//
// Checked: each number of the answer is a span whose tooltip (title, what a
// hover shows) says where it came from, or that no output printed it; the
// made-up one is marked and counted under the answer; a printed number is
// a link that flashes its step; "Clean notebook" downloads a notebook
// without the failed attempt (and no error output) where "Jupyter
// notebook" keeps it, tagged raises-exception. One JSON line on stdout;
// a screenshot in build/screenshots/webapp-receipts.png.
//
//   node webapp_receipts.js 'http://127.0.0.1:PORT/?token=T' SCREENSHOT_DIR
'use strict';
const { pageRun, download } = require('./webpage');

pageRun('webapp_receipts', async ({ check, details, open, ask, shot }) => {
  const page = await open();
  const last = await ask(page, 'What is the total?');
  const final = last.locator('.k-final');

  // ---- the receipts: a span per number, its tooltip the receipt
  const nums = await final.locator('.k-num').evaluateAll((els) => els.map((e) => ({
    text: e.textContent, ok: e.classList.contains('k-num-ok'), title: e.title, link: e.getAttribute('role') === 'link'
  })));
  details.numbers = nums;
  check(nums.length === 6, 'six numbers of the answer are marked', nums);
  const ok = nums.filter((n) => n.ok), bad = nums.filter((n) => !n.ok);
  check(ok.length === 5 && ok.every((n) => /printed at turn \d+, step \d+/.test(n.title)),
    'each computed number says which step printed what', ok);
  check(ok.some((n) => /^rounded of /.test(n.title)) && ok.some((n) => /^percent of /.test(n.title)),
    'the rounded and the percent ones say so', ok.map((n) => n.title));
  check(bad.length === 1 && bad[0].text === '17.3' && /not computed by the kernel/.test(bad[0].title),
    'the made-up 17.3 is flagged', bad);
  check(/1 number not computed by the kernel/.test(await final.locator('.k-receipts-bad').innerText().catch(() => '')),
    'the answer counts the made-up number');
  // a hover: the pointer over a number, its title is the tooltip Chromium shows
  const first = final.locator('.k-num-ok').first();
  await first.hover();
  const hovered = await page.evaluate(() => {
    const h = [...document.querySelectorAll(':hover')].pop();
    return h ? { cls: h.className, title: h.title } : null;
  });
  details.hovered = hovered;
  check(hovered && /k-num-ok/.test(hovered.cls) && /printed at turn/.test(hovered.title), 'hovering a number shows its receipt', hovered);
  // a click on it flashes the step that printed it
  await first.click();
  const flashed = await page.waitForFunction(() => document.querySelector('.k-flash'), null, { timeout: 3000 }).then(() => true, () => false);
  check(flashed, 'a computed number links to its step (the step flashes)');
  await shot(page, 'webapp-receipts');

  // ---- the notebook, whole and clean
  const nb = await download(page, page.getByRole('button', { name: /Jupyter notebook/ }));
  const code = nb.cells.filter((c) => c.cell_type === 'code');
  details.tags = code.map((c) => (c.metadata && c.metadata.tags) || []);
  check(code.length === 3 && details.tags[1].includes('raises-exception'), 'the whole notebook keeps the failed attempt, tagged', details.tags);
  const clean = await download(page, page.getByRole('button', { name: /without the failed attempts/ }));
  const ccode = clean.cells.filter((c) => c.cell_type === 'code');
  details.clean = { name: clean.name, cells: ccode.length, meta: clean.metadata && clean.metadata.korch && clean.metadata.korch.clean };
  check(/-clean\.ipynb$/.test(clean.name), 'the clean notebook downloads as *-clean.ipynb', details.clean.name);
  check(ccode.length === 2 && !ccode.some((c) => c.outputs.some((o) => o.output_type === 'error')),
    'the clean notebook has no failed attempt and no error output', details.clean);
  check(details.clean.meta && details.clean.meta.dropped === 1, 'the clean notebook says what it dropped', details.clean.meta);
});
