// One turn of the conversation on screen: the question, its steps (the
// model's text, the code as it is written, the outputs, status and elapsed
// time), notices, the final answer and the tokens. Fed either live, one SSE
// event at a time (onEvent), or from the transcript's records (chat.ts).
import { highlightInto, markdown, renderOutput, savedFigure, setMarkdown, updateStream, RenderHooks } from './render';
import { stepUsageText, turnUsageText, verifyView } from './ledger';
import { BranchFn, branchButton, branchNote } from './branch';

function el<K extends keyof HTMLElementTagNameMap>(tag: K, cls?: string, textContent?: string): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (textContent !== undefined) e.textContent = textContent;
  return e;
}
export { el };

const fmtMs = (ms: number) => (ms < 1000 ? `${Math.round(ms)} ms` : ms < 60000 ? `${(ms / 1000).toFixed(1)} s` : `${Math.floor(ms / 60000)} min ${Math.round((ms % 60000) / 1000)} s`);

/** Where a host (a JupyterLab notebook) puts the agent's code steps, live:
 *  step n's call k (0, 1 ... when a model makes several calls in one step). */
export interface CellSink {
  /** the call's code is complete and about to run */
  code(step: number, call: number, code: string, language: string): void;
  /** an nbformat output of the call; append: a stream's text to add to output `index` */
  output(step: number, call: number, index: number, append: boolean, output: any): void;
  /** the call's execute_reply (status, execution_count, elapsed_ms) */
  result(step: number, call: number, result: any): void;
  /** show the cell of the session's turn n, step, call (live or rebuilt); false: no such cell */
  reveal?(turn: number, step: number, call: number): boolean;
}

export interface TurnHooks extends RenderHooks {
  /** the host shows code steps and their outputs itself (live events only); the chat then shows
   *  the code folded, and the outputs only as a line saying where they are */
  cells?: CellSink | null;
  /** files the code wrote (a `files` event) */
  onFiles(files: any[]): void;
  /** download a session file */
  download(url: string, name: string): void;
  /** a session file's bytes (fetched with the token) */
  blob(url: string): Promise<Blob>;
  /** branch the session from a step (its "Branch from here" button); none: no button */
  branch?: BranchFn | null;
}

/** One tool call of a step: its code (as it is written, then complete) and its outputs. */
class CellView {
  root = el('div', 'k-cell');
  code = '';
  language = 'python';
  box: HTMLDetailsElement | null = null;
  codeEl: HTMLElement | null = null;
  outs = el('div', 'k-outputs');
  outputs: { model: any; node: HTMLElement }[] = [];
  private pending = false;

  /** where: [turn, step, call] of this cell (a host's cell is found by it) */
  constructor(private label: string, private hooks: TurnHooks, private where: () => [number, number, number]) {
    this.root.appendChild(this.outs);
  }

  private ensureCode(): void {
    if (this.box) return;
    const d = el('details', 'k-code') as HTMLDetailsElement;
    d.open = !this.hooks.cells; // a host showing the code itself: folded here
    const sum = el('summary', 'k-code-summary', 'Code');
    const copy = el('button', 'k-btn k-small k-copy', 'Copy');
    copy.type = 'button';
    copy.setAttribute('aria-label', `Copy the code of ${this.label}`);
    copy.addEventListener('click', async () => {
      try { await navigator.clipboard.writeText(this.code); copy.textContent = 'Copied'; } catch { copy.textContent = 'Copy failed'; }
      setTimeout(() => (copy.textContent = 'Copy'), 1500);
    });
    const p = el('pre', 'k-code-pre');
    this.codeEl = el('code', 'hljs');
    p.appendChild(this.codeEl);
    d.append(sum, copy, p);
    this.box = d;
    this.root.insertBefore(d, this.outs);
  }

  private render(): void {
    if (!this.codeEl) return;
    highlightInto(this.codeEl, this.code, this.language);
    (this.box!.firstChild as HTMLElement).textContent = `Code (${this.language})`;
  }

  appendCode(delta: string): void {
    this.ensureCode();
    this.code += delta;
    // many small deltas: one re-render per frame
    if (this.pending) return;
    this.pending = true;
    requestAnimationFrame(() => { this.pending = false; this.render(); });
  }

  setCode(code: string, language?: string): void {
    this.ensureCode();
    this.code = code;
    if (language) this.language = String(language).toLowerCase();
    this.render();
    this.box!.dataset.complete = '1';
  }

