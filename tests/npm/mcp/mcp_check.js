// korch's MCP server judged by the official TypeScript SDK's Client
// (@modelcontextprotocol/sdk), over stdio (korch mcp) or Streamable HTTP
// (/mcp on korch serve), with the kernel as the attacker.
//
//   node mcp_check.js stdio KORCH_BIN [korch mcp args...]
//   node mcp_check.js http URL_LINE            (korch serve's first line: http://H:P/?token=T)
//   node mcp_check.js quick KORCH_BIN [korch mcp args...]   (stdio, the launcher's part only:
//                                              state, a chart, files through the launcher, restart)
//   node mcp_check.js users URL TOKEN_A TOKEN_B   (korch serve --users: two users' sessions kept apart)
//   node mcp_check.js bench URL_LINE N         (N tools/call round trips of 1+1: p50 ms)
//
// Prints one line: "ok: ..." (or "bench: ...") when every check held, else
// "fail: ..." lines and exits 1.
'use strict';
const { Client } = require('@modelcontextprotocol/sdk/client/index.js');
const { StdioClientTransport } = require('@modelcontextprotocol/sdk/client/stdio.js');
const { StreamableHTTPClientTransport } = require('@modelcontextprotocol/sdk/client/streamableHttp.js');
const { McpError } = require('@modelcontextprotocol/sdk/types.js');

const fails = [];
const check = (ok, what) => { if (!ok) fails.push(what); return ok; };
const textOf = r => (r.content || []).filter(c => c.type === 'text').map(c => c.text).join('\n');
const log = (...a) => process.stderr.write(a.join(' ') + '\n');

function urlParts(line) {
  const u = new URL(line.trim());
  return { base: `${u.protocol}//${u.host}`, token: u.searchParams.get('token') || '' };
}

async function connect(mode, args) {
  const client = new Client({ name: 'korch-mcp-check', version: '1.0.0' });
  let transport, stderr = '';
  if (mode === 'stdio') {
    transport = new StdioClientTransport({ command: args[0], args: args.slice(1), stderr: 'pipe',
                                           env: { ...process.env } });
    transport.stderr.on('data', d => { stderr += d; if (stderr.length > 200000) stderr = stderr.slice(-100000); });
  } else {
    const { base, token } = urlParts(args[0]);
    transport = new StreamableHTTPClientTransport(new URL(base + '/mcp'),
                                                  { requestInit: { headers: { Authorization: `Bearer ${token}` } } });
  }
  await client.connect(transport);
  return { client, transport, stderr: () => stderr };
}

const call = (client, name, args, opts) => client.callTool({ name, arguments: args }, undefined, opts);

