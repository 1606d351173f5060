// Framework example: LlamaIndex TS (`@llamaindex/google`, which wraps
// `@google/genai` 1.x) through gemini-proxy. Pointing it at the proxy is
// the SDK's own option:
//
//   const llm = new Gemini({ model, httpOptions: { baseUrl: 'http://127.0.0.1:8080' } });
//
// The session re-sends the whole `messages` array on each turn, with the
// same document attached to every user message. document-session.mjs holds
// the checks (one copy upstream, same answers).

import { Gemini } from '@llamaindex/google';

import { API_KEY, describeDocumentSession, MODEL, QUESTIONS, userMessage } from './document-session.mjs';

describeDocumentSession('LlamaIndex TS through gemini-proxy', async (baseUrl) => {
  const llm = new Gemini({ model: MODEL, apiKey: API_KEY, httpOptions: { baseUrl } });
  const messages = [];
  const turns = [];
  for (const q of QUESTIONS) {
    messages.push({ role: 'user', content: userMessage(q) });
    const r = await llm.chat({ messages });
    turns.push({ text: r.message.content, report: undefined });
    messages.push({ role: 'assistant', content: r.message.content });
  }
  return turns;
});
