// End-to-end: the deprecated JavaScript SDK, @google/generative-ai 0.24.1
// (which uses /v1beta and sends x-goog-api-client: genai-js/…), through
// gemini-proxy to the emulator. Answers through the proxy must equal the
// emulator's direct answers, and the proxy must count the SDK as deprecated.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { GoogleGenerativeAI } from '@google/generative-ai';

import { metricSamples, recording, start, sum } from './harness.mjs';

const MODEL = 'gemini-2.5-flash';
/** Any non-empty key works: the emulator checks only that one is present. */
const API_KEY = 'e2e-test-key';
/** The client SDK family gemini-proxy records for @google/generative-ai. */
const SDK = 'generative-ai-js';
const CLIENT_REQUESTS = 'gemini_proxy_client_requests_total';

/**
 * model returns a deprecated-SDK model whose requests go to baseUrl. It sets
 * no requestOptions.timeout: the SDK never clears that timer, which would keep
 * the test process alive for the whole time-out after the last test; the
 * suite's own time-out bounds every call instead.
 */
function model(baseUrl) {
  return new GoogleGenerativeAI(API_KEY).getGenerativeModel({ model: MODEL }, { baseUrl });
}

describe('@google/generative-ai (deprecated) through gemini-proxy', { timeout: 60_000 }, () => {
  let env;
  let viaProxy;
  let direct;
  /** Requests sent through the proxy, as "METHOD /path?query". */
  const proxied = [];
  const globalFetch = globalThis.fetch;

  before(async () => {
    env = await start();
    viaProxy = model(env.proxyURL);
    direct = model(env.emulatorURL);
    // The deprecated SDK has no fetch option; it calls the global fetch.
    globalThis.fetch = recording(globalFetch, env.proxyURL, proxied);
  });

  after(async () => {
    globalThis.fetch = globalFetch;
    await env?.stop();
  });

  test('generateContent', async () => {
    const ask = async (m) => (await m.generateContent('Name three prime numbers.')).response;
    const got = await ask(viaProxy);
    const want = await ask(direct);
    assert.ok(got.text().length > 0, `empty text in ${JSON.stringify(got)}`);
    assert.ok(got.usageMetadata?.totalTokenCount > 0, `no usage in ${JSON.stringify(got)}`);
    assert.equal(got.text(), want.text());
    assert.deepEqual(got.usageMetadata, want.usageMetadata);
  });

  test('generateContentStream', async () => {
    const collect = async (m) => {
      const { stream, response } = await m.generateContentStream(
        'Write a short paragraph about the sea, in several sentences.',
      );
      const chunks = [];
      for await (const chunk of stream) chunks.push(chunk.text());
      const final = await response;
      return { chunks, text: final.text(), usage: final.usageMetadata };
    };
    const got = await collect(viaProxy);
    const want = await collect(direct);
    assert.ok(got.chunks.length > 1, `got ${got.chunks.length} chunk(s), want more than one`);
    assert.equal(got.chunks.join(''), got.text, 'chunks do not add up to the aggregated response');
    assert.ok(got.usage?.totalTokenCount > 0, `aggregated response has no usageMetadata: ${JSON.stringify(got.usage)}`);
    assert.deepEqual(got, want);
  });

  test('startChat + sendMessage twice', async () => {
    const converse = async (m) => {
      const chat = m.startChat();
      const first = (await chat.sendMessage('My favourite colour is teal.')).response;
      const second = (await chat.sendMessage('What is my favourite colour?')).response;
      const history = await chat.getHistory();
      assert.deepEqual(history.map((c) => c.role), ['user', 'model', 'user', 'model']);
      assert.ok(
        second.usageMetadata?.promptTokenCount > first.usageMetadata?.promptTokenCount,
        'the second prompt must carry the history and be longer than the first',
      );
      return { texts: [first.text(), second.text()], usage: [first.usageMetadata, second.usageMetadata], history };
    };
    const got = await converse(viaProxy);
    const want = await converse(direct);
    assert.ok(got.texts.every((t) => t.length > 0), `empty reply in ${JSON.stringify(got.texts)}`);
    assert.deepEqual(got, want);
  });

  test('countTokens', async () => {
    const count = (m) => m.countTokens('How many tokens does this sentence have?');
    const got = await count(viaProxy);
    const want = await count(direct);
    assert.ok(got.totalTokens > 0, `totalTokens = ${got.totalTokens}`);
    assert.deepEqual(got, want);
  });

  test('requests used the /v1beta API version', () => {
    const want = [
      `POST /v1beta/models/${MODEL}:generateContent`,
      `POST /v1beta/models/${MODEL}:streamGenerateContent?alt=sse`,
      `POST /v1beta/models/${MODEL}:generateContent`,
      `POST /v1beta/models/${MODEL}:generateContent`,
      `POST /v1beta/models/${MODEL}:countTokens`,
    ];
    assert.deepEqual(proxied, want);
  });

  test('metrics count the requests as deprecated generative-ai-js', async () => {
    const samples = await metricSamples(`${env.adminURL}/metrics`, CLIENT_REQUESTS);
    assert.ok(samples.length > 0, `no ${CLIENT_REQUESTS} in /metrics`);
    assert.equal(
      sum(samples, { sdk: SDK, deprecated: 'true' }),
      proxied.length,
      `${CLIENT_REQUESTS}{sdk="${SDK}",deprecated="true"}; samples: ${JSON.stringify(samples)}`,
    );
    assert.equal(sum(samples, { deprecated: 'false' }), 0, `non-deprecated requests counted: ${JSON.stringify(samples)}`);
  });
});