async function tools(client, mode) {
  const info = client.getServerVersion();
  check(info && info.name === 'korch', `serverInfo.name is korch (${JSON.stringify(info)})`);
  check(client.getServerCapabilities().tools, 'the server declares tools');
  const { tools } = await client.listTools();
  const names = tools.map(t => t.name).sort().join(',');
  check(names === 'fetch_file,interrupt,list_files,list_kernelspecs,restart,run_code,upload_file', `tools: ${names}`);
  check(tools.every(t => t.inputSchema && t.inputSchema.type === 'object' && t.description), 'every tool has a schema');
  await client.ping();

  // state persists: one kernel for the session
  let r = await call(client, 'run_code', { code: 'x = 1 + 1\nx' });
  check(!r.isError && textOf(r).trim() === '2', `1+1 -> 2 (${textOf(r)})`);
  r = await call(client, 'run_code', { code: 'print(x * 21)' });
  check(!r.isError && textOf(r).includes('42'), `x persists (${textOf(r)})`);
  // an error: a tool result with isError, the traceback without colours
  r = await call(client, 'run_code', { code: '1/0' });
  check(r.isError === true && textOf(r).includes('ZeroDivisionError') && !textOf(r).includes('\x1b'),
        `1/0 is a tool error with its traceback, no ANSI (${JSON.stringify(textOf(r)).slice(0, 300)})`);
  // a chart: MCP image content, base64 PNG
  r = await call(client, 'run_code', {
    code: 'import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()' });
  const img = (r.content || []).find(c => c.type === 'image');
  check(!r.isError && img && img.mimeType === 'image/png' &&
        Buffer.from(img.data, 'base64').subarray(0, 8).equals(Buffer.from([137, 80, 78, 71, 13, 10, 26, 10])),
        `a chart comes back as image/png content (${JSON.stringify(r).slice(0, 300)})`);
  // the kernel attacks the terminal: escapes, bidi, controls
  r = await call(client, 'run_code', {
    code: 'print("A\\x1b]52;c;ZXZpbA==\\x07B\\x1b[2J\\x1b]0;title\\x07C\\u202eD\\x9bE\\x00F\\x1b[31mred")' });
  const t = textOf(r);
  check(!/[\x00-\x08\x0b-\x1f\x7f\u0080-\u009f\u202a-\u202e\u2066-\u2069]/.test(t) && t.includes('A') &&
        t.includes('<U+202E>') && t.includes('red'), `escapes neutralised (${JSON.stringify(t)})`);
  // a flood: cut as for the model (head + tail), fast, and the kernel still answers
  const t0 = Date.now();
  r = await call(client, 'run_code', { code: 'print("h" * 100 + "A" * 5_000_000 + "t" * 100)' });
  const flood = textOf(r);
  check(flood.length < 6000 && flood.includes('characters cut') && flood.startsWith('h') && flood.trim().endsWith('t'),
        `5 MB of output cut in the middle (${flood.length} chars, ${Date.now() - t0} ms)`);
  // files
  r = await call(client, 'upload_file', { path: 'data/sales.csv', content: 'region,revenue\nnorth,10\nsouth,32\n' });
  check(!r.isError, `upload_file text (${textOf(r)})`);
  r = await call(client, 'run_code', { code: 'import csv\nsum(int(r["revenue"]) for r in csv.DictReader(open("data/sales.csv")))' });
  check(textOf(r).trim() === '42', `the kernel reads the upload (${textOf(r)})`);
  const png = Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==', 'base64');
  r = await call(client, 'upload_file', { path: 'dot.png', content_base64: png.toString('base64') });
  check(!r.isError, `upload_file bytes (${textOf(r)})`);
  r = await call(client, 'run_code', { code: 'open("out.bin", "wb").write(bytes(range(256)))' });
  r = await call(client, 'list_files', {});
  check(!r.isError && /data\/sales\.csv\t\d+ bytes/.test(textOf(r)) && textOf(r).includes('dot.png') &&
        textOf(r).includes('out.bin'), `list_files (${textOf(r)})`);
  r = await call(client, 'fetch_file', { path: 'data/sales.csv' });
  check(!r.isError && textOf(r).includes('south,32'), `fetch_file text (${textOf(r)})`);
  r = await call(client, 'fetch_file', { path: 'dot.png' });
  const got = (r.content || []).find(c => c.type === 'image');
  check(got && Buffer.from(got.data, 'base64').equals(png), 'fetch_file gives an image back as it was');
  r = await call(client, 'fetch_file', { path: 'out.bin' });
  const res = (r.content || []).find(c => c.type === 'resource');
  check(res && Buffer.from(res.resource.blob, 'base64').equals(Buffer.from([...Array(256).keys()])),
        `fetch_file bytes as an embedded resource (${JSON.stringify(r).slice(0, 200)})`);
  for (const bad of ['../etc/passwd', '/etc/passwd', 'a/../../b', '']) {
    r = await call(client, 'fetch_file', { path: bad });
    check(r.isError && /plain relative path/.test(textOf(r)), `fetch_file '${bad}' refused (${textOf(r)})`);
  }
  r = await call(client, 'run_code', { code: 'import os\nos.symlink("/etc/shadow", "leak.txt")' });
  r = await call(client, 'fetch_file', { path: 'leak.txt' });
  check(r.isError || !textOf(r).includes('root:'), `a planted symlink is not followed (${textOf(r).slice(0, 200)})`);
  r = await call(client, 'fetch_file', { path: 'missing.txt' });
  check(r.isError, `a missing file is a tool error (${textOf(r)})`);
  // bad arguments are tool errors the model can act on
  r = await call(client, 'run_code', {});
  check(r.isError && textOf(r).includes('code'), `run_code without code (${textOf(r)})`);
  r = await call(client, 'upload_file', { path: 'x.txt' });
  check(r.isError && textOf(r).includes('content'), `upload_file without content (${textOf(r)})`);
  // an unknown tool is a JSON-RPC error
  try {
    await call(client, 'rm_rf', {});
    check(false, 'an unknown tool is refused');
  } catch (e) {
    check(e instanceof McpError && e.code === -32602, `an unknown tool is -32602 (${e})`);
  }
  // timeout and interrupt keep the variables
  r = await call(client, 'run_code', { code: 'import time\ntime.sleep(30)', timeout: 1 });
  check(r.isError && /timed out|interrupt/i.test(textOf(r)), `timeout (${textOf(r)})`);
  const running = call(client, 'run_code', { code: 'import time\ntime.sleep(30)' });
  await new Promise(res => setTimeout(res, 1500));
  const ir = await call(client, 'interrupt', {});
  check(!ir.isError, `interrupt (${textOf(ir)})`);
  r = await running;
  check(r.isError && textOf(r).includes('KeyboardInterrupt'), `the running call ends with KeyboardInterrupt (${textOf(r)})`);
  r = await call(client, 'run_code', { code: 'x' });
  check(textOf(r).trim() === '2', `x survives the interrupt (${textOf(r)})`);
  // the client gives up (its request timeout): it sends notifications/cancelled,
  // korch interrupts the kernel, which is free again at once, its variables kept
  const tc = Date.now();
  try {
    await call(client, 'run_code', { code: 'import time\ntime.sleep(60)' }, { timeout: 2000 });
    check(false, 'a request timeout rejects');
  } catch (e) {
    check(e instanceof McpError && e.code === -32001, `the SDK's request timeout (${e})`);
  }
  r = await call(client, 'run_code', { code: 'x' });
  check(textOf(r).trim() === '2' && Date.now() - tc < 15000,
        `after notifications/cancelled the kernel is free (${Date.now() - tc} ms, ${textOf(r)})`);
  // kernelspecs, then restart: variables gone, files kept
  r = await call(client, 'list_kernelspecs', {});
  check(!r.isError && textOf(r).includes('python3') && textOf(r).includes("this session's kernel"),
        `list_kernelspecs (${textOf(r)})`);
  r = await call(client, 'restart', {});
  check(!r.isError && textOf(r).includes('afresh'), `restart (${textOf(r)})`);
  r = await call(client, 'run_code', { code: 'x' });
  check(r.isError && textOf(r).includes('NameError'), `x is gone after restart (${textOf(r)})`);
  r = await call(client, 'run_code', { code: 'open("data/sales.csv").read().count("\\n")' });
  check(textOf(r).trim() === '3', `files stay across a restart (${textOf(r)})`);
  r = await call(client, 'restart', { kernel: 'no-such-kernel' });
  check(r.isError && textOf(r).includes('list_kernelspecs'), `restart with an unknown kernelspec (${textOf(r)})`);
}

