// The agent API of korch serve, as the page uses it: JSON calls, a turn's
// server-sent events read from a fetch body (so the token goes in a header,
// never in a URL), uploads with progress, downloads as blobs.
//
// It is also korch's TypeScript client on its own, in a browser or in Node
// 18+ (global fetch; nothing here needs a DOM but upload progress and
// saveBlob): `node src/web/build.mjs --client OUT` writes it as an ES module
// with its types (OUT/api.js, OUT/api.d.ts); docs/python.md shows it next to
// the Python client, src/web/examples/ask.mjs uses it.

export interface ApiOptions {
  /** where korch serve is ("" = this page's origin) */
  baseUrl?: string;
  /** korch's token, sent as "Authorization: token ..." */
  token?: string;
  /** a fetch of the host's (a JupyterLab extension passes one that adds its auth); uploads then have no progress */
  fetch?: typeof fetch;
  /** the longest server-sent event accepted, in characters (default 64 Mi: an output event holds its images) */
  maxEventChars?: number;
}

/** An agent session as korch serve answers it (GET/POST /api/agent/sessions). */
export interface AgentSession {
  id: string;
  kernel_id: string | null;
  state: string;
  llm?: string;
  [key: string]: unknown;
}

/** A file of a session's work dir (GET .../files). */
export interface SessionFile {
  path: string;
  name: string;
  size: number;
  mime: string;
  url: string;
  uploaded?: boolean;
  [key: string]: unknown;
}

/** A file to put into a new session: text, or base64 with format 'base64'. */
export interface NewFile {
  name: string;
  content: string;
  format?: 'text' | 'base64';
}

export interface SseEvent {
  id: number | null;
  event: string;
  data: any;
  /** performance.now() when the event's last line arrived */
  at: number;
}

export class ApiError extends Error {
  constructor(public status: number, message: string) { super(message); this.name = 'ApiError'; }
}

const sessionPath = (id: string) => `/api/agent/sessions/${encodeURIComponent(id)}`;
const filePath = (path: string) => path.split('/').map(encodeURIComponent).join('/');

async function messageOf(r: Response): Promise<string> {
  try {
    const j = await r.json();
    if (j && typeof j.message === 'string') return j.message;
  } catch { /* not JSON */ }
  return `${r.status} ${r.statusText}`;
}

export class Api {
  readonly base: string;
  readonly token: string;
  private readonly f: typeof fetch;
  private readonly customFetch: boolean;
  private readonly maxEventChars: number;

  constructor(o: ApiOptions = {}) {
    this.base = (o.baseUrl ?? '').replace(/\/+$/, '');
    this.token = o.token ?? '';
    // no XMLHttpRequest (Node): uploads go through fetch, without progress
    this.customFetch = !!o.fetch || typeof XMLHttpRequest === 'undefined';
    this.f = o.fetch ?? globalThis.fetch.bind(globalThis);
    this.maxEventChars = o.maxEventChars ?? 64 * 1024 * 1024;
  }

  url(path: string): string { return this.base + path; }

  private headers(extra: Record<string, string> = {}): Record<string, string> {
    const h: Record<string, string> = { ...extra };
    if (this.token) h['Authorization'] = 'token ' + this.token;
    return h;
  }

  async request(method: string, path: string, body?: unknown, signal?: AbortSignal): Promise<Response> {
    const init: RequestInit = { method, headers: this.headers(body !== undefined ? { 'Content-Type': 'application/json' } : {}), signal };
    if (body !== undefined) init.body = JSON.stringify(body);
    const r = await this.f(this.url(path), init);
    if (!r.ok) throw new ApiError(r.status, await messageOf(r));
    return r;
  }

  async json<T = any>(method: string, path: string, body?: unknown): Promise<T | null> {
    const r = await this.request(method, path, body);
    if (r.status === 204) return null;
    return (await r.json()) as T;
  }

  async blob(path: string): Promise<Blob> {
    return (await this.request('GET', path)).blob();
  }

  /** A stream of server-sent events; resolves when it ends. 204 (nothing to follow) resolves false. */
  async events(method: string, path: string, body: unknown, onEvent: (e: SseEvent) => void,
    signal?: AbortSignal): Promise<boolean> {
    const r = await this.request(method, path, body, signal);
    if (r.status === 204 || !r.body) return false;
    for await (const e of this.parse(r.body)) onEvent(e);
    return true;
  }

  /** The same stream as an async iterator (for await ... of); empty on 204.
   *  Leaving the loop early (break) closes the stream, which cancels a turn
   *  that was not sent with detach. */
  async *stream(method: string, path: string, body?: unknown, signal?: AbortSignal): AsyncGenerator<SseEvent, void, undefined> {
    const r = await this.request(method, path, body, signal);
    if (r.status === 204 || !r.body) return;
    yield* this.parse(r.body);
  }

