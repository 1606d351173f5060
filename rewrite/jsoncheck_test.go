package rewrite

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"unicode/utf8"
)

// jsonToken is one token of a JSON value, with whether a string is a key.
type jsonToken struct {
	tok json.Token
	key bool
}

// jsonTokens returns the tokens of the JSON value b, decoded by
// encoding/json independently of the engine.
func jsonTokens(b []byte) ([]jsonToken, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	type frame struct{ obj, wantKey bool }
	var out []jsonToken
	var stack []frame
	for {
		t, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		n := len(stack)
		if _, isStr := t.(string); isStr && n > 0 && stack[n-1].obj && stack[n-1].wantKey {
			stack[n-1].wantKey = false
			out = append(out, jsonToken{t, true})
			continue
		}
		out = append(out, jsonToken{t, false})
		switch t {
		case json.Delim('{'), json.Delim('['):
			if n > 0 && stack[n-1].obj {
				stack[n-1].wantKey = true // after this value, a key
			}
			stack = append(stack, frame{obj: t == json.Delim('{'), wantKey: true})
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:n-1]
		default:
			if n > 0 && stack[n-1].obj {
				stack[n-1].wantKey = true
			}
		}
	}
}

// checkSubPart verifies a part whose replacements are in JSON values: the
// text (json_text: a JSON text, or a text whose ```json fences hold JSON)
// or the part (tool_result) decodes to the same JSON with the same keys in
// the same order, and the string values that differ are the input's with
// the replaced spans swapped for their references.
func checkSubPart(pin, pout json.RawMessage, src Source, reps []Replacement) error {
	pairs := [][2][]byte{{pin, pout}}
	if src == SourceJSONText {
		tin, ok1 := wireText(pin)
		tout, ok2 := wireText(pout)
		if !ok1 || !ok2 {
			return fmt.Errorf("not a text part")
		}
		if json.Valid([]byte(tin)) {
			if !json.Valid([]byte(tout)) {
				return fmt.Errorf("the JSON text is no longer valid JSON")
			}
			pairs = [][2][]byte{{[]byte(tin), []byte(tout)}}
		} else {
			return checkFences(tin, tout, reps)
		}
	}
	used := 0
	for _, pair := range pairs {
		n, err := checkSubJSON(pair[0], pair[1], reps[used:])
		if err != nil {
			return err
		}
		used += n
	}
	if used != len(reps) {
		return fmt.Errorf("%d of %d replacements found", used, len(reps))
	}
	return nil
}

// checkFences checks a text whose ```json fences hold replaced values:
// the text outside the fences' contents is tin's with its text
// replacements made, and each fence's JSON is checked as a JSON text with
// the json_text replacements, both in order.
func checkFences(tin, tout string, reps []Replacement) error {
	var text, vals []Replacement
	for _, r := range reps {
		if r.Source == SourceJSONText {
			vals = append(vals, r)
		} else {
			text = append(text, r)
		}
	}
	// outside checks a piece of text outside the fences' contents.
	outside := func(a, b string) error {
		if a == b {
			return nil
		}
		for m := 1; m <= len(text); m++ {
			if checkSpans(a, b, text[:m]) == nil {
				text = text[m:]
				return nil
			}
		}
		return fmt.Errorf("the text around its JSON fences changed")
	}
	for {
		a, b := strings.Index(tin, "```json"), strings.Index(tout, "```json")
		if a < 0 || b < 0 {
			if a >= 0 || b >= 0 {
				return fmt.Errorf("a JSON fence is gone")
			}
			if err := outside(tin, tout); err != nil {
				return err
			}
			break
		}
		a += strings.IndexByte(tin[a:], '\n') + 1
		b += strings.IndexByte(tout[b:], '\n') + 1
		if err := outside(tin[:a], tout[:b]); err != nil {
			return err
		}
		tin, tout = tin[a:], tout[b:]
		a, b = strings.Index(tin, "\n```"), strings.Index(tout, "\n```")
		if a < 0 || b < 0 {
			return fmt.Errorf("a JSON fence without its end")
		}
		if !json.Valid([]byte(tin[:a])) {
			// Not a JSON value: an ordinary fence.
			if err := outside(tin[:a], tout[:b]); err != nil {
				return err
			}
		} else {
			n, err := checkSubJSON([]byte(tin[:a]), []byte(tout[:b]), vals)
			if err != nil {
				return err
			}
			vals = vals[n:]
		}
		tin, tout = tin[a:], tout[b:]
	}
	if len(text)+len(vals) > 0 {
		return fmt.Errorf("%d replacements not found", len(text)+len(vals))
	}
	return nil
}

