// Branching a session from one of its steps on screen (issue 23): a step's
// "Branch from here" opens a small form asking what the branch should do
// next (and, optionally, another model); the chat then asks korch serve
// (POST .../branch) and opens the new session. And a branch's own records
// (the transcript's `branch` records, the stream's `branch` events): where
// it came from, and how its fresh kernel was rebuilt.
function el<K extends keyof HTMLElementTagNameMap>(tag: K, cls?: string, textContent?: string): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (textContent !== undefined) e.textContent = textContent;
  return e;
}

/** Branch the session from turn `turn`'s step `step`, asking `content` (llm: "" = the parent's model).
 *  Resolves once the new session exists (the chat has moved to it); rejects with what korch said. */
export type BranchFn = (turn: number, step: number, content: string, llm: string) => Promise<void>;

/** The step's "Branch from here" button; its form opens under `after`. */
export function branchButton(label: string, where: () => [number, number], after: HTMLElement, branch: BranchFn): HTMLButtonElement {
  const b = el('button', 'k-btn k-small k-branch-btn', 'Branch from here');
  b.type = 'button';
  b.title = 'A new session from the state after this step, with another question (the session itself stays as it is)';
  b.setAttribute('aria-label', `Branch a new session from ${label}`);
  b.addEventListener('click', () => {
    const open = after.parentElement?.querySelector(':scope > .k-branch-form') as HTMLElement | null;
    if (open) { open.querySelector('textarea')?.focus(); return; }
    const form = branchForm(label, where, branch, () => { form.remove(); b.focus(); });
    after.after(form);
    form.querySelector('textarea')?.focus();
  });
  return b;
}

function branchForm(label: string, where: () => [number, number], branch: BranchFn, close: () => void): HTMLFormElement {
  const form = el('form', 'k-branch-form');
  form.setAttribute('aria-label', `Branch from ${label}`);
  const q = el('textarea', 'k-input k-branch-q') as HTMLTextAreaElement;
  q.rows = 2;
  q.placeholder = 'What should the branch do next?';
  q.setAttribute('aria-label', 'What should the branch do next?');
  const llm = el('input', 'k-branch-llm') as HTMLInputElement;
  llm.type = 'text';
  llm.placeholder = 'model (empty: the same)';
  llm.setAttribute('aria-label', 'Model of the branch (empty: the same as this session)');
  const go = el('button', 'k-btn k-primary k-small', 'Branch');
  go.type = 'submit';
  const cancel = el('button', 'k-btn k-small', 'Cancel');
  cancel.type = 'button';
  const err = el('p', 'k-error k-branch-error');
  err.setAttribute('role', 'alert');
  const row = el('div', 'k-branch-row');
  row.append(llm, go, cancel);
  form.append(q, row, err);
  cancel.addEventListener('click', close);
  q.addEventListener('input', () => { if (!go.disabled) err.textContent = ''; });
  form.addEventListener('keydown', (e) => { if (e.key === 'Escape') close(); });
  q.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) { e.preventDefault(); form.requestSubmit(); }
  });
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const text = q.value.trim();
    if (!text) { err.textContent = 'Say what the branch should do next.'; return; }
    go.disabled = true;
    err.textContent = 'Making the branch…';
    const [turn, step] = where();
    branch(turn, step, text, llm.value.trim()).then(close, (x) => {
      go.disabled = false;
      err.textContent = `cannot branch: ${(x as Error).message}`;
    });
  });
  return form;
}

/** A branch record or event, in words: where it came from, or how its kernel was rebuilt (with `state`). */
export function branchText(b: any): string {
  const p = b?.parent ?? {};
  const from = `session ${String(p.session ?? '?').slice(0, 8)}, turn ${p.turn ?? '?'} step ${p.step ?? '?'}`;
  const st = b?.state;
  if (!st || typeof st !== 'object') return `A branch of ${from}${b?.llm ? `, with the model ${b.llm}` : ''}.`;
  const rerun = `${st.rerun ?? 0} cell${st.rerun === 1 ? '' : 's'} re-run`;
  const diff = Array.isArray(st.differences) && st.differences.length
    ? `, ${st.differences.length} printed something else (${st.differences.slice(0, 2).map((d: any) => `"${String(d?.printed ?? '').trim().slice(0, 40)}" then, "${String(d?.now ?? '').trim().slice(0, 40)}" now`).join('; ')})`
    : st.status === 'reproduced' ? ', each printed what it printed before' : '';
  const snap = st.restored ? '; the state after that step restored from its snapshot' : '; no snapshot of that step: the values are the re-run\'s';
  const secs = typeof st.seconds === 'number' ? ` in ${st.seconds.toFixed(st.seconds < 1 ? 2 : 1)} s` : '';
  return `Kernel rebuilt${secs}: ${rerun}${diff}${snap}.`;
}

/** The note a branch record or event shows. */
export function branchNote(b: any): HTMLElement {
  const n = el('div', 'k-branch-note', branchText(b));
  n.setAttribute('role', 'status');
  n.dataset.branch = b?.state ? String(b.state.status ?? '') : 'from';
  return n;
}
