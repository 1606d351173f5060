// End-to-end: chats of the JavaScript SDKs through gemini-proxy with
// upstream_state.interactions on (README "Upstream state: Interactions
// continuation"). A recording forwarder between the proxy and the emulator
// keeps every upstream request, so the test sees what was uploaded: turn 1
// starts an interaction, every later turn continues the previous one with
// only the new user turn. The answers must equal a run straight against the
// emulator.

import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { GoogleGenAI } from '@google/genai';
import { GoogleGenerativeAI } from '@google/generative-ai';

import { metricSamples, startRecorded, sum } from './harness.mjs';

const MODEL = 'gemini-2.5-flash';
const API_KEY = 'e2e-test-key';
const IX_REQUESTS = 'gemini_proxy_interactions_requests_total';
const QUESTIONS = ['What is a promise?', 'How do I cancel one?', 'And with an AbortSignal?', 'Thanks. Summarise.'];

/**
 * stack runs the emulator (with emulatorArgs), the forwarder and the proxy
 * with continuation on.
 */
async function stack(emulatorArgs) {
  const dir = await mkdtemp(path.join(tmpdir(), 'gp-ix-'));
  const config = path.join(dir, 'config.yaml');
  await writeFile(config, 'upstream_state:\n  interactions: true\n');
  const env = await startRecorded({ args: ['--config', config], emulatorArgs });
  return {
    ...env,
    stop: async () => {
      await env.stop();
      await rm(dir, { recursive: true, force: true });
    },
  };
}

function genai(baseUrl) {
  return new GoogleGenAI({ vertexai: false, apiKey: API_KEY, httpOptions: { baseUrl, timeout: 10_000 } });
}

/**
 * turn sends q on chat, streamed or not, and returns what the client saw
 * (and, for a stream, the number of chunks in n, which callers compare only
 * where it matters: a translated interaction stream ends with a chunk of its
 * own, holding an empty text part, finishReason and usageMetadata).
 */
async function turn(chat, q, stream) {
  if (!stream) {
    const r = await chat.sendMessage({ message: q });
    return { text: r.text, finish: r.candidates?.[0]?.finishReason, usage: r.usageMetadata };
  }
  const out = { text: '' };
  let n = 0;
  for await (const r of await chat.sendMessageStream({ message: q })) {
    n++;
    out.text += r.text ?? '';
    if (r.candidates?.[0]?.finishReason) out.finish = r.candidates[0].finishReason;
    if (r.usageMetadata) out.usage = r.usageMetadata;
  }
  Object.defineProperty(out, 'n', { value: n, enumerable: false });
  return out;
}

/**
 * merged returns a chat history with consecutive model contents joined into
 * one and their text parts concatenated (empty ones dropped): the form in
 * which the proxy compares turns (README, canonical form).
 */
function merged(history) {
  const out = [];
  for (const c of history) {
    const prev = out.at(-1);
    if (c.role === 'model' && prev?.role === 'model') {
      prev.parts.push(...c.parts);
    } else {
      out.push({ role: c.role, parts: [...c.parts] });
    }
  }
  for (const c of out) {
    const parts = [];
    for (const p of c.parts) {
      const text = Object.keys(p).length === 1 && typeof p.text === 'string';
      if (text && p.text === '') continue;
      if (text && parts.length > 0 && Object.keys(parts.at(-1)).length === 1 && typeof parts.at(-1).text === 'string') {
        parts[parts.length - 1] = { text: parts.at(-1).text + p.text };
      } else {
        parts.push(p);
      }
    }
    c.parts = parts;
  }
  return out;
}

/**
 * checkUpload asserts that the upstream requests of one conversation, from
 * index from in log, were: one new interaction, then continuations of the
 * previous one, each uploading one input step holding the new question.
 */
function checkUpload(log, from, questions) {
  const reqs = log.slice(from).filter((r) => r.method === 'POST');
  assert.equal(reqs.length, questions.length, `upstream requests: ${reqs.map((r) => r.path).join(', ')}`);
  let prevID;
  reqs.forEach((r, i) => {
    assert.match(r.path, /^\/v1(beta)?\/interactions(\?|$)/, `turn ${i + 1} went to ${r.path}`);
    const body = JSON.parse(r.body);
    if (i === 0) {
      assert.equal(body.previous_interaction_id, undefined, 'turn 1 must start a new interaction');
    } else {
      assert.ok(body.previous_interaction_id, `turn ${i + 1} is not a continuation: ${r.body}`);
      assert.notEqual(body.previous_interaction_id, prevID, `turn ${i + 1} continues the same interaction as turn ${i}`);
      assert.equal(body.input.length, 1, `turn ${i + 1} uploaded ${body.input.length} steps: ${r.body}`);
    }
    assert.ok(JSON.stringify(body.input.at(-1)).includes(questions[i]), `turn ${i + 1} input lacks its question: ${r.body}`);
    prevID = body.previous_interaction_id;
  });
}

