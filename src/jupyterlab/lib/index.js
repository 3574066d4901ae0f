// korch's agent in a JupyterLab 4 side panel ("korch agent"), bound to the
// active notebook's kernel: the agent runs in that kernel (kernel_id in POST
// /api/agent/sessions), so it sees what the user computed. The model's
// narration and answer stream into the panel; each code step becomes a new
// cell below the active one, with its outputs, marked in its metadata as the
// agent's ({"korch": {"agent": true, "session", "step"}}). Stop interrupts.
// All calls go to this Jupyter server's /api/agent/..., which the
// korch_jupyterlab server extension proxies to the gateway: the browser never
// holds korch's token. Plain JavaScript (CommonJS) bundled by @jupyterlab/builder.
'use strict';
const { INotebookTracker } = require('@jupyterlab/notebook');
const { ServerConnection } = require('@jupyterlab/services');
const { URLExt } = require('@jupyterlab/coreutils');
const { Widget } = require('@lumino/widgets');

const STORE = 'korch-agent:sessions'; // kernel_id -> agent session id (a reload keeps the history)

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text != null) e.textContent = text;
  return e;
}

async function call(method, path, body) {
  const settings = ServerConnection.makeSettings();
  const url = URLExt.join(settings.baseUrl, 'api/agent', path);
  const init = { method };
  if (body !== undefined) { init.body = JSON.stringify(body); init.headers = { 'Content-Type': 'application/json' }; }
  return ServerConnection.makeRequest(url, init, settings);
}

async function messageOf(r) {
  try { const j = await r.json(); return j.message || `${r.status}`; } catch (e) { return `${r.status} ${r.statusText}`; }
}

// Server-sent events of a fetch Response, as they arrive: onEvent(name, data).
async function readEvents(resp, onEvent) {
  const reader = resp.body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let cut;
    while ((cut = buf.indexOf('\n\n')) >= 0) {
      const block = buf.slice(0, cut);
      buf = buf.slice(cut + 2);
      let ev = 'message';
      const data = [];
      for (const line of block.split('\n')) {
        if (line.startsWith('event:')) ev = line.slice(6).trim();
        else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
      }
      if (data.length) onEvent(ev, JSON.parse(data.join('\n')));
    }
  }
}

class AgentPanel extends Widget {
  constructor(tracker) {
    super();
    this.tracker = tracker;
    this.id = 'korch-agent';
    this.title.label = 'korch agent';
    this.title.caption = 'korch agent: ask about the notebook, in its kernel';
    this.addClass('korch-agent');
    this.head = el('div', 'korch-agent-head', 'No notebook');
    this.log = el('div', 'korch-agent-log');
    this.log.setAttribute('role', 'log');
    const form = el('form', 'korch-agent-form');
    this.input = el('textarea', 'korch-agent-input');
    this.input.rows = 2;
    this.input.placeholder = 'Ask about your data…';
    this.input.setAttribute('aria-label', 'Message to the agent');
    this.askBtn = el('button', 'jp-mod-styled jp-mod-accept korch-agent-ask', 'Ask');
    this.askBtn.type = 'submit';
    this.stopBtn = el('button', 'jp-mod-styled korch-agent-stop', 'Stop');
    this.stopBtn.type = 'button';
    this.stopBtn.disabled = true;
    form.append(this.input, this.askBtn, this.stopBtn);
    this.node.append(this.head, this.log, form);
    form.addEventListener('submit', e => { e.preventDefault(); this.ask(this.input.value.trim()); });
    this.input.addEventListener('keydown', e => {
      if (e.key === 'Enter' && !e.shiftKey) { e.preventDefault(); this.ask(this.input.value.trim()); }
    });
    this.stopBtn.addEventListener('click', () => this.stop());
    this.session = null;
    this.running = false;
    // bound to the active notebook's kernel: again when it changes or its kernel does
    this.watched = null;
    const follow = () => {
      const nb = tracker.currentWidget;
      if (nb && nb !== this.watched) {
        this.watched = nb;
        nb.sessionContext.kernelChanged.connect(() => { if (tracker.currentWidget === nb) this.bind(); });
        nb.sessionContext.ready.then(() => { if (tracker.currentWidget === nb) this.bind(); });
      }
      this.bind();
    };
    tracker.currentChanged.connect(follow);
    follow();
  }

  kernel() {
    const nb = this.tracker.currentWidget;
    const s = nb && nb.sessionContext.session;
    return s && s.kernel ? { nb, id: s.kernel.id } : null;
  }

  say(text, cls) {
    const m = el('div', 'korch-agent-msg' + (cls ? ' ' + cls : ''), text);
    this.log.appendChild(m);
    this.log.scrollTop = this.log.scrollHeight;
    return m;
  }

