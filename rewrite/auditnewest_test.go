package rewrite

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// newestCase returns a body whose first user turn holds an older version
// of a.go, superseded by the model's newer one, and whose last turn is a
// user question written `{"role": "user", …}` (with a space, as long as
// `{"role":"model", …}`), its rewrite and Report.
func newestCase(t *testing.T) (in, out []byte, rep *Report) { return newestCaseAt(t, false) }

// newestCaseAt is newestCase; with late, two turns of prose come first, so
// that the superseded reference lies in the second half of the body (the
// audit reads from it to the end, laterUserTurn).
func newestCaseAt(t *testing.T, late bool) (in, out []byte, rep *Report) {
	t.Helper()
	turn := func(role, text string) string {
		s, _ := json.Marshal(text)
		return `{"role":` + role + `,"parts":[{"text":` + string(s) + `}]}`
	}
	pad := ""
	if late {
		var p strings.Builder
		for k := range 800 {
			fmt.Fprintf(&p, "Note %d: the %dth remark on the design is unique.\n", k, k*7)
		}
		pad = turn(`"user"`, p.String()) + "," + turn(`"model"`, "Noted.") + ","
	}
	in = []byte(`{"contents":[` + pad +
		turn(`"user"`, "Here is my file:\n```go a.go\n"+sourceFile(40, -1)+"```\nAdd validation.") + "," +
		turn(`"model"`, "Done:\n```go a.go\n"+sourceFile(40, 3)+"```\nI added checks.") + "," +
		turn(` "user"`, "Now add logging.") + `]}`)
	out, rep, err := Request(in, DefaultOptions(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Replacements) != 1 || rep.Replacements[0].Rule != RuleSuperseded {
		t.Fatalf("want one superseded reference, got %+v", rep.Replacements)
	}
	if c := rep.aud.cuts[0]; late != (2*c.start >= len(in)) {
		t.Fatalf("cut at %d of %d bytes, late %v", c.start, len(in), late)
	}
	if err := auditBoth(t, in, out, rep); err != nil {
		t.Fatalf("the honest rewrite fails its audit: %v", err)
	}
	return in, out, rep
}

// TestAuditNewestFromBody checks that the audit finds the newest user turn
// in the body itself, not from the engine's records (the Report's Turn,
// the index it kept): a body whose newest user turn is the one holding a
// superseded reference fails, whatever the records say.
func TestAuditNewestFromBody(t *testing.T) {
	const user, model = `{"role": "user"`, `{"role":"model"`
	tests := []struct {
		name   string
		tamper func(in, out []byte, rep *Report) ([]byte, []byte)
		want   AuditReason
	}{
		{"last turn a model turn", func(in, out []byte, rep *Report) ([]byte, []byte) {
			// Same length: every offset of the records still holds.
			return bytes.Replace(in, []byte(user), []byte(model), 1), bytes.Replace(out, []byte(user), []byte(model), 1)
		}, AuditSupersededNewestTurn},
		{"last turn dropped", func(in, out []byte, rep *Report) ([]byte, []byte) {
			cut := func(b []byte) []byte {
				i := bytes.LastIndex(b, []byte(","+user))
				return append(bytes.Clone(b[:i]), "]}"...)
			}
			return cut(in), cut(out)
		}, AuditSupersededNewestTurn},
		{"last turn without a role", func(in, out []byte, rep *Report) ([]byte, []byte) {
			// A content without a role is a user turn: the superseded
			// reference is still outside the newest user turn.
			noRole := []byte(`{"parts":[{"text":"x"}]}`)
			in = append(bytes.Clone(in[:len(in)-2]), ","...)
			out = append(bytes.Clone(out[:len(out)-2]), ","...)
			return append(append(in, noRole...), "]}"...), append(append(out, noRole...), "]}"...)
		}, ""},
		{"escaped role key and value", func(in, out []byte, rep *Report) ([]byte, []byte) {
			// `"r\u006fle":"m\u006fdel"` is "role":"model" to a JSON
			// decoder: the newest user turn is the first one.
			esc := []byte(`{"r\u006fle":"m\u006fdel"`)
			in = bytes.Replace(in, []byte(user), esc, 1)
			out = bytes.Replace(out, []byte(user), esc, 1)
			// The shift lies after every cut, in both bodies.
			return in, out
		}, AuditSupersededNewestTurn},
		{"report's turn moved", func(in, out []byte, rep *Report) ([]byte, []byte) {
			// The Report says the reference is in another turn.
			rep.Replacements[0].Turn = 1
			return bytes.Replace(in, []byte(user), []byte(model), 1), bytes.Replace(out, []byte(user), []byte(model), 1)
		}, AuditSupersededNewestTurn},
	}
	for _, tt := range tests {
		for _, late := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/late=%v", tt.name, late), func(t *testing.T) {
				in, out, rep := newestCaseAt(t, late)
				rep = copyReport(rep)
				in, out = tt.tamper(in, out, rep)
				if !strings.HasSuffix(string(in), "]}") {
					t.Fatal("tampered body is not one object")
				}
				if err := auditBoth(t, in, out, rep); reasonOf(err) != tt.want {
					t.Fatalf("Audit = %v, want %q", err, tt.want)
				}
			})
		}
	}
}

