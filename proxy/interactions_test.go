package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gemini-proxy/gemini-proxy/internal/emulator"
	tu "github.com/gemini-proxy/gemini-proxy/internal/testutil"
	"github.com/gemini-proxy/gemini-proxy/metrics"
	"github.com/gemini-proxy/gemini-proxy/rewrite"
)

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
	store *localStore
}

// newIxFixture starts the emulator configured by eo, each wrap around its
// handler, and the proxy with interactions on in front of it.
func newIxFixture(t *testing.T, eo emulator.Options, wrap ...func(http.Handler) http.Handler) *ixFixture {
	t.Helper()
	emu, up := tu.StartEmulator(t, eo, wrap...)
	store := newLocalStore(1 << 20)
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
	return tu.Last(t, "request at the emulator", emu.Received())
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
			_, direct := tu.StartEmulator(t, emulator.Options{})

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

// converse runs two turns for key through f and returns the contents of
// a third request (history plus a new question).
func converse(t *testing.T, f *ixFixture, path, key string) []string {
	t.Helper()
	turns := []string{userTurn("First question?")}
	for i := range 2 {
		code, got := call(t, f.front.URL, path, key, fmt.Sprintf(turnsJSON, strings.Join(turns, ",")))
		if code != 200 {
			t.Fatalf("turn %d: %d %s", i+1, code, got)
		}
		turns = append(turns, modelTurn(parseAnswer(t, path, got).Text), userTurn(fmt.Sprintf("Follow-up %d?", i+1)))
	}
	return turns
}

// TestInteractionsFallback: when the upstream no longer has the
// interaction (404, or 400 where it answers so) or the interaction request
// fails before any byte reached the client, the client gets the answer of
// the full generateContent request.
func TestInteractionsFallback(t *testing.T) {
	onlyInteractions := func(r *http.Request) bool { return strings.HasSuffix(r.URL.Path, "/interactions") }
	tests := []struct {
		name   string
		path   string
		eo     emulator.Options
		break_ func(*emulator.Server)
		reason string
		// fresh: the next turn starts a new interaction (the old ones
		// are gone); else it continues the last one that answered,
		// with the turns since as input.
		fresh bool
	}{
		{"deleted unary", genURL, emulator.Options{}, func(e *emulator.Server) { e.DeleteInteractions() }, metrics.FallbackNotFound, true},
		{"deleted sse", sseURL, emulator.Options{}, func(e *emulator.Server) { e.DeleteInteractions() }, metrics.FallbackNotFound, true},
		{"deleted array", arrayURL, emulator.Options{}, func(e *emulator.Server) { e.DeleteInteractions() }, metrics.FallbackNotFound, true},
		{"rejected 400", genURL, emulator.Options{UnknownPreviousStatus: 400}, func(e *emulator.Server) { e.DeleteInteractions() }, metrics.FallbackRejected, true},
		{"400 about the new turn", genURL, emulator.Options{}, func(e *emulator.Server) {
			e.SetFault(emulator.Fault{Status: 400, Message: "Invalid value at 'input[0].content[0]'.", Times: 1, Match: onlyInteractions})
		}, metrics.FallbackRejected, false},
		{"upstream 503", sseURL, emulator.Options{}, func(e *emulator.Server) {
			e.SetFault(emulator.Fault{Status: 503, Times: 1, Match: onlyInteractions})
		}, metrics.FallbackUpstreamError, false},
		{"stream cut before the first chunk", sseURL, emulator.Options{}, func(e *emulator.Server) {
			e.SetFault(emulator.Fault{DisconnectAfterChunks: 2, Times: 1, Match: onlyInteractions})
		}, metrics.FallbackUntranslatable, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newIxFixture(t, tt.eo)
			turns := converse(t, f, tt.path, keyA)
			body := fmt.Sprintf(turnsJSON, strings.Join(turns, ","))
			tt.break_(f.emu)
			before := len(f.emu.Received())
			code, got := call(t, f.front.URL, tt.path, keyA, body)
			if code != 200 {
				t.Fatalf("status %d: %s", code, got)
			}
			_, plain := tu.StartEmulator(t, emulator.Options{})
			_, want := call(t, plain.URL, tt.path, keyA, body)
			if diff := cmp.Diff(parseAnswer(t, tt.path, want), parseAnswer(t, tt.path, got), ignoreID); diff != "" {
				t.Errorf("answer after fallback (-want +got):\n%s", diff)
			}
			rs := f.emu.Received()[before:]
			last := rs[len(rs)-1]
			if last.API == "interactions" || len(last.Contents) != len(turns) {
				t.Errorf("last upstream request = %s with %d contents, want the full generate request with %d", last.API, len(last.Contents), len(turns))
			}
			if got := testutil.ToFloat64(f.m.InteractionFallbacks.WithLabelValues(tt.reason)); got != 1 {
				t.Errorf("fallbacks{reason=%s} = %v, want 1", tt.reason, got)
			}
			waitFor(t, "the access log", func() bool { return strings.Contains(f.logs.String(), "fallback="+tt.reason) })
			// The conversation goes on: the next turn starts a new
			// interaction and the one after continues it.
			turns = append(turns, modelTurn(parseAnswer(t, tt.path, got).Text), userTurn("Still there?"))
			if code, got := call(t, f.front.URL, tt.path, keyA, fmt.Sprintf(turnsJSON, strings.Join(turns, ","))); code != 200 {
				t.Fatalf("after fallback: %d %s", code, got)
			}
			r := lastReceived(t, f.emu)
			x := decodeIx(t, r.Body)
			switch {
			case r.API != "interactions" || r.Status != 200:
				t.Errorf("after fallback: upstream got %s (status %d), want an interaction", r.API, r.Status)
			case tt.fresh && (x.Prev != "" || len(x.Input) != len(turns)):
				t.Errorf("after fallback: prev %q, %d input steps; want a new interaction with all %d turns", x.Prev, len(x.Input), len(turns))
			case !tt.fresh && (x.Prev == "" || len(x.Input) != 3):
				t.Errorf("after fallback: prev %q, %d input steps; want the turn-2 interaction continued with 3 steps", x.Prev, len(x.Input))
			}
		})
	}
}