  private async *parse(body: NonNullable<Response['body']>): AsyncGenerator<SseEvent, void, undefined> {
    const reader = body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = '';
    let id: number | null = null, event = 'message', data: string[] = [], size = 0;
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value;
        let nl: number;
        // text/event-stream (WHATWG HTML 9.2.6): lines, fields, a blank line dispatches
        while ((nl = buf.search(/\r\n|\r|\n/)) >= 0) {
          const line = buf.slice(0, nl);
          buf = buf.slice(nl + (buf.startsWith('\r\n', nl) ? 2 : 1));
          if (line === '') {
            if (data.length) {
              let parsed: any;
              try { parsed = JSON.parse(data.join('\n')); } catch { parsed = data.join('\n'); }
              yield { id, event, data: parsed, at: performance.now() };
            }
            id = null; event = 'message'; data = []; size = 0;
            continue;
          }
          if (line.startsWith(':')) continue;
          const c = line.indexOf(':');
          const field = c < 0 ? line : line.slice(0, c);
          const v = c < 0 ? '' : line.slice(c + 1).replace(/^ /, '');
          if (field === 'data') { data.push(v); size += v.length + 1; }
          else if (field === 'event') event = v;
          else if (field === 'id') id = /^\d+$/.test(v) ? Number(v) : null;
          if (size > this.maxEventChars) throw new ApiError(0, `a server-sent event over ${this.maxEventChars} characters`);
        }
        if (buf.length > this.maxEventChars) throw new ApiError(0, `a server-sent event line over ${this.maxEventChars} characters`);
      }
    } finally {
      reader.cancel().catch(() => { /* already closed */ });
    }
  }

  // ----- typed helpers of the agent API (docs/api.md) -----

  /** Create an agent session; files go into its work dir before the first turn. */
  async createSession(o: { llm?: string; kernel_name?: string; kernel_id?: string; files?: NewFile[] } = {}): Promise<AgentSession> {
    return (await this.json<AgentSession>('POST', '/api/agent/sessions', o))!;
  }

  async sessions(): Promise<AgentSession[]> {
    return (await this.json<AgentSession[]>('GET', '/api/agent/sessions')) ?? [];
  }

  async session(id: string): Promise<AgentSession> {
    return (await this.json<AgentSession>('GET', sessionPath(id)))!;
  }

  async deleteSession(id: string): Promise<void> {
    await this.request('DELETE', sessionPath(id));
  }

  /** One turn: its events as they happen, up to done. */
  chat(id: string, content: string, o: { detach?: boolean; signal?: AbortSignal } = {}): AsyncGenerator<SseEvent, void, undefined> {
    return this.stream('POST', `${sessionPath(id)}/messages`, o.detach ? { content, detach: true } : { content }, o.signal);
  }

  /** Follow the running turn (from its start, or after event id `after`); empty when none runs. */
  follow(id: string, after?: number, signal?: AbortSignal): AsyncGenerator<SseEvent, void, undefined> {
    return this.stream('GET', `${sessionPath(id)}/events${after !== undefined ? `?after=${after}` : ''}`, undefined, signal);
  }

  async interrupt(id: string): Promise<void> {
    await this.request('POST', `${sessionPath(id)}/interrupt`);
  }

  async files(id: string): Promise<SessionFile[]> {
    return (await this.json<SessionFile[]>('GET', `${sessionPath(id)}/files`)) ?? [];
  }

  /** Put bytes into the work dir as `path` (relative); korch's answer {name, size, replaced}. */
  async putFile(id: string, path: string, data: Blob | ArrayBuffer | Uint8Array | string): Promise<{ name: string; size: number; replaced: boolean }> {
    const r = await this.f(this.url(`${sessionPath(id)}/files/${filePath(path)}`), {
      method: 'PUT', headers: this.headers({ 'Content-Type': 'application/octet-stream' }), body: data as BodyInit,
    });
    if (!r.ok) throw new ApiError(r.status, await messageOf(r));
    return r.json();
  }

  /** A file of the work dir, as bytes. */
  async getFile(id: string, path: string): Promise<Uint8Array> {
    const r = await this.request('GET', `${sessionPath(id)}/files/${filePath(path)}`);
    return new Uint8Array(await r.arrayBuffer());
  }

  async removeFile(id: string, path: string): Promise<void> {
    await this.request('DELETE', `${sessionPath(id)}/files/${filePath(path)}`);
  }

  /** The session as an nbformat 4.5 notebook. */
  async notebook(id: string): Promise<Record<string, unknown>> {
    return (await this.json<Record<string, unknown>>('GET', `${sessionPath(id)}/notebook`))!;
  }

  /** PUT a file's bytes; onProgress(sent, total) as they go (XMLHttpRequest's upload events). */
  upload(path: string, file: Blob, onProgress: (sent: number, total: number) => void): Promise<void> {
    if (this.customFetch) {
      return (async () => {
        const r = await this.f(this.url(path), {
          method: 'PUT', headers: this.headers({ 'Content-Type': 'application/octet-stream' }), body: file,
        });
        if (!r.ok) throw new ApiError(r.status, await messageOf(r));
        onProgress(file.size, file.size);
      })();
    }
    return new Promise((resolve, reject) => {
      const x = new XMLHttpRequest();
      x.open('PUT', this.url(path));
      for (const [k, v] of Object.entries(this.headers({ 'Content-Type': 'application/octet-stream' }))) x.setRequestHeader(k, v);
      x.upload.onprogress = (e) => onProgress(e.loaded, e.lengthComputable ? e.total : file.size);
      x.onload = () => {
        if (x.status >= 200 && x.status < 300) { onProgress(file.size, file.size); resolve(); return; }
        let msg = `${x.status}`;
        try { msg = JSON.parse(x.responseText).message || msg; } catch { /* not JSON */ }
        reject(new ApiError(x.status, msg));
      };
      x.onerror = () => reject(new ApiError(0, 'the upload failed (network error)'));
      x.send(file);
    });
  }
}

/** Save a blob under a name (an <a download> on a blob: URL). The blob is
 *  typed application/octet-stream first: whatever it holds (a kernel's .html
 *  or .svg), its URL is a download, never a document of korch's origin. */
export function saveBlob(blob: Blob, name: string): void {
  const a = document.createElement('a');
  a.href = URL.createObjectURL(new Blob([blob], { type: 'application/octet-stream' }));
  a.download = name;
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 10000);
}
