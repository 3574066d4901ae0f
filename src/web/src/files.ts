// The files beside the chat: the session's work dir listed, uploads that
// never lose a file, a preview (a CSV's head as a table, an image, a text's
// start) and delete.
//
// A file given before a session exists, or while one is being made ("New
// session" clicked, the kernel starting), is held and shown as waiting; it
// goes up once the session is there (the panel asks its host for one:
// needSession). A session that is still starting answers a PUT with 409:
// the upload waits and tries again. Uploads run a few at a time, each with
// its progress bar (XMLHttpRequest's upload events).
import { Api, ApiError } from './api';
import { el } from './turn';
import { safeSvgUrl } from './render';

export interface FilesHooks {
  /** the open session's id, made (or waited for) when there is none; null: none can be */
  needSession: () => Promise<string | null>;
  /** a message for the user (the chat's log) */
  notice: (text: string) => void;
  download: (url: string, name: string) => void;
}

export interface FileEntry { path: string; size?: number; change?: string }

const PARALLEL = 3;
const RETRY_MS = 500;
const RETRY_FOR_MS = 120000;
const PREVIEW_ROWS = 20;
const PREVIEW_BYTES = 1 << 20;

const sessionPath = (id: string) => `/api/agent/sessions/${encodeURIComponent(id)}`;
const encPath = (p: string) => p.split('/').map(encodeURIComponent).join('/');

export function fmtSize(n: number): string {
  return n < 1024 ? `${n} B` : n < 1 << 20 ? `${(n / 1024).toFixed(1)} KiB` : `${(n / (1 << 20)).toFixed(1)} MiB`;
}

/** RFC 4180 rows of text (quotes, doubled quotes, CRLF), at most max rows. */
export function csvRows(text: string, sep: string, max: number): string[][] {
  const rows: string[][] = [];
  let row: string[] = [], cell = '', q = false;
  for (let i = 0; i < text.length && rows.length < max; i++) {
    const c = text[i];
    if (q) {
      if (c === '"' && text[i + 1] === '"') { cell += '"'; i++; } else if (c === '"') q = false; else cell += c;
    } else if (c === '"' && cell === '') q = true;
    else if (c === sep) { row.push(cell); cell = ''; }
    else if (c === '\n' || c === '\r') {
      if (c === '\r' && text[i + 1] === '\n') i++;
      row.push(cell); rows.push(row); row = []; cell = '';
    } else cell += c;
  }
  if ((cell !== '' || row.length) && rows.length < max) { row.push(cell); rows.push(row); }
  return rows;
}

interface Item { file: File; li: HTMLLIElement; bar: HTMLProgressElement; label: HTMLSpanElement; sid: string | null }

export class FilesPanel {
  readonly root: HTMLElement;
  readonly pick: HTMLInputElement;
  private readonly list: HTMLUListElement;
  private readonly uploads: HTMLUListElement;
  private readonly preview: HTMLElement;
  private readonly known = new Map<string, FileEntry>();
  private readonly queue: Item[] = [];
  private running = 0;
  private sid: string | null = null;
  // listings asked for (a number each) and the newest one shown: an older answer arriving late is dropped
  private loads = 0;
  private shown = 0;
  // uploads finished while a listing was on its way (name → the newest listing asked then): kept over it
  private readonly fresh = new Map<string, number>();
  private armed: string | null = null;
  private previewUrl = '';

