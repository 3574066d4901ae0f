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
const fs = require('fs');
const path = require('path');
const { result } = require('./common');
const { launch } = require('./browser');

const line = process.argv[2];
const shots = process.argv[3];
const checks = [];
const failures = [];
const details = {};
const check = (ok, what, detail) => { checks.push({ ok: !!ok, what }); if (!ok) failures.push(what + (detail !== undefined ? `: ${JSON.stringify(detail).slice(0, 400)}` : '')); return !!ok; };

async function main() {
  const { context, close } = await launch();
  try {
    const page = await context.newPage();
    page.setDefaultTimeout(60000);
    await page.goto(line.trim());
    await page.waitForSelector('body[data-ready="1"]');
    await page.getByRole('button', { name: 'Create a new agent session' }).click();
    await page.waitForFunction(() => location.hash.length > 1 && document.querySelector('.k-chat-bar .k-state-idle'), null, { timeout: 90000 });
    const box = page.getByRole('textbox', { name: 'Message' });
    await box.fill('What is the total?');
    await box.press('Enter');
    const last = page.locator('.k-turn').last();
    const final = last.locator('.k-final');
    await final.waitFor({ timeout: 120000 });

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
    if (shots) {
      fs.mkdirSync(shots, { recursive: true });
      await page.screenshot({ path: path.join(shots, 'webapp-receipts.png'), fullPage: true });
    }

    // ---- the notebook, whole and clean
    const [nbDl] = await Promise.all([page.waitForEvent('download'), page.getByRole('button', { name: /Jupyter notebook/ }).click()]);
    const nb = JSON.parse(fs.readFileSync(await nbDl.path(), 'utf8'));
    const code = nb.cells.filter((c) => c.cell_type === 'code');
    details.tags = code.map((c) => (c.metadata && c.metadata.tags) || []);
    check(code.length === 3 && details.tags[1].includes('raises-exception'), 'the whole notebook keeps the failed attempt, tagged', details.tags);
    const [cleanDl] = await Promise.all([page.waitForEvent('download'), page.getByRole('button', { name: /without the failed attempts/ }).click()]);
    const clean = JSON.parse(fs.readFileSync(await cleanDl.path(), 'utf8'));
    const ccode = clean.cells.filter((c) => c.cell_type === 'code');
    details.clean = { name: cleanDl.suggestedFilename(), cells: ccode.length, meta: clean.metadata && clean.metadata.korch && clean.metadata.korch.clean };
    check(/-clean\.ipynb$/.test(cleanDl.suggestedFilename()), 'the clean notebook downloads as *-clean.ipynb', details.clean.name);
    check(ccode.length === 2 && !ccode.some((c) => c.outputs.some((o) => o.output_type === 'error')),
      'the clean notebook has no failed attempt and no error output', details.clean);
    check(details.clean.meta && details.clean.meta.dropped === 1, 'the clean notebook says what it dropped', details.clean.meta);
  } finally {
    await close();
  }
}

main().catch((e) => failures.push(`${e.name}: ${e.message}`)).finally(() => {
  result(JSON.stringify({ scenario: 'webapp_receipts', ok: failures.length === 0, checks: checks.length, failures, details }));
  process.exit(failures.length ? 1 : 0);
});