  output(index: number, append: boolean, out: any): void {
    if (this.hooks.cells) { // rendered by the host: one line here says so
      if (this.outs.firstChild) return;
      const cells = this.hooks.cells;
      if (!cells.reveal) { this.outs.appendChild(el('div', 'k-muted k-elsewhere', 'Output: in the notebook cell')); return; }
      const b = el('button', 'k-link k-elsewhere', 'Output: in the notebook cell');
      b.type = 'button';
      b.setAttribute('aria-label', `Show the notebook cell of ${this.label}`);
      b.addEventListener('click', () => {
        if (!cells.reveal!(...this.where())) { b.disabled = true; b.textContent = 'Output: its cell is no longer in the notebook'; }
      });
      this.outs.appendChild(b);
      return;
    }
    const o = this.outputs[index];
    if (append && o && o.model.output_type === 'stream') {
      o.model.text = (Array.isArray(o.model.text) ? o.model.text.join('') : o.model.text) + (Array.isArray(out.text) ? out.text.join('') : out.text);
      updateStream(o.node, o.model.text);
      return;
    }
    const model = { ...out };
    const node = renderOutput(model, this.hooks);
    if (o) { o.node.replaceWith(node); this.outputs[index] = { model, node }; return; }
    while (this.outputs.length < index) { // a gap: keep the order
      const gap = el('div', 'k-gap');
      this.outs.appendChild(gap);
      this.outputs.push({ model: {}, node: gap });
    }
    this.outs.appendChild(node);
    this.outputs[index] = { model, node };
  }
}

class StepView {
  root = el('section', 'k-step');
  head = el('div', 'k-step-head');
  label = el('span', 'k-step-label');
  phase = el('span', 'k-step-phase');
  clock = el('span', 'k-step-clock');
  usageEl = el('span', 'k-step-usage');
  /** [turn, step] of the session as its execution records say (what POST .../branch takes) */
  at: [number, number] | null = null;
  private branchBtn: HTMLButtonElement | null = null;
  /** its executions' kernel usage (a result's `usage`, null = unknown) */
  usages: any[] = [];
  textEl: HTMLElement | null = null;
  text = '';
  /** its tool calls, in order (a model may make several in one step) */
  cells: CellView[] = [];
  private codes = 0;      // code events so far: the k-th is call k
  current = 0;            // the call whose outputs come now
  t0 = performance.now();
  done = false;
  private pending = false;

  constructor(public n: number, private hooks: TurnHooks, private turnNo: () => number = () => 0) {
    this.root.dataset.step = String(n);
    this.label.textContent = `Step ${n}`;
    this.head.append(this.label, this.phase, this.clock, this.usageEl);
    this.root.append(this.head);
  }

  cell(k: number): CellView {
    while (this.cells.length <= k) {
      const k = this.cells.length;
      const c = new CellView(`step ${this.n}${k ? ` call ${k + 1}` : ''}`, this.hooks, () => [this.turnNo(), this.n, k]);
      this.cells.push(c);
      this.root.appendChild(c.root);
    }
    return this.cells[k];
  }

  /** outputs and the result go to call k from now (replaying the transcript) */
  select(k: number): CellView { this.current = k; this.codes = Math.max(this.codes, k + 1); return this.cell(k); }

  setPhase(text: string, cls = ''): void {
    this.phase.textContent = text;
    this.phase.className = 'k-step-phase ' + cls;
  }

  tick(): void { if (!this.done) this.clock.textContent = fmtMs(performance.now() - this.t0); }

  appendText(delta: string): void {
    this.text += delta;
    if (!this.textEl) {
      this.textEl = markdown('', 'k-md k-text');
      this.head.after(this.textEl);
    }
    if (this.pending) return;
    this.pending = true;
    requestAnimationFrame(() => { this.pending = false; if (this.textEl) setMarkdown(this.textEl, this.text); });
  }

  setText(text: string): void { this.text = ''; this.appendText(text); }

  clearText(): void { this.textEl?.remove(); this.textEl = null; this.text = ''; }

  appendCode(delta: string, index = 0): void {
    this.cell(index).appendCode(delta);
    this.setPhase('writing code…', 'k-busy');
  }

  setCode(code: string, language?: string): void {
    const k = this.codes++;
    this.current = k;
    this.cell(k).setCode(code, language);
  }

  output(index: number, append: boolean, out: any): void { this.cell(this.current).output(index, append, out); }

