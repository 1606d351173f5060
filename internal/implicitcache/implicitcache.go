// Package implicitcache holds what is known of Gemini's implicit caching
// per model: the smallest shared prompt prefix, in tokens, that Gemini
// bills at the cached rate. The emulator models Gemini with it, and the
// proxy's ledger estimates the naive request's bill with it, so that the
// two can never disagree on a threshold.
package implicitcache

import "strings"

// MinTokens are the per-model minimum shared prefixes, in tokens, by model
// id prefix (the longest matching prefix wins; callers resolve aliases
// first). Zero means implicit caching is off for the model. Sources
// (shared/gemini-api.md §6.1 and shared/gemini-recordings):
//   - gemini-2.5-flash 512: recorded. unary-2.5-flash-implicit-cache
//     shows 594 cached tokens of an 859-token prompt, below every
//     documented minimum (1,024, later 2,048); 512 is a round value below
//     the recorded hit.
//   - gemini-2.5-pro 2,048, gemini-3.1-pro 4,096, gemini-3.5/3.6/3.7/3.8
//     flash 4,096: documented (caching page, revision of 2026-07-07).
//   - gemini-3-flash-preview 1,024, gemini-3-pro-preview 4,096:
//     documented (revision of early 2026; the later one omits them).
//   - gemini-2.0 and gemini-1.5 0 (off): documented ("on by default for
//     Gemini 2.5 and newer").
//   - any other model 2,048: assumed.
//
// Do not modify.
var MinTokens = map[string]int{
	"gemini-2.5-flash":       512,
	"gemini-2.5-flash-lite":  2048,
	"gemini-2.5-pro":         2048,
	"gemini-3-flash-preview": 1024,
	"gemini-3-pro-preview":   4096,
	"gemini-3.1-pro":         4096,
	"gemini-3.5-flash":       4096,
	"gemini-3.6-flash":       4096,
	"gemini-3.7-flash":       4096,
	"gemini-3.8-flash":       4096,
	"gemini-2.0":             0,
	"gemini-1.":              0,
	"":                       2048,
}

// Min returns the minimum shared prefix of model (a concrete model id,
// lower case, without "models/"), by the longest prefix in MinTokens; 0
// means off.
func Min(model string) int {
	best, n := -1, MinTokens[""]
	for prefix, v := range MinTokens {
		if len(prefix) > best && strings.HasPrefix(model, prefix) {
			best, n = len(prefix), v
		}
	}
	return n
}
