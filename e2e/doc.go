// Package e2e holds end-to-end tests that drive the proxy with the real Go
// SDK (google.golang.org/genai) in front of the project's Gemini API
// emulator, all in-process on loopback (httptest).
//
// Each test builds two identical stacks (a fresh emulator and a proxy in
// front of it) and plays the same calls once directly against an emulator
// and once through a proxy, so that the emulators start from the same
// state and hand out the same ids. The tests cover:
//
//   - SDK parity: every SDK surface (generate, stream, chats, countTokens,
//     caches, files with resumable uploads, interactions, embeddings,
//     models) gives the same results through the proxy, and the emulator
//     receives the client's bytes unchanged where nothing repeats;
//   - rewriting: scripted naive sessions (ask mode, edit mode, a flattened
//     transcript, repeated images, streaming) reach the model
//     deduplicated, with references that hash to the replaced text, and
//     the client gets the same answers as without the proxy;
//   - structured payloads (issue 15, editor_test.go): the editor session
//     of the guide the product imitates, whose turns are JSON texts
//     (ask, apply, discard, hand edit, undo over bufio/scan.go), and an
//     agent that reads that file three times through a read_file tool;
//     the client gets the same responses as without the proxy, and with
//     structuredDedup set the upstream bytes shrink, each JSON text stays
//     valid with its keys in order, and each repeated read is a
//     reference;
//   - the savings target of DESIGN §3, measured with the emulator's
//     usageMetadata against an ideal stateful client;
//   - the issue #8 figures (TestUpstreamStateFigures): bytes uploaded,
//     prompt tokens at the cached and full rates and dollars for each
//     upstream-state mode off and on, printed as a Markdown table;
//   - control sessions that must pass unchanged (function calling with
//     thought signatures, pinned context, cachedContent).
//
// The package has no non-test API. Run it with
//
//	go test -race -v ./e2e/
package e2e
