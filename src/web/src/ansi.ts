// ANSI SGR colours (ECMA-48 8.3.117) as DOM nodes: kernel text (streams,
// tracebacks) becomes spans whose text is set with textContent, so nothing a
// kernel prints is ever parsed as HTML. The 16 basic colours are classes
// (the theme's palette, as JupyterLab's ansi-* classes); 256-colour and
// 24-bit colours are set through CSSOM (el.style), which the page's CSP
// (style-src 'self') allows, unlike style attributes.

interface Sgr { fg: string | number | null; bg: string | number | null; bold: boolean; italic: boolean; underline: boolean; }

const NAMES = ['black', 'red', 'green', 'yellow', 'blue', 'magenta', 'cyan', 'white'];

function xterm256(n: number): string {
  if (n < 16) return ''; // handled as a class
  if (n >= 232) { const v = 8 + (n - 232) * 10; return `rgb(${v},${v},${v})`; }
  const i = n - 16, c = [Math.floor(i / 36), Math.floor(i / 6) % 6, i % 6].map((x) => (x ? 55 + x * 40 : 0));
  return `rgb(${c[0]},${c[1]},${c[2]})`;
}

function colour(codes: number[], i: number): [string | number | null, number] {
  // 38;5;N / 38;2;R;G;B (and 48 for the background)
  if (codes[i + 1] === 5 && codes.length > i + 2) {
    const n = codes[i + 2];
    return [n < 16 ? n : xterm256(n), i + 2];
  }
  if (codes[i + 1] === 2 && codes.length > i + 4)
    return [`rgb(${codes[i + 2] & 255},${codes[i + 3] & 255},${codes[i + 4] & 255})`, i + 4];
  return [null, i];
}

function apply(st: Sgr, codes: number[]): void {
  if (!codes.length) codes = [0];
  for (let i = 0; i < codes.length; i++) {
    const c = codes[i];
    if (c === 0) { st.fg = st.bg = null; st.bold = st.italic = st.underline = false; }
    else if (c === 1) st.bold = true;
    else if (c === 3) st.italic = true;
    else if (c === 4) st.underline = true;
    else if (c === 22) st.bold = false;
    else if (c === 23) st.italic = false;
    else if (c === 24) st.underline = false;
    else if (c >= 30 && c <= 37) st.fg = c - 30;
    else if (c === 38) [st.fg, i] = colour(codes, i);
    else if (c === 39) st.fg = null;
    else if (c >= 40 && c <= 47) st.bg = c - 40;
    else if (c === 48) [st.bg, i] = colour(codes, i);
    else if (c === 49) st.bg = null;
    else if (c >= 90 && c <= 97) st.fg = c - 90 + 8;
    else if (c >= 100 && c <= 107) st.bg = c - 100 + 8;
  }
}

function span(st: Sgr, text: string): Node {
  if (st.fg === null && st.bg === null && !st.bold && !st.italic && !st.underline) return document.createTextNode(text);
  const s = document.createElement('span');
  const cls: string[] = [];
  const name = (n: number) => (n >= 8 ? 'bright-' : '') + NAMES[n % 8];
  if (typeof st.fg === 'number') cls.push(`ansi-${name(st.fg)}-fg`);
  else if (st.fg) s.style.color = st.fg;
  if (typeof st.bg === 'number') cls.push(`ansi-${name(st.bg)}-bg`);
  else if (st.bg) s.style.backgroundColor = st.bg;
  if (st.bold) cls.push('ansi-bold');
  if (st.italic) cls.push('ansi-italic');
  if (st.underline) cls.push('ansi-underline');
  s.className = cls.join(' ');
  s.textContent = text;
  return s;
}

/** Text with ANSI escapes -> a fragment of text nodes and spans. Other escapes (cursor moves, OSC) are dropped. */
export function ansiToDom(text: string): DocumentFragment {
  const frag = document.createDocumentFragment();
  const st: Sgr = { fg: null, bg: null, bold: false, italic: false, underline: false };
  // CSI ... final byte, or OSC ... BEL/ST
  const re = /\x1b\[([0-9;:]*)([@-~])|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]/g;
  let last = 0, m: RegExpExecArray | null;
  while ((m = re.exec(text))) {
    if (m.index > last) frag.appendChild(span(st, text.slice(last, m.index)));
    if (m[2] === 'm') apply(st, m[1].split(/[;:]/).filter((x) => x !== '').map(Number));
    last = re.lastIndex;
  }
  if (last < text.length) frag.appendChild(span(st, text.slice(last)));
  return frag;
}

/** A stream's text as a terminal shows it: "\r" rewinds the line, a backspace (\x08) deletes a character. */
export function terminalText(text: string): string {
  if (!/[\r\x08]/.test(text)) return text;
  return text.replace(/\r\n/g, '\n').split('\n').map((line) => {
    let out = '';
    for (const p of line.split('\r')) out = p + out.slice(p.length);
    while (/[^\x08]\x08/.test(out)) out = out.replace(/[^\x08]\x08/, '');
    return out.replace(/\x08/g, '');
  }).join('\n');
}
