package contextcache

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const model = "gemini-2.5-flash"

// bodies are requests in the shapes clients send: compact camelCase,
// pretty-printed, snake_case, fields in any order, unknown fields.
var bodies = map[string]string{
	"compact": `{"contents":[{"role":"user","parts":[{"text":"doc"}]},{"role":"model","parts":[{"text":"ok"}]},{"role":"user","parts":[{"text":"q"}]}],"systemInstruction":{"parts":[{"text":"be brief"}]},"tools":[{"functionDeclarations":[{"name":"f"}]}],"toolConfig":{"functionCallingConfig":{"mode":"AUTO"}},"generationConfig":{"temperature":0.2}}`,
	"pretty": `{
  "systemInstruction": {"parts": [{"text": "be brief"}]},
  "contents": [
    {"role": "user", "parts": [{"text": "doc \"quoted\" \u00e9"}]},
    {"role": "model", "parts": [{"text": "ok", "thoughtSignature": "c2ln"}]},
    {"role": "user", "parts": [{"text": "q"}]}
  ],
  "safetySettings": [],
  "futureField": {"nested": [1, 2.5e3, true, null]}
}
`,
	"snake":         `{"system_instruction":{"parts":[{"text":"s"}]},"tool_config":{"function_calling_config":{"mode":"ANY"}},"contents":[{"parts":[{"text":"a"}]},{"parts":[{"text":"b"}]}],"labels":{"k":"v"}}`,
	"only contents": `{"contents":[{"parts":[{"text":"a"}]},{"parts":[{"text":"b"}]}]}`,
	"backslashes":   `{"contents":[{"parts":[{"text":"a\\"}]},{"parts":[{"text":"\"b\\\""}]}],"x":"}\\"}`,
	"tools last":    `{"contents":[{"parts":[{"text":"a"}]},{"parts":[{"text":"b"}]}],"tools":[{"codeExecution":{}}]}`,
}

// decoded is a request as the API reads it.
type decoded struct {
	Contents          []json.RawMessage `json:"contents"`
	SystemInstruction json.RawMessage   `json:"systemInstruction"`
	Tools             json.RawMessage   `json:"tools"`
	ToolConfig        json.RawMessage   `json:"toolConfig"`
	Rest              map[string]json.RawMessage
}

func decode(t *testing.T, b []byte) decoded {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("invalid JSON %s: %v", b, err)
	}
	var d decoded
	pick := func(names ...string) json.RawMessage {
		for _, n := range names {
			if v, ok := m[n]; ok {
				delete(m, n)
				return v
			}
		}
		return nil
	}
	if c := pick("contents"); c != nil {
		json.Unmarshal(c, &d.Contents)
	}
	d.SystemInstruction = pick("systemInstruction", "system_instruction")
	d.Tools = pick("tools")
	d.ToolConfig = pick("toolConfig", "tool_config")
	d.Rest = m
	return d
}