  result(d: any): void {
    this.done = true;
    const st = String(d.status ?? 'ok');
    const ms = typeof d.elapsed_ms === 'number' ? d.elapsed_ms : performance.now() - this.t0;
    this.setPhase(st === 'ok' ? 'ran' : st, st === 'ok' ? 'k-ok' : 'k-bad');
    this.clock.textContent = fmtMs(ms) + (d.execution_count != null ? ` · [${d.execution_count}]` : '');
    if (this.root.dataset.status !== 'error') this.root.dataset.status = st;
    this.cells[this.current]?.root.setAttribute('data-status', st);
    this.usages.push(d.usage ?? null);
    this.usageEl.textContent = this.usages.map(stepUsageText).join(' | ');
    this.usageEl.title = 'The kernel\'s CPU time and peak memory in this step, from its cgroup';
    // the step ran code: its state after it can be branched from (a record says its turn, an event only its step)
    this.at = [typeof d.turn === 'number' ? d.turn : this.turnNo(), typeof d.step === 'number' && d.step > 0 ? d.step : this.n];
    if (this.hooks.branch && !this.branchBtn) {
      this.branchBtn = branchButton(`step ${this.n}`, () => this.at!, this.head, this.hooks.branch);
      this.head.appendChild(this.branchBtn);
    }
  }

  status(d: any): void {
    const p = d.phase;
    if (p === 'model') this.setPhase('thinking…', 'k-busy');
    else if (p === 'executing') { this.done = false; this.setPhase('running…', 'k-busy'); }
    else if (p === 'retry') this.setPhase(`model busy${d.http_status ? ` (${d.http_status})` : ''}: retry ${d.attempt ?? ''} in ${fmtMs(d.retry_in_ms ?? 0)}`, 'k-warn');
    else if (p) this.setPhase(String(p), 'k-busy');
    if (typeof d.elapsed_ms === 'number') this.t0 = performance.now() - d.elapsed_ms;
    this.tick();
  }

  finish(): void {
    if (!this.done) { this.done = true; this.tick(); if (this.phase.classList.contains('k-busy')) this.setPhase(''); }
    if (!this.textEl && !this.cells.length && !this.root.querySelector('.k-notice, .k-files-note')) this.root.hidden = true;
  }
}

/** Tokens as the model's API reported them: null = not reported (never shown as 0 or a negative sum). */
export interface Tokens { input: number; output: number; calls: number; unreported: number }

/** A usage record or event's tokens ({tokens: {input, output}} or, older, input_tokens / output_tokens with -1). */
export function callTokens(r: any): Tokens {
  const t = r?.tokens && typeof r.tokens === 'object' ? r.tokens : { input: r?.input_tokens, output: r?.output_tokens };
  const known = (v: any) => typeof v === 'number' && v >= 0;
  return { input: known(t.input) ? t.input : 0, output: known(t.output) ? t.output : 0, calls: 1,
           unreported: known(t.input) && known(t.output) ? 0 : 1 };
}

/** done.tokens.turn (or .session) as Tokens. */
export function doneTokens(t: any): Tokens | null {
  if (!t || typeof t !== 'object') return null;
  const calls = typeof t.calls === 'number' ? t.calls : typeof t.input === 'number' || typeof t.output === 'number' ? 1 : 0;
  const none = t.input === null && t.output === null;
  return { input: Number(t.input) > 0 ? Number(t.input) : 0, output: Number(t.output) > 0 ? Number(t.output) : 0,
           calls, unreported: none ? Math.max(calls, 1) : Number(t.unreported) || 0 };
}

export function tokensText(t: Tokens): string {
  if (!t.calls && !t.unreported) return '';
  if (t.unreported && t.unreported >= t.calls && !t.input && !t.output) return 'tokens unknown (the model\'s API did not report them)';
  const s = `${t.input.toLocaleString()} tokens in · ${t.output.toLocaleString()} out`;
  return t.unreported ? `at least ${s} (${t.unreported} of ${t.calls} calls unreported)` : s;
}

export function costText(c: any): string {
  return c && typeof c === 'object' && typeof c.amount === 'number' ? `${c.amount.toFixed(4)} ${String(c.currency ?? '')}` : '';
}

