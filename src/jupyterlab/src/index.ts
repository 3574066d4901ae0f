// korch's agent in a JupyterLab 4 side panel ("korch agent"), bound to the
// active notebook's kernel: the agent runs in that kernel (kernel_id in POST
// /api/agent/sessions), so it sees what the user computed.
//
// The panel is korch's own chat component (src/web, bundled into ../chat by
// `node ../web/build.mjs --lib chat`): the narration and answer (markdown
// through DOMPurify), code as it is written, the status line, files, the
// turn's tokens, Stop, Verify (the session's clean notebook re-run in a fresh
// kernel: the result under the answer) and the history rebuilt from the
// session's transcript after a reload. What differs from korch's page are its options: the code
// steps go to the notebook (CellSink below) as new cells below the active
// one, marked in their metadata {"korch": {"agent": true, "session", "turn",
// "step", "call"}}, their outputs rendered by JupyterLab itself; the session is made
// on the first question, for this kernel.
//
// All calls go to this Jupyter server's /api/agent/... (ServerConnection:
// Jupyter's token and XSRF cookie), which the korch_jupyterlab server
// extension proxies to the gateway: the browser never holds korch's token.
import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { ICodeCellModel } from '@jupyterlab/cells';
import { ServerConnection } from '@jupyterlab/services';
import { Widget } from '@lumino/widgets';
import { mountChat, ChatHandle, CellSink } from '../chat';
import { markUntrusted, watchNotebook } from './untrusted';

/** kernel_id -> agent session id, so a reload shows the same session's history */
const STORE = 'korch-agent:sessions';

interface Marked { agent?: boolean; session?: string; turn?: number; step?: number; call?: number }

function sessionsOf(): Record<string, string> {
  try { return JSON.parse(localStorage.getItem(STORE) || '{}') || {}; } catch { return {}; }
}

function remember(kernelId: string, sessionId: string): void {
  const m = sessionsOf();
  m[kernelId] = sessionId;
  localStorage.setItem(STORE, JSON.stringify(m));
}

/** The agent's code steps as cells of the notebook: the first of a turn below
 *  the active cell, each next one below the previous; found again by its
 *  metadata (a turn followed again after a reload does not add them twice). */
class NotebookCells implements CellSink {
  private last: any = null;  // the cell model inserted last in this turn
  private n = 0;             // the session's turn (its steps count from 1 again)

  constructor(private panel: () => NotebookPanel | null, private session: () => string | null) {}

  /** the session's n-th turn starts: its first cell goes below the active one */
  turn(n: number): void { this.last = null; this.n = n; }

  private index(turn: number, step: number, call: number): number {
    const nb = this.panel()?.content;
    const sid = this.session();
    if (!nb || !nb.model) return -1;
    return nb.widgets.findIndex((w) => {
      const k = w.model.getMetadata('korch') as Marked | undefined;
      return !!k && !!k.agent && k.session === sid && k.turn === turn && k.step === step && (k.call ?? 0) === call;
    });
  }

  private find(step: number, call: number): any {
    const i = this.index(this.n, step, call);
    return i >= 0 ? this.panel()!.content.widgets[i].model : null;
  }

  /** the chat's "Output: in the notebook cell": that cell made active and scrolled to */
  reveal(turn: number, step: number, call: number): boolean {
    const i = this.index(turn, step, call);
    const nb = this.panel()?.content;
    if (!nb || i < 0) return false;
    nb.activeCellIndex = i;
    void nb.scrollToCell(nb.widgets[i], 'center');
    return true;
  }

  code(step: number, call: number, code: string): void {
    const nb = this.panel()?.content;
    if (!nb || !nb.model) return;
    let m = this.find(step, call);
    if (m) { // followed again: the same cell, its outputs again from the start
      m.sharedModel.setSource(code);
      (m as ICodeCellModel).outputs.clear();
      this.last = m;
      return;
    }
    const models = Array.from(nb.widgets, (w) => w.model);
    const after = this.last ? models.indexOf(this.last) : -1;
    const at = after >= 0 ? after + 1 : Math.min(nb.activeCellIndex + 1, models.length);
    nb.model.sharedModel.insertCell(at, {
      cell_type: 'code', source: code, outputs: [], execution_count: null,
      metadata: { korch: { agent: true, session: this.session(), turn: this.n, step, call } },
    });
    this.last = nb.widgets[at]?.model ?? null;
  }

  output(step: number, call: number, index: number, append: boolean, out: any): void {
    const m = this.find(step, call) as ICodeCellModel | null;
    if (!m || !m.outputs) return;
    const o = m.outputs;
    // a stream's next text: JupyterLab merges consecutive streams of one name
    if (append || index >= o.length) o.add(out);
    else o.set(index, out);
  }

  result(step: number, call: number, r: any): void {
    const m = this.find(step, call) as ICodeCellModel | null;
    if (m && typeof r.execution_count === 'number') m.executionCount = r.execution_count;
  }
}

