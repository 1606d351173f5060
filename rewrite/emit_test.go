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

// TestEmitRawOffsets checks copies of a text whose raw escaping differs
// while the decoded texts agree (the segmentation of one is reused for the
// other): the output is that of the exhaustive path, and each reference
// replaces its own copy's raw bytes.
func TestEmitRawOffsets(t *testing.T) {
	file := "```go a.go\n" + strings.Repeat("func a() { return \"x\" }\n", 30) + "```\n"
	raw, err := json.Marshal(file)
	if err != nil {
		t.Fatal(err)
	}
	plain := string(raw[1 : len(raw)-1])
	variants := []string{
		plain,
		strings.Replace(plain, "func", `\u0066unc`, 1), // inside the block, early
		strings.Replace(plain, `x\"`, `\u0078\"`, 1),   // inside the block
		plain[:len(plain)-8] + `\u0060\u0060\u0060\n`,  // at its end
		strings.Replace(plain, "a.go", `a\/b.go`, 1),   // a name that differs
		plain + `\u0051`, // after it
		strings.Replace(plain, `return`, `\u0072eturn`, 30),       // everywhere
		strings.Replace(plain, `\n`, `\u000a`, 3),                 // escapes of line ends
		strings.Replace(plain, `x\"`, `\ud83d\ude00\"`, 1),        // a surrogate pair
		strings.Replace(plain, `\n`+"```", `\n`+"``"+`\u0060`, 1), // the closing fence
		plain[:len(plain)-2] + `\u000a`,                           // the last line end
	}
	for i, a := range variants {
		for j, b := range variants {
			body := `{"contents":[{"role":"user","parts":[{"text":"` + a + `Q1"}]},{"role":"model","parts":[{"text":"A"}]},` +
				`{"role":"user","parts":[{"text":"` + b + `Q2"}]},{"role":"model","parts":[{"text":"B"}]},` +
				`{"role":"user","parts":[{"text":"` + a + `Q3"}]}]}`
			out, rep, err := Request([]byte(body), DefaultOptions(), nil)
			if err != nil {
				t.Fatalf("%d/%d: %v", i, j, err)
			}
			want, _, _ := request1([]byte(body), DefaultOptions(), nil, false)
			if string(out) != string(want) {
				t.Errorf("%d/%d: output differs from the exhaustive path:\n got %s\nwant %s", i, j, out, want)
			}
			if err := checkInvariants([]byte(body), out, rep, DefaultOptions(), nil); err != nil {
				t.Errorf("%d/%d: %v", i, j, err)
			}
		}
	}
}
