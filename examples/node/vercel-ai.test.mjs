// Framework example: the Vercel AI SDK (`ai` + `@ai-sdk/google`) through
// gemini-proxy. Pointing it at the proxy is one option:
//
//   const google = createGoogleGenerativeAI({ baseURL: 'http://127.0.0.1:8080/v1beta' });
//
// The session is the naive chat loop: every user message attaches the same
// document again and the whole `messages` array is re-sent on each turn.
// document-session.mjs holds the checks (one copy upstream, same answers).

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { createGoogleGenerativeAI } from '@ai-sdk/google';
import { generateText } from 'ai';

import { API_KEY, describeDocumentSession, MODEL, QUESTIONS, userMessage } from './document-session.mjs';

describeDocumentSession(
  'Vercel AI SDK through gemini-proxy',
  async (baseUrl) => {
    const google = createGoogleGenerativeAI({ baseURL: `${baseUrl}/v1beta`, apiKey: API_KEY });
    const messages = [];
    const turns = [];
    for (const q of QUESTIONS) {
      messages.push({ role: 'user', content: [{ type: 'text', text: userMessage(q) }] });
      const r = await generateText({ model: google(MODEL), messages, maxRetries: 0 });
      turns.push({ text: r.text, report: r.response.headers['x-gemini-proxy-report'] ?? null });
      messages.push({ role: 'assistant', content: r.text });
    }
    return turns;
  },
  (env) => {
    test('requests went to /v1beta', () => {
      assert.ok(env.upstream.every((r) => r.path.startsWith('/v1beta/')), env.upstream.map((r) => r.path).join(', '));
    });
  },
);