// What depends on the launcher: the kernel's state, charts, files through its ops, restart.
async function quick(client) {
  let r = await call(client, 'run_code', { code: 'import os\nx = 6 * 7\nx' });
  check(!r.isError && textOf(r).trim() === '42', `6*7 (${textOf(r)})`);
  r = await call(client, 'run_code', {
    code: 'import matplotlib.pyplot as plt\nplt.bar([1, 2], [3, 4])\nplt.show()' });
  check((r.content || []).some(c => c.type === 'image' && c.mimeType === 'image/png'), `a chart (${JSON.stringify(r).slice(0, 200)})`);
  r = await call(client, 'upload_file', { path: 'in/a.txt', content: 'hello from the client' });
  check(!r.isError, `upload_file (${textOf(r)})`);
  r = await call(client, 'run_code', { code: 'open("in/a.txt").read().upper()' });
  check(textOf(r).includes('HELLO FROM THE CLIENT'), `the kernel reads it (${textOf(r)})`);
  r = await call(client, 'run_code', { code: 'open("made.txt", "w").write("made in the kernel")' });
  r = await call(client, 'list_files', {});
  check(textOf(r).includes('in/a.txt') && textOf(r).includes('made.txt'), `list_files (${textOf(r)})`);
  r = await call(client, 'fetch_file', { path: 'made.txt' });
  check(textOf(r).includes('made in the kernel'), `fetch_file (${textOf(r)})`);
  const running = call(client, 'run_code', { code: 'import time\ntime.sleep(30)' });
  await new Promise(res => setTimeout(res, 1500));
  await call(client, 'interrupt', {});
  r = await running;
  check(r.isError && textOf(r).includes('KeyboardInterrupt'), `interrupt (${textOf(r)})`);
  r = await call(client, 'restart', {});
  r = await call(client, 'run_code', { code: 'x' });
  check(r.isError && textOf(r).includes('NameError'), `restart (${textOf(r)})`);
}

