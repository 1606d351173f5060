package rewrite

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

// guide is a Markdown document with inner fences, wrapped in a plain ```
// fence: CommonMark segments it into a fence, free text, a small fence and
// more text.
func guide(sections int) string {
	var b strings.Builder
	b.WriteString("```\n# Guide\n\n")
	for s := range sections {
		for i := range 6 {
			fmt.Fprintf(&b, "Section %d explains step %d of the build and how it is tested.\n", s, i)
		}
		b.WriteString("\n```go\n")
		for i := range 10 {
			fmt.Fprintf(&b, "func step%d_%d() error { return run(\"make\", \"target-%d\") }\n", s, i, i)
		}
		b.WriteString("```\n\n")
	}
	b.WriteString("```\nraw block\n```\n\nEnd.\n```\n")
	return b.String()
}

func chat(turns ...string) []byte {
	type part struct {
		Text string `json:"text"`
	}
	type content struct {
		Role  string `json:"role"`
		Parts []part `json:"parts"`
	}
	var req struct {
		Contents []content `json:"contents"`
	}
	for i, t := range turns {
		role := "user"
		if i%2 == 1 {
			role = "model"
		}
		req.Contents = append(req.Contents, content{role, []part{{t}}})
	}
	b, err := json.Marshal(req)
	if err != nil {
		panic(err)
	}
	return b
}

func TestCoalesce(t *testing.T) {
	doc := guide(2)
	crlf := strings.ReplaceAll(doc, "\n", "\r\n")
	inserted := strings.Replace(doc, "```\n\nSection 1", "```\nA line the first copy does not have.\n\nSection 1", 1)
	files := "```go a.go\n" + strings.Repeat("// a.go holds the alpha table and its helpers.\n", 14) + "```\n" +
		"```go b.go\n" + strings.Repeat("// b.go holds the beta table and its helpers.\n", 14) + "```\n"
	big := guide(40)
	tests := []struct {
		name string
		body []byte
		// spans are the replaced texts of the last turn, in order; a
		// merged reference replaces exactly one of them.
		spans []string
	}{
		{"resent", chat("Here is the guide:\n"+doc+"What is step3?", "It runs make.", "Again:\n"+doc+"What is raw block?"),
			[]string{strings.TrimSuffix(doc, "\n")}},
		{"crlf copy", chat("Here is the guide:\n"+doc+"What is step3?", "It runs make.", "Again:\r\n"+crlf+"What is raw block?"),
			[]string{strings.TrimSuffix(crlf, "\n")}},
		{"many pieces", chat("Here is the guide:\n"+big+"What is step3?", "It runs make.", "Again:\n"+big+"What is raw block?"),
			[]string{strings.TrimSuffix(big, "\n")}},
		{"text between differs", chat("Here is the guide:\n"+doc+"What is step3?", "It runs make.", "Again:\n"+inserted+"What is raw block?"),
			nil},
		{"two named files", chat("Here:\n"+files+"Why?", "Because.", "Again:\n"+files+"Really?"),
			nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := DefaultOptions()
			out, rep, err := Request(tt.body, opts, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := checkInvariants(tt.body, out, rep, opts, nil); err != nil {
				t.Fatal(err)
			}
			var last []Replacement
			for _, r := range rep.Replacements {
				if r.Turn == 2 {
					last = append(last, r)
				}
			}
			if tt.spans == nil {
				// Not merged: two or more references, none spanning a gap
				// that differs.
				if len(last) < 2 {
					t.Fatalf("want separate references, got %+v", last)
				}
			} else {
				var got, want []string
				for _, r := range last {
					got = append(got, r.SHA256)
				}
				for _, s := range tt.spans {
					sum := sha256.Sum256([]byte(s))
					want = append(want, hex.EncodeToString(sum[:]))
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Fatalf("replacements of the last turn (-want +got):\n%s\n%+v", diff, last)
				}
				for i, r := range last {
					if r.Bytes != len(tt.spans[i]) || r.Document != "# Guide" || r.Target != 0 || r.Rule != RuleUnchanged {
						t.Errorf("replacement %+v", r)
					}
				}
			}
			if err := checkKept(tt.body, out, rep, opts); err != nil {
				t.Fatal(err)
			}
			// Idempotent.
			again, rep2, err := Request(out, opts, nil)
			if err != nil || string(again) != string(out) || len(rep2.Replacements) != 0 {
				t.Errorf("second rewrite changed the output (%v, %d replacements)", err, len(rep2.Replacements))
			}
		})
	}
}