  // Show the session of the active notebook's kernel (its history after a reload).
  async bind() {
    const k = this.kernel();
    if (k && this.boundTo === k.id) return;
    this.boundTo = k ? k.id : null;
    this.log.textContent = '';
    this.session = null;
    if (!k) { this.head.textContent = 'Open a notebook with a running kernel'; return; }
    const map = JSON.parse(localStorage.getItem(STORE) || '{}');
    const r = await call('GET', 'sessions');
    if (!r.ok) { this.head.textContent = await messageOf(r); this.say(this.head.textContent, 'korch-agent-note'); return; }
    if (map[k.id]) {
      const g = await call('GET', map[k.id]);
      if (g.ok) {
        this.session = await g.json();
        for (const rec of this.session.transcript || []) {
          if (rec.type === 'user' && rec.content) this.say(rec.content, 'korch-agent-user');
          else if (rec.type === 'final' && rec.content) this.say(rec.content, 'korch-agent-answer');
        }
      }
    }
    this.header();
  }

  header(tokens) {
    const s = this.session;
    this.head.textContent = s ? `${s.llm} · kernel ${s.kernel_id.slice(0, 8)}` + (tokens ? ` · ${tokens}` : '')
      : 'korch agent: ask a question';
  }

  async ensureSession(k) {
    if (this.session && this.session.kernel_id === k.id) return this.session;
    const r = await call('POST', 'sessions', { kernel_id: k.id });
    if (!r.ok) throw new Error(await messageOf(r));
    this.session = await r.json();
    const map = JSON.parse(localStorage.getItem(STORE) || '{}');
    map[k.id] = 'sessions/' + this.session.id;
    localStorage.setItem(STORE, JSON.stringify(map));
    return this.session;
  }

  // A new code cell below the active one (then below the agent's last one).
  insertCell(nb, code, step) {
    const notebook = nb.content;
    const at = this.insertAt != null ? this.insertAt : notebook.activeCellIndex + 1;
    notebook.model.sharedModel.insertCell(at, {
      cell_type: 'code', source: code,
      metadata: { korch: { agent: true, session: this.session.id, step } }
    });
    this.insertAt = at + 1;
    return notebook.widgets[at];
  }

  async ask(text) {
    if (!text || this.running) return;
    const k = this.kernel();
    if (!k) { this.say('Open a notebook with a running kernel first.', 'korch-agent-note'); return; }
    this.input.value = '';
    this.say(text, 'korch-agent-user');
    this.running = true;
    this.askBtn.disabled = true;
    this.stopBtn.disabled = false;
    this.insertAt = null;
    let cell = null, narration = null;
    try {
      const s = await this.ensureSession(k);
      this.header();
      const r = await call('POST', `sessions/${s.id}/messages`, { content: text });
      if (!r.ok) throw new Error(await messageOf(r));
      await readEvents(r, (ev, d) => {
        if (ev === 'step') narration = null;
        else if (ev === 'text') {
          if (!narration) narration = this.say('');
          narration.textContent += d.text;
          this.log.scrollTop = this.log.scrollHeight;
        } else if (ev === 'code') cell = this.insertCell(k.nb, d.code, d.step);
        else if (ev === 'output' && cell) {
          const o = d.output;
          if (o.output_type === 'stream') cell.model.outputs.add({ output_type: 'stream', name: o.name, text: o.text });
          else cell.model.outputs.add(o);
        } else if (ev === 'result' && cell && d.execution_count != null) cell.model.executionCount = d.execution_count;
        else if (ev === 'final') {
          // the answer usually streamed as the step's text already: mark it, don't repeat it
          const answer = d.text || d.content || '';
          if (narration && narration.textContent.trim() === answer.trim()) narration.classList.add('korch-agent-answer');
          else this.say(answer, 'korch-agent-answer');
        } else if (ev === 'error') this.say(d.message || JSON.stringify(d), 'korch-agent-note');
        else if (ev === 'done') {
          const t = d.tokens && d.tokens.turn;
          this.header(t ? `${t.input} in / ${t.output} out tokens this turn` : '');
          if (d.status !== 'ok') this.say(`(${d.status})`, 'korch-agent-note');
        }
      });
    } catch (e) {
      this.say(e.message, 'korch-agent-note');
    } finally {
      this.running = false;
      this.askBtn.disabled = false;
      this.stopBtn.disabled = true;
    }
  }

  async stop() {
    if (this.session) await call('POST', `sessions/${this.session.id}/interrupt`);
  }
}

module.exports = [{
  id: 'korch-jupyterlab:panel',
  autoStart: true,
  requires: [INotebookTracker],
  activate: (app, tracker) => {
    const panel = new AgentPanel(tracker);
    app.shell.add(panel, 'right', { rank: 900 });
  }
}];
