// Package reliability holds the tests that show the proxy is never worse
// than no proxy (issue 7). They run the real gemini-proxy binary, built
// once per test run (with the race detector when the tests have it), in
// front of the in-process emulator and, where it matters, a real
// redis-server, and check what a client and the upstream see:
//
//   - faults: upstream 429/500/503/400 passed through unchanged, slow
//     headers turned into a Gemini-shaped 504, slow streams never cut,
//     upstream and client disconnects mid-stream, an unreachable or
//     untrusted (TLS) upstream, Redis down, silent or flapping, and a
//     graceful shutdown under load;
//   - bad input: malformed JSON, odd Content-Types, gzip bodies, bodies
//     over the rewrite and hard limits, 10,000 parts, deep nesting,
//     invalid UTF-8, NUL bytes, duplicate keys, mixed snake_case and
//     camelCase, paths with "..", encoded or doubled slashes, and a Host
//     header pointing elsewhere, each compared with the same request sent
//     straight to the emulator;
//   - security: tenant isolation as a randomised differential test, a
//     recognisable canary key searched for in every log line, metrics
//     scrape, response and Redis dump the tests produce, and listeners
//     that serve only what they should;
//   - a soak (TestSoak), skipped unless SOAK_DURATION is set: mixed
//     traffic at a fixed rate with 10% faulty upstream answers, reporting
//     errors, added latency, RSS and goroutines per interval. `make soak`
//     runs it; RELIABILITY.md records the figures.
//
// The package has no non-test code; this file only documents it.
package reliability