class AgentPanel extends Widget {
  private status = document.createElement('p');
  private chat: ChatHandle;
  private cells: NotebookCells;
  private bound: string | null | undefined = undefined;  // the kernel id shown
  // The notebook whose session the chat shows: the agent's cells go there, not
  // to whichever notebook is active (a turn's events may still arrive after
  // the user switched to another notebook, until the chat opens that one's session).
  private target: NotebookPanel | null = null;
  private watched = new WeakSet<NotebookPanel>();

  constructor(private tracker: INotebookTracker) {
    super();
    this.id = 'korch-agent';
    this.title.label = 'korch agent';
    this.title.caption = 'korch agent: ask about the notebook, in its kernel';
    this.addClass('korch-agent');
    this.status.className = 'korch-agent-status';
    this.status.setAttribute('role', 'status');
    const host = document.createElement('div');
    this.node.append(this.status, host);
    const settings = ServerConnection.makeSettings();
    this.cells = new NotebookCells(() => this.target, () => this.chat.sessionId);
    this.chat = mountChat(host, {
      baseUrl: settings.baseUrl,
      fetch: ((input: RequestInfo | URL, init?: RequestInit) =>
        ServerConnection.makeRequest(String(input), init ?? {}, settings)) as typeof fetch,
      files: false,
      // no notebook downloads (the notebook is open here), no branches (a branch runs in a kernel
      // of its own, not this notebook's), but Verify: the agent's cells re-run in a fresh kernel
      notebookButton: false,
      verifyButton: true,
      cells: this.cells,
      onTurn: (_q, n) => { markUntrusted(this.target); this.cells.turn(n); },
      title: () => 'korch agent',
      createSession: () => this.createSession(),
    });
    tracker.currentChanged.connect(() => this.follow());
    this.follow();
  }

  private notebook(): NotebookPanel | null { return this.tracker.currentWidget; }

  private kernelId(): string | null {
    const k = this.notebook()?.sessionContext.session?.kernel;
    return k ? k.id : null;
  }

  /** bound to the active notebook's kernel: again when it changes or its kernel does */
  private follow(): void {
    const nb = this.notebook();
    if (nb && !this.watched.has(nb)) {
      this.watched.add(nb);
      nb.sessionContext.kernelChanged.connect(() => { if (this.notebook() === nb) void this.bind(); });
      void nb.sessionContext.ready.then(() => { if (this.notebook() === nb) void this.bind(); });
    }
    void this.bind();
  }

  private say(text: string, bad = false): void {
    this.status.textContent = text;
    this.status.classList.toggle('korch-agent-bad', bad);
  }

  /** Show the session of the active notebook's kernel (its history after a reload). */
  private async bind(): Promise<void> {
    const kid = this.kernelId();
    if (kid === this.bound) return;
    this.bound = kid;
    const nb = this.notebook();
    if (!kid || !nb) {
      this.say('Open a notebook with a running kernel: the agent works in it.');
      this.chat.block(true);
      this.target = null;
      await this.chat.open(null);
      return;
    }
    this.say(`${nb.context.path} · kernel ${kid.slice(0, 8)}`);
    let sessions: any[] = [];
    try {
      sessions = (await this.chat.api.json<any[]>('GET', '/api/agent/sessions')) ?? [];
    } catch (e) {
      if (this.bound === kid) {  // e.g. no gateway: what to configure
        this.say((e as Error).message, true);
        this.chat.block(true);
        this.bound = undefined;  // asked again when the panel binds next
      }
      return;
    }
    if (this.bound !== kid) return;
    this.chat.block(false);
    const want = sessionsOf()[kid];
    const s = sessions.find((x) => x.id === want) ?? sessions.find((x) => x.kernel_id === kid);
    this.target = nb;  // open() first stops following the previous notebook's turn
    await this.chat.open(s ? s.id : null);
  }

  private async createSession(): Promise<any> {
    const k = this.target?.sessionContext.session?.kernel;  // the notebook the chat shows
    const kid = k && k.id === this.bound ? k.id : null;
    if (!kid) throw new Error('open a notebook with a running kernel first');
    const m = await this.chat.api.json<any>('POST', '/api/agent/sessions', { kernel_id: kid });
    if (m) remember(kid, m.id);
    return m;
  }
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'korch-jupyterlab:panel',
  description: "korch's agent in a side panel, working in the active notebook's kernel",
  autoStart: true,
  requires: [INotebookTracker],
  activate: (app: JupyterFrontEnd, tracker: INotebookTracker) => {
    // every notebook: its outputs untrusted once the agent's code runs in its kernel (untrusted.ts)
    tracker.widgetAdded.connect((_, panel) => watchNotebook(panel));
    tracker.forEach((panel) => watchNotebook(panel));
    app.shell.add(new AgentPanel(tracker), 'right', { rank: 900 });
  },
};

export default plugin;