// TestInteractionsStreamCutAfterFirstByte: once a chunk reached the
// client, a failing interaction stream is not retried (the client would
// see two answers): the client sees the stream cut, as it would from
// generateContent.
func TestInteractionsStreamCutAfterFirstByte(t *testing.T) {
	f := newIxFixture(t, emulator.Options{StreamChunkBytes: 16})
	turns := converse(t, f, sseURL, keyA)
	// Events: interaction.created, step.start, then text deltas, 30 ms
	// apart, so that the first chunk reaches the client before the cut.
	f.emu.SetFault(emulator.Fault{ChunkDelay: 30 * time.Millisecond, DisconnectAfterChunks: 5, Times: 1, Match: func(r *http.Request) bool {
		return strings.HasSuffix(r.URL.Path, "/interactions")
	}})
	before := len(f.emu.Received())
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, f.front.URL+sseURL, strings.NewReader(fmt.Sprintf(turnsJSON, strings.Join(turns, ","))))
	req.Header.Set("X-Goog-Api-Key", keyA)
	res, err := rawClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var buf bytes.Buffer
	_, err = buf.ReadFrom(res.Body)
	if err == nil {
		t.Errorf("stream ended cleanly, want it cut; got %q", buf.String())
	}
	if !strings.HasPrefix(buf.String(), "data: ") {
		t.Errorf("client got %q before the cut, want at least one chunk", buf.String())
	}
	for _, r := range f.emu.Received()[before:] {
		if r.API != "interactions" {
			t.Errorf("upstream got a %s request after the first byte was sent", r.API)
		}
	}
	if n := testutil.ToFloat64(f.m.InteractionFallbacks.WithLabelValues(metrics.FallbackUntranslatable)); n != 0 {
		t.Errorf("fallbacks = %v after the first byte, want 0", n)
	}
}

