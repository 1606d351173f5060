package proxy

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// scanned is what one decode of a response object yields.
type scanned struct {
	OK           bool
	Usage        *Usage
	ModelVersion string
	Texts        []string
}

// scanFast decodes b with chunkScanner; ok is false when it declined.
func scanFast(b []byte, needText bool) scanned {
	var sc chunkScanner
	if !sc.scan(b, needText) {
		return scanned{}
	}
	out := scanned{OK: true, ModelVersion: string(sc.modelVersion)}
	if sc.hasUsage {
		u := sc.usage
		out.Usage = &u
	}
	for _, t := range sc.texts {
		out.Texts = append(out.Texts, string(t))
	}
	return out
}

// scanJSON decodes b as the tap did before chunkScanner: encoding/json
// into tapChunk (or tapUsage), keeping the non-empty, non-thought parts of
// candidate 0.
func scanJSON(b []byte, needText bool) scanned {
	if !needText {
		var u tapUsage
		if json.Unmarshal(b, &u) != nil {
			return scanned{}
		}
		return scanned{OK: true, Usage: u.UsageMetadata, ModelVersion: u.ModelVersion}
	}
	var c tapChunk
	if json.Unmarshal(b, &c) != nil {
		return scanned{}
	}
	out := scanned{OK: true, Usage: c.UsageMetadata, ModelVersion: c.ModelVersion}
	for _, cand := range c.Candidates {
		if cand.Index != 0 {
			continue
		}
		for _, p := range cand.Content.Parts {
			if !p.Thought && p.Text != "" {
				out.Texts = append(out.Texts, p.Text)
			}
		}
	}
	return out
}

// scanSeeds are response objects the scanner must take (fast) and
// objects it must leave to encoding/json (slow).
var scanSeeds = []struct {
	name string
	in   string
	fast bool
}{
	{"empty object", `{}`, true},
	{"usage only", `{"usageMetadata":{"promptTokenCount":3,"totalTokenCount":5,"promptTokensDetails":[{"modality":"TEXT","tokenCount":3}]},"modelVersion":"m-1"}`, true},
	{"escapes", `{"candidates":[{"content":{"parts":[{"text":"a\n\"b\"\\\/\b\f\r\t\u00e9\ud83d\ude00"}]}}]}`, true},
	{"lone surrogates", `{"candidates":[{"content":{"parts":[{"text":"\ud83d x \ude00 \ud83d\u0041"}]}}]}`, true},
	{"invalid utf-8", "{\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"a\xffb\xe2\x82\"}]}}]}", true},
	{"invalid utf-8 with escape", "{\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"\\n\xff\xc3\"}]}}]}", true},
	{"thought and index", `{"candidates":[{"index":1,"content":{"parts":[{"text":"other"}]}},{"content":{"parts":[{"text":"think","thought":true},{"thought":false,"text":"say"},{"text":""}]},"index":0}]}`, true},
	{"index after content", `{"candidates":[{"content":{"parts":[{"text":"x"}]},"index":2}]}`, true},
	{"negative zero index", `{"candidates":[{"index":-0,"content":{"parts":[{"text":"x"}]}}]}`, true},
	{"unknown members", `{"a":[1,-2.5e+3,true,false,null,{"b":"c"}],"candidates":[],"z":{}}`, true},
	{"white space", " \t\r\n{ \"modelVersion\" : \"m\" , \"candidates\" : [ ] }\n ", true},
	{"folded top name", `{"ModelVersion":"m"}`, false},
	{"folded usage name", `{"usageMetadata":{"PromptTokenCount":3}}`, false},
	{"non-ASCII name", `{"uſageMetadata":{"promptTokenCount":3}}`, false},
	{"escaped name", `{"model\u0056ersion":"m"}`, false},
	{"duplicate", `{"usageMetadata":{"promptTokenCount":3},"usageMetadata":{"totalTokenCount":4}}`, false},
	{"null usage", `{"usageMetadata":null}`, false},
	{"null text", `{"candidates":[{"content":{"parts":[{"text":null}]}}]}`, false},
	{"float count", `{"usageMetadata":{"promptTokenCount":1.0}}`, false},
	{"exponent index", `{"candidates":[{"index":1e0}]}`, false},
	{"overflow", `{"usageMetadata":{"promptTokenCount":9223372036854775808}}`, false},
	{"max int64", `{"usageMetadata":{"promptTokenCount":9223372036854775807,"totalTokenCount":-9223372036854775808}}`, true},
	{"min int64 - 1", `{"usageMetadata":{"totalTokenCount":-9223372036854775809}}`, false},
	{"18 and 19 digits", `{"usageMetadata":{"promptTokenCount":999999999999999999,"candidatesTokenCount":-999999999999999999,"totalTokenCount":1000000000000000000}}`, true},
	{"negative counts", `{"usageMetadata":{"promptTokenCount":-1,"cachedContentTokenCount":0,"thoughtsTokenCount":-0,"toolUsePromptTokenCount":42}}`, true},
	{"large index", `{"candidates":[{"index":4294967296,"content":{"parts":[{"text":"x"}]}},{"index":-9223372036854775808,"content":{"parts":[{"text":"y"}]}}]}`, true},
	{"folded names of every struct", `{"candidates":[{"INDEX":0,"content":{"parts":[{"text":"x"}]}}]}`, false},
	{"folded content", `{"candidates":[{"Content":{"parts":[{"text":"x"}]}}]}`, false},
	{"folded parts", `{"candidates":[{"content":{"PARTS":[{"text":"x"}]}}]}`, false},
	{"folded text", `{"candidates":[{"content":{"parts":[{"Text":"x"}]}}]}`, false},
	{"folded thought", `{"candidates":[{"content":{"parts":[{"text":"x","thoughT":true}]}}]}`, false},
	{"folded total", `{"usageMetadata":{"TOTALTOKENCOUNT":3}}`, false},
	{"names of a field's length", `{"candidates":[{"inDEX":0,"conTENT":{}}],"responseId":"r","usageMetadata":{"promptTokenCounT":1}}`, false},
	{"unknown names of a field's length", `{"role":"r","responseId":"x","candidatez":[],"usageMetadatA2":1,"candidates":[{"indey":1,"contenu":{},"content":{"partz":[],"parts":[{"texd":"a","thougth":true,"text":"b"}]}}]}`, true},
	{"string count", `{"usageMetadata":{"promptTokenCount":"3"}}`, false},
	{"number text", `{"candidates":[{"content":{"parts":[{"text":5}]}}]}`, false},
	{"null element", `{"candidates":[null]}`, false},
	{"top-level null", `null`, false},
	{"top-level array", `[{}]`, false},
	{"trailing comma", `{"a":1,}`, false},
	{"trailing data", `{} {}`, false},
	{"bad escape", `{"a":"\x"}`, false},
	{"control byte", "{\"a\":\"\x01\"}", false},
	{"leading zero", `{"a":01}`, false},
	{"truncated", `{"candidates":[{"content":`, false},
	{"bad literal", `{"a":nul}`, false},
	{"deep", strings.Repeat(`{"a":`, 100) + `1` + strings.Repeat(`}`, 100), false},
}

