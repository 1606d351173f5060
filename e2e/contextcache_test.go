package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genai"

	"github.com/gemini-proxy/gemini-proxy/internal/emulator"
	"github.com/gemini-proxy/gemini-proxy/internal/testutil"
	"github.com/gemini-proxy/gemini-proxy/proxy"
)

// flashPrice is 2.5 Flash's standard-tier price with its storage price
// (gemini-api.md §6.3).
var flashPrice = proxy.Price{Input: 0.30, CachedInput: 0.03, Output: 2.50, Storage: 1.00}

// ccStack is an emulator and a proxy, with context caching on or off, each
// on its own clock so that a test can let caches expire upstream only.
type ccStack struct {
	*stack
	emuClock, pclk *testutil.Clock
	// upCalls and upBytes count the requests the emulator received and
	// their body bytes, cachedContents calls included.
	upCalls, upBytes atomic.Int64
}

// ccReply answers like scriptReply and names the system instruction it
// saw: equal answers prove that the cache carried it.
func ccReply(r emulator.ReplyRequest) string {
	return scriptReply(r) + fmt.Sprintf(" [system %s, %d contents]", sha12([]byte(r.SystemInstruction)), len(r.Contents))
}

func newCCStack(t *testing.T, on bool) *ccStack {
	t.Helper()
	return newCCStackImplicit(t, on, false)
}

// newCCStackImplicit is newCCStack with the emulator's implicit cache on
// (its default, as in real Gemini) when implicit is true.
func newCCStackImplicit(t *testing.T, on, implicit bool) *ccStack {
	t.Helper()
	s := &ccStack{emuClock: testutil.NewClock(fixedNow), pclk: testutil.NewClock(fixedNow)}
	// Implicit caching is off unless implicit: with it, the price model
	// sees the prefix already billed at the cached rate and (rightly)
	// makes no explicit cache.
	eo := emulator.Options{Reply: ccReply, Now: s.emuClock.Now, ImplicitCacheMinTokens: 1 << 30}
	if implicit {
		eo.ImplicitCacheMinTokens = 0
	}
	count := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s.upCalls.Add(1)
			r.Body = countingBody{r.Body, &s.upBytes}
			next.ServeHTTP(w, r)
		})
	}
	s.stack = newStack(t, eo, withUpstream(count), withProxy(func(o *proxy.Options) {
		o.Prices = map[string]proxy.Price{"gemini-2.5-flash": flashPrice}
		if on {
			o.ContextCache = &proxy.ContextCacheOptions{Now: s.pclk.Now}
		}
	}))
	return s
}

// countingBody adds the bytes read from a request body to n.
type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b countingBody) Read(p []byte) (int, error) {
	k, err := b.ReadCloser.Read(p)
	b.n.Add(int64(k))
	return k, err
}

func (s *ccStack) advance(d time.Duration) {
	s.emuClock.Advance(d)
	s.pclk.Advance(d)
}

// settled waits until the proxy has settled n context-cached requests and
// finished the cache calls they started: the proxy records a request
// after its response reached the client.
func (s *ccStack) settled(t *testing.T, n int) {
	t.Helper()
	for i := 0; counterSum(t, s.reg, "gemini_proxy_context_cache_requests_total", nil) < float64(n); i++ {
		if i > 2000 {
			t.Fatalf("proxy settled %v requests, want %d", counterSum(t, s.reg, "gemini_proxy_context_cache_requests_total", nil), n)
		}
		time.Sleep(time.Millisecond)
	}
	s.h.WaitContextCache()
}

// ccSession is a naive client with a system instruction and tools that
// re-sends buffer.go in every user turn and keeps its history.
type ccSession struct {
	client  *genai.Client
	history []*genai.Content
	config  *genai.GenerateContentConfig
	n       int // turns asked
}

func newCCSession(t *testing.T, baseURL, key string) *ccSession {
	t.Helper()
	return &ccSession{client: testutil.NewClient(t, baseURL, key), config: &genai.GenerateContentConfig{
		SystemInstruction: genai.NewContentFromText("You are a careful Go reviewer. Answer about the file the user shows you.", genai.RoleUser),
		Tools: []*genai.Tool{{FunctionDeclarations: []*genai.FunctionDeclaration{{
			Name: "run_tests", Description: "Runs the package's tests and returns the output.",
		}}}},
		ToolConfig: &genai.ToolConfig{FunctionCallingConfig: &genai.FunctionCallingConfig{Mode: genai.FunctionCallingConfigModeAuto}},
	}}
}