/** Wrap each receipt's number of the rendered answer in a span saying where it came from. */
function markReceipts(root: HTMLElement, receipts: any[], onStep: (turn: number, step: number) => void): void {
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  const nodes: Text[] = [];
  for (let n = walker.nextNode(); n; n = walker.nextNode()) nodes.push(n as Text);
  let ni = 0, off = 0;
  for (const r of receipts) {
    const text = String(r?.text ?? '');
    if (!text) continue;
    while (ni < nodes.length) {
      const at = nodes[ni].data.indexOf(text, off);
      if (at < 0) { ni++; off = 0; continue; }
      const range = document.createRange();
      range.setStart(nodes[ni], at);
      range.setEnd(nodes[ni], at + text.length);
      const found = !!r.found, given = r.form === 'given';
      const span = el('span', found ? 'k-num k-num-ok' : 'k-num k-num-bad');
      span.title = !found ? 'not computed by the kernel: no output printed this number'
        : given ? 'from the question'
        : `${r.form} of ${r.printed}, printed at turn ${r.turn}, step ${r.step}`;
      if (found && !given && typeof r.step === 'number') {
        span.tabIndex = 0;
        span.setAttribute('role', 'link');
        const go = () => onStep(Number(r.turn) || 0, r.step);
        span.addEventListener('click', go);
        span.addEventListener('keydown', (e) => { if (e.key === 'Enter') go(); });
      }
      range.surroundContents(span);
      // the rest of this text node is now the span's next sibling
      const rest = span.nextSibling;
      if (rest && rest.nodeType === Node.TEXT_NODE) { nodes[ni] = rest as Text; off = 0; } else { ni++; off = 0; }
      break;
    }
  }
}

export class TurnView {
  root = el('article', 'k-turn');
  private steps = new Map<number, StepView>();
  private current: StepView | null = null;
  private timer = 0;
  finalEl: HTMLElement | null = null;
  foot = el('div', 'k-turn-foot');
  status: 'running' | 'ok' | 'error' | 'interrupted' = 'running';
  tokens: Tokens = { input: 0, output: 0, calls: 0, unreported: 0 };
  cost: any = null;
  lastId = 0;
  /** the session's turn this is (1, 2 ...), set by the chat */
  n = 0;

  constructor(question: string, private hooks: TurnHooks, live: boolean) {
    const q = el('div', 'k-user');
    q.appendChild(el('span', 'k-who', 'You'));
    const t = el('div', 'k-user-text');
    t.textContent = question;
    q.appendChild(t);
    this.root.append(q, this.foot);
    this.root.dataset.status = 'running';
    if (live) this.timer = window.setInterval(() => this.current?.tick(), 500);
  }

  step(n: number): StepView {
    let s = this.steps.get(n);
    if (!s) {
      this.current?.finish();
      s = new StepView(n, this.hooks, () => this.n);
      this.steps.set(n, s);
      this.root.insertBefore(s.root, this.finalEl ?? this.foot);
      this.current = s;
      s.setPhase('thinking…', 'k-busy');
      s.tick();
    }
    return s;
  }

  private where(step: unknown): HTMLElement {
    return typeof step === 'number' && this.steps.has(step) ? this.steps.get(step)!.root : this.root;
  }

  notice(text: string, step?: unknown, cls = 'k-notice'): void {
    const n = el('div', cls, text);
    n.setAttribute('role', 'status');
    const w = this.where(step);
    w.insertBefore(n, w === this.root ? (this.finalEl ?? this.foot) : null);
  }

  files(step: unknown, files: any[]): void {
    const box = el('div', 'k-files-note');
    box.appendChild(el('span', '', 'Files: '));
    for (const f of files.slice(0, 20)) {
      const b = el('button', 'k-link', `${f.path} (${f.change ?? 'changed'})`);
      b.type = 'button';
      if (f.change === 'deleted' || !f.url) b.disabled = true;
      else b.addEventListener('click', () => this.hooks.download(f.url, String(f.path).split('/').pop() || 'file'));
      box.appendChild(b);
    }
    this.where(step).appendChild(box);
    // charts the code saved as files (not displayed): shown inline too
    for (const f of files)
      if (f.figure_url && f.change !== 'deleted')
        this.where(step).appendChild(savedFigure(this.hooks.blob(f.figure_url), String(f.figure || f.path), this.hooks));
    this.hooks.onFiles(files);
  }