  constructor(private readonly api: Api, private readonly hooks: FilesHooks) {
    this.root = el('section', 'k-files');
    this.root.setAttribute('aria-label', 'Files');
    const head = el('div', 'k-files-head');
    const pickLabel = el('label', 'k-btn', 'Upload files');
    this.pick = el('input') as HTMLInputElement;
    this.pick.type = 'file';
    this.pick.multiple = true;
    this.pick.className = 'k-visually-hidden';
    this.pick.setAttribute('aria-label', 'Upload files into the work dir');
    pickLabel.appendChild(this.pick);
    head.append(el('h3', 'k-files-title', 'Files'), pickLabel);
    const drop = el('div', 'k-drop', 'Drop files here');
    this.uploads = el('ul', 'k-uploads');
    this.uploads.setAttribute('aria-label', 'Uploads');
    this.list = el('ul', 'k-file-list');
    this.list.setAttribute('aria-label', 'Files in the work dir');
    this.preview = el('div', 'k-preview');
    this.preview.hidden = true;
    this.preview.setAttribute('aria-label', 'Preview');
    this.root.append(head, drop, this.uploads, this.list, this.preview);
    this.pick.addEventListener('change', () => {
      if (this.pick.files?.length) this.add(this.pick.files);
      this.pick.value = '';
    });
    this.render();
  }

  /** The session shown changed: its files are listed; held files go to it. */
  setSession(id: string | null): void {
    if (id === this.sid) return;
    this.sid = id;
    this.known.clear();
    this.fresh.clear();
    this.closePreview();
    // an upload bound to another session goes on there; held ones (no session yet) wait for this one
    for (const it of this.queue) if (!it.sid && id) this.wait(it, false);
    this.render();
    if (id) { void this.load(); this.pump(); }
  }

  /** Files given (picked, dropped): each shown at once, held until there is a session. */
  add(fl: FileList | File[]): void {
    const files = Array.from(fl);
    if (!files.length) return;
    for (const f of files) {
      const li = el('li', 'k-upload');
      const label = el('span', 'k-upload-name', `${f.name} `);
      const bar = el('progress') as HTMLProgressElement;
      bar.max = Math.max(1, f.size);
      bar.value = 0;
      bar.setAttribute('aria-label', `Uploading ${f.name}`);
      li.append(label, bar);
      this.uploads.appendChild(li);
      const it: Item = { file: f, li, bar, label, sid: this.sid };
      this.wait(it, !this.sid);
      this.queue.push(it);
    }
    if (this.sid) { this.pump(); return; }
    // no session: the host makes one (or the one being made is waited for)
    void this.hooks.needSession().then((id) => {
      if (id) { if (id !== this.sid) this.setSession(id); else this.pump(); return; }
      for (const it of this.queue.filter((q) => !q.sid)) this.fail(it, 'no session to put it in: create one first');
    }, (e) => {
      for (const it of this.queue.filter((q) => !q.sid)) this.fail(it, `no session: ${(e as Error).message}`);
    });
  }

  private wait(it: Item, held: boolean): void {
    it.li.dataset.state = held ? 'held' : 'queued';
    it.label.textContent = held ? `${it.file.name} (waiting for the session) ` : `${it.file.name} `;
  }

  private fail(it: Item, why: string): void {
    const i = this.queue.indexOf(it);
    if (i >= 0) this.queue.splice(i, 1);
    it.li.dataset.state = 'error';
    it.li.classList.add('k-error');
    it.li.setAttribute('role', 'alert');
    it.label.textContent = `${it.file.name}: ${why} `;
    it.bar.remove();
    setTimeout(() => it.li.remove(), 15000);
  }

  private pump(): void {
    while (this.running < PARALLEL) {
      const it = this.queue.find((q) => q.li.dataset.state === 'queued' || (q.li.dataset.state === 'held' && this.sid));
      if (!it) return;
      it.sid ??= this.sid;
      this.running++;
      void this.send(it).finally(() => { this.running--; this.pump(); });
    }
  }

