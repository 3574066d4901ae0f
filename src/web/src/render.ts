// Rendering what kernels and models produce, the way Jupyter does for the
// mime types korch sees, and never as script: HTML and markdown go through
// DOMPurify (script, event handlers, javascript: URLs removed), SVG is shown
// as an <img> (an image's script never runs), text with ANSI colours becomes
// DOM nodes (ansi.ts). Priority of a mime bundle: JupyterLab rendermime's
// default order, with application/javascript never run.
//
// Nothing from a kernel is ever a document of korch's origin (issue 21: a
// saved SVG shown from a blob: URL ran its onload when opened in a tab). An
// SVG's <img> is a data: URL of the SVG sanitized (no script, no handlers):
// opened in a tab it is a document of no origin with nothing to run. Raster
// images may come from blob: URLs (no script in them). Downloads are blobs
// typed application/octet-stream, which a browser saves and never shows.
import DOMPurify from 'dompurify';
import { marked } from 'marked';
import hljs from 'highlight.js/lib/core';
import python from 'highlight.js/lib/languages/python';
import r from 'highlight.js/lib/languages/r';
import julia from 'highlight.js/lib/languages/julia';
import bash from 'highlight.js/lib/languages/bash';
import { ansiToDom, terminalText } from './ansi';

hljs.registerLanguage('python', python);
hljs.registerLanguage('r', r);
hljs.registerLanguage('julia', julia);
hljs.registerLanguage('bash', bash);

// links (HTML's and SVG's <a>, <area>) open elsewhere and never tell where they came from
DOMPurify.addHook('afterSanitizeAttributes', (node) => {
  const tag = node.tagName.toUpperCase();
  if ((tag === 'A' || tag === 'AREA') && (node.hasAttribute('href') || node.hasAttribute('xlink:href'))) {
    node.setAttribute('target', '_blank');
    node.setAttribute('rel', 'noopener noreferrer nofollow');
  }
});

const PURIFY = {
  // style: inline CSS is blocked by the page's CSP anyway; forms could post elsewhere
  FORBID_TAGS: ['style', 'form', 'input', 'button', 'textarea', 'select', 'option', 'iframe', 'object', 'embed', 'base', 'meta', 'link'],
  FORBID_ATTR: ['style', 'action', 'formaction', 'ping'],
  ALLOW_DATA_ATTR: false,
};

/** Untrusted HTML -> a sanitized fragment. */
export function safeHtml(html: string): DocumentFragment {
  return DOMPurify.sanitize(html, { ...PURIFY, RETURN_DOM_FRAGMENT: true }) as unknown as DocumentFragment;
}

/** An SVG from a kernel -> a data: URL of it sanitized (scripts, handlers,
 *  foreign objects gone), for an <img>; null when it holds no <svg>. */
export function safeSvgUrl(svg: string): string | null {
  const frag = DOMPurify.sanitize(svg, { USE_PROFILES: { svg: true, svgFilters: true }, RETURN_DOM_FRAGMENT: true }) as unknown as DocumentFragment;
  const root = frag.querySelector('svg');
  if (!root) return null;
  const xml = new XMLSerializer().serializeToString(root);
  return 'data:image/svg+xml;base64,' + btoa(unescape(encodeURIComponent(xml)));
}

/** Markdown (the model's text, text/markdown outputs) -> a sanitized element. */
export function markdown(text: string, cls = 'k-md'): HTMLElement {
  const div = document.createElement('div');
  div.className = cls;
  div.appendChild(safeHtml(marked.parse(text, { async: false, gfm: true }) as string));
  return div;
}

export function setMarkdown(div: HTMLElement, text: string): void {
  div.replaceChildren(safeHtml(marked.parse(text, { async: false, gfm: true }) as string));
}

/** Highlighted code into a <code> (highlight.js escapes the text it is given). */
export function highlightInto(code: HTMLElement, text: string, language: string): void {
  const lang = (language || 'python').toLowerCase();
  if (hljs.getLanguage(lang)) {
    code.innerHTML = hljs.highlight(text, { language: lang, ignoreIllegals: true }).value;
  } else code.textContent = text;
  code.className = `hljs language-${lang}`;
}

type Bundle = Record<string, unknown>;

const ORDER = ['text/html', 'text/markdown', 'text/latex', 'image/svg+xml', 'image/png', 'image/jpeg', 'image/gif',
  'image/webp', 'application/json', 'text/plain'];

const text = (v: unknown): string => (Array.isArray(v) ? v.join('') : typeof v === 'string' ? v : JSON.stringify(v));

function pre(cls: string, body: string): HTMLElement {
  const p = document.createElement('pre');
  p.className = cls;
  p.appendChild(ansiToDom(body));
  return p;
}

function base64ToBlob(b64: string, mime: string): Blob {
  const bin = atob(b64.replace(/\s+/g, ''));
  const bytes = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
  return new Blob([bytes], { type: mime });
}

/** An image as PNG: as it is, or drawn into a canvas (JPEG, SVG...). */
async function pngOf(img: HTMLImageElement, mime: string, b64: string | null): Promise<Blob> {
  if (mime === 'image/png' && b64) return base64ToBlob(b64, mime);
  const c = document.createElement('canvas');
  c.width = img.naturalWidth || 800;
  c.height = img.naturalHeight || 600;
  const g = c.getContext('2d')!;
  g.fillStyle = '#fff';
  g.fillRect(0, 0, c.width, c.height);
  g.drawImage(img, 0, 0, c.width, c.height);
  return new Promise((res, rej) => c.toBlob((b) => (b ? res(b) : rej(new Error('cannot encode the image'))), 'image/png'));
}

