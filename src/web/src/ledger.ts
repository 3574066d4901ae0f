// The honest ledger and the verification on screen (issue 23): a step's CPU
// seconds and peak memory from its kernel's cgroup (a result's `usage`, null
// when the launcher cannot say: shown as unknown, never as zero), a turn's
// sums, and the result of POST .../verify (the clean notebook re-run in a
// fresh kernel: reproduced, or what differed).
function el<K extends keyof HTMLElementTagNameMap>(tag: K, cls?: string, textContent?: string): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (textContent !== undefined) e.textContent = textContent;
  return e;
}

const mib = (b: number) => (b >= 1 << 30 ? `${(b / (1 << 30)).toFixed(2)} GiB` : `${Math.round(b / (1 << 20))} MiB`);

/** A step's line: "0.61 s CPU · peak 254 MiB", each part "unknown" when not known. */
export function stepUsageText(u: any): string {
  const cpu = u && typeof u.cpu_s === 'number' ? `${u.cpu_s.toFixed(2)} s CPU` : 'CPU unknown';
  const peak = u && typeof u.mem_peak_bytes === 'number'
    ? `${u.peak_of === 'kernel' ? 'kernel peak' : 'peak'} ${mib(u.mem_peak_bytes)}` : 'memory unknown';
  return `${cpu} · ${peak}`;
}

/** A turn's steps' usages summed: CPU seconds (at least, when some are unknown) and the highest peak. */
export function turnUsageText(usages: any[]): string {
  if (!usages.length) return '';
  let cpu = 0, cpuKnown = 0, peak = -1;
  for (const u of usages) {
    if (u && typeof u.cpu_s === 'number') { cpu += u.cpu_s; cpuKnown++; }
    if (u && typeof u.mem_peak_bytes === 'number' && u.mem_peak_bytes > peak) peak = u.mem_peak_bytes;
  }
  const n = usages.length;
  const c = !cpuKnown ? 'kernel CPU unknown'
    : cpuKnown < n ? `kernel CPU at least ${cpu.toFixed(2)} s (${n - cpuKnown} of ${n} steps unknown)`
      : `kernel CPU ${cpu.toFixed(2)} s`;
  return `${c} · ${peak >= 0 ? `peak ${mib(peak)}` : 'peak memory unknown'}`;
}

/** One line for a verification's result, and its differences under it. */
export function verifyView(v: any): HTMLElement {
  const box = el('div', 'k-verify');
  box.setAttribute('role', 'status');
  const st = String(v?.status ?? 'failed');
  box.dataset.status = st;
  const secs = typeof v?.seconds === 'number' ? ` in ${v.seconds.toFixed(1)} s` : '';
  const turn = typeof v?.turn_seconds === 'number' ? ` (the turn took ${v.turn_seconds.toFixed(1)} s)` : '';
  const cells = `${v?.cells ?? 0} code cell${v?.cells === 1 ? '' : 's'}`;
  const nums = `${v?.compared ?? 0} number${v?.compared === 1 ? '' : 's'} compared`;
  const head = st === 'reproduced' ? `Reproduced in a fresh ${v?.kernel ?? ''} kernel (${cells}, ${nums})${secs}${turn}`
    : st === 'differed' ? `Differed in a fresh ${v?.kernel ?? ''} kernel: ${(v?.differences ?? []).length} of ${v?.compared ?? 0} numbers were not printed again${secs}`
      : `Did not re-run: ${String(v?.message ?? 'unknown error')}`;
  box.appendChild(el('div', 'k-verify-head', head));
  if (st === 'differed') {
    const ul = el('ul', 'k-verify-diffs');
    for (const d of (v?.differences ?? []).slice(0, 20)) {
      const now = String(d?.now ?? '').trim().slice(0, 200);
      ul.appendChild(el('li', '', `${d?.text ?? '?'}: printed ${d?.printed ?? '?'} at [${d?.execution_count ?? '?'}], now ${now ? `"${now}"` : 'nothing'}`));
    }
    box.appendChild(ul);
  }
  return box;
}

/** The box while the verification runs (its notices), replaced by verifyView at the end. */
export function verifyRunning(text: string): HTMLElement {
  const box = el('div', 'k-verify', text);
  box.dataset.status = 'running';
  box.setAttribute('role', 'status');
  return box;
}
