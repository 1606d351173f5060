// Framework example: LlamaIndex TS (`@llamaindex/google`, which wraps
// `@google/genai` 1.x) through gemini-proxy. Pointing it at the proxy is
// the SDK's own option:
//
//   const llm = new Gemini({ model, httpOptions: { baseUrl: 'http://127.0.0.1:8080' } });
//
// The session below re-sends the whole `messages` array on each turn, with
// the same document attached to every user message. Through the proxy the
// upstream receives the document once, and each answer is the upstream's
// answer to exactly that smaller request. Turn 1 (nothing to deduplicate)
// equals a run straight against the emulator.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { Gemini } from '@llamaindex/google';

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

/** chat runs the naive session against baseUrl and returns the answers. */
async function chat(baseUrl) {
  const llm = new Gemini({ model: MODEL, apiKey: API_KEY, httpOptions: { baseUrl } });
  const messages = [];
  const answers = [];
  for (const q of QUESTIONS) {
    messages.push({ role: 'user', content: `Here is the harbour log:\n\n${DOC}\n\n${q}` });
    const r = await llm.chat({ messages });
    answers.push(r.message.content);
    messages.push({ role: 'assistant', content: r.message.content });
  }
  return answers;
}

/** texts returns every text part of a generateContent request body, joined. */
function texts(body) {
  return JSON.parse(body)
    .contents.flatMap((c) => c.parts.map((p) => p.text ?? ''))
    .join('\n');
}

describe('LlamaIndex TS through gemini-proxy', { timeout: 60_000 }, () => {
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

  test('turn 1 answers as without the proxy', () => {
    assert.ok(viaProxy[0].length > 0);
    assert.equal(viaProxy[0], direct[0]);
  });

  test('every answer is the upstream answer to what the proxy sent', async () => {
    assert.equal(env.upstream.length, QUESTIONS.length, env.upstream.map((r) => r.path).join(', '));
    for (const [i, req] of env.upstream.entries()) {
      assert.match(req.path, new RegExp(`/models/${MODEL}:generateContent`));
      assert.equal(viaProxy[i], await replayText(env.emulatorURL, req, API_KEY), `turn ${i + 1}`);
    }
  });

  test('the upstream receives the document once per request', () => {
    for (const [i, req] of env.upstream.entries()) {
      assert.equal(occurrences(texts(req.body), MARKER), 1, `turn ${i + 1} upload: ${req.body.slice(0, 400)}`);
    }
  });

  test('metrics count the replacements', async () => {
    const samples = await metricSamples(`${env.adminURL}/metrics`, 'gemini_proxy_rewrite_replacements_total');
    assert.ok(sum(samples, {}) >= QUESTIONS.length - 1, `samples: ${JSON.stringify(samples)}`);
  });
});
