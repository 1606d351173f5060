package cache_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	"github.com/gemini-proxy/gemini-proxy/cache"
)

func TestBlockIndex(t *testing.T) {
	file := strings.Repeat("func f() { return }\n", 40) // 800 bytes
	doc := strings.Repeat("some document text ", 40)
	small := "tiny\n"
	body := func(first string, turns ...string) []byte {
		type part struct {
			Text string `json:"text"`
		}
		type content struct {
			Role  string `json:"role"`
			Parts []part `json:"parts"`
		}
		var cs []content
		for i, t := range append([]string{first}, turns...) {
			cs = append(cs, content{Role: []string{"user", "model"}[i%2], Parts: []part{{Text: t}}})
		}
		b, err := json.Marshal(map[string]any{"contents": cs})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	fenced := "Here:\n```go main.go\n" + file + "```\nFix it.\n```\n" + small + "```\n"
	tagged := `<document path="a.txt">` + doc + `</document> summarise`
	s := newStore(t, cache.Options{})
	// Conversation 1: two requests, the second repeats the block twice.
	s.RecordRequest(tenantA, body(fenced))
	s.RecordRequest(tenantA, body(fenced, "ok", fenced+tagged))
	// Conversation 2 (another first turn) repeats the file.
	s.RecordRequest(tenantA, body("Another chat.\n\n~~~\n"+file+"~~~"))
	s.RecordRequest(tenantA, []byte("not json"))
	s.Wait()
	sum := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	tests := []struct {
		name, tenant, block string
		wantOK              bool
		wantSeen, wantConvs int
	}{
		{"file", tenantA, file, true, 3, 2},
		{"document tag", tenantA, doc, true, 1, 1},
		{"small block", tenantA, small, false, 0, 0},
		{"other tenant", tenantB, file, false, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, ok := s.Block(tt.tenant, sum(tt.block))
			if ok != tt.wantOK || b.Seen != tt.wantSeen || b.Conversations != tt.wantConvs {
				t.Errorf("Block = %+v, %v; want seen %d, conversations %d, %v", b, ok, tt.wantSeen, tt.wantConvs, tt.wantOK)
			}
			if ok && (b.Size != len(tt.block) || b.FirstSeen.IsZero()) {
				t.Errorf("Block = %+v, want size %d and a first-seen time", b, len(tt.block))
			}
		})
	}
}
