package rewrite_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

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

// TestSessionBlocks: the blocks of the body that is sent are those whose
// full copy is in it. A block of the new turn that Request turned into a
// reference is listed by Report.Blocks but not by SessionBlocks, since
// the upstream never saw that copy (issue 8 review). Nothing in the new
// turn is ever superseded (issue 13): two versions of a file sent to be
// compared are both listed, and both sent.
func TestSessionBlocks(t *testing.T) {
	opts := rewrite.DefaultOptions()
	v1, v2 := sessionFile(1), sessionFile(2)
	compare := sessionBody(t, "Old:\n```go a.go\n"+v1+"```\nNew:\n```go a.go\n"+v2+"```\nWhat changed?")
	rw, rep, err := rewrite.Request(compare, opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	if text := lastText(t, rw); !strings.Contains(text, v1) || !strings.Contains(text, v2) || len(rep.Replacements) > 0 {
		t.Fatalf("Request replaced a version the user compares: %v\n%s", rep.Replacements, text)
	}
	if got, err := rewrite.SessionBlocks(rw, opts); err != nil || !cmp.Equal(got, rep.Blocks) || len(got) != 2 {
		t.Errorf("SessionBlocks of two versions = %v, %v; want Report.Blocks %v", got, err, rep.Blocks)
	}
	// The same version again, in another wrapper: an unchanged reference.
	body := sessionBody(t, "Old:\n```go a.go\n"+v1+"```\nAs a tag:\n<file path=\"a.go\">\n"+v1+"</file>\nSame?")
	rw, rep, err = rewrite.Request(body, opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	var v1sum string
	for _, r := range rep.Replacements {
		if r.Rule == rewrite.RuleUnchanged {
			v1sum = r.SHA256
		}
	}
	if v1sum == "" || strings.Count(lastText(t, rw), v1) != 1 {
		t.Fatalf("Request did not replace the second copy of v1: %v", rep.Replacements)
	}
	hashes := func(bs []rewrite.Block) []string {
		var out []string
		for _, b := range bs {
			out = append(out, b.SHA256)
		}
		return out
	}
	if v1sum == "" || !slices.Contains(hashes(rep.Blocks), v1sum) {
		t.Fatalf("Report.Blocks = %v lacks the replaced copy %q; the test no longer shows the difference", hashes(rep.Blocks), v1sum)
	}
	got, err := rewrite.SessionBlocks(rw, opts)
	if err != nil {
		t.Fatal(err)
	}
	want := slices.DeleteFunc(hashes(rep.Blocks), func(h string) bool { return h == v1sum })
	if diff := cmp.Diff(want, hashes(got)); diff != "" {
		t.Errorf("SessionBlocks of the sent body, want Report.Blocks without the replaced copy (-want +got):\n%s", diff)
	}
	// On a body nothing replaced, it is Report.Blocks.
	plain := sessionBody(t, "```go a.go\n"+v2+"```\nOK?")
	_, rep2, err := rewrite.Request(plain, opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	got2, err := rewrite.SessionBlocks(plain, opts)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(rep2.Blocks, got2); diff != "" {
		t.Errorf("SessionBlocks differs from Report.Blocks (-want +got):\n%s", diff)
	}
	for _, bad := range []string{`{`, `{"contents":[]}`} {
		if _, err := rewrite.SessionBlocks([]byte(bad), opts); err == nil {
			t.Errorf("SessionBlocks(%s) = nil error", bad)
		}
	}
}