// newestRef is newestTurn by encoding/json: the reference of
// TestNewestTurn and FuzzNewestTurn. ok is false when b is not an object
// whose "contents" is an array of objects, or a role is not a string.
func newestRef(b []byte) (span, bool) {
	s, _, ok := contentsRef(b)
	return s, ok
}

// contentsRef is newestRef, and the spans of all contents.
func contentsRef(b []byte) (s span, all []span, ok bool) {
	s = span{-1, -1}
	var top map[string]json.RawMessage
	if json.Unmarshal(b, &top) != nil {
		return s, all, false
	}
	if _, ok := top["contents"]; !ok {
		return s, all, true
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if _, err := dec.Token(); err != nil {
		return s, all, false
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return s, all, false
		}
		var raw json.RawMessage
		if k != "contents" {
			if dec.Decode(&raw) != nil {
				return s, all, false
			}
			continue
		}
		if t, err := dec.Token(); err != nil || t != json.Delim('[') {
			return s, all, false
		}
		for dec.More() {
			if dec.Decode(&raw) != nil {
				return s, all, false
			}
			end := int(dec.InputOffset())
			all = append(all, span{end - len(raw), end})
			var c map[string]json.RawMessage
			if json.Unmarshal(raw, &c) != nil {
				return s, all, false
			}
			role := ""
			if r, ok := c["role"]; ok && json.Unmarshal(r, &role) != nil {
				return s, all, false
			}
			if role == "" || role == "user" {
				s = span{end - len(raw), end}
			}
		}
		if _, err := dec.Token(); err != nil {
			return s, all, false
		}
	}
	return s, all, true
}

// TestNewestTurn checks the audit's walker against encoding/json, and
// that it fails on the bodies it cannot read.
func TestNewestTurn(t *testing.T) {
	in, _, _ := newestCase(t)
	ok := []string{
		string(in),
		`{"contents":[]}`,
		`{}`,
		` {"a":[1,{"b":"}]\"{"}],"contents":[{"role":"model"},{"parts":[]}] , "z":-1.5e3}` + "\n",
		`{"contents":[{"role":"user","parts":[{"text":"\\\\"}]},{"role":"model","parts":[{"text":"\\\"]}"}]}]}`,
		`{"contents":[{"role":""},{"role":"model","x":{"role":"user"}}]}`,
		`{"contents":[{"role":"\u0075ser"},{"role":"function"}],"c\u006fntents2":[]}`,
		`{"contents":[{"role":"User"}]}`,
	}
	for _, b := range ok {
		want, wok := newestRef([]byte(b))
		got, gok := newestTurn([]byte(b))
		if !wok || !gok || got != want {
			t.Errorf("newestTurn(%q) = %v %v, encoding/json %v %v", b, got, gok, want, wok)
		}
	}
	bad := []string{
		``, `[]`, `{"contents":[]`, `{"contents":[]}x`, `{"contents":{}}`, `{"contents":[1]}`,
		`{"contents":[],"contents":[{"role":"user"}]}`, `{"contents":[{"role":"user","role":"model"}]}`,
		`{"contents":[{"role":1}]}`, `{"a":[}`, `{"a":{]}`, `{"contents":[{"role":"user}]}`,
	}
	for _, b := range bad {
		if s, ok := newestTurn([]byte(b)); ok {
			t.Errorf("newestTurn(%q) = %v, want a failure", b, s)
		}
	}
}

