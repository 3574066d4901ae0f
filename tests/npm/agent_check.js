#!/usr/bin/env node
// The agent API from @jupyterlab/services, as a JupyterLab extension uses it:
// ServerConnection.makeRequest for REST (the token, as JupyterLab sends it),
// the turn's server-sent events read from the fetch response's stream, and
// KernelManager.connectTo on the session's kernel_id, watching IOPub while
// the agent works. korch serve runs --llm openai:... at the scripted LLM's
// "analysis" scenario (tests/peers/agent_scenarios.py).
// Prints one JSON line {ok, failures, details}.
//
//   node agent_check.js 'http://127.0.0.1:PORT/?token=TOKEN' path/to/sales.csv
'use strict';
const fs = require('fs');
const { KernelManager, ServerConnection, KernelAPI } = require('@jupyterlab/services');
const { result, withTimeout, settingsFor } = require('./common');

// text/event-stream -> [{event, data}] (WHATWG HTML 9.2: fields, blank line ends an event)
async function readEvents(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  const events = [];
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += decoder.decode(value, { stream: true });
    let end;
    while ((end = buf.indexOf('\n\n')) >= 0) {
      const block = buf.slice(0, end);
      buf = buf.slice(end + 2);
      let event = 'message';
      const data = [];
      for (const line of block.split('\n')) {
        if (line.startsWith(':')) continue;
        const i = line.indexOf(':');
        const field = i < 0 ? line : line.slice(0, i);
        const v = i < 0 ? '' : line.slice(i + 1).replace(/^ /, '');
        if (field === 'event') event = v;
        else if (field === 'data') data.push(v);
      }
      if (data.length) events.push({ event, data: JSON.parse(data.join('\n')) });
    }
  }
  return events;
}

async function main() {
  const [line, csvPath] = process.argv.slice(2);
  const { baseUrl, settings } = settingsFor(line);
  const api = (path, init) => ServerConnection.makeRequest(baseUrl + path, init || {}, settings);
  const failures = [];
  const details = {};
  const check = (ok, what) => { if (!ok) failures.push(what); return ok; };
  const manager = new KernelManager({ serverSettings: settings });
  let kernel = null;
  try {
    const csv = fs.readFileSync(csvPath, 'utf8');
    let r = await api('api/agent/sessions', {
      method: 'POST', body: JSON.stringify({ files: [{ name: 'sales.csv', content: csv }] })
    });
    check(r.status === 201, `POST /api/agent/sessions -> ${r.status}`);
    const model = await r.json();
    details.session = model.id;
    // the notebook's view of the agent's kernel
    kernel = manager.connectTo({ model: { id: model.kernel_id, name: model.kernel_name } });
    await withTimeout(kernel.info, 60000, 'kernel.info');
    const seen = [];
    kernel.iopubMessage.connect((_, msg) => seen.push(msg));
    r = await api(`api/agent/sessions/${model.id}/messages`, {
      method: 'POST', body: JSON.stringify({ content: 'What is the total revenue?' })
    });
    check(r.status === 200 && (r.headers.get('content-type') || '').startsWith('text/event-stream'),
      `messages -> ${r.status} ${r.headers.get('content-type')}`);
    const events = await withTimeout(readEvents(r), 120000, 'the turn\'s events');
    const of = name => events.filter(e => e.event === name).map(e => e.data);
    details.events = events.length;
    const final = of('final');
    check(final.length === 1 && final[0].text.includes('Total revenue is 28607.50 from 3695 units'),
      `final: ${JSON.stringify(final)}`);
    check(events.length && events[events.length - 1].event === 'done' && of('done')[0].status === 'ok',
      `done: ${JSON.stringify(of('done'))}`);
    check(of('output').some(o => (o.output.data || {})['image/png']), 'no inline image/png output event');
    await new Promise(res => setTimeout(res, 300));
    const types = seen.map(m => m.header.msg_type);
    details.iopub_seen = seen.length;
    check(seen.some(m => m.header.msg_type === 'execute_input' && m.content.code.includes("read_csv('sales.csv')")),
      `the notebook did not see the agent's code (iopub: ${types.slice(0, 12)})`);
    check(seen.some(m => m.header.msg_type === 'display_data' && m.content.data['image/png']),
      'the notebook did not see the chart');
    r = await api(`api/agent/sessions/${model.id}/notebook`);
    const nb = await r.json();
    check(r.status === 200 && nb.nbformat === 4 && nb.cells.filter(c => c.cell_type === 'code').length === 4,
      `notebook: ${r.status} ${nb.nbformat}`);
    kernel.dispose();
    kernel = null;
    r = await api(`api/agent/sessions/${model.id}`, { method: 'DELETE' });
    check(r.status === 204, `DELETE -> ${r.status}`);
    const running = await KernelAPI.listRunning(settings);
    check(!running.some(k => k.id === model.kernel_id), 'the session\'s kernel outlived DELETE');
  } catch (e) {
    failures.push(String(e && e.stack || e).split('\n').slice(0, 4).join(' | '));
  } finally {
    if (kernel) kernel.dispose();
    manager.dispose();
  }
  result(JSON.stringify({ ok: failures.length === 0, failures, details }));
  process.exit(failures.length === 0 ? 0 : 1);
}

main().catch(e => {
  result(JSON.stringify({ ok: false, failures: [String(e && e.stack || e)], details: {} }));
  process.exit(1);
});
