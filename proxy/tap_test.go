package proxy

import (
	"bytes"
	"io"
	"os"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/google/go-cmp/cmp"

	tu "github.com/gemini-proxy/gemini-proxy/internal/testutil"
)

// tapResult is what a test compares after feeding a tap.
type tapResult struct {
	Usage        *Usage
	ModelVersion string
	Text         string
	Events       int
}

// runTap copies body through a tapBody with the given read size and
// checks that the copy is byte-for-byte.
func runTap(t *testing.T, body []byte, encoding string, readSize int) tapResult {
	t.Helper()
	return runTapText(t, body, encoding, readSize, true)
}

func runTapText(t *testing.T, body []byte, encoding string, readSize int, needText bool) tapResult {
	t.Helper()
	tp := newTap(encoding, needText)
	if tp == nil {
		t.Fatalf("newTap(%q) = nil", encoding)
	}
	var r io.Reader = bytes.NewReader(body)
	if readSize == 1 {
		r = iotest.OneByteReader(r)
	}
	tb := &tapBody{rc: io.NopCloser(r), t: tp}
	var out bytes.Buffer
	if _, err := io.CopyBuffer(&out, struct{ io.Reader }{tb}, make([]byte, max(readSize, 1))); err != nil {
		t.Fatalf("copy: %v", err)
	}
	if !bytes.Equal(out.Bytes(), body) {
		t.Fatalf("tap changed the bytes")
	}
	if !tb.eof {
		t.Errorf("tapBody did not see EOF")
	}
	tp.finish()
	return tapResult{Usage: tp.usage, ModelVersion: tp.modelVersion, Text: tp.text.String(), Events: tp.events}
}

func readTestdata(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestTap(t *testing.T) {
	streamWant := tapResult{
		Usage:        &Usage{PromptTokens: 7, CachedTokens: 3, CandidatesTokens: 153, ThoughtsTokens: 45, ToolUsePromptTokens: 5, TotalTokens: 210},
		ModelVersion: "models/gemini-2.5-flash-001",
		Text:         "Here you go!\n\n1.  **English:** Hi \"there\" {braces} [x]\n2.  **Italian:** Ciao\n3.  **Portuguese:** Olá é",
		Events:       3,
	}
	sse := readTestdata(t, "stream.sse")
	tests := []struct {
		name     string
		body     []byte
		encoding string
		want     tapResult
	}{
		{"unary", readTestdata(t, "unary.json"), "", tapResult{
			Usage:        &Usage{PromptTokens: 7, CandidatesTokens: 149, ThoughtsTokens: 48, TotalTokens: 204},
			ModelVersion: "gemini-2.5-flash",
			Text:         "The sky is blue because of something called **Rayleigh Scattering**. Sunlight looks white but contains every colour; the short blue wavelengths are scattered far more by the tiny molecules of the atmosphere.",
			Events:       1,
		}},
		{"sse crlf", sse, "", streamWant},
		{"sse lf", bytes.ReplaceAll(sse, []byte("\r\n"), []byte("\n")), "", streamWant},
		{"sse no final blank line", bytes.TrimSuffix(sse, []byte("\r\n\r\n")), "", streamWant},
		{"sse with comments and event lines", append([]byte(": keepalive\r\nevent: message\r\n"), sse...), "", streamWant},
		{"array", readTestdata(t, "stream_array.json"), "", streamWant},
		{"sse gzip", tu.Gzip(sse), "gzip", streamWant},
		{"unary gzip", tu.Gzip(readTestdata(t, "unary.json")), "gzip", tapResult{
			Usage:        &Usage{PromptTokens: 7, CandidatesTokens: 149, ThoughtsTokens: 48, TotalTokens: 204},
			ModelVersion: "gemini-2.5-flash",
			Text:         "The sky is blue because of something called **Rayleigh Scattering**. Sunlight looks white but contains every colour; the short blue wavelengths are scattered far more by the tiny molecules of the atmosphere.",
			Events:       1,
		}},
		{"vertex last chunk wins", readTestdata(t, "vertex_stream.sse"), "", tapResult{
			Usage:        &Usage{PromptTokens: 6, CandidatesTokens: 4, TotalTokens: 10},
			ModelVersion: "gemini-2.5-flash",
			Text:         "Blue light scatters more.",
			Events:       2,
		}},
		{"error body", readTestdata(t, "error_404.json"), "", tapResult{Events: 1}},
		{"not json", []byte("<html>bad gateway</html>"), "", tapResult{}},
		{"empty", nil, "", tapResult{}},
	}
	for _, tt := range tests {
		for _, size := range []int{1, 7, 32 << 10} {
			for _, needText := range []bool{true, false} {
				want := tt.want
				if !needText {
					want.Text = ""
				}
				got := runTapText(t, tt.body, tt.encoding, size, needText)
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("%s, reads of %d, text %v: tap mismatch (-want +got):\n%s", tt.name, size, needText, diff)
				}
			}
		}
	}
}

