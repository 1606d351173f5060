package contextcache

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gemini-proxy/gemini-proxy/internal/emulator"
	tu "github.com/gemini-proxy/gemini-proxy/internal/testutil"
	"github.com/gemini-proxy/gemini-proxy/metrics"
)

type nopTransport struct{}

func (nopTransport) RoundTrip(*http.Request) (*http.Response, error) {
	return nil, fmt.Errorf("nop transport")
}

// env is a Manager in front of an emulator, both on one fake clock, with
// the test playing the proxy.
type env struct {
	t   *testing.T
	clk *tu.Clock
	emu *emulator.Server
	url string
	m   *Manager
	mt  *metrics.Metrics
}

var prices = map[string]Price{model: flash}

func newEnv(t *testing.T, opts Options, emuOpts emulator.Options) *env {
	t.Helper()
	e := &env{t: t, clk: tu.NewClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))}
	emuOpts.Now = e.clk.Now
	if emuOpts.ImplicitCacheMinTokens == 0 {
		emuOpts.ImplicitCacheMinTokens = 1 << 30 // off unless a test wants it
	}
	var srv *httptest.Server
	e.emu, srv = tu.StartEmulator(t, emuOpts)
	e.url = srv.URL
	e.mt = metrics.New(prometheus.NewRegistry())
	opts.Transport = http.DefaultTransport
	opts.Now = e.clk.Now
	opts.Metrics = e.mt
	if opts.Prices == nil {
		opts.Prices = prices
	}
	m, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	e.m = m
	return e
}

// call builds the Call a proxy would for key.
func (e *env) call(key string, body []byte) Call {
	col, _ := url.Parse(e.url + "/v1beta/cachedContents")
	h := http.Header{}
	h.Set("X-Goog-Api-Key", key)
	return Call{Scope: "scope-" + key, Model: model, ModelID: model, Collection: col, Header: h, Body: body}
}

// result is what one request did.
type result struct {
	cache    string // the cache the sent body named
	fallback bool
	usage    Usage
	sent     []byte
}

// send plays the proxy for one request: Plan, send, fall back when the
// upstream rejects the cache, Settle, then wait for the cache calls.
func (e *env) send(c Call) result {
	e.t.Helper()
	u := e.m.Plan(c)
	if u == nil {
		e.t.Fatalf("Plan returned nil for %s", c.Body)
	}
	var r result
	body := c.Body
	if b := u.Body(); b != nil {
		body, r.cache = b, u.Cache()
	}
	status, usage, raw := e.generate(c, body)
	if r.cache != "" && (status == 403 || status == 404) {
		e.m.Fallback(u, Gone)
		r.fallback = true
		status, usage, raw = e.generate(c, c.Body)
	}
	if status != 200 {
		e.t.Fatalf("generate: %d %s", status, raw)
	}
	r.usage, r.sent = usage, body
	e.m.Settle(u, usage, true)
	e.m.Wait()
	return r
}

func (e *env) generate(c Call, body []byte) (int, Usage, []byte) {
	e.t.Helper()
	req, _ := http.NewRequestWithContext(e.t.Context(), "POST", e.url+"/v1beta/models/"+model+":generateContent", bytes.NewReader(body))
	req.Header.Set("X-Goog-Api-Key", c.Header.Get("X-Goog-Api-Key"))
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	var out struct {
		UsageMetadata struct {
			PromptTokenCount        int64
			CachedContentTokenCount int64
		}
	}
	json.Unmarshal(raw, &out)
	return res.StatusCode, Usage{PromptTokens: out.UsageMetadata.PromptTokenCount, CachedTokens: out.UsageMetadata.CachedContentTokenCount}, raw
}

// caches lists the emulator's live caches of key.
func (e *env) caches(key string) []string {
	e.t.Helper()
	req, _ := http.NewRequestWithContext(e.t.Context(), "GET", e.url+"/v1beta/cachedContents", nil)
	req.Header.Set("X-Goog-Api-Key", key)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	var out struct {
		CachedContents []struct{ Name, ExpireTime string }
	}
	json.NewDecoder(res.Body).Decode(&out)
	var names []string
	for _, c := range out.CachedContents {
		names = append(names, c.Name+"@"+c.ExpireTime)
	}
	return names
}

