// MCP tools/call round trip for `1+1` against the websocket's, in the same
// run, on the same korch serve (each on a kernel of its own), and korch mcp
// over stdio beside them.
//
//   node tests/bench/mcp_bench.js URL_LINE KORCH_BIN     (scripts/bench-mcp.sh runs it)
//
//   ws         execute_request `1+1` on /api/kernels/{id}/channels (Jupyter's
//              legacy JSON frames), until execute_reply AND status idle: what
//              JupyterLab pays; the reference
//   mcp_http   tools/call run_code {code: "1+1"} through the official SDK's
//              Client and StreamableHTTPClientTransport to /mcp, until its
//              result (korch answers each POST with JSON and closes the
//              connection: a TCP connect per call)
//   mcp_stdio  the same through StdioClientTransport to `korch mcp --launcher local`
//
// BENCH_N round trips per target (default 200) in BENCH_ROUNDS alternating
// blocks (default 4), after 20 warm-up calls each. Prints a table of p50 / p90
// / max and each p50's ratio to the websocket's.
'use strict';
const path = require('path');
const crypto = require('crypto');
const NPM = path.join(__dirname, '..', 'npm', 'mcp');
const need = m => require(require.resolve(m, { paths: [NPM] }));
const { Client } = need('@modelcontextprotocol/sdk/client/index.js');
const { StdioClientTransport } = need('@modelcontextprotocol/sdk/client/stdio.js');
const { StreamableHTTPClientTransport } = need('@modelcontextprotocol/sdk/client/streamableHttp.js');
const WebSocket = need('ws');

const N = Number(process.env.BENCH_N || 200), ROUNDS = Number(process.env.BENCH_ROUNDS || 4);
const [line, korch] = process.argv.slice(2);
const u = new URL(line.trim());
const base = `${u.protocol}//${u.host}`, token = u.searchParams.get('token') || '';
const auth = { Authorization: `token ${token}` };

async function wsTarget() {
  const r = await fetch(base + '/api/kernels', { method: 'POST', headers: { ...auth, 'Content-Type': 'application/json' },
                                                   body: '{"name":"python3"}' });
  const kid = (await r.json()).id;
  const ws = new WebSocket(`${base.replace(/^http/, 'ws')}/api/kernels/${kid}/channels?session_id=${crypto.randomUUID()}`,
                           { headers: auth });
  ws.on('error', e => { throw e; });
  await new Promise((res, rej) => { ws.once('open', res); ws.once('error', rej); });
  ws.binaryType = 'nodebuffer';
  let pending = null;
  ws.on('message', data => {
    const m = JSON.parse(data.toString());
    if (!pending || !m.parent_header || m.parent_header.msg_id !== pending.id)
      return;
    if (m.msg_type === 'execute_reply')
      pending.reply = true;
    if (m.msg_type === 'status' && m.content.execution_state === 'idle')
      pending.idle = true;
    if (pending.reply && pending.idle)
      pending.done();
  });
  const once = () => new Promise(res => {
    const id = crypto.randomUUID();
    pending = { id, done: res };
    ws.send(JSON.stringify({
      channel: 'shell', header: { msg_id: id, msg_type: 'execute_request', session: 'bench', username: 'bench',
                                  version: '5.3', date: new Date().toISOString() },
      parent_header: {}, metadata: {},
      content: { code: '1+1', silent: false, store_history: true, user_expressions: {}, allow_stdin: false,
                 stop_on_error: true }
    }));
  });
  return { name: 'ws', once, close: async () => { ws.close(); await fetch(`${base}/api/kernels/${kid}`, { method: 'DELETE', headers: auth }); } };
}

async function mcpTarget(name, transport) {
  const client = new Client({ name: 'korch-mcp-bench', version: '1' });
  await client.connect(transport);
  const once = async () => {
    const r = await client.callTool({ name: 'run_code', arguments: { code: '1+1' } });
    if (r.content[0].text.trim() !== '2')
      throw new Error(`${name}: 1+1 gave ${JSON.stringify(r)}`);
  };
  return { name, once, close: async () => { if (transport.terminateSession) await transport.terminateSession(); await client.close(); } };
}

async function main() {
  const targets = [
    await wsTarget(),
    await mcpTarget('mcp_http', new StreamableHTTPClientTransport(new URL(base + '/mcp'),
                                                                  { requestInit: { headers: { Authorization: `Bearer ${token}` } } })),
    await mcpTarget('mcp_stdio', new StdioClientTransport({ command: korch, args: ['mcp', '--launcher', 'local'], stderr: 'ignore' })),
  ];
  const ms = Object.fromEntries(targets.map(t => [t.name, []]));
  for (const t of targets)
    for (let i = 0; i < 20; i++)
      await t.once();
  for (let r = 0; r < ROUNDS; r++)
    for (const t of targets)
      for (let i = 0; i < Math.ceil(N / ROUNDS); i++) {
        const t0 = process.hrtime.bigint();
        await t.once();
        ms[t.name].push(Number(process.hrtime.bigint() - t0) / 1e6);
      }
  for (const t of targets)
    await t.close();
  const q = (a, p) => a[Math.min(a.length - 1, Math.floor(p * a.length))];
  const stats = {};
  for (const [k, a] of Object.entries(ms)) {
    a.sort((x, y) => x - y);
    stats[k] = { n: a.length, p50: q(a, 0.5), p90: q(a, 0.9), max: a[a.length - 1] };
  }
  console.log('| `1+1` round trip | n | p50 ms | p90 ms | max ms | p50 / websocket p50 |');
  console.log('|---|---|---|---|---|---|');
  for (const [k, s] of Object.entries(stats))
    console.log(`| ${k} | ${s.n} | ${s.p50.toFixed(2)} | ${s.p90.toFixed(2)} | ${s.max.toFixed(1)} | ${(s.p50 / stats.ws.p50).toFixed(2)}x |`);
  if (process.env.BENCH_OUT)
    require('fs').writeFileSync(process.env.BENCH_OUT, JSON.stringify(stats, null, 1));
}

main().then(() => process.exit(0), e => { console.error('mcp_bench: ' + (e && e.stack || e)); process.exit(1); });
