package rewrite

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// unstable checks the splits of Options.StablePrefix without trusting the
// engine: out must be the output with StablePrefix off, except that
// rep.Reordered user text parts became two text parts, BLOCKS then LEAD,
// whose texts joined as LEAD+BLOCKS give the part's text, with LEAD not
// blank and ending a line, and BLOCKS ending in white space with a line
// break. It returns the output and report with StablePrefix off, for the
// other invariants.
func unstable(in, out []byte, rep *Report, opts Options, v Verifier) ([]byte, *Report, error) {
	off := opts
	off.StablePrefix = false
	ref, refRep, err := Request(in, off, v)
	if err != nil {
		return nil, nil, fmt.Errorf("rewrite without stable_prefix: %v", err)
	}
	if rep.BytesBefore != len(in) || rep.BytesAfter != len(out) {
		return nil, nil, fmt.Errorf("report bytes %d->%d, want %d->%d", rep.BytesBefore, rep.BytesAfter, len(in), len(out))
	}
	if diff := cmp.Diff(refRep.Replacements, rep.Replacements); diff != "" || rep.UnflattenedTurns != refRep.UnflattenedTurns {
		return nil, nil, fmt.Errorf("stable_prefix changed the replacements (-off +on):\n%s", diff)
	}
	n, err := checkSplits(ref, out, opts.DocumentTags)
	if err != nil {
		return nil, nil, err
	}
	if n != rep.Reordered {
		return nil, nil, fmt.Errorf("%d parts split, report says %d", n, rep.Reordered)
	}
	return ref, refRep, nil
}

// checkSplits returns the number of parts of ref split in out (see
// unstable), or what differs otherwise.
func checkSplits(ref, out []byte, tags []string) (int, error) {
	if bytes.Equal(ref, out) {
		return 0, nil
	}
	var tr, to map[string]json.RawMessage
	if err := json.Unmarshal(ref, &tr); err != nil {
		return 0, err
	}
	if err := json.Unmarshal(out, &to); err != nil {
		return 0, err
	}
	if len(tr) != len(to) {
		return 0, fmt.Errorf("top-level members: %d without splits, %d with", len(tr), len(to))
	}
	for k, x := range tr {
		if k != "contents" && !bytes.Equal(x, to[k]) {
			return 0, fmt.Errorf("member %q changed by a split", k)
		}
	}
	type turn struct {
		Role  string            `json:"role"`
		Parts []json.RawMessage `json:"parts"`
	}
	var cr, co []turn
	if err := json.Unmarshal(tr["contents"], &cr); err != nil {
		return 0, err
	}
	if err := json.Unmarshal(to["contents"], &co); err != nil {
		return 0, err
	}
	if len(cr) != len(co) {
		return 0, fmt.Errorf("turns: %d without splits, %d with", len(cr), len(co))
	}
	n := 0
	for i := range cr {
		if cr[i].Role != co[i].Role {
			return 0, fmt.Errorf("turn %d: role changed", i)
		}
		j := 0
		for pi, p := range cr[i].Parts {
			if j < len(co[i].Parts) && bytes.Equal(p, co[i].Parts[j]) {
				j++
				continue
			}
			whole, ok := onlyText(p)
			if !ok || j+1 >= len(co[i].Parts) {
				return 0, fmt.Errorf("turn %d part %d changed, not split", i, pi)
			}
			blocks, ok1 := onlyText(co[i].Parts[j])
			lead, ok2 := onlyText(co[i].Parts[j+1])
			switch {
			case !ok1 || !ok2 || lead+blocks != whole:
				return 0, fmt.Errorf("turn %d part %d: split parts %q + %q do not join to the part", i, pi, blocks, lead)
			case cr[i].Role != "user" && cr[i].Role != "":
				return 0, fmt.Errorf("turn %d: %s turn split", i, cr[i].Role)
			case strings.TrimSpace(lead) == "" || !strings.HasSuffix(lead, "\n"):
				return 0, fmt.Errorf("turn %d part %d: lead %q blank or not ending a line", i, pi, lead)
			case !strings.Contains(blocks[len(strings.TrimRight(blocks, " \t\r\n")):], "\n"):
				return 0, fmt.Errorf("turn %d part %d: moved text does not end with a line break", i, pi)
			case caption(lead):
				return 0, fmt.Errorf("turn %d part %d: caption %q moved after its blocks", i, pi, lead)
			case len(segmentLines(splitLines(lead), tags)) > 0:
				return 0, fmt.Errorf("turn %d part %d: lead %q holds a block", i, pi, lead)
			}
			j += 2
			n++
		}
		if j != len(co[i].Parts) {
			return 0, fmt.Errorf("turn %d: %d parts left over", i, len(co[i].Parts)-j)
		}
	}
	return n, nil
}

// onlyText returns the text of a part whose only member is "text".
func onlyText(raw json.RawMessage) (string, bool) {
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil || len(m) != 1 {
		return "", false
	}
	return wireText(raw)
}