// What the SDK would not send: raw HTTP.
async function rawHttp(line) {
  const { base, token } = urlParts(line);
  const url = base + '/mcp';
  const auth = { Authorization: `Bearer ${token}` };
  const json = { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream' };
  const post = (body, headers) => fetch(url, { method: 'POST', headers: { ...json, ...headers }, body });
  const init = v => JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize',
                                     params: { protocolVersion: v, capabilities: {}, clientInfo: { name: 'raw', version: '0' } } });
  let r = await post(init('2025-11-25'), {});
  check(r.status === 403 && (await r.json()).message.includes('token'), `no token -> 403 (${r.status})`);
  r = await post(init('2025-11-25'), { Authorization: 'Bearer wrong' });
  check(r.status === 403, `a wrong token -> 403 (${r.status})`);
  r = await fetch(url, { headers: auth });
  check(r.status === 405 && /POST/.test(r.headers.get('allow') || ''), `GET -> 405 with Allow (${r.status})`);
  r = await post('{"jsonrpc": "2.0", "id": 1, "method": ', auth);
  let j = await r.json();
  check(r.status === 400 && j.error.code === -32700, `malformed JSON -> 400 -32700 (${JSON.stringify(j)})`);
  r = await post('[' + init('2025-11-25') + ']', auth);
  j = await r.json();
  check(r.status === 400 && j.error.code === -32600, `a batch -> 400 -32600 (${JSON.stringify(j)})`);
  r = await post('{"jsonrpc":"2.0","id":2,"method":"tools/list"}', auth);
  check(r.status === 400, `no session id -> 400 (${r.status})`);
  r = await post('{"jsonrpc":"2.0","id":2,"method":"tools/list"}', { ...auth, 'Mcp-Session-Id': 'nope' });
  check(r.status === 404, `an unknown session -> 404 (${r.status})`);
  r = await post(init('2025-11-25'), { ...auth, 'MCP-Protocol-Version': '1999-01-01' });
  check(r.status === 400, `an unsupported MCP-Protocol-Version -> 400 (${r.status})`);
  r = await post('x'.repeat(3 << 20), auth);
  check(r.status === 413, `a 3 MiB body -> 413 (${r.status})`);
  r = await post(init('2025-11-25'), { ...auth, 'Content-Type': 'text/plain' });
  check(r.status === 415, `text/plain -> 415 (${r.status})`);
  // version negotiation: an older one it knows is kept, an unknown one gets the latest
  for (const [want, expect] of [['2024-11-05', '2024-11-05'], ['2025-03-26', '2025-03-26'], ['1999-01-01', '2025-11-25']]) {
    r = await post(init(want), auth);
    j = await r.json();
    const sid = r.headers.get('mcp-session-id');
    check(r.status === 200 && j.result.protocolVersion === expect && sid, `initialize ${want} -> ${j.result && j.result.protocolVersion}`);
    // a notification is 202 without a body; a request before anything else too
    r = await post('{"jsonrpc":"2.0","method":"notifications/initialized"}', { ...auth, 'Mcp-Session-Id': sid });
    check(r.status === 202 && (await r.text()) === '', `a notification -> 202 (${r.status})`);
    r = await post('{"jsonrpc":"2.0","id":"s","method":"ping"}', { ...auth, 'Mcp-Session-Id': sid });
    j = await r.json();
    check(j.id === 's' && j.result && Object.keys(j.result).length === 0, `ping (${JSON.stringify(j)})`);
    r = await post('{"jsonrpc":"2.0","id":null,"method":"ping"}', { ...auth, 'Mcp-Session-Id': sid });
    j = await r.json();
    check(j.error && j.error.code === -32600, `a null id -> -32600 (${JSON.stringify(j)})`);
    r = await post('{"jsonrpc":"2.0","id":3,"method":"resources/list"}', { ...auth, 'Mcp-Session-Id': sid });
    j = await r.json();
    check(j.error && j.error.code === -32601, `resources/list -> -32601 (${JSON.stringify(j)})`);
    r = await post('{"jsonrpc":"2.0","id":4,"method":"tools/call","params":"x"}', { ...auth, 'Mcp-Session-Id': sid });
    j = await r.json();
    check(j.error && j.error.code === -32602, `params not an object -> -32602 (${JSON.stringify(j)})`);
    r = await fetch(url, { method: 'DELETE', headers: { ...auth, 'Mcp-Session-Id': sid } });
    check(r.status === 204, `DELETE ends the session (${r.status})`);
    r = await post('{"jsonrpc":"2.0","id":5,"method":"ping"}', { ...auth, 'Mcp-Session-Id': sid });
    check(r.status === 404, `an ended session -> 404 (${r.status})`);
  }
}

