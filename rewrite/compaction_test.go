package rewrite

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// compactionSession returns the contents of a conversation as the naive
// client sends its last request: every user turn re-sends list.go (the
// version of that turn) and, when big is set, a file three times its
// size after it, and asks a question; every model turn answers briefly.
func compactionSession(versions []int, big bool) []string {
	var turns []string
	bar := sourceFile(1200, -1)
	for i, v := range versions {
		text := "Files:\n\n```go list.go\n" + sourceFile(400, v) + "```\n"
		if big {
			text += "\n```go bar.go\n" + bar + "```\n"
		}
		turns = append(turns, text+fmt.Sprintf("\nQuestion %d: what does handle13 do?", i+1))
		if i < len(versions)-1 {
			turns = append(turns, fmt.Sprintf("Answer %d: it serves one item.", i+1))
		}
	}
	return turns
}

// contentsOf returns the contents of a request body, each as raw JSON.
func contentsOf(t *testing.T, body []byte) []json.RawMessage {
	t.Helper()
	var req struct {
		Contents []json.RawMessage `json:"contents"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		t.Fatal(err)
	}
	return req.Contents
}

// TestCompactionWeighsSentPrefix checks Options.Sent: the previous request
// (every turn but the last two) went out as the rewrite with
// CompactSuperseded off sends it; the new user turn edits list.go, so
// compaction would supersede the copy in the first turn, which breaks the
// cached prefix there. With a large file after it in that turn (most of
// the prefix), compaction removes less than the prefix it breaks is worth
// and the rewrite keeps the prefix: the output is the rewrite with
// compaction off, and its sent contents are those of the previous
// request's rewrite. Without the large file compaction pays. An edit in
// the previous turns' future only (the sent prefix holds one version)
// changes nothing sent. Every output passes the audit.
func TestCompactionWeighsSentPrefix(t *testing.T) {
	tests := []struct {
		name     string
		versions []int
		big      bool
		sent     int // contents of the previous request
		want     *Compaction
	}{
		{"breaking a large prefix does not pay", []int{-1, -1, -1, 5}, true, 5,
			&Compaction{Kept: true, Reason: CompactionKeepsPrefix, Turns: 3}},
		{"removing most of the prefix pays", []int{-1, -1, -1, 5}, false, 5,
			&Compaction{Reason: CompactionPays, Turns: 3}},
		{"the change is after the prefix", []int{-1, 5, -1}, true, 1,
			&Compaction{Reason: CompactionAfterPrefix}},
		{"nothing to compact", []int{-1, -1, -1}, true, 3, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			turns := compactionSession(tt.versions, tt.big)
			body := chat(turns...)
			prev := chat(turns[:tt.sent]...)
			off := DefaultOptions()
			off.CompactSuperseded = false
			sentBody, _, err := Request(prev, off, nil)
			if err != nil {
				t.Fatal(err)
			}
			opts := DefaultOptions()
			opts.Sent = &SentPrefix{Contents: tt.sent, CachedRatio: 0.1}
			out, rep, err := Request(body, opts, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := Audit(body, out, rep); err != nil {
				t.Errorf("audit: %v", err)
			}
			if err := checkInvariants(body, out, rep, opts, nil); err != nil {
				t.Errorf("invariants: %v", err)
			}
			got := rep.Compaction
			if (got == nil) != (tt.want == nil) {
				t.Fatalf("Compaction = %+v, want %+v", got, tt.want)
			}
			if got != nil && (got.Kept != tt.want.Kept || got.Reason != tt.want.Reason || got.Turns != tt.want.Turns) {
				t.Errorf("Compaction = %+v, want %+v", got, tt.want)
			}
			if got != nil && got.Reason != CompactionAfterPrefix && (got.RemovedBytes <= 0 || got.PrefixBytes <= got.RemovedBytes/2) {
				t.Errorf("Compaction = %+v: removed and prefix bytes not measured", got)
			}
			noSent, noRep, err := Request(body, DefaultOptions(), nil)
			if err != nil {
				t.Fatal(err)
			}
			withOff, _, err := Request(body, off, nil)
			if err != nil {
				t.Fatal(err)
			}
			kept := got != nil && got.Kept
			switch want := string(noSent); {
			case kept:
				want = string(withOff)
				fallthrough
			default:
				if string(out) != want {
					t.Errorf("output is not the rewrite with compaction %v", !kept)
				}
			}
			if kept && rep.Compacted() || !kept && rep.Compacted() != noRep.Compacted() {
				t.Errorf("Compacted() = %v, kept %v", rep.Compacted(), kept)
			}
			if kept {
				// The sent prefix is as it was sent.
				oc, sc := contentsOf(t, out), contentsOf(t, sentBody)
				for i := range sc {
					if string(oc[i]) != string(sc[i]) {
						t.Errorf("content %d differs from what the previous request sent", i)
					}
				}
				if strings.Contains(string(out), "[superseded:") {
					t.Error("a kept prefix holds a superseded reference")
				}
			}
		})
	}
}

// TestCompactionSentNeverLoses checks over sessions of every shape the
// corpus of this file makes that the output with Options.Sent is either
// the rewrite with compaction on or off, never anything else, and that it
// passes the audit, for every prefix length and price ratio.
func TestCompactionSentNeverLoses(t *testing.T) {
	for _, big := range []bool{false, true} {
		for _, versions := range [][]int{{-1, 3, -1, 3}, {1, 2, 3, 4}, {-1, -1, 2, -1, -1}} {
			turns := compactionSession(versions, big)
			body := chat(turns...)
			on, _, err := Request(body, DefaultOptions(), nil)
			if err != nil {
				t.Fatal(err)
			}
			offOpts := DefaultOptions()
			offOpts.CompactSuperseded = false
			off, _, err := Request(body, offOpts, nil)
			if err != nil {
				t.Fatal(err)
			}
			for sent := 0; sent <= len(turns); sent++ {
				for _, ratio := range []float64{0, 0.1, 0.25, 1} {
					opts := DefaultOptions()
					opts.Sent = &SentPrefix{Contents: sent, CachedRatio: ratio}
					out, rep, err := Request(body, opts, nil)
					if err != nil {
						t.Fatal(err)
					}
					if string(out) != string(on) && string(out) != string(off) {
						t.Errorf("versions %v big %v sent %d ratio %v: the output is neither compacted nor kept", versions, big, sent, ratio)
					}
					if err := Audit(body, out, rep); err != nil {
						t.Errorf("versions %v big %v sent %d ratio %v: audit: %v", versions, big, sent, ratio, err)
					}
					if c := rep.Compaction; c != nil && c.Kept != (string(out) == string(off) && string(on) != string(off)) {
						t.Errorf("versions %v big %v sent %d ratio %v: Kept = %v", versions, big, sent, ratio, c.Kept)
					}
				}
			}
		}
	}
}
