package rewrite

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
// text (json_text) or the part (tool_result) decodes to the same JSON with
// the same keys in the same order, and the string values that differ are
// the input's with the replaced spans swapped for their references.
func checkSubPart(pin, pout json.RawMessage, src Source, reps []Replacement) error {
	in, out := []byte(pin), []byte(pout)
	if src == SourceJSONText {
		tin, ok1 := wireText(pin)
		tout, ok2 := wireText(pout)
		if !ok1 || !ok2 {
			return fmt.Errorf("not a text part")
		}
		if !json.Valid([]byte(tout)) {
			return fmt.Errorf("the JSON text is no longer valid JSON")
		}
		in, out = []byte(tin), []byte(tout)
	}
	ti, err := jsonTokens(in)
	if err != nil {
		return fmt.Errorf("input JSON: %v", err)
	}
	to, err := jsonTokens(out)
	if err != nil {
		return fmt.Errorf("output JSON: %v", err)
	}
	if len(ti) != len(to) {
		return fmt.Errorf("%d JSON tokens in, %d out", len(ti), len(to))
	}
	used := 0
	for k := range ti {
		a, b := ti[k], to[k]
		if a.key != b.key {
			return fmt.Errorf("token %d: key and value swapped", k)
		}
		if a.tok == b.tok {
			continue
		}
		sa, ok1 := a.tok.(string)
		sb, ok2 := b.tok.(string)
		if !ok1 || !ok2 || a.key {
			return fmt.Errorf("token %d changed: %v -> %v", k, a.tok, b.tok)
		}
		n := 0
		for m := 1; used+m <= len(reps); m++ {
			if checkSpans(sa, sb, reps[used:used+m]) == nil {
				n = m
				break
			}
		}
		if n == 0 {
			return fmt.Errorf("token %d: string value changed without its replacements", k)
		}
		used += n
	}
	if used != len(reps) {
		return fmt.Errorf("%d of %d replacements found", used, len(reps))
	}
	return nil
}
