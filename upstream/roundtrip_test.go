package upstream_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/genai"

	"github.com/gemini-proxy/gemini-proxy/internal/emulator"
	"github.com/gemini-proxy/gemini-proxy/internal/testutil"
	"github.com/gemini-proxy/gemini-proxy/upstream"
)

const model = "gemini-2.5-flash"

// post sends body to the emulator and returns status and response body.
func post(t *testing.T, url string, body []byte) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Goog-Api-Key", "k")
	res, b := testutil.Do(t, nil, req)
	return res.StatusCode, b
}

// sseChunks splits a Gemini SSE body the way the Go SDK does
// (api_client.go scan: events end at "\n\n" or "\r\n\r\n", each event is a
// single "data:" field) and decodes each chunk.
func sseChunks(t *testing.T, body []byte) []*genai.GenerateContentResponse {
	t.Helper()
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(nil, 1<<20)
	sc.Split(func(data []byte, atEOF bool) (int, []byte, error) {
		for _, sep := range [][]byte{[]byte("\r\n\r\n"), []byte("\n\n")} {
			if i := bytes.Index(data, sep); i >= 0 {
				return i + len(sep), data[:i], nil
			}
		}
		if atEOF && len(data) > 0 {
			return len(data), data, nil
		}
		return 0, nil, nil
	})
	var out []*genai.GenerateContentResponse
	for sc.Scan() {
		name, value, ok := bytes.Cut(sc.Bytes(), []byte(":"))
		if !ok || string(name) != "data" {
			t.Fatalf("invalid stream chunk %q", sc.Bytes())
		}
		var r genai.GenerateContentResponse
		if err := json.Unmarshal(value, &r); err != nil {
			t.Fatalf("chunk %q: %v", value, err)
		}
		out = append(out, &r)
	}
	return out
}

// summary is what a client observes of an answer.
type summary struct {
	Text   string
	Finish genai.FinishReason
	Usage  genai.GenerateContentResponseUsageMetadata
}

func unary(t *testing.T, b []byte) (summary, *genai.Content) {
	t.Helper()
	var r genai.GenerateContentResponse
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("decoding %s: %v", b, err)
	}
	if len(r.Candidates) != 1 || r.UsageMetadata == nil {
		t.Fatalf("response %s: want one candidate and usage", b)
	}
	u := *r.UsageMetadata
	u.PromptTokensDetails, u.CandidatesTokensDetails = nil, nil // the emulator's interactions report no modality details
	return summary{r.Text(), r.Candidates[0].FinishReason, u}, r.Candidates[0].Content
}

func streamed(t *testing.T, b []byte) summary {
	t.Helper()
	var s summary
	chunks := sseChunks(t, b)
	if len(chunks) < 2 {
		t.Fatalf("stream %q: want several chunks", b)
	}
	for _, c := range chunks {
		s.Text += c.Text()
	}
	last := chunks[len(chunks)-1]
	s.Finish = last.Candidates[0].FinishReason
	if last.UsageMetadata != nil {
		s.Usage = *last.UsageMetadata
		s.Usage.PromptTokensDetails, s.Usage.CandidatesTokensDetails = nil, nil
	}
	return s
}