func TestTapLargeUnary(t *testing.T) {
	text := strings.Repeat(`lorem \"ipsum\" {x} `, 20_000) // ~380 KB, escapes and braces inside
	body := []byte(`{"candidates":[{"content":{"parts":[{"text":"` + text + `"}],"role":"model"},"index":0}],` +
		`"usageMetadata":{"promptTokenCount":11,"candidatesTokenCount":22,"totalTokenCount":33},"modelVersion":"gemini-2.5-pro","responseId":"r"}`)
	wantUsage := &Usage{PromptTokens: 11, CandidatesTokens: 22, TotalTokens: 33}
	for _, size := range []int{1, 4096, 1 << 20} {
		for _, needText := range []bool{true, false} {
			got := runTapText(t, body, "", size, needText)
			wantText := ""
			if needText {
				wantText = strings.ReplaceAll(text, `\"`, `"`)
			}
			if diff := cmp.Diff(tapResult{Usage: wantUsage, ModelVersion: "gemini-2.5-pro", Text: wantText, Events: 1}, got); diff != "" {
				t.Errorf("reads of %d, text %v (-want +got):\n%s", size, needText, diff)
			}
		}
	}
}

func TestTapSkipsOversizedEvent(t *testing.T) {
	big := `data: {"candidates":[{"content":{"parts":[{"inlineData":{"mimeType":"image/png","data":"` +
		strings.Repeat("A", maxEventBytes+10) + `"}}]}}]}` + "\r\n\r\n"
	body := []byte(big + string(readTestdata(t, "stream.sse")))
	got := runTap(t, body, "", 64<<10)
	if got.Events != 3 || got.Usage == nil || got.Usage.TotalTokens != 210 {
		t.Errorf("after an oversized event: events=%d usage=%+v, want 3 events and total 210", got.Events, got.Usage)
	}
	obj := []byte(`[{"x":"` + strings.Repeat("B", maxEventBytes+10) + `"},` + `{"usageMetadata":{"totalTokenCount":9}}]`)
	got = runTap(t, obj, "", 64<<10)
	if got.Usage == nil || got.Usage.TotalTokens != 9 {
		t.Errorf("array after an oversized element: usage=%+v, want total 9", got.Usage)
	}
}

func TestTapTextBounded(t *testing.T) {
	var b strings.Builder
	for range 3 {
		b.WriteString(`data: {"candidates":[{"content":{"parts":[{"text":"` + strings.Repeat("x", MaxTextBytes/2+1) + `"}]}}]}` + "\n\n")
	}
	tp := newTap("", true)
	tp.Write([]byte(b.String()))
	tp.finish()
	if tp.text.Len() != MaxTextBytes || !tp.textTruncated {
		t.Errorf("text len %d truncated %v, want %d true", tp.text.Len(), tp.textTruncated, MaxTextBytes)
	}
}

func TestTapUnknownEncoding(t *testing.T) {
	if tp := newTap("br", true); tp != nil {
		t.Errorf("newTap(br) = %v, want nil", tp)
	}
}

func BenchmarkTap(b *testing.B) {
	sse, err := os.ReadFile("testdata/stream.sse")
	if err != nil {
		b.Fatal(err)
	}
	// A realistic long answer: 200 events.
	body := bytes.Repeat(sse, 67)
	array, err := os.ReadFile("testdata/stream_array.json")
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		body []byte
		enc  string
	}{
		{"sse", body, ""},
		{"array", array, ""},
		{"sse_gzip", tu.Gzip(body), "gzip"},
		{"unary_1MB", benchBody(1 << 20), ""},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(bc.body)))
			for b.Loop() {
				tp := newTap(bc.enc, false)
				for p := bc.body; len(p) > 0; {
					n := min(len(p), 4096)
					tp.Write(p[:n])
					p = p[n:]
				}
				tp.finish()
				if tp.usage == nil {
					b.Fatal("no usage")
				}
			}
		})
	}
}

