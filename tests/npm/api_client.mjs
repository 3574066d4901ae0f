// src/web/src/api.ts as a client on its own, in Node (no window, no DOM):
// the ES module `node src/web/build.mjs --client OUT` writes, against a live
// korch serve whose LLM is the scripted one (scenario "pyclient" of
// tests/peers/pyclient_scenarios.py). tests/test_pyclient.c runs it:
//
//   node tests/npm/api_client.mjs OUT/api.js 'http://127.0.0.1:PORT/?token=T'
//
// Prints {"ok", "failures", "details"} as its last line.
const [modPath, url] = process.argv.slice(2);
const { Api, ApiError } = await import(modPath);
const fail = [], details = {};
const check = (c, what) => { if (!c) fail.push(what); return !!c; };
const u = new URL(url);
const api = new Api({ baseUrl: u.origin + '/', token: u.searchParams.get('token') });
const t0 = performance.now();

async function rejects(p, status, what) {
  try { await p; fail.push(`${what}: no error`); } catch (e) {
    check(e instanceof ApiError && e.status === status && e.message.length > 0, `${what}: ${e} (status ${e.status})`);
  }
}

try {
  check(Array.isArray(await api.sessions()), 'sessions()');
  const s = await api.createSession({ files: [{ name: 'data.csv', content: 'n\n1\n2\n39\n' }] });
  check(typeof s.id === 'string' && typeof s.kernel_id === 'string', `createSession: ${JSON.stringify(s)}`);
  // a turn as an async iterator, live
  const evs = [];
  for await (const ev of api.chat(s.id, 'what is the total?')) evs.push(ev);
  const kinds = evs.map((e) => e.event);
  details.events = evs.length;
  check(kinds[0] === 'step' && kinds.at(-1) === 'done' && evs.at(-1).data.status === 'ok', `turn: ${kinds.join(',')}`);
  check(evs.at(-1).at - evs[0].at > 50, 'events arrived over time (live)');
  check(evs.every((e, i) => typeof e.id === 'number' && (i === 0 || e.id > evs[i - 1].id)), 'ids ascending');
  const final = evs.find((e) => e.event === 'final');
  check(final && final.data.text === 'The total is 42.', `final: ${JSON.stringify(final && final.data)}`);
  check(evs.some((e) => e.event === 'result' && e.data.figures.length > 0), 'a figure');
  // files
  const files = await api.files(s.id);
  check(files.some((f) => f.path === 'out/summary.txt' && f.size === 9), `files: ${JSON.stringify(files.map((f) => f.path))}`);
  check(new TextDecoder().decode(await api.getFile(s.id, 'out/summary.txt')) === 'total 42\n', 'getFile');
  const blob = new Uint8Array(256 * 100).map((_, i) => i % 256);
  const put = await api.putFile(s.id, 'in dir/b.bin', blob);
  check(put.size === blob.length && put.replaced === false, `putFile: ${JSON.stringify(put)}`);
  const back = await api.getFile(s.id, 'in dir/b.bin');
  check(back.length === blob.length && back.every((b, i) => b === blob[i]), 'binary round trip (a name with a space)');
  await api.removeFile(s.id, 'in dir/b.bin');
  await rejects(api.getFile(s.id, 'in dir/b.bin'), 404, 'a removed file');
  await rejects(new Api({ baseUrl: u.origin, token: 'wrong' }).sessions(), 403, 'a wrong token');
  // leaving the loop closes the stream: the turn is cancelled, the session stays
  let sawSleep = false;
  for await (const ev of api.chat(s.id, 'now sleep')) {
    if (ev.event === 'output' && (ev.data.output.text || '').includes('SLEEPING')) { sawSleep = true; break; }
  }
  check(sawSleep, 'saw SLEEPING');
  let st = '';
  for (let i = 0; i < 100 && st !== 'idle'; i++) { st = (await api.session(s.id)).state; if (st !== 'idle') await new Promise((r) => setTimeout(r, 100)); }
  check(st === 'idle', `idle after break: ${st}`);
  const after = [];
  for await (const ev of api.chat(s.id, 'and after?')) after.push(ev);
  check(after.some((e) => e.event === 'final' && e.data.text === 'Still alive: AFTER 42.'), 'the session outlived the break');
  const nb = await api.notebook(s.id);
  check(nb.nbformat === 4, 'notebook');
  await api.deleteSession(s.id);
  await rejects(api.session(s.id), 404, 'a deleted session');
} catch (e) {
  fail.push(`unexpected: ${e && e.stack}`);
}
details.seconds = Math.round(performance.now() - t0) / 1000;
console.log(JSON.stringify({ ok: fail.length === 0, failures: fail, details }));
process.exit(fail.length ? 1 : 0);
