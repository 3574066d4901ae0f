// The one way korch's tests start a browser: Debian's Chromium (apt package
// `chromium`) driven by playwright-core, headless, with the network features
// that call home turned off (this machine's network is closed; Chromium would
// retry those connections forever). Never a browser download.
//
//   const { launch } = require('./browser');
//   const { browser, close } = await launch();   // close() also removes the profile
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');
const { chromium } = require('playwright-core');

const EXECUTABLE = process.env.KORCH_CHROMIUM || '/usr/bin/chromium';
const ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync',
  '--disable-dev-shm-usage'];

async function launch(opts = {}) {
  if (!fs.existsSync(EXECUTABLE))
    throw new Error(`no browser at '${EXECUTABLE}' (apt-get install chromium, or set KORCH_CHROMIUM)`);
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'korch-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: EXECUTABLE, headless: true, args: ARGS,
    viewport: opts.viewport || { width: 1280, height: 800 }, acceptDownloads: true
  });
  const close = async () => {
    await context.close().catch(() => {});
    fs.rmSync(profile, { recursive: true, force: true });
  };
  return { context, browser: context, close };
}

module.exports = { launch, EXECUTABLE, ARGS };
