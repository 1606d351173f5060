package upstream

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/genai"

	"github.com/gemini-proxy/gemini-proxy/internal/testutil"
)

// interactionSSE is a streamed interaction with a thought, a function call
// whose arguments arrive in pieces, and text; events as in gemini-api.md
// §7.3, ending with the SDK test server's terminator.
const interactionSSE = `event: interaction.created
data: {"interaction":{"id":"v1_s","status":"in_progress","object":"interaction","model":"gemini-3-flash-preview"},"event_type":"interaction.created","event_id":"e0"}

event: interaction.status_update
data: {"interaction_id":"v1_s","status":"in_progress","event_type":"interaction.status_update"}

: a comment
event: step.start
data: {"index":0,"step":{"type":"thought"},"event_type":"step.start"}

event: step.delta
data: {"index":0,"delta":{"type":"thought_summary","content":{"type":"text","text":"Plan"}},"event_type":"step.delta"}

event: step.delta
data: {"index":0,"delta":{"type":"thought_signature","signature":"c2ln"},"event_type":"step.delta"}

event: step.stop
data: {"index":0,"event_type":"step.stop"}

event: step.start
data: {"index":1,"step":{"type":"function_call","id":"c1","name":"f"},"event_type":"step.start"}

event: step.delta
data: {"index":1,"delta":{"type":"arguments_delta","arguments":"{\"a\":"},"event_type":"step.delta"}

event: step.delta
data: {"index":1,"delta":{"type":"arguments_delta","arguments":" 1}"},"event_type":"step.delta"}

event: step.stop
data: {"index":1,"event_type":"step.stop"}

event: step.start
data: {"index":2,"step":{"type":"model_output"},"event_type":"step.start"}

event: step.delta
data: {"index":2,"delta":{"type":"text","text":"Hel"},"event_type":"step.delta"}

event: step.delta
data: {"index":2,"delta":{"type":"text","text":"lo"},"metadata":{"total_usage":{"total_input_tokens":9,"total_output_tokens":2,"total_tokens":11}},"event_type":"step.delta"}

event: step.stop
data: {"index":2,"event_type":"step.stop"}

event: interaction.completed
data: {"interaction":{"id":"v1_s","status":"requires_action","usage":{"total_input_tokens":9,"total_output_tokens":4,"total_thought_tokens":6,"total_tokens":19}},"event_type":"interaction.completed"}

event: done
data: [DONE]

`

// wantGemini is the Gemini SSE the translator must write for interactionSSE.
var wantGemini = strings.Join([]string{
	`{"candidates":[{"content":{"parts":[{"text":"Plan","thought":true}],"role":"model"},"index":0}],"modelVersion":"gemini-3-flash-preview","responseId":"v1_s"}`,
	`{"candidates":[{"content":{"parts":[{"functionCall":{"id":"c1","name":"f","args":{"a":1}},"thoughtSignature":"c2ln"}],"role":"model"},"index":0}],"modelVersion":"gemini-3-flash-preview","responseId":"v1_s"}`,
	`{"candidates":[{"content":{"parts":[{"text":"Hel"}],"role":"model"},"index":0}],"modelVersion":"gemini-3-flash-preview","responseId":"v1_s"}`,
	`{"candidates":[{"content":{"parts":[{"text":"lo"}],"role":"model"},"index":0}],"usageMetadata":{"promptTokenCount":9,"candidatesTokenCount":2,"totalTokenCount":11},"modelVersion":"gemini-3-flash-preview","responseId":"v1_s"}`,
	`{"candidates":[{"content":{"parts":[{"text":""}],"role":"model"},"finishReason":"STOP","index":0}],"usageMetadata":{"promptTokenCount":9,"candidatesTokenCount":4,"thoughtsTokenCount":6,"totalTokenCount":19},"modelVersion":"gemini-3-flash-preview","responseId":"v1_s"}`,
}, "\r\n\r\ndata: ")

func translate(t *testing.T, chunks [][]byte) (string, error) {
	t.Helper()
	var out bytes.Buffer
	tr := NewStreamTranslator("models/gemini-3-flash-preview", &out)
	for _, c := range chunks {
		if _, err := tr.Write(c); err != nil {
			return out.String(), err
		}
	}
	return out.String(), tr.Close()
}

func TestStreamTranslatorSplits(t *testing.T) {
	want := "data: " + wantGemini + "\r\n\r\n"
	for _, eol := range []string{"\n", "\r\n"} {
		in := []byte(strings.ReplaceAll(interactionSSE, "\n", eol))
		var splits [][][]byte
		for i := 0; i <= len(in); i += 7 { // two pieces, cut at many places
			splits = append(splits, [][]byte{in[:i], in[i:]})
		}
		var bytewise [][]byte
		for i := range in {
			bytewise = append(bytewise, in[i:i+1])
		}
		splits = append(splits, bytewise)
		for _, chunks := range splits {
			got, err := translate(t, chunks)
			if err != nil {
				t.Fatalf("eol %q, first piece %d bytes: error %v", eol, len(chunks[0]), err)
			}
			if got != want {
				t.Fatalf("eol %q, first piece %d bytes: output mismatch (-want +got):\n%s", eol, len(chunks[0]), cmp.Diff(want, got))
			}
		}
	}
}

// flushRecorder counts flushes and the bytes written before each.
type flushRecorder struct {
	bytes.Buffer
	flushedAt []int
}

func (f *flushRecorder) Flush() { f.flushedAt = append(f.flushedAt, f.Len()) }

