package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/genai"

	"github.com/gemini-proxy/gemini-proxy/cache"
	"github.com/gemini-proxy/gemini-proxy/cache/cachetest"
	"github.com/gemini-proxy/gemini-proxy/internal/emulator"
	"github.com/gemini-proxy/gemini-proxy/internal/testutil"
	"github.com/gemini-proxy/gemini-proxy/metrics"
	"github.com/gemini-proxy/gemini-proxy/proxy"
	"github.com/gemini-proxy/gemini-proxy/rewrite"
)

const ixModel = "gemini-2.5-flash"

// newIxStack is newStack with Interactions continuation on, backed by a
// real cache.Store whose writes are visible at once.
func newIxStack(t *testing.T, opts emulator.Options) *stack {
	t.Helper()
	return newStack(t, opts, withInteractions(waiting))
}

// waitingStore makes cache writes visible at once (ristretto applies them
// asynchronously), so that a test's next turn finds the interaction id
// the previous one stored, as it would a moment later in production.
type waitingStore struct{ *cache.Store }

// waiting is the usual withInteractions wrap: a waitingStore.
func waiting(s *cache.Store) proxy.InteractionStore { return &waitingStore{s} }

func (s *waitingStore) SetConversation(tenant, k string, v []byte) bool {
	ok := s.Store.SetConversation(tenant, k, v)
	s.Wait()
	return ok
}

// ixRequest is what the emulator received in an interactions request.
type ixRequest struct {
	Prev  string            `json:"previous_interaction_id"`
	Input []json.RawMessage `json:"input"`
}

func ixOf(t *testing.T, r emulator.Received) ixRequest {
	t.Helper()
	if r.API != "interactions" {
		t.Fatalf("upstream request is %s, want interactions", r.API)
	}
	var x ixRequest
	if err := json.Unmarshal(r.Body, &x); err != nil {
		t.Fatalf("interaction body: %v", err)
	}
	return x
}

// chatTurn is what a chat client sees of one turn.
type chatTurn struct {
	Text   string
	Finish genai.FinishReason
	Usage  *genai.GenerateContentResponseUsageMetadata
}

// send runs one chat turn, unary or streamed, and returns what the client
// saw.
func send(t *testing.T, chat *genai.Chat, stream bool, q string) chatTurn {
	t.Helper()
	if !stream {
		r, err := chat.SendMessage(t.Context(), genai.Part{Text: q})
		if err != nil {
			t.Fatalf("SendMessage(%q): %v", q, err)
		}
		return chatTurn{Text: r.Text(), Finish: r.Candidates[0].FinishReason, Usage: r.UsageMetadata}
	}
	var out chatTurn
	for r, err := range chat.SendMessageStream(t.Context(), genai.Part{Text: q}) {
		if err != nil {
			t.Fatalf("SendMessageStream(%q): %v", q, err)
		}
		out.Text += r.Text()
		if len(r.Candidates) > 0 && r.Candidates[0].FinishReason != "" {
			out.Finish = r.Candidates[0].FinishReason
		}
		if r.UsageMetadata != nil {
			out.Usage = r.UsageMetadata
		}
	}
	return out
}

// oneChunk makes the emulator stream each answer's text in one chunk.
// The Go SDK's chat keeps one history content per streamed chunk, and the
// proxy continues the interaction that holds the answer as one model
// output (README: canonical form); the emulator's default reply counts
// contents, so only with one chunk per answer do the direct and the
// continued runs show the model the same number of contents.
var oneChunk = emulator.Options{StreamChunkBytes: 1 << 20}

