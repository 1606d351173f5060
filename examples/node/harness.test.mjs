// Unit tests of the harness helpers that need no binary.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { parseSamples, sum } from './harness.mjs';

const exposition = `# HELP gemini_proxy_client_requests_total Requests by client SDK family.
# TYPE gemini_proxy_client_requests_total counter
gemini_proxy_client_requests_total{deprecated="false",sdk="google-genai-js"} 5
gemini_proxy_client_requests_total{deprecated="true",sdk="generative-ai-js"} 3
gemini_proxy_client_requests_total_other{sdk="google-genai-js"} 100
gemini_proxy_in_flight_requests 0
gemini_proxy_build_info{goversion="go1.26",version="a \\"quoted\\" one"} 1
`;

test('parseSamples', () => {
  const got = parseSamples(exposition, 'gemini_proxy_client_requests_total');
  assert.deepEqual(got, [
    { labels: { deprecated: 'false', sdk: 'google-genai-js' }, value: 5 },
    { labels: { deprecated: 'true', sdk: 'generative-ai-js' }, value: 3 },
  ]);
  assert.deepEqual(parseSamples(exposition, 'gemini_proxy_in_flight_requests'), [{ labels: {}, value: 0 }]);
  assert.deepEqual(parseSamples(exposition, 'gemini_proxy_build_info')[0].labels.version, 'a "quoted" one');
  assert.deepEqual(parseSamples(exposition, 'gemini_proxy_missing'), []);
});

test('sum', () => {
  const samples = parseSamples(exposition, 'gemini_proxy_client_requests_total');
  const cases = [
    [{}, 8],
    [{ deprecated: 'true' }, 3],
    [{ sdk: 'google-genai-js', deprecated: 'false' }, 5],
    [{ sdk: 'google-genai-js', deprecated: 'true' }, 0],
  ];
  for (const [match, want] of cases) {
    assert.equal(sum(samples, match), want, `sum(${JSON.stringify(match)})`);
  }
});
