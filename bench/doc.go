// Package bench measures what gemini-proxy saves and what it costs
// (`gemini-proxy bench`).
//
// # Savings
//
// Sessions (Sessions) are scripts of client behaviour built from the real
// documents in corpus/ (see corpus/README.md for origins and licences):
// ask mode re-sending a file every turn, edit mode where the client applies,
// discards, undoes and edits by hand, flattened transcripts in four
// languages, re-sent secondary context, repeated images, a 50-turn session,
// streaming, and control sessions that must pass unchanged. Each Turn holds
// the request a naive client sends and the request an ideal stateful client
// would send for the same step: native user/model turns, each active version
// of each document once, every other copy replaced by a reference in the
// proxy's format (rewrite/doc.go), so of the same size as the proxy's.
// Answers are scripted (Replies): the emulator answers the n-th request of
// an API key with the n-th answer of the session registered for that key, so
// the naive, proxied and ideal replays see the same conversation.
// RunSavings replays every session naive (direct), through the proxy and
// ideal, and reads prompt and implicit-cache tokens from usageMetadata.
//
// # Overhead
//
// RunOverhead sends the same requests (small, medium and large; unary and
// SSE) at several concurrencies to each Target in turn, alternating the
// targets batch by batch so that every figure is a ratio measured side by
// side, and reads the CPU time and resident memory of targets that run as
// separate processes from /proc.
//
// # Replay
//
// Replay runs recorded requests (the JSON lines written by
// `serve --record`) through rewrite.Request and reports per model what the
// proxy would have saved.
package bench
