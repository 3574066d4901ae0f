// What the browser UI tests (notebook_ui.js, jupyterlab_ui.js) share: the one
// result line on stdout, the failures and details it reports, a free port,
// numbered screenshots, and named steps that record their time and take a
// screenshot when they fail.
//
//   const run = uiRun(`notebook-${label}`, shotDir, () => page);
'use strict';
const net = require('net');
const path = require('path');

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => { const p = s.address().port; s.close(() => resolve(p)); });
  });
}

// prefix names the screenshots (PREFIX-NN-STEP.png in shotDir); currentPage()
// is the page a failed step photographs.
function uiRun(prefix, shotDir, currentPage) {
  const failures = [];
  const details = { steps: {} };
  const log = (...a) => process.stderr.write(a.join(' ') + '\n');
  let shotN = 0;
  async function shot(page, step) {
    const file = path.join(shotDir, `${prefix}-${String(++shotN).padStart(2, '0')}-${step}.png`);
    await page.screenshot({ path: file });
    (details.screenshots = details.screenshots || []).push(path.basename(file));
  }
  async function step(name, fn) {
    const t = Date.now();
    try {
      await fn();
      details.steps[name] = { ok: true, s: (Date.now() - t) / 1000 };
    } catch (e) {
      details.steps[name] = { ok: false, s: (Date.now() - t) / 1000 };
      failures.push(`${name}: ${e.message.split('\n').slice(0, 6).join(' | ')}`);
      const page = currentPage();
      if (page) await shot(page, `${name}-failed`).catch(() => {});
      return false;
    }
    log(`step ${name}: ${(Date.now() - t) / 1000} s`);
    return true;
  }
  return {
    failures, details, log, shot, step,
    result: s => process.stdout.write(s + '\n'),
    sleep: ms => new Promise(r => setTimeout(r, ms)),
    check: (ok, what) => { if (!ok) failures.push(what); return ok; },
  };
}

module.exports = { uiRun, freePort };
