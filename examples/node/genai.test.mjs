// End-to-end: the current JavaScript SDK, @google/genai 3.x (which defaults to
// the /v1/ API version), through gemini-proxy to the emulator. Every call is
// made twice, through the proxy and directly against the emulator, and the
// answers must be equal: the proxy must be invisible to the SDK.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { GoogleGenAI } from '@google/genai';

import { metricSamples, recording, start, sum } from './harness.mjs';

const MODEL = 'gemini-2.5-flash';
/** Any non-empty key works: the emulator checks only that one is present. */
const API_KEY = 'e2e-test-key';
/** The client SDK family gemini-proxy records for @google/genai. */
const SDK = 'google-genai-js';
const CLIENT_REQUESTS = 'gemini_proxy_client_requests_total';

/**
 * client returns a @google/genai client whose requests go to baseUrl and are
 * appended to log as "METHOD /path?query".
 */
function client(baseUrl, log) {
  return new GoogleGenAI({
    vertexai: false,
    apiKey: API_KEY,
    httpOptions: { baseUrl, timeout: 10_000, fetch: recording(fetch, baseUrl, log) },
  });
}

describe('@google/genai through gemini-proxy', { timeout: 60_000 }, () => {
  let env;
  let viaProxy;
  let direct;
  /** Requests sent through the proxy, as "METHOD /path?query". */
  const proxied = [];

  before(async () => {
    env = await start();
    viaProxy = client(env.proxyURL, proxied);
    direct = client(env.emulatorURL, []);
  });

  after(async () => {
    await env?.stop();
  });

  test('generateContent', async () => {
    const ask = (ai) => ai.models.generateContent({ model: MODEL, contents: 'Name three prime numbers.' });
    const got = await ask(viaProxy);
    const want = await ask(direct);
    assert.ok(got.text?.length > 0, `empty text in ${JSON.stringify(got)}`);
    assert.ok(got.usageMetadata?.totalTokenCount > 0, `no usage in ${JSON.stringify(got)}`);
    assert.equal(got.text, want.text);
    assert.deepEqual(got.usageMetadata, want.usageMetadata);
  });

  test('generateContentStream', async () => {
    const collect = async (ai) => {
      const stream = await ai.models.generateContentStream({
        model: MODEL,
        contents: 'Write a short paragraph about the sea, in several sentences.',
      });
      const chunks = [];
      for await (const chunk of stream) chunks.push(chunk);
      return {
        n: chunks.length,
        text: chunks.map((c) => c.text ?? '').join(''),
        usage: chunks.at(-1)?.usageMetadata,
        finishReason: chunks.at(-1)?.candidates?.[0]?.finishReason,
      };
    };
    const got = await collect(viaProxy);
    const want = await collect(direct);
    assert.ok(got.n > 1, `got ${got.n} chunk(s), want more than one`);
    assert.ok(got.text.length > 0, 'empty streamed text');
    assert.ok(got.usage?.totalTokenCount > 0, `last chunk has no usageMetadata: ${JSON.stringify(got.usage)}`);
    assert.ok(got.usage.candidatesTokenCount > 0, `last chunk has no candidatesTokenCount: ${JSON.stringify(got.usage)}`);
    assert.equal(got.finishReason, 'STOP');
    assert.deepEqual(got, want);
  });

  test('chats.create + sendMessage twice', async () => {
    const converse = async (ai) => {
      const chat = ai.chats.create({ model: MODEL });
      const first = await chat.sendMessage({ message: 'My favourite colour is teal.' });
      assert.equal(chat.getHistory().length, 2, 'history after the first message');
      const second = await chat.sendMessage({ message: 'What is my favourite colour?' });
      const history = chat.getHistory();
      assert.deepEqual(history.map((c) => c.role), ['user', 'model', 'user', 'model']);
      assert.ok(
        second.usageMetadata?.promptTokenCount > first.usageMetadata?.promptTokenCount,
        `second prompt (${second.usageMetadata?.promptTokenCount} tokens) must carry the history ` +
          `and be longer than the first (${first.usageMetadata?.promptTokenCount})`,
      );
      return {
        texts: [first.text, second.text],
        usage: [first.usageMetadata, second.usageMetadata],
        history,
      };
    };
    const got = await converse(viaProxy);
    const want = await converse(direct);
    assert.ok(got.texts.every((t) => t?.length > 0), `empty reply in ${JSON.stringify(got.texts)}`);
    assert.deepEqual(got, want);
  });

  test('countTokens', async () => {
    const count = (ai) =>
      ai.models.countTokens({ model: MODEL, contents: 'How many tokens does this sentence have?' });
    // sdkHttpResponse holds the raw response headers; Date and
    // Server-Timing differ between any two calls, so only the body counts.
    const { sdkHttpResponse: _gotHTTP, ...got } = await count(viaProxy);
    const { sdkHttpResponse: _wantHTTP, ...want } = await count(direct);
    assert.ok(got.totalTokens > 0, `totalTokens = ${got.totalTokens}`);
    assert.deepEqual(got, want);
  });

  test('requests used the /v1/ API version', () => {
    // @google/genai 3.x defaults to /v1/ (gemini-api.md §1.1); the proxy must
    // route it like /v1beta/.
    const want = [
      `POST /v1/models/${MODEL}:generateContent`,
      `POST /v1/models/${MODEL}:streamGenerateContent?alt=sse`,
      `POST /v1/models/${MODEL}:generateContent`,
      `POST /v1/models/${MODEL}:generateContent`,
      `POST /v1/models/${MODEL}:countTokens`,
    ];
    assert.deepEqual(proxied, want);
  });

  test('metrics count the requests as google-genai-js', async () => {
    const samples = await metricSamples(`${env.adminURL}/metrics`, CLIENT_REQUESTS);
    assert.ok(samples.length > 0, `no ${CLIENT_REQUESTS} in /metrics`);
    assert.equal(
      sum(samples, { sdk: SDK, deprecated: 'false' }),
      proxied.length,
      `${CLIENT_REQUESTS}{sdk="${SDK}",deprecated="false"}; samples: ${JSON.stringify(samples)}`,
    );
    assert.equal(sum(samples, { deprecated: 'true' }), 0, `deprecated requests counted: ${JSON.stringify(samples)}`);
  });
});
