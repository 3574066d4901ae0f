// korch's page per user (issue 26), in Debian's Chromium (browser.js):
// against one korch serve --users, alice and bob each have an agent
// session; the page opened with alice's token in its URL lists hers and
// not bob's, bob's page his and not hers, the admin's both; alice's page
// opening bob's session id (its URL hash) is told it is not there. One JSON
// result line on stdout; screenshots in build/screenshots/users-*.png.
//
//   node webapp_users.js 'http://127.0.0.1:PORT/' alice=T,bob=T,root=T
'use strict';
const fs = require('fs');
const path = require('path');
const { result } = require('./common');
const { launch } = require('./browser');

const origin = new URL(process.argv[2].trim()).origin;
const tokens = Object.fromEntries(process.argv[3].split(',').map((kv) => kv.split('=')));
const shots = path.join(__dirname, '..', '..', 'build', 'screenshots');
const failures = [];
const check = (ok, what, detail) => { if (!ok) failures.push(what + (detail !== undefined ? `: ${JSON.stringify(detail).slice(0, 400)}` : '')); return !!ok; };

async function api(who, method, p, body) {
  const r = await fetch(origin + p, {
    method, headers: { Authorization: 'token ' + tokens[who], 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body)
  });
  return { status: r.status, body: r.status === 204 ? null : await r.json().catch(() => null) };
}

async function listed(page) {
  await page.waitForSelector('.k-session-open', { timeout: 20000 });
  await page.waitForTimeout(300);
  return page.$$eval('.k-session-open', (bs) => bs.map((b) => b.getAttribute('aria-label') || ''));
}

async function main() {
  fs.mkdirSync(shots, { recursive: true });
  const t0 = Date.now();
  const mine = {};
  for (const who of ['alice', 'bob']) {
    const r = await api(who, 'POST', '/api/agent/sessions', {});
    if (!check(r.status === 201, `${who}'s session`, r)) return;
    mine[who] = r.body.id;
  }
  const { context, close } = await launch();
  try {
    const seen = {};
    for (const who of ['alice', 'bob', 'root']) {
      const page = await context.newPage();
      await page.goto(`${origin}/?token=${tokens[who]}`);
      const labels = await listed(page);
      seen[who] = labels;
      await page.screenshot({ path: path.join(shots, `users-${who}.png`) });
      const has = (sid) => labels.some((l) => l.startsWith(`Open session ${sid.slice(0, 8)}`));
      const signed = await page.locator('.k-side-who').innerText({ timeout: 5000 }).catch(() => '');
      check(signed.startsWith(`Signed in as ${who}`) && (who === 'root') === signed.includes('admin'),
        `${who}'s page says whose it is`, signed);
      if (who === 'root') {
        check(has(mine.alice) && has(mine.bob), 'the admin\'s page lists both sessions', labels);
      } else {
        const other = who === 'alice' ? 'bob' : 'alice';
        check(has(mine[who]), `${who}'s page lists her/his session`, labels);
        check(!has(mine[other]), `${who}'s page lists ${other}'s session`, labels);
        check(labels.length === 1, `${who}'s page lists one session`, labels);
      }
      await page.close();
    }
    // alice's page pointed at bob's session: not there for her
    const page = await context.newPage();
    await page.goto(`${origin}/?token=${tokens.alice}#${mine.bob}`);
    await page.waitForSelector('body[data-ready="1"]', { timeout: 20000 });
    const current = await page.$$eval('.k-current .k-session-open', (bs) => bs.map((b) => b.getAttribute('aria-label') || ''));
    check(current.length === 1 && current[0].startsWith(`Open session ${mine.alice.slice(0, 8)}`),
      'alice\'s page, sent to bob\'s session, opens hers (bob\'s is not there for her)', current);
    const text = await page.locator('body').innerText();
    check(!text.includes(mine.bob.slice(0, 8)), 'alice\'s page shows bob\'s session id', text.slice(0, 300));
    const g = await api('alice', 'GET', `/api/agent/sessions/${mine.bob}`);
    check(g.status === 404, 'alice GET bob\'s session', g.status);
    await page.close();
    result(JSON.stringify({ ok: failures.length === 0, failures, seen, seconds: (Date.now() - t0) / 1000 }));
  } finally {
    for (const who of ['alice', 'bob'])
      if (mine[who]) await api(who, 'DELETE', `/api/agent/sessions/${mine[who]}`);
    await close();
  }
}

main().catch((e) => { result(JSON.stringify({ ok: false, failures: failures.concat([String(e && e.stack || e)]) })); process.exitCode = 1; })
  .then(() => { if (failures.length) process.exitCode = 1; });
