// Type-checked (tsc --noEmit, strict) against the api.d.ts that
// `node src/web/build.mjs --client OUT` writes: tests/test_pyclient.c copies
// this file into OUT beside it. A wrong type in the declarations, or one
// missing, fails the check.
import { Api, ApiError, type AgentSession, type SessionFile, type SseEvent } from './api.js';

export async function use(api: Api): Promise<string[]> {
  const s: AgentSession = await api.createSession({ files: [{ name: 'a.csv', content: 'x\n1\n', format: 'text' }] });
  const seen: string[] = [];
  for await (const ev of api.chat(s.id, 'hello')) {
    const e: SseEvent = ev;
    const id: number | null = e.id;
    seen.push(`${id}:${e.event}`);
  }
  const fs: SessionFile[] = await api.files(s.id);
  const bytes: Uint8Array = await api.getFile(s.id, fs[0].path);
  const put: { name: string; size: number; replaced: boolean } = await api.putFile(s.id, 'b.bin', bytes);
  seen.push(put.name);
  try { await api.deleteSession(s.id); } catch (err) { if (err instanceof ApiError) seen.push(String(err.status)); }
  return seen;
}
// @ts-expect-error: chat needs the message's content
export const wrong = (api: Api) => api.chat('id');