// TestApplySemantics checks that the cache plus the rewritten request
// hold exactly the original request: the cache's contents followed by the
// request's, the moved fields from the cache, every other field unchanged.
func TestApplySemantics(t *testing.T) {
	for name, body := range bodies {
		r, err := Parse([]byte(body), model)
		if err != nil {
			t.Fatalf("%s: Parse: %v", name, err)
		}
		orig := decode(t, []byte(body))
		for k := range r.Len() {
			out := r.Apply(k, "cachedContents/abc")
			cache := decode(t, r.CreateBody(k, model, 5*time.Minute))
			got := decode(t, out)
			if got.SystemInstruction != nil || got.Tools != nil || got.ToolConfig != nil {
				t.Errorf("%s k=%d: moved fields left in %s", name, k, out)
			}
			joined := append(append([]json.RawMessage{}, cache.Contents...), got.Contents...)
			if diff := cmp.Diff(orig.Contents, joined); diff != "" {
				t.Errorf("%s k=%d: cache + request contents (-want +got):\n%s", name, k, diff)
			}
			for _, f := range []struct {
				name      string
				want, got json.RawMessage
			}{{"systemInstruction", orig.SystemInstruction, cache.SystemInstruction}, {"tools", orig.Tools, cache.Tools}, {"toolConfig", orig.ToolConfig, cache.ToolConfig}} {
				if !bytes.Equal(f.want, f.got) {
					t.Errorf("%s k=%d: cache %s = %s, want %s", name, k, f.name, f.got, f.want)
				}
			}
			if string(got.Rest["cachedContent"]) != `"cachedContents/abc"` {
				t.Errorf("%s k=%d: cachedContent = %s", name, k, got.Rest["cachedContent"])
			}
			delete(got.Rest, "cachedContent")
			if diff := cmp.Diff(orig.Rest, got.Rest); diff != "" {
				t.Errorf("%s k=%d: other fields (-want +got):\n%s", name, k, diff)
			}
			if string(cache.Rest["model"]) != `"models/`+model+`"` || string(cache.Rest["ttl"]) != `"300s"` {
				t.Errorf("%s k=%d: create body model/ttl: %s", name, k, r.CreateBody(k, model, 5*time.Minute))
			}
			if k == 0 && cache.Contents != nil {
				t.Errorf("%s k=0: create body has contents", name)
			}
		}
	}
}

// TestApplyBytes checks at the byte level that everything not moved is
// copied unchanged: removing the moved members and the leading contents
// from the original leaves exactly the output minus the added field.
func TestApplyBytes(t *testing.T) {
	body := bodies["pretty"]
	r, err := Parse([]byte(body), model)
	if err != nil {
		t.Fatal(err)
	}
	out := string(r.Apply(1, "cachedContents/x"))
	want := `{
  "contents": [{"role": "model", "parts": [{"text": "ok", "thoughtSignature": "c2ln"}]},
    {"role": "user", "parts": [{"text": "q"}]}
  ],
  "safetySettings": [],
  "futureField": {"nested": [1, 2.5e3, true, null]},"cachedContent":"cachedContents/x"
}
`
	if out != want {
		t.Errorf("Apply =\n%s\nwant\n%s", out, want)
	}
	// Every kept content is a byte-exact substring of the original.
	for i := 1; i < r.Len(); i++ {
		e := r.elems[i]
		if !strings.Contains(out, body[e.start:e.end]) {
			t.Errorf("content %d not kept byte for byte", i)
		}
	}
}