// TestInteractionsNoContinuation: a changed earlier turn, another
// tenant's key, another model, an untranslatable field, cachedContent,
// Vertex paths and rewrite off never continue.
func TestInteractionsNoContinuation(t *testing.T) {
	f := newIxFixture(t, emulator.Options{})
	turns := converse(t, f, genURL, keyA)
	changed := append([]string{userTurn("First question!")}, turns[1:]...)
	body := func(ts []string, extra string) string {
		return `{"contents":[` + strings.Join(ts, ",") + `]` + extra + `}`
	}
	tests := []struct {
		name, path, key, body string
		hdr                   []string
		wantAPI               string
	}{
		{"changed earlier turn", genURL, keyA, body(changed, ""), nil, "interactions"},
		{"other tenant", genURL, keyB, body(turns, ""), nil, "interactions"},
		{"other model", "/v1beta/models/gemini-2.5-pro:generateContent", keyA, body(turns, ""), nil, "interactions"},
		{"untranslatable topK", genURL, keyA, body(turns, `,"generationConfig":{"topK":3}`), nil, "generateContent"},
		{"rewrite off", genURL, keyA, body(turns, ""), []string{HeaderRewrite, "off"}, "generateContent"},
		{"rewrite dry-run", genURL, keyA, body(turns, ""), []string{HeaderRewrite, "dry-run"}, "generateContent"},
		{"vertex", "/v1beta1/projects/p/locations/us-central1/publishers/google/models/gemini-2.5-flash:generateContent", keyA, body(turns, ""), []string{"Authorization", "Bearer tok"}, "generateContent"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(f.emu.Received())
			code, got := call(t, f.front.URL, tt.path, tt.key, tt.body, tt.hdr...)
			if code != 200 {
				t.Fatalf("status %d: %s", code, got)
			}
			rs := f.emu.Received()[before:]
			if len(rs) != 1 || rs[0].API != tt.wantAPI {
				t.Fatalf("upstream got %d requests, last %s; want one %s", len(rs), rs[len(rs)-1].API, tt.wantAPI)
			}
			if tt.wantAPI == "interactions" {
				if x := decodeIx(t, rs[0].Body); x.Prev != "" {
					t.Errorf("continued %q, want a new interaction", x.Prev)
				}
			}
		})
	}
	// cachedContent is never sent as an interaction (no upstream cache
	// exists here, so only the routing is checked).
	code, _ := call(t, f.front.URL, genURL, keyA, body(turns, `,"cachedContent":"cachedContents/x"`))
	if r := lastReceived(t, f.emu); r.API == "interactions" || code == 200 {
		t.Errorf("cachedContent request went as %s (status %d), want generateContent's own error", r.API, code)
	}
}

// TestInteractionsSession: with X-Gemini-Proxy-Session, stateless
// requests continue one interaction per session, a re-sent unchanged
// document becomes a session reference, the header is not forwarded, and
// sessions are per tenant.
func TestInteractionsSession(t *testing.T) {
	f := newIxFixture(t, emulator.Options{})
	doc := "```go main.go\n" + strings.Repeat("func handler() error { return nil } // keep\n", 30) + "```\n"
	ask := func(key, session, q string) emulator.Received {
		t.Helper()
		code, got := call(t, f.front.URL, genURL, key, fmt.Sprintf(turnsJSON, userTurn(doc+q)), HeaderSession, session)
		if code != 200 {
			t.Fatalf("%s: %d %s", q, code, got)
		}
		return lastReceived(t, f.emu)
	}
	r1 := ask(keyA, "s1", "What does it do?")
	x1 := decodeIx(t, r1.Body)
	if x1.Prev != "" || !strings.Contains(string(r1.Body), "func handler") {
		t.Fatalf("first request: prev %q; want a new interaction with the document", x1.Prev)
	}
	if r1.Header.Get(HeaderSession) != "" {
		t.Error("the session header reached the upstream")
	}
	r2 := ask(keyA, "s1", "Add logging.")
	x2 := decodeIx(t, r2.Body)
	if x2.Prev == "" || len(x2.Input) != 1 {
		t.Fatalf("second request: prev %q, %d steps; want a continuation of the session", x2.Prev, len(x2.Input))
	}
	if strings.Contains(string(r2.Body), "func handler") || !strings.Contains(string(r2.Body), rewrite.SessionWhere) {
		t.Errorf("second request still carries the document or lacks the session reference:\n%s", r2.Body)
	}
	if !strings.Contains(string(r2.Body), "Add logging.") {
		t.Error("second request lost the question")
	}
	// The model sees the whole session: 2 earlier contents + the new one.
	if !strings.Contains(r2.Reply, "has 3 contents") {
		t.Errorf("reply %q, want the emulator to see 3 contents", r2.Reply)
	}
	r3 := ask(keyA, "s2", "Another session.")
	if x := decodeIx(t, r3.Body); x.Prev != "" || !strings.Contains(string(r3.Body), "func handler") {
		t.Errorf("another session: prev %q; want a new interaction with the document", x.Prev)
	}
	r4 := ask(keyB, "s1", "Same session name, other tenant.")
	if x := decodeIx(t, r4.Body); x.Prev != "" {
		t.Errorf("other tenant continued %q", x.Prev)
	}
	if got := testutil.ToFloat64(f.m.InteractionRequests.WithLabelValues(metrics.InteractionSession)); got != 1 {
		t.Errorf("session requests = %v, want 1", got)
	}
	// The session's interaction is gone: the request goes as sent, and
	// the session starts over.
	f.emu.DeleteInteractions()
	r5 := ask(keyA, "s1", "After expiry.")
	if r5.API != "generateContent" || !strings.Contains(string(r5.Body), "func handler") {
		t.Errorf("after expiry: %s, want the full generate request", r5.API)
	}
	r6 := ask(keyA, "s1", "Fresh start.")
	if x := decodeIx(t, r6.Body); x.Prev != "" {
		t.Errorf("after the fallback the session continued %q, want a fresh interaction", x.Prev)
	}
}