// TestInteractionsChat: a Go SDK chat, unary and streamed, through the
// proxy with continuation on. Turn 1 starts an interaction, every later
// turn continues the previous one with only the new user turn, and each
// answer (text, finish reason, usage) equals the direct run's. With
// answers streamed in many chunks (re-sent as many contents) the chat
// continues too.
func TestInteractionsChat(t *testing.T) {
	questions := []string{"What is a goroutine?", "How do I stop one?", "And with a context?", "Thanks. Summarise."}
	for _, tc := range []struct {
		stream, chunked bool
	}{{false, false}, {true, false}, {true, true}} {
		stream := tc.stream
		t.Run(fmt.Sprintf("stream=%v,chunked=%v", tc.stream, tc.chunked), func(t *testing.T) {
			eo := oneChunk
			if tc.chunked {
				eo = emulator.Options{StreamChunkBytes: 32}
			}
			st := newIxStack(t, eo)
			direct := newStack(t, eo)
			pc, err := newClient(t, st.proxyURL).Chats.Create(t.Context(), ixModel, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			dc, err := newClient(t, direct.emuURL).Chats.Create(t.Context(), ixModel, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			prev := ""
			for i, q := range questions {
				got := send(t, pc, stream, q)
				want := send(t, dc, stream, q)
				if tc.chunked {
					// The direct model saw every chunk as a content.
					if n := len(dc.History(true)); i > 0 && n <= 2*(i+1) {
						t.Fatalf("turn %d: direct history has %d contents, want the chunks as separate contents", i+1, n)
					}
					want.Text, want.Usage = got.Text, got.Usage
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("turn %d: answer through the proxy differs from the direct run (-direct +proxy):\n%s", i+1, diff)
				}
				rs := st.emu.Received()
				x := ixOf(t, rs[len(rs)-1])
				if i == 0 && (x.Prev != "" || len(x.Input) != 1) {
					t.Errorf("turn 1: prev %q, %d input steps; want a new interaction", x.Prev, len(x.Input))
				}
				if i > 0 && (x.Prev == "" || x.Prev == prev || len(x.Input) != 1 || !strings.Contains(string(x.Input[0]), q)) {
					t.Errorf("turn %d: prev %q (previous %q), input %s; want a continuation with only the new turn", i+1, x.Prev, prev, x.Input)
				}
				prev = x.Prev
				if len(rs) != i+1 {
					t.Errorf("turn %d: the emulator received %d requests, want %d", i+1, len(rs), i+1)
				}
			}
			if n := counterSum(t, st.reg, "gemini_proxy_interactions_requests_total", map[string]string{"kind": metrics.InteractionContinued}); n != float64(len(questions)-1) {
				t.Errorf("continued requests = %v, want %d", n, len(questions)-1)
			}
		})
	}
}

// TestInteractionsImmediateNextTurn: with the proxy's own cache.Store
// (no test wrapper that waits for cache writes), a chat that sends each
// turn as soon as it read the previous answer, unary or streamed, with no
// pause, continues on every turn: the interaction id of an answer is
// visible locally before the answer's body ends.
func TestInteractionsImmediateNextTurn(t *testing.T) {
	st := newStack(t, oneChunk, withInteractions(func(s *cache.Store) proxy.InteractionStore { return s }))
	for round := range 5 {
		chat, err := newClient(t, st.proxyURL).Chats.Create(t.Context(), ixModel, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 6 {
			before := len(st.emu.Received())
			send(t, chat, i%2 == 1, fmt.Sprintf("round %d, question %d", round, i))
			rs := st.emu.Received()
			if len(rs) != before+1 {
				t.Fatalf("round %d turn %d: %d upstream requests, want 1", round, i+1, len(rs)-before)
			}
			if x := ixOf(t, rs[len(rs)-1]); i > 0 && (x.Prev == "" || len(x.Input) != 1) {
				t.Errorf("round %d turn %d: prev %q, %d input steps; want a continuation with the new turn only", round, i+1, x.Prev, len(x.Input))
			}
		}
	}
}

// TestInteractionsForgotten: when the emulator forgets the interactions
// mid-conversation, the next turn falls back to the full request and the
// client still gets the direct run's answer; the turn after continues
// again.
func TestInteractionsForgotten(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			st := newIxStack(t, oneChunk)
			direct := newStack(t, oneChunk)
			pc, _ := newClient(t, st.proxyURL).Chats.Create(t.Context(), ixModel, nil, nil)
			dc, _ := newClient(t, direct.emuURL).Chats.Create(t.Context(), ixModel, nil, nil)
			for i, q := range []string{"One?", "Two?", "Three?", "Four?"} {
				if i == 2 {
					st.emu.DeleteInteractions()
				}
				got, want := send(t, pc, stream, q), send(t, dc, stream, q)
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("turn %d: (-direct +proxy):\n%s", i+1, diff)
				}
			}
			if n := counterSum(t, st.reg, "gemini_proxy_interactions_fallbacks_total", map[string]string{"reason": metrics.FallbackNotFound}); n != 1 {
				t.Errorf("not_found fallbacks = %v, want 1", n)
			}
			rs := st.emu.Received()
			var apis []string
			for _, r := range rs {
				apis = append(apis, fmt.Sprintf("%s/%d", r.API, r.Status))
			}
			gen := "generateContent/200"
			if stream {
				gen = "streamGenerateContent/200"
			}
			want := []string{"interactions/200", "interactions/200", "interactions/404", gen, "interactions/200"}
			if diff := cmp.Diff(want, apis); diff != "" {
				t.Errorf("upstream requests (-want +got):\n%s", diff)
			}
			if x := ixOf(t, rs[len(rs)-1]); x.Prev != "" || len(x.Input) != 7 {
				t.Errorf("turn 4: prev %q, %d steps; want a new interaction with all 7 turns", x.Prev, len(x.Input))
			}
		})
	}
}