func (e *env) ops(op, result string) float64 {
	return testutil.ToFloat64(e.mt.ContextCacheOperations.WithLabelValues(op, result))
}

// doc is a large document (about 3,500 emulator tokens).
var doc = strings.Repeat("The quick brown fox jumps over the lazy dog while the cache keeps the prefix stable. ", 200)

// conversation returns the body of turn n (0-based) of a session that
// sends doc in its first turn and keeps its history.
func conversation(n int, doc string) []byte {
	var cs []string
	for i := 0; i <= n; i++ {
		q := fmt.Sprintf("question %d", i)
		if i == 0 {
			q = doc + "\n" + q
		}
		cs = append(cs, fmt.Sprintf(`{"role":"user","parts":[{"text":%q}]}`, q))
		if i < n {
			cs = append(cs, fmt.Sprintf(`{"role":"model","parts":[{"text":"answer %d"}]}`, i))
		}
	}
	return []byte(`{"systemInstruction":{"parts":[{"text":"You answer questions about the document."}]},"tools":[{"functionDeclarations":[{"name":"lookup","description":"look a word up"}]}],"contents":[` + strings.Join(cs, ",") + `],"generationConfig":{"temperature":0}}`)
}

// TestManagerCreatesAndUses runs a session: once the document's prefix has
// recurred enough for the price model, a cache is made in the background
// and every later request names it without the moved fields.
func TestManagerCreatesAndUses(t *testing.T) {
	e := newEnv(t, Options{}, emulator.Options{})
	var firstCached = -1
	for turn := range 8 {
		r := e.send(e.call("k1", conversation(turn, doc)))
		if r.cache == "" {
			if firstCached >= 0 {
				t.Fatalf("turn %d went out in full after the cache was used", turn)
			}
			continue
		}
		if firstCached < 0 {
			firstCached = turn
		}
		var m map[string]json.RawMessage
		json.Unmarshal(r.sent, &m)
		for _, f := range []string{"systemInstruction", "tools", "toolConfig"} {
			if _, ok := m[f]; ok {
				t.Errorf("turn %d: body naming %s still has %s", turn, r.cache, f)
			}
		}
		if r.usage.CachedTokens < 3000 {
			t.Errorf("turn %d: cached tokens %d, want the document's", turn, r.usage.CachedTokens)
		}
	}
	// Sightings of the document prefix: turns 1, 2, 3 (turn 0 has no
	// prefix with a content left after it). Three sightings a few seconds
	// apart predict two reuses, above 2.5 Flash's break-even of 1.42.
	if firstCached != 4 {
		t.Errorf("first request naming a cache: turn %d, want 4", firstCached)
	}
	if got := e.ops(metrics.CacheOpCreate, metrics.CacheResultOK); got != 1 {
		t.Errorf("creates = %v, want 1", got)
	}
	if got := testutil.ToFloat64(e.mt.ContextCacheLive.WithLabelValues(model)); got != 1 {
		t.Errorf("live = %v, want 1", got)
	}
	if got := testutil.ToFloat64(e.mt.ContextCacheCachedTokens.WithLabelValues(model)); got < 4*3000 {
		t.Errorf("cached tokens = %v", got)
	}
	if got := testutil.ToFloat64(e.mt.ContextCacheCostDollars.WithLabelValues(model, metrics.CacheCostCreation)); got <= 0 {
		t.Errorf("creation cost = %v", got)
	}
}