// turn asks question with the file attached and returns the answer. Every
// third turn is streamed (SSE); its answer is the joined chunks with the
// last chunk's usage.
func (c *ccSession) turn(t *testing.T, question string) *genai.GenerateContentResponse {
	t.Helper()
	user := genai.NewContentFromText("Here is my file:\n"+fenced(bufferGo)+"\n"+question, genai.RoleUser)
	c.n++
	var resp *genai.GenerateContentResponse
	if c.n%3 == 0 {
		var text strings.Builder
		for chunk, err := range c.client.Models.GenerateContentStream(t.Context(), "gemini-2.5-flash", append(c.history, user), c.config) {
			if err != nil {
				t.Fatalf("GenerateContentStream(%q): %v", question, err)
			}
			text.WriteString(chunk.Text())
			resp = chunk
		}
		resp = &genai.GenerateContentResponse{Candidates: []*genai.Candidate{{Content: genai.NewContentFromText(text.String(), genai.RoleModel)}}, UsageMetadata: resp.UsageMetadata}
	} else {
		var err error
		resp, err = c.client.Models.GenerateContent(t.Context(), "gemini-2.5-flash", append(c.history, user), c.config)
		if err != nil {
			t.Fatalf("GenerateContent(%q): %v", question, err)
		}
	}
	c.history = append(c.history, user, genai.NewContentFromText(resp.Text(), genai.RoleModel))
	return resp
}

var ccQuestions = []string{
	"What does Grow do?", "Is Truncate safe on an empty buffer?", "Explain ReadFrom.", "What is MinRead for?",
	"How does WriteString grow the slice?", "Can ReadRune fail?", "What does UnreadByte undo?", "Is Buffer safe for concurrent use?",
	"What does Next return past the end?", "Summarise the file in one sentence.",
}

// ccSessions runs the ccQuestions session once through off and once
// through on, turns 30 s apart, waits after each turn until on has settled
// it, fails the test where the two answers differ, and passes each turn's
// answers to check when it is not nil. what names the run in failures.
func ccSessions(t *testing.T, what string, off, on *ccStack, check func(i int, ra, rb *genai.GenerateContentResponse)) {
	t.Helper()
	a, b := newCCSession(t, off.proxyURL, testKey), newCCSession(t, on.proxyURL, testKey)
	for i, q := range ccQuestions {
		off.advance(30 * time.Second)
		on.advance(30 * time.Second)
		ra, rb := a.turn(t, q), b.turn(t, q)
		on.settled(t, i+1)
		if ra.Text() != rb.Text() {
			t.Errorf("%s turn %d: answer with context caching\n%s\nwant\n%s", what, i, rb.Text(), ra.Text())
		}
		if check != nil {
			check(i, ra, rb)
		}
	}
}