// TestInteractionsOneStoreCall: whatever the history length and whether a
// session header is sent, a request makes one Conversations call, for at
// most MaxLookups chains plus the session's state, so a shared store
// answers it in one round trip.
func TestInteractionsOneStoreCall(t *testing.T) {
	var turns []string
	for i := range 12 {
		turns = append(turns, userTurn(fmt.Sprintf("question %d", i)), modelTurn(fmt.Sprintf("answer %d", i)))
	}
	turns = append(turns, userTurn("last question"))
	body := fmt.Sprintf(turnsJSON, strings.Join(turns, ","))
	for _, tc := range []struct {
		name string
		hdr  []string
	}{{"no session", nil}, {"session", []string{HeaderSession, "s1"}}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newIxFixture(t, emulator.Options{})
			rec := &keyCounter{InteractionStore: f.store}
			f.fixture = newFixture(t, f.up.URL, Options{
				Rewrite:      RewriteOptions{Enabled: true},
				Interactions: InteractionsOptions{Enabled: true, Store: rec},
			})
			if code, b := call(t, f.front.URL, genURL, keyA, body, tc.hdr...); code != http.StatusOK {
				t.Fatalf("status %d: %s", code, b)
			}
			want := 8
			if tc.hdr != nil {
				want++
			}
			if rec.calls != 1 || rec.keys != want {
				t.Errorf("Conversations: %d calls for %d keys, want 1 call for %d keys", rec.calls, rec.keys, want)
			}
		})
	}
}

// keyCounter counts Conversations calls and the keys they ask for.
type keyCounter struct {
	InteractionStore
	mu          sync.Mutex
	calls, keys int
}

func (k *keyCounter) Conversations(tenant string, keys []string) [][]byte {
	k.mu.Lock()
	k.calls++
	k.keys += len(keys)
	k.mu.Unlock()
	return k.InteractionStore.Conversations(tenant, keys)
}