export interface RenderHooks {
  /** save a blob under a name */
  save(blob: Blob, name: string): void;
  /** a counter for figure names */
  nextFigure(): number;
}

function figure(src: string, mime: string, b64: string | null, hooks: RenderHooks): HTMLElement {
  const fig = document.createElement('figure');
  fig.className = 'k-figure';
  const img = document.createElement('img');
  const n = hooks.nextFigure();
  img.alt = `figure ${n}`;
  img.src = src;
  const btn = document.createElement('button');
  btn.type = 'button';
  btn.className = 'k-btn k-small';
  btn.textContent = 'Download PNG';
  btn.setAttribute('aria-label', `Download figure ${n} as PNG`);
  btn.addEventListener('click', async () => {
    try { hooks.save(await pngOf(img, mime, b64), `figure-${n}.png`); } catch (e) { btn.textContent = String(e); }
  });
  fig.append(img, btn);
  return fig;
}

/** A chart the code saved as a file (a `files` event's figure_url): fetched with the token, shown from a blob: URL. */
export function savedFigure(load: Promise<Blob>, name: string, hooks: RenderHooks): HTMLElement {
  const fig = document.createElement('figure');
  fig.className = 'k-figure k-saved';
  const img = document.createElement('img');
  img.alt = `saved chart ${name}`;
  const cap = document.createElement('figcaption');
  cap.className = 'k-muted';
  cap.textContent = name;
  const btn = document.createElement('button');
  btn.type = 'button';
  btn.className = 'k-btn k-small';
  btn.textContent = 'Download PNG';
  btn.setAttribute('aria-label', `Download ${name} as PNG`);
  let blob: Blob | null = null;
  load.then(async (b) => {
    blob = b;
    if (b.type !== 'image/svg+xml' && !/\.svg$/i.test(name)) { img.src = URL.createObjectURL(b); return; }
    // an SVG never from a blob: URL (opened in a tab it would be a document of korch's origin)
    const src = safeSvgUrl(await b.text());
    if (src) img.src = src; else cap.textContent = `${name}: not an SVG image`;
  }, (e) => { cap.textContent = `${name}: ${(e as Error).message}`; });
  btn.addEventListener('click', async () => {
    try {
      if (!blob) return;
      hooks.save(blob.type === 'image/png' ? blob : await pngOf(img, blob.type, null), name.replace(/\.[a-z]+$/i, '') + '.png');
    } catch (e) { btn.textContent = String(e); }
  });
  fig.append(img, cap, btn);
  return fig;
}

/** One mime bundle (display_data / execute_result data). */
export function renderBundle(data: Bundle, hooks: RenderHooks): HTMLElement {
  const mime = ORDER.find((m) => m in data);
  const box = document.createElement('div');
  box.className = 'k-mime';
  if (!mime) {
    const kinds = Object.keys(data).join(', ');
    box.appendChild(pre('k-plain k-muted', `[output of type ${kinds || 'none'} not shown${'application/javascript' in data ? ': JavaScript from a kernel is never run here' : ''}]`));
    return box;
  }
  box.dataset.mime = mime;
  const v = data[mime];
  if (mime === 'text/html') {
    box.classList.add('k-html');
    box.appendChild(safeHtml(text(v)));
  } else if (mime === 'text/markdown') box.appendChild(markdown(text(v)));
  else if (mime === 'image/svg+xml') {
    const src = safeSvgUrl(text(v));
    if (src) box.appendChild(figure(src, mime, null, hooks));
    else box.appendChild(pre('k-plain k-muted', '[image/svg+xml output that holds no SVG image]'));
  } else if (mime.startsWith('image/')) {
    const b64 = text(v).replace(/\s+/g, '');
    box.appendChild(figure(`data:${mime};base64,${b64}`, mime, b64, hooks));
  } else if (mime === 'application/json') box.appendChild(pre('k-json', JSON.stringify(v, null, 2)));
  else box.appendChild(pre(mime === 'text/latex' ? 'k-plain k-latex' : 'k-plain', text(v)));
  return box;
}

/** An nbformat v4 output. */
export function renderOutput(out: any, hooks: RenderHooks): HTMLElement {
  switch (out?.output_type) {
    case 'stream': {
      const p = pre(`k-stream k-${out.name === 'stderr' ? 'stderr' : 'stdout'}`, terminalText(text(out.text)));
      return p;
    }
    case 'error': {
      const tb = Array.isArray(out.traceback) && out.traceback.length ? out.traceback.join('\n') : `${out.ename}: ${out.evalue}`;
      const p = pre('k-traceback', tb);
      p.setAttribute('role', 'group');
      p.setAttribute('aria-label', `error ${out.ename}`);
      return p;
    }
    case 'display_data':
    case 'execute_result':
      return renderBundle(out.data || {}, hooks);
    default:
      return pre('k-plain k-muted', JSON.stringify(out));
  }
}

/** Re-render a stream output whose text grew. */
export function updateStream(el: HTMLElement, fullText: string): void {
  el.replaceChildren(ansiToDom(terminalText(fullText)));
}