// TestInteractionsExactness: a history whose earlier turn changed, and
// another tenant re-sending this tenant's exact history, never continue.
func TestInteractionsExactness(t *testing.T) {
	st := newIxStack(t, emulator.Options{})
	a := newClient(t, st.proxyURL)
	chat, _ := a.Chats.Create(t.Context(), ixModel, nil, nil)
	send(t, chat, false, "Name three prime numbers.")
	send(t, chat, false, "And three more?")
	hist := chat.History(true)
	next := append(append([]*genai.Content(nil), hist...), genai.NewContentFromText("Their sum?", genai.RoleUser))

	changed := append([]*genai.Content{genai.NewContentFromText("Name three prime numbers!", genai.RoleUser)}, next[1:]...)
	other := testutil.NewClient(t, st.proxyURL, "another-tenant")
	tests := []struct {
		name     string
		client   *genai.Client
		contents []*genai.Content
		wantPrev bool
	}{
		{"same history continues", a, next, true},
		{"changed first turn", a, changed, false},
		{"other tenant", other, next, false},
	}
	for _, tt := range tests {
		if _, err := tt.client.Models.GenerateContent(t.Context(), ixModel, tt.contents, nil); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		rs := st.emu.Received()
		x := ixOf(t, rs[len(rs)-1])
		if (x.Prev != "") != tt.wantPrev {
			t.Errorf("%s: previous_interaction_id %q, want continued = %v", tt.name, x.Prev, tt.wantPrev)
		}
		if !tt.wantPrev && len(x.Input) != len(tt.contents) {
			t.Errorf("%s: %d input steps, want all %d contents", tt.name, len(x.Input), len(tt.contents))
		}
	}
}

// TestInteractionsSessionSDK: a stateless client (file plus question,
// no history) with X-Gemini-Proxy-Session: every request after the first
// continues the session's interaction, and the unchanged file goes up
// once.
func TestInteractionsSessionSDK(t *testing.T) {
	st := newIxStack(t, emulator.Options{})
	c, err := genai.NewClient(t.Context(), &genai.ClientConfig{APIKey: testKey, Backend: genai.BackendGeminiAPI,
		HTTPOptions: genai.HTTPOptions{BaseURL: st.proxyURL, Headers: http.Header{proxy.HeaderSession: {"editor-42"}}},
		HTTPClient:  &http.Client{}})
	if err != nil {
		t.Fatal(err)
	}
	for i, q := range []string{"What does Buffer do?", "Is Grow safe?", "Explain ReadFrom."} {
		r, err := c.Models.GenerateContent(t.Context(), ixModel, genai.Text(fenced(bufferGo)+"\n"+q), nil)
		if err != nil {
			t.Fatalf("request %d: %v", i+1, err)
		}
		if want := fmt.Sprintf("has %d contents", 2*i+1); !strings.Contains(r.Text(), want) {
			t.Errorf("request %d: answer %q; the model should see the session so far (%s)", i+1, r.Text(), want)
		}
		rs := st.emu.Received()
		last := rs[len(rs)-1]
		x := ixOf(t, last)
		hasFile := strings.Contains(string(last.Body), "func (b *Buffer) Grow")
		if i == 0 && (x.Prev != "" || !hasFile) {
			t.Errorf("request 1: prev %q, file sent %v; want a new interaction with the file", x.Prev, hasFile)
		}
		if i > 0 && (x.Prev == "" || hasFile || !strings.Contains(string(last.Body), rewrite.SessionWhere)) {
			t.Errorf("request %d: prev %q, file sent %v; want a continuation with a session reference", i+1, x.Prev, hasFile)
		}
	}
}

