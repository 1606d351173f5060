package rewrite

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// precheckBodies are requests whose last user text holds no transcript,
// as most do: prose of about 1 KB (decoded by the scan), a short text with
// escapes (left undecoded by the scan: every text is under
// MinBlockBytes), and 70 KB of fenced Go source with one label-like line.
func precheckBodies() map[string][]byte {
	one := func(text string) []byte {
		b, err := json.Marshal(map[string]any{"contents": []any{map[string]any{"role": "user", "parts": []any{map[string]any{"text": text}}}}})
		if err != nil {
			panic(err)
		}
		return b
	}
	return map[string][]byte{
		"prose-1KB":   one(strings.Repeat("Explain the difference between a slice and an array in Go. ", 17)),
		"short-esc":   one("Why does\n\tfmt.Println(\"x\")\nprint \"x\"?"),
		"fenced-70KB": one("Here is my code:\n```go\n" + sourceFile(1700, -1) + "```\nWhat does handle13 do?"),
		"yaml-20KB":   one("My config:\n```yaml\n" + yamlLines(800) + "```\nWhy does the service not start?"),
	}
}

// yamlLines returns n lines of a YAML config: every line is label-shaped
// ("name: value"), none is a role word.
func yamlLines(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "service%d:\n  image: registry.example/app:%d\n", i/2, i)
	}
	return b.String()
}

// TestUnflattenPrecheckAllocs checks that the un-flattening pre-check
// allocates nothing on the way to "no" (issue 17), with a Verifier and a
// generationConfig that cannot mark a side task.
func TestUnflattenPrecheckAllocs(t *testing.T) {
	for name, body := range precheckBodies() {
		body = append(body[:len(body)-1], `,"generationConfig":{"temperature":0.2}}`...)
		opts := DefaultOptions()
		req, err := scanWith(body, &state{}, opts.MinBlockBytes, limitsOf(&opts))
		if err != nil {
			t.Fatal(err)
		}
		var v Verifier = servedSet{}
		if _, n, _, _, _ := unflattenRequest(body, req, &opts, v); n != 0 {
			t.Fatalf("%s: un-flattened %d turns", name, n)
		}
		if n := testing.AllocsPerRun(20, func() { unflattenRequest(body, req, &opts, v) }); n != 0 {
			t.Errorf("%s: the pre-check allocates %v times", name, n)
		}
	}
}

// BenchmarkUnflattenPrecheck measures the un-flattening pre-check alone on
// requests without a transcript.
//
//	go test ./rewrite -run '^$' -bench UnflattenPrecheck -benchmem
func BenchmarkUnflattenPrecheck(b *testing.B) {
	for _, name := range []string{"prose-1KB", "short-esc", "fenced-70KB", "yaml-20KB"} {
		body := precheckBodies()[name]
		b.Run(name, func(b *testing.B) {
			opts := DefaultOptions()
			req, err := scanWith(body, &state{}, opts.MinBlockBytes, limitsOf(&opts))
			if err != nil {
				b.Fatal(err)
			}
			var v Verifier = servedSet{}
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				unflattenRequest(body, req, &opts, v)
			}
		})
	}
}