// TestApplyIdempotent: a body naming a cache is never planned again, so
// applying twice is applying once.
func TestApplyIdempotent(t *testing.T) {
	for name, body := range bodies {
		r, err := Parse([]byte(body), model)
		if err != nil {
			t.Fatal(err)
		}
		out := r.Apply(r.Len()-1, "cachedContents/x")
		if _, err := Parse(out, model); !errors.Is(err, ErrNamesCache) {
			t.Errorf("%s: Parse(Apply(x)) error = %v, want ErrNamesCache", name, err)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       error
	}{
		{"empty", ``, ErrInvalidJSON},
		{"array", `[]`, ErrInvalidJSON},
		{"truncated", `{"contents":[{"parts":[{"text":"a"}]}]`, ErrInvalidJSON},
		{"trailing", `{"contents":[{"parts":[]}]} x`, ErrInvalidJSON},
		{"bad literal", `{"contents":[{"parts":[]}],"x":tru}`, ErrInvalidJSON},
		{"unterminated string", `{"contents":[{"parts":[{"text":"a}]}]}`, ErrInvalidJSON},
		{"mismatched", `{"contents":[{"parts":[}]]}`, ErrInvalidJSON},
		{"no contents", `{"systemInstruction":{}}`, ErrNoContents},
		{"empty contents", `{"contents":[]}`, ErrNoContents},
		{"contents not objects", `{"contents":["a"]}`, ErrNoContents},
		{"names cache", `{"contents":[{"parts":[]}],"cachedContent":"cachedContents/x"}`, ErrNamesCache},
		{"names cache snake", `{"cached_content":"x","contents":[{"parts":[]}]}`, ErrNamesCache},
		{"duplicate system", `{"contents":[{"parts":[]}],"systemInstruction":{},"system_instruction":{}}`, ErrDuplicateField},
		{"duplicate contents", `{"contents":[{}],"contents":[{}]}`, ErrDuplicateField},
	} {
		if _, err := Parse([]byte(tc.body), model); !errors.Is(err, tc.want) {
			t.Errorf("%s: Parse error = %v, want %v", tc.name, err, tc.want)
		}
	}
}

// TestKeys checks prefix identity: equal prefixes give equal keys whatever
// follows; the model, a moved field or a content byte changes them.
func TestKeys(t *testing.T) {
	key := func(body, m string, k int) Key {
		t.Helper()
		r, err := Parse([]byte(body), m)
		if err != nil {
			t.Fatal(err)
		}
		return r.Key(k)
	}
	a := `{"systemInstruction":{"parts":[{"text":"s"}]},"contents":[{"parts":[{"text":"doc"}]},{"parts":[{"text":"q1"}]}]}`
	b := `{"systemInstruction":{"parts":[{"text":"s"}]},"contents":[{"parts":[{"text":"doc"}]},{"parts":[{"text":"other"}]},{"parts":[{"text":"q2"}]}],"generationConfig":{}}`
	if key(a, model, 1) != key(b, model, 1) {
		t.Error("same prefix, different tails: keys differ")
	}
	for name, other := range map[string]Key{
		"model":  key(a, "gemini-2.5-pro", 1),
		"system": key(strings.Replace(a, `"s"`, `"t"`, 1), model, 1),
		"tools":  key(strings.Replace(a, `"contents"`, `"tools":[],"contents"`, 1), model, 1),
		"doc":    key(strings.Replace(a, "doc", "dog", 1), model, 1),
		"k":      key(a, model, 0),
	} {
		if other == key(a, model, 1) {
			t.Errorf("changing %s did not change the key", name)
		}
	}
	// Sizes grow with k and the total covers every content.
	r, _ := Parse([]byte(b), model)
	if r.Size(0) != len(`{"parts":[{"text":"s"}]}`) || r.Size(1) <= r.Size(0) || r.Total() <= r.Size(2) {
		t.Errorf("sizes %v total %d", r.size, r.Total())
	}
}

func FuzzParseApply(f *testing.F) {
	for _, b := range bodies {
		f.Add([]byte(b))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := Parse(b, model)
		if err != nil {
			return
		}
		if !json.Valid(b) {
			// The scanner checks structure, not every literal: the upstream
			// judges the bytes. It must still not panic.
			return
		}
		for k := range r.Len() {
			out := r.Apply(k, "cachedContents/x")
			if !json.Valid(out) {
				t.Fatalf("Apply(%d) of valid %s is invalid: %s", k, b, out)
			}
			if c := r.CreateBody(k, model, time.Minute); !json.Valid(c) {
				t.Fatalf("CreateBody(%d) invalid: %s", k, c)
			}
		}
	})
}

// BenchmarkParse measures planning a request (scan, hash every prefix)
// against SHA-256 of the same bytes, on a 50-turn, about 1 MB body.
func BenchmarkParse(b *testing.B) {
	var cs []string
	for i := range 50 {
		cs = append(cs, `{"role":"user","parts":[{"text":`+strconv.Quote(strings.Repeat(fmt.Sprintf("line %d of a long \"quoted\" document\n", i), 400))+`}]}`)
	}
	body := []byte(`{"systemInstruction":{"parts":[{"text":"s"}]},"contents":[` + strings.Join(cs, ",") + `]}`)
	b.Run("parse", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			if _, err := Parse(body, model); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("sha256", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			sha256.Sum256(body)
		}
	})
}