// TestCoalesceTargetKept checks that no reference is merged over a copy
// that is itself partly replaced in the turn it points to.
func TestCoalesceTargetKept(t *testing.T) {
	fence := func(word string) string {
		var b strings.Builder
		b.WriteString("```\n")
		for i := range 12 {
			fmt.Fprintf(&b, "%s line %d holds enough text to make a block.\n", word, i)
		}
		b.WriteString("```\n")
		return b.String()
	}
	a, z := fence("alpha"), fence("zulu")
	doc := a + "\n" + z + "\nThe end of the notes.\n"
	// Turn 1 sends z alone, then a document that repeats it: there z
	// becomes a reference, so turn 1 never holds the document in one
	// piece, and turn 3 may not point there for all of it.
	body := chat("Notes:\n"+z+"Q1?", "A1.", "Again:\n"+doc+"Q3?")
	body = []byte(strings.Replace(string(body), `Q1?"}]`, `Q1?"},{"text":`+jsonQuote(doc)+`}]`, 1))
	opts := DefaultOptions()
	out, rep, err := Request(body, opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkInvariants(body, out, rep, opts, nil); err != nil {
		t.Fatal(err)
	}
	if err := checkKept(body, out, rep, opts); err != nil {
		t.Fatal(err)
	}
	if len(rep.Replacements) != 3 {
		t.Fatalf("want the repeat in turn 1 and two references in turn 3, got %+v", rep.Replacements)
	}
}

func jsonQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// checkKept verifies that the text each unchanged reference replaced is
// still in full, contiguous and with line endings normalised, in the turn
// it names, in the output as sent (after any prefix stabilisation). It
// holds for the requests of these tests, whose copies share their
// wrappers; in general a reference only promises the same content.
func checkKept(in, out []byte, rep *Report, opts Options) error {
	if rep.UnflattenedTurns > 0 || !utf8.Valid(in) {
		return nil // turns renumbered, or texts not decoded as hashed
	}
	flat := out
	if opts.StablePrefix {
		var err error
		if flat, rep, err = unstable(in, out, rep, opts, nil); err != nil {
			return err
		}
	}
	var wi, wf, wo wireRequest
	if json.Unmarshal(in, &wi) != nil || json.Unmarshal(flat, &wf) != nil || json.Unmarshal(out, &wo) != nil {
		return nil // contents of an odd shape: nothing was replaced
	}
	byPart := map[[2]int][]Replacement{}
	var keys [][2]int
	for _, r := range rep.Replacements {
		k := [2]int{r.Turn, r.Part}
		if byPart[k] == nil {
			keys = append(keys, k)
		}
		byPart[k] = append(byPart[k], r)
	}
	for _, k := range keys {
		reps := byPart[k]
		if reps[0].Rule == RuleImage {
			continue
		}
		tin, ok1 := wireText(wi.Contents[k[0]].Parts[k[1]])
		tout, ok2 := wireText(wf.Contents[k[0]].Parts[k[1]])
		if !ok1 || !ok2 {
			return fmt.Errorf("turn %d part %d: not a text part", k[0], k[1])
		}
		ip, op := 0, 0
		for _, r := range reps {
			// The first place where the output holds the reference and
			// the input the hashed span (checkSpans checked there is one).
			for ; ; ip, op = ip+1, op+1 {
				if ip+r.Bytes > len(tin) || op > len(tout) {
					return fmt.Errorf("turn %d: span of %q not found", r.Turn+1, r.Reference)
				}
				if strings.HasPrefix(tout[op:], r.Reference) && hexSHA([]byte(tin[ip:ip+r.Bytes])) == r.SHA256 {
					break
				}
			}
			span := tin[ip : ip+r.Bytes]
			ip, op = ip+r.Bytes, op+len(r.Reference)
			if r.Rule != RuleUnchanged {
				continue // a superseded copy names another version
			}
			var target strings.Builder
			for _, p := range wo.Contents[r.Target].Parts {
				text, _ := wireText(p)
				target.WriteString(text)
			}
			if !strings.Contains(normalize(target.String()), normalize(span)) {
				return fmt.Errorf("turn %d: %q: turn %d no longer holds the copy", r.Turn+1, r.Reference, r.Target+1)
			}
		}
	}
	return nil
}
