package rewrite_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/gemini-proxy/gemini-proxy/rewrite"
)

// sessionFile is a source file large enough to be a block.
func sessionFile(version int) string {
	var b strings.Builder
	for i := range 40 {
		fmt.Fprintf(&b, "func f%d() int { return %d + %d }\n", i, i, version)
	}
	return b.String()
}

func sessionBody(t *testing.T, text string) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{"contents": []any{map[string]any{"role": "user", "parts": []any{map[string]any{"text": text}}}}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func lastText(t *testing.T, body []byte) string {
	t.Helper()
	var req struct {
		Contents []struct {
			Parts []struct {
				Text string `json:"text"`
			} `json:"parts"`
		} `json:"contents"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, body)
	}
	c := req.Contents[len(req.Contents)-1]
	var s strings.Builder
	for _, p := range c.Parts {
		s.WriteString(p.Text)
	}
	return s.String()
}

// TestElide: a block the session already sent becomes a session reference;
// a changed block, or one not sent, stays; nothing sent leaves the body
// as is.
func TestElide(t *testing.T) {
	opts := rewrite.DefaultOptions()
	v1, v2 := sessionFile(1), sessionFile(2)
	first := sessionBody(t, "Review this:\n```go main.go\n"+v1+"```\nIs it correct?")
	_, rep, err := rewrite.Request(first, opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Blocks) == 0 {
		t.Fatal("Request found no block in the first turn")
	}
	sent := map[string]bool{}
	for _, b := range rep.Blocks {
		sent[b.SHA256] = true
	}
	isSent := func(h string) bool { return sent[h] }

	tests := []struct {
		name     string
		text     string
		elided   bool
		wantKept string
	}{
		{"same file again", "Here it is again:\n```go main.go\n" + v1 + "```\nAdd tests.", true, "Add tests."},
		{"changed file", "New version:\n```go main.go\n" + v2 + "```\nBetter?", false, v2},
		{"file in a document tag", "<file path=\"main.go\">\n" + v1 + "</file>\nAnd now?", false, v1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := sessionBody(t, tt.text)
			rw, _, err := rewrite.Request(body, opts, nil)
			if err != nil {
				t.Fatal(err)
			}
			out, reps, err := rewrite.Elide(rw, opts, isSent)
			if err != nil {
				t.Fatal(err)
			}
			got := lastText(t, out)
			if !strings.Contains(got, tt.wantKept) {
				t.Errorf("Elide lost %q:\n%s", tt.wantKept, got)
			}
			hasRef := strings.Contains(got, "identical to the copy "+rewrite.SessionWhere+"]")
			if hasRef != tt.elided || (len(reps) > 0) != tt.elided {
				t.Errorf("reference in output = %v, replacements %d; want elided = %v:\n%s", hasRef, len(reps), tt.elided, got)
			}
			if tt.elided {
				if strings.Contains(got, v1) {
					t.Error("the re-sent file is still in the new turn")
				}
				r := reps[0]
				if r.Target != -1 || r.Rule != rewrite.RuleUnchanged || !sent[r.SHA256] || len(r.Reference) > 200 {
					t.Errorf("replacement = %+v, want target -1, rule unchanged, a sent hash", r)
				}
			}
			// Elide is idempotent and, with nothing sent, the identity.
			again, _, err := rewrite.Elide(out, opts, isSent)
			if err != nil || string(again) != string(out) {
				t.Errorf("Elide(Elide(x)) != Elide(x) (err %v)", err)
			}
			same, reps0, err := rewrite.Elide(rw, opts, func(string) bool { return false })
			if err != nil || string(same) != string(rw) || len(reps0) != 0 {
				t.Errorf("Elide with nothing sent changed the body (err %v)", err)
			}
		})
	}
}

func TestElideErrors(t *testing.T) {
	none := func(string) bool { return false }
	for _, body := range []string{`{`, `{"contents":[]}`} {
		if _, _, err := rewrite.Elide([]byte(body), rewrite.DefaultOptions(), none); err == nil {
			t.Errorf("Elide(%s) = nil error", body)
		}
	}
}