// TestInteractionsTenTurnBytes measures the request bytes a 10-turn naive
// session (the client re-sends its file in every user turn) uploads:
// directly, through the proxy with rewriting only, and with continuation.
func TestInteractionsTenTurnBytes(t *testing.T) {
	run := func(st *stack, baseURL string) (received, sent float64, texts []string) {
		chat, err := newClient(t, baseURL).Chats.Create(t.Context(), ixModel, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 10 {
			texts = append(texts, send(t, chat, i%2 == 1, fenced(bufferGo)+fmt.Sprintf("\nQuestion %d about this file?", i+1)).Text)
		}
		return counterSum(t, st.reg, "gemini_proxy_request_bytes_total", map[string]string{"stage": metrics.StageReceived}),
			counterSum(t, st.reg, "gemini_proxy_request_bytes_total", map[string]string{"stage": metrics.StageSent}), texts
	}
	rw := newStack(t, oneChunk)
	naive, rwSent, want := run(rw, rw.proxyURL)
	ix := newIxStack(t, oneChunk)
	naive2, ixSent, got := run(ix, ix.proxyURL)
	if naive != naive2 {
		t.Errorf("the two runs received %v and %v bytes from the client", naive, naive2)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("answers with continuation differ from rewriting only (-rewrite +continuation):\n%s", diff)
	}
	t.Logf("10-turn session, request bytes uploaded: naive %.0f, rewrite %.0f (%.1f%%), rewrite+interactions %.0f (%.1f%%)",
		naive, rwSent, 100*rwSent/naive, ixSent, 100*ixSent/naive)
	if ixSent >= rwSent/2 {
		t.Errorf("continuation uploaded %v bytes, want well under rewriting's %v", ixSent, rwSent)
	}
}

// TestInteractionsSharedRedis: two replicas sharing Redis (and the tenant
// secret) behind a load balancer: the conversation one replica started is
// continued by the other.
func TestInteractionsSharedRedis(t *testing.T) {
	srv := cachetest.StartRedis(t)
	emu, es := testutil.StartEmulator(t, emulator.Options{Now: func() time.Time { return fixedNow }})
	up, _ := url.Parse(es.URL)
	replica := func() string {
		store, err := cache.New(cache.Options{RedisURL: srv.URL(), Secret: []byte("shared-secret-of-the-replicas")})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close() })
		h, err := proxy.New(proxy.Options{
			Upstream:     up,
			Rewrite:      proxy.RewriteOptions{Enabled: true},
			TenantSecret: []byte("shared-secret-of-the-replicas"),
			Interactions: proxy.InteractionsOptions{Enabled: true, Store: &waitingStore{store}},
		}, slog.New(slog.DiscardHandler), metrics.New(prometheus.NewRegistry()))
		if err != nil {
			t.Fatal(err)
		}
		ps := httptest.NewServer(h)
		t.Cleanup(ps.Close)
		return ps.URL
	}
	a, b := replica(), replica()
	first, err := newClient(t, a).Models.GenerateContent(t.Context(), ixModel, genai.Text("Hello from replica A."), nil)
	if err != nil {
		t.Fatal(err)
	}
	contents := []*genai.Content{genai.NewContentFromText("Hello from replica A.", genai.RoleUser), first.Candidates[0].Content,
		genai.NewContentFromText("And hello from replica B.", genai.RoleUser)}
	if _, err := newClient(t, b).Models.GenerateContent(t.Context(), ixModel, contents, nil); err != nil {
		t.Fatal(err)
	}
	rs := emu.Received()
	if x := ixOf(t, rs[len(rs)-1]); x.Prev != first.ResponseID || len(x.Input) != 1 {
		t.Errorf("replica B: prev %q, %d steps; want replica A's interaction %q continued with the new turn", x.Prev, len(x.Input), first.ResponseID)
	}
}

// TestInteractionsQuotaErrorSDK: a 429 the upstream answers an interaction
// with, in the Interactions error shape (a string code), reaches the Go
// SDK's chat as the APIError a generateContent 429 gives (numeric code,
// status, message), after one upstream call: no generateContent retry
// that would spend more of the exhausted quota.
func TestInteractionsQuotaErrorSDK(t *testing.T) {
	var mu sync.Mutex
	quota, calls := false, 0
	st := newStack(t, oneChunk, withInteractions(waiting), withUpstream(func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			calls++
			q := quota
			mu.Unlock()
			if !q {
				next.ServeHTTP(w, r)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Retry-After", "41")
			w.WriteHeader(http.StatusTooManyRequests)
			fmt.Fprint(w, `{"error":{"code":"resource_exhausted","message":"Quota exceeded for metric generate_requests."}}`)
		})
	}))
	chat, err := newClient(t, st.proxyURL).Chats.Create(t.Context(), ixModel, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	send(t, chat, false, "One?")
	mu.Lock()
	quota, calls = true, 0
	mu.Unlock()
	_, err = chat.SendMessage(t.Context(), genai.Part{Text: "Two?"})
	var apiErr genai.APIError
	if !errors.As(err, &apiErr) {
		t.Fatalf("SendMessage error = %v, want a genai.APIError", err)
	}
	if apiErr.Code != 429 || apiErr.Status != "RESOURCE_EXHAUSTED" || apiErr.Message != "Quota exceeded for metric generate_requests." {
		t.Errorf("APIError = %+v, want code 429, status RESOURCE_EXHAUSTED and the upstream's message", apiErr)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls != 1 {
		t.Errorf("upstream calls for the turn = %d, want 1", calls)
	}
}
