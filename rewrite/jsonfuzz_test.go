package rewrite

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// FuzzJSONSession builds editor sessions in the shape of
// ../shared/SEED-BUILDER.md from two fuzzed sources: every user turn a JSON
// text with the source in currentSource, model turns with a proposal, a
// signed model part, a tool result re-reading a source, a fenced JSON
// block; bits of shape pick pretty printing, HTML escaping and CRLF line
// endings. The rewrite must keep every JSON text valid JSON with the same
// keys in the same order, pass its audit, and be idempotent (fuzzCheck).
func FuzzJSONSession(f *testing.F) {
	src := "package main\n\n" + strings.Repeat("// f returns one.\nfunc f() int { return 1 }\n\n", 6)
	f.Add(src, strings.Replace(src, "return 1", "return 2", 1), uint16(0x5a5a), uint8(0))
	f.Add(src, src+"func g() {}\n", uint16(0x00ff), uint8(0x15))
	f.Add("héllo \"wörld\" \\ \t😀\n<b>&</b>\nline three\n", "é\u00e9\nline two\nline three\n", uint16(0x1234), uint8(0x2a))
	f.Add("{\"nested\": \"json\"}\n```go\nfunc a() {}\n```\nmore\n", "[unchanged: a.go sha256:0123456789ab, identical to the copy in turn 1]", uint16(0x0f0f), uint8(0x3f))
	f.Fuzz(func(t *testing.T, a, b string, pat uint16, shape uint8) {
		if shape&1 != 0 {
			a = strings.ReplaceAll(a, "\n", "\r\n")
		}
		enc := func(v any) string {
			var buf bytes.Buffer
			e := json.NewEncoder(&buf)
			e.SetEscapeHTML(shape&2 != 0)
			if shape&4 != 0 {
				e.SetIndent("", "  ")
			}
			if e.Encode(v) != nil {
				return ""
			}
			return strings.TrimSuffix(buf.String(), "\n")
		}
		var contents []any
		turn := func(role string, parts ...any) {
			contents = append(contents, map[string]any{"role": role, "parts": parts})
		}
		for i := range 6 {
			s := a
			if pat>>i&1 == 1 {
				s = b
			}
			user := map[string]any{"mode": "ask", "prompt": "What changed?", "currentSource": s}
			switch {
			case i == 2 && shape&8 != 0:
				turn("user", map[string]any{"text": "Payload:\n```json\n" + enc(user) + "\n```\nPlease answer."})
			case i == 3 && shape&16 != 0:
				turn("user", map[string]any{"functionResponse": map[string]any{"name": "read_file", "id": "r", "response": map[string]any{"content": s}}})
			default:
				turn("user", map[string]any{"text": enc(user)})
			}
			if i == 5 {
				break
			}
			p := a
			if pat>>(i+6)&1 == 1 {
				p = b
			}
			model := map[string]any{"text": enc(map[string]any{"kind": "code_proposal", "explanation": "Done.", "proposedSource": p})}
			if pat>>(i+12)&1 == 1 {
				model["thoughtSignature"] = "c2ln"
			}
			turn("model", model)
		}
		body, err := json.Marshal(map[string]any{"contents": contents})
		if err != nil {
			return
		}
		opts := DefaultOptions()
		opts.MinBlockBytes = 16
		if shape&32 != 0 {
			opts.MinBlockBytes = 64
		}
		fuzzCheck(t, body, opts)
		out, _, err := Request(body, opts, nil)
		if err != nil {
			t.Fatal(err)
		}
		checkJSONTexts(t, body, out, opts.MinBlockBytes)
	})
}

// checkJSONTexts checks that each text part of in that is a JSON value
// with a string value of at least min bytes is, in out, a JSON value with
// the same keys in the same order. (A JSON text without one is a text like
// any other, as a pasted package.json always was.)
func checkJSONTexts(t *testing.T, in, out []byte, min int) {
	t.Helper()
	var wi, wo wireRequest
	if json.Unmarshal(in, &wi) != nil || json.Unmarshal(out, &wo) != nil || len(wi.Contents) != len(wo.Contents) {
		t.Fatalf("contents changed shape")
	}
	for i := range wi.Contents {
		for j := range wi.Contents[i].Parts {
			tin, ok := wireText(wi.Contents[i].Parts[j])
			if !ok || !json.Valid([]byte(tin)) {
				continue
			}
			tout, _ := wireText(wo.Contents[i].Parts[j])
			ki, err1 := jsonTokens([]byte(tin))
			long := false
			for _, k := range ki {
				if s, ok := k.tok.(string); ok && !k.key && len(s) >= min {
					long = true
				}
			}
			if !long {
				continue
			}
			ko, err2 := jsonTokens([]byte(tout))
			if err1 != nil || err2 != nil || len(ki) != len(ko) {
				t.Fatalf("turn %d part %d: JSON text no longer the same JSON: %q", i, j, tout)
			}
			for k := range ki {
				if ki[k].key != ko[k].key || ki[k].key && ki[k].tok != ko[k].tok {
					t.Fatalf("turn %d part %d: keys changed", i, j)
				}
			}
		}
	}
}