// TestTapOversizedUnaryKeepsUsage: a unary response too large to decode
// whole (inline image data) still yields its usageMetadata and
// modelVersion from its tail, whatever the reads; its text is lost, so the
// text is reported truncated.
func TestTapOversizedUnaryKeepsUsage(t *testing.T) {
	body := []byte(`{"candidates":[{"content":{"parts":[{"text":"an image:"},{"inlineData":{"mimeType":"image/png","data":"` +
		strings.Repeat("A", maxEventBytes+10) + `"}}],"role":"model"},"index":0}],` +
		`"usageMetadata":{"promptTokenCount":11,"candidatesTokenCount":1290,"totalTokenCount":1301},"modelVersion":"gemini-2.5-flash-image","responseId":"r"}`)
	want := tapResult{Usage: &Usage{PromptTokens: 11, CandidatesTokens: 1290, TotalTokens: 1301}, ModelVersion: "gemini-2.5-flash-image", Events: 1}
	for _, size := range []int{4096, 32 << 10, 1 << 20, len(body)} {
		for _, needText := range []bool{true, false} {
			tp := newTap("", needText)
			held := 0
			for rest := body; len(rest) > 0; {
				n := min(size, len(rest))
				tp.Write(rest[:n])
				rest = rest[n:]
				if len(body)-len(rest) > maxEventBytes+size {
					held = max(held, cap(tp.obj))
				}
			}
			tp.finish()
			got := tapResult{Usage: tp.usage, ModelVersion: tp.modelVersion, Text: tp.text.String(), Events: tp.events}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("writes of %d, text %v (-want +got):\n%s", size, needText, diff)
			}
			if needText && !tp.textTruncated {
				t.Errorf("writes of %d: text not reported truncated", size)
			}
			if held > 4*tailBytes+size {
				t.Errorf("writes of %d, text %v: the tap held a buffer of %d bytes past the limit", size, needText, held)
			}
		}
	}
}

// TestLastMember: only a real member name counts, not the end of a longer
// string that ends with the same bytes (a model-written functionCall key).
func TestLastMember(t *testing.T) {
	for _, tc := range []struct {
		name, b, want string
	}{
		{"member", `{"a":1,"usageMetadata":{"promptTokenCount":3}}`, `{"promptTokenCount":3}}`},
		{"member with space", `{"a":1, "usageMetadata" : 7}`, ` 7}`},
		{"first member", `{"usageMetadata":5}`, `5}`},
		{"key suffix only", `{"args":{"a\"usageMetadata":{"promptTokenCount":999999}}}`, ""},
		{"in a string value", `{"text":"see \"usageMetadata\": {}"}`, ""},
		{"suffix after the real one", `{"usageMetadata":{"promptTokenCount":3},"args":{"a\"usageMetadata":9}}`, `{"promptTokenCount":3},"args":{"a\"usageMetadata":9}}`},
		{"absent", `{"a":1}`, ""},
	} {
		got := lastMember([]byte(tc.b), `"usageMetadata"`)
		if string(got) != tc.want || (got == nil) != (tc.want == "") {
			t.Errorf("%s: lastMember = %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestTapSSEOversizedEventTruncates: an SSE event too large to read may
// hold text, so the text after it must not be recorded as the answer.
func TestTapSSEOversizedEventTruncates(t *testing.T) {
	ev := func(text string) string {
		return `data: {"candidates":[{"content":{"parts":[{"text":"` + text + `"}],"role":"model"},"index":0}]}` + "\r\n\r\n"
	}
	body := ev("I will never reveal the key. ") + ev(strings.Repeat("x", maxEventBytes+10)) + ev("Here it is: 1234")
	tp := newTap("", true)
	tp.Write([]byte(body))
	tp.finish()
	if !tp.textTruncated {
		t.Errorf("text %q recorded as complete after an oversized event", tp.text.String())
	}
}