// TestManagerNeverCaches lists what must not be cached.
func TestManagerNeverCaches(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    Options
		emuOpts emulator.Options
		doc     string
	}{
		{"no storage price", Options{Prices: map[string]Price{model: {Input: 0.30, CachedInput: 0.03}}}, emulator.Options{}, doc},
		{"unpriced model", Options{Prices: map[string]Price{"gemini-2.5-pro": flash}}, emulator.Options{}, doc},
		{"below the minimum", Options{}, emulator.Options{}, strings.Repeat("tiny ", 50)},
		{"model minimum configured high", Options{MinTokens: map[string]int{model: 100000}}, emulator.Options{}, doc},
		{"implicit caching already hits", Options{}, emulator.Options{ImplicitCacheMinTokens: 1024}, doc},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.opts, tc.emuOpts)
			for turn := range 8 {
				e.clk.Advance(10 * time.Second)
				if r := e.send(e.call("k1", conversation(turn, tc.doc))); r.cache != "" {
					t.Fatalf("turn %d named cache %s", turn, r.cache)
				}
			}
			if n := e.ops(metrics.CacheOpCreate, metrics.CacheResultOK) + e.ops(metrics.CacheOpCreate, metrics.CacheResultError); n != 0 {
				t.Errorf("%v create calls", n)
			}
		})
	}
}

// TestManagerRenewAndExpire: a cache in use is renewed once less than half
// its TTL is left; unused, it expires and is no longer named.
func TestManagerRenewAndExpire(t *testing.T) {
	e := newEnv(t, Options{TTL: 5 * time.Minute}, emulator.Options{})
	turn := 0
	for ; turn < 5; turn++ {
		e.clk.Advance(30 * time.Second)
		e.send(e.call("k1", conversation(turn, doc)))
	}
	before := e.caches("k1")
	if len(before) != 1 {
		t.Fatalf("emulator caches = %v, want 1", before)
	}
	// Used every 30 s for 3 minutes: less than half the TTL left, and the
	// use rate pays for storage, so the next use renews it.
	for range 6 {
		e.clk.Advance(30 * time.Second)
		if r := e.send(e.call("k1", conversation(turn, doc))); r.cache == "" {
			t.Fatalf("turn %d did not use the cache", turn)
		}
		turn++
	}
	if got := e.ops(metrics.CacheOpRenew, metrics.CacheResultOK); got < 1 {
		t.Fatalf("renewals = %v, want at least 1", got)
	}
	after := e.caches("k1")
	if len(after) != 1 || after[0] == before[0] {
		t.Errorf("emulator cache after renewal %v, before %v: expireTime unchanged", after, before)
	}
	// Idle past the TTL: the cache is gone and the request goes out in full
	// without a failed attempt.
	e.clk.Advance(6 * time.Minute)
	r := e.send(e.call("k1", conversation(turn, doc)))
	if r.cache != "" || r.fallback {
		t.Errorf("after expiry: cache %q fallback %v, want a full request", r.cache, r.fallback)
	}
	if got := testutil.ToFloat64(e.mt.ContextCacheLive.WithLabelValues(model)); got != 0 {
		t.Errorf("live = %v after expiry", got)
	}
	if got := testutil.ToFloat64(e.mt.ContextCacheStorageTokenSeconds.WithLabelValues(model)); got <= 0 {
		t.Errorf("storage token-seconds = %v after expiry", got)
	}
}

// TestManagerDeletes: a cache that stopped being used is deleted when a
// request of its scope shows that its use rate no longer pays for storage.
func TestManagerDeletes(t *testing.T) {
	e := newEnv(t, Options{TTL: time.Hour}, emulator.Options{})
	// A one-hour cache needs about five expected reuses: seven quick turns.
	for turn := range 8 {
		e.clk.Advance(10 * time.Second)
		e.send(e.call("k1", conversation(turn, doc)))
	}
	if n := len(e.caches("k1")); n != 1 {
		t.Fatalf("caches = %d, want 1", n)
	}
	// Another conversation of the same caller, on another document, 20
	// minutes later: the first cache was last used 20 minutes ago, at most
	// 3 uses an hour, below 2.5 Flash's break-even of 3.7.
	e.clk.Advance(20 * time.Minute)
	other := strings.ReplaceAll(doc, "fox", "cat")
	e.send(e.call("k1", conversation(0, other)))
	if got := e.ops(metrics.CacheOpDelete, metrics.CacheResultOK); got != 1 {
		t.Errorf("deletes = %v, want 1", got)
	}
	if n := len(e.caches("k1")); n != 0 {
		t.Errorf("emulator still holds %d caches", n)
	}
	if r := e.send(e.call("k1", conversation(8, doc))); r.cache != "" || r.fallback {
		t.Errorf("deleted cache still named: %q fallback %v", r.cache, r.fallback)
	}
}

