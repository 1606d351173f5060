package upstream

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// field is one member of a JSON object, in input order, with its name
// normalised to lowerCamelCase (proto3 JSON accepts both spellings,
// gemini-api.md §4.5).
type field struct {
	name string
	raw  json.RawMessage
}

// errUnknown marks input the translator cannot express exactly; callers turn
// it into ok=false.
var errUnknown = errors.New("upstream: not translatable")

// untranslatable returns an errUnknown carrying a reason for tests and logs.
func untranslatable(format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), errUnknown)
}

// object splits raw into its members. A member given twice, in either
// spelling, is untranslatable: which one the API keeps is not documented.
func object(raw json.RawMessage) ([]field, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, untranslatable("expected an object, got %s", short(raw))
	}
	var out []field
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		name := camel(tok.(string))
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		if seen[name] {
			return nil, untranslatable("duplicate field %q", name)
		}
		seen[name] = true
		out = append(out, field{name, v})
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	return out, nil
}

// array splits raw into its elements; null is an empty array.
func array(raw json.RawMessage) ([]json.RawMessage, error) {
	if isNull(raw) {
		return nil, nil
	}
	if t := bytes.TrimLeft(raw, " \t\r\n"); len(t) == 0 || t[0] != '[' {
		return nil, untranslatable("expected an array, got %s", short(raw))
	}
	var out []json.RawMessage
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// str decodes a JSON string.
func str(raw json.RawMessage) (string, error) {
	var s string
	if t := bytes.TrimLeft(raw, " \t\r\n"); len(t) == 0 || t[0] != '"' {
		return "", untranslatable("expected a string, got %s", short(raw))
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", err
	}
	return s, nil
}

// boolean decodes a JSON boolean.
func boolean(raw json.RawMessage) (bool, error) {
	var b bool
	if err := json.Unmarshal(raw, &b); err != nil {
		return false, untranslatable("expected a boolean, got %s", short(raw))
	}
	return b, nil
}

// number checks that raw is a JSON number and returns it compacted, so its
// exact digits reach the upstream unchanged.
func number(raw json.RawMessage) (json.RawMessage, error) {
	t := bytes.TrimSpace(raw)
	dec := json.NewDecoder(bytes.NewReader(t))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	n, ok := v.(json.Number)
	if !ok {
		// proto3 JSON also accepts numbers as strings; keep it simple and
		// exact by refusing them.
		return nil, untranslatable("expected a number, got %s", short(raw))
	}
	return json.RawMessage(n.String()), nil
}

// compact returns raw without insignificant whitespace; free-form values
// (function arguments, schemas, responses) pass through otherwise unchanged.
func compact(raw json.RawMessage) (json.RawMessage, error) {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func isNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

// camel converts a snake_case proto field name to lowerCamelCase; names
// without underscores are returned unchanged.
func camel(s string) string {
	if !strings.Contains(s, "_") {
		return s
	}
	var b strings.Builder
	up := false
	for _, r := range s {
		switch {
		case r == '_':
			up = true
		case up && 'a' <= r && r <= 'z':
			b.WriteRune(r - 'a' + 'A')
			up = false
		default:
			b.WriteRune(r)
			up = false
		}
	}
	return b.String()
}

func short(raw json.RawMessage) string {
	const max = 40
	if len(raw) > max {
		return string(raw[:max]) + "…"
	}
	return string(raw)
}

// obj is an ordered JSON object writer.
type obj struct {
	b     bytes.Buffer
	empty bool
}

func newObj() *obj {
	o := &obj{empty: true}
	o.b.WriteByte('{')
	return o
}

// set appends key with a value marshalled by encoding/json, or with v itself
// when v is a json.RawMessage.
func (o *obj) set(key string, v any) {
	if !o.empty {
		o.b.WriteByte(',')
	}
	o.empty = false
	k, _ := json.Marshal(key)
	o.b.Write(k)
	o.b.WriteByte(':')
	if r, ok := v.(json.RawMessage); ok {
		o.b.Write(r)
		return
	}
	val, err := marshal(v)
	if err != nil {
		panic(err) // only values built by this package reach here
	}
	o.b.Write(val)
}

func (o *obj) raw() json.RawMessage {
	out := append([]byte(nil), o.b.Bytes()...)
	return append(out, '}')
}

// marshal is json.Marshal without HTML escaping, so text such as "<b>"
// keeps its bytes.
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

func list(items []json.RawMessage) json.RawMessage {
	if len(items) == 0 {
		return json.RawMessage("[]")
	}
	var b bytes.Buffer
	b.WriteByte('[')
	for i, it := range items {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(it)
	}
	b.WriteByte(']')
	return b.Bytes()
}