// bigFile is a Go file of about 6 KB, over the 4 KB a split needs by default.
func bigFile(tag string) string {
	var b strings.Builder
	b.WriteString("package " + tag + "\n\n")
	for i := 0; b.Len() < 6000; i++ {
		fmt.Fprintf(&b, "// F%d returns %d, \"quoted\"\tand tabbed.\nfunc F%d() int { return %d }\n\n", i, i, i, i)
	}
	return b.String()
}

func body(t *testing.T, turns ...string) []byte {
	t.Helper()
	var cs []map[string]any
	for i, x := range turns {
		role := "user"
		if i%2 == 1 {
			role = "model"
		}
		cs = append(cs, map[string]any{"role": role, "parts": []any{map[string]any{"text": x}}})
	}
	b, err := json.Marshal(map[string]any{"contents": cs, "systemInstruction": map[string]any{"parts": []any{map[string]any{"text": "Be brief."}}}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// texts returns the text parts of each turn of a body.
func texts(t *testing.T, b []byte) [][]string {
	t.Helper()
	var r struct {
		Contents []struct {
			Parts []struct {
				Text string `json:"text"`
			} `json:"parts"`
		} `json:"contents"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	var out [][]string
	for _, c := range r.Contents {
		var ps []string
		for _, p := range c.Parts {
			ps = append(ps, p.Text)
		}
		out = append(out, ps)
	}
	return out
}

func TestStablePrefixSplits(t *testing.T) {
	file := "```go a.go\n" + bigFile("a") + "```\n"
	q := "Why does F3 return 3?\n\n"
	tests := []struct {
		name  string
		turns []string
		want  [][]string // nil: the body is unchanged
	}{
		{"question then file", []string{q + file}, [][]string{{file, q}}},
		{"question then tagged document", []string{"Summarise it.\n<document path=\"d.txt\">\n" + bigFile("d") + "</document>\n"},
			[][]string{{"<document path=\"d.txt\">\n" + bigFile("d") + "</document>\n", "Summarise it.\n"}}},
		{"two files", []string{q + file + "\n```go b.go\n" + bigFile("b") + "```\n"}, [][]string{{file + "\n```go b.go\n" + bigFile("b") + "```\n", q}}},
		{"trailing spaces after the file", []string{q + file + "  \n "}, [][]string{{file + "  \n ", q}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := body(t, tt.turns...)
			out, rep, err := Request(in, DefaultOptions(), nil)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, texts(t, out)); diff != "" {
				t.Errorf("texts (-want +got):\n%s", diff)
			}
			if rep.Reordered != 1 || !rep.Changed() || !strings.Contains(rep.Header(), "stable=1") {
				t.Errorf("Reordered = %d, header %q; want 1 and stable=1", rep.Reordered, rep.Header())
			}
			if err := checkInvariants(in, out, rep, DefaultOptions(), nil); err != nil {
				t.Error(err)
			}
			again, rep2, err := Request(out, DefaultOptions(), nil)
			if err != nil || !bytes.Equal(again, out) || rep2.Changed() {
				t.Errorf("not idempotent: %v %s", err, rep2.Header())
			}
		})
	}
}

func TestStablePrefixKeeps(t *testing.T) {
	file := "```go a.go\n" + bigFile("a") + "```\n"
	small := "```go s.go\npackage s\n```\n"
	tests := []struct {
		name  string
		turns []string
	}{
		{"caption", []string{"Here is my file:\n\n" + file}},
		{"full-width colon", []string{"这是文件：\n" + file}},
		{"forward reference", []string{"Why does the code below fail?\n\n" + file}},
		{"following", []string{"Check the Following for races.\n" + file}},
		{"question after the file", []string{file + "\nWhy does F3 return 3?"}},
		{"no line break after the file", []string{"Why?\n" + strings.TrimSuffix(file, "\n")}},
		{"vertical tab after the file", []string{"Why?\n" + file + "\v"}},
		{"small file", []string{"Why?\n" + small}},
		{"blob of files in one fence", []string{"Why?\n```ts\n// File: a.ts\n" + bigFile("a") + "// File: b.ts\n" + bigFile("b") + "```\n"}},
		{"blob in a fence left open", []string{"Why?\n```ts\n// File: a.ts\n" + bigFile("a") + "// File: b.ts\n" + bigFile("b")}},
		{"file only", []string{file}},
		{"blank lead", []string{"\n \n" + file}},
		{"model turn", []string{"Show me a.go.", "Why not?\n" + file, "Thanks."}},
		{"first block is a reference", []string{"First look.\n" + file, "Seen.", "Why does F3 return 3?\n" + file}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := body(t, tt.turns...)
			off := DefaultOptions()
			off.StablePrefix = false
			want, _, err := Request(in, off, nil)
			if err != nil {
				t.Fatal(err)
			}
			out, rep, err := Request(in, DefaultOptions(), nil)
			if err != nil {
				t.Fatal(err)
			}
			if tt.name == "first block is a reference" {
				// The first turn is split; the last, whose file is a
				// reference, is not.
				if got := texts(t, out); len(got[0]) != 2 || len(got[2]) != 1 {
					t.Errorf("parts per turn %d, %d; want 2, 1", len(got[0]), len(got[2]))
				}
				return
			}
			if rep.Reordered != 0 || !bytes.Equal(out, want) {
				t.Errorf("Reordered = %d; body changed:\n%s", rep.Reordered, out)
			}
		})
	}
}

// TestStablePrefixHistory checks that a turn split as the new turn is
// split the same way once it is history, so that the next request starts
// with the bytes of the previous one.
func TestStablePrefixHistory(t *testing.T) {
	file := "```go a.go\n" + bigFile("a") + "```\n"
	first := "Why does F3 return 3?\n" + file
	out1, _, err := Request(body(t, first), DefaultOptions(), nil)
	if err != nil {
		t.Fatal(err)
	}
	out2, _, err := Request(body(t, first, "Because it does.", "And F4?\n"+file), DefaultOptions(), nil)
	if err != nil {
		t.Fatal(err)
	}
	c1 := bytes.TrimSuffix(out1[:bytes.Index(out1, []byte(`]}]`))+3], []byte("]"))
	if !bytes.HasPrefix(out2, c1) {
		t.Errorf("request 2 does not start with request 1's first turn:\n1: %.200s\n2: %.200s", out1, out2)
	}
}

func TestStablePrefixEscapes(t *testing.T) {
	// Raw escapes (\u0041, \/) in the lead and the block stay as sent.
	file := "```go a.go\n" + bigFile("a") + "```\n"
	esc, _ := json.Marshal(file)
	in := []byte(`{"contents":[{"role":"user","parts":[ {"text" : "Why \u0041\/B?\n` + string(esc[1:len(esc)-1]) + `"} ]}]}`)
	out, rep, err := Request(in, DefaultOptions(), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"contents":[{"role":"user","parts":[ {"text":"` + string(esc[1:len(esc)-1]) + `"},{"text":"Why \u0041\/B?\n"} ]}]}`
	if string(out) != want || rep.Reordered != 1 {
		t.Errorf("Request = %.300s\nwant %.300s", out, want)
	}
	if err := checkInvariants(in, out, rep, DefaultOptions(), nil); err != nil {
		t.Error(err)
	}
}

func TestCaption(t *testing.T) {
	tests := []struct {
		lead string
		want bool
	}{
		{"Here is my file:\n\n", true},
		{"Explain the following code", true},
		{"What is wrong below?\n", true},
		{"Why does it panic?\n", false},
		{"User: hi\nAssistant: hello\nUser: and this?\n", false},
		{"Follow the style.\n", false},
		{"As I said above, why?\n", true},
		{"Translate the next file into Python\n", true},
		{"请解释下面的代码\n", true},
		{"这段代码为什么会崩溃？\n", false},
		{"Explique o código abaixo\n", true},
		{"Por que isso falha?\n", false},
		{"Explica el siguiente código\n", true},
		{"Revisa el código a continuación\n", true},
		{"¿Por qué falla?\n", false},
		{"Erkläre den folgenden Code\n", true},
		{"Объясни код ниже\n", true},
		{"以下のコードを説明して\n", true},
		{"Aftermath of the change?\n", false}, // "after" inside a word
		{"Is the nextIndex field thread-safe?\n", false},
	}
	for _, tt := range tests {
		if got := caption(tt.lead); got != tt.want {
			t.Errorf("caption(%q) = %v, want %v", tt.lead, got, tt.want)
		}
	}
}

// TestStableLeadReference checks that a part whose first block became a
// reference is not split when the output is rewritten again: the
// reference is then the lead of the kept blocks, and splitting it off
// made the rewrite not idempotent (FuzzRequest/e10fbaa2eb2d2a49).
func TestStableLeadReference(t *testing.T) {
	a := "```go a.go\n" + strings.Repeat("func a() { return 1 }\n", 8) + "```\n"
	b := "```go b.go\n" + strings.Repeat("func b() { return 2 }\n", 12) + "```\n"
	for _, tc := range []struct{ name, first string }{
		{"reference first", a + b},
		{"question then reference", "Why?\n" + a + b},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body, err := json.Marshal(map[string]any{"contents": []any{
				map[string]any{"role": "user", "parts": []any{map[string]any{"text": tc.first}}},
				map[string]any{"role": "model", "parts": []any{map[string]any{"text": "Read."}}},
				map[string]any{"role": "user", "parts": []any{map[string]any{"text": "```go a.go\n" + strings.Repeat("func a() { return 3 }\n", 8) + "```\nAnd now?"}}},
			}})
			if err != nil {
				t.Fatal(err)
			}
			opts := DefaultOptions()
			opts.MinBlockBytes = 24
			out, rep, err := Request(body, opts, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Replacements) != 1 || rep.Replacements[0].Rule != RuleSuperseded {
				t.Fatalf("want a.go superseded in turn 0: %s", renderReport(rep, nil))
			}
			again, rep2, err := Request(out, opts, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(again, out) || rep2.Changed() {
				t.Errorf("not idempotent\nonce:  %s\ntwice: %s\n%s", out, again, renderReport(rep2, nil))
			}
		})
	}
}
