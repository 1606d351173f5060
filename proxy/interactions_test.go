package proxy

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gemini-proxy/gemini-proxy/internal/emulator"
	"github.com/gemini-proxy/gemini-proxy/metrics"
)

// memStore is an InteractionStore in a map.
type memStore struct {
	mu sync.Mutex
	m  map[string][]byte
}

func (s *memStore) Conversation(tenant, k string) ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[tenant+"\x00"+k]
	return v, ok
}

func (s *memStore) SetConversation(tenant, k string, v []byte) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string][]byte{}
	}
	s.m[tenant+"\x00"+k] = v
	return true
}

func chainOf(t *testing.T, contents ...string) [32]byte {
	t.Helper()
	var raws []json.RawMessage
	for _, c := range contents {
		raws = append(raws, json.RawMessage(c))
	}
	units, err := canonUnits(raws)
	if err != nil {
		t.Fatalf("canonUnits(%v): %v", contents, err)
	}
	h := chainSeed("gemini-2.5-flash")
	for _, u := range units {
		h = chainNext(h, u.sum)
	}
	return h
}

// TestCanonicalChain: what the Go and JS SDKs re-send of an answer hashes
// like the answer; any real difference does not.
func TestCanonicalChain(t *testing.T) {
	const (
		user  = `{"role":"user","parts":[{"text":"Hello"}]}`
		model = `{"role":"model","parts":[{"text":"Hi there, how can I help?"}]}`
		call  = `{"role":"model","parts":[{"functionCall":{"id":"c1","name":"get","args":{"user_id":1,"b":[1.50,"x"]}}}]}`
	)
	same := []struct {
		name string
		a, b []string
	}{
		{"identical", []string{user, model}, []string{user, model}},
		{"role omitted", []string{user}, []string{`{"parts":[{"text":"Hello"}]}`}},
		{"key order and spacing", []string{user}, []string{`{ "parts" : [ { "text" : "Hello" } ] , "role" : "user" }`}},
		{"escapes", []string{`{"role":"user","parts":[{"text":"é<>"}]}`}, []string{`{"role":"user","parts":[{"text":"\u00e9\u003c\u003e"}]}`}},
		{"snake_case schema keys", []string{`{"role":"user","parts":[{"inlineData":{"mimeType":"image/png","data":"AAAA"}}]}`},
			[]string{`{"role":"user","parts":[{"inline_data":{"mime_type":"image/png","data":"AAAA"}}]}`}},
		{"streamed answer re-sent per chunk", []string{user, model},
			[]string{user, `{"role":"model","parts":[{"text":"Hi there, "}]}`, `{"role":"model","parts":[{"text":"how can I help?"}]}`, `{"role":"model","parts":[{"text":""}]}`}},
		{"answer in several text parts", []string{user, model}, []string{user, `{"role":"model","parts":[{"text":"Hi there,"},{"text":" how can I help?"}]}`}},
		{"args key order", []string{user, call}, []string{user, `{"role":"model","parts":[{"functionCall":{"args":{"b":[1.50,"x"],"user_id":1},"name":"get","id":"c1"}}]}`}},
	}
	for _, tt := range same {
		if a, b := chainOf(t, tt.a...), chainOf(t, tt.b...); a != b {
			t.Errorf("%s: hashes differ, want equal", tt.name)
		}
	}
	differ := []struct {
		name string
		a, b []string
	}{
		{"one byte of text", []string{user, model}, []string{user, `{"role":"model","parts":[{"text":"Hi there, how can I help!"}]}`}},
		{"role", []string{user}, []string{`{"role":"model","parts":[{"text":"Hello"}]}`}},
		{"user text split in parts", []string{`{"role":"user","parts":[{"text":"Hel"},{"text":"lo"}]}`}, []string{user}},
		{"two user turns are not one", []string{user, user}, []string{`{"role":"user","parts":[{"text":"Hello"},{"text":"Hello"}]}`}},
		{"args keys are data", []string{user, call}, []string{user, `{"role":"model","parts":[{"functionCall":{"id":"c1","name":"get","args":{"userId":1,"b":[1.50,"x"]}}}]}`}},
		{"number spelling", []string{user, call}, []string{user, `{"role":"model","parts":[{"functionCall":{"id":"c1","name":"get","args":{"user_id":1,"b":[1.5,"x"]}}}]}`}},
		{"thought signature", []string{user, model}, []string{user, `{"role":"model","parts":[{"text":"Hi there, how can I help?","thoughtSignature":"c2ln"}]}`}},
		{"thought part", []string{user, model}, []string{user, `{"role":"model","parts":[{"text":"Hi there, how can I help?","thought":true}]}`}},
	}
	for _, tt := range differ {
		if a, b := chainOf(t, tt.a...), chainOf(t, tt.b...); a == b {
			t.Errorf("%s: hashes equal, want different", tt.name)
		}
	}
	if chainSeed("gemini-2.5-flash") == chainSeed("gemini-2.5-pro") {
		t.Error("two models share a chain seed")
	}
}