func TestWithoutEmptyContent(t *testing.T) {
	const usage = `"usageMetadata":{"promptTokenCount":3,"totalTokenCount":79}`
	tests := []struct {
		name, in, want string // want "" keeps the chunk
	}{
		{"final empty text",
			`{"candidates":[{"content":{"parts":[{"text":""}],"role":"model"},"finishReason":"STOP","index":0}],` + usage + `,"responseId":"v1_a"}`,
			`{"candidates":[{"finishReason":"STOP","index":0}],` + usage + `,"responseId":"v1_a"}`},
		{"final with text", `{"candidates":[{"content":{"parts":[{"text":"end."}],"role":"model"},"finishReason":"STOP"}]}`, ""},
		{"final with signature", `{"candidates":[{"content":{"parts":[{"text":"","thoughtSignature":"c2ln"}],"role":"model"},"finishReason":"STOP"}]}`, ""},
		{"empty text without finish", `{"candidates":[{"content":{"parts":[{"text":""}],"role":"model"}}]}`, ""},
		{"two parts", `{"candidates":[{"content":{"parts":[{"text":""},{"text":""}],"role":"model"},"finishReason":"STOP"}]}`, ""},
		{"no candidates", `{"usageMetadata":{"totalTokenCount":1},"finishReason":"x"}`, ""},
	}
	for _, tt := range tests {
		got, ok := withoutEmptyContent([]byte(tt.in))
		if ok != (tt.want != "") {
			t.Errorf("%s: withoutEmptyContent changed = %v, want %v", tt.name, ok, tt.want != "")
			continue
		}
		if ok {
			var g, w any
			if err := json.Unmarshal(got, &g); err != nil {
				t.Fatalf("%s: %v", tt.name, err)
			}
			json.Unmarshal([]byte(tt.want), &w) //nolint:errcheck // a test constant
			if diff := cmp.Diff(w, g); diff != "" {
				t.Errorf("%s: withoutEmptyContent (-want +got):\n%s", tt.name, diff)
			}
		}
	}
}

// TestInteractionsStreamFinalChunk: the final chunk of a translated stream
// keeps its empty text part for the current SDKs (whose chat helpers
// need content in every chunk) and loses its content for the deprecated
// @google/generative-ai JS SDK (whose chat drops a turn with an empty
// text part); the answer is the same, and the next turn continues either
// way.
func TestInteractionsStreamFinalChunk(t *testing.T) {
	for _, tc := range []struct {
		client    string
		wantEmpty bool
	}{
		{"google-genai-sdk/1.30.0 gl-node/v22.1.0", true},
		{"google-genai-sdk/1.77.0 gl-go/1.26", true},
		{"genai-js/0.24.1", false},
	} {
		t.Run(tc.client, func(t *testing.T) {
			f := newIxFixture(t, emulator.Options{StreamChunkBytes: 1 << 20})
			first := userTurn("Hello")
			code, b := call(t, f.front.URL, sseURL, keyA, fmt.Sprintf(turnsJSON, first), "X-Goog-Api-Client", tc.client)
			if code != http.StatusOK {
				t.Fatalf("status %d: %s", code, b)
			}
			if got := strings.Contains(string(b), `{"text":""}`); got != tc.wantEmpty {
				t.Errorf("empty text part in the stream = %v, want %v:\n%s", got, tc.wantEmpty, b)
			}
			a := parseAnswer(t, sseURL, b)
			if a.Finish != "STOP" || a.Usage == nil || a.Text == "" {
				t.Errorf("answer %+v, want text, STOP and usage", a)
			}
			next := fmt.Sprintf(turnsJSON, strings.Join([]string{first, modelTurn(a.Text), userTurn("More")}, ","))
			if code, b := call(t, f.front.URL, sseURL, keyA, next, "X-Goog-Api-Client", tc.client); code != http.StatusOK {
				t.Fatalf("turn 2 status %d: %s", code, b)
			}
			if x := decodeIx(t, lastReceived(t, f.emu).Body); x.Prev == "" || len(x.Input) != 1 {
				t.Errorf("turn 2: prev %q, %d input steps; want a continuation", x.Prev, len(x.Input))
			}
		})
	}
}

// repeatedDoc is a history whose first user turn's document the new turn
// re-sends, so that the rewrite changes the body.
func repeatedDoc() string {
	doc := "```go main.go\n" + strings.Repeat("func handler() error { return nil } // keep\n", 30) + "```\n"
	return fmt.Sprintf(turnsJSON, strings.Join([]string{userTurn(doc + "What does it do?"), modelTurn("It handles."), userTurn(doc + "And now?")}, ","))
}