  private async send(it: Item): Promise<void> {
    const sid = it.sid!;
    it.li.dataset.state = 'uploading';
    it.label.textContent = `${it.file.name} `;
    const t0 = Date.now();
    for (;;) {
      try {
        await this.api.upload(`${sessionPath(sid)}/files/${encodeURIComponent(it.file.name)}`, it.file, (sent, total) => {
          it.bar.max = Math.max(1, total);
          it.bar.value = sent;
        });
        break;
      } catch (e) {
        // a session still starting: the file waits for its kernel
        if (e instanceof ApiError && e.status === 409 && /starting/.test(e.message) && Date.now() - t0 < RETRY_FOR_MS) {
          it.label.textContent = `${it.file.name} (waiting for the kernel) `;
          await new Promise((r) => setTimeout(r, RETRY_MS));
          continue;
        }
        this.fail(it, (e as Error).message);
        return;
      }
    }
    const i = this.queue.indexOf(it);
    if (i >= 0) this.queue.splice(i, 1);
    it.li.remove();
    if (sid === this.sid) {
      this.known.set(it.file.name, { path: it.file.name, size: it.file.size });
      this.fresh.set(it.file.name, this.loads);
      this.render();
      void this.load(); // the server's word on it (its size, a name it changed)
    }
  }

  /** The listing from the server. Answers can come back out of order (a GET
   *  sent before an upload may be answered after it): an answer older than
   *  the one shown is dropped, and a file uploaded after the GET was sent is
   *  kept over an answer that cannot know it yet. */
  async load(): Promise<void> {
    const sid = this.sid;
    if (!sid) return;
    const seq = ++this.loads;
    try {
      const fs = (await this.api.json<any[]>('GET', `${sessionPath(sid)}/files`)) ?? [];
      if (sid !== this.sid || seq < this.shown) return;
      this.shown = seq;
      const keep = new Map<string, FileEntry>();
      for (const [name, asked] of this.fresh) {
        if (asked >= seq && this.known.has(name)) keep.set(name, this.known.get(name)!);
        else this.fresh.delete(name);
      }
      this.known.clear();
      for (const f of fs) {
        const path = typeof f === 'string' ? f : f?.path ?? f?.name;
        if (path) this.known.set(path, typeof f === 'string' ? { path } : { ...f, path });
      }
      for (const [name, f] of keep) if (!this.known.has(name)) this.known.set(name, f);
      this.render();
    } catch { /* listed next time */ }
  }

  /** What a step's files event said changed. */
  changed(fs: FileEntry[]): void {
    for (const f of fs) { if (f.change === 'deleted') this.known.delete(f.path); else this.known.set(f.path, f); }
    this.render();
  }

  private fileUrl(name: string): string { return `${sessionPath(this.sid!)}/files/${encPath(name)}`; }

  private render(): void {
    this.list.replaceChildren();
    const names = [...this.known.keys()].sort();
    if (!names.length) this.list.appendChild(el('li', 'k-muted', this.sid ? 'No files yet.' : 'Drop files here: a session is made for them.'));
    for (const name of names) {
      const f = this.known.get(name);
      const li = el('li', 'k-file');
      const b = el('button', 'k-link', name);
      b.type = 'button';
      b.setAttribute('aria-label', `Preview ${name}`);
      b.addEventListener('click', () => void this.show(name));
      const dl = el('button', 'k-btn k-small k-icon', '⬇');
      dl.type = 'button';
      dl.title = `Download ${name}`;
      dl.setAttribute('aria-label', `Download ${name}`);
      dl.addEventListener('click', () => this.hooks.download(this.fileUrl(name), name.split('/').pop() || name));
      const del = el('button', 'k-btn k-small k-icon k-del', '✕');
      del.type = 'button';
      const ask = () => { del.textContent = 'Delete?'; del.setAttribute('aria-label', `Really delete ${name}? Press again`); };
      del.setAttribute('aria-label', `Delete ${name}`);
      if (this.armed === name) ask();
      del.addEventListener('click', () => {
        if (this.armed === name) { this.armed = null; void this.remove(name); return; }
        this.armed = name;
        ask();
        setTimeout(() => { if (this.armed === name) { this.armed = null; this.render(); } }, 5000);
      });
      li.append(b);
      if (typeof f?.size === 'number') li.appendChild(el('span', 'k-muted k-size', ` ${fmtSize(f.size)}`));
      li.append(dl, del);
      this.list.appendChild(li);
    }
  }

