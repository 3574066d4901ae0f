// The chat panel: one agent session's conversation, its files and the box
// to ask in. A component: mountChat(element, {baseUrl, token | fetch}) works
// in this page and in a host such as a JupyterLab extension (the korch
// agent panel, src/jupyterlab), which differs only by the options below.
import { Api, ApiError, ApiOptions, SseEvent, saveBlob } from './api';
import { FilesPanel } from './files';
import { CellSink, Tokens, TurnView, callTokens, doneTokens, el, tokensText } from './turn';
import { verifyRunning, verifyView } from './ledger';
import { branchNote } from './branch';

export interface ChatOptions extends ApiOptions {
  /** the session to open at once */
  sessionId?: string;
  /** the session's state or tokens changed (a host may refresh its list) */
  onChange?: (session: any) => void;
  /** no session open: the box still takes a question, and sending it first makes the
   *  session this returns (its model, as POST /api/agent/sessions answers) */
  createSession?: () => Promise<any>;
  /** the host shows the code steps and outputs itself (a notebook's cells) */
  cells?: CellSink;
  /** a live turn starts (the question just sent, or a running one followed): the
   *  session's n-th turn (1, 2 ...; the same n when a reload follows it again) */
  onTurn?: (question: string, n: number) => void;
  /** the title for a session (default "Session 1234abcd") */
  title?: (session: any | null) => string;
  /** the work dir's files beside the chat (default true) */
  files?: boolean;
  /** the "Download notebook" and "Clean notebook" buttons (default true) */
  notebookButton?: boolean;
  /** the "Verify" button (default: as notebookButton) */
  verifyButton?: boolean;
  /** each step's "Branch from here" (default: true unless the host shows the cells itself:
   *  a branch runs in a kernel of its own, not the host's) */
  branchButton?: boolean;
  /** a branch was made (its session, {id}): the host shows it (default: the chat opens it) */
  onBranch?: (session: any) => void | Promise<void>;
}

export interface ChatHandle {
  readonly api: Api;
  open(sessionId: string | null): Promise<void>;
  send(text: string): Promise<void>;
  /** the session's model as a list saw it: the header follows its state */
  update(session: any): void;
  stop(): Promise<void>;
  destroy(): void;
  /** the open session's id (null: none) */
  readonly sessionId: string | null;
  /** nothing can be asked now (a host's reason, e.g. no agent API behind it): the box disabled */
  block(blocked: boolean): void;
  /** a new session is being made elsewhere (the page's New session): files given meanwhile wait for it */
  expect(session: Promise<any>): void;
}

/** The latency from an event's arrival to its rendering (ms), the last 500. */
export const stats = { latency: [] as { event: string; ms: number }[], events: [] as { id: number | null; event: string; at: number }[] };

const sessionPath = (id: string) => `/api/agent/sessions/${encodeURIComponent(id)}`;

