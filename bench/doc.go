// Package bench measures what gemini-proxy saves and what it costs
// (`gemini-proxy bench`).
//
// # Savings
//
// Sessions (Sessions) are scripts of client behaviour built from real
// documents read at run time (LoadCorpus: Go's sources from the Go
// installation, a module's source file from the module cache, licence
// texts from /usr/share/common-licenses; the repository keeps no copy, and
// the bench prints the versions it read):
// ask mode re-sending a file every turn, edit mode where the client applies,
// discards, undoes and edits by hand, flattened transcripts in four
// languages and in seven more layouts (layouts.go: labels glued to an
// opening fence, full-width colon, bracketed upper case, Markdown headings,
// chat-template tokens, XML turn tags, LangChain's Human:/AI:), two
// documents that look alike but are both current (a diff question, staging
// and production configs), re-sent secondary context, repeated images, a
// 50-turn session, streaming, control sessions that must pass unchanged,
// a stateless client that sends its question before the same file every
// time, and structured payloads (editor.go, issue 15): an editor assistant
// whose turns are JSON texts in the shape of the guide the product
// imitates, whose ideal is that guide's request builder
// (../shared/SEED-BUILDER.md: the active source once, every other copy its
// SHA-256), and an agent that reads one file three times through a tool,
// whose ideal sends each repeated read as a reference. Each Turn holds the request a naive client sends and the
// request an ideal stateful client would send for the same step: native
// user/model turns, each active version of each document once (both
// documents of a two-document session in full), every other copy replaced
// by a reference in the proxy's format (rewrite/doc.go), so of the same
// size as the proxy's.
// Answers are scripted (Replies): the emulator answers the n-th request of
// an API key with the n-th answer of the session registered for that key, so
// the naive, proxied and ideal replays see the same conversation.
// RunSavings replays every session naive (direct), through the proxy and
// ideal, and reads prompt and implicit-cache tokens from usageMetadata;
// given the proxy's admin URL it also counts, per session, the requests
// that failed the rewrite audit (AuditMetric on /metrics). Check holds the
// targets; sessions that exercise a defect whose fix has not landed are
// pending (Pending): their misses are listed, not failed, and a pending
// session that meets its targets fails Check until its entry is removed.
// `gemini-proxy bench` replays them once more through a proxy that differs
// only in rewrite.stable_prefix (StablePrefix, WriteStablePrefixTable), and
// with --check fails if the option costs any session implicit-cache tokens
// or adds prompt tokens (CheckStablePrefix).
//
// # Overhead
//
// RunOverhead sends the same requests (Sizes: small about 1 KB, medium
// exactly 70 KB in six turns, large exactly 1 MB; unary and SSE) at several
// concurrencies to each Target in turn, alternating the targets batch by
// batch (the first target rotates each round), so that every figure, and
// each ratio to the plain Go proxy, comes from batches measured side by
// side; it reads the CPU time and resident memory of targets that run as
// separate processes from /proc.
//
// The upstream of the overhead measurement is FakeGemini, not the
// emulator: a fixed-cost fake that drains the body and answers the same
// recorded-shape GenerateContentResponse or SSE stream every time. The
// issue's targets come from other gateways measured in front of such a
// fake; the emulator parses, validates and tokenizes every body (about
// 220 ms p50 for 1 MB), so in front of it the medium and large cells
// measured the emulator, and the rewriting proxy, which sends it smaller
// bodies, looked faster than direct. `gemini-proxy bench` runs the fake as
// its own child process, like the proxies, so that its CPU time is its own
// and it does not share a Go scheduler with the load generator; the
// emulator stays the upstream of the savings measurement, which needs its
// token counts.
//
// # Replay
//
// Replay runs recorded requests (the JSON lines written by
// `serve --record`) through rewrite.Request and reports per model what the
// proxy would have saved.
package bench
