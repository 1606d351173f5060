package rewrite

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
)

// editorSession builds the request of a naive editor client in the shape
// of ../shared/SEED-BUILDER.md: native user/model turns whose texts are
// JSON payloads, the editor's whole source in every user turn and every
// proposal kept in full. Each step is an ask, an edit whose proposal is
// applied, discarded or undone, or a manual edit; the last turn asks about
// the editor's current code, which it returns with the request.
func editorSession(r *rand.Rand, steps int) (body []byte, cur string) {
	lines := 20 + r.IntN(30)
	var b strings.Builder
	b.WriteString("package main\n\n")
	for i := range lines {
		fmt.Fprintf(&b, "// f%d returns the %dth value.\nfunc f%d(x int) int { return x*%d + %d }\n\n", i, i, i, i, r.IntN(9))
	}
	cur = b.String()
	if r.IntN(4) == 0 {
		cur = strings.ReplaceAll(cur, "\n", "\r\n")
	}
	if r.IntN(3) == 0 {
		cur = strings.Replace(cur, "package main", "package main // héllo \"wörld\" \\ \t😀 <b>", 1)
	}
	mutate := func(s string) string {
		k := strings.Index(s, "func f"+fmt.Sprint(r.IntN(lines))+"(")
		if k < 0 {
			return s + fmt.Sprintf("func h%d() {}\n", r.IntN(1000))
		}
		switch r.IntN(3) {
		case 0: // one line changed
			return s[:k] + "func changed" + fmt.Sprint(r.IntN(1000)) + s[k+len("func f"):]
		case 1: // a function added
			return s + fmt.Sprintf("func g%d() int { return %d }\n", r.IntN(1000), r.IntN(100))
		}
		j := strings.Index(s[k:], "\n\n") // a function removed
		return s[:k] + s[k+j+2:]
	}
	escapeHTML := r.IntN(2) == 0
	indent := r.IntN(3) == 0
	enc := func(v any) string {
		var buf bytes.Buffer
		e := json.NewEncoder(&buf)
		e.SetEscapeHTML(escapeHTML)
		if indent {
			e.SetIndent("", "  ")
		}
		if err := e.Encode(v); err != nil {
			panic(err)
		}
		return strings.TrimSuffix(buf.String(), "\n")
	}
	var contents []any
	turn := func(role string, part map[string]any) {
		contents = append(contents, map[string]any{"role": role, "parts": []any{part}})
	}
	for i := range steps {
		prompt := fmt.Sprintf("Question %d about the file?", i)
		switch op := r.IntN(5); op {
		case 0, 1: // ask
			turn("user", map[string]any{"text": enc(map[string]any{"mode": "ask", "prompt": prompt, "currentSource": cur})})
			turn("model", map[string]any{"text": enc(map[string]any{"kind": "answer", "explanation": "An answer."})})
		case 2, 3: // edit: applied, discarded or undone
			turn("user", map[string]any{"text": enc(map[string]any{"mode": "edit", "prompt": prompt, "currentSource": cur})})
			prop := mutate(cur)
			m := map[string]any{"text": enc(map[string]any{"kind": "code_proposal", "explanation": "A change.", "proposedSource": prop})}
			if r.IntN(5) == 0 {
				m["thoughtSignature"] = "c2ln"
			}
			turn("model", m)
			if r.IntN(3) == 0 {
				cur = prop
			}
		case 4: // manual edit, then ask
			cur = mutate(cur)
			turn("user", map[string]any{"text": enc(map[string]any{"mode": "ask", "prompt": prompt, "currentSource": cur})})
			turn("model", map[string]any{"text": enc(map[string]any{"kind": "answer", "explanation": "An answer."})})
		}
	}
	turn("user", map[string]any{"text": enc(map[string]any{"mode": "ask", "prompt": "And now?", "currentSource": cur})})
	body, err := json.Marshal(map[string]any{"contents": contents})
	if err != nil {
		panic(err)
	}
	return body, cur
}

// TestJSONEditorSessions rewrites random editor sessions (issue 15 items
// 1 and 2): every output passes the rewrite checks (valid JSON texts with
// their keys, audit, idempotence) and holds the editor's current source in
// full exactly once, while the request shrinks.
func TestJSONEditorSessions(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 2))
	n := 150
	if testing.Short() {
		n = 30
	}
	var in, out int
	for i := range n {
		body, cur := editorSession(r, 2+r.IntN(10))
		opts := DefaultOptions()
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			if dump := os.Getenv("GEMINI_PROXY_JSONMIX_DUMP"); dump != "" {
				os.WriteFile(fmt.Sprintf("%s/%d.json", dump, i), body, 0o644)
			}
			fuzzCheck(t, body, opts)
			got, _, err := Request(body, opts, nil)
			if err != nil {
				t.Fatal(err)
			}
			checkJSONTexts(t, body, got, opts.MinBlockBytes)
			if k := fullCopies(t, got, cur); k != 1 {
				t.Errorf("the current source is in full %d times in the output", k)
			}
			// As the guide's builder does: no older version in full
			// either (but in the parts with a thought signature).
			if k := fullCopies(t, got, ""); k != 1 {
				t.Errorf("%d sources in full in the output", k)
			}
			in, out = in+len(body), out+len(got)
		})
	}
	t.Logf("%d sessions: %d bytes in, %d out (%.0f%% fewer)", n, in, out, 100*float64(in-out)/float64(in))
	if out*2 > in {
		t.Errorf("the rewrite kept %d of %d bytes", out, in)
	}
}

// fullCopies counts the string values of the JSON texts of body that are
// src (any of at least 512 bytes when src is ""), leaving out the parts with a thought signature, which the rewrite
// never changes.
func fullCopies(t *testing.T, body []byte, src string) int {
	t.Helper()
	var w wireRequest
	if err := json.Unmarshal(body, &w); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, c := range w.Contents {
		for _, p := range c.Parts {
			var members map[string]json.RawMessage
			text, ok := wireText(p)
			if !ok || json.Unmarshal(p, &members) != nil || len(members) != 1 {
				continue // a signed part is sent as it is
			}
			var m map[string]any
			if json.Unmarshal([]byte(text), &m) != nil {
				continue
			}
			for _, v := range m {
				if s, _ := v.(string); s == src || src == "" && len(s) >= 512 {
					n++
				}
			}
		}
	}
	return n
}
