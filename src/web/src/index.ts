// What a host (korch's JupyterLab extension, src/jupyterlab) imports: the
// chat panel and the API client, and the chat's styles (chat.css:
// everything under .k-chat). `node build.mjs --lib DIR` bundles this file.
import './chat.css';
export { mountChat, stats } from './chat';
export type { ChatHandle, ChatOptions } from './chat';
export type { CellSink } from './turn';
export { Api, ApiError, saveBlob } from './api';
export type { ApiOptions, SseEvent } from './api';