func TestChunkScanner(t *testing.T) {
	for _, tc := range scanSeeds {
		for _, needText := range []bool{true, false} {
			fast := scanFast([]byte(tc.in), needText)
			slow := scanJSON([]byte(tc.in), needText)
			if fast.OK && !cmp.Equal(fast, slow) {
				t.Errorf("%s (needText %v): scanner and encoding/json differ (-json +scanner):\n%s", tc.name, needText, cmp.Diff(slow, fast))
			}
			if needText && fast.OK != tc.fast {
				t.Errorf("%s: scanner took it = %v, want %v", tc.name, fast.OK, tc.fast)
			}
		}
	}
}

// TestChunkScannerTakesRecordedResponses checks that the recorded Gemini
// responses take the fast path, so that it is not silently unused.
func TestChunkScannerTakesRecordedResponses(t *testing.T) {
	for _, obj := range recordedObjects(t) {
		for _, needText := range []bool{true, false} {
			fast := scanFast(obj, needText)
			if !fast.OK {
				t.Errorf("scanner declined a recorded response (needText %v): %.200s", needText, obj)
				continue
			}
			if diff := cmp.Diff(scanJSON(obj, needText), fast); diff != "" {
				t.Errorf("scanner and encoding/json differ (-json +scanner):\n%s", diff)
			}
		}
	}
}

// recordedObjects returns the response objects of the recorded exchanges
// in testdata and of the bench's fake upstream.
func recordedObjects(tb testing.TB) [][]byte {
	var out [][]byte
	for _, path := range []string{"testdata/unary.json", "../bench/upstream/generate.json"} {
		b, err := os.ReadFile(path)
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, b)
	}
	for _, path := range []string{"testdata/stream.sse", "testdata/vertex_stream.sse", "../bench/upstream/stream.sse"} {
		b, err := os.ReadFile(path)
		if err != nil {
			tb.Fatal(err)
		}
		for line := range bytes.Lines(b) {
			if d, ok := bytes.CutPrefix(bytes.TrimRight(line, "\r\n"), []byte("data: ")); ok {
				out = append(out, d)
			}
		}
	}
	b, err := os.ReadFile(filepath.Join("testdata", "stream_array.json"))
	if err != nil {
		tb.Fatal(err)
	}
	var arr []json.RawMessage
	if err := json.Unmarshal(b, &arr); err != nil {
		tb.Fatal(err)
	}
	for _, o := range arr {
		out = append(out, o)
	}
	return out
}

// FuzzChunkScanner checks that whatever the scanner accepts, encoding/json
// decodes to the same values.
func FuzzChunkScanner(f *testing.F) {
	for _, tc := range scanSeeds {
		f.Add([]byte(tc.in), true)
	}
	for _, o := range recordedObjects(f) {
		f.Add(o, true)
		f.Add(o, false)
	}
	f.Fuzz(func(t *testing.T, in []byte, needText bool) {
		fast := scanFast(in, needText)
		if !fast.OK {
			return
		}
		if diff := cmp.Diff(scanJSON(in, needText), fast); diff != "" {
			t.Errorf("scanner and encoding/json differ on %q (-json +scanner):\n%s", in, diff)
		}
	})
}

// BenchmarkTapDecode compares decoding the fake upstream's response with
// encoding/json (the tap before chunkScanner) and with the scanner, and
// measures a whole tap per response.
//
//	go test ./proxy -run '^$' -bench TapDecode -benchmem -count 5
func BenchmarkTapDecode(b *testing.B) {
	obj, err := os.ReadFile("../bench/upstream/generate.json")
	if err != nil {
		b.Fatal(err)
	}
	b.Run("json", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(obj)))
		for b.Loop() {
			if !scanJSON(obj, true).OK {
				b.Fatal("not decoded")
			}
		}
	})
	b.Run("scanner", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(obj)))
		var sc chunkScanner // kept between objects, as the tap keeps it
		for b.Loop() {
			if !sc.scan(obj, true) {
				b.Fatal("not decoded")
			}
		}
	})
	b.Run("tap", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(obj)))
		for b.Loop() {
			t := newTap("", true)
			t.Write(obj)
			t.finish()
			if t.usage == nil || t.text.Len() == 0 {
				b.Fatal("not decoded")
			}
		}
	})
}
