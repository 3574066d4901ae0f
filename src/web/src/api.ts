// The agent API of korch serve, as the page uses it: JSON calls, a turn's
// server-sent events read from a fetch body (so the token goes in a header,
// never in a URL), uploads with progress, downloads as blobs.

export interface ApiOptions {
  /** where korch serve is ("" = this page's origin) */
  baseUrl?: string;
  /** korch's token, sent as "Authorization: token ..." */
  token?: string;
  /** a fetch of the host's (a JupyterLab extension passes one that adds its auth); uploads then have no progress */
  fetch?: typeof fetch;
}

export interface SseEvent {
  id: number | null;
  event: string;
  data: any;
  /** performance.now() when the event's last line arrived */
  at: number;
}

export class ApiError extends Error {
  constructor(public status: number, message: string) { super(message); }
}

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

  constructor(o: ApiOptions = {}) {
    this.base = (o.baseUrl ?? '').replace(/\/+$/, '');
    this.token = o.token ?? '';
    this.customFetch = !!o.fetch;
    this.f = o.fetch ?? window.fetch.bind(window);
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
    const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = '';
    let id: number | null = null, event = 'message', data: string[] = [];
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
            onEvent({ id, event, data: parsed, at: performance.now() });
          }
          id = null; event = 'message'; data = [];
          continue;
        }
        if (line.startsWith(':')) continue;
        const c = line.indexOf(':');
        const field = c < 0 ? line : line.slice(0, c);
        const v = c < 0 ? '' : line.slice(c + 1).replace(/^ /, '');
        if (field === 'data') data.push(v);
        else if (field === 'event') event = v;
        else if (field === 'id') id = /^\d+$/.test(v) ? Number(v) : null;
      }
    }
    return true;
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
