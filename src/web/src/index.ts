// What a host (a JupyterLab extension) imports: the chat panel and the API
// client. Its styles are ./chat.css (everything under .k-chat).
export { mountChat, stats } from './chat';
export type { ChatHandle, ChatOptions } from './chat';
export { Api, ApiError, saveBlob } from './api';
export type { ApiOptions, SseEvent } from './api';