// ixFixture is the proxy with interactions on in front of the emulator.
type ixFixture struct {
	*fixture
	emu   *emulator.Server
	up    *httptest.Server
	store *memStore
}

func newIxFixture(t *testing.T, eo emulator.Options) *ixFixture {
	t.Helper()
	emu := emulator.New(eo)
	up := httptest.NewServer(emu)
	t.Cleanup(up.Close)
	store := &memStore{}
	f := newFixture(t, up.URL, Options{
		Rewrite:      RewriteOptions{Enabled: true},
		Interactions: InteractionsOptions{Enabled: true, Store: store},
	})
	return &ixFixture{fixture: f, emu: emu, up: up, store: store}
}

// call posts body to base+path with key and returns status and body.
func call(t *testing.T, base, path, key, body string, hdr ...string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Goog-Api-Key", key)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, b := do(t, rawClient(), req)
	return res.StatusCode, b
}

const (
	genURL    = "/v1beta/models/gemini-2.5-flash:generateContent"
	sseURL    = "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
	arrayURL  = "/v1beta/models/gemini-2.5-flash:streamGenerateContent"
	keyA      = "key-tenant-a"
	keyB      = "key-tenant-b"
	turnsJSON = `{"contents":[%s]}`
)

// answer is what a client makes of a generate response: the text, the
// parts of candidate 0 merged, the finish reason and the final usage.
type answer struct {
	Text   string
	Finish string
	Usage  map[string]any
	ID     string // responseId
}

var ignoreID = cmpopts.IgnoreFields(answer{}, "ID")

func parseAnswer(t *testing.T, path string, b []byte) answer {
	t.Helper()
	var chunks []map[string]any
	switch {
	case strings.Contains(path, "alt=sse"):
		for _, ev := range strings.Split(string(b), "\r\n\r\n") {
			if d, ok := strings.CutPrefix(strings.TrimSpace(ev), "data: "); ok {
				var m map[string]any
				if err := json.Unmarshal([]byte(d), &m); err != nil {
					t.Fatalf("SSE chunk %q: %v", d, err)
				}
				chunks = append(chunks, m)
			}
		}
	case strings.Contains(path, "stream"):
		if err := json.Unmarshal(b, &chunks); err != nil {
			t.Fatalf("JSON array stream: %v\n%s", err, b)
		}
	default:
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("unary: %v\n%s", err, b)
		}
		chunks = append(chunks, m)
	}
	var a answer
	for _, c := range chunks {
		if id, ok := c["responseId"].(string); ok {
			a.ID = id
		}
		if u, ok := c["usageMetadata"].(map[string]any); ok {
			a.Usage = u
		}
		cands, _ := c["candidates"].([]any)
		if len(cands) == 0 {
			continue
		}
		cand, _ := cands[0].(map[string]any)
		if fr, ok := cand["finishReason"].(string); ok {
			a.Finish = fr
		}
		content, _ := cand["content"].(map[string]any)
		parts, _ := content["parts"].([]any)
		for _, p := range parts {
			pm, _ := p.(map[string]any)
			s, _ := pm["text"].(string)
			a.Text += s
		}
	}
	return a
}

func userTurn(text string) string {
	b, _ := json.Marshal(map[string]any{"role": "user", "parts": []any{map[string]any{"text": text}}})
	return string(b)
}

func modelTurn(text string) string {
	b, _ := json.Marshal(map[string]any{"role": "model", "parts": []any{map[string]any{"text": text}}})
	return string(b)
}

