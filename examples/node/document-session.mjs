// The shared checks of the framework examples whose naive session re-sends
// a document: every user message attaches the same document and the whole
// history goes up on each turn. Through the proxy the upstream must receive
// the document once per request, each answer must be the upstream's answer
// to exactly what the proxy sent, and turn 1 (nothing to deduplicate) must
// equal a run straight against the emulator.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { metricSamples, occurrences, replayText, startRecorded, sum } from './harness.mjs';

export const MODEL = 'gemini-2.5-flash';
/** Any non-empty key works: the emulator checks only that one is present. */
export const API_KEY = 'e2e-test-key';
export const QUESTIONS = ['How many arrivals were logged on day 3?', 'And departures on day 5?', 'Which day had the highest tide?'];
/** A document of our own, long enough to be worth a reference. */
export const DOC = Array.from(
  { length: 40 },
  (_, i) =>
    `Day ${i + 1}: the harbour log records ${(i * 7) % 13} arrivals and ${(i * 5) % 11} departures; high tide ${(i * 3) % 9} m.`,
).join('\n');
/** A line of DOC that occurs once per copy. */
const MARKER = 'Day 17: the harbour log records';

/** userMessage is the text of the user message that asks question q. */
export function userMessage(q) {
  return `Here is the harbour log:\n\n${DOC}\n\n${q}`;
}

/** texts returns every text part of a generateContent request body, joined. */
function texts(body) {
  return JSON.parse(body)
    .contents.flatMap((c) => c.parts.map((p) => p.text ?? ''))
    .join('\n');
}

/**
 * describeDocumentSession defines the suite for one framework. chat(baseUrl)
 * runs the session of QUESTIONS against a server root URL and returns one
 * {text, report} per turn (report: the X-Gemini-Proxy-Report header, or
 * undefined when the framework does not expose response headers). extra,
 * if given, is called with the environment to add framework-specific tests.
 */
export function describeDocumentSession(title, chat, extra) {
  describe(title, { timeout: 60_000 }, () => {
    const env = {};
    let viaProxy;
    let direct;

    before(async () => {
      Object.assign(env, await startRecorded());
      viaProxy = await chat(env.proxyURL);
      direct = await chat(env.emulatorURL);
    });

    after(async () => {
      await env.stop?.();
    });

    test('turn 1 answers as without the proxy', () => {
      assert.ok(viaProxy[0].text.length > 0);
      assert.equal(viaProxy[0].text, direct[0].text);
    });

    test('every answer is the upstream answer to what the proxy sent', async () => {
      assert.equal(env.upstream.length, QUESTIONS.length, env.upstream.map((r) => r.path).join(', '));
      for (const [i, req] of env.upstream.entries()) {
        assert.match(req.path, new RegExp(`/models/${MODEL}:generateContent`));
        assert.equal(viaProxy[i].text, await replayText(env.emulatorURL, req, API_KEY), `turn ${i + 1}`);
      }
    });

    test('the upstream receives the document once per request', () => {
      for (const [i, req] of env.upstream.entries()) {
        assert.equal(occurrences(texts(req.body), MARKER), 1, `turn ${i + 1} upload: ${req.body.slice(0, 400)}`);
      }
    });

    test('X-Gemini-Proxy-Report shows the shrinking uploads', (t) => {
      if (viaProxy[0].report === undefined) return t.skip('the framework does not expose response headers');
      assert.match(viaProxy[0].report, /^bytes=(\d+)->\1$/);
      for (const { report } of viaProxy.slice(1)) {
        const m = /^bytes=(\d+)->(\d+);/.exec(report);
        assert.ok(m && Number(m[2]) < Number(m[1]) / 1.5, `report ${report}`);
      }
    });

    test('metrics count the replacements', async () => {
      const samples = await metricSamples(`${env.adminURL}/metrics`, 'gemini_proxy_rewrite_replacements_total');
      assert.ok(sum(samples, {}) >= QUESTIONS.length - 1, `samples: ${JSON.stringify(samples)}`);
    });

    extra?.(env);
  });
}