// TestInteractionsErrorStatuses: 401, 403 and 429 on an interaction are the
// key's, the quota's or the request's, not the interaction's: the client
// gets the upstream's error, translated from the Interactions shape
// {"error":{"code":"<string>",…}} to the generateContent shape its SDK
// parses, with Retry-After, after one upstream call. A 5xx falls back to
// generateContent once, and that call is not retried again by the
// rewrite's fail-open: two upstream calls at most.
func TestInteractionsErrorStatuses(t *testing.T) {
	type fault struct {
		status int
		body   string
		times  int // interactions requests answered so; 0: every request, generateContent too
	}
	tests := []struct {
		name      string
		fault     fault
		wantCode  int
		wantBody  string // JSON; "" skips
		wantCalls int
		// wantOrig: the last upstream call carried the client's body
		// rather than the rewritten one.
		wantOrig bool
	}{
		{"429", fault{429, `{"error":{"code":"resource_exhausted","message":"Quota exceeded for interactions."}}`, 1}, 429,
			`{"error":{"code":429,"message":"Quota exceeded for interactions.","status":"RESOURCE_EXHAUSTED"}}`, 1, false},
		{"401", fault{401, `{"error":{"code":"unauthenticated","message":"Bad credentials."}}`, 1}, 401,
			`{"error":{"code":401,"message":"Bad credentials.","status":"UNAUTHENTICATED"}}`, 1, false},
		{"403 Gemini shape kept", fault{403, `{"error":{"code":403,"message":"Denied.","status":"PERMISSION_DENIED","details":[{"reason":"X"}]}}`, 1}, 403,
			`{"error":{"code":403,"message":"Denied.","status":"PERMISSION_DENIED","details":[{"reason":"X"}]}}`, 1, false},
		{"503 then 200", fault{503, `{"error":{"code":"unavailable","message":"Overloaded."}}`, 1}, 200, "", 2, false},
		{"503 everywhere", fault{503, `{"error":{"code":503,"message":"Overloaded.","status":"UNAVAILABLE"}}`, 0}, 503, "", 2, false},
		// A 400 not about a previous interaction may be the rewrite's
		// fault: the one fallback carries the original body.
		{"400 then 200", fault{400, `{"error":{"code":"invalid_request","message":"Invalid input."}}`, 1}, 200, "", 2, true},
		{"400 everywhere", fault{400, `{"error":{"code":400,"message":"Invalid input.","status":"INVALID_ARGUMENT"}}`, 0}, 400, "", 2, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var mu sync.Mutex
			calls, faults := 0, 0
			var last []byte
			f := newIxFixture(t, emulator.Options{}, func(next http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					mu.Lock()
					calls++
					last, _ = io.ReadAll(r.Body)
					r.Body = io.NopCloser(bytes.NewReader(last))
					hit := tt.fault.times == 0 || (strings.HasSuffix(r.URL.Path, "/interactions") && faults < tt.fault.times)
					if hit {
						faults++
					}
					mu.Unlock()
					if !hit {
						next.ServeHTTP(w, r)
						return
					}
					w.Header().Set("Content-Type", "application/json")
					w.Header().Set("Retry-After", "7")
					w.WriteHeader(tt.fault.status)
					w.Write([]byte(tt.fault.body))
				})
			})
			client := repeatedDoc()
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, f.front.URL+genURL, strings.NewReader(client))
			req.Header.Set("X-Goog-Api-Key", keyA)
			res, got := do(t, rawClient(), req)
			if res.StatusCode != tt.wantCode {
				t.Fatalf("status %d, want %d: %s", res.StatusCode, tt.wantCode, got)
			}
			mu.Lock()
			n, lastBody := calls, last
			mu.Unlock()
			if n != tt.wantCalls {
				t.Errorf("upstream calls = %d, want %d", n, tt.wantCalls)
			}
			if orig := string(lastBody) == client; orig != tt.wantOrig {
				t.Errorf("last upstream call carried the client's body: %v, want %v", orig, tt.wantOrig)
			}
			if tt.wantBody == "" {
				return
			}
			var w, g any
			if err := json.Unmarshal([]byte(tt.wantBody), &w); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(got, &g); err != nil {
				t.Fatalf("error body %q: %v", got, err)
			}
			if diff := cmp.Diff(w, g); diff != "" {
				t.Errorf("error body (-want +got):\n%s", diff)
			}
			if ra := res.Header.Get("Retry-After"); ra != "7" {
				t.Errorf("Retry-After = %q, want 7", ra)
			}
			if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
				t.Errorf("Content-Type = %q", ct)
			}
		})
	}
}

