// What the Node peers share: stdout for the one result line only, a timeout
// around a promise, and @jupyterlab/services settings for a korch URL line.
'use strict';
const WebSocket = require('ws');
const { ServerConnection } = require('@jupyterlab/services');

// stdout carries only the result line; the library's own logging goes to stderr
const result = s => process.stdout.write(s + '\n');
console.log = console.info = console.debug = (...a) => process.stderr.write(a.join(' ') + '\n');

function withTimeout(p, ms, what) {
  let t;
  return Promise.race([
    p,
    new Promise((_, rej) => { t = setTimeout(() => rej(new Error(`timed out after ${ms} ms: ${what}`)), ms); })
  ]).finally(() => clearTimeout(t));
}

// 'http://127.0.0.1:PORT/?token=T' -> {baseUrl, settings}
function settingsFor(line) {
  const u = new URL(line.trim());
  const baseUrl = `${u.protocol}//${u.host}/`;
  const settings = ServerConnection.makeSettings({
    baseUrl, wsUrl: baseUrl.replace(/^http/, 'ws'), token: u.searchParams.get('token') || '', appendToken: true,
    WebSocket, fetch: globalThis.fetch, Request: globalThis.Request, Headers: globalThis.Headers
  });
  return { baseUrl, settings };
}

module.exports = { result, withTimeout, settingsFor };