  final(text: string, step?: unknown, receipts?: any[]): void {
    const s = typeof step === 'number' ? this.steps.get(step) : this.current;
    if (s && s.text.trim() === text.trim()) s.clearText();
    s?.finish();
    this.finalEl?.remove();
    this.finalEl = markdown(text, 'k-md k-final');
    this.finalEl.setAttribute('aria-label', 'answer');
    if (Array.isArray(receipts) && receipts.length) {
      markReceipts(this.finalEl, receipts, (turn, n) => {
        const v = (!turn || turn === this.n) ? this.steps.get(n) : undefined;
        v?.root.scrollIntoView({ block: 'center' });
        v?.root.classList.add('k-flash');
        setTimeout(() => v?.root.classList.remove('k-flash'), 1200);
      });
      const bad = receipts.filter((r) => !r.found).length;
      if (bad) this.finalEl.appendChild(el('div', 'k-receipts-bad', `${bad} number${bad > 1 ? 's' : ''} not computed by the kernel`));
    }
    this.root.insertBefore(this.finalEl, this.foot);
  }

  end(status: string, tokens?: Tokens | null, message?: string, cost?: any): void {
    clearInterval(this.timer);
    for (const s of this.steps.values()) s.finish();
    this.status = (['ok', 'error', 'interrupted'].includes(status) ? status : 'error') as any;
    this.root.dataset.status = this.status;
    // the step Stop interrupted failed with KeyboardInterrupt: say what happened
    const last = this.current;
    if (this.status === 'interrupted' && last && last.root.dataset.status === 'error') last.setPhase('stopped', 'k-warn');
    if (tokens) this.tokens = tokens;
    if (cost !== undefined) this.cost = cost;
    const parts: string[] = [];
    if (this.status !== 'ok') parts.push(this.status === 'interrupted' ? 'Stopped' : 'Failed' + (message ? `: ${message}` : ''));
    const tt = tokensText(this.tokens);
    if (tt) parts.push(tt);
    if (costText(this.cost)) parts.push(costText(this.cost));
    const usages = [...this.steps.values()].flatMap((s) => s.usages);
    if (usages.length) parts.push(turnUsageText(usages));
    this.foot.textContent = parts.join(' · ');
  }

  /** A verification's result (POST .../verify, or the transcript's verify record), under the answer. */
  verify(v: any, box?: HTMLElement | null): void {
    const view = verifyView(v);
    if (box && box.parentNode) box.replaceWith(view);
    else this.root.insertBefore(view, this.foot);
  }

  /** A live SSE event. */
  onEvent(name: string, d: any): void {
    const st = typeof d?.step === 'number' ? d.step : null;
    switch (name) {
      case 'step': this.step(d.step); break;
      case 'text': this.step(st ?? 1).appendText(String(d.text ?? '')); break;
      case 'code_delta': this.step(st ?? 1).appendCode(String(d.text ?? ''), Number(d.index) || 0); break;
      case 'code': {
        const s = this.step(st ?? 1);
        s.setCode(String(d.code ?? d.text ?? ''), d.language);
        s.setPhase('running…', 'k-busy');
        this.hooks.cells?.code(s.n, s.current, String(d.code ?? d.text ?? ''), String(d.language ?? 'python'));
        break;
      }
      case 'output': {
        const s = this.step(st ?? 1);
        s.output(Number(d.index ?? 0), !!d.append, d.output);
        if (d.output) this.hooks.cells?.output(s.n, s.current, Number(d.index ?? 0), !!d.append, d.output);
        break;
      }
      case 'result': {
        const s = this.step(st ?? 1);
        s.result(d);
        this.hooks.cells?.result(s.n, s.current, d);
        break;
      }
      case 'status': if (st !== null) this.step(st).status(d); break;
      case 'files': this.files(st, Array.isArray(d.files) ? d.files : []); break;
      case 'notice': this.notice(String(d.text ?? ''), st); break;
      case 'final': this.final(String(d.text ?? ''), st, d.receipts); break;
      case 'branch': this.root.insertBefore(branchNote(d), this.finalEl ?? this.foot); break;
      case 'error': this.notice(String(d.message ?? 'error'), st, 'k-notice k-error'); break;
      case 'done': {
        this.end(String(d.status ?? 'ok'), doneTokens(d.tokens?.turn), d.message, d.cost?.turn ?? null);
        break;
      }
      default: break; // an event this page does not know yet
    }
  }

  /** Replaying the transcript: the parts of a step. */
  replayStep(n: number): StepView { const s = this.step(n); s.done = true; s.setPhase(''); return s; }
}
