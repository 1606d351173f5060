package cache_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	"github.com/gemini-proxy/gemini-proxy/cache"
	"github.com/gemini-proxy/gemini-proxy/rewrite"
)

func sha(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }

// TestBlockIndex feeds the index from real rewrite Reports, as the proxy
// does: only the blocks of each request's new turn count.
func TestBlockIndex(t *testing.T) {
	file := strings.Repeat("func f() { return }\n", 40) // 800 bytes
	doc := strings.Repeat("some document text\n", 40)
	small := "tiny\n"
	fileFence := "```go main.go\n" + file + "```"
	docTag := `<document path="a.txt">` + "\n" + doc + "</document>"
	body := func(turns ...string) []byte {
		type part struct {
			Text string `json:"text"`
		}
		type content struct {
			Role  string `json:"role"`
			Parts []part `json:"parts"`
		}
		var cs []content
		for i, t := range turns {
			cs = append(cs, content{Role: []string{"user", "model"}[i%2], Parts: []part{{Text: t}}})
		}
		b, err := json.Marshal(map[string]any{"contents": cs})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	fenced := "Here:\n\n" + fileFence + "\nFix it.\n```\n" + small + "```\n"
	tagged := docTag + "\nsummarise"
	s := newStore(t, cache.Options{})
	record := func(tenant string, b []byte) {
		t.Helper()
		_, rep, err := rewrite.Request(b, rewrite.DefaultOptions(), nil)
		if err != nil {
			t.Fatal(err)
		}
		s.RecordBlocks(tenant, rep.ConversationID(), rep.Blocks)
	}
	// Conversation 1: the file in turn 1, then again (twice) with a
	// document in turn 3; the history's copy of turn 1 does not count.
	record(tenantA, body(fenced))
	record(tenantA, body(fenced, "ok", fenced+tagged+"\n"+fenced))
	// Conversation 2 (another first turn) repeats the file.
	record(tenantA, body("Another chat.\n\n"+fileFence+"\n"))
	// Nothing to record.
	s.RecordBlocks(tenantA, "", nil)
	s.Wait()
	tests := []struct {
		name, tenant, block string
		wantOK              bool
		wantSeen, wantConvs int
	}{
		{"file", tenantA, fileFence, true, 3, 2},
		{"document tag", tenantA, docTag, true, 1, 1},
		{"small block", tenantA, small, false, 0, 0},
		{"other tenant", tenantB, fileFence, false, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, ok := s.Block(tt.tenant, sha(tt.block))
			if ok != tt.wantOK || b.Seen != tt.wantSeen || b.Conversations != tt.wantConvs {
				t.Errorf("Block = %+v, %v; want seen %d, conversations %d, %v", b, ok, tt.wantSeen, tt.wantConvs, tt.wantOK)
			}
			if ok && (b.Size != len(tt.block) || b.FirstSeen.IsZero()) {
				t.Errorf("Block = %+v, want size %d and a first-seen time", b, len(tt.block))
			}
		})
	}
}

// TestRecordBlocksSmall checks that blocks below MinBlockBytes are not
// indexed, whatever the caller passes.
func TestRecordBlocksSmall(t *testing.T) {
	s := newStore(t, cache.Options{})
	blocks := []rewrite.Block{
		{SHA256: sha("small"), Bytes: cache.MinBlockBytes - 1, Kind: "code"},
		{SHA256: sha("large"), Bytes: cache.MinBlockBytes, Kind: "image"},
	}
	s.RecordBlocks(tenantA, sha("conversation"), blocks)
	s.Wait()
	if _, ok := s.Block(tenantA, sha("small")); ok {
		t.Error("a block below MinBlockBytes was indexed")
	}
	if b, ok := s.Block(tenantA, sha("large")); !ok || b.Seen != 1 || b.Conversations != 1 || b.Size != cache.MinBlockBytes {
		t.Errorf("Block(large) = %+v, %v; want seen 1 in 1 conversation, size %d", b, ok, cache.MinBlockBytes)
	}
}