// TestInteractionsSessionSupersededNotSent: a session request holding two
// versions of a file, the older in an earlier turn, sends the older one as
// a superseded reference; the next request of the session that sends the
// older version again must carry it in full, since the upstream never saw
// it (issue 8 review). Both versions sent in the new turn, to be compared,
// both go in full (issue 13).
func TestInteractionsSessionSupersededNotSent(t *testing.T) {
	f := newIxFixture(t, emulator.Options{})
	file := func(v int) string {
		var b strings.Builder
		for i := range 40 {
			fmt.Fprintf(&b, "func f%d() int { return %d + %d }\n", i, i, v)
		}
		return b.String()
	}
	v1, v2 := file(1), file(2)
	ask := func(text string) emulator.Received {
		t.Helper()
		code, got := call(t, f.front.URL, genURL, keyA, fmt.Sprintf(turnsJSON, userTurn(text)), HeaderSession, "s1")
		if code != 200 {
			t.Fatalf("status %d: %s", code, got)
		}
		return lastReceived(t, f.emu)
	}
	compare := "Old:\n```go a.go\n" + v1 + "```\nNew:\n```go a.go\n" + v2 + "```\nWhat changed?"
	code, got := call(t, f.front.URL, genURL, keyA, fmt.Sprintf(turnsJSON, userTurn(compare)), HeaderSession, "s0")
	if r0 := lastReceived(t, f.emu); code != 200 || !strings.Contains(string(r0.Body), "return 39 + 1") || !strings.Contains(string(r0.Body), "return 39 + 2") {
		t.Fatalf("two versions compared in the new turn: status %d, want both in full:\n%s\n%s", code, r0.Body, got)
	}
	code, got = call(t, f.front.URL, genURL, keyA, fmt.Sprintf(turnsJSON, strings.Join([]string{
		userTurn("```go a.go\n" + v1 + "```\nWhat does it do?"), modelTurn("It adds one."), userTurn("Now:\n```go a.go\n" + v2 + "```\nWhat changed?"),
	}, ",")), HeaderSession, "s1")
	if code != 200 {
		t.Fatalf("status %d: %s", code, got)
	}
	r1 := lastReceived(t, f.emu)
	if strings.Contains(string(r1.Body), "return 39 + 1") || !strings.Contains(string(r1.Body), "return 39 + 2") {
		t.Fatalf("first request: want v1 superseded and v2 in full:\n%s", r1.Body)
	}
	r2 := ask("Back to this one:\n```go a.go\n" + v1 + "```\nIs it better?")
	if x := decodeIx(t, r2.Body); x.Prev == "" {
		t.Fatalf("second request did not continue the session")
	}
	if !strings.Contains(string(r2.Body), "return 39 + 1") || strings.Contains(string(r2.Body), rewrite.SessionWhere) {
		t.Errorf("second request refers to a copy of v1 the upstream never got:\n%s", r2.Body)
	}
	// v2 went in full: sending it again is a session reference.
	r3 := ask("Again:\n```go a.go\n" + v2 + "```\nOK?")
	if strings.Contains(string(r3.Body), "return 39 + 2") || !strings.Contains(string(r3.Body), rewrite.SessionWhere) {
		t.Errorf("third request carries v2 again instead of a session reference:\n%s", r3.Body)
	}
}

// TestInteractionsSessionChained: a client that re-sends its history and
// sends a session header continues by the hash chain; that keeps the
// session's block list, so a later stateless request of the session still
// refers to the document sent first.
func TestInteractionsSessionChained(t *testing.T) {
	f := newIxFixture(t, emulator.Options{})
	doc := "```go main.go\n" + strings.Repeat("func handler() error { return nil } // keep\n", 30) + "```\n"
	send := func(turns ...string) (emulator.Received, string) {
		t.Helper()
		code, got := call(t, f.front.URL, genURL, keyA, fmt.Sprintf(turnsJSON, strings.Join(turns, ",")), HeaderSession, "s1")
		if code != 200 {
			t.Fatalf("status %d: %s", code, got)
		}
		return lastReceived(t, f.emu), parseAnswer(t, genURL, got).Text
	}
	u1 := userTurn(doc + "What does it do?")
	_, a1 := send(u1)
	r2, _ := send(u1, modelTurn(a1), userTurn("Thanks."))
	if x := decodeIx(t, r2.Body); x.Prev == "" || len(x.Input) != 1 {
		t.Fatalf("second request: prev %q, %d steps; want a chained continuation", x.Prev, len(x.Input))
	}
	r3, _ := send(userTurn(doc + "Once more?"))
	if strings.Contains(string(r3.Body), "func handler") || !strings.Contains(string(r3.Body), rewrite.SessionWhere) {
		t.Errorf("third request re-sends the document the session holds:\n%s", r3.Body)
	}
}

