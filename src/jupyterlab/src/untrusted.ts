// Once code from the agent has run in a notebook's kernel, that notebook's
// outputs are rendered untrusted (JupyterLab's sanitizer: no <script>, no
// handlers, no JavaScript output) and its toolbar says so, until the kernel
// restarts. korch serve neutralises such a kernel's outputs itself (the
// relay, with or without this extension); this is the second line, and the
// person sees why their outputs look plainer.
//
// How it knows: korch sends an IOPub message of its own, msg_type
// "korch_untrusted" {untrusted, reason}, when the kernel's taint changes,
// when a client attaches and after each kernel_info_reply of a tainted
// kernel; the agent panel also marks the kernel when it starts a turn. A
// restart (or another kernel) clears it.
//
// Why renderers and not cell.trusted: JupyterLab sets a cell trusted the
// moment the person runs it, before its outputs arrive. Every renderer of
// the notebook's own rendermime registry (a clone per notebook) is wrapped:
// while the notebook is marked, it renders the output's model as untrusted.
import { NotebookPanel } from '@jupyterlab/notebook';
import { IRenderMime, MimeModel } from '@jupyterlab/rendermime';
import { PanelLayout, Widget } from '@lumino/widgets';

const BADGE_TEXT = 'code from the agent ran in this kernel: outputs are shown untrusted';

/** A renderer that hands its inner one an untrusted model while marked() says so. */
class Untrusting extends Widget implements IRenderMime.IRenderer {
  constructor(private inner: IRenderMime.IRenderer, private marked: () => boolean) {
    super();
    const layout = new PanelLayout();
    layout.addWidget(inner);
    this.layout = layout;
    this.addClass('korch-untrusting');
  }

  renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    if (!this.marked() || !model.trusted) return this.inner.renderModel(model);
    return this.inner.renderModel(new MimeModel({ data: model.data, metadata: model.metadata, trusted: false }));
  }
}

/** One notebook's state: marked or not, its badge, its wrapped renderers. */
class Watch {
  private on = false;
  readonly badge = new Widget();

  constructor(private panel: NotebookPanel) {
    this.badge.addClass('korch-untrusted-badge');
    this.badge.node.textContent = BADGE_TEXT;
    this.badge.node.title = 'korch: the agent\'s code has run in this kernel, and could answer your cells. ' +
      'Outputs render without script until the kernel restarts.';
    this.badge.hide();
    panel.toolbar.insertItem(0, 'korch-untrusted', this.badge);
    const rm = panel.content.rendermime;
    for (const mime of rm.mimeTypes) {
      const f = rm.getFactory(mime);
      if (!f) continue;
      rm.addFactory({ safe: f.safe, mimeTypes: [mime], defaultRank: f.defaultRank,
        createRenderer: (o) => new Untrusting(f.createRenderer(o), () => this.on) }, rm.getRank(mime));
    }
    const ctx = panel.sessionContext;
    ctx.iopubMessage.connect((_, msg) => {
      if (msg.header.msg_type === ('korch_untrusted' as any))
        this.set(!!(msg.content as any).untrusted);
    });
    ctx.statusChanged.connect((_, st) => { if (st === 'restarting' || st === 'dead') this.set(false); });
    ctx.kernelChanged.connect(() => this.set(false));
  }

  get marked(): boolean { return this.on; }

  set(on: boolean): void {
    if (on === this.on) return;
    this.on = on;
    this.badge.setHidden(!on);
    this.panel.node.classList.toggle('korch-untrusted', on);
    if (on) // what is shown already, again without script
      for (const cell of this.panel.content.widgets)
        if (cell.model.type === 'code') cell.model.trusted = false;
  }
}

const watches = new WeakMap<NotebookPanel, Watch>();

/** Watch a notebook (once). */
export function watchNotebook(panel: NotebookPanel): void {
  if (!watches.has(panel)) watches.set(panel, new Watch(panel));
}

/** The agent is about to run code in this notebook's kernel. */
export function markUntrusted(panel: NotebookPanel | null): void {
  if (!panel) return;
  watchNotebook(panel);
  watches.get(panel)!.set(true);
}