  private async remove(name: string): Promise<void> {
    if (!this.sid) return;
    try {
      await this.api.request('DELETE', this.fileUrl(name));
      this.known.delete(name);
      if (this.preview.dataset.name === name) this.closePreview();
    } catch (e) {
      // already gone is gone
      if (e instanceof ApiError && e.status === 404) this.known.delete(name);
      else this.hooks.notice(`cannot delete ${name}: ${(e as Error).message}`);
    }
    this.render();
  }

  private closePreview(): void {
    if (this.previewUrl) URL.revokeObjectURL(this.previewUrl);
    this.previewUrl = '';
    this.preview.hidden = true;
    this.preview.replaceChildren();
    delete this.preview.dataset.name;
  }

  /** A preview of name: a CSV's or TSV's head as a table, an image, a text's start. */
  private async show(name: string): Promise<void> {
    this.closePreview();
    const head = el('div', 'k-preview-head');
    const close = el('button', 'k-btn k-small', 'Close');
    close.type = 'button';
    close.setAttribute('aria-label', 'Close the preview');
    close.addEventListener('click', () => this.closePreview());
    head.append(el('strong', 'k-preview-name', name), close);
    const body = el('div', 'k-preview-body', 'Loading…');
    this.preview.append(head, body);
    this.preview.dataset.name = name;
    this.preview.hidden = false;
    const low = name.toLowerCase();
    let blob: Blob;
    try { blob = await this.api.blob(this.fileUrl(name)); } catch (e) { body.textContent = `cannot read ${name}: ${(e as Error).message}`; return; }
    if (this.preview.dataset.name !== name) return;
    body.replaceChildren();
    if (/\.(csv|tsv)$/.test(low)) {
      const text = await blob.slice(0, PREVIEW_BYTES).text();
      const rows = csvRows(text, low.endsWith('.tsv') ? '\t' : ',', PREVIEW_ROWS + 1);
      const table = el('table', 'k-preview-table');
      const thead = el('thead'), tbody = el('tbody');
      rows.forEach((r, i) => {
        const tr = el('tr');
        for (const c of r) tr.appendChild(el(i === 0 ? 'th' : 'td', '', c));
        (i === 0 ? thead : tbody).appendChild(tr);
      });
      table.append(thead, tbody);
      const n = Math.max(0, rows.length - 1);
      body.append(table, el('p', 'k-muted', `the first ${n} row${n === 1 ? '' : 's'} · ${fmtSize(blob.size)}`));
    } else if (/\.(png|jpe?g|gif|webp|svg)$/.test(low)) {
      // an <img>: a raster image from a blob: URL; an SVG from a data: URL of it
      // sanitized, never a blob: URL (opened in a tab of its own, that would be a
      // document of korch's origin running the SVG's script: issue 21)
      const img = el('img', 'k-preview-img') as HTMLImageElement;
      if (low.endsWith('.svg') || blob.type === 'image/svg+xml') {
        const src = safeSvgUrl(await blob.slice(0, PREVIEW_BYTES * 8).text());
        if (!src) { body.appendChild(el('p', 'k-muted', 'not an SVG image: download it')); return; }
        img.src = src;
      } else {
        this.previewUrl = URL.createObjectURL(blob.type ? blob : new Blob([blob], { type: 'image/png' }));
        img.src = this.previewUrl;
      }
      img.alt = name;
      body.appendChild(img);
    } else if (/\.(txt|md|json|py|r|log|ya?ml|xml|html?)$/.test(low) || blob.type.startsWith('text/')) {
      const pre = el('pre', 'k-preview-text');
      pre.textContent = await blob.slice(0, 8192).text();
      body.appendChild(pre);
    } else body.appendChild(el('p', 'k-muted', `no preview for this kind of file (${fmtSize(blob.size)}): download it`));
  }
}
