package emulator_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/gemini-proxy/gemini-proxy/internal/emulator"
	"github.com/gemini-proxy/gemini-proxy/internal/testutil"
)

// TestImplicitPrefixInsideContent checks that the implicit-cache model
// matches a prompt prefix, not whole contents: shared leading parts count,
// and so do the shared runs of the first text part that differs.
func TestImplicitPrefixInsideContent(t *testing.T) {
	srv, ts := testutil.StartEmulator(t, emulator.Options{ImplicitCacheMinTokens: 100})
	doc := strings.Repeat("stable context sentence. ", 100)
	body := func(parts ...string) string {
		var ps []map[string]any
		for _, p := range parts {
			ps = append(ps, map[string]any{"text": p})
		}
		b, _ := json.Marshal(map[string]any{"contents": []any{map[string]any{"role": "user", "parts": ps}}})
		return string(b)
	}
	key := 0
	cached := func(first, second string) int {
		t.Helper()
		key++
		hdr := map[string]string{"x-goog-api-key": "key-" + strings.Repeat("k", key)}
		for _, b := range []string{first, second} {
			if resp, out := do(t, ts, http.MethodPost, genPath, b, hdr); resp.StatusCode != 200 {
				t.Fatalf("status %d %s", resp.StatusCode, out)
			}
		}
		rs := srv.Received()
		return rs[len(rs)-1].Usage.CachedContentTokenCount
	}
	role := 1
	tests := []struct {
		name          string
		first, second string
		want          int
	}{
		{"question first: nothing shared", body("Why A?\n" + doc), body("How B?\n" + doc), 0},
		{"document part first", body(doc, "Why A?"), body(doc, "How B?"), role + emulator.CountTokens(doc)},
		{"document first in one part", body(doc + "Why A?"), body(doc + "How B?"), role + emulator.CountTokens(doc)},
		// "questionA" and "questionB" are different words: the cut word is
		// not shared.
		{"difference inside a word", body(doc + "questionA"), body(doc + "questionB"), role + emulator.CountTokens(doc)},
		{"same request", body(doc, "Why A?"), body(doc, "Why A?"), role + emulator.CountTokens(doc) + emulator.CountTokens("Why A?")},
		{"split parts differ from one part", body(doc + "Why A?"), body(doc, "Why A?"), role + emulator.CountTokens(strings.TrimSuffix(doc, " "))},
		{"below the minimum", body("Why A?\n" + doc[:200]), body("Why A?\n" + doc[:200] + "more"), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := cached(tt.first, tt.second); got != tt.want {
				t.Errorf("cached = %d, want %d", got, tt.want)
			}
		})
	}
}