describe('chats through gemini-proxy with Interactions continuation', { timeout: 60_000 }, () => {
  test('@google/genai chat, unary and streamed, one chunk per answer', async (t) => {
    // One chunk per streamed answer: the emulator's default answer counts
    // the contents it was sent, and the SDK re-sends a streamed answer as
    // one content per chunk, while a continued interaction holds it as one
    // model output (see the next test).
    const env = await stack(['--stream-chunk-bytes', '1048576']);
    t.after(() => env.stop());
    for (const mode of ['unary', 'stream', 'mixed']) {
      const streamed = (i) => mode === 'stream' || (mode === 'mixed' && i % 2 === 1);
      const from = env.upstream.length;
      const pc = genai(env.proxyURL).chats.create({ model: MODEL });
      const dc = genai(env.emulatorURL).chats.create({ model: MODEL });
      for (const [i, q] of QUESTIONS.entries()) {
        const got = await turn(pc, q, streamed(i));
        const want = await turn(dc, q, streamed(i));
        assert.ok(got.text.length > 0, `${mode} turn ${i + 1}: empty answer`);
        assert.deepEqual(got, want, `${mode} turn ${i + 1}: proxy answer differs from the direct run`);
      }
      assert.deepEqual(merged(pc.getHistory()), merged(dc.getHistory()), `${mode}: chat histories differ`);
      checkUpload(env.upstream, from, QUESTIONS);
    }
    const samples = await metricSamples(`${env.adminURL}/metrics`, IX_REQUESTS);
    assert.equal(sum(samples, { kind: 'continued' }), 3 * (QUESTIONS.length - 1), JSON.stringify(samples));
    assert.equal(sum(samples, { kind: 'started' }), 3, JSON.stringify(samples));
    assert.equal(sum(samples, { kind: 'full' }), 0, JSON.stringify(samples));
  });

  test('@google/genai sendMessageStream, many chunks per answer', async (t) => {
    // The SDK keeps one history content per streamed chunk and re-sends them
    // all; the proxy treats consecutive model contents as one turn, so the
    // chat still continues, and the upstream sees each earlier answer as
    // one model output: the emulator's answer reports 2*turn-1 contents.
    const env = await stack([]);
    t.after(() => env.stop());
    const chat = genai(env.proxyURL).chats.create({ model: MODEL });
    for (const [i, q] of QUESTIONS.entries()) {
      const got = await turn(chat, q, true);
      assert.ok(got.n > 2, `turn ${i + 1}: ${got.n} chunk(s), want several`);
      assert.equal(got.finish, 'STOP');
      assert.match(got.text, new RegExp(`has ${2 * i + 1} contents`), `turn ${i + 1}: ${got.text}`);
    }
    assert.ok(chat.getHistory().length > 2 * QUESTIONS.length, 'history should hold one content per chunk');
    checkUpload(env.upstream, 0, QUESTIONS);
  });

  test('@google/generative-ai startChat, unary and streamed (deprecated SDK)', async (t) => {
    // This SDK aggregates a stream one part per chunk and leaves the turn
    // out of the chat history when a part is an empty text: the proxy sends
    // it the final chunk of a translated stream without content (README).
    const env = await stack(['--stream-chunk-bytes', '1048576']);
    t.after(() => env.stop());
    const chat = (baseUrl) =>
      new GoogleGenerativeAI(API_KEY).getGenerativeModel({ model: MODEL }, { baseUrl }).startChat();
    const pc = chat(env.proxyURL);
    const dc = chat(env.emulatorURL);
    for (const [i, q] of QUESTIONS.entries()) {
      const send = async (c) => {
        if (i % 2 === 0) {
          const r = (await c.sendMessage(q)).response;
          return { text: r.text(), usage: r.usageMetadata };
        }
        const r = await c.sendMessageStream(q);
        for await (const _ of r.stream);
        const a = await r.response;
        return { text: a.text(), usage: a.usageMetadata };
      };
      const got = await send(pc);
      const want = await send(dc);
      assert.deepEqual(got, want, `turn ${i + 1}`);
      assert.equal((await pc.getHistory()).length, 2 * (i + 1), `turn ${i + 1}: history through the proxy`);
    }
    assert.deepEqual(await pc.getHistory(), await dc.getHistory());
    checkUpload(env.upstream, 0, QUESTIONS);
  });
});
