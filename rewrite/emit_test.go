package rewrite

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestEmitEscapesNames checks that a reference naming a file with a quote
// or a backslash is escaped in the output, and one without is not.
func TestEmitEscapesNames(t *testing.T) {
	for _, name := range []string{`a"b.go`, `dir\b.go`, `plain.go`} {
		doc := "<file path='" + name + "'>\n" + strings.Repeat("func a() { return 1 }\n", 40) + "</file>"
		contents := []map[string]any{
			{"role": "user", "parts": []any{map[string]any{"text": doc + "\nWhat is it?"}}},
			{"role": "model", "parts": []any{map[string]any{"text": "A function."}}},
			{"role": "user", "parts": []any{map[string]any{"text": doc + "\nAnd now?"}}},
		}
		body, err := json.Marshal(map[string]any{"contents": contents})
		if err != nil {
			t.Fatal(err)
		}
		out, rep, err := Request(body, DefaultOptions(), nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Replacements) != 1 {
			t.Fatalf("%s: %d replacements, want 1", name, len(rep.Replacements))
		}
		var got struct {
			Contents []struct {
				Parts []struct{ Text string } `json:"parts"`
			} `json:"contents"`
		}
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("%s: output is not JSON: %v\n%s", name, err, out)
		}
		ref := rep.Replacements[0].Reference
		if want := ref + "\nAnd now?"; got.Contents[2].Parts[0].Text != want {
			t.Errorf("%s: turn 3 = %q, want %q", name, got.Contents[2].Parts[0].Text, want)
		}
		if !strings.Contains(ref, name) {
			t.Errorf("%s: reference %q does not name the file", name, ref)
		}
		if rep.BytesAfter != len(out) {
			t.Errorf("%s: BytesAfter = %d, want %d", name, rep.BytesAfter, len(out))
		}
	}
}