// checkLater checks the audit's shortcuts on a valid body b whose newest
// user turn is newest and contents all: from every offset, a user turn
// walkContents stops at starts after it; from every "text" string, a
// later user turn laterUserTurn reports does, or no content holds the
// string.
func checkLater(t *testing.T, b []byte, newest span, all []span) {
	t.Helper()
	for after := 0; after < len(b); after += 1 + len(b)/64 {
		if s, later, ok := walkContents(b, after); ok && later && (s.start <= after || newest.start < s.start) {
			t.Fatalf("walkContents(%q, %d) = %v, newest %v", b, after, s, newest)
		}
	}
	key := []byte(`"text":"`)
	for k := 0; ; {
		j := bytes.Index(b[k:], key)
		if j < 0 {
			break
		}
		str := span{k + j + len(key), k + j + len(key)}
		k += j + 1
		z, ok := skipString(b, str.start-1)
		if !ok {
			continue
		}
		str.end = z - 1
		if !laterUserTurn(b, str) {
			continue
		}
		for _, c := range all {
			if c.start <= str.start && str.start < c.end && c == newest {
				t.Fatalf("laterUserTurn(%q, %v) in the newest user turn %v", b, str, newest)
			}
		}
	}
}

// TestLaterUserTurn checks the tail walk on shapes that look like a later
// user turn and are not.
func TestLaterUserTurn(t *testing.T) {
	tests := []struct {
		body string
		want bool
	}{
		{`{"contents":[{"role":"user","parts":[{"text":"A"}]},{"role":"user","parts":[{"text":"q"}]}]}`, true},
		{`{"contents":[{"role":"user","parts":[{"text":"A"}]},{"role":"model","parts":[{"text":"q"}]}]}`, false},
		{`{"contents":[{"parts":[{"text":"A"},{"text":"b"}],"role":"user"},{"parts":[]}] ,"x":1}`, true},
		// The string nested in a tool result shaped like contents.
		{`{"contents":[{"role":"user","parts":[{"functionResponse":{"response":{"a":[{"b":[{"text":"A"}]},{"role":"user"}]}}}]}]}`, false},
		// Another array before a second "contents".
		{`{"x":[{"p":[{"text":"A"}]},{"role":"user"}],"contents":[{"role":"user"}]}`, false},
		{`{"contents":[{"role":"user","parts":[{"text":"A\\"}]},{"role":"user"}]}`, true},
	}
	for _, tt := range tests {
		b := []byte(tt.body)
		i := bytes.Index(b, []byte(`"text":"A`)) + len(`"text":"`)
		z, ok := skipString(b, i-1)
		if !ok {
			t.Fatalf("%s: no string", tt.body)
		}
		if got := laterUserTurn(b, span{i, z - 1}); got != tt.want {
			t.Errorf("laterUserTurn(%s) = %v, want %v", tt.body, got, tt.want)
		}
		want, all, ok := contentsRef(b)
		if !ok {
			t.Fatalf("%s: not valid", tt.body)
		}
		checkLater(t, b, want, all)
	}
	// A span that ends on an escaped quote is not a string.
	b := []byte(`{"contents":[{"role":"user","parts":[{"text":"A\"},{\"role\":\"user\"}]},{"role":"model"}]}`)
	i := bytes.Index(b, []byte(`"text":"A`)) + len(`"text":"`)
	if laterUserTurn(b, span{i, i + 2}) {
		t.Error("laterUserTurn accepted a span ending inside its string")
	}
}

// FuzzNewestTurn checks the audit's walker against encoding/json on every
// valid body it reads.
func FuzzNewestTurn(f *testing.F) {
	f.Add([]byte(`{"contents":[{"role":"user","parts":[{"text":"a\"b"}]},{"role":"model"}]}`))
	f.Add([]byte(`{"x":[{"y":"\\"}],"contents":[{"parts":[]},{"role":"\u0075ser"}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, ok := newestTurn(b)
		if !ok || !json.Valid(b) {
			return
		}
		want, all, wok := contentsRef(b)
		if !wok || got != want {
			t.Fatalf("newestTurn(%q) = %v, encoding/json %v %v", b, got, want, wok)
		}
		checkLater(t, b, want, all)
	})
}

// BenchmarkNewestTurn times the audit's walk of a 1 MB session body, the
// cost a request with a superseded reference adds to its audit.
func BenchmarkNewestTurn(b *testing.B) {
	body := sizedSession(1<<20, 10)
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, ok := newestTurn(body); !ok {
			b.Fatal("no newest turn")
		}
	}
}
