// korch's TypeScript client on its own, in Node 18+: ask an agent session a
// question about a file and print the turn as it happens.
//
//   node src/web/build.mjs --client build/web-client     # the ES module + types
//   node src/web/examples/ask.mjs 'http://127.0.0.1:8888/?token=T' data.csv 'What is the total?'
//
// (korch serve needs --llm PROVIDER:MODEL for agent sessions.) From
// TypeScript: import { Api, type SseEvent } from 'korch-api' after
// `npm install build/web-client`.
import { readFileSync } from 'node:fs';
import { basename } from 'node:path';

const [url, file, question] = process.argv.slice(2);
if (!url || !question) {
  console.error('usage: node ask.mjs URL FILE QUESTION   (URL as korch serve prints it)');
  process.exit(2);
}
const { Api, ApiError } = await import(process.env.KORCH_API_JS ?? new URL('../../../build/web-client/api.js', import.meta.url).href);
const u = new URL(url);
const api = new Api({ baseUrl: u.origin, token: u.searchParams.get('token') ?? '' });
try {
  const s = await api.createSession({
    files: file ? [{ name: basename(file), content: readFileSync(file).toString('base64'), format: 'base64' }] : [],
  });
  for await (const ev of api.chat(s.id, question)) {
    const d = ev.data;
    if (ev.event === 'code') console.log(`--- step ${d.step}: ${d.language}\n${d.code}`);
    else if (ev.event === 'output' && d.output.output_type === 'stream') process.stdout.write(d.output.text);
    else if (ev.event === 'result' && d.figures.length) console.log(`[figures: ${d.figures.map((f) => f.name).join(', ')}]`);
    else if (ev.event === 'final') console.log(`\n${d.text}`);
    else if (ev.event === 'done') console.log(`(${d.status}, ${d.steps} steps, ${d.elapsed_ms} ms)`);
  }
  await api.deleteSession(s.id);
} catch (e) {
  console.error(e instanceof ApiError ? `korch serve: ${e.status} ${e.message}` : e);
  process.exit(1);
}
