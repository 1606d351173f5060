// Framework example: the Vercel AI SDK (`ai` + `@ai-sdk/google`) through
// gemini-proxy. Pointing it at the proxy is one option:
//
//   const google = createGoogleGenerativeAI({ baseURL: 'http://127.0.0.1:8080/v1beta' });
//
// The session below is the naive chat loop the AI SDK documents: every user
// message attaches the same document again and the whole `messages` array
// is re-sent on each turn. Through the proxy the upstream receives the
// document once (later copies become references), and each answer the SDK
// returns is the upstream's answer to exactly that smaller request. Turn 1
// (nothing to deduplicate) equals a run straight against the emulator.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { createGoogleGenerativeAI } from '@ai-sdk/google';
import { generateText } from 'ai';

import { metricSamples, occurrences, replayText, startRecorded, sum } from './harness.mjs';

const MODEL = 'gemini-2.5-flash';
/** Any non-empty key works: the emulator checks only that one is present. */
const API_KEY = 'e2e-test-key';
const QUESTIONS = ['How many arrivals were logged on day 3?', 'And departures on day 5?', 'Which day had the highest tide?'];
/** A document of our own, long enough to be worth a reference. */
const DOC = Array.from(
  { length: 40 },
  (_, i) =>
    `Day ${i + 1}: the harbour log records ${(i * 7) % 13} arrivals and ${(i * 5) % 11} departures; high tide ${(i * 3) % 9} m.`,
).join('\n');
/** A line of DOC that occurs once per copy. */
const MARKER = 'Day 17: the harbour log records';

/** chat runs the naive session against baseURL and returns the answers and response headers. */
async function chat(baseURL) {
  const google = createGoogleGenerativeAI({ baseURL: `${baseURL}/v1beta`, apiKey: API_KEY });
  const messages = [];
  const turns = [];
  for (const q of QUESTIONS) {
    messages.push({ role: 'user', content: [{ type: 'text', text: `Here is the harbour log:\n\n${DOC}\n\n${q}` }] });
    const r = await generateText({ model: google(MODEL), messages, maxRetries: 0 });
    turns.push({ text: r.text, report: r.response.headers['x-gemini-proxy-report'] ?? null });
    messages.push({ role: 'assistant', content: r.text });
  }
  return turns;
}

/** texts returns every text part of a generateContent request body, joined. */
function texts(body) {
  return JSON.parse(body)
    .contents.flatMap((c) => c.parts.map((p) => p.text ?? ''))
    .join('\n');
}

describe('Vercel AI SDK through gemini-proxy', { timeout: 60_000 }, () => {
  let env;
  let viaProxy;
  let direct;

  before(async () => {
    env = await startRecorded();
    viaProxy = await chat(env.proxyURL);
    direct = await chat(env.emulatorURL);
  });

  after(async () => {
    await env?.stop();
  });

  test('requests went to /v1beta generateContent through the proxy', () => {
    assert.deepEqual(
      env.upstream.map((r) => `${r.method} ${r.path}`),
      QUESTIONS.map(() => `POST /v1beta/models/${MODEL}:generateContent`),
    );
  });

  test('turn 1 answers as without the proxy', () => {
    assert.ok(viaProxy[0].text.length > 0);
    assert.equal(viaProxy[0].text, direct[0].text);
  });

  test('every answer is the upstream answer to what the proxy sent', async () => {
    for (const [i, req] of env.upstream.entries()) {
      assert.equal(viaProxy[i].text, await replayText(env.emulatorURL, req, API_KEY), `turn ${i + 1}`);
    }
  });

  test('the upstream receives the document once per request', () => {
    for (const [i, req] of env.upstream.entries()) {
      assert.equal(occurrences(texts(req.body), MARKER), 1, `turn ${i + 1} upload: ${req.body.slice(0, 400)}`);
    }
  });

  test('X-Gemini-Proxy-Report shows the shrinking uploads', () => {
    assert.match(viaProxy[0].report, /^bytes=(\d+)->\1$/);
    for (const t of viaProxy.slice(1)) {
      const m = /^bytes=(\d+)->(\d+);/.exec(t.report);
      assert.ok(m && Number(m[2]) < Number(m[1]) / 1.5, `report ${t.report}`);
    }
  });

  test('metrics count the replacements', async () => {
    const samples = await metricSamples(`${env.adminURL}/metrics`, 'gemini_proxy_rewrite_replacements_total');
    assert.ok(sum(samples, {}) >= QUESTIONS.length - 1, `samples: ${JSON.stringify(samples)}`);
  });
});
