// Verify and the ledger on korch's page (issue 23), judged in Debian's
// Chromium against a real korch serve (--launcher sandbox: its kernels have a
// cgroup) whose scripted model (trust_scenarios.py "receipts") answers with
// numbers the kernel printed, after a failed attempt.
//
// Checked: each step shows its CPU seconds and peak memory, the turn's foot
// their sums; "Verify" re-runs the clean notebook in a fresh kernel and the
// result is shown under the answer (reproduced, with the cells and numbers
// compared); it is still there after a reload (the transcript's verify
// record), and the downloaded notebook has it in metadata.korch.verify.
// One JSON line on stdout; a screenshot in build/screenshots/webapp-verify.png.
//
//   node webapp_verify.js 'http://127.0.0.1:PORT/?token=T' SCREENSHOT_DIR
'use strict';
const { pageRun, download } = require('./webpage');

pageRun('webapp_verify', async ({ check, details, open, ask, shot }) => {
  const page = await open();
  const verifyBtn = page.getByRole('button', { name: /Verify the answer/ });
  check(await verifyBtn.isDisabled(), 'Verify is disabled before a session has answered');
  const last = await ask(page, 'What is the total?');

  // ---- the ledger: per step, per turn
  const steps = await last.locator('.k-step-usage').allInnerTexts();
  details.steps = steps;
  const shown = steps.filter((t) => t.trim());
  check(shown.length === 3 && shown.every((t) => /^\d+\.\d\d s CPU · peak \d+ MiB$/.test(t.trim())),
    'each step shows its CPU seconds and peak memory', steps);
  const foot = await last.locator('.k-turn-foot').innerText();
  details.foot = foot;
  check(/kernel CPU \d+\.\d\d s · peak \d+ MiB/.test(foot), "the turn's foot sums the steps' CPU and peak", foot);

  // ---- Verify: the clean notebook in a fresh kernel, the result under the answer
  await page.waitForFunction(() => !document.querySelector('.k-verify-btn')?.disabled, null, { timeout: 10000 });
  const t0 = Date.now();
  await verifyBtn.click();
  const running = await page.waitForFunction(() => document.querySelector('.k-verify[data-status=running]'), null, { timeout: 5000 }).then(() => true, () => false);
  check(running, 'the page says it is verifying');
  const res = last.locator('.k-verify[data-status=reproduced]');
  await res.waitFor({ timeout: 90000 }).catch(() => {});
  details.verify_ms = Date.now() - t0;
  const text = await last.locator('.k-verify').last().innerText().catch(() => '');
  details.verify = text;
  check(/^Reproduced in a fresh python3 kernel \(2 code cells, 5 numbers compared\) in \d+\.\d s/.test(text),
    'the answer is shown reproduced, with what was compared', text);
  check(!(await verifyBtn.isDisabled()), 'Verify can be asked again once done');
  await shot(page, 'webapp-verify');
  // ---- after a reload: from the transcript
  await page.reload();
  await page.waitForSelector('body[data-ready="1"]');
  const again = await page.locator('.k-turn').last().locator('.k-verify[data-status=reproduced]').innerText({ timeout: 30000 }).catch(() => '');
  check(/^Reproduced in a fresh python3 kernel/.test(again), 'the result is there after a reload', again);
  const steps2 = (await page.locator('.k-turn').last().locator('.k-step-usage').allInnerTexts()).filter((t) => t.trim());
  check(steps2.length === 3 && steps2.every((t) => /s CPU · peak \d+ MiB/.test(t)), 'and the steps\' ledger too', steps2);
  // ---- the notebook has it in its metadata
  const nb = await download(page, page.getByRole('button', { name: /Jupyter notebook/ }));
  const v = nb.metadata && nb.metadata.korch && nb.metadata.korch.verify;
  details.metadata = v;
  check(v && v.status === 'reproduced' && v.compared === 5, "the notebook's metadata.korch.verify", v);
  const kl = nb.metadata && nb.metadata.korch && nb.metadata.korch.ledger && nb.metadata.korch.ledger.kernel;
  check(kl && kl.cpu_s > 0 && kl.mem_peak_bytes > 0, "the notebook's kernel ledger", kl);
});