// TestContextCacheSession runs one session with context caching off and
// on: once the prefix (system instruction, tools and the first turn with
// the file) has recurred, the emulator receives requests naming a
// cachedContent without systemInstruction, tools or toolConfig, the client
// gets the same answers, and usage shows the cached tokens. It prints the
// session's dollars both ways.
func TestContextCacheSession(t *testing.T) {
	off, on := newCCStack(t, false), newCCStack(t, true)
	cachedTurns := 0
	ccSessions(t, "context cache", off, on, func(i int, ra, rb *genai.GenerateContentResponse) {
		if ra.UsageMetadata.PromptTokenCount != rb.UsageMetadata.PromptTokenCount {
			t.Errorf("turn %d: prompt tokens %d with caching, %d without", i, rb.UsageMetadata.PromptTokenCount, ra.UsageMetadata.PromptTokenCount)
		}
		rec := testutil.GenerateRequests(on.emu.Received())
		last := rec[len(rec)-1]
		if last.CachedContent == "" {
			if rb.UsageMetadata.CachedContentTokenCount != 0 {
				t.Errorf("turn %d: cached tokens %d without a cache", i, rb.UsageMetadata.CachedContentTokenCount)
			}
			return
		}
		cachedTurns++
		var body map[string]json.RawMessage
		if err := json.Unmarshal(last.Body, &body); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"systemInstruction", "tools", "toolConfig"} {
			if _, ok := body[f]; ok {
				t.Errorf("turn %d: request naming %s carries %s", i, last.CachedContent, f)
			}
		}
		if rb.UsageMetadata.CachedContentTokenCount < 3000 {
			t.Errorf("turn %d: cached tokens %d, want the file's", i, rb.UsageMetadata.CachedContentTokenCount)
		}
	})
	if cachedTurns < len(ccQuestions)/2 {
		t.Errorf("%d of %d turns named a cache", cachedTurns, len(ccQuestions))
	}
	offD, onD := sessionDollars(t, off, flashPrice), sessionDollars(t, on, flashPrice)
	t.Logf("context caching, %d-turn session re-sending buffer.go (2.5 Flash prices, turns 30 s apart, TTL 5m):", len(ccQuestions))
	t.Logf("  off: $%.6f (prompt %d tokens, %d cached)", offD.total(), offD.prompt, offD.cached)
	t.Logf("  on:  $%.6f (prompt %d tokens, %d cached; requests $%.6f + creation $%.6f + storage $%.6f; %d caches)",
		onD.total(), onD.prompt, onD.cached, onD.requests, onD.creation, onD.storage, onD.caches)
	t.Logf("  saved %.1f%% of the session's dollars", 100*(1-onD.total()/offD.total()))
	if onD.total() >= offD.total() {
		t.Errorf("context caching cost $%.6f, without $%.6f", onD.total(), offD.total())
	}
	if got := counterSum(t, on.reg, "gemini_proxy_context_cache_cached_tokens_total", nil); got != float64(onD.cached) {
		t.Errorf("metric cached tokens %v, emulator billed %d", got, onD.cached)
	}
}

// dollars is a session's bill.
type dollars struct {
	requests, creation, storage float64
	prompt, cached              int
	caches                      int
}

func (d dollars) total() float64 { return d.requests + d.creation + d.storage }

// sessionDollars prices what the emulator billed: each generate request
// from its usage, each cache's creation at the input price and its storage
// from creation to its expiry (nothing deleted it).
func sessionDollars(t *testing.T, s *ccStack, p proxy.Price) dollars {
	t.Helper()
	var d dollars
	for _, r := range testutil.GenerateRequests(s.emu.Received()) {
		if r.Status != 200 {
			continue
		}
		u := r.Usage
		d.prompt += u.PromptTokenCount
		d.cached += u.CachedContentTokenCount
		d.requests += (float64(u.PromptTokenCount-u.CachedContentTokenCount)*p.Input + float64(u.CachedContentTokenCount)*p.CachedInput +
			float64(u.CandidatesTokenCount+u.ThoughtsTokenCount)*p.Output) / 1e6
	}
	for cc, err := range newClient(t, s.emuURL).Caches.All(t.Context()) {
		if err != nil {
			t.Fatal(err)
		}
		tokens := float64(cc.UsageMetadata.TotalTokenCount)
		d.caches++
		d.creation += tokens * p.Input / 1e6
		d.storage += tokens * cc.ExpireTime.Sub(cc.CreateTime).Hours() * p.Storage / 1e6
	}
	return d
}