// TestInteractionsModelVersionChain: the hash chain is seeded with the
// path's model id, so a conversation with gemini-2.0-flash is not
// continued by a request to gemini-2.0-flash-001.
func TestInteractionsModelVersionChain(t *testing.T) {
	f := newIxFixture(t, emulator.Options{Models: append(slices.Clone(emulator.DefaultModels), "gemini-2.0-flash-001")})
	const base = "/v1beta/models/gemini-2.0-flash:generateContent"
	turns := []string{userTurn("First question?")}
	code, got := call(t, f.front.URL, base, keyA, fmt.Sprintf(turnsJSON, strings.Join(turns, ",")))
	if code != 200 {
		t.Fatalf("%d %s", code, got)
	}
	turns = append(turns, modelTurn(parseAnswer(t, base, got).Text), userTurn("Next?"))
	body := fmt.Sprintf(turnsJSON, strings.Join(turns, ","))
	if code, got := call(t, f.front.URL, "/v1beta/models/gemini-2.0-flash-001:generateContent", keyA, body); code != 200 {
		t.Fatalf("%d %s", code, got)
	}
	r := lastReceived(t, f.emu)
	if x := decodeIx(t, r.Body); r.API != "interactions" || x.Prev != "" || x.Model != "gemini-2.0-flash-001" {
		t.Errorf("-001 request: %s, prev %q, model %q; want a new interaction", r.API, x.Prev, x.Model)
	}
	if code, got := call(t, f.front.URL, base, keyA, body); code != 200 {
		t.Fatalf("%d %s", code, got)
	}
	if x := decodeIx(t, lastReceived(t, f.emu).Body); x.Prev == "" {
		t.Error("the same model's request did not continue")
	}
}

// TestInteractionsSessionElideAuditFails: when the audit of an elision
// fails (here the session's sent set answers yes to Elide and no to its
// audit, as a set changing under the request would), the document goes in
// full, the question too, and the failure is counted.
func TestInteractionsSessionElideAuditFails(t *testing.T) {
	f := newIxFixture(t, emulator.Options{})
	var wrapped atomic.Int32
	f.h.ix.elide = func(body []byte, opts rewrite.Options, sent func(string) bool) ([]byte, []rewrite.Replacement, error) {
		wrapped.Add(1)
		asked := map[string]bool{}
		return rewrite.Elide(body, opts, func(h string) bool {
			if asked[h] {
				return false // the audit's own question
			}
			asked[h] = true
			return sent(h)
		})
	}
	doc := "```go main.go\n" + strings.Repeat("func handler() error { return nil } // keep\n", 30) + "```\n"
	ask := func(q string) emulator.Received {
		t.Helper()
		code, got := call(t, f.front.URL, genURL, keyA, fmt.Sprintf(turnsJSON, userTurn(doc+q)), HeaderSession, "s1")
		if code != 200 {
			t.Fatalf("%s: %d %s", q, code, got)
		}
		return lastReceived(t, f.emu)
	}
	ask("What does it do?")
	r2 := ask("Add logging.")
	if x := decodeIx(t, r2.Body); x.Prev == "" {
		t.Fatal("second request did not continue the session")
	}
	if wrapped.Load() == 0 {
		t.Fatal("Elide was not called")
	}
	if !strings.Contains(string(r2.Body), "func handler") || strings.Contains(string(r2.Body), rewrite.SessionWhere) || !strings.Contains(string(r2.Body), "Add logging.") {
		t.Errorf("after a failed elision audit, want the document and question in full and no session reference:\n%s", r2.Body)
	}
	if got := testutil.ToFloat64(f.m.RewriteAuditFails.WithLabelValues(string(rewrite.AuditTargetMissing))); got != 1 {
		t.Errorf("audit failures (target_missing) = %v, want 1", got)
	}
}
