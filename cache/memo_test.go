package cache_test

import (
	"bytes"
	"strconv"
	"strings"
	"testing"

	"github.com/gemini-proxy/gemini-proxy/cache"
	"github.com/gemini-proxy/gemini-proxy/rewrite"
)

// The Verifier the proxy passes to the rewriter must also be its Memo, or
// the per-conversation analysis is never reused.
var _ rewrite.Memo = (*cache.Verifier)(nil)

// TestVerifierMemo rewrites a growing conversation through a tenant's
// Verifier: the analysis of earlier turns lands in the conversations area
// (hits on the second request), outputs equal those without a memo, and
// another tenant never hits.
func TestVerifierMemo(t *testing.T) {
	s, err := cache.New(cache.Options{MaxBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	file := strings.Repeat("func f() { return 42 } // a line of code that repeats\n", 40)
	turn := func(role, text string) string {
		return `{"role":"` + role + `","parts":[{"text":` + strconv.Quote(text) + `}]}`
	}
	body2 := `{"contents":[` + turn("user", "```go a.go\n"+file+"```\nExplain.") + `,` + turn("model", "It returns 42.") + `,` + turn("user", "```go a.go\n"+file+"```\nAnd now?") + `]}`
	body3 := strings.TrimSuffix(body2, "]}") + `,` + turn("model", "Still 42.") + `,` + turn("user", "```go a.go\n"+file+"```\nOnce more.") + `]}`

	opts := rewrite.DefaultOptions()
	for _, body := range []string{body2, body3} {
		want, _, err := rewrite.Request([]byte(body), opts, nil)
		if err != nil {
			t.Fatal(err)
		}
		got, _, err := rewrite.Request([]byte(body), opts, s.Verifier("tenant-a"))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("rewrite with the cache's memo differs from rewrite without one:\n got %s\nwant %s", got, want)
		}
		s.Wait()
	}
	hits := func() uint64 {
		for _, a := range s.Stats().Areas {
			if a.Area == cache.AreaConversations {
				return a.Hits
			}
		}
		t.Fatal("no conversations area in Stats")
		return 0
	}
	if hits() == 0 {
		t.Errorf("the second request reused no analysis of the first (conversations hits = 0)")
	}
	before := hits()
	if _, _, err := rewrite.Request([]byte(body3), opts, s.Verifier("tenant-b")); err != nil {
		t.Fatal(err)
	}
	if got := hits(); got != before {
		t.Errorf("tenant-b hit tenant-a's analysis: hits %d -> %d", before, got)
	}
}
