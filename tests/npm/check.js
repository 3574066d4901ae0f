#!/usr/bin/env node
// @jupyterlab/services (the library JupyterLab and its extensions use) against a
// Jupyter-Server-compatible server: KernelManager.startNew -> requestExecute ->
// IOPub outputs, then shutdown. Prints one JSON line {ok, failures, details}.
//
//   node check.js 'http://127.0.0.1:PORT/?token=TOKEN'
//
// Install (CI): cd tests/npm && npm ci --no-audit --no-fund
'use strict';
const { KernelManager, KernelAPI } = require('@jupyterlab/services');
const { result, withTimeout, settingsFor } = require('./common');

async function execute(kernel, code) {
  const out = { stdout: '', results: [], msgTypes: [], reply: null };
  const future = kernel.requestExecute({ code });
  future.onIOPub = msg => {
    out.msgTypes.push(msg.header.msg_type);
    if (msg.header.msg_type === 'stream' && msg.content.name === 'stdout') out.stdout += msg.content.text;
    if (msg.header.msg_type === 'execute_result') out.results.push(msg.content.data['text/plain']);
  };
  out.reply = await withTimeout(future.done, 60000, `execute ${code}`);
  return out;
}

async function main() {
  const line = process.argv[2];
  if (!line) throw new Error('usage: node check.js http://HOST:PORT/?token=T');
  const { settings } = settingsFor(line);
  const failures = [];
  const details = {};
  const check = (ok, what) => { if (!ok) failures.push(what); return ok; };
  const t0 = Date.now();
  const manager = new KernelManager({ serverSettings: settings });
  let kernel = null;
  try {
    await withTimeout(manager.ready, 30000, 'KernelManager.ready');
    kernel = await withTimeout(manager.startNew({ name: 'python3' }), 60000, 'KernelManager.startNew');
    details.kernel_id = kernel.id;
    const info = await withTimeout(kernel.info, 60000, 'kernel.info (kernel_info_reply)');
    check(info && info.language_info && info.language_info.name === 'python',
      `kernel_info: ${JSON.stringify(info && info.language_info)}`);
    details.ws_protocol = kernel._ws ? kernel._ws.protocol : undefined;  // '' = legacy
    details.ready_ms = Date.now() - t0;
    const r = await execute(kernel, 'print(1+1)');
    check(r.stdout === '2\n', `print(1+1) stdout ${JSON.stringify(r.stdout)} (iopub ${r.msgTypes})`);
    check(r.reply.content.status === 'ok', `execute_reply ${JSON.stringify(r.reply.content)}`);
    const r2 = await execute(kernel, '6*7');
    check(r2.results[0] === '42', `6*7 -> ${JSON.stringify(r2.results)}`);
    const t1 = Date.now();
    for (let i = 0; i < 5; i++) await execute(kernel, 'pass');
    details.rtt_ms_avg = (Date.now() - t1) / 5;
    const running = await KernelAPI.listRunning(settings);
    check(running.some(k => k.id === kernel.id), 'KernelAPI.listRunning lacks the kernel');
    await withTimeout(kernel.shutdown(), 30000, 'kernel.shutdown');
    const after = await KernelAPI.listRunning(settings);
    check(!after.some(k => k.id === details.kernel_id), 'kernel still listed after shutdown');
    kernel = null;
  } catch (e) {
    failures.push(String(e && e.stack || e).split('\n').slice(0, 4).join(' | '));
  } finally {
    if (kernel) { try { await kernel.shutdown(); } catch (e) { /* reported above */ } }
    manager.dispose();
  }
  details.seconds = (Date.now() - t0) / 1000;
  result(JSON.stringify({ ok: failures.length === 0, failures, details }));
  process.exit(failures.length === 0 ? 0 : 1);
}

main().catch(e => {
  result(JSON.stringify({ ok: false, failures: [String(e && e.stack || e)], details: {} }));
  process.exit(1);
});
