// The page korch serve opens on: the sessions (list, create, open, delete)
// beside the chat panel (chat.ts). The token comes in the printed URL
// (?token=...): it is taken once, kept in sessionStorage for this tab (as
// Jupyter keeps its own for the browser session) and removed from the
// address bar at once, so it is neither in the history nor shown again.
import './page.css';
import { Api } from './api';
import { mountChat, stats } from './chat';
import { el } from './turn';

const KEY = 'korch-token';

function takeToken(): string {
  const u = new URL(location.href);
  const t = u.searchParams.get('token');
  if (t !== null) {
    sessionStorage.setItem(KEY, t);
    u.searchParams.delete('token');
    history.replaceState(history.state, '', u.pathname + (u.search === '?' ? '' : u.search) + u.hash);
  }
  return sessionStorage.getItem(KEY) ?? '';
}

function start(): void {
  const token = takeToken();
  const app = document.getElementById('app')!;
  // the page's own place: "/" at korch's address, "/services/korch/" behind JupyterHub's proxy
  const baseUrl = location.pathname.replace(/\/+$/, '');
  const api = new Api({ baseUrl, token });
  const side = el('nav', 'k-side');
  side.setAttribute('aria-label', 'Sessions');
  const head = el('div', 'k-side-head');
  head.appendChild(el('h1', 'k-logo', 'korch'));
  const newBtn = el('button', 'k-btn k-primary', 'New session');
  newBtn.type = 'button';
  newBtn.setAttribute('aria-label', 'Create a new agent session');
  const toggle = el('button', 'k-btn k-side-toggle', 'Sessions');
  toggle.type = 'button';
  toggle.setAttribute('aria-expanded', 'false');
  toggle.setAttribute('aria-controls', 'k-sessions');
  head.append(newBtn, toggle);
  const list = el('ul', 'k-sessions');
  list.id = 'k-sessions';
  const status = el('p', 'k-side-status');
  status.setAttribute('role', 'status');
  // who this page is for, on a server with users (--users, JupyterHub); one person's server says nothing
  const who = el('p', 'k-side-who');
  who.hidden = true;
  side.append(head, list, status, who);
  void api.json<any>('GET', '/api/me').then((me) => {
    if (!me || typeof me.name !== 'string' || me.name === 'default') return;
    who.textContent = `Signed in as ${me.name}${me.role === 'admin' ? ' (admin: sees every session)' : ''}`;
    who.hidden = false;
  }, () => { /* an older korch: nothing said */ });
  const chatHost = el('div', 'k-chat-host');
  app.replaceChildren(side, chatHost);
  app.classList.add('k-ready');

  let current: string | null = null;
  let sessions: any[] = [];
  let armed: string | null = null;
  let armTimer = 0;
  // a file dropped before any session exists makes one (the same as New session, and the one being made if it was clicked)
  const chat = mountChat(chatHost, {
    baseUrl, token, createSession: () => create(),
    onChange: (m) => { if (m) { const i = sessions.findIndex((s) => s.id === m.id); if (i >= 0) { sessions[i] = { ...sessions[i], ...m }; draw(); } } },
    // a step's "Branch from here" made a session: listed, and opened (its turn followed)
    onBranch: async (m) => { await load(); await select(m.id); },
  });

  function draw(): void {
    list.replaceChildren();
    if (!sessions.length) list.appendChild(el('li', 'k-muted', 'No sessions yet: create one.'));
    for (const s of sessions) {
      const li = el('li', 'k-session' + (s.id === current ? ' k-current' : ''));
      const open = el('button', 'k-session-open');
      open.type = 'button';
      open.setAttribute('aria-label', `Open session ${s.id.slice(0, 8)} (${s.state})`);
      if (s.id === current) open.setAttribute('aria-current', 'true');
      open.append(el('span', 'k-session-name', s.id.slice(0, 8)), el('span', `k-badge k-state-${s.state}`, s.state),
        el('span', 'k-session-meta', `${s.turns} turn${s.turns === 1 ? '' : 's'} · ${new Date(s.last_activity || s.created).toLocaleString()}`));
      open.addEventListener('click', () => void select(s.id));
      const del = el('button', 'k-btn k-small k-del', '✕');
      del.type = 'button';
      del.setAttribute('aria-label', `Delete session ${s.id.slice(0, 8)}`);
      // two clicks: the first asks (the list is redrawn every 3 s: the question is kept in `armed`)
      const ask = () => {
        del.textContent = 'Delete?';
        del.setAttribute('aria-label', `Really delete session ${s.id.slice(0, 8)} and its files? Press again`);
      };
      if (armed === s.id) ask();
      del.addEventListener('click', () => {
        if (armed === s.id) { armed = null; void remove(s.id); return; }
        armed = s.id;
        ask();
        clearTimeout(armTimer);
        armTimer = window.setTimeout(() => { armed = null; draw(); }, 5000);
      });
      li.append(open, del);
      list.appendChild(li);
    }
  }

  async function load(): Promise<void> {
    try {
      const all = (await api.json<any[]>('GET', '/api/agent/sessions')) ?? [];
      all.sort((a, b) => String(b.created).localeCompare(String(a.created)));
      sessions = all;
      status.textContent = '';
      const cur = all.find((s) => s.id === current);
      if (cur) chat.update(cur);
      draw();
    } catch (e) {
      status.textContent = (e as any).status === 403 ? 'Not allowed: open the URL korch serve printed (with its ?token=…).' : `Cannot list sessions: ${(e as Error).message}`;
    }
  }

  async function select(id: string | null): Promise<void> {
    current = id;
    if (id) history.replaceState(null, '', `/#${id}`);
    draw();
    app.classList.remove('k-side-open');
    toggle.setAttribute('aria-expanded', 'false');
    await chat.open(id);
  }

  let creating: Promise<any> | null = null;
  /** A new session, opened; the one being made when there is one already. */
  function create(): Promise<any> {
    creating ??= (async () => {
      newBtn.disabled = true;
      status.textContent = 'Starting a session (a kernel and the agent)…';
      try {
        const m = await api.json<any>('POST', '/api/agent/sessions', {});
        status.textContent = '';
        await load();
        if (m) await select(m.id);
        return m;
      } catch (e) { status.textContent = `Cannot create a session: ${(e as Error).message}`; throw e; }
      finally { newBtn.disabled = false; creating = null; }
    })();
    chat.expect(creating); // a file dropped meanwhile is for this session
    return creating;
  }

  async function remove(id: string): Promise<void> {
    try { await api.request('DELETE', `/api/agent/sessions/${encodeURIComponent(id)}`); } catch (e) { status.textContent = `Cannot delete: ${(e as Error).message}`; }
    if (current === id) await select(null);
    await load();
  }

  newBtn.addEventListener('click', () => void create().catch(() => { /* said in the status line */ }));
  toggle.addEventListener('click', () => {
    const open = app.classList.toggle('k-side-open');
    toggle.setAttribute('aria-expanded', String(open));
  });
  // sessions made elsewhere (the API, another tab) show up
  setInterval(() => { if (!document.hidden) void load(); }, 3000);
  void load().then(async () => {
    const want = location.hash.slice(1);
    if (want && sessions.some((s) => s.id === want)) await select(want);
    else if (sessions.length) await select(sessions[0].id);
    performance.mark('korch-ready');
    document.body.dataset.ready = '1';
  });
  (window as any).__korch = { stats };
}

if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start);
else start();
