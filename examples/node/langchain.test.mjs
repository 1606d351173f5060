// Framework example: LangChain JS (`@langchain/google-genai`) through
// gemini-proxy. Pointing it at the proxy is one option:
//
//   const llm = new ChatGoogleGenerativeAI({ model, baseUrl: 'http://127.0.0.1:8080' });
//
// The classic ConversationChain with a BufferMemory flattens the history
// into one prompt ("Current conversation:\nHuman: …\nAI: …\nHuman: …\nAI:")
// and sends it as a single user message. Through the proxy the upstream
// receives real user/model turns instead (the model lines are the answers
// the proxy itself served), and each answer the chain returns is the
// upstream's answer to exactly that request. Turn 1 (no history yet)
// equals a run straight against the emulator.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { ConversationChain } from '@langchain/classic/chains';
import { BufferMemory } from '@langchain/classic/memory';
import { ChatGoogleGenerativeAI } from '@langchain/google-genai';

import { metricSamples, replayText, reporting, startRecorded, sum } from './harness.mjs';

const MODEL = 'gemini-2.5-flash';
/** Any non-empty key works: the emulator checks only that one is present. */
const API_KEY = 'e2e-test-key';
const QUESTIONS = ['My favourite colour is teal.', 'I live in Lisbon.', 'What is my favourite colour?'];

/** converse runs the chain against baseUrl and returns its answers. */
async function converse(baseUrl) {
  const llm = new ChatGoogleGenerativeAI({ model: MODEL, apiKey: API_KEY, baseUrl, maxRetries: 0 });
  const chain = new ConversationChain({ llm, memory: new BufferMemory() });
  const answers = [];
  for (const input of QUESTIONS) answers.push((await chain.invoke({ input })).response);
  return answers;
}

describe('LangChain JS ConversationChain through gemini-proxy', { timeout: 60_000 }, () => {
  let env;
  let viaProxy;
  let direct;
  /** X-Gemini-Proxy-Report of every proxied response, in order. */
  const reports = [];
  const globalFetch = globalThis.fetch;

  before(async () => {
    env = await startRecorded();
    // @langchain/google-genai calls the global fetch (through @google/generative-ai).
    globalThis.fetch = reporting(globalFetch, env.proxyURL, reports);
    viaProxy = await converse(env.proxyURL);
    direct = await converse(env.emulatorURL);
  });

  after(async () => {
    globalThis.fetch = globalFetch;
    await env?.stop();
  });

  test('turn 1 answers as without the proxy', () => {
    assert.ok(viaProxy[0].length > 0);
    assert.equal(viaProxy[0], direct[0]);
  });

  test('every answer is the upstream answer to what the proxy sent', async () => {
    assert.equal(env.upstream.length, QUESTIONS.length);
    for (const [i, req] of env.upstream.entries()) {
      assert.equal(viaProxy[i], await replayText(env.emulatorURL, req, API_KEY), `turn ${i + 1}`);
    }
  });

  test('the upstream receives real turns, not one flattened prompt', () => {
    for (const [i, req] of env.upstream.entries()) {
      const { contents } = JSON.parse(req.body);
      // Turn n carries n-1 earlier exchanges: user, model, …, user.
      const want = Array.from({ length: 2 * i + 1 }, (_, k) => (k % 2 === 0 ? 'user' : 'model'));
      assert.deepEqual(contents.map((c) => c.role), want, `turn ${i + 1}: ${req.body.slice(0, 600)}`);
      for (let k = 0; k < i; k++) {
        const served = contents[2 * k + 1].parts.map((p) => p.text).join('');
        assert.equal(served, viaProxy[k], `turn ${i + 1}: model turn ${k + 1} is not the answer served`);
      }
      const last = contents.at(-1).parts.map((p) => p.text).join('');
      assert.ok(last.includes(QUESTIONS[i]), `turn ${i + 1}: last user turn ${JSON.stringify(last)}`);
    }
  });

  test('X-Gemini-Proxy-Report names the unflatten rule', () => {
    assert.equal(reports.length, QUESTIONS.length);
    assert.match(reports[0], /^bytes=(\d+)->\1$/);
    for (const r of reports.slice(1)) assert.match(r, /unflatten=\d+/);
  });

  test('metrics count the un-flattened turns', async () => {
    const samples = await metricSamples(`${env.adminURL}/metrics`, 'gemini_proxy_rewrite_replacements_total');
    assert.ok(sum(samples, { rule: 'unflatten' }) >= 2, `samples: ${JSON.stringify(samples)}`);
  });
});