// TestSideTaskHintPrefilter checks that mayHint, which lets sideTaskHint
// skip encoding/json, changes no answer: sideTaskHint agrees with the
// decoding check alone on configs with and without the members it reads.
func TestSideTaskHintPrefilter(t *testing.T) {
	slow := func(gc []byte) bool {
		var m map[string]json.RawMessage
		if json.Unmarshal(gc, &m) != nil {
			return true
		}
		for _, k := range []string{"responseMimeType", "response_mime_type", "responseSchema", "response_schema", "responseJsonSchema", "response_json_schema"} {
			if raw, ok := m[k]; ok && string(raw) != "null" && string(raw) != `""` && string(raw) != `"text/plain"` {
				return true
			}
		}
		for _, k := range []string{"maxOutputTokens", "max_output_tokens"} {
			if raw, ok := m[k]; ok {
				var n float64
				if json.Unmarshal(raw, &n) == nil && n > 0 && n <= 64 {
					return true
				}
			}
		}
		return false
	}
	for _, gc := range []string{
		`{}`, `{"temperature":0.2}`, ` { "topK" : 3 } `, `null`, `[]`, `5`, `"x"`,
		`{"maxOutputTokens":32}`, `{"maxOutputTokens":8192}`, `{"max_output_tokens":"32"}`,
		`{"responseMimeType":"application/json"}`, `{"responseMimeType":"text/plain"}`, `{"response_schema":null}`,
		`{"\u0072esponseMimeType":"application/json"}`, `{"stopSequences":["response"]}`,
		`{"nested":{"maxOutputTokens":1}}`, `{"maxOutputTokens":1e400}`,
	} {
		body := []byte(`{"contents":[{"role":"user","parts":[{"text":"hi"}]}],"generationConfig":` + gc + `}`)
		req, err := scan(body)
		if err != nil {
			t.Fatalf("%s: %v", gc, err)
		}
		if got, want := sideTaskHint(body, req), slow([]byte(gc)); got != want {
			t.Errorf("sideTaskHint(%s) = %v, decoding says %v", gc, got, want)
		}
	}
}

// flatMaybeSound fails t when the full scan un-flattens text with a
// Verifier that serves everything while flatMaybe says no: the pre-check
// may only reject what the scan would reject.
func flatMaybeSound(t *testing.T, text string) {
	t.Helper()
	lx := DefaultLexicon()
	if flatMaybe(text, lx) {
		return
	}
	if _, _, ok := unflattenScanned(text, lx, acceptAll{}); ok {
		t.Fatalf("flatMaybe(%q) = false, but the text un-flattens", text)
	}
}

// TestFlatMaybeSound checks flatMaybeSound on every generated transcript
// layout (genAll), each cut after every line, and on the transcript
// tests' texts.
func TestFlatMaybeSound(t *testing.T) {
	for _, p := range genAll() {
		text := generate(p).text
		flatMaybeSound(t, text)
		for i := 0; i < len(text); i++ {
			if text[i] == '\n' {
				flatMaybeSound(t, text[:i])
			}
		}
	}
}

// FuzzFlatMaybe mutates generated transcripts and checks flatMaybeSound.
func FuzzFlatMaybe(f *testing.F) {
	for i := range uint64(32) {
		f.Add(i*0x9e3779b97f4a7c15, uint16(0), "")
	}
	f.Add(uint64(5), uint16(7), "<User>")
	f.Add(uint64(6), uint16(9), "<Turn role=\"assistant\">")
	f.Add(uint64(8), uint16(11), "<Assistant_Message>")
	f.Add(uint64(9), uint16(30), "Role: assistant\nContent: ")
	f.Add(uint64(3), uint16(60), "[/INST]")
	f.Add(uint64(21), uint16(2), "FRIDAY:\n")
	f.Fuzz(func(t *testing.T, seed uint64, at uint16, edit string) {
		text := generate(genRandom(seed)).text
		pos := int(at) % (len(text) + 1)
		flatMaybeSound(t, text[:pos]+edit+text[pos:])
		flatMaybeSound(t, edit)
	})
}

// TestFlatMaybeTags checks that transcripts whose only marks are tags in
// any case, or per-turn tags with a role attribute, pass flatMaybe.
func TestFlatMaybeTags(t *testing.T) {
	for _, text := range []string{
		"Note: a\nContext: b\n<User>hi</User>\n<Assistant>hello</Assistant>\n<User>q</User>",
		"Note: a\nContext: b\n<Turn role=\"user\">hi</Turn>\n<Turn role=\"assistant\">hello</Turn>\n<Turn role=\"user\">q</Turn>",
		"Note: a\nContext: b\n<MSG from=\"user\">hi</MSG><Msg from=\"assistant\">hello</Msg><msg from=\"user\">q</msg>",
		"Note: a\nContext: b\n[INST] hi [/INST] hello [INST] q",
	} {
		if !flatMaybe(text, DefaultLexicon()) {
			t.Errorf("flatMaybe(%q) = false", text)
		}
		flatMaybeSound(t, text)
	}
}