// TestContextCacheFallback deletes the cache in the emulator mid-session,
// then lets the next one expire there while the proxy still counts it
// live: each time the proxy sends the full request before any byte reached
// the client, and the client gets the right answer.
func TestContextCacheFallback(t *testing.T) {
	ref, on := newCCStack(t, false), newCCStack(t, true)
	a, b := newCCSession(t, ref.proxyURL, testKey), newCCSession(t, on.proxyURL, testKey)
	admin := newClient(t, on.emuURL)
	live := func() []string {
		var names []string
		for cc, err := range admin.Caches.All(t.Context()) {
			if err != nil {
				t.Fatal(err)
			}
			names = append(names, cc.Name)
		}
		return names
	}
	fallbacks := func() float64 { return counterSum(t, on.reg, "gemini_proxy_context_cache_fallbacks_total", nil) }
	turn := 0
	ask := func() {
		t.Helper()
		ref.advance(30 * time.Second)
		on.advance(30 * time.Second)
		q := ccQuestions[turn%len(ccQuestions)] + fmt.Sprintf(" (turn %d)", turn)
		ra, rb := a.turn(t, q), b.turn(t, q)
		turn++
		on.settled(t, turn)
		if ra.Text() != rb.Text() {
			t.Errorf("turn %d: answer\n%s\nwant\n%s", turn, rb.Text(), ra.Text())
		}
	}
	for len(live()) == 0 && turn < 8 {
		ask()
	}
	names := live()
	if len(names) != 1 {
		t.Fatalf("caches after %d turns: %v", turn, names)
	}
	ask() // uses it
	if _, err := admin.Caches.Delete(t.Context(), names[0], nil); err != nil {
		t.Fatal(err)
	}
	ask()
	if fallbacks() != 1 {
		t.Fatalf("fallbacks after the upstream lost the cache = %v, want 1", fallbacks())
	}
	rec := testutil.GenerateRequests(on.emu.Received())
	if r1, r2 := rec[len(rec)-2], rec[len(rec)-1]; r1.Status != 403 || r1.CachedContent != names[0] || r2.Status != 200 || r2.CachedContent != "" {
		t.Errorf("emulator saw %d %q then %d %q; want 403 naming the deleted cache, then 200 in full", r1.Status, r1.CachedContent, r2.Status, r2.CachedContent)
	} else if !r1.SSE || !r2.SSE {
		t.Errorf("the fallback turn (%d) was not streamed: every third turn should be", turn)
	}

	// A new cache comes; then the emulator's clock jumps past its expiry
	// while the proxy's does not: 404, fallback, correct answer.
	for i := 0; i < 8 && len(live()) == 0; i++ {
		ask()
	}
	if len(live()) != 1 {
		t.Fatalf("no new cache after the fallback")
	}
	on.emuClock.Advance(time.Hour)
	ask()
	if fallbacks() != 2 {
		t.Fatalf("fallbacks after the cache expired upstream = %v, want 2", fallbacks())
	}
	rec = testutil.GenerateRequests(on.emu.Received())
	if r := rec[len(rec)-2]; r.Status != 404 {
		t.Errorf("expired cache answered %d, want 404", r.Status)
	}
}

// TestContextCacheTenants runs the same session for two keys: the second
// never names a cache of the first, and gets caches of its own.
func TestContextCacheTenants(t *testing.T) {
	on := newCCStack(t, true)
	s1, s2 := newCCSession(t, on.proxyURL, "tenant-one-key"), newCCSession(t, on.proxyURL, "tenant-two-key")
	n := 0
	for _, q := range ccQuestions[:6] {
		on.advance(20 * time.Second)
		s1.turn(t, q)
		n++
		on.settled(t, n)
	}
	one := map[string]bool{}
	for _, r := range testutil.GenerateRequests(on.emu.Received()) {
		if r.CachedContent != "" {
			one[r.CachedContent] = true
		}
	}
	if len(one) == 0 {
		t.Fatal("tenant one used no cache")
	}
	for _, q := range ccQuestions[:6] {
		on.advance(20 * time.Second)
		s2.turn(t, q)
		n++
		on.settled(t, n)
	}
	two := emulator.KeyID("tenant-two-key")
	used := 0
	for _, r := range testutil.GenerateRequests(on.emu.Received()) {
		if r.KeyID != two {
			continue
		}
		if one[r.CachedContent] {
			t.Errorf("tenant two sent tenant one's cache %s", r.CachedContent)
		}
		if r.Status != 200 {
			t.Errorf("tenant two got %d: %s", r.Status, r.Error)
		}
		if r.CachedContent != "" {
			used++
		}
	}
	if used == 0 {
		t.Error("tenant two never used a cache of its own")
	}
	if got := counterSum(t, on.reg, "gemini_proxy_context_cache_fallbacks_total", nil); got != 0 {
		t.Errorf("fallbacks = %v, want 0", got)
	}
}