// lastInteraction returns the body of the last interactions request the
// emulator received.
func lastReceived(t *testing.T, emu *emulator.Server) emulator.Received {
	t.Helper()
	rs := emu.Received()
	if len(rs) == 0 {
		t.Fatal("emulator received nothing")
	}
	return rs[len(rs)-1]
}

type ixBody struct {
	Model  string            `json:"model"`
	Prev   string            `json:"previous_interaction_id"`
	Input  []json.RawMessage `json:"input"`
	Stream bool              `json:"stream"`
	Store  *bool             `json:"store"`
}

func decodeIx(t *testing.T, b []byte) ixBody {
	t.Helper()
	var x ixBody
	if err := json.Unmarshal(b, &x); err != nil {
		t.Fatalf("interaction body: %v\n%s", err, b)
	}
	return x
}

// TestInteractionsConversation: a three-turn conversation in each framing
// goes as a new interaction and then as continuations carrying only the
// new turn, and the client gets what the emulator answers without the
// feature (text, finish reason, usage).
func TestInteractionsConversation(t *testing.T) {
	for _, path := range []string{genURL, sseURL, arrayURL} {
		t.Run(path, func(t *testing.T) {
			f := newIxFixture(t, emulator.Options{})
			plain := emulator.New(emulator.Options{})
			direct := httptest.NewServer(plain)
			defer direct.Close()

			var turns []string
			var prevID string
			for i, q := range []string{"Hello, who are you?", "Tell me more.", "Thanks, and one last thing?"} {
				turns = append(turns, userTurn(q))
				body := fmt.Sprintf(turnsJSON, strings.Join(turns, ","))
				code, got := call(t, f.front.URL, path, keyA, body)
				if code != 200 {
					t.Fatalf("turn %d: status %d: %s", i+1, code, got)
				}
				rec := lastReceived(t, f.emu)
				if rec.API != "interactions" || rec.Status != 200 {
					t.Fatalf("turn %d: emulator got %s (status %d), want interactions", i+1, rec.API, rec.Status)
				}
				ix := decodeIx(t, rec.Body)
				if ix.Prev != prevID {
					t.Errorf("turn %d: previous_interaction_id = %q, want %q", i+1, ix.Prev, prevID)
				}
				wantInput := len(turns)
				if i > 0 {
					wantInput = 1
				}
				if len(ix.Input) != wantInput || !strings.Contains(string(ix.Input[len(ix.Input)-1]), q) {
					t.Errorf("turn %d: input = %s, want %d step(s) ending with the new question", i+1, ix.Input, wantInput)
				}
				if ix.Stream != strings.Contains(path, "stream") || ix.Model != "gemini-2.5-flash" {
					t.Errorf("turn %d: stream=%v model=%q", i+1, ix.Stream, ix.Model)
				}
				a := parseAnswer(t, path, got)
				_, want := call(t, direct.URL, path, keyA, body)
				w := parseAnswer(t, path, want)
				if diff := cmp.Diff(w, a, ignoreID); diff != "" {
					t.Errorf("turn %d: answer differs from the emulator without the proxy feature (-want +got):\n%s", i+1, diff)
				}
				// The next turn continues the interaction that just
				// answered: its id is the responseId the client saw.
				prevID = a.ID
				turns = append(turns, modelTurn(a.Text))
			}
			if got := testutil.ToFloat64(f.m.InteractionRequests.WithLabelValues(metrics.InteractionContinued)); got != 2 {
				t.Errorf("continued requests = %v, want 2", got)
			}
			if got := testutil.ToFloat64(f.m.InteractionRequests.WithLabelValues(metrics.InteractionStarted)); got != 1 {
				t.Errorf("started requests = %v, want 1", got)
			}
			if got := testutil.ToFloat64(f.m.InteractionSavedBytes); got <= 0 {
				t.Errorf("saved bytes = %v, want > 0", got)
			}
			if got := testutil.ToFloat64(f.m.UsageTokens.WithLabelValues("gemini-2.5-flash", metrics.TokensPrompt)); got <= 0 {
				t.Errorf("usage tokens recorded = %v, want the translated usage to reach the tap", got)
			}
			if !strings.Contains(f.logs.String(), "interaction=continued") {
				t.Errorf("access log has no interaction=continued field:\n%s", f.logs.String())
			}
		})
	}
}

