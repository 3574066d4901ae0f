// Bundle the web app: src/main.ts -> OUT/korch.js (one IIFE, minified),
// src/app.css (+ highlight.js' theme it imports) -> OUT/korch.css, and
// index.html copied. `node build.mjs OUT` (scripts/build-web.sh runs it).
import { build } from 'esbuild';
import { copyFileSync, mkdirSync, statSync } from 'node:fs';
import { gzipSync } from 'node:zlib';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const out = process.argv[2] || join(here, '..', '..', 'build', 'web');
mkdirSync(out, { recursive: true });
const t0 = Date.now();
await build({
  entryPoints: { korch: join(here, 'src', 'main.ts') },
  bundle: true, minify: true, format: 'iife', target: ['es2020'], outdir: out,
  legalComments: 'none', logLevel: 'warning', sourcemap: false,
  loader: { '.css': 'css' },
});
copyFileSync(join(here, 'index.html'), join(out, 'index.html'));
const sizes = ['korch.js', 'korch.css'].map((f) => {
  const b = readFileSync(join(out, f));
  return `${f} ${(statSync(join(out, f)).size / 1024).toFixed(1)} KiB (${(gzipSync(b).length / 1024).toFixed(1)} KiB gzipped)`;
});
console.log(`build-web: ${sizes.join(', ')} in ${Date.now() - t0} ms`);
