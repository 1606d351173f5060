// Framework example: Genkit (`genkit` + `@genkit-ai/google-genai`) through
// gemini-proxy. Pointing it at the proxy is a plugin option:
//
//   const ai = genkit({ plugins: [googleAI({ baseUrl: 'http://127.0.0.1:8080' })] });
//
// The session passes the whole history as `messages` on each turn, with the
// same document attached to every user message. document-session.mjs holds
// the checks (one copy upstream, same answers).

import { googleAI } from '@genkit-ai/google-genai';
import { genkit } from 'genkit';

import { API_KEY, describeDocumentSession, MODEL, QUESTIONS, userMessage } from './document-session.mjs';

describeDocumentSession('Genkit through gemini-proxy', async (baseUrl) => {
  const ai = genkit({ plugins: [googleAI({ apiKey: API_KEY, baseUrl })] });
  const messages = [];
  const turns = [];
  for (const q of QUESTIONS) {
    const prompt = userMessage(q);
    const r = await ai.generate({ model: googleAI.model(MODEL), messages, prompt });
    turns.push({ text: r.text, report: undefined });
    messages.push({ role: 'user', content: [{ text: prompt }] }, { role: 'model', content: [{ text: r.text }] });
  }
  return turns;
});
