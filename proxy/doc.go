// Package proxy is the HTTP side of gemini-proxy: a transparent reverse
// proxy for the Gemini API (and Vertex AI paths) built on
// httputil.ReverseProxy.
//
// Every method and path passes through: request and response bodies are
// streamed byte-for-byte without buffering, query strings are kept, only
// hop-by-hop headers and the proxy's own X-Gemini-Proxy-* headers are
// dropped, and gzip responses stay compressed. SSE and JSON-array streams
// reach the client event by event. The only changes are:
//
//   - generateContent and streamGenerateContent bodies up to
//     RewriteOptions.MaxBodyBytes are rewritten by rewrite.Request when
//     rewriting is enabled; any error or panic forwards the original bytes,
//     and a rewritten request the upstream rejects with 400 or 5xx is
//     retried once with the original body (DESIGN §3 fail-open). The
//     request header X-Gemini-Proxy-Rewrite: off|dry-run controls one
//     request; the response header X-Gemini-Proxy-Report says what happened:
//     the rewrite report ("bytes=B->A; rule=N…"), optionally followed by
//     "; mode=dry-run", "; fallback", or one of "mode=off", "mode=disabled",
//     "skipped" (body too large, unknown length over the limit, a
//     Content-Encoding such as gzip: compressed request bodies are never
//     rewritten, RewriteOptions.MaxInflightBytes reached, the memory budget
//     spent, or a request over the rewriter's limits,
//     rewrite.ErrTooComplex; the access log's
//     rewrite_skipped says which) and "bytes=N->N; error".
//   - With Options.Interactions enabled, a generate request (Gemini API
//     paths only, rewrite mode on, no cachedContent) may be sent
//     as POST /{version}/interactions instead and the interaction
//     translated back by package upstream (interactions.go): only the new
//     turns with previous_interaction_id when the contents, after
//     rewriting, begin with an exchange the upstream stored for the same
//     tenant and model (a hash chain over canonical contents), or the
//     whole request as a new stored interaction; X-Gemini-Proxy-Session
//     stitches stateless requests into one. A 404, 400, 5xx or other
//     failure before the first byte reached the client sends the
//     generateContent request instead (once: two upstream calls at most);
//     401, 403, 429 and other 4xx return the upstream's error.
//   - With Options.ContextCache set, a rewritten generate body whose prefix
//     (systemInstruction, tools, toolConfig, leading contents) a live
//     proxy-made cachedContents entry of the same tenant, credential and
//     model holds names that cache instead of carrying the prefix (package
//     contextcache); caches are made in the background after the answer
//     that made them pay. A request whose cache the upstream rejects (403,
//     404, or 400 about the cache) is resent in full before any byte
//     reached the client.
//   - With Options.APIKey set, the client's key is replaced by ours.
//   - X-Goog-Upload-Url response headers are pointed at the proxy.
//
// Errors the proxy itself causes are answered in the API's own shape,
// {"error":{"code":…,"message":…,"status":…}}: 413 for a body over
// Options.MaxBodyBytes, 408 for a body that stalls longer than
// Options.BodyIdleTimeout, 503 UNAVAILABLE for a chunked body the memory
// budget cannot hold, 504 DEADLINE_EXCEEDED when the upstream's headers
// do not arrive in time, 502 UNAVAILABLE when it cannot be reached. A
// client that goes away is recorded as 499. Once response headers were
// sent, a failure cuts the connection (http.ErrAbortHandler); the proxy
// never writes a second response.
//
// A tap reads each generate response as it streams past and extracts the
// last usageMetadata, the modelVersion and the model's text, for metrics
// and for Options.OnExchange (and the usage and model of interactions a
// client creates itself); Options.OnServed gets the text of a 200
// response as soon as its body was read, before its last bytes reach the
// client, so that an answer is recorded as served before the client can
// quote it (TestServedRecordedBeforeClientHasIt). Options.ServedText
// instead receives that text piece by piece as the tap reads it, and with
// Options.ExchangeWithoutText the tap keeps no copy of the text at all
// (TestServedTextAsOnServed). A validating scanner
// reads each response object, and hands what it is not sure of to
// encoding/json. From a stream's second event on, an event that begins
// with the path to candidate 0's first text is read from that text on,
// in the state the path always leaves; from the third, an event whose
// tail is the previous event's but for the text and the usage counts is
// matched against that tail's template instead of scanned (tapjson.go,
// scanMemo; the tap without the memo is the oracle of tapmemo_test.go). A unary answer's text is read as its bytes pass, written
// to a ServedText writer that can take it back (cache.ServedRecorder)
// before the object says whether it keeps it, so the tap holds the object
// without its text (tapstream.go, TestTapStreamChunks). Each request produces one access log line with no
// prompt, response or credential in it. Tenants are HMACs of the caller's
// credential (see Options.TenantSecret), computed from pooled keyed HMAC
// states; no credential is kept after its request.
//
// Memory: a body read for rewriting, and the rewritten body sent in its
// place (rewrite.Options.Buffer), lie in pooled buffers of their
// power-of-two size class (bodypool.go), reused only once the transport,
// any fallback retry and every read in flight are done with it (net/http
// may read a request body after RoundTrip returned). One process-wide
// budget, Options.MemoryBudgetBytes (budget.go), bounds the buffers that
// grow with traffic: the taps' past 64 KiB each, the bodies being
// rewritten, buffered chunked bodies; when it is spent they do without
// (an event skipped, a rewrite skipped, a 503), and nothing waits.
//
// Savings are counted only for a rewritten body the upstream accepted
// with a 2xx (never after a fallback): bytes removed per rule, and tokens
// saved estimated as bytes removed (as the model reads them, escaped in a
// JSON string) × the model's tokens per byte, a ratio
// calibrated from the usageMetadata of rewritten requests, or from exact
// countTokens samples of the original request (Options.CountTokensSampleRate,
// rate-limited, off the request path); references and what un-flattening
// removed are counted by tokenizer runs instead (tokens.go,
// rewrite.Options.CountTokens). Dollars come from Options.Prices,
// by the response's modelVersion when the path names an alias or an
// unpriced model. The ledger (ledger.go, Options.Ledger) bills each
// answered request from its usage and, where the proxy changed what was
// sent, estimates the counterfactual bill of the client's own request with
// implicit caching, from per-conversation state (prefix hashes and token
// counts, never text); a holdout of conversations sent unrewritten
// measures the saving. To lay out a request it remembers, in process and
// per tenant, the contents it laid out recently (at most 32 MiB,
// ledgermemo.go), so that a turn re-sent is compared, not hashed again. See package metrics, "The dollar ledger". The same
// state tells the rewrite of a request it compacted what the previous
// request of the conversation sent (LedgerOptions.WeighCompaction,
// rewrite.Options.Sent), so that turns already sent are compacted only
// when that pays against the implicit cache's cached rate.
//
// AdminHandler serves /metrics, /healthz, /readyz and optionally pprof on
// a separate listener; the proxy listener serves only the Gemini API.
package proxy