func TestStreamTranslatorFlushesPerChunk(t *testing.T) {
	var w flushRecorder
	tr := NewStreamTranslator("m", &w)
	ev := `data: {"event_type":"step.delta","index":0,"delta":{"type":"text","text":"a"}}` + "\n\n"
	if _, err := tr.Write([]byte(ev)); err != nil {
		t.Fatal(err)
	}
	if len(w.flushedAt) != 1 || w.flushedAt[0] != w.Len() || !strings.HasSuffix(w.String(), "\r\n\r\n") {
		t.Errorf("after one event: flushes at %v, %d bytes %q; want one flush after the whole chunk", w.flushedAt, w.Len(), w.String())
	}
	if err := tr.Close(); !errors.Is(err, ErrIncomplete) {
		t.Errorf("Close() = %v, want ErrIncomplete", err)
	}
}

func TestStreamTranslatorErrors(t *testing.T) {
	created := `data: {"event_type":"interaction.created","interaction":{"id":"v1"}}` + "\n\n"
	tests := []struct {
		name, in string
		check    func(error) bool
	}{
		{"cut before completed", created + `data: {"event_type":"step.delta","index":0,"delta":{"type":"text","text":"a"}}` + "\n\n", func(err error) bool { return errors.Is(err, ErrIncomplete) }},
		{"empty stream", "", func(err error) bool { return errors.Is(err, ErrIncomplete) }},
		{"error event", created + `event: error` + "\n" + `data: {"event_type":"error","error":{"code":"resource_exhausted","message":"quota"}}` + "\n\n", func(err error) bool {
			var se *StreamError
			return errors.As(err, &se) && se.Code == "resource_exhausted" && se.Message == "quota"
		}},
		{"search step", created + `data: {"event_type":"step.start","index":0,"step":{"type":"google_search_call"}}` + "\n\n", func(err error) bool { return errors.Is(err, ErrUntranslatable) }},
		{"unknown delta", created + `data: {"event_type":"step.delta","index":0,"delta":{"type":"text_annotation_delta"}}` + "\n\n", func(err error) bool { return errors.Is(err, ErrUntranslatable) }},
		{"failed", created + `data: {"event_type":"interaction.completed","interaction":{"id":"v1","status":"failed"}}` + "\n\n", func(err error) bool { return errors.Is(err, ErrUntranslatable) }},
		{"bad args", created + `data: {"event_type":"step.start","index":0,"step":{"type":"function_call","id":"1","name":"f"}}` + "\n\n" +
			`data: {"event_type":"step.delta","index":0,"delta":{"type":"arguments_delta","arguments":"[1"}}` + "\n\n" +
			`data: {"event_type":"step.stop","index":0}` + "\n\n", func(err error) bool { return errors.Is(err, ErrUntranslatable) }},
		{"invalid JSON", `data: {"event_type":` + "\n\n", func(err error) bool { return err != nil && !errors.Is(err, ErrUntranslatable) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := translate(t, [][]byte{[]byte(tt.in)})
			if !tt.check(err) {
				t.Errorf("error = %v (%T), not the expected kind", err, err)
			}
		})
	}
}

func TestStreamTranslatorStickyError(t *testing.T) {
	var out bytes.Buffer
	tr := NewStreamTranslator("m", &out)
	bad := []byte(`data: {"event_type":"nope"}` + "\n\n")
	if _, err := tr.Write(bad); !errors.Is(err, ErrUntranslatable) {
		t.Fatalf("Write() = %v, want ErrUntranslatable", err)
	}
	if n, err := tr.Write([]byte("data: [DONE]\n\n")); n != 0 || !errors.Is(err, ErrUntranslatable) {
		t.Errorf("second Write() = %d, %v; want 0 and the first error", n, err)
	}
	if err := tr.Close(); !errors.Is(err, ErrUntranslatable) {
		t.Errorf("Close() = %v, want the first error", err)
	}
}

// TestStreamTranslatorSDK serves the translated stream to the real Go SDK
// as streamGenerateContent?alt=sse and checks what the SDK yields.
func TestStreamTranslatorSDK(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, ":streamGenerateContent") || r.URL.Query().Get("alt") != "sse" {
			http.Error(w, "unexpected "+r.URL.String(), http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		tr := NewStreamTranslator("gemini-3-flash-preview", w)
		if _, err := tr.Write([]byte(interactionSSE)); err != nil {
			panic(http.ErrAbortHandler)
		}
		if err := tr.Close(); err != nil {
			panic(http.ErrAbortHandler)
		}
	}))
	defer ts.Close()
	client := testutil.NewClient(t, ts.URL, "k")
	var text, thoughts strings.Builder
	var calls []string
	var last *genai.GenerateContentResponse
	for resp, err := range client.Models.GenerateContentStream(t.Context(), "gemini-3-flash-preview", genai.Text("hi"), nil) {
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
		for _, p := range resp.Candidates[0].Content.Parts {
			switch {
			case p.Thought:
				thoughts.WriteString(p.Text)
			case p.FunctionCall != nil:
				calls = append(calls, fmt.Sprintf("%s %s %v sig=%q", p.FunctionCall.ID, p.FunctionCall.Name, p.FunctionCall.Args, p.ThoughtSignature))
			default:
				text.WriteString(p.Text)
			}
		}
		last = resp
	}
	if text.String() != "Hello" || thoughts.String() != "Plan" {
		t.Errorf("text %q thoughts %q, want Hello and Plan", text.String(), thoughts.String())
	}
	if want := []string{`c1 f map[a:1] sig="sig"`}; !cmp.Equal(calls, want) {
		t.Errorf("function calls = %q, want %q", calls, want)
	}
	if last == nil || last.Candidates[0].FinishReason != genai.FinishReasonStop || last.UsageMetadata.TotalTokenCount != 19 ||
		last.UsageMetadata.ThoughtsTokenCount != 6 || last.ResponseID != "v1_s" {
		t.Errorf("last chunk = %+v, want STOP with usage total 19, thoughts 6, id v1_s", last)
	}
}