// TestEmulatorRoundTrip runs a three-turn conversation twice against the
// emulator: as full generateContent requests, and as a first interaction
// plus continuations carrying only the new turn with previous_interaction_id.
// The client-visible answers (text, finishReason, usage) must be identical,
// unary and streamed.
func TestEmulatorRoundTrip(t *testing.T) {
	for _, stream := range []bool{false, true} {
		name := "unary"
		if stream {
			name = "stream"
		}
		t.Run(name, func(t *testing.T) {
			// Implicit caching off: the full requests would otherwise report
			// cached tokens from their own earlier requests at other
			// thresholds than the interaction history.
			_, ts := testutil.StartEmulator(t, emulator.Options{ImplicitCacheMinTokens: 1 << 30, StreamChunkBytes: 16})
			generate := ts.URL + "/v1beta/models/" + model + ":generateContent"
			if stream {
				generate = ts.URL + "/v1beta/models/" + model + ":streamGenerateContent?alt=sse"
			}
			create := ts.URL + "/v1beta/interactions"

			var contents []json.RawMessage
			prev := ""
			for turn, question := range []string{"Why is the sky blue?", "And at sunset?", "Thanks — summarise <both> in one line."} {
				contents = append(contents, json.RawMessage(`{"role":"user","parts":[{"text":`+quote(question)+`}]}`))
				req, _ := json.Marshal(map[string]any{
					"contents":          contents,
					"systemInstruction": map[string]any{"parts": []any{map[string]any{"text": "be brief"}}},
					"generationConfig":  map[string]any{"temperature": 0.2, "maxOutputTokens": 400},
				})

				status, full := post(t, generate, req)
				if status != 200 {
					t.Fatalf("turn %d: generateContent %d %s", turn, status, full)
				}
				newTurns := 1
				if prev == "" {
					newTurns = len(contents)
				}
				body, ok, err := upstream.ToInteraction(req, "models/"+model, prev, newTurns, stream)
				if err != nil || !ok {
					t.Fatalf("turn %d: ToInteraction ok=%v err=%v", turn, ok, err)
				}
				if turn > 0 && len(body) >= len(req) {
					t.Errorf("turn %d: continuation is %d bytes, full request %d", turn, len(body), len(req))
				}
				status, raw := post(t, create, body)
				if status != 200 {
					t.Fatalf("turn %d: interactions %d %s (request %s)", turn, status, raw, body)
				}

				var want, got summary
				var modelTurn *genai.Content
				if stream {
					var out bytes.Buffer
					tr := upstream.NewStreamTranslator(model, &out)
					if _, err := tr.Write(raw); err != nil {
						t.Fatalf("turn %d: translating stream: %v", turn, err)
					}
					if err := tr.Close(); err != nil {
						t.Fatalf("turn %d: Close: %v", turn, err)
					}
					want, got = streamed(t, full), streamed(t, out.Bytes())
					modelTurn = &genai.Content{Role: "model", Parts: []*genai.Part{{Text: got.Text}}}
					prev = interactionID(t, raw)
				} else {
					translated, err := upstream.FromInteraction(raw, model)
					if err != nil {
						t.Fatalf("turn %d: FromInteraction: %v", turn, err)
					}
					want, _ = unary(t, full)
					got, modelTurn = unary(t, translated)
					var it struct{ ID string }
					_ = json.Unmarshal(raw, &it)
					prev = it.ID
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("turn %d: generateContent vs interaction (-want +got):\n%s", turn, diff)
				}
				if !strings.Contains(got.Text, "emulator") {
					t.Errorf("turn %d: text %q is not an emulator answer", turn, got.Text)
				}
				m, _ := json.Marshal(modelTurn)
				contents = append(contents, m)
			}
		})
	}
}

// TestEmulatorExpiredInteraction shows the failure the proxy falls back on:
// a continuation of an interaction the upstream does not know is a 404 in
// the Interactions error shape, with nothing streamed.
func TestEmulatorExpiredInteraction(t *testing.T) {
	_, ts := testutil.StartEmulator(t, emulator.Options{})
	body, ok, err := upstream.ToInteraction([]byte(`{"contents":[{"parts":[{"text":"a"}]},{"role":"model","parts":[{"text":"b"}]},{"parts":[{"text":"c"}]}]}`),
		model, "v1_gone", 1, true)
	if err != nil || !ok {
		t.Fatalf("ToInteraction ok=%v err=%v", ok, err)
	}
	status, raw := post(t, ts.URL+"/v1beta/interactions", body)
	var e struct {
		Error struct{ Code string } `json:"error"`
	}
	if status != http.StatusNotFound || json.Unmarshal(raw, &e) != nil || e.Error.Code != "not_found" {
		t.Errorf("continuation of unknown interaction = %d %s, want 404 not_found", status, raw)
	}
}

func interactionID(t *testing.T, sse []byte) string {
	t.Helper()
	for _, line := range strings.Split(string(sse), "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var ev struct {
			Interaction struct{ ID string } `json:"interaction"`
		}
		if json.Unmarshal([]byte(data), &ev) == nil && ev.Interaction.ID != "" {
			return ev.Interaction.ID
		}
	}
	t.Fatalf("no interaction id in %s", sse)
	return ""
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
