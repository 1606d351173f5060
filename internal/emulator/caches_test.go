package emulator_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gemini-proxy/gemini-proxy/internal/emulator"
	"github.com/gemini-proxy/gemini-proxy/internal/testutil"
)

// TestCacheRules checks the cachedContents rules a proxy relies on: the
// error for an expired cache (404) versus an unknown, deleted or foreign
// one (403), per-model minimum sizes, and the binding of a cache to its
// model and key.
func TestCacheRules(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	_, ts := testutil.StartEmulator(t, emulator.Options{
		CacheMinTokens:        10,
		CacheMinTokensByModel: map[string]int{"gemini-2.5-pro": 100000},
		Now:                   func() time.Time { return now },
	})
	doc := strings.Repeat("A long document sentence for caching. ", 50)
	create := func(model, ttl string) (int, string) {
		t.Helper()
		body := fmt.Sprintf(`{"model":"models/%s","contents":[{"role":"user","parts":[{"text":%q}]}],"systemInstruction":{"parts":[{"text":"be brief"}]},"tools":[{"functionDeclarations":[{"name":"f"}]}],"ttl":%q}`, model, doc, ttl)
		res, raw := do(t, ts, "POST", "/v1beta/cachedContents", body, nil)
		var out struct{ Name string }
		json.Unmarshal(raw, &out)
		return res.StatusCode, out.Name
	}
	generate := func(model, cache string, hdr map[string]string) (int, string) {
		t.Helper()
		body := fmt.Sprintf(`{"contents":[{"role":"user","parts":[{"text":"q"}]}],"cachedContent":%q}`, cache)
		res, raw := do(t, ts, "POST", "/v1beta/models/"+model+":generateContent", body, hdr)
		return res.StatusCode, string(raw)
	}

	if code, _ := create("gemini-2.5-pro", "300s"); code != 400 {
		t.Errorf("create below gemini-2.5-pro's minimum: status %d, want 400", code)
	}
	code, name := create("gemini-2.5-flash", "300s")
	if code != 200 || name == "" {
		t.Fatalf("create: status %d, name %q", code, name)
	}
	if code, body := generate("gemini-2.5-flash", name, nil); code != 200 {
		t.Fatalf("generate with cache: %d %s", code, body)
	}
	for _, tc := range []struct {
		name  string
		model string
		hdr   map[string]string
		code  int
		want  string
	}{
		{"other key", "gemini-2.5-flash", map[string]string{"x-goog-api-key": "another-key"}, 403, "PERMISSION_DENIED"},
		{"other model", "gemini-2.5-pro", nil, 400, "has to be the same"},
	} {
		if code, body := generate(tc.model, name, tc.hdr); code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %d %s, want %d %s", tc.name, code, body, tc.code, tc.want)
		}
	}

	// Expired: 404 NOT_FOUND for its owner, 403 for anyone else.
	now = now.Add(301 * time.Second)
	if code, body := generate("gemini-2.5-flash", name, nil); code != 404 || !strings.Contains(body, "NOT_FOUND") {
		t.Errorf("expired cache: %d %s, want 404 NOT_FOUND", code, body)
	}
	if code, _ := generate("gemini-2.5-flash", name, map[string]string{"x-goog-api-key": "another-key"}); code != 403 {
		t.Errorf("expired cache of another key: %d, want 403", code)
	}
	res, _ := do(t, ts, "PATCH", "/v1beta/"+name, `{"ttl":"600s"}`, nil)
	if res.StatusCode != 404 {
		t.Errorf("PATCH expired cache: %d, want 404", res.StatusCode)
	}

	// Deleted: 403, like an id that never existed.
	_, name2 := create("gemini-2.5-flash", "300s")
	if res, _ := do(t, ts, "DELETE", "/v1beta/"+name2, "", nil); res.StatusCode != 200 {
		t.Fatalf("DELETE: %d", res.StatusCode)
	}
	if code, _ := generate("gemini-2.5-flash", name2, nil); code != 403 {
		t.Errorf("deleted cache: %d, want 403", code)
	}
	if code, _ := generate("gemini-2.5-flash", "cachedContents/never", nil); code != 403 {
		t.Errorf("unknown cache: %d, want 403", code)
	}
}