// checkSubJSON checks one JSON value of a part against its rewrite and
// returns how many of reps, in order, its string values took.
func checkSubJSON(in, out []byte, reps []Replacement) (int, error) {
	ti, err := jsonTokens(in)
	if err != nil {
		return 0, fmt.Errorf("input JSON: %v", err)
	}
	to, err := jsonTokens(out)
	if err != nil {
		return 0, fmt.Errorf("output JSON: %v", err)
	}
	if len(ti) != len(to) {
		return 0, fmt.Errorf("%d JSON tokens in, %d out", len(ti), len(to))
	}
	used := 0
	for k := range ti {
		a, b := ti[k], to[k]
		if a.key != b.key {
			return 0, fmt.Errorf("token %d: key and value swapped", k)
		}
		if a.tok == b.tok {
			continue
		}
		sa, ok1 := a.tok.(string)
		sb, ok2 := b.tok.(string)
		if !ok1 || !ok2 || a.key {
			return 0, fmt.Errorf("token %d changed: %v -> %v", k, a.tok, b.tok)
		}
		n := 0
		for m := 1; used+m <= len(reps); m++ {
			if checkSpans(sa, sb, reps[used:used+m]) == nil {
				n = m
				break
			}
		}
		if n == 0 {
			return 0, fmt.Errorf("token %d: string value changed without its replacements", k)
		}
		used += n
	}
	return used, nil
}

// subSource returns the source of a part's replacements that are in JSON
// values (json_text or tool_result), "" when none is.
func subSource(reps []Replacement) Source {
	for _, r := range reps {
		if r.Source == SourceJSONText || r.Source == SourceToolResult {
			return r.Source
		}
	}
	return ""
}

// TestCheckInvariantsInvalidUTF8 checks that the test oracle accepts a
// JSON-text rewrite of an input holding invalid UTF-8 (fuzz inputs
// FuzzRequest/149fa3a96cb00f84 and 96cdf3e096b468a0): encoding/json
// decodes such a byte to U+FFFD, so the oracle's text is not the one the
// rewrite hashed and it must leave these parts to the audit, which checks
// the bytes themselves, as it does for plain text parts.
func TestCheckInvariantsInvalidUTF8(t *testing.T) {
	var b strings.Builder
	for i := range 24 {
		fmt.Fprintf(&b, "// f%d returns the %dth value of the alpha table.\nfunc f%d(x int) int { return x*%d + 7 }\n\n", i, i, i, i)
	}
	src := b.String()
	file := func(content string) string {
		v, err := json.Marshal([]map[string]string{{"path": "a.go", "content": content}})
		if err != nil {
			t.Fatal(err)
		}
		return string(v)
	}
	for _, tc := range []struct{ name, old string }{
		{"fenced", "Here:\n```json\n" + strings.Replace(file(src), "alpha table.\\nfunc f2", "alpha\xe5table.\\nfunc f2", 1) + "\n```\nThanks."},
		{"json text", strings.Replace(file(src), "alpha table.\\nfunc f2", "alpha\xe5table.\\nfunc f2", 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			newer := file(src + "// g doubles x.\nfunc g(x int) int { return 2 * x }\n")
			var raw strings.Builder
			raw.WriteString(`{"contents":[{"role":"user","parts":[{"text":`)
			// Marshal would replace the invalid byte: quote by hand.
			raw.WriteString(`"` + strings.ReplaceAll(strings.ReplaceAll(strings.ReplaceAll(tc.old, `\`, `\\`), `"`, `\"`), "\n", `\n`) + `"`)
			raw.WriteString(`}]},{"role":"model","parts":[{"text":"Read it."}]},{"role":"user","parts":[{"text":`)
			nb, _ := json.Marshal(newer)
			raw.Write(nb)
			raw.WriteString(`}]}]}`)
			body := []byte(raw.String())
			if utf8.Valid(body) || !json.Valid(body) {
				t.Fatalf("want a valid JSON body with invalid UTF-8")
			}
			opts := DefaultOptions()
			out, rep, err := Request(body, opts, nil)
			if err != nil {
				t.Fatal(err)
			}
			if subSource(rep.Replacements) == "" {
				t.Fatalf("no JSON-text replacement: %s", renderReport(rep, nil))
			}
			if err := checkInvariants(body, out, rep, opts, nil); err != nil {
				t.Errorf("invariants: %v", err)
			}
			if err := auditBoth(t, body, out, rep); err != nil {
				t.Errorf("audit: %v", err)
			}
		})
	}
}