// Two users of korch serve --users FILE: each one's session and kernel are theirs.
async function users(base, ta, tb) {
  const mk = async tok => {
    const client = new Client({ name: 'korch-mcp-users', version: '1' });
    const transport = new StreamableHTTPClientTransport(new URL(base + '/mcp'),
                                                        { requestInit: { headers: { Authorization: `Bearer ${tok}` } } });
    await client.connect(transport);
    return { client, transport };
  };
  const a = await mk(ta), b = await mk(tb);
  let r = await call(a.client, 'run_code', { code: 'secret = "alice\'s"\nsecret' });
  check(textOf(r).includes("alice's"), `alice runs code (${textOf(r)})`);
  r = await call(b.client, 'run_code', { code: 'secret' });
  check(r.isError && textOf(r).includes('NameError'), `bob's kernel is his own (${textOf(r)})`);
  const sid = a.transport.sessionId;
  const asBob = { Authorization: `Bearer ${tb}`, 'Content-Type': 'application/json', 'Mcp-Session-Id': sid };
  let h = await fetch(base + '/mcp', { method: 'POST', headers: asBob,
    body: JSON.stringify({ jsonrpc: '2.0', id: 9, method: 'tools/call', params: { name: 'run_code', arguments: { code: 'secret' } } }) });
  const body = await h.text();
  check(h.status === 404 && !body.includes("alice's"), `bob cannot use alice's session (${h.status} ${body.slice(0, 200)})`);
  h = await fetch(base + '/mcp', { method: 'DELETE', headers: asBob });
  check(h.status === 404, `bob cannot end alice's session (${h.status})`);
  r = await call(a.client, 'run_code', { code: 'secret' });
  check(textOf(r).includes("alice's"), `alice's session is intact (${textOf(r)})`);
  h = await fetch(base + '/mcp', { method: 'POST', headers: { ...asBob, Authorization: 'Bearer korch_revoked_or_made_up' },
                                   body: '{"jsonrpc":"2.0","id":1,"method":"ping"}' });
  check(h.status === 403, `an unknown user's token -> 403 (${h.status})`);
  for (const x of [a, b]) {
    await x.transport.terminateSession();
    await x.client.close();
  }
}

async function bench(line, n) {
  const { client, transport } = await connect('http', [line]);
  await call(client, 'run_code', { code: '1+1' }); // the kernel starts
  const ms = [];
  for (let i = 0; i < n; i++) {
    const t0 = process.hrtime.bigint();
    const r = await call(client, 'run_code', { code: '1+1' });
    ms.push(Number(process.hrtime.bigint() - t0) / 1e6);
    if (textOf(r).trim() !== '2') throw new Error('1+1 gave ' + textOf(r));
  }
  await transport.terminateSession();
  await client.close();
  ms.sort((a, b) => a - b);
  const q = p => ms[Math.min(ms.length - 1, Math.floor(p * ms.length))].toFixed(2);
  process.stdout.write(`bench: mcp_http n=${n} p50=${q(0.5)} p90=${q(0.9)} max=${q(1)}\n`);
}

async function main() {
  const [mode, ...args] = process.argv.slice(2);
  if (mode === 'bench')
    return bench(args[0], Number(args[1] || 50));
  const t0 = Date.now();
  if (mode === 'users') {
    await users(...args);
    for (const f of fails)
      process.stdout.write('fail: ' + f + '\n');
    if (fails.length)
      process.exit(1);
    process.stdout.write(`ok: users ${Date.now() - t0} ms\n`);
    return;
  }
  const c = await connect(mode === 'quick' ? 'stdio' : mode, args);
  try {
    await (mode === 'quick' ? quick(c.client) : tools(c.client, mode));
  } finally {
    if (mode === 'http')
      await c.transport.terminateSession().catch(e => fails.push('terminateSession: ' + e));
    await c.client.close();
  }
  if (mode === 'http')
    await rawHttp(args[0]);
  if (fails.length) {
    for (const f of fails)
      process.stdout.write('fail: ' + f + '\n');
    if (mode !== 'http')
      log(c.stderr().slice(-4000));
    process.exit(1);
  }
  process.stdout.write(`ok: ${mode} ${Date.now() - t0} ms\n`);
}

main().catch(e => { process.stdout.write('fail: ' + (e && e.stack || e) + '\n'); process.exit(1); });