// TestManagerFallback: a cache deleted behind the Manager's back is
// rejected by the upstream; the request is resent in full and the cache
// forgotten.
func TestManagerFallback(t *testing.T) {
	e := newEnv(t, Options{}, emulator.Options{})
	turn := 0
	for ; turn < 5; turn++ {
		e.send(e.call("k1", conversation(turn, doc)))
	}
	names := e.caches("k1")
	if len(names) != 1 {
		t.Fatalf("caches = %v", names)
	}
	name, _, _ := strings.Cut(names[0], "@")
	req, _ := http.NewRequestWithContext(t.Context(), "DELETE", e.url+"/v1beta/"+name, nil)
	req.Header.Set("X-Goog-Api-Key", "k1")
	if res, err := http.DefaultClient.Do(req); err != nil || res.StatusCode != 200 {
		t.Fatalf("DELETE: %v %v", res, err)
	}
	r := e.send(e.call("k1", conversation(turn, doc)))
	if !r.fallback {
		t.Fatalf("no fallback after the cache was deleted upstream")
	}
	if got := testutil.ToFloat64(e.mt.ContextCacheFallbacks.WithLabelValues(model)); got != 1 {
		t.Errorf("fallbacks = %v", got)
	}
	if u := e.m.Plan(e.call("k1", conversation(turn+1, doc))); u.Cache() == name {
		t.Errorf("forgotten cache %s named again", name)
	}
}

// TestManagerTenantIsolation: the same body from another scope never names
// the first scope's cache, and the emulator shows each cache under the key
// that made it.
func TestManagerTenantIsolation(t *testing.T) {
	e := newEnv(t, Options{}, emulator.Options{})
	for turn := range 6 {
		e.send(e.call("k1", conversation(turn, doc)))
	}
	if len(e.caches("k1")) != 1 {
		t.Fatal("no cache for k1")
	}
	for turn := range 4 {
		if r := e.send(e.call("k2", conversation(turn, doc))); r.cache != "" {
			t.Fatalf("k2 turn %d named %s", turn, r.cache)
		}
	}
	// k2 got its own cache from its own sightings.
	if n := len(e.caches("k2")); n != 1 {
		t.Errorf("k2 has %d caches after 4 turns, want its own", n)
	}
	r := e.send(e.call("k2", conversation(4, doc)))
	if r.cache == "" || len(e.caches("k2")) != 1 {
		t.Errorf("k2 turn 4: cache %q, k2 caches %v", r.cache, e.caches("k2"))
	}
	k1, _, _ := strings.Cut(e.caches("k1")[0], "@")
	if r.cache == k1 {
		t.Errorf("k2 named k1's cache %s", k1)
	}
}

// TestManagerBounded checks the memory bound over scopes and the bound on
// cache calls in flight.
func TestManagerBounded(t *testing.T) {
	e := newEnv(t, Options{MaxPrefixes: 40}, emulator.Options{})
	for i := range 30 {
		e.send(e.call(fmt.Sprintf("k%d", i), conversation(3, doc)))
		if e.m.prefixes > 40 || e.m.lru.Len() != len(e.m.scopes) {
			t.Fatalf("after %d scopes: %d prefixes, %d scopes, lru %d", i+1, e.m.prefixes, len(e.m.scopes), e.m.lru.Len())
		}
	}
	if n := len(e.m.scopes); n > 40/3+1 {
		t.Errorf("%d scopes kept for a bound of 40 prefixes at 3 each", n)
	}

	block := make(chan struct{})
	m, _ := New(Options{Transport: nopTransport{}, Workers: 1, Metrics: e.mt})
	if !m.spawn(metrics.CacheOpCreate, func(context.Context) { <-block }) {
		t.Fatal("first call found no worker")
	}
	if m.spawn(metrics.CacheOpCreate, func(context.Context) {}) {
		t.Error("second call ran while the only worker was busy")
	}
	close(block)
	m.Wait()
	if got := e.ops(metrics.CacheOpCreate, metrics.CacheResultDropped); got != 1 {
		t.Errorf("dropped = %v, want 1", got)
	}
}