export function mountChat(host: HTMLElement, opts: ChatOptions = {}): ChatHandle {
  const api = new Api(opts);
  const showFiles = opts.files !== false;
  host.classList.add('k-chat-host');
  const root = el('section', 'k-chat' + (showFiles ? '' : ' k-no-files'));
  root.setAttribute('aria-label', 'Agent chat');
  const bar = el('header', 'k-chat-bar');
  const title = el('h2', 'k-chat-title', 'No session');
  const badge = el('span', 'k-badge');
  const model = el('span', 'k-model');
  model.title = 'The model this session runs';
  const tokens = el('span', 'k-tokens');
  const nbBtn = el('button', 'k-btn', 'Download notebook');
  nbBtn.type = 'button';
  nbBtn.setAttribute('aria-label', 'Download the session as a Jupyter notebook (.ipynb)');
  bar.append(title, badge, model, tokens);
  const cleanBtn = el('button', 'k-btn', 'Clean notebook');
  cleanBtn.type = 'button';
  cleanBtn.title = 'The notebook without the failed attempts: it re-runs top to bottom';
  cleanBtn.setAttribute('aria-label', 'Download the notebook without the failed attempts (.ipynb)');
  const verifyBtn = el('button', 'k-btn k-verify-btn', 'Verify');
  verifyBtn.type = 'button';
  verifyBtn.title = 'Re-run the clean notebook in a fresh kernel and check the answer\'s numbers come out again';
  verifyBtn.setAttribute('aria-label', 'Verify the answer: re-run the clean notebook in a fresh kernel');
  if (opts.notebookButton !== false) bar.append(nbBtn, cleanBtn);
  if (opts.verifyButton ?? opts.notebookButton !== false) bar.append(verifyBtn);

  const log = el('div', 'k-log');
  log.setAttribute('role', 'log');
  log.setAttribute('aria-live', 'polite');
  log.setAttribute('aria-label', 'Conversation');
  log.tabIndex = 0;

  const form = el('form', 'k-composer');
  const input = el('textarea', 'k-input') as HTMLTextAreaElement;
  input.rows = 2;
  input.placeholder = 'Ask about your data…';
  input.title = 'Enter sends, Shift+Enter starts a new line';
  input.setAttribute('aria-label', 'Message');
  input.setAttribute('aria-description', 'Enter sends, Shift+Enter starts a new line');
  const send = el('button', 'k-btn k-primary k-send', 'Send');
  send.type = 'submit';
  const stopBtn = el('button', 'k-btn k-stop', 'Stop');
  stopBtn.type = 'button';
  stopBtn.setAttribute('aria-label', 'Stop the running step');
  stopBtn.disabled = true;
  form.append(input, send, stopBtn);

  const main = el('div', 'k-chat-main');
  main.append(log, form);
  root.append(bar, main);
  host.replaceChildren(root);

  let sid: string | null = null;
  let making: Promise<string | null> | null = null; // a session being made (createSession)

  /** The open session, or the one being made for this (opts.createSession); null when none can be. */
  function needSession(): Promise<string | null> {
    if (making) return making;
    if (sid) return Promise.resolve(sid);
    if (!opts.createSession) return Promise.resolve(null);
    making ??= (async () => {
      try {
        const m = await opts.createSession!();
        if (!m || typeof m.id !== 'string') throw new Error('no session made');
        if (!sid) { sid = m.id; showSession(m); panel.setSession(m.id); }
        return sid;
      } finally { making = null; }
    })();
    return making;
  }
  const panel = new FilesPanel(api, { needSession, notice: (t) => notice(t), download: (url, name) => void download(url, name) });
  const pick = panel.pick;
  if (showFiles) root.appendChild(panel.root);

  let turn: TurnView | null = null;
  let follow: AbortController | null = null;
  let figures = 0;
  let turns = 0; // the turns shown (the transcript's, then each live one)
  let blocked = false;
  let shown: any = null; // the session model shown

  const hooks = {
    cells: opts.cells ?? null,
    save: saveBlob,
    nextFigure: () => ++figures,
    onFiles: (fs: any[]) => panel.changed(fs),
    download: (url: string, name: string) => void download(url, name),
    blob: (url: string) => api.blob(url),
    branch: (opts.branchButton ?? !opts.cells) ? (turn: number, step: number, content: string, llm: string) => branch(turn, step, content, llm) : null,
  };
  let branched: { id: string; question: string } | null = null; // the branch just made: its question, for its first turn

  /** POST .../branch (detached: the branch's turn goes on without this stream), up to its
   *  `branch` event naming the new session; then that session is shown. */
  async function branch(turn: number, step: number, content: string, llm: string): Promise<void> {
    if (!sid) throw new Error('no session is open');
    const body: Record<string, unknown> = { turn, step, content, detach: true };
    if (llm) body.llm = llm;
    let id: string | null = null;
    for await (const e of api.stream('POST', `${sessionPath(sid)}/branch`, body)) {
      stats.events.push({ id: e.id, event: e.event, at: e.at });
      if (e.event === 'branch' && typeof e.data?.session === 'string') { id = e.data.session; break; }
      if (e.event === 'error') throw new Error(String(e.data?.message ?? 'error'));
      if (e.event === 'done') break;
    }
    if (!id) throw new Error('korch did not say which session the branch is');
    branched = { id, question: content };
    if (opts.onBranch) await opts.onBranch({ id });
    else await open(id);
  }

  async function download(url: string, name: string): Promise<void> {
    try { saveBlob(await api.blob(url), name); } catch (e) { notice(`cannot download ${name}: ${(e as Error).message}`); }
  }

  function notice(text: string): void {
    const n = el('div', 'k-notice k-error', text);
    n.setAttribute('role', 'alert');
    log.appendChild(n);
    scroll();
  }

  function scroll(): void {
    // follow the bottom unless the user scrolled up
    if (log.scrollHeight - log.scrollTop - log.clientHeight < 200) log.scrollTop = log.scrollHeight;
  }
  // shown again (a host's side panel opened, a window resized): still at the end if it was there
  let atEnd = true;
  log.addEventListener('scroll', () => { if (log.clientHeight) atEnd = log.scrollHeight - log.scrollTop - log.clientHeight < 200; });
  const resized = typeof ResizeObserver === 'function' ? new ResizeObserver(() => { if (atEnd && log.clientHeight) log.scrollTop = log.scrollHeight; }) : null;
  resized?.observe(log);
  // content that grows in place (a step's status line, outputs streaming in) keeps an
  // at-the-end log at the end too: not every change goes through scroll()
  const grew = typeof MutationObserver === 'function' ? new MutationObserver(() => { if (atEnd && log.clientHeight) log.scrollTop = log.scrollHeight; }) : null;
  grew?.observe(log, { childList: true, subtree: true, characterData: true });

  function setBusy(busy: boolean): void {
    stopBtn.disabled = !busy;
    send.disabled = busy || blocked;
    root.dataset.busy = busy ? '1' : '';
  }

  function showSession(m: any): void {

    title.textContent = opts.title ? opts.title(m ?? null) : m ? `Session ${String(m.id).slice(0, 8)}` : 'No session';
    badge.textContent = m ? m.state : '';
    badge.className = `k-badge k-state-${m?.state ?? 'none'}`;
    model.textContent = m && m.llm ? String(m.llm) : '';
    const u = m ? doneTokens(m.usage) : null;
    tokens.textContent = u && (u.calls || u.unreported) ? tokensText(u) : m && m.tokens ? `${Number(m.tokens).toLocaleString()} tokens` : '';
    shown = m;
    nbBtn.disabled = !m;
    cleanBtn.disabled = !m;
    verifyBtn.disabled = !m || !m.turns || m.state !== 'idle' || root.dataset.busy === '1';
    input.disabled = blocked || (!m && !opts.createSession);
    send.disabled = blocked || (!m && !opts.createSession) || root.dataset.busy === '1';
    pick.disabled = !m && !opts.createSession;
    opts.onChange?.(m);
  }

  function onEvent(e: SseEvent): void {
    stats.events.push({ id: e.id, event: e.event, at: e.at });
    if (!turn) return;
    if (e.id !== null) turn.lastId = e.id;
    // a branch's first event says where it came from: the transcript's branch record shown already says so
    if (!(e.event === 'branch' && !e.data?.state && log.querySelector('.k-branch-note[data-branch=from]'))) turn.onEvent(e.event, e.data);
    if (e.event === 'done') {
      setBusy(false);
      const t = turn, hasTokens = e.data?.tokens && typeof e.data.tokens === 'object';
      void refresh().then((m) => { if (!hasTokens && m && t) t.end(t.status, turnTokens(m.transcript)); settle(m, 5); });
    }
    scroll();
    requestAnimationFrame(() => {
      stats.latency.push({ event: e.event, ms: performance.now() - e.at });
      if (stats.latency.length > 500) stats.latency.shift();
      if (stats.events.length > 2000) stats.events.splice(0, 1000);
    });
  }

  /** After a turn's done the session may still say running for a moment: asked again, a few times. */
  function settle(m: any, tries: number): void {
    const my = sid;
    if (!m || tries <= 0 || (m.state !== 'running' && m.state !== 'starting')) return;
    setTimeout(() => { if (sid === my && turn?.status !== 'running') void refresh().then((n) => settle(n, tries - 1)); }, 400);
  }

  async function refresh(): Promise<any> {
    if (!sid) return null;
    try {
      const m = await api.json('GET', sessionPath(sid));
      showSession(m);
      void panel.load();
      return m;
    } catch { return null; /* next time */ }
  }

  /** The transcript's records as turns (a finished turn, or the start of the running one). */
  function rebuild(records: any[], running: boolean): string | null {
    log.replaceChildren();
    turns = 0;
    let t: TurnView | null = null;
    let n = 0;
    const byCall = new Map<string, [number, number]>();
    let lastUser = -1;
    let lastBranch = -1;
    records.forEach((r, i) => { if (r.type === 'user' && !r.korch) lastUser = i; if (r.type === 'branch') lastBranch = i; });
    // a branch starting its first turn: the parent's turns are all complete, its question not yet recorded
    if (running && lastBranch > lastUser) lastUser = -1;
    const upto = running && lastUser >= 0 ? lastUser : records.length;
    for (const r of records.slice(0, upto)) {
      switch (r.type) {
        case 'user':
          if (r.korch) { t?.notice(String(r.content).replace(/^\[|\]$/g, '')); break; }
          if (t) t.end(t.finalEl ? 'ok' : t.status === 'running' ? 'interrupted' : t.status);
          t = new TurnView(String(r.content ?? ''), hooks, false);
          t.n = ++turns;
          log.appendChild(t.root);
          n = 0;
          break;
        case 'assistant': {
          if (!t) break;
          const calls = Array.isArray(r.tool_calls) ? r.tool_calls : [];
          if (!calls.length) break; // its text is the final answer (a `final` record follows)
          const s = t.replayStep(++n);
          if (r.content) s.setText(String(r.content));
          calls.forEach((c: any, k: number) => {
            const code = c?.arguments?.code;
            if (typeof code === 'string') s.setCode(code, r.language ?? c?.language);
            if (c?.id) byCall.set(c.id, [n, k]);
          });
          break;
        }
        case 'execution': {
          if (!t) break;
          const [sn, k] = byCall.get(r.tool_call_id) ?? [n, 0];
          const s = t.replayStep(sn);
          const cell = s.select(k);
          if (typeof r.language === 'string' && cell.code) cell.setCode(cell.code, r.language);
          (r.outputs ?? []).forEach((o: any, i: number) => s.output(i, false, o));
          s.result(r);
          if (Array.isArray(r.files) && r.files.length && sid) {
            const base = sessionPath(sid), enc = (p: string) => p.split('/').map(encodeURIComponent).join('/');
            t.files(sn, r.files.map((f: any) => ({
              ...f,
              url: f.url ?? (f.path ? `${base}/files/${enc(String(f.path))}` : undefined),
              figure_url: f.figure_url ?? (f.figure ? `${base}/figures/${encodeURIComponent(String(f.figure))}` : undefined),
            })));
          }
          break;
        }
        case 'usage': if (t) { const c = callTokens(r); t.tokens.input += c.input; t.tokens.output += c.output; t.tokens.calls++; t.tokens.unreported += c.unreported; } break;
        case 'final': t?.final(String(r.content ?? ''), undefined, r.receipts); break;
        case 'verify': t?.verify(r.verify); break;
        case 'branch':
          // the parent's turn was cut here (after a step, before its answer): over, not stopped
          if (t && !t.finalEl && t.status === 'running') t.end('ok');
          log.appendChild(branchNote(r));
          break;
        case 'notice':
          if (t && r.content === 'interrupted by the user') t.status = 'interrupted';
          t?.notice(String(r.content ?? ''));
          break;
        case 'error': if (t) { t.notice(String(r.message ?? 'error'), undefined, 'k-notice k-error'); t.status = 'error'; } break;
        default: break;
      }
    }
    if (t) t.end(t.finalEl ? 'ok' : t.status === 'running' ? 'interrupted' : t.status);
    return running && lastUser >= 0 ? String(records[lastUser].content ?? '') : running ? '' : null;
  }

  /** Follow the running turn (GET .../events) from event `after`. */
  async function followTurn(question: string, after = 0): Promise<void> {
    if (!sid) return;
    const my = sid;
    follow?.abort();
    follow = new AbortController();
    if (!turn || after === 0) {
      turn = new TurnView(question, hooks, true);
      log.appendChild(turn.root);
      turn.n = ++turns;
      opts.onTurn?.(question, turn.n);
    }
    setBusy(true);
    try {
      const any = await api.events('GET', `${sessionPath(my)}/events${after ? `?after=${after}` : ''}`, undefined, onEvent, follow.signal);
      if (!any && my === sid) await open(my); // it ended meanwhile: the transcript has it
    } catch (e) {
      if ((e as Error).name !== 'AbortError') notice(`lost the turn's events: ${(e as Error).message}`);
    } finally {
      if (my === sid && turn?.status === 'running' && !follow?.signal.aborted) { setBusy(false); void refresh(); }
    }
  }

  async function open(id: string | null): Promise<void> {
    follow?.abort();
    follow = null;
    turn = null;
    sid = id;
    panel.setSession(id);
    figures = 0;
    turns = 0;
    atEnd = true;
    log.replaceChildren();
    setBusy(false);
    if (!id) { showSession(null); return; }
    let m: any;
    try { m = await api.json('GET', sessionPath(id)); } catch (e) {
      showSession(null);
      notice(`cannot open the session: ${(e as Error).message}`);
      return;
    }
    if (sid !== id) return;
    showSession(m);
    const running = m.state === 'running' || m.state === 'starting';
    const q = rebuild(Array.isArray(m.transcript) ? m.transcript : [], running);
    log.scrollTop = log.scrollHeight;
    const asked = branched && branched.id === id ? branched.question : null;
    branched = null;
    if (running) void followTurn(q || asked || '(a turn started elsewhere)');
  }

  async function ask(text: string): Promise<void> {
    if (!text.trim() || turn?.status === 'running') return;
    if (!sid && opts.createSession) {
      try { await needSession(); } catch (e) { notice(`cannot start the agent: ${(e as Error).message}`); return; }
    }
    if (!sid) return;
    const my = sid;
    follow?.abort();
    follow = new AbortController();
    turn = new TurnView(text, hooks, true);
    log.appendChild(turn.root);
    turn.n = ++turns;
    opts.onTurn?.(text, turn.n);
    log.scrollTop = log.scrollHeight;
    setBusy(true);
    badge.textContent = 'running';
    try {
      // detach: a reload (or a closed tab) does not cancel the turn; the page follows it again
      await api.events('POST', `${sessionPath(my)}/messages`, { content: text, detach: true }, onEvent, follow.signal);
    } catch (e) {
      if ((e as Error).name === 'AbortError') return;
      if (e instanceof ApiError) { turn.notice(e.message, undefined, 'k-notice k-error'); turn.end('error'); setBusy(false); return; }
      // the connection broke mid-turn: follow it from where we were
      if (my === sid && turn) { void followTurn(text, turn.lastId); return; }
    }
    if (my === sid && turn?.status === 'running') { turn.end('error', null, 'the stream ended without its done event'); setBusy(false); }
  }

  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const text = input.value;
    if (!text.trim()) return;
    input.value = '';
    void ask(text);
  });
  input.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) { e.preventDefault(); form.requestSubmit(); }
  });
  stopBtn.addEventListener('click', () => void handle.stop());
  nbBtn.addEventListener('click', () => void (sid && download(`${sessionPath(sid)}/notebook`, `korch-${sid.slice(0, 8)}.ipynb`)));
  cleanBtn.addEventListener('click', () => void (sid && download(`${sessionPath(sid)}/notebook?clean=1`, `korch-${sid.slice(0, 8)}-clean.ipynb`)));
  verifyBtn.addEventListener('click', () => void verify());

  /** POST .../verify: its events into a box under the last answer, its result there at the end. */
  async function verify(): Promise<void> {
    if (!sid || !turn && !log.querySelector('.k-turn')) return;
    const my = sid, t = turn;
    const box = verifyRunning('Verifying: re-running the clean notebook in a fresh kernel…');
    const host = t?.root ?? (log.querySelector('.k-turn:last-of-type') as HTMLElement | null);
    host?.insertBefore(box, host.querySelector('.k-turn-foot'));
    scroll();
    setBusy(true);
    verifyBtn.disabled = true;
    let result: any = null;
    try {
      await api.events('POST', `${sessionPath(my)}/verify`, undefined, (e) => {
        stats.events.push({ id: e.id, event: e.event, at: e.at });
        if (e.event === 'notice' || e.event === 'error') box.textContent = String(e.data?.text ?? e.data?.message ?? '');
        if (e.event === 'verify') result = e.data?.verify;
      });
    } catch (e) {
      box.textContent = `cannot verify: ${(e as Error).message}`;
      box.dataset.status = 'failed';
    }
    if (my !== sid) return;
    setBusy(false);
    if (result) {
      if (t) t.verify(result, box);
      else box.replaceWith(verifyView(result));
    }
    void refresh();
  }
  for (const t of [root]) {
    t.addEventListener('dragover', (e) => { e.preventDefault(); root.classList.add('k-dragging'); });
    t.addEventListener('dragleave', (e) => { if (e.target === root) root.classList.remove('k-dragging'); });
    t.addEventListener('drop', (e) => {
      e.preventDefault();
      root.classList.remove('k-dragging');
      if (e.dataTransfer?.files.length) panel.add(e.dataTransfer.files);
    });
  }

  const handle: ChatHandle = {
    api,
    open,
    send: ask,
    async stop() {
      if (!sid) return;
      stopBtn.disabled = true;
      try { await api.request('POST', `${sessionPath(sid)}/interrupt`); } catch (e) { notice(`cannot stop: ${(e as Error).message}`); }
    },
    update(m: any) {
      if (m && m.id === sid && turn?.status !== 'running' && badge.textContent !== m.state) showSession(m);
    },
    destroy() { follow?.abort(); resized?.disconnect(); grew?.disconnect(); root.remove(); },
    get sessionId() { return sid; },
    block(b: boolean) { blocked = b; showSession(shown); },
    expect(p: Promise<any>) {
      const mine: Promise<string | null> = p.then((m) => (m && typeof m.id === 'string' ? m.id : null), () => null)
        .finally(() => { if (making === mine) making = null; });
      making = mine;
      panel.setSession(null);
    },
  };
  showSession(null);
  if (opts.sessionId) void open(opts.sessionId);
  return handle;
}

/** The tokens of the transcript's last turn (its usage records). */
function turnTokens(records: any[] | undefined): Tokens {
  let t: Tokens = { input: 0, output: 0, calls: 0, unreported: 0 };
  for (const r of records ?? []) {
    if (r.type === 'user' && !r.korch) t = { input: 0, output: 0, calls: 0, unreported: 0 };
    if (r.type === 'usage') { const c = callTokens(r); t.input += c.input; t.output += c.output; t.calls++; t.unreported += c.unreported; }
  }
  return t;
}
